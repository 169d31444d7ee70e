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
public struct Notice: Sendable, Hashable, CustomStringConvertible {
    public var type: NotificationType
    public var subtype: NotificationSubtype?
    /// V1's name for the same event; nil when V1 sends nothing.
    public var v1Type: String?

    public init(_ type: NotificationType, _ subtype: NotificationSubtype? = nil, v1: String? = nil) {
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
