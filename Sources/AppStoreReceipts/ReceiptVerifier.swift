public import Foundation
import StorekeeperASN1
public import StorekeeperCrypto

/// What the caller expects of a receipt besides Apple's signature.
public struct ReceiptExpectations: Sendable, Hashable {
    /// The app's bundle identifier, compared byte for byte; nil skips the check.
    public var bundleID: String?
    /// The app version (attribute 3), compared byte for byte; nil skips the check.
    public var bundleVersion: String?
    /// The device identifier bytes (16 of `identifierForVendor`, or a Mac's MAC address); nil skips the
    /// device hash check.
    public var deviceIdentifier: [UInt8]?

    public init(bundleID: String? = nil, bundleVersion: String? = nil, deviceIdentifier: [UInt8]? = nil) {
        self.bundleID = bundleID
        self.bundleVersion = bundleVersion
        self.deviceIdentifier = deviceIdentifier
    }
}

/// The outcome of verifying a receipt: a value, never a crash.
public enum ReceiptVerificationResult: Sendable {
    case valid(Receipt)
    case invalid(ReceiptVerificationFailure)

    /// The decoded receipt, when the bytes parsed (valid or not).
    public var receipt: Receipt? {
        switch self {
        case .valid(let receipt): receipt
        case .invalid(let failure): failure.receipt
        }
    }

    public var isValid: Bool {
        if case .valid = self { return true }
        return false
    }

    public var failure: ReceiptVerificationFailure? {
        if case .invalid(let failure) = self { return failure }
        return nil
    }
}

/// Why a receipt is not valid, with the receipt itself when it could be decoded.
public struct ReceiptVerificationFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// Reason codes, in the order the checks run (the first failure wins).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// Not a receipt, or a receipt that does not follow the format.
        public static let malformed = Code("malformed")
        /// The signature over the payload does not verify with the signer's certificate.
        public static let signatureInvalid = Code("signature_invalid")
        /// No acceptable path from the signer to a trusted root.
        public static let untrustedChain = Code("untrusted_chain")
        /// A certificate of the path is not valid at the receipt's creation date.
        public static let certificateNotValidAtDate = Code("certificate_not_valid_at_date")
        public static let bundleIDMismatch = Code("bundle_id_mismatch")
        public static let bundleVersionMismatch = Code("bundle_version_mismatch")
        public static let deviceHashMismatch = Code("device_hash_mismatch")
        /// A Volume Purchase Program receipt whose expiration date has passed.
        public static let receiptExpired = Code("receipt_expired")

        public var description: String { rawValue }
    }

    public let code: Code
    public let message: String
    public let receipt: Receipt?

    public init(code: Code, message: String, receipt: Receipt?) {
        self.code = code
        self.message = message
        self.receipt = receipt
    }

    public var description: String { "\(code): \(message)" }
}

/// Verifies unified App Store receipts the way Apple's "Validating receipts on the device" describes:
/// signature and chain at the creation date, bundle id and version, device hash, and licence expiry.
///
/// One verifier is meant to live as long as its trusted roots: it caches each certificate path's verdict
/// by the certificates' bytes, so a stream of receipts costs one digest and one RSA verification each.
public struct ReceiptVerifier: Sendable {
    public let limits: ReceiptLimits
    private let chains: ChainVerifier

    public init(trustedRoots: [Certificate], limits: ReceiptLimits = .default) {
        self.limits = limits
        self.chains = ChainVerifier(
            trustedRoots: trustedRoots,
            policy: .appleThreeLevel(
                leafMarker: AppleOID.receiptSigningLeaf, intermediateMarker: AppleOID.wwdrIntermediate))
    }

    /// Verifies DER bytes (see ``Receipt/bytes(fromDERorBase64:)`` for text input) at `now`.
    public func verify(_ bytes: [UInt8], expecting expectations: ReceiptExpectations, now: Date)
        -> ReceiptVerificationResult
    {
        // 1. Parse the envelope and the payload.
        let envelope: SignedDataEnvelope
        let receipt: Receipt
        do {
            (envelope, receipt) = try Receipt.parse(bytes, limits: limits)
        } catch {
            return fail(.malformed, error.reason, nil)
        }

        // 2. Signature over the payload by the certificate the SignerInfo names.
        let signer = envelope.signer
        guard let signerIndex = envelope.certificates.firstIndex(where: { Self.matches(signer, $0) }) else {
            return fail(.signatureInvalid, "no embedded certificate matches the SignerInfo", receipt)
        }
        let others = envelope.certificates.indices.filter { $0 != signerIndex }.map {
            envelope.certificates[$0].encoded
        }
        let evaluation = chains.evaluate(signer: envelope.certificates[signerIndex].encoded, others: others)
        if let problem = checkSignature(signer, content: envelope.content, key: evaluation.signerKey) {
            return fail(.signatureInvalid, problem, receipt)
        }

        // 3. Path to a trusted root, valid at the creation date (attribute 12).
        if case .invalid(let failure) = evaluation.result(at: receipt.creationDate) {
            let code: ReceiptVerificationFailure.Code =
                failure.code == .notValidAtTime ? .certificateNotValidAtDate : .untrustedChain
            return fail(code, failure.reason, receipt)
        }

        // 4. The app and device.
        if let bundleID = expectations.bundleID, !bundleID.utf8.elementsEqual(receipt.bundleID.utf8) {
            return fail(.bundleIDMismatch, "receipt is for another bundle id", receipt)
        }
        if let version = expectations.bundleVersion, !version.utf8.elementsEqual(receipt.appVersion.utf8) {
            return fail(.bundleVersionMismatch, "receipt is for app version \(receipt.appVersion)", receipt)
        }
        if let device = expectations.deviceIdentifier, receipt.deviceHash(for: device) != receipt.sha1Hash {
            return fail(.deviceHashMismatch, "the device hash does not match this device identifier", receipt)
        }

        // 5. Volume Purchase Program licence expiry, against the current time.
        if let expiry = receipt.expirationDate, expiry <= now {
            return fail(.receiptExpired, "the receipt expired at \(ReceiptDate.rfc3339String(expiry))", receipt)
        }
        return .valid(receipt)
    }

    private func fail(_ code: ReceiptVerificationFailure.Code, _ message: String, _ receipt: Receipt?)
        -> ReceiptVerificationResult
    {
        .invalid(ReceiptVerificationFailure(code: code, message: message, receipt: receipt))
    }

    /// Whether `certificate` is the one the SignerInfo names, by issuer and serial number or (CMS version 3)
    /// by subject key identifier.
    static func matches(_ signer: SignedDataEnvelope.SignerInfo, _ certificate: ASN1Element) -> Bool {
        if let keyIdentifier = signer.subjectKeyIdentifier {
            return subjectKeyIdentifier(ofCertificate: certificate) == keyIdentifier
        }
        guard let issuer = signer.issuer, let serial = signer.serial,
            let candidate = issuerAndSerial(ofCertificate: certificate)
        else { return false }
        return candidate.serial.elementsEqual(serial) && candidate.issuer.elementsEqual(issuer)
    }

    static let sha1 = ASN1ObjectIdentifier([1, 3, 14, 3, 2, 26])
    static let sha256 = ASN1ObjectIdentifier([2, 16, 840, 1, 101, 3, 4, 2, 1])
    static let rsaEncryption = ASN1ObjectIdentifier([1, 2, 840, 113_549, 1, 1, 1])
    static let sha1WithRSA = ASN1ObjectIdentifier([1, 2, 840, 113_549, 1, 1, 5])
    static let sha256WithRSA = ASN1ObjectIdentifier([1, 2, 840, 113_549, 1, 1, 11])
    static let messageDigestAttribute = ASN1ObjectIdentifier([1, 2, 840, 113_549, 1, 9, 4])

    /// Checks the RSA PKCS #1 v1.5 signature; returns why it fails, or nil.
    private func checkSignature(_ signer: SignedDataEnvelope.SignerInfo, content: ArraySlice<UInt8>, key: PublicKey?)
        -> String?
    {
        let digest: DigestAlgorithm
        switch signer.digestAlgorithm {
        case Self.sha1: digest = .sha1
        case Self.sha256: digest = .sha256
        default: return "unsupported digest algorithm \(signer.digestAlgorithm)"
        }
        switch signer.signatureAlgorithm {
        case Self.rsaEncryption: break
        case Self.sha1WithRSA where digest == .sha1: break
        case Self.sha256WithRSA where digest == .sha256: break
        default: return "unsupported signature algorithm \(signer.signatureAlgorithm) with \(digest)"
        }
        guard let key, key.isRSA else { return "the signer's key is not an RSA key" }
        let contentDigest = Digest.hash(digest, content)
        var signedDigest = contentDigest
        if let attributes = signer.signedAttributes {
            // RFC 5652 §5.4: the signature covers the DER SET OF the attributes, and the messageDigest
            // attribute must equal the content's digest.
            guard let messageDigest = Self.messageDigest(in: attributes.element) else {
                return "signed attributes without a messageDigest"
            }
            guard messageDigest == contentDigest else { return "messageDigest does not match the content" }
            signedDigest = Digest.hash(digest, attributes.encodedAsSet)
        }
        return key.verify(signature: signer.signature, digest: signedDigest, algorithm: .rsaPKCS1(digest))
            ? nil : "RSA signature does not verify"
    }

    /// `Attribute ::= SEQUENCE { attrType OID, attrValues SET OF ANY }`; messageDigest's value is an OCTET STRING.
    private static func messageDigest(in attributes: ASN1Element) -> [UInt8]? {
        guard var reader = try? attributes.children() else { return nil }
        var found: [UInt8]?
        while let attribute = try? reader.next() {
            guard var parts = try? attribute.children(),
                let type = try? parts.read(.objectIdentifier).objectIdentifier(), type == messageDigestAttribute
            else { continue }
            guard found == nil, var values = try? parts.read(.set).children(),
                let value = try? values.read(.octetString).octetString(), values.isAtEnd
            else { return nil }
            found = value
        }
        return found
    }
}

extension Receipt {
    /// Decodes a receipt's envelope and payload without verifying anything (for display and tooling).
    ///
    /// - Throws: ``ReceiptError`` when the bytes are not a receipt.
    public init(decoding bytes: [UInt8], limits: ReceiptLimits = .default) throws(ReceiptError) {
        self = try Receipt.parse(bytes, limits: limits).receipt
    }

    static func parse(_ bytes: [UInt8], limits: ReceiptLimits) throws(ReceiptError) -> (
        envelope: SignedDataEnvelope, receipt: Receipt
    ) {
        let envelope: SignedDataEnvelope
        do {
            envelope = try SignedDataEnvelope(bytes, limits: limits)
        } catch let error as ASN1Error {
            throw ReceiptError.make(
                error.code == .tooDeep || error.code == .tooLarge || error.code == .tooMany
                    ? .limitExceeded : .malformedContainer,
                "PKCS #7 envelope: \(error.reason)")
        } catch {
            throw ReceiptError.make(.malformedContainer, "PKCS #7 envelope: \(error)")
        }
        do {
            return (
                envelope, try Receipt(document: envelope.payloadDocument, root: envelope.payloadRoot, limits: limits)
            )
        } catch let error as ASN1Error {
            throw ReceiptError.make(
                error.code == .tooDeep || error.code == .tooLarge || error.code == .tooMany
                    ? .limitExceeded : .malformedPayload,
                error.reason)
        } catch let error as ReceiptError {
            throw error
        } catch {
            throw ReceiptError.make(.malformedPayload, "\(error)")
        }
    }

    /// The DER certificates embedded in a receipt's envelope, the signer (named by the SignerInfo) first.
    public static func embeddedCertificates(in bytes: [UInt8], limits: ReceiptLimits = .default) throws -> [[UInt8]] {
        let envelope: SignedDataEnvelope
        do {
            envelope = try SignedDataEnvelope(bytes, limits: limits)
        } catch let error as ASN1Error {
            throw ReceiptError.make(.malformedContainer, error.reason)
        }
        var certificates = envelope.certificates
        if let signer = certificates.firstIndex(where: { ReceiptVerifier.matches(envelope.signer, $0) }) {
            certificates.insert(certificates.remove(at: signer), at: 0)
        }
        return certificates.map { Array($0.encoded) }
    }

    /// SHA-1( device identifier ‖ opaque value ‖ bundle-id TLV ), the value attribute 5 must hold.
    public func deviceHash(for deviceIdentifier: [UInt8]) -> [UInt8] {
        Digest.sha1(deviceIdentifier + opaqueValue + bundleIDEncoded)
    }

    /// Receipt bytes from a file or request body: DER as is, or base64 text (whitespace allowed).
    public static func bytes(fromDERorBase64 input: [UInt8]) throws -> [UInt8] {
        if input.first == 0x30 { return input }
        let compact = input.filter { !($0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09) }
        guard !compact.isEmpty, let decoded = Data(base64Encoded: Data(compact)) else {
            throw ReceiptError.make(.notAReceipt, "input is neither DER nor base64")
        }
        return Array(decoded)
    }
}
