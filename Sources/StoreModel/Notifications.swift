/// App Store Server Notifications V2 `notificationType` (Apple's names; unknown ones decode as `.unknown`).
public enum NotificationType: String, Sendable, Hashable, CaseIterable, Codable {
    case subscribed = "SUBSCRIBED"
    case didRenew = "DID_RENEW"
    case didChangeRenewalPref = "DID_CHANGE_RENEWAL_PREF"
    case didChangeRenewalStatus = "DID_CHANGE_RENEWAL_STATUS"
    case offerRedeemed = "OFFER_REDEEMED"
    case didFailToRenew = "DID_FAIL_TO_RENEW"
    case gracePeriodExpired = "GRACE_PERIOD_EXPIRED"
    case expired = "EXPIRED"
    case priceIncrease = "PRICE_INCREASE"
    case refund = "REFUND"
    case refundDeclined = "REFUND_DECLINED"
    case refundReversed = "REFUND_REVERSED"
    case consumptionRequest = "CONSUMPTION_REQUEST"
    case renewalExtended = "RENEWAL_EXTENDED"
    case renewalExtension = "RENEWAL_EXTENSION"
    case revoke = "REVOKE"
    case test = "TEST"
    case oneTimeCharge = "ONE_TIME_CHARGE"
    case externalPurchaseToken = "EXTERNAL_PURCHASE_TOKEN"
    case rescindConsent = "RESCIND_CONSENT"
    case metadataUpdate = "METADATA_UPDATE"
    case migration = "MIGRATION"
    case priceChange = "PRICE_CHANGE"
}

/// V2 `subtype`.
public enum NotificationSubtype: String, Sendable, Hashable, CaseIterable, Codable {
    case initialBuy = "INITIAL_BUY"
    case resubscribe = "RESUBSCRIBE"
    case downgrade = "DOWNGRADE"
    case upgrade = "UPGRADE"
    case autoRenewEnabled = "AUTO_RENEW_ENABLED"
    case autoRenewDisabled = "AUTO_RENEW_DISABLED"
    case voluntary = "VOLUNTARY"
    case billingRetry = "BILLING_RETRY"
    case priceIncrease = "PRICE_INCREASE"
    case gracePeriod = "GRACE_PERIOD"
    case pending = "PENDING"
    case accepted = "ACCEPTED"
    case billingRecovery = "BILLING_RECOVERY"
    case productNotForSale = "PRODUCT_NOT_FOR_SALE"
    case summary = "SUMMARY"
    case failure = "FAILURE"
    case unreported = "UNREPORTED"
}

/// One notification a change of state causes: its V2 type and subtype, and the V1 `notification_type`
/// when V1 has an equivalent (shared/spec/notifications.md §2.3).
/// App Store Server Notifications V1's `notification_type`. A struct rather than an enum so that a value
/// Apple adds (or a stored one this build does not know) keeps its raw name.
public struct NotificationTypeV1: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral,
    CustomStringConvertible
{
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.init(rawValue: value) }
    public var description: String { rawValue }

    public static let initialBuy: Self = "INITIAL_BUY"
    public static let cancel: Self = "CANCEL"
    public static let didChangeRenewalPref: Self = "DID_CHANGE_RENEWAL_PREF"
    public static let didChangeRenewalStatus: Self = "DID_CHANGE_RENEWAL_STATUS"
    public static let didFailToRenew: Self = "DID_FAIL_TO_RENEW"
    public static let didRecover: Self = "DID_RECOVER"
    public static let didRenew: Self = "DID_RENEW"
    public static let interactiveRenewal: Self = "INTERACTIVE_RENEWAL"
    public static let priceIncreaseConsent: Self = "PRICE_INCREASE_CONSENT"
    public static let refund: Self = "REFUND"
    public static let revoke: Self = "REVOKE"
    public static let consumptionRequest: Self = "CONSUMPTION_REQUEST"
    /// A deprecated alias of ``didRecover``, not sent since 2021-03-10.
    public static let renewal: Self = "RENEWAL"

    /// Every type Apple documents, in its table's order.
    public static let known: [Self] = [
        .initialBuy, .cancel, .didChangeRenewalPref, .didChangeRenewalStatus, .didFailToRenew, .didRecover,
        .didRenew, .interactiveRenewal, .priceIncreaseConsent, .refund, .revoke, .consumptionRequest, .renewal,
    ]
}

public struct Notice: Sendable, Hashable, CustomStringConvertible {
    public var type: NotificationType
    public var subtype: NotificationSubtype?
    /// V1's name for the same event; nil when V1 sends nothing.
    public var v1Type: NotificationTypeV1?

    public init(_ type: NotificationType, _ subtype: NotificationSubtype? = nil, v1: NotificationTypeV1? = nil) {
        self.type = type
        self.subtype = subtype
        self.v1Type = v1
    }

    public var description: String { subtype.map { "\(type.rawValue)/\($0.rawValue)" } ?? type.rawValue }
}

/// `priceIncreaseStatus` of renewal info and `price_consent_status` of `pending_renewal_info`.
public enum PriceIncreaseStatus: Int64, Sendable, Hashable, Codable {
    /// The customer has not answered an increase that needs consent.
    case pending = 0
    /// Consented, or notified of an increase that needs no consent.
    case accepted = 1
}

/// The outcome of one attempt to send a notification (Apple's `sendAttemptResult`).
public enum SendAttemptResult: String, Sendable, Hashable, CaseIterable, Codable {
    case success = "SUCCESS"
    case timedOut = "TIMED_OUT"
    case tlsIssue = "TLS_ISSUE"
    case circularRedirect = "CIRCULAR_REDIRECT"
    case noResponse = "NO_RESPONSE"
    case socketIssue = "SOCKET_ISSUE"
    case unsupportedCharset = "UNSUPPORTED_CHARSET"
    case invalidResponse = "INVALID_RESPONSE"
    case prematureClose = "PREMATURE_CLOSE"
    case unsuccessfulHTTPResponseCode = "UNSUCCESSFUL_HTTP_RESPONSE_CODE"
    case other = "OTHER"
}

/// Why a customer asked for a refund (`consumptionRequestReason` of a CONSUMPTION_REQUEST).
public enum ConsumptionRequestReason: String, Sendable, Hashable, CaseIterable, Codable {
    case unintendedPurchase = "UNINTENDED_PURCHASE"
    case fulfillmentIssue = "FULFILLMENT_ISSUE"
    case unsatisfiedWithPurchase = "UNSATISFIED_WITH_PURCHASE"
    case legal = "LEGAL"
    case other = "OTHER"
}
