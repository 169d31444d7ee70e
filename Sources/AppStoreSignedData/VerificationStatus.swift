public import StorekeeperJSON

/// The outcome of verifying signed data, named as Apple's server libraries name them (Python
/// `VerificationStatus`), plus `INVALID_JWT_FORMAT` for input that is not a well-formed JWS at all.
public struct VerificationStatus: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    private init(_ rawValue: String) { self.rawValue = rawValue }

    public static let ok = VerificationStatus("OK")
    /// The chain, the signature or the algorithm did not verify.
    public static let verificationFailure = VerificationStatus("VERIFICATION_FAILURE")
    /// Bundle id (or, in Production, app Apple ID) differs from the expected one.
    public static let invalidAppIdentifier = VerificationStatus("INVALID_APP_IDENTIFIER")
    /// A certificate does not decode, or no trusted root is configured.
    public static let invalidCertificate = VerificationStatus("INVALID_CERTIFICATE")
    /// `x5c` does not hold exactly three certificates.
    public static let invalidChainLength = VerificationStatus("INVALID_CHAIN_LENGTH")
    public static let invalidChain = VerificationStatus("INVALID_CHAIN")
    /// The payload's environment differs from the expected one.
    public static let invalidEnvironment = VerificationStatus("INVALID_ENVIRONMENT")
    /// An online check could not be completed (network); try again later.
    public static let retryableVerificationFailure = VerificationStatus("RETRYABLE_VERIFICATION_FAILURE")
    /// Not a compact JWS with JSON header and payload and an `x5c` header.
    public static let invalidJWTFormat = VerificationStatus("INVALID_JWT_FORMAT")

    public var description: String { rawValue }
}

/// What kind of payload a JWS carries.
public enum SignedDataType: String, Sendable, CaseIterable {
    case transaction
    case renewalInfo = "renewal-info"
    case notification
    case appTransaction = "app-transaction"
    /// Retention Messaging's realtime request (`RealtimeRequestBody`'s `signedPayload`).
    case realtimeRequest = "realtime-request"

    /// Detects the type from the payload's fields: notifications carry `notificationType`, app transactions
    /// `receiptType`, transactions `transactionId` or `bundleId`; renewal info carries neither.
    public static func detect(_ payload: JSONObject) -> SignedDataType {
        if payload["notificationType"] != nil || payload["notificationUUID"] != nil { return .notification }
        if payload["receiptType"] != nil || payload["applicationVersion"] != nil { return .appTransaction }
        if payload["requestIdentifier"] != nil && payload["userLocale"] != nil { return .realtimeRequest }
        if payload["transactionId"] != nil || payload["bundleId"] != nil { return .transaction }
        return .renewalInfo
    }
}
