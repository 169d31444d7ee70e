public import Foundation
public import StoreModel
public import StoreTime

/// What the engine needs to know of a product: its period, its level in the group (1 is the highest, as
/// `groupNumber` in a `.storekit` file) and whether it is for sale.
public struct ProductTerms: Sendable, Hashable {
    public var period: StorePeriod
    public var level: Int
    public var forSale: Bool
    /// The monthly plan over a commitment, for a yearly product sold with one.
    public var commitment: CommitmentTerms?
    /// Whether the product names its billing plans (then a period bought up front says `BILLED_UPFRONT`).
    public var hasBillingPlans: Bool

    public init(
        period: StorePeriod, level: Int = 1, forSale: Bool = true, commitment: CommitmentTerms? = nil,
        hasBillingPlans: Bool? = nil
    ) {
        self.period = period
        self.level = level
        self.forSale = forSale
        self.commitment = commitment
        self.hasBillingPlans = hasBillingPlans ?? (commitment != nil)
    }
}

/// A commitment plan: how long each billing period is and how many make the commitment (a month, 12).
public struct CommitmentTerms: Sendable, Hashable {
    public var billingPeriod: StorePeriod
    public var periods: Int

    public init(billingPeriod: StorePeriod = StorePeriod(months: 1), periods: Int = 12) {
        self.billingPeriod = billingPeriod
        self.periods = max(1, periods)
    }
}

/// A discounted run of a subscription: the offer, how long each of its periods lasts, and how many there
/// are (a free trial or pay-up-front offer has one, pay-as-you-go has several).
public struct OfferTerms: Sendable, Hashable {
    public var offer: Offer
    public var period: StorePeriod
    public var periods: Int

    public init(offer: Offer, period: StorePeriod, periods: Int = 1) {
        self.offer = offer
        self.period = period
        self.periods = max(1, periods)
    }
}

/// How the store behaves for one account and environment: the time rate, whether renewals fail (billing
/// retry), whether a grace period applies, the sandbox's renewal cap, and the last date it can sign for.
public struct LifecycleSettings: Sendable, Hashable {
    public var rate: TimeRate
    public var renewalsFail: Bool
    public var gracePeriod: Bool
    /// Renewals after which auto-renew stops (12 in the sandbox); nil for none.
    public var renewalCap: Int?
    /// A period that would end after this date does not start: the subscription expires instead.
    public var horizon: Date

    public init(
        rate: TimeRate, renewalsFail: Bool = false, gracePeriod: Bool = false, renewalCap: Int? = nil,
        horizon: Date = .distantFuture
    ) {
        self.rate = rate
        self.renewalsFail = renewalsFail
        self.gracePeriod = gracePeriod
        self.renewalCap = renewalCap
        self.horizon = horizon
    }
}
