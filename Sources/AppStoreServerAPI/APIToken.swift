import AppStoreSignedData
public import Foundation
public import StorekeeperCrypto
import StorekeeperJSON
import Synchronization

/// What an App Store Server API bearer token says (shared/spec/server-api.md §A.2).
public struct APITokenClaims: Sendable, Hashable {
    public var keyID: String
    public var issuerID: String
    public var bundleID: String
    public var issuedAt: Date?
    public var expires: Date
}

/// Apple's bearer tokens: ES256 JWTs signed with an App Store Connect API key (`.p8`).
public enum APIToken {
    public static let audience = "appstoreconnect-v1"
    /// Tokens that expire more than 60 minutes after they were issued are invalid.
    public static let maxLifetime: TimeInterval = 3600
    /// How far the server's clock and the client's may disagree.
    public static let leeway: TimeInterval = 60

    /// A token for one request: `iat` now, `exp` after `lifetime` (Apple's own clients use five minutes), at
    /// most ``maxLifetime`` (Apple refuses a longer one with a bare 401).
    public static func make(
        keyID: String, issuerID: String, bundleID: String, key: PrivateKey, now: Date, lifetime: TimeInterval = 300
    ) throws -> String {
        let lifetime = lifetime.isFinite ? min(max(lifetime, 1), maxLifetime) : maxLifetime
        let issued = Int64(now.timeIntervalSince1970.rounded(.down))
        let claims: JSONObject = [
            "iss": .string(issuerID), "iat": .integer(issued), "exp": .integer(issued + Int64(lifetime)),
            "aud": .string(audience), "bid": .string(bundleID),
        ]
        return try JWSSigner.sign(payload: claims, header: ["kid": .string(keyID), "typ": .string("JWT")], key: key)
    }
}

/// A key the API accepts: its id, issuer, public key and the apps it may act for.
public struct APIKey: Sendable {
    public var keyID: String
    public var issuerID: String
    public var publicKey: PublicKey
    public var bundleIDs: Set<String>

    public init(keyID: String, issuerID: String, publicKey: PublicKey, bundleIDs: Set<String>) {
        self.keyID = keyID
        self.issuerID = issuerID
        self.publicKey = publicKey
        self.bundleIDs = bundleIDs
    }
}

/// Why a bearer token was refused (the API answers 401 with no body; this is for logs and tests).
public struct APITokenRejection: Error, Sendable, Hashable, CustomStringConvertible {
    public let reason: String
    public var description: String { reason }
}

/// Checks bearer tokens as Apple does: ES256 over the key named by `kid`, registered for the app in `bid`,
/// `iss` its issuer, `aud` `appstoreconnect-v1`, not expired, issued no later than now and living at most
/// 60 minutes. A token that passed is remembered until it expires, so a client reusing one pays the
/// signature check once.
public final class APITokenVerifier: Sendable {
    private let key: @Sendable (String) -> APIKey?
    private let cache = Mutex<[String: APITokenClaims]>([:])
    /// Tokens remembered at most.
    public static let cacheLimit = 10_000

    /// `key` finds a registered key by id.
    public init(key: @escaping @Sendable (String) -> APIKey?) { self.key = key }

    /// The claims of a valid `Authorization: Bearer …` header value.
    public func verify(authorization: String?, now: Date) -> Result<APITokenClaims, APITokenRejection> {
        guard let authorization, authorization.utf8.count <= 8_192 else { return .failure(reject("no bearer token")) }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            return .failure(reject("the Authorization header is not a bearer token"))
        }
        return verify(token: String(parts[1]).trimmingCharacters(in: .whitespaces), now: now)
    }

    public func verify(token: String, now: Date) -> Result<APITokenClaims, APITokenRejection> {
        if let cached = cache.withLock({ $0[token] }) {
            guard cached.expires > now else {
                _ = cache.withLock { $0.removeValue(forKey: token) }
                return .failure(reject("the token expired"))
            }
            // The key may have been withdrawn since.
            if let key = key(cached.keyID), key.bundleIDs.contains(cached.bundleID) { return .success(cached) }
        }
        let result = check(token, now: now)
        if case .success(let claims) = result {
            cache.withLock { cache in
                if cache.count >= Self.cacheLimit {
                    cache = cache.filter { $0.value.expires > now }
                    if cache.count >= Self.cacheLimit { cache.removeAll() }
                }
                cache[token] = claims
            }
        }
        return result
    }

    /// Forgets every remembered token (benchmarks measure the uncached check with it).
    public func forgetTokens() { cache.withLock { $0.removeAll() } }

    private func check(_ token: String, now: Date) -> Result<APITokenClaims, APITokenRejection> {
        guard let jws = try? CompactJWS(token) else { return .failure(reject("the token is not a compact JWS")) }
        guard jws.header["alg"]?.stringValue == "ES256" else { return .failure(reject("alg must be ES256")) }
        guard let keyID = jws.header["kid"]?.stringValue, let key = key(keyID) else {
            return .failure(reject("kid names no registered key"))
        }
        guard key.publicKey.verify(rawECDSASignature: jws.signature, message: jws.signingInput, digest: .sha256)
        else { return .failure(reject("the signature does not verify with the key named by kid")) }
        let claims = jws.payload
        guard claims["aud"]?.stringValue == APIToken.audience else {
            return .failure(reject("aud must be \(APIToken.audience)"))
        }
        guard let issuer = claims["iss"]?.stringValue, issuer == key.issuerID else {
            return .failure(reject("iss is not the key's issuer"))
        }
        guard let bundleID = claims["bid"]?.stringValue, key.bundleIDs.contains(bundleID) else {
            return .failure(reject("bid names no app the key is registered for"))
        }
        guard let exp = claims["exp"]?.doubleValue else { return .failure(reject("exp is required")) }
        let expires = Date(timeIntervalSince1970: exp)
        guard expires > now else { return .failure(reject("the token expired")) }
        var issued: Date?
        if let iat = claims["iat"] {
            guard let seconds = iat.doubleValue else { return .failure(reject("iat must be a number")) }
            issued = Date(timeIntervalSince1970: seconds)
        }
        // Without iat (Apple's Python client sends none) the lifetime counts from now.
        let start = issued ?? now
        guard start <= now.addingTimeInterval(APIToken.leeway) else {
            return .failure(reject("iat is in the future"))
        }
        guard expires.timeIntervalSince(start) <= APIToken.maxLifetime + (issued == nil ? APIToken.leeway : 0)
        else { return .failure(reject("the token lives longer than 60 minutes")) }
        return .success(
            APITokenClaims(keyID: keyID, issuerID: issuer, bundleID: bundleID, issuedAt: issued, expires: expires))
    }

    private func reject(_ reason: String) -> APITokenRejection { APITokenRejection(reason: reason) }
}
