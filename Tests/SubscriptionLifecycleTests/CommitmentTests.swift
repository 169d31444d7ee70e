import Foundation
import StoreModel
import StoreTime
import SubscriptionLifecycle
import Testing

/// Monthly billing over a 12-month commitment (App Store Server API 1.21), on the pure engine.
@Suite("Subscription lifecycle: monthly billing with a 12-month commitment")
struct CommitmentTests {
    static let month: TimeInterval = 300  // monthlyRenewalEveryFiveMinutes
    static let catalogue: [ProductID: ProductTerms] = [
        "yearly": ProductTerms(period: .oneYear, level: 2, commitment: CommitmentTerms()),
        "yearly-plus": ProductTerms(period: .oneYear, level: 1, commitment: CommitmentTerms()),
        "yearly-lite": ProductTerms(period: .oneYear, level: 3),
        "monthly": ProductTerms(period: .oneMonth, level: 2),
    ]

    static func story(fail: Bool = false, grace: Bool = false, cap: Int? = nil) throws -> Story {
        try Story("yearly", fail: fail, grace: grace, cap: cap, catalogue: catalogue, plan: .monthly)
    }

    @Test("Twelve monthly periods make the commitment; at its end a new one begins with period 1")
    func year() throws {
        var story = try Self.story()
        #expect(story.names == ["SUBSCRIBED/INITIAL_BUY"])
        #expect(story.state.billingPlan == .monthly)
        let first = try #require(story.state.commitment)
        #expect(first.billingPeriodNumber == 1 && first.totalBillingPeriods == 12 && first.autoRenew)
        #expect(first.expiresDate == Story.start.addingTimeInterval(12 * Self.month))
        #expect(story.state.expiresDate == Story.start.addingTimeInterval(Self.month), "access is month by month")
        try story.advance(seconds: 11 * Self.month)
        #expect(story.names == ["SUBSCRIBED/INITIAL_BUY"] + Array(repeating: "DID_RENEW", count: 11))
        #expect(story.state.commitment?.billingPeriodNumber == 12)
        #expect(story.periods.allSatisfy { $0.expires.timeIntervalSince($0.start) == Self.month })
        try story.advance(seconds: Self.month)
        #expect(story.state.commitment?.billingPeriodNumber == 1, "the next commitment")
        #expect(story.state.commitment?.expiresDate == Story.start.addingTimeInterval(24 * Self.month))
        #expect(story.names.last == "DID_RENEW" && story.state.status == .active)
    }

    @Test("Cancelling stops the commitment renewing; the months left are billed, then EXPIRED/VOLUNTARY")
    func cancel() throws {
        var story = try Self.story()
        try story.advance(seconds: 5 * Self.month)
        try story.send(.setAutoRenew(false))
        #expect(story.names.last == "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED")
        #expect(story.state.autoRenew, "the subscription still renews month by month")
        #expect(story.state.commitment?.autoRenew == false)
        try story.advance(seconds: 6 * Self.month)
        #expect(story.names.suffix(6) == Array(repeating: "DID_RENEW", count: 6))
        #expect(story.state.commitment?.billingPeriodNumber == 12)
        try story.advance(seconds: Self.month)
        #expect(story.names.last == "EXPIRED/VOLUNTARY")
        #expect(story.state.status == .expired && story.state.expirationIntent == .customerCancelled)
        #expect(story.state.commitment == nil)
        #expect(throws: LifecycleError.self) { try story.send(.setAutoRenew(true)) }
    }

    @Test("A failed month: billing retry without a grace period; recovery bills it and moves the commitment's end")
    func billingRetry() throws {
        var story = try Self.story(fail: true, grace: true)
        try story.advance(seconds: Self.month)
        #expect(story.names.last == "DID_FAIL_TO_RENEW", "no grace period in a commitment")
        #expect(story.state.status == .billingRetry)
        // Recovered a scaled half month late: month 2 starts then; the commitment ends that much later.
        story.now = story.now.addingTimeInterval(Self.month / 2)
        try story.send(.billingRecovered)
        #expect(story.names.last == "DID_RENEW/BILLING_RECOVERY")
        #expect(story.state.commitment?.billingPeriodNumber == 2)
        #expect(story.state.commitment?.expiresDate == Story.start.addingTimeInterval(12.5 * Self.month))
        // Never recovered: 90 days at Apple's rate (1.5 times the usual retry), then EXPIRED/BILLING_RETRY.
        var lost = try Self.story(fail: true)
        try lost.advance(seconds: Self.month)
        #expect(lost.state.billingRetryEndsDate == Story.start.addingTimeInterval(4 * Self.month))
        try lost.advance(seconds: 3 * Self.month)
        #expect(lost.names.last == "EXPIRED/BILLING_RETRY" && lost.state.commitment == nil)
    }

    @Test("An upgrade ends the commitment at once; a downgrade waits for its end and is billed up front")
    func changes() throws {
        var upgraded = try Self.story()
        try upgraded.advance(seconds: 2 * Self.month)
        try upgraded.send(.changeProduct("yearly-plus"))
        #expect(upgraded.state.commitment == nil && upgraded.state.billingPlan == .billedUpfront)
        #expect(upgraded.state.productID == "yearly-plus" && upgraded.ended.last?.refundUnused == true)

        var downgraded = try Self.story()
        try downgraded.send(.changeProduct("yearly-lite"))
        #expect(downgraded.names.last == "DID_CHANGE_RENEWAL_PREF/DOWNGRADE")
        #expect(downgraded.state.commitment?.renewalPlan == .billedUpfront)
        try downgraded.advance(seconds: 11 * Self.month)
        #expect(downgraded.state.productID == "yearly", "the commitment's months stay on its product")
        try downgraded.advance(seconds: Self.month)
        #expect(downgraded.state.productID == "yearly-lite" && downgraded.state.commitment == nil)
        let last = try #require(downgraded.periods.last)
        #expect(last.expires.timeIntervalSince(last.start) == 12 * Self.month, "a year billed up front")

        // Taking the downgrade back (buying the current product again) keeps the commitment's own plan.
        var undone = try Self.story()
        try undone.send(.changeProduct("yearly-lite"))
        try undone.send(.changeProduct("yearly"))
        #expect(undone.state.commitment?.renewalPlan == .monthly && undone.state.autoRenewProductID == "yearly")
    }

    @Test("Switching plans: a yearly subscriber's next renewal starts a commitment; a commitment's end bills up front")
    func switchPlans() throws {
        var upfront = try Story("yearly", catalogue: Self.catalogue)
        try upfront.send(.changePlan("yearly", .monthly))
        #expect(upfront.names.last == "DID_CHANGE_RENEWAL_PREF" && upfront.state.renewalBillingPlan == .monthly)
        #expect(throws: LifecycleError.self) { try upfront.send(.changePlan("yearly", .monthly)) }
        try upfront.advance(seconds: 12 * Self.month)
        #expect(upfront.state.billingPlan == .monthly && upfront.state.commitment?.billingPeriodNumber == 1)
        #expect(
            upfront.state.renewalBillingPlan == nil
                && upfront.state.expiresDate == upfront.now.addingTimeInterval(Self.month))
        var monthly = try Story("monthly", catalogue: Self.catalogue)
        #expect(throws: LifecycleError.self) { try monthly.send(.changePlan("monthly", .monthly)) }

        var committed = try Self.story()
        try committed.send(.changePlan("yearly", .billedUpfront))
        #expect(committed.state.commitment?.renewalPlan == .billedUpfront)
        try committed.advance(seconds: 12 * Self.month)
        #expect(committed.state.commitment == nil && committed.state.billingPlan == .billedUpfront)
        let last = try #require(committed.periods.last)
        #expect(last.expires.timeIntervalSince(last.start) == 12 * Self.month)
    }

    @Test("A refund reversed after the commitment ended renews a year billed up front, labelled so")
    func refundReversal() throws {
        var story = try Self.story()
        try story.send(.refunded(.other))
        try story.send(.refundReversed)
        #expect(story.state.status == .active && story.state.commitment == nil)
        try story.advance(seconds: Self.month)
        #expect(story.state.billingPlan == .billedUpfront, "not MONTHLY: no commitment bills this period")
        let last = try #require(story.periods.last)
        #expect(last.expires.timeIntervalSince(last.start) == 12 * Self.month)
    }

    @Test("Refunding the current month ends the commitment; offers wait for its end; plans need a product with one")
    func refundsAndRefusals() throws {
        var story = try Self.story()
        try story.advance(seconds: Self.month)
        try story.send(.refunded(.other))
        #expect(story.state.status == .revoked && story.state.commitment == nil)
        var offered = try Self.story()
        let offer = OfferTerms(offer: Offer(type: .promotional, identifier: "P"), period: .oneMonth)
        #expect(throws: LifecycleError.self) { try offered.send(.redeemOffer("yearly", offer)) }
        #expect(throws: LifecycleError.self) {
            _ = try Story("monthly", catalogue: Self.catalogue, plan: .monthly)
        }
        // Bought up front, a product with a plan says so.
        let upfront = try Story("yearly", catalogue: Self.catalogue)
        #expect(upfront.state.billingPlan == .billedUpfront && upfront.state.commitment == nil)
    }

    @Test(
        "A damaged state's period counts are bounded: recovery late in a commitment of Int.max months ends",
        .timeLimit(.minutes(1)))
    func damagedCounts() throws {
        var story = try Self.story(fail: true)
        try story.advance(seconds: Self.month)
        #expect(story.state.status == .billingRetry)
        story.state.commitment?.totalBillingPeriods = .max
        try story.send(.billingRecovered)
        #expect(story.state.commitment?.billingPeriodNumber == 2)
        let bound = SubscriptionCommitment.periodsBound
        #expect(
            story.state.commitment?.expiresDate == story.now.addingTimeInterval(Double(bound - 1) * Self.month),
            "the end steps through at most the bound's periods")
        // The number itself at its largest: the next one is not past the bound.
        story.state.commitment?.billingPeriodNumber = .max
        story.state.status = .billingRetry
        try story.send(.billingRecovered)
        #expect(story.state.commitment?.billingPeriodNumber == bound, "at most the bound, as storage reads it back")
    }
}
