public import Foundation
public import StoreModel

/// Something that happens to a subscription: a due time reached, or a verb of the customer, the App Store
/// or the developer.
public enum LifecycleEvent: Sendable, Hashable {
    /// The period's end arrived: renew, fail to renew, or expire.
    case periodEnded
    /// The billing grace period ended (billing retry continues).
    case gracePeriodEnded
    /// Billing retry gave up.
    case billingRetryEnded
    /// The customer fixed their billing: the subscription renews now.
    case billingRecovered
    case setAutoRenew(Bool)
    /// `expireSubscription`: the period ends now and does not renew.
    case expireNow
    /// `forceRenewalOfSubscription`: the period ends now and the next one starts.
    case forceRenewal
    /// The App Store refunded the latest period.
    case refunded(RevocationReason)
    /// A refund was reversed: the latest period is reinstated.
    case refundReversed
    /// The price goes up at the next renewal.
    case priceIncrease(requiresConsent: Bool)
    case priceConsent(Bool)
    /// The customer bought another product of the group while subscribed.
    case changeProduct(ProductID)
    /// The customer chose a product and billing plan for the next renewal (Retention Messaging's switch-plan
    /// answer): the same product on another plan, or another product (as ``changeProduct(_:)``) on a plan.
    case changePlan(ProductID, BillingPlanType)
    /// A subscriber redeemed an offer (promotional, offer code) for a product of the group: the same product
    /// from the next renewal, another one now (upgrade) or at the next renewal (downgrade).
    case redeemOffer(ProductID, OfferTerms)
    /// The developer extended the renewal date by `days` at Apple's rate (App Store Server API): the current
    /// period of an active subscription ends that much later (RENEWAL_EXTENDED).
    case extendRenewal(days: Int)
}

/// What the engine asks the store to do, in order, within the same storage transaction as the change.
public enum LifecycleEffect: Sendable, Hashable {
    /// A new period (a new transaction): a renewal, a recovery, or an upgrade bought now.
    case startPeriod(productID: ProductID, start: Date, expires: Date, reason: TransactionReason, offer: Offer?)
    /// The latest period ends early, at `date` (expire now, force renewal, or an upgrade's unused part).
    case endLatestPeriod(at: Date, refundUnused: Bool)
    /// The latest period is refunded (revoked) or, with nil, reinstated.
    case revokeLatest(RevocationReason?, at: Date)
    case notify(Notice)
    case schedule(DueKind, at: Date)
    case unschedule(DueKind)
}

/// The timed work of a subscription.
public enum DueKind: String, Sendable, Hashable, CaseIterable {
    case renewal
    case gracePeriodEnd = "grace-period-end"
    case billingRetryEnd = "billing-retry-end"
}

/// A verb that does not apply in the subscription's state (expiring an expired subscription, recovering one
/// without a billing issue): the store answers it as a 4xx, and nothing changes.
public struct LifecycleError: Error, Sendable, Hashable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
