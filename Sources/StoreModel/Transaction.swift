public import Foundation

/// An offer applied to a transaction's period.
public struct Offer: Sendable, Hashable, Codable {
    public var type: OfferType
    /// The offer's identifier (promotional, offer code, win-back); nil for introductory offers.
    public var identifier: String?
    public var discountType: OfferDiscountType?
    /// ISO 8601 duration of the discounted period, e.g. "P1W".
    public var period: String?

    public init(
        type: OfferType, identifier: String? = nil, discountType: OfferDiscountType? = nil, period: String? = nil
    ) {
        self.type = type
        self.identifier = identifier
        self.discountType = discountType
        self.period = period
    }

    /// A free trial (an introductory offer paid nothing).
    public var isFreeTrial: Bool { discountType == .freeTrial }
}

/// One App Store transaction: a purchase, or one period of an auto-renewable subscription. Receipts
/// (`InAppPurchase`), JWS transactions and `verifyReceipt`'s `latest_receipt_info` are renderings of it.
public struct Transaction: Sendable, Hashable, Codable {
    public var id: TransactionID
    public var originalID: TransactionID
    public var bundleID: BundleID
    public var productID: ProductID
    public var kind: ProductKind
    public var quantity: Int
    public var purchaseDate: Date
    public var originalPurchaseDate: Date
    /// End of the period (auto-renewable subscriptions).
    public var expiresDate: Date?
    /// The subscription purchase-event identifier (auto-renewable subscriptions).
    public var webOrderLineItemID: Int64?
    public var subscriptionGroupID: String?
    public var reason: TransactionReason
    public var ownership: OwnershipType
    public var offer: Offer?
    public var price: Money?
    public var appAccountToken: String?
    public var revocationDate: Date?
    public var revocationReason: RevocationReason?
    /// A prorated refund's share, in milliunits (50,000 is half): an upgraded period's unused part, as the
    /// upgrade found it. Nil otherwise (a whole refund is 100,000 when signed; a family revocation has none).
    public var revocationPercentage: Int64? = nil
    public var isUpgraded: Bool
    /// The id of the customer's download of the app (`appTransactionId`, API 1.20): the same for every
    /// purchase of one Apple Account in one app. Nil for purchases made before the store had one.
    public var appTransactionID: TransactionID? = nil
    /// How the subscription is billed (`billingPlanType`), for products sold with a commitment plan.
    public var billingPlan: BillingPlanType? = nil
    /// The month of a monthly-billed commitment this transaction pays for (`commitmentInfo`).
    public var commitment: TransactionCommitment? = nil

    public init(
        id: TransactionID, originalID: TransactionID? = nil, bundleID: BundleID, productID: ProductID,
        kind: ProductKind, quantity: Int = 1, purchaseDate: Date, originalPurchaseDate: Date? = nil,
        expiresDate: Date? = nil, webOrderLineItemID: Int64? = nil, subscriptionGroupID: String? = nil,
        reason: TransactionReason = .purchase, ownership: OwnershipType = .purchased, offer: Offer? = nil,
        price: Money? = nil, appAccountToken: String? = nil, revocationDate: Date? = nil,
        revocationReason: RevocationReason? = nil, isUpgraded: Bool = false
    ) {
        self.id = id
        self.originalID = originalID ?? id
        self.bundleID = bundleID
        self.productID = productID
        self.kind = kind
        self.quantity = quantity
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate ?? purchaseDate
        self.expiresDate = expiresDate
        self.webOrderLineItemID = webOrderLineItemID
        self.subscriptionGroupID = subscriptionGroupID
        self.reason = reason
        self.ownership = ownership
        self.offer = offer
        self.price = price
        self.appAccountToken = appAccountToken
        self.revocationDate = revocationDate
        self.revocationReason = revocationReason
        self.isUpgraded = isUpgraded
    }

    /// Revoked at `date` for `reason`, a prorated refund's `share` (milliunits) with it; a nil `date` is not
    /// revoked (a refund reversed), its reason and share gone too. The one place the three change together.
    public mutating func setRevocation(_ date: Date?, reason: RevocationReason?, share: Int64? = nil) {
        revocationDate = date
        revocationReason = date == nil ? nil : reason
        revocationPercentage = date == nil ? nil : share
    }

    /// Whether this transaction grants access at `date`: not revoked, and for subscriptions within the period.
    public func isActive(at date: Date) -> Bool {
        guard revocationDate == nil, !isUpgraded else { return false }
        switch kind {
        case .autoRenewable: return (expiresDate ?? .distantPast) > date
        case .nonConsumable, .nonRenewing: return true
        case .consumable: return false
        }
    }
}

/// `commitmentInfo` of a transaction billed monthly over a commitment: which of its billing periods this is,
/// how many there are, when the commitment ends and what the whole commitment costs.
public struct TransactionCommitment: Sendable, Hashable, Codable {
    public var billingPeriodNumber: Int
    public var totalBillingPeriods: Int
    public var expiresDate: Date
    /// The whole commitment's price (`commitmentPrice`, milliunits like `price`).
    public var price: Money?

    public init(billingPeriodNumber: Int, totalBillingPeriods: Int, expiresDate: Date, price: Money?) {
        self.billingPeriodNumber = billingPeriodNumber
        self.totalBillingPeriods = totalBillingPeriods
        self.expiresDate = expiresDate
        self.price = price
    }
}

/// A subscription's current commitment (monthly billing over 12 months): the billing period it is in, when
/// it ends, whether it renews (the customer's cancel turns this off; the months left are still billed) and
/// the plan it renews to.
public struct SubscriptionCommitment: Sendable, Hashable, Codable {
    public var billingPeriodNumber: Int
    public var totalBillingPeriods: Int
    public var expiresDate: Date
    public var autoRenew: Bool
    public var renewalPlan: BillingPlanType

    public init(
        billingPeriodNumber: Int, totalBillingPeriods: Int, expiresDate: Date, autoRenew: Bool = true,
        renewalPlan: BillingPlanType = .monthly
    ) {
        self.billingPeriodNumber = billingPeriodNumber
        self.totalBillingPeriods = totalBillingPeriods
        self.expiresDate = expiresDate
        self.autoRenew = autoRenew
        self.renewalPlan = renewalPlan
    }

    /// Whether the current billing period is the commitment's last.
    public var isLastPeriod: Bool { billingPeriodNumber >= totalBillingPeriods }

    /// The most billing periods a commitment counts (Apple's have 12): a stored count past it is read as it,
    /// and the lifecycle never steps through more, so that a damaged record cannot make a loop without end.
    public static let periodsBound = 1_000

    /// `count` within `0...periodsBound`.
    public static func bounded(_ count: Int64) -> Int { Int(min(max(count, 0), Int64(periodsBound))) }
}

/// The renewal state of one auto-renewable subscription (one original transaction): what Get All
/// Subscription Statuses, renewal info and `pending_renewal_info` render.
public struct SubscriptionState: Sendable, Hashable, Codable {
    public var originalTransactionID: TransactionID
    public var productID: ProductID
    /// The product the next period renews to (differs after a downgrade or crossgrade at renewal).
    public var autoRenewProductID: ProductID
    public var status: SubscriptionStatus
    public var autoRenew: Bool
    public var expiresDate: Date?
    public var expirationIntent: ExpirationIntent?
    public var gracePeriodExpiresDate: Date?
    /// When billing retry stops trying (60 days at Apple's real rate) while in billing retry.
    public var billingRetryEndsDate: Date?
    public var isInBillingRetry: Bool { status == .billingRetry || status == .billingGracePeriod }
    /// Renewals so far (0 for the first period).
    public var renewalCount: Int
    /// A price increase announced for the next renewal: pending consent, or accepted; nil when none.
    public var priceIncreaseStatus: PriceIncreaseStatus?
    /// The offer of the current discounted run (introductory, promotional, offer code or win-back).
    public var offer: Offer?
    /// Discounted periods of ``offer`` still to come at the next renewals.
    public var offerPeriodsLeft: Int = 0
    /// The billing plan of a product sold with one (`BILLED_UPFRONT` or `MONTHLY`); nil otherwise.
    public var billingPlan: BillingPlanType? = nil
    /// The commitment the subscription is in (monthly billing), while it is in one.
    public var commitment: SubscriptionCommitment? = nil
    /// A plan chosen for the next renewal outside a commitment (`MONTHLY`: the next period starts one);
    /// nil: billed as now.
    public var renewalBillingPlan: BillingPlanType? = nil
    /// When the current run of periods began, where it is not the first purchase: a resubscription after a
    /// lapse of 60 days or more starts a new one (renewal info's `recentSubscriptionStartDate`).
    public var runStart: Date? = nil

    public init(
        originalTransactionID: TransactionID, productID: ProductID, autoRenewProductID: ProductID? = nil,
        status: SubscriptionStatus = .active, autoRenew: Bool = true, expiresDate: Date? = nil,
        expirationIntent: ExpirationIntent? = nil, gracePeriodExpiresDate: Date? = nil,
        billingRetryEndsDate: Date? = nil, renewalCount: Int = 0, priceIncreaseStatus: PriceIncreaseStatus? = nil
    ) {
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.autoRenewProductID = autoRenewProductID ?? productID
        self.status = status
        self.autoRenew = autoRenew
        self.expiresDate = expiresDate
        self.expirationIntent = expirationIntent
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.billingRetryEndsDate = billingRetryEndsDate
        self.renewalCount = renewalCount
        self.priceIncreaseStatus = priceIncreaseStatus
    }
}
