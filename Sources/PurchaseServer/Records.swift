public import Foundation
public import StoreModel

/// A customer of the developer's app, by the app's own user id: the ids it was also known by, the app
/// account tokens seen for it, and what looked unusual about it.
public struct Subscriber: Codable, Sendable, Hashable {
    public var bundleID: String
    public var appUserID: String
    public var aliases: [String]
    public var appAccountTokens: [String]
    public var firstSeen: Date
    /// Signals worth a look: `multiple_apple_accounts` (more than one original purchase of a subscription
    /// group, i.e. several Apple accounts feed one user), `purchase_kept_by_other_user`.
    public var flags: [String]

    public init(bundleID: String, appUserID: String, firstSeen: Date) {
        self.bundleID = bundleID
        self.appUserID = appUserID
        self.aliases = []
        self.appAccountTokens = []
        self.firstSeen = firstSeen
        self.flags = []
    }
}

/// One App Store transaction as the server last verified it (a one-time purchase or one subscription
/// period), with the app user who owns it.
public struct PurchaseRecord: Codable, Sendable, Hashable {
    public var transactionID: TransactionID
    public var originalTransactionID: TransactionID
    public var bundleID: BundleID
    public var productID: ProductID
    public var kind: ProductKind
    public var quantity: Int
    public var purchaseDate: Date
    public var expiresDate: Date?
    public var webOrderLineItemID: String?
    public var environment: Environment
    public var ownership: OwnershipType
    public var revocationDate: Date?
    public var revocationReason: Int64?
    public var offerType: Int64?
    public var offerDiscountType: String?
    public var appAccountToken: String?
    public var price: Int64?
    public var currency: String?
    /// Apple's `transactionReason`: `PURCHASE` (bought by the customer: a first purchase, a resubscription,
    /// an upgrade) or `RENEWAL`; nil when unknown (receipts).
    public var reason: TransactionReason?
    /// When Apple signed what this record says.
    public var signedDate: Date
    public var owner: String?
    /// Apple's `billingPlanType` (`BILLED_UPFRONT`, `MONTHLY`), for products sold with a commitment plan.
    public var billingPlanType: String? = nil
    /// The month of a commitment this transaction pays for (`commitmentInfo`).
    public var commitment: CommitmentFacts? = nil
    /// Apple's `revocationType`: `REFUND_FULL`, `REFUND_PRORATED` or `FAMILY_REVOKE` (nil: not said).
    public var revocationType: String? = nil
    /// Apple's `revocationPercentage`: the share refunded, in milliunits (100000 is all of it).
    public var revocationPercentage: Int64? = nil
    /// Apple's `isUpgraded`: the period was replaced by an upgrade, its revocation the upgrade's (its unused
    /// part refunded), not a refund the customer asked for. Receipts do not carry it: read from the receipt's
    /// next period of the subscription starting when this one was cancelled.
    public var isUpgraded: Bool? = nil
    /// Apple's `subscriptionGroupIdentifier` (signed transactions only; receipts do not carry it).
    public var subscriptionGroupID: String? = nil

    /// Revoked by a refund or the family (not by an upgrade, which ends the period for a better one).
    public var isRefunded: Bool { revocationDate != nil && isUpgraded != true }

    /// What a later receipt's record of this transaction (`self`) cannot say, kept from the signed record
    /// before it (`stored`): receipts carry no ownership, price, offer, plan, upgrade or group (and may lack the
    /// product's type), and never show a consumable's refund, so their silence is not news.
    mutating func keepSignedFacts(of stored: PurchaseRecord) {
        // Apple's signed type, not a receipt's (which may lack one and is then guessed).
        kind = stored.kind
        if ownership == .purchased { ownership = stored.ownership }
        price = price ?? stored.price
        currency = currency ?? stored.currency
        reason = reason ?? stored.reason
        appAccountToken = appAccountToken ?? stored.appAccountToken
        if offerType == nil {
            offerType = stored.offerType
            offerDiscountType = stored.offerDiscountType
        }
        billingPlanType = billingPlanType ?? stored.billingPlanType
        commitment = commitment ?? stored.commitment
        isUpgraded = isUpgraded ?? stored.isUpgraded
        subscriptionGroupID = subscriptionGroupID ?? stored.subscriptionGroupID
        if kind == .consumable, revocationDate == nil, stored.revocationDate != nil {
            revocationDate = stored.revocationDate
            revocationReason = stored.revocationReason
            revocationType = stored.revocationType
            revocationPercentage = stored.revocationPercentage
        }
    }

    /// The units of `quantity` a revocation takes back: a prorated refund's share of them (rounded), else all.
    public var revokedUnits: Int {
        guard revocationType == "REFUND_PRORATED", let share = revocationPercentage else { return quantity }
        let fraction = Double(min(max(share, 0), 100_000)) / 100_000
        return Int((Double(quantity) * fraction).rounded())
    }

    public init(
        transactionID: TransactionID, originalTransactionID: TransactionID, bundleID: BundleID, productID: ProductID,
        kind: ProductKind,
        quantity: Int = 1, purchaseDate: Date, expiresDate: Date? = nil, webOrderLineItemID: String? = nil,
        environment: Environment, ownership: OwnershipType = .purchased, revocationDate: Date? = nil,
        revocationReason: Int64? = nil, offerType: Int64? = nil, offerDiscountType: String? = nil,
        appAccountToken: String? = nil, price: Int64? = nil, currency: String? = nil, reason: TransactionReason? = nil,
        signedDate: Date, owner: String? = nil
    ) {
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.bundleID = bundleID
        self.productID = productID
        self.kind = kind
        self.quantity = quantity
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.webOrderLineItemID = webOrderLineItemID
        self.environment = environment
        self.ownership = ownership
        self.revocationDate = revocationDate
        self.revocationReason = revocationReason
        self.offerType = offerType
        self.offerDiscountType = offerDiscountType
        self.appAccountToken = appAccountToken
        self.price = price
        self.currency = currency
        self.reason = reason
        self.signedDate = signedDate
        self.owner = owner
    }
}

/// What Apple's renewal info (and a notification's `status`) says of a subscription at its signed date.
public struct RenewalFacts: Codable, Sendable, Hashable {
    public var originalTransactionID: TransactionID
    /// Apple's status 1–5, when Apple said it (notifications, Get All Subscription Statuses).
    public var status: Int64?
    public var autoRenewStatus: Bool?
    public var autoRenewProductID: ProductID?
    public var expirationIntent: Int64?
    public var gracePeriodExpiresDate: Date?
    public var isInBillingRetryPeriod: Bool?
    public var priceIncreaseStatus: Int64?
    public var renewalDate: Date?
    public var signedDate: Date
    public var renewalBillingPlanType: String? = nil
    /// Whether the current commitment renews, and when (`commitmentInfo` of renewal info).
    public var commitmentAutoRenewStatus: Bool? = nil
    public var commitmentRenewalDate: Date? = nil

    public init(
        originalTransactionID: TransactionID, status: Int64? = nil, autoRenewStatus: Bool? = nil,
        autoRenewProductID: ProductID? = nil, expirationIntent: Int64? = nil, gracePeriodExpiresDate: Date? = nil,
        isInBillingRetryPeriod: Bool? = nil, priceIncreaseStatus: Int64? = nil, renewalDate: Date? = nil,
        signedDate: Date
    ) {
        self.originalTransactionID = originalTransactionID
        self.status = status
        self.autoRenewStatus = autoRenewStatus
        self.autoRenewProductID = autoRenewProductID
        self.expirationIntent = expirationIntent
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.priceIncreaseStatus = priceIncreaseStatus
        self.renewalDate = renewalDate
        self.signedDate = signedDate
    }
}

/// A monthly-billed commitment as Apple's signed data tell of it: from a transaction's `commitmentInfo`
/// (the month, the months, the end, the whole price) and from renewal info's (whether and when it renews).
public struct CommitmentFacts: Codable, Sendable, Hashable {
    public var billingPeriodNumber: Int?
    public var totalBillingPeriods: Int?
    public var expiresDate: Date?
    /// The whole commitment's price, milliunits.
    public var price: Int64?
    public var autoRenewStatus: Bool?
    public var renewalDate: Date?

    public init(
        billingPeriodNumber: Int? = nil, totalBillingPeriods: Int? = nil, expiresDate: Date? = nil,
        price: Int64? = nil, autoRenewStatus: Bool? = nil, renewalDate: Date? = nil
    ) {
        self.billingPeriodNumber = billingPeriodNumber
        self.totalBillingPeriods = totalBillingPeriods
        self.expiresDate = expiresDate
        self.price = price
        self.autoRenewStatus = autoRenewStatus
        self.renewalDate = renewalDate
    }
}

/// One Retention Messaging realtime request and the server's answer.
public struct RetentionAnswer: Sendable, Hashable {
    public var requestIdentifier: String
    public var bundleID: BundleID
    public var originalTransactionID: TransactionID
    public var environment: Environment
    /// When Apple signed the request.
    public var date: Date
    /// `message`, `alternateProduct`, `promotionalOffer`, or `none` (no rule matched).
    public var answer: String
    /// The rule that matched.
    public var rule: String?
    /// When the subscription was cancelled after it (auto-renew off within a day): not a save.
    public var cancelled: Date?

    public init(
        requestIdentifier: String, bundleID: BundleID, originalTransactionID: TransactionID,
        environment: Environment, date: Date, answer: String, rule: String? = nil, cancelled: Date? = nil
    ) {
        self.requestIdentifier = requestIdentifier
        self.bundleID = bundleID
        self.originalTransactionID = originalTransactionID
        self.environment = environment
        self.date = date
        self.answer = answer
        self.rule = rule
        self.cancelled = cancelled
    }
}

/// An auto-renewable subscription (one original transaction) as the server knows it.
public struct SubscriptionRecord: Codable, Sendable, Hashable {
    public var originalTransactionID: TransactionID
    public var bundleID: BundleID
    public var environment: Environment
    public var productID: ProductID
    public var latestTransactionID: TransactionID
    /// The purchase date of the latest period (a newer period is one bought later).
    public var latestPurchaseDate: Date
    /// Apple's status: 1 active, 2 expired, 3 billing retry, 4 billing grace period, 5 revoked.
    public var status: Int64
    public var autoRenewStatus: Bool
    public var autoRenewProductID: ProductID?
    public var expiresDate: Date?
    public var gracePeriodExpiresDate: Date?
    public var expirationIntent: Int64?
    public var priceIncreaseStatus: Int64?
    public var ownership: OwnershipType
    public var revocationDate: Date?
    public var revocationReason: Int64?
    public var offerType: Int64?
    public var offerDiscountType: String?
    /// When Apple signed the newest transaction applied.
    public var transactionSignedDate: Date
    /// When Apple signed the newest renewal facts applied (nil: none yet; the status is inferred).
    public var renewalSignedDate: Date?
    /// When Apple signed the first record of the current period seen here: renewal facts signed before it
    /// describe an earlier period (a notification retried late), so they do not set this one's status.
    public var periodSignedDate: Date? = nil
    public var owner: String?
    /// How the current period was billed (`BILLED_UPFRONT`, `MONTHLY`) and how the next one will be.
    public var billingPlanType: String? = nil
    public var renewalBillingPlanType: String? = nil
    /// The commitment the subscription is in: the month, the months, its end, and whether it renews.
    public var commitment: CommitmentFacts? = nil
    /// When Apple asked for consumption information (a refund request), until its decision arrives.
    public var refundRequestDate: Date?
    /// When the reconciler last asked Apple about it.
    public var lastPolled: Date?

    /// How long past a refund request's expected decision (two days on) the reconciler keeps asking for it.
    public static let refundDecisionPatience: TimeInterval = 7 * 86_400

    /// When the reconciler should ask Apple about this subscription if nothing is heard before (nil: no
    /// news is expected): a renewal or expiry at the end of an active period or of a grace period, a
    /// recovery during billing retry (daily), a decision two days after a refund request. Asked once
    /// with nothing new (or without an answer), it is asked again an hour (in billing retry, a day) later.
    public var reconciliationDue: Date? {
        // Xcode's purchases have no App Store Server API to ask.
        if environment == .xcode { return nil }
        var due: Date?
        var again: TimeInterval = 3_600
        switch status {
        case 1: due = expiresDate
        case 4: due = gracePeriodExpiresDate ?? expiresDate
        case 3:
            due = expiresDate.map { $0.addingTimeInterval(86_400) }
            again = 86_400
        default: due = nil
        }
        if let requested = refundRequestDate {
            // Asked for until a week past the expected decision: one that brings no news (a request declined
            // outside the app sends no REFUND_DECLINED, and only a decision clears the date) is not asked for
            // every hour for ever.
            let decision = requested.addingTimeInterval(2 * 86_400)
            if lastPolled.map({ $0 < decision.addingTimeInterval(Self.refundDecisionPatience) }) ?? true {
                due = min(due ?? decision, decision)
            }
        }
        guard let due else { return nil }
        if let polled = lastPolled, polled >= due { return polled.addingTimeInterval(again) }
        return due
    }
}

/// A change of a consumable balance: a purchase credits, a refund debits (the balance may go negative),
/// a reversed refund credits again. One entry per transaction and ``key``: the purchase once, each refund and
/// each reversal once at its date (a refund reversed and then refunded again is a second debit).
public struct LedgerEntry: Codable, Sendable, Hashable {
    public enum Reason: String, Codable, Sendable, Hashable { case purchase, refund, refundReversed }
    public var transactionID: TransactionID
    public var productID: ProductID
    public var quantity: Int
    public var reason: Reason
    public var date: Date

    public init(transactionID: TransactionID, productID: ProductID, quantity: Int, reason: Reason, date: Date) {
        self.transactionID = transactionID
        self.productID = productID
        self.quantity = quantity
        self.reason = reason
        self.date = date
    }

    /// What makes the entry one of its transaction's (the stored `reason` column): the purchase's reason
    /// alone; a refund's or a reversal's with its date in milliseconds (Apple's revocation date; for a
    /// reversal, the date of the revocation it undoes), so that the same one told twice is one entry and a
    /// later one another.
    public var key: String {
        reason == .purchase ? reason.rawValue : "\(reason.rawValue):\(EpochMilliseconds.milliseconds(date))"
    }
}

/// An entitlement given by the developer (`…/entitlements/{name}/grant`), not bought.
public struct Grant: Codable, Sendable, Hashable {
    public var entitlement: String
    public var grantedAt: Date
    /// nil: for good.
    public var expiresDate: Date?
    public var revokedAt: Date?
}

/// Something that happened to a subscriber, in the vocabulary of the outbound webhooks
/// (`INITIAL_PURCHASE`, `RENEWAL`, …), with the Apple notification that told of it when there was one.
/// `id` is stable: the same change learned twice is one event.
public struct ServerEvent: Codable, Sendable, Hashable {
    public var id: String
    public var type: ServerEventType
    public var bundleID: BundleID
    public var appUserID: String?
    public var date: Date
    public var environment: Environment?
    public var productID: ProductID?
    public var transactionID: TransactionID?
    public var originalTransactionID: TransactionID?
    public var expiresDate: Date?
    /// Where it was learned: `notification`, `app` (a posted transaction or receipt), `api` (the App Store
    /// Server API), `developer` (a grant).
    public var source: ServerEventSource
    /// The Apple notification that told of it, as Apple named it: V2's `notificationType` and `subtype`, or
    /// V1's `notification_type` (see ``AppleNotice``).
    public var appleNotificationType: String?
    public var appleSubtype: String?
    /// More about it: `reason` (cancellation, expiration), `newProductId`, `transferredFrom`, …
    public var details: [String: String]

    public init(
        id: String, type: ServerEventType, bundleID: BundleID, appUserID: String?, date: Date,
        environment: Environment? = nil,
        productID: ProductID? = nil, transactionID: TransactionID? = nil, originalTransactionID: TransactionID? = nil,
        expiresDate: Date? = nil, source: ServerEventSource, appleNotificationType: String? = nil,
        appleSubtype: String? = nil,
        details: [String: String] = [:]
    ) {
        self.id = id
        self.type = type
        self.bundleID = bundleID
        self.appUserID = appUserID
        self.date = date
        self.environment = environment
        self.productID = productID
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.expiresDate = expiresDate
        self.source = source
        self.appleNotificationType = appleNotificationType
        self.appleSubtype = appleSubtype
        self.details = details
    }
}

extension PurchaseRecord {
    /// A signed quantity as the ledger counts it: within 0 and a million (StoreKit sells at most 10 at once;
    /// a signer's absurd number is not one the ledger can sum or negate without overflow).
    package static func quantity(_ signed: Int64) -> Int { Int(min(max(signed, 0), 1_000_000)) }
}
