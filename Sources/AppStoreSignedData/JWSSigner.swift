public import Foundation
public import StorekeeperCrypto
public import StorekeeperJSON

/// Creates ES256 compact JWS (RFC 7515, RFC 7518 §3.4: signature `r‖s`), as the App Store signs StoreKit 2
/// data and as App Store Connect keys sign offer requests.
public enum JWSSigner {
    /// Signs `payload` with `header` (whose `alg` is set to ES256) using a P-256 key.
    public static func sign(payload: JSONObject, header: JSONObject, key: PrivateKey) throws -> String {
        guard key.isEC, key.bits == 256 else {
            throw CryptoError.make(.unsupportedAlgorithm, "ES256 needs a P-256 key")
        }
        var protected = JSONObject()
        protected["alg"] = .string("ES256")
        for member in header.members where member.key != "alg" { protected[member.key] = member.value }
        let signingInput =
            Base64URL.encode(JSONWriter.bytes(.object(protected))) + "."
            + Base64URL.encode(JSONWriter.bytes(.object(payload)))
        let signature = try key.signRawECDSA(Array(signingInput.utf8), digest: .sha256)
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// Signs `payload` the way the App Store does: header `{"alg":"ES256","x5c":[leaf, intermediate, root]}`
    /// with standard-base64 DER certificates.
    public static func sign(payload: JSONObject, key: PrivateKey, chain: [Certificate]) throws -> String {
        let x5c = JSONValue.array(chain.map { .string(Base64URL.standard($0.derEncoded)) })
        return try sign(payload: payload, header: ["x5c": x5c], key: key)
    }
}

/// Signatures an app's server makes for StoreKit offers with an In-App Purchase key (`.p8`, P-256).
public enum OfferSignature {
    /// Promotional offer, V1: ECDSA P-256/SHA-256 over `bundleId ⁣ keyId ⁣ productId ⁣ offerId ⁣
    /// appAccountToken ⁣ nonce ⁣ timestamp` joined by U+2063, DER signature in standard base64.
    public static func promotionalOfferV1(
        bundleID: String, keyID: String, productID: String, offerID: String, appAccountToken: String, nonce: UUID,
        timestamp: Int64, key: PrivateKey
    ) throws -> String {
        let separator = "\u{2063}"
        let payload = [
            bundleID, keyID, productID, offerID, appAccountToken.lowercased(), nonce.uuidString.lowercased(),
            String(timestamp),
        ].joined(separator: separator)
        let signature = try key.sign(Array(payload.utf8), algorithm: .ecdsa(.sha256))
        return Data(signature).base64EncodedString()
    }

    /// Promotional offer, V2: a JWS with `aud` `promotional-offer` (Apple's `PromotionalOfferV2SignatureCreator`).
    public static func promotionalOfferV2(
        keyID: String, issuerID: String, bundleID: String, productID: String, offerID: String,
        transactionID: String?, nonce: UUID, issuedAt: Date, key: PrivateKey
    ) throws -> String {
        var claims = commonClaims(
            issuerID: issuerID, bundleID: bundleID, audience: "promotional-offer", nonce: nonce, issuedAt: issuedAt)
        claims["productId"] = .string(productID)
        claims["offerIdentifier"] = .string(offerID)
        if let transactionID { claims["transactionId"] = .string(transactionID) }
        return try JWSSigner.sign(payload: claims, header: ["kid": .string(keyID), "typ": .string("JWT")], key: key)
    }

    /// Introductory-offer eligibility: a JWS with `aud` `introductory-offer-eligibility`.
    public static func introductoryOfferEligibility(
        keyID: String, issuerID: String, bundleID: String, productID: String, allowIntroductoryOffer: Bool,
        transactionID: String, nonce: UUID, issuedAt: Date, key: PrivateKey
    ) throws -> String {
        var claims = commonClaims(
            issuerID: issuerID, bundleID: bundleID, audience: "introductory-offer-eligibility", nonce: nonce,
            issuedAt: issuedAt)
        claims["productId"] = .string(productID)
        claims["allowIntroductoryOffer"] = .bool(allowIntroductoryOffer)
        claims["transactionId"] = .string(transactionID)
        return try JWSSigner.sign(payload: claims, header: ["kid": .string(keyID), "typ": .string("JWT")], key: key)
    }

    private static func commonClaims(issuerID: String, bundleID: String, audience: String, nonce: UUID, issuedAt: Date)
        -> JSONObject
    {
        [
            "iss": .string(issuerID), "iat": .integer(Int64(issuedAt.timeIntervalSince1970.rounded(.down))),
            "aud": .string(audience), "bid": .string(bundleID), "nonce": .string(nonce.uuidString.lowercased()),
        ]
    }
}

/// Signs many payloads with one key and certificate chain, as the App Store does: the protected header
/// (`{"alg":"ES256","x5c":[…]}`, a few kilobytes) is encoded and hashed once, not for every signature
/// (each signature's SHA-256 goes on from the state after `header.`: ``PrefixDigest``).
public struct JWSChainSigner: Sendable {
    public let key: PrivateKey
    /// The protected header, base64url-encoded: what every JWS this signer makes starts with.
    public let encodedHeader: String
    private let headerBytes: [UInt8]
    /// SHA-256 after `encodedHeader` and its dot.
    private let prefix: PrefixDigest

    public init(key: PrivateKey, chain: [Certificate]) throws {
        guard key.isEC, key.bits == 256 else {
            throw CryptoError.make(.unsupportedAlgorithm, "ES256 needs a P-256 key")
        }
        self.key = key
        let header: JSONObject = [
            "alg": .string("ES256"), "x5c": .array(chain.map { .string(Base64URL.standard($0.derEncoded)) }),
        ]
        encodedHeader = Base64URL.encode(JSONWriter.bytes(.object(header)))
        headerBytes = Array(encodedHeader.utf8)
        prefix = try PrefixDigest(.sha256, prefix: headerBytes + [UInt8(ascii: ".")])
    }

    /// The compact JWS of `payload`, byte for byte what ``JWSSigner/sign(payload:key:chain:)`` makes.
    public func sign(_ payload: JSONObject) throws -> String {
        try sign(payloadBytes: JSONWriter.bytes(.object(payload)))
    }

    /// The compact JWS of a payload already written as JSON (the caller keeps the bytes it signed).
    /// Built as bytes in one array (header, payload, then the signature over the two), made a string once.
    public func sign(payloadBytes: [UInt8]) throws -> String {
        var token: [UInt8] = []
        token.reserveCapacity(headerBytes.count + (payloadBytes.count + 2) / 3 * 4 + 90)
        token += headerBytes
        token.append(UInt8(ascii: "."))
        Base64URL.append(payloadBytes, to: &token)
        let signature = try key.signRawECDSA(
            hashed: try prefix.hash(appending: token[prefix.prefixCount...]), digest: .sha256)
        token.append(UInt8(ascii: "."))
        Base64URL.append(signature, to: &token)
        return String(decoding: token, as: UTF8.self)
    }
}
