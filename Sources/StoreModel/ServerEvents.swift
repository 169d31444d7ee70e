/// What happened to a subscriber, as the purchase server's events and webhooks name it (RevenueCat's names,
/// so that existing webhook consumers read them).
public struct ServerEventType: OpenVocabulary {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The first period of a subscription, or a resubscription after it ended.
    public static let initialPurchase: Self = "INITIAL_PURCHASE"
    public static let renewal: Self = "RENEWAL"
    /// Auto-renew turned off (or a billing problem ended it) while the subscription is live.
    public static let cancellation: Self = "CANCELLATION"
    public static let uncancellation: Self = "UNCANCELLATION"
    public static let billingIssue: Self = "BILLING_ISSUE"
    public static let expiration: Self = "EXPIRATION"
    public static let productChange: Self = "PRODUCT_CHANGE"
    /// A consumable, non-consumable or non-renewing purchase.
    public static let nonRenewingPurchase: Self = "NON_RENEWING_PURCHASE"
    public static let refund: Self = "REFUND"
    public static let refundReversed: Self = "REFUND_REVERSED"
    /// The customer asked Apple for a refund (Apple's CONSUMPTION_REQUEST): Apple asks the developer for
    /// consumption information (Send Consumption Information) within 12 hours, then decides; `details` carry
    /// Apple's `consumptionRequestReason` when it gave one.
    public static let refundRequest: Self = "REFUND_REQUEST"
    public static let subscriptionExtended: Self = "SUBSCRIPTION_EXTENDED"
    /// Purchases moved to another app user (restored under a new id).
    public static let transfer: Self = "TRANSFER"
    /// Apple's TEST notification arrived.
    public static let test: Self = "TEST"
    /// Apple asked, while the customer was on the cancellation page, which retention message to show
    /// (Retention Messaging); `details` say what the server answered.
    public static let retentionRequest: Self = "RETENTION_REQUEST"
    /// The app posted StoreKit 2's `AppTransaction` for a user (who bought or downloaded the app, and when);
    /// `details` carry its `appTransactionId` and `originalApplicationVersion`.
    public static let appTransaction: Self = "APP_TRANSACTION"

    public static let known: [Self] = [
        .initialPurchase, .renewal, .cancellation, .uncancellation, .billingIssue, .expiration, .productChange,
        .nonRenewingPurchase, .refund, .refundReversed, .refundRequest, .subscriptionExtended, .transfer, .test,
        .retentionRequest, .appTransaction,
    ]

    /// The types a dashboard marks as bad news.
    public var isLoss: Bool { [.cancellation, .billingIssue, .expiration, .refund].contains(self) }
}

/// Where the purchase server learned something.
public struct ServerEventSource: OpenVocabulary {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// An App Store Server Notification.
    public static let notification: Self = "notification"
    /// The app: a posted transaction, app transaction or receipt.
    public static let app: Self = "app"
    /// The App Store Server API (reconciliation, a lookup).
    public static let api: Self = "api"
    /// The developer: a grant, a transfer by the server's rules.
    public static let developer: Self = "developer"

    public static let known: [Self] = [.notification, .app, .api, .developer]
}
