import Foundation
import StoreModel
import StoreTime
import SubscriptionLifecycle
import Testing

/// A subscription driven by the pure engine and a fake clock: due work is kept as the effects ask, and
/// `advance` runs it in time order, as the emulator's scheduler does.
struct Story {
    static let start = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z
    static let catalogue: [ProductID: ProductTerms] = [
        "monthly": ProductTerms(period: .oneMonth, level: 2), "yearly": ProductTerms(period: .oneYear, level: 1),
        "premium-monthly": ProductTerms(period: .oneMonth, level: 1),
        "basic-monthly": ProductTerms(period: .oneMonth, level: 3),
        "other-monthly": ProductTerms(period: .oneMonth, level: 2),
        "weekly": ProductTerms(period: .oneWeek, level: 2), "retired": ProductTerms(period: .oneMonth, forSale: false),
    ]

    var engine: Lifecycle
    var state: SubscriptionState
    var now = Story.start
    var due: [DueKind: Date] = [:]
    var notices: [Notice] = []
    var periods: [(product: ProductID, start: Date, expires: Date, reason: TransactionReason)] = []
    var ended: [(at: Date, refundUnused: Bool)] = []
    var revocations: [RevocationReason?] = []

    /// The offer of each period started (nil: full price).
    var offers: [Offer?] = []

    init(
        _ product: ProductID = "monthly", rate: TimeRate = .monthlyRenewalEveryFiveMinutes, fail: Bool = false,
        grace: Bool = false, cap: Int? = nil, catalogue: [ProductID: ProductTerms] = Story.catalogue,
        offer: OfferTerms? = nil, plan: BillingPlanType? = nil
    ) throws {
        engine = Lifecycle(
            settings: LifecycleSettings(rate: rate, renewalsFail: fail, gracePeriod: grace, renewalCap: cap),
            terms: { catalogue[$0] })
        let (state, effects) = try engine.subscribe(
            originalTransactionID: "1000", productID: product, at: Story.start, resubscribe: false, offer: offer,
            plan: plan)
        self.state = state
        apply(effects)
    }

    mutating func apply(_ effects: [LifecycleEffect]) {
        for effect in effects {
            switch effect {
            case .schedule(let kind, let at): due[kind] = at
            case .unschedule(let kind): due[kind] = nil
            case .notify(let notice): notices.append(notice)
            case .startPeriod(let product, let start, let expires, let reason, let offer):
                periods.append((product, start, expires, reason))
                offers.append(offer)
            case .endLatestPeriod(let at, let refundUnused): ended.append((at, refundUnused))
            case .revokeLatest(let reason, _): revocations.append(reason)
            }
        }
    }

    /// Runs every due event up to `date`, earliest first.
    mutating func advance(to date: Date) throws {
        var handled = 0
        while let (kind, at) = due.filter({ $0.value <= date }).min(by: { $0.value < $1.value }) {
            handled += 1
            guard handled <= 100_000 else {
                Issue.record("more than 100,000 due events before \(date): work that makes itself due again")
                return
            }
            due[kind] = nil
            now = at
            let event: LifecycleEvent =
                switch kind {
                case .renewal: .periodEnded
                case .gracePeriodEnd: .gracePeriodEnded
                case .billingRetryEnd: .billingRetryEnded
                }
            apply(try engine.handle(event, to: &state, at: at))
        }
        now = date
    }

    mutating func advance(seconds: TimeInterval) throws { try advance(to: now.addingTimeInterval(seconds)) }

    mutating func send(_ event: LifecycleEvent) throws { apply(try engine.handle(event, to: &state, at: now)) }

    var names: [String] { notices.map(\.description) }
}

@Suite("Subscription lifecycle (pure engine, fake clock)")
struct LifecycleTests {
    static let month: TimeInterval = 300  // monthlyRenewalEveryFiveMinutes

    @Test("Initial buy, then renewals every scaled month, each a DID_RENEW with a new period")
    func renewals() throws {
        var story = try Story()
        #expect(story.names == ["SUBSCRIBED/INITIAL_BUY"])
        #expect(story.notices[0].v1Type == "INITIAL_BUY")
        #expect(story.state.expiresDate == Story.start.addingTimeInterval(Self.month))
        try story.advance(seconds: 3 * Self.month + 1)
        #expect(story.names == ["SUBSCRIBED/INITIAL_BUY", "DID_RENEW", "DID_RENEW", "DID_RENEW"])
        #expect(story.periods.map(\.reason) == [.renewal, .renewal, .renewal])
        #expect(story.periods[1].start == story.periods[0].expires, "each period starts where the last ended")
        #expect(story.state.renewalCount == 3)
        #expect(story.state.status == .active)
        #expect(story.notices[1].v1Type == "DID_RENEW")
    }

    @Test("Resubscribing after expiry is SUBSCRIBED/RESUBSCRIBE (V1 INTERACTIVE_RENEWAL)")
    func resubscribe() throws {
        let engine = Lifecycle(settings: LifecycleSettings(rate: .realTime), terms: { Story.catalogue[$0] })
        let (state, effects) = try engine.subscribe(
            originalTransactionID: "1", productID: "monthly", at: Story.start, resubscribe: true)
        #expect(effects.first == .notify(Notice(.subscribed, .resubscribe, v1: "INTERACTIVE_RENEWAL")))
        #expect(state.expiresDate == StorePeriod.oneMonth.added(to: Story.start))
        #expect(throws: LifecycleError.self) {
            try engine.subscribe(originalTransactionID: "2", productID: "retired", at: Story.start, resubscribe: false)
        }
    }

    @Test("Billing failure without grace: billing retry for two scaled months, then EXPIRED/BILLING_RETRY")
    func billingRetryExpires() throws {
        var story = try Story(fail: true)
        try story.advance(seconds: Self.month)
        #expect(story.names.last == "DID_FAIL_TO_RENEW")
        #expect(story.state.status == .billingRetry)
        #expect(story.state.expirationIntent == .billingError, "in billing retry the period expired for billing")
        #expect(story.state.billingRetryEndsDate == Story.start.addingTimeInterval(3 * Self.month))
        #expect(story.periods.isEmpty, "a failed renewal starts no period")
        try story.advance(seconds: 2 * Self.month)
        #expect(story.names.last == "EXPIRED/BILLING_RETRY")
        #expect(story.state.status == .expired)
        #expect(story.state.expirationIntent == .billingError)
        #expect(story.due.isEmpty)
    }

    @Test("Billing failure with grace: DID_FAIL_TO_RENEW/GRACE_PERIOD, GRACE_PERIOD_EXPIRED, then recovery")
    func graceAndRecovery() throws {
        var story = try Story(fail: true, grace: true)
        try story.advance(seconds: Self.month)
        #expect(story.names.last == "DID_FAIL_TO_RENEW/GRACE_PERIOD")
        #expect(story.state.status == .billingGracePeriod)
        #expect(story.state.expirationIntent == .billingError)
        // Half a scaled month of grace (2 min 30 s at monthly/5 min, as Apple's table).
        #expect(story.state.gracePeriodExpiresDate == Story.start.addingTimeInterval(Self.month + 150))
        try story.advance(seconds: 151)
        #expect(story.names.last == "GRACE_PERIOD_EXPIRED")
        #expect(story.notices.last?.v1Type == nil, "V1 has no grace-expiry notification")
        #expect(story.state.status == .billingRetry)
        try story.advance(seconds: 60)
        try story.send(.billingRecovered)
        #expect(story.names.last == "DID_RENEW/BILLING_RECOVERY")
        #expect(story.notices.last?.v1Type == "DID_RECOVER")
        #expect(story.state.status == .active)
        #expect(story.state.expirationIntent == nil, "a recovered subscription has not expired")
        #expect(story.periods.last?.start == story.now, "recovery starts a new period at once")
        #expect(story.due[.billingRetryEnd] == nil && story.due[.renewal] == story.state.expiresDate)
        #expect(throws: LifecycleError.self) { try story.send(.billingRecovered) }
    }

    @Test("Recovered within the grace period, the billing date is kept: the new period runs from the old one's end")
    func recoveryInGrace() throws {
        var story = try Story(fail: true, grace: true)
        try story.advance(seconds: Self.month)
        let billed = try #require(story.state.expiresDate)
        try story.advance(seconds: 60)
        #expect(story.state.status == .billingGracePeriod)
        try story.send(.billingRecovered)
        #expect(story.names.last == "DID_RENEW/BILLING_RECOVERY")
        #expect(story.periods.last?.start == billed, "not the day of recovery, \(story.now)")
        #expect(story.state.expiresDate == billed.addingTimeInterval(Self.month))
        #expect(story.due[.renewal] == story.state.expiresDate && story.due[.gracePeriodEnd] == nil)
    }

    @Test("Grace periods follow the rate: 6/7 of a scaled week for weekly subscriptions, 16 days in real time")
    func graceLengths() throws {
        var weekly = try Story("weekly", fail: true, grace: true)
        try weekly.advance(seconds: 180)
        #expect(weekly.state.gracePeriodExpiresDate == Story.start.addingTimeInterval(180 + 180 * 6 / 7))
        var real = try Story(rate: .realTime, fail: true, grace: true)
        try real.advance(to: try #require(real.state.expiresDate))
        let failed = try #require(real.state.expiresDate)
        #expect(real.state.gracePeriodExpiresDate == failed.addingTimeInterval(16 * 86_400))
        #expect(real.state.billingRetryEndsDate == failed.addingTimeInterval(60 * 86_400))
    }

    @Test("Auto-renew off: DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED, then EXPIRED/VOLUNTARY at the period's end")
    func voluntary() throws {
        var story = try Story()
        try story.send(.setAutoRenew(false))
        #expect(story.names.last == "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED")
        try story.send(.setAutoRenew(false))
        #expect(story.notices.count == 2, "no change, no notification")
        try story.send(.setAutoRenew(true))
        #expect(story.names.last == "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_ENABLED")
        try story.send(.setAutoRenew(false))
        try story.advance(seconds: Self.month)
        #expect(story.names.last == "EXPIRED/VOLUNTARY")
        #expect(story.state.expirationIntent == .customerCancelled)
        #expect(story.notices.last?.v1Type == nil, "V1 has no expiry notification")
        #expect(throws: LifecycleError.self) { try story.send(.setAutoRenew(true)) }
    }

    @Test("Price increase: PENDING then ACCEPTED renews; PENDING unanswered or declined expires with PRICE_INCREASE")
    func priceIncrease() throws {
        var accepted = try Story()
        try accepted.send(.priceIncrease(requiresConsent: true))
        #expect(accepted.names.last == "PRICE_INCREASE/PENDING")
        #expect(accepted.notices.last?.v1Type == "PRICE_INCREASE_CONSENT")
        try accepted.send(.priceConsent(true))
        #expect(accepted.names.last == "PRICE_INCREASE/ACCEPTED")
        try accepted.advance(seconds: Self.month)
        #expect(accepted.names.last == "DID_RENEW")
        #expect(accepted.state.priceIncreaseStatus == nil, "settled by the renewal at the new price")

        var unanswered = try Story()
        try unanswered.send(.priceIncrease(requiresConsent: true))
        try unanswered.advance(seconds: Self.month)
        #expect(unanswered.names.last == "EXPIRED/PRICE_INCREASE")
        #expect(unanswered.state.expirationIntent == .didNotConsentToPriceIncrease)

        var declined = try Story()
        try declined.send(.priceIncrease(requiresConsent: true))
        try declined.send(.priceConsent(false))
        #expect(declined.names.last == "DID_CHANGE_RENEWAL_STATUS")
        #expect(!declined.state.autoRenew)
        try declined.advance(seconds: Self.month)
        #expect(declined.names.last == "EXPIRED/PRICE_INCREASE")

        var notified = try Story()
        try notified.send(.priceIncrease(requiresConsent: false))
        #expect(notified.names.last == "PRICE_INCREASE/ACCEPTED")
        #expect(throws: LifecycleError.self) { try notified.send(.priceConsent(true)) }
    }

    @Test("A product removed from sale expires at renewal with PRODUCT_NOT_FOR_SALE")
    func notForSale() throws {
        var catalogue = Story.catalogue
        var story = try Story(catalogue: catalogue)
        catalogue["monthly"]?.forSale = false
        let retired = catalogue
        story.engine.terms = { retired[$0] }
        try story.advance(seconds: Self.month)
        #expect(story.names.last == "EXPIRED/PRODUCT_NOT_FOR_SALE")
        #expect(story.state.expirationIntent == .productNotAvailable)
    }

    @Test("Upgrade: immediate, the unused part refunded, a new period now; downgrade at renewal; revert")
    func changes() throws {
        var upgrade = try Story()
        try upgrade.advance(seconds: 100)
        try upgrade.send(.changeProduct("premium-monthly"))
        #expect(upgrade.names.last == "DID_CHANGE_RENEWAL_PREF/UPGRADE")
        #expect(upgrade.notices.last?.v1Type == "INTERACTIVE_RENEWAL")
        #expect(upgrade.ended.count == 1 && upgrade.ended[0].refundUnused && upgrade.ended[0].at == upgrade.now)
        #expect(upgrade.periods.last?.product == "premium-monthly" && upgrade.periods.last?.start == upgrade.now)
        #expect(upgrade.state.productID == "premium-monthly")
        #expect(upgrade.due[.renewal] == upgrade.now.addingTimeInterval(Self.month))

        var downgrade = try Story()
        try downgrade.send(.changeProduct("basic-monthly"))
        #expect(downgrade.names.last == "DID_CHANGE_RENEWAL_PREF/DOWNGRADE")
        #expect(downgrade.state.productID == "monthly" && downgrade.state.autoRenewProductID == "basic-monthly")
        #expect(downgrade.periods.isEmpty, "nothing changes until the renewal")
        try downgrade.send(.changeProduct("monthly"))
        #expect(downgrade.names.last == "DID_CHANGE_RENEWAL_PREF", "reverting a downgrade has no subtype")
        #expect(downgrade.state.autoRenewProductID == "monthly")
        // Buying the current product again after turning auto-renew off turns it back on: Apple's
        // AUTO_RENEW_ENABLED, not a change of preference.
        var again = try Story()
        try again.send(.setAutoRenew(false))
        let before = again.names.count
        try again.send(.changeProduct("monthly"))
        #expect(Array(again.names.dropFirst(before)) == ["DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_ENABLED"])
        #expect(again.state.autoRenew)
        try downgrade.send(.changeProduct("basic-monthly"))
        try downgrade.advance(seconds: Self.month)
        #expect(downgrade.periods.last?.product == "basic-monthly")
        #expect(downgrade.names.last == "DID_RENEW")

        var crossgrade = try Story()
        try crossgrade.send(.changeProduct("other-monthly"))
        #expect(crossgrade.names.last == "DID_CHANGE_RENEWAL_PREF/UPGRADE", "same level, same duration: now")
        var longer = try Story()
        try longer.send(.changeProduct("weekly"))
        #expect(longer.names.last == "DID_CHANGE_RENEWAL_PREF/DOWNGRADE", "same level, other duration: at renewal")
        #expect(throws: LifecycleError.self) { try longer.send(.changeProduct("retired")) }
    }

    @Test("Refund revokes the latest period (V1 CANCEL); a reversal reinstates it and keeps the renewal date")
    func refunds() throws {
        var story = try Story()
        try story.advance(seconds: 60)
        try story.send(.refunded(.appIssue))
        #expect(story.names.last == "REFUND")
        #expect(story.notices.last?.v1Type == "CANCEL")
        #expect(story.state.status == .revoked)
        #expect(story.revocations == [.appIssue])
        #expect(story.due.isEmpty)
        #expect(throws: LifecycleError.self) { try story.send(.refunded(.other)) }
        try story.send(.refundReversed)
        #expect(story.names.last == "REFUND_REVERSED")
        #expect(story.state.status == .active)
        #expect(story.revocations.last == .some(nil))
        #expect(story.due[.renewal] == Story.start.addingTimeInterval(Self.month))
        try story.advance(seconds: Self.month)
        #expect(story.names.last == "DID_RENEW")
    }

    @Test("Expire now and force renewal end the period at once; both refuse an ended subscription")
    func verbs() throws {
        var expired = try Story()
        try expired.advance(seconds: 30)
        try expired.send(.expireNow)
        #expect(expired.names.last == "EXPIRED/VOLUNTARY")
        #expect(expired.state.expiresDate == expired.now)
        #expect(expired.ended.map(\.at) == [expired.now])
        #expect(expired.due.isEmpty)
        #expect(throws: LifecycleError.self) { try expired.send(.expireNow) }
        #expect(throws: LifecycleError.self) { try expired.send(.forceRenewal) }

        var renewed = try Story()
        try renewed.advance(seconds: 30)
        try renewed.send(.forceRenewal)
        #expect(renewed.names.last == "DID_RENEW")
        #expect(renewed.periods.last?.start == renewed.now)
        #expect(renewed.due[.renewal] == renewed.now.addingTimeInterval(Self.month))
    }

    @Test("The sandbox's renewal cap turns auto-renew off: twelve renewals, then EXPIRED/VOLUNTARY")
    func cap() throws {
        var story = try Story(cap: 12)
        try story.advance(seconds: 20 * Self.month)
        #expect(story.periods.count == 12)
        #expect(story.names.last == "EXPIRED/VOLUNTARY")
        #expect(story.due.isEmpty)
    }

    @Test("A stale due event (already handled, or for a state that moved on) changes nothing")
    func staleEvents() throws {
        var story = try Story()
        let before = story.state
        #expect(try story.engine.handle(.periodEnded, to: &story.state, at: Story.start).isEmpty)
        #expect(try story.engine.handle(.gracePeriodEnded, to: &story.state, at: Story.start).isEmpty)
        #expect(try story.engine.handle(.billingRetryEnded, to: &story.state, at: Story.start).isEmpty)
        #expect(story.state == before)
    }

    @Test("A period that would end past the horizon is not started: the subscription expires")
    func horizon() throws {
        let horizon = Story.start.addingTimeInterval(1.5 * Self.month)
        var story = try Story()
        story.engine.settings.horizon = horizon
        try story.advance(seconds: 3 * Self.month)
        #expect(story.names == ["SUBSCRIBED/INITIAL_BUY", "EXPIRED"])
        #expect(story.state.expirationIntent == .other)
    }

    @Test("A period of no time is not started (it would renew at once, without end): the subscription expires")
    func zeroPeriod() throws {
        for rate in [TimeRate.realTime, .monthlyRenewalEveryFiveMinutes, .oneSecondIsOneDay] {
            var catalogue = Story.catalogue
            catalogue["nothing"] = ProductTerms(period: StorePeriod(days: 0), level: 2)
            var story = try Story("nothing", rate: rate, catalogue: catalogue)
            try story.advance(seconds: Self.month)
            #expect(story.periods.count == 0, "\(rate.name)")
            #expect(story.state.status == .expired && story.state.expirationIntent == .other, "\(rate.name)")
            #expect(story.due.isEmpty, "\(rate.name): nothing left to run")
        }
    }

    @Test("A thousand random stories keep the invariants: one schedule per state, no renewal while ended")
    func invariants() throws {
        for seed in 0..<1_000 {
            var random = SplitMix(seed: UInt64(seed))
            var story = try Story(fail: random.next() % 3 == 0, grace: random.next() % 2 == 0)
            for _ in 0..<20 {
                let events: [LifecycleEvent] = [
                    .setAutoRenew(random.next() % 2 == 0), .billingRecovered, .expireNow, .forceRenewal,
                    .refunded(.other), .refundReversed, .priceIncrease(requiresConsent: random.next() % 2 == 0),
                    .priceConsent(random.next() % 2 == 0), .changeProduct("premium-monthly"),
                    .changeProduct("basic-monthly"), .changeProduct("monthly"),
                ]
                if random.next() % 2 == 0 {
                    try story.advance(seconds: Double(random.next() % 900))
                } else {
                    _ = try? story.send(events[Int(random.next() % UInt64(events.count))])
                }
                let state = story.state
                switch state.status {
                case .active:
                    #expect(story.due[.renewal] == state.expiresDate, "seed \(seed)")
                    #expect(story.due[.billingRetryEnd] == nil, "seed \(seed)")
                case .expired, .revoked:
                    #expect(story.due[.renewal] == nil && story.due[.billingRetryEnd] == nil, "seed \(seed)")
                case .billingRetry, .billingGracePeriod:
                    #expect(story.due[.billingRetryEnd] == state.billingRetryEndsDate, "seed \(seed)")
                    #expect(story.due[.renewal] == nil, "seed \(seed)")
                }
                #expect((state.status == .billingGracePeriod) == (story.due[.gracePeriodEnd] != nil), "seed \(seed)")
            }
        }
    }
}

@Suite("Lifecycle engine: offers")
struct LifecycleOfferTests {
    static let day: TimeInterval = 86_400
    static let weekly = OfferTerms(
        offer: Offer(type: .introductory, discountType: .payAsYouGo, period: "P1W"), period: .oneWeek, periods: 3)

    @Test("Pay as you go: the first period and the next two renewals are the offer's; then the product's own")
    func payAsYouGo() throws {
        var story = try Story(rate: .realTime, offer: Self.weekly)
        #expect(story.state.expiresDate == Story.start.addingTimeInterval(7 * Self.day))
        #expect(story.state.offerPeriodsLeft == 2)
        try story.advance(to: Story.start.addingTimeInterval(14 * Self.day))
        #expect(story.offers.map { $0?.type } == [.introductory, .introductory])
        #expect(story.state.offerPeriodsLeft == 0)
        #expect(story.periods.last?.expires == Story.start.addingTimeInterval(21 * Self.day))
        try story.advance(to: Story.start.addingTimeInterval(21 * Self.day))
        #expect(story.offers.last == .some(nil), "the fourth period is at full price")
        #expect(story.state.offer == nil)
        let fourth = try #require(story.periods.last)
        #expect(fourth.expires.timeIntervalSince(fourth.start) > 27 * Self.day, "a month")
    }

    @Test("A subscriber's offer: the same product from the next renewal, an upgrade now, a downgrade at renewal")
    func redeem() throws {
        let promo = OfferTerms(
            offer: Offer(type: .promotional, identifier: "BACK", discountType: .payUpFront, period: "P1M"),
            period: .oneMonth, periods: 1)
        var same = try Story(rate: .realTime)
        same.now = Story.start.addingTimeInterval(Self.day)
        try same.send(.redeemOffer("monthly", promo))
        #expect(same.names.last == "OFFER_REDEEMED")
        #expect(same.periods.isEmpty, "nothing changes before the renewal")
        try same.advance(to: Story.start.addingTimeInterval(70 * Self.day))
        #expect(same.offers.map { $0?.identifier } == ["BACK", nil])

        var up = try Story(rate: .realTime)
        up.now = Story.start.addingTimeInterval(Self.day)
        try up.send(.redeemOffer("premium-monthly", promo))
        #expect(up.names.last == "OFFER_REDEEMED/UPGRADE")
        #expect(up.ended.last?.refundUnused == true)
        #expect(up.periods.last?.product == "premium-monthly" && up.offers.last??.identifier == "BACK")
        #expect(up.state.offerPeriodsLeft == 0)

        var down = try Story(rate: .realTime)
        try down.send(.redeemOffer("basic-monthly", promo))
        #expect(down.names.last == "OFFER_REDEEMED/DOWNGRADE")
        #expect(down.state.productID == "monthly" && down.state.autoRenewProductID == "basic-monthly")
        try down.advance(to: Story.start.addingTimeInterval(40 * Self.day))
        #expect(down.periods.first?.product == "basic-monthly" && down.offers.first??.identifier == "BACK")

        var ended = try Story(rate: .realTime)
        try ended.send(.expireNow)
        #expect(throws: LifecycleError.self) { try ended.send(.redeemOffer("monthly", promo)) }
    }

    @Test("Changing product ends a running offer")
    func changeEndsOffer() throws {
        var story = try Story(rate: .realTime, offer: Self.weekly)
        try story.send(.changeProduct("premium-monthly"))
        #expect(story.state.offer == nil && story.state.offerPeriodsLeft == 0)
        #expect(story.offers.last == .some(nil))
    }
}

/// A small deterministic generator for reproducible random stories.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
