import Foundation
import StoreModel
import StoreTime

/// Monthly billing over a 12-month commitment: each month billed as a renewal, a failed month into billing
/// retry without a grace period (Apple's 90 days), and the commitment's end moved by a late payment.
extension Lifecycle {
    /// The end of a commitment plan's periods from `start` (at most ``SubscriptionCommitment/periodsBound``).
    func commitmentEnd(_ terms: CommitmentTerms, periods: Int, from start: Date) -> Date {
        var end = start
        for _ in 0..<min(max(0, periods), SubscriptionCommitment.periodsBound) {
            end = settings.rate.end(of: terms.billingPeriod, from: end)
        }
        return end
    }

    /// A month of a commitment due at `end`: billed (billing period `number`; 1 starts a new commitment), or,
    /// when billing fails, billing retry without a grace period, for up to 90 days at Apple's rate.
    func commitmentRenewal(_ state: inout SubscriptionState, number: Int, at end: Date) -> [LifecycleEffect] {
        guard settings.renewalsFail else {
            return commitmentPeriod(&state, number: number, start: end, notice: Notice(.didRenew, v1: .didRenew))
        }
        let retryEnds = end.addingTimeInterval(settings.rate.billingRetryPeriod(from: end) * 1.5)
        state.billingRetryEndsDate = retryEnds
        state.expirationIntent = .billingError
        state.status = .billingRetry
        // The month that failed is the one billing retry would pay: the next number, kept for recovery.
        if var commitment = state.commitment, number == 1 {
            commitment.billingPeriodNumber = 0
            state.commitment = commitment
        }
        return [
            .schedule(.billingRetryEnd, at: retryEnds), .notify(Notice(.didFailToRenew, v1: .didFailToRenew)),
        ]
    }

    /// Billing period `number` of the commitment (of the product renewed to), from `start`; `shift` moves the
    /// commitment's end as a late payment does.
    func commitmentPeriod(
        _ state: inout SubscriptionState, number: Int, start: Date, notice: Notice, shift: Bool = false
    ) -> [LifecycleEffect] {
        guard let product = terms(state.productID), let plan = product.commitment else {
            return expire(&state, intent: .productNotAvailable, notice: Notice(.expired, .productNotForSale))
        }
        let expires = settings.rate.end(of: plan.billingPeriod, from: start)
        guard expires <= settings.horizon else { return expire(&state, intent: .other, notice: Notice(.expired)) }
        var commitment =
            state.commitment
            ?? SubscriptionCommitment(billingPeriodNumber: 0, totalBillingPeriods: plan.periods, expiresDate: start)
        if number == 1 {
            commitment = SubscriptionCommitment(
                billingPeriodNumber: 1, totalBillingPeriods: plan.periods,
                expiresDate: commitmentEnd(plan, periods: plan.periods, from: start))
        } else {
            commitment.billingPeriodNumber = number
            if shift {
                let bound = { (count: Int) in min(max(count, 0), SubscriptionCommitment.periodsBound) }
                commitment.expiresDate = commitmentEnd(
                    plan, periods: bound(commitment.totalBillingPeriods) - bound(number) + 1, from: start)
            }
        }
        state.commitment = commitment
        state.billingPlan = .monthly
        state.renewalBillingPlan = nil
        state.status = .active
        state.expiresDate = expires
        state.expirationIntent = nil
        state.gracePeriodExpiresDate = nil
        state.billingRetryEndsDate = nil
        state.offer = nil
        state.offerPeriodsLeft = 0
        if state.priceIncreaseStatus == .accepted, number == 1 { state.priceIncreaseStatus = nil }
        state.renewalCount += 1
        return [
            .startPeriod(productID: state.productID, start: start, expires: expires, reason: .renewal, offer: nil),
            .schedule(.renewal, at: expires), .notify(notice),
        ]
    }
}
