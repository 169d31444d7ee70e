/// A name from a vocabulary that grows: Apple's notification types, the server's event types. A struct
/// rather than an enum, so that a name Apple adds (or a stored one this build does not know) keeps its raw
/// value; the names this build knows are constants, listed in `known`.
public protocol OpenVocabulary: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral,
    CustomStringConvertible
where RawValue == String {
    init(rawValue: String)
    /// Every name this build knows, in the order of its documentation.
    static var known: [Self] { get }
}

extension OpenVocabulary {
    public init(stringLiteral value: String) { self.init(rawValue: value) }
    public var description: String { rawValue }
    /// Whether this build knows the name.
    public var isKnown: Bool { Self.known.contains(self) }
    /// A known name; nil for any other.
    public init?(known name: String) {
        let value = Self(rawValue: name)
        guard value.isKnown else { return nil }
        self = value
    }
}

/// App Store Server Notifications V2 `notificationType`.
public struct NotificationType: OpenVocabulary {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let subscribed: Self = "SUBSCRIBED"
    public static let didRenew: Self = "DID_RENEW"
    public static let didChangeRenewalPref: Self = "DID_CHANGE_RENEWAL_PREF"
    public static let didChangeRenewalStatus: Self = "DID_CHANGE_RENEWAL_STATUS"
    public static let offerRedeemed: Self = "OFFER_REDEEMED"
    public static let didFailToRenew: Self = "DID_FAIL_TO_RENEW"
    public static let gracePeriodExpired: Self = "GRACE_PERIOD_EXPIRED"
    public static let expired: Self = "EXPIRED"
    public static let priceIncrease: Self = "PRICE_INCREASE"
    public static let refund: Self = "REFUND"
    public static let refundDeclined: Self = "REFUND_DECLINED"
    public static let refundReversed: Self = "REFUND_REVERSED"
    public static let consumptionRequest: Self = "CONSUMPTION_REQUEST"
    public static let renewalExtended: Self = "RENEWAL_EXTENDED"
    public static let renewalExtension: Self = "RENEWAL_EXTENSION"
    public static let revoke: Self = "REVOKE"
    public static let test: Self = "TEST"
    public static let oneTimeCharge: Self = "ONE_TIME_CHARGE"
    public static let externalPurchaseToken: Self = "EXTERNAL_PURCHASE_TOKEN"
    public static let rescindConsent: Self = "RESCIND_CONSENT"
    public static let metadataUpdate: Self = "METADATA_UPDATE"
    public static let migration: Self = "MIGRATION"
    public static let priceChange: Self = "PRICE_CHANGE"

    public static let known: [Self] = [
        .subscribed, .didRenew, .didChangeRenewalPref, .didChangeRenewalStatus, .offerRedeemed, .didFailToRenew,
        .gracePeriodExpired, .expired, .priceIncrease, .refund, .refundDeclined, .refundReversed,
        .consumptionRequest, .renewalExtended, .renewalExtension, .revoke, .test, .oneTimeCharge,
        .externalPurchaseToken, .rescindConsent, .metadataUpdate, .migration, .priceChange,
    ]

    /// The subtypes Apple sends with this type (empty: none ever), from its notification table; Get
    /// Notification History refuses a pair outside it (4000018).
    public var subtypes: Set<NotificationSubtype> {
        switch self {
        case .subscribed: [.initialBuy, .resubscribe]
        case .didRenew: [.billingRecovery]
        case .didChangeRenewalPref, .offerRedeemed: [.upgrade, .downgrade]
        case .didChangeRenewalStatus: [.autoRenewEnabled, .autoRenewDisabled]
        case .didFailToRenew: [.gracePeriod]
        case .expired: [.voluntary, .billingRetry, .priceIncrease, .productNotForSale]
        case .priceIncrease: [.pending, .accepted]
        case .renewalExtension: [.summary, .failure]
        case .externalPurchaseToken: [.unreported, .created, .activeTokenReminder]
        default: []
        }
    }
}

/// V2 `subtype`.
public struct NotificationSubtype: OpenVocabulary {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let initialBuy: Self = "INITIAL_BUY"
    public static let resubscribe: Self = "RESUBSCRIBE"
    public static let downgrade: Self = "DOWNGRADE"
    public static let upgrade: Self = "UPGRADE"
    public static let autoRenewEnabled: Self = "AUTO_RENEW_ENABLED"
    public static let autoRenewDisabled: Self = "AUTO_RENEW_DISABLED"
    public static let voluntary: Self = "VOLUNTARY"
    public static let billingRetry: Self = "BILLING_RETRY"
    public static let priceIncrease: Self = "PRICE_INCREASE"
    public static let gracePeriod: Self = "GRACE_PERIOD"
    public static let pending: Self = "PENDING"
    public static let accepted: Self = "ACCEPTED"
    public static let billingRecovery: Self = "BILLING_RECOVERY"
    public static let productNotForSale: Self = "PRODUCT_NOT_FOR_SALE"
    public static let summary: Self = "SUMMARY"
    public static let failure: Self = "FAILURE"
    public static let unreported: Self = "UNREPORTED"
    public static let created: Self = "CREATED"
    public static let activeTokenReminder: Self = "ACTIVE_TOKEN_REMINDER"

    public static let known: [Self] = [
        .initialBuy, .resubscribe, .downgrade, .upgrade, .autoRenewEnabled, .autoRenewDisabled, .voluntary,
        .billingRetry, .priceIncrease, .gracePeriod, .pending, .accepted, .billingRecovery, .productNotForSale,
        .summary, .failure, .unreported, .created, .activeTokenReminder,
    ]
}

/// App Store Server Notifications V1's `notification_type`.
public struct NotificationTypeV1: OpenVocabulary {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

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

/// One notification a change of state causes: its V2 type and subtype, and the V1 `notification_type`
/// when V1 has an equivalent (shared/spec/notifications.md §2.3).
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
