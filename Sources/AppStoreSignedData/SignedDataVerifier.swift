public import Foundation
import StoreModel
public import StorekeeperCrypto
public import StorekeeperJSON
import Synchronization

/// A verified (or rejected) JWS: the status, the detected type and what could be decoded.
public struct SignedDataResult: Sendable {
    public var status: VerificationStatus
    public var type: SignedDataType?
    /// The header and payload when the JWS was well-formed (present for every status but `INVALID_JWT_FORMAT`).
    public var header: JSONObject?
    public var payload: JSONObject?
    /// The payload's bytes as signed, when the JWS was well-formed (a caller that keeps the token need not
    /// decode it again).
    public var payloadBytes: [UInt8]?
    /// Why the status is not OK, for people (never contains key material).
    public var reason: String?
    /// For notifications: the verification of the nested `signedTransactionInfo`, `signedRenewalInfo` and
    /// `signedAppTransactionInfo`, by field name.
    public var nested: [String: SignedDataResult] = [:]
    /// The validated certificate path (leaf, intermediate, root) whose OCSP check is still to be made.
    var pendingOCSP: [Certificate]?

    public var isOK: Bool { status == .ok }

    /// The fields of a notification's `data` (or `appData`) that hold signed data, with the name a decoded
    /// view gives each and its type.
    static let nestedFields: [(signed: String, decoded: String, type: SignedDataType)] = [
        ("signedTransactionInfo", "transactionInfo", .transaction),
        ("signedRenewalInfo", "renewalInfo", .renewalInfo),
        ("signedAppTransactionInfo", "appTransactionInfo", .appTransaction),
    ]

    /// A notification that verified, as values: its payload and the nested signed data that verified too
    /// (a nested token that did not is nil here, its result in `nested`).
    public var notification: VerifiedNotification? {
        guard isOK, type == .notification, let payload else { return nil }
        func verified(_ field: String) -> JSONObject? {
            guard let nested = nested[field], nested.isOK else { return nil }
            return nested.payload
        }
        return VerifiedNotification(
            payload: NotificationPayload(json: payload),
            transaction: verified("signedTransactionInfo").map(JWSTransaction.init(json:)),
            renewalInfo: verified("signedRenewalInfo").map(JWSRenewalInfo.init(json:)),
            appTransaction: verified("signedAppTransactionInfo").map(AppTransaction.init(json:)))
    }

    /// For people reading it (`storekeeper jws verify`): the payload with each nested token that verified
    /// decoded beside it, as `transactionInfo`, `renewalInfo` and `appTransactionInfo`. Apple's payload
    /// itself is ``payload``.
    public var decodedPayload: JSONObject? {
        guard var payload else { return nil }
        let container = payload["data"] != nil ? "data" : "appData"
        guard var data = payload[container]?.objectValue else { return payload }
        for field in Self.nestedFields {
            if let nested = nested[field.signed], nested.isOK, let decoded = nested.payload {
                data[field.decoded] = .object(decoded)
            }
        }
        payload[container] = .object(data)
        return payload
    }
}

/// A verified App Store Server Notification V2: its payload and its nested signed data, decoded.
public struct VerifiedNotification: Sendable, Hashable {
    public var payload: NotificationPayload
    public var transaction: JWSTransaction?
    public var renewalInfo: JWSRenewalInfo?
    public var appTransaction: AppTransaction?

    public init(
        payload: NotificationPayload, transaction: JWSTransaction? = nil, renewalInfo: JWSRenewalInfo? = nil,
        appTransaction: AppTransaction? = nil
    ) {
        self.payload = payload
        self.transaction = transaction
        self.renewalInfo = renewalInfo
        self.appTransaction = appTransaction
    }
}

/// Verifies StoreKit 2 signed data (shared/spec/signed-data.md): ES256 only; an `x5c` chain of exactly three
/// certificates whose leaf and intermediate carry Apple's markers and which ends in one of the caller's roots,
/// valid at the payload's `signedDate` (app transactions: `receiptCreationDate`); then per-type checks of
/// bundle id, app Apple ID (Production) and environment.
///
/// Xcode-signed data (`kid` `Apple_Xcode_Key`, one self-signed certificate) verifies only when that exact
/// certificate is one of the trusted roots and its signature checks out — never unverified.
///
/// Chain verdicts are cached by certificate bytes, so each JWS costs one ECDSA verification.
public struct SignedDataVerifier: Sendable {
    public struct Configuration: Sendable {
        public var trustedRoots: [Certificate]
        /// Expected bundle id; nil skips the check.
        public var bundleID: String?
        /// Expected app Apple ID; checked in Production only (where Apple's libraries require it).
        public var appAppleID: Int64?
        /// Expected environment (`Production`, `Sandbox`, `Xcode`, `LocalTesting`); nil skips the check.
        public var environment: String?
        /// Online checks: OCSP for leaf and intermediate, and validation at `now` instead of `signedDate`.
        public var onlineChecks: Bool
        /// OpenSSL's strict RFC 5280 checks (authority and subject key identifiers, critical basic
        /// constraints…), on by default as in Apple's Python library. Apple's own test chain lacks key
        /// identifiers; its tests turn these checks off, and so must a caller verifying that chain.
        public var strictChecks: Bool

        public init(
            trustedRoots: [Certificate], bundleID: String? = nil, appAppleID: Int64? = nil, environment: String? = nil,
            onlineChecks: Bool = false, strictChecks: Bool = true
        ) {
            self.strictChecks = strictChecks
            self.trustedRoots = trustedRoots
            self.bundleID = bundleID
            self.appAppleID = appAppleID
            self.environment = environment
            self.onlineChecks = onlineChecks
        }
    }

    /// A configuration Apple's libraries refuse as well.
    public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    public let configuration: Configuration
    private let chains: ChainVerifier
    /// The last well-formed token's header and its decoded x5c certificates, reused when the next token's
    /// header segment is byte-identical.
    private let lastHeader = LastHeader()
    private let ocsp: OCSPChecker?

    public init(_ configuration: Configuration, ocspTransport: (any OCSPTransport)? = nil) throws(ConfigurationError) {
        if configuration.environment == Environment.production.rawValue && configuration.appAppleID == nil {
            throw ConfigurationError(description: "an app Apple ID is required when the environment is Production")
        }
        self.configuration = configuration
        var policy = ChainPolicy.appleSignedData
        policy.strict = configuration.strictChecks
        self.chains = ChainVerifier(trustedRoots: configuration.trustedRoots, policy: policy)
        self.ocsp =
            configuration.onlineChecks ? OCSPChecker(transport: ocspTransport ?? URLSessionOCSPTransport()) : nil
    }

    /// Verifies `token` as `type` (nil: detect it from the payload) at `now`, without going online. With
    /// `onlineChecks` configured, a token that passes every other check is
    /// `RETRYABLE_VERIFICATION_FAILURE` here: call ``verifyOnline(_:as:now:)`` instead, which awaits the
    /// OCSP responders; this method never blocks.
    public func verify(_ token: String, as type: SignedDataType? = nil, now: Date) -> SignedDataResult {
        var result = verifyOffline(token, as: type, now: now)
        func refuse(_ result: inout SignedDataResult) {
            if result.isOK, result.pendingOCSP != nil {
                result.status = .retryableVerificationFailure
                result.reason = "online checks are configured: use verifyOnline, which awaits the OCSP responders"
            }
            result.pendingOCSP = nil
        }
        refuse(&result)
        for key in result.nested.keys { refuse(&result.nested[key]!) }
        return result
    }

    /// Verifies `token` like ``verify(_:as:now:)`` and then, with `onlineChecks` configured, asks the OCSP
    /// responders of the leaf and the intermediate (answers cached for 15 minutes): `REVOKED`-style
    /// answers are `VERIFICATION_FAILURE`, an unreachable responder `RETRYABLE_VERIFICATION_FAILURE`.
    public func verifyOnline(_ token: String, as type: SignedDataType? = nil, now: Date) async -> SignedDataResult {
        var result = verifyOffline(token, as: type, now: now)
        func check(_ result: inout SignedDataResult) async {
            guard let path = result.pendingOCSP else { return }
            result.pendingOCSP = nil
            guard result.isOK, let ocsp else { return }
            switch await ocsp.check(path: path, now: now) {
            case .good: break
            case .unreachable(let reason):
                result.status = .retryableVerificationFailure
                result.reason = reason
            case .failed(let reason):
                result.status = .verificationFailure
                result.reason = reason
            }
        }
        await check(&result)
        for key in result.nested.keys.sorted() { await check(&result.nested[key]!) }
        return result
    }

    /// Every check but OCSP, which is left in `pendingOCSP` when configured.
    func verifyOffline(_ token: String, as type: SignedDataType? = nil, now: Date) -> SignedDataResult {
        let jws: CompactJWS
        let cached = lastHeader.value.withLock { $0 }
        do {
            jws = try CompactJWS(token, reusing: cached?.jws)
        } catch {
            return SignedDataResult(status: .invalidJWTFormat, reason: error.reason)
        }
        let kind = type ?? SignedDataType.detect(jws.payload)
        var result = SignedDataResult(status: .ok, type: kind, header: jws.header, payload: jws.payload)
        result.payloadBytes = jws.payloadBytes
        guard let chain = jws.certificateChain, !chain.isEmpty, chain.count == jws.header["x5c"]?.arrayValue?.count
        else {
            result.status = .invalidJWTFormat
            result.reason = "the header has no x5c certificate chain"
            return result
        }
        var certificates: [[UInt8]?]
        if let cached, cached.jws.hasHeader(jws.encodedHeader) {
            certificates = cached.certificates
        } else {
            certificates = chain.prefix(2).map { Data(base64Encoded: $0).map { Array($0) } }
            lastHeader.value.withLock { $0 = (jws, certificates) }
        }
        var validatedPath: [Certificate]?
        if let (status, reason) = verifySignature(
            jws, chain: chain, certificates: certificates, type: kind, now: now, path: &validatedPath)
        {
            result.status = status
            result.reason = reason
            return result
        }
        if ocsp != nil { result.pendingOCSP = validatedPath }
        if let (status, reason) = checkClaims(jws.payload, type: kind) {
            result.status = status
            result.reason = reason
            return result
        }
        if kind == .notification { result = verifyNested(result, now: now) }
        return result
    }

    // MARK: - Signature and chain

    /// `certificates` are the first two of `chain`, base64-decoded (nil where that fails).
    private func verifySignature(
        _ jws: CompactJWS, chain: [String], certificates: [[UInt8]?], type: SignedDataType, now: Date,
        path validatedPath: inout [Certificate]?
    ) -> (VerificationStatus, String)? {
        guard jws.header["alg"]?.stringValue == "ES256" else {
            return (.verificationFailure, "the algorithm is not ES256")
        }
        let signedDate = Self.date(jws.payload["signedDate"]) ?? Self.date(jws.payload["receiptCreationDate"])
        let validationTime = configuration.onlineChecks ? now : (signedDate ?? now)

        // Xcode: one self-signed certificate the caller trusts, byte for byte.
        if chain.count == 1, jws.header["kid"]?.stringValue == "Apple_Xcode_Key", let der = certificates[0],
            let pinned = configuration.trustedRoots.first(where: { $0.derEncoded == der }),
            configuration.environment == nil || configuration.environment == "Xcode"
        {
            guard pinned.isValid(at: signedDate ?? now) else {
                return (.verificationFailure, "the Xcode certificate is not valid at the signing date")
            }
            guard let key = try? pinned.publicKey, key.isP256,
                key.verify(rawECDSASignature: jws.signature, message: jws.signingInput, digest: .sha256)
            else { return (.verificationFailure, "the ES256 signature does not verify") }
            // Xcode's certificate is the same on every Mac (its key is anyone's): what it signs is Xcode's
            // StoreKit Testing, whatever environment the payload claims.
            let claimed = Self.environmentClaim(jws.payload, type: type)
            guard claimed == Environment.xcode.rawValue else {
                return (
                    .invalidEnvironment,
                    "signed by Xcode's certificate but the environment is \(claimed.map { "'\($0)'" } ?? "absent")"
                )
            }
            return nil
        }

        guard !configuration.trustedRoots.isEmpty else { return (.invalidCertificate, "no trusted root is configured") }
        guard chain.count == 3 else { return (.invalidChainLength, "x5c holds \(chain.count) certificates, not 3") }
        guard let leaf = certificates[0], let intermediate = certificates[1] else {
            return (.invalidCertificate, "an x5c certificate is not base64")
        }
        // As Apple's libraries do, the third certificate is ignored: the root comes from configuration.
        let evaluation = chains.evaluate(signer: leaf, others: [intermediate])
        switch evaluation.result(at: validationTime) {
        case .invalid(let failure) where failure.code == .invalidCertificate:
            return (.invalidCertificate, failure.reason)
        case .invalid(let failure):
            return (.verificationFailure, failure.reason)
        case .valid(let path):
            validatedPath = path.certificates
        }
        guard let key = evaluation.signerKey, key.isP256,
            key.verify(rawECDSASignature: jws.signature, message: jws.signingInput, digest: .sha256)
        else { return (.verificationFailure, "the ES256 signature does not verify") }
        return nil
    }

    // MARK: - Per-type checks

    private func checkClaims(_ payload: JSONObject, type: SignedDataType) -> (VerificationStatus, String)? {
        let expected = configuration
        /// Apple's app Apple ID is checked in production (sandbox data may lack it): with Production
        /// configured, or, with no environment configured (a verifier for every environment, as the purchase
        /// server's), when an app Apple ID is configured and the payload says Production.
        func checksAppleID(payloadEnvironment: String?) -> Bool {
            let production = Environment.production.rawValue
            guard let configured = expected.environment else {
                return expected.appAppleID != nil && payloadEnvironment == production
            }
            return configured == production
        }
        func appIdentifier(bundleID: String?, appAppleID: Int64?, checkAppleID: Bool, environment: String? = nil)
            -> (VerificationStatus, String)?
        {
            if let wanted = expected.bundleID, bundleID != wanted {
                return (.invalidAppIdentifier, "the bundle id is \(bundleID.map { "'\($0)'" } ?? "absent")")
            }
            if checkAppleID && checksAppleID(payloadEnvironment: environment) && appAppleID != expected.appAppleID {
                return (.invalidAppIdentifier, "the app Apple ID differs")
            }
            return nil
        }
        func environment(_ found: String?) -> (VerificationStatus, String)? {
            guard let wanted = expected.environment, found != wanted else { return nil }
            return (.invalidEnvironment, "the environment is \(found.map { "'\($0)'" } ?? "absent"), not '\(wanted)'")
        }
        switch type {
        case .transaction:
            return appIdentifier(bundleID: payload["bundleId"]?.stringValue, appAppleID: nil, checkAppleID: false)
                ?? environment(payload["environment"]?.stringValue)
        case .renewalInfo:
            return environment(payload["environment"]?.stringValue)
        case .appTransaction:
            return appIdentifier(
                bundleID: payload["bundleId"]?.stringValue, appAppleID: payload["appAppleId"]?.int64Value,
                checkAppleID: true, environment: payload["receiptType"]?.stringValue)
                ?? environment(payload["receiptType"]?.stringValue)
        case .notification:
            let notification = NotificationPayload(json: payload)
            let app = notification.appMetadata
            return appIdentifier(
                bundleID: app.bundleID, appAppleID: app.appAppleID, checkAppleID: true, environment: app.environment)
                ?? environment(app.environment)
        case .realtimeRequest:
            // No bundle id: the app Apple ID (in production) and the environment.
            if checksAppleID(payloadEnvironment: payload["environment"]?.stringValue),
                payload["appAppleId"]?.int64Value != expected.appAppleID
            {
                return (.invalidAppIdentifier, "the app Apple ID differs")
            }
            return environment(payload["environment"]?.stringValue)
        }
    }

    /// The environment `payload` says it is from, where its type keeps it.
    static func environmentClaim(_ payload: JSONObject, type: SignedDataType) -> String? {
        switch type {
        case .transaction, .renewalInfo, .realtimeRequest: payload["environment"]?.stringValue
        case .appTransaction: payload["receiptType"]?.stringValue
        case .notification: NotificationPayload(json: payload).appMetadata.environment
        }
    }

    // MARK: - Nested signed data

    /// The nested tokens' results, in `nested` by field name; the payload is left as Apple signed it.
    private func verifyNested(_ outer: SignedDataResult, now: Date) -> SignedDataResult {
        var result = outer
        guard let payload = result.payload, let data = payload["data"]?.objectValue ?? payload["appData"]?.objectValue
        else { return result }
        for field in SignedDataResult.nestedFields {
            guard let token = data[field.signed]?.stringValue else { continue }
            result.nested[field.signed] = verifyOffline(token, as: field.type, now: now)
        }
        return result
    }

    /// A `ms` field as a date: integer or fractional milliseconds, possibly negative.
    static func date(_ value: JSONValue?) -> Date? {
        value?.doubleValue.flatMap { EpochMilliseconds.date($0) }
    }
}

/// The most recent header and its decoded certificates (a reference, so the verifier stays a value).
private final class LastHeader: Sendable {
    let value = Mutex<(jws: CompactJWS, certificates: [[UInt8]?])?>(nil)
}
