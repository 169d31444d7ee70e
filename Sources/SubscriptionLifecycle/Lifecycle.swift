public import Foundation
public import StoreModel
import StoreTime

/// The subscription lifecycle as a pure state machine over ``SubscriptionState``: an event and the time it
/// happens in, effects out. No clock, storage or I/O: the store applies the effects.
public struct Lifecycle: Sendable {
    public var settings: LifecycleSettings
    public var terms: @Sendable (ProductID) -> ProductTerms?

    public init(settings: LifecycleSettings, terms: @escaping @Sendable (ProductID) -> ProductTerms?) {
        self.settings = settings
        self.terms = terms
    }

    /// A first purchase in the group (`resubscribe` after an earlier one expired): the state and its effects.
    /// With an offer, the first period is its first discounted one. With the monthly plan of a product sold
    /// with a commitment, the first period is the commitment's first month.
    public func subscribe(
        originalTransactionID: TransactionID, productID: ProductID, at now: Date, resubscribe: Bool,
        offer: OfferTerms? = nil, plan: BillingPlanType? = nil
    ) throws(LifecycleError) -> (SubscriptionState, [LifecycleEffect]) {
        guard let product = terms(productID) else { throw LifecycleError("\(productID) is not a subscription") }
        guard product.forSale else { throw LifecycleError("\(productID) is not for sale") }
        if plan == .monthly {
            guard let commitment = product.commitment else {
                throw LifecycleError("\(productID) has no monthly plan with a commitment")
            }
            guard offer == nil else { throw LifecycleError("offers for the monthly plan are not modelled") }
            let expires = settings.rate.end(of: commitment.billingPeriod, from: now)
            var state = SubscriptionState(
                originalTransactionID: originalTransactionID, productID: productID, expiresDate: expires)
            state.billingPlan = .monthly
            state.commitment = SubscriptionCommitment(
                billingPeriodNumber: 1, totalBillingPeriods: commitment.periods,
                expiresDate: commitmentEnd(commitment, periods: commitment.periods, from: now))
            let notice =
                resubscribe
                ? Notice(.subscribed, .resubscribe, v1: .interactiveRenewal)
                : Notice(.subscribed, .initialBuy, v1: .initialBuy)
            return (state, [.notify(notice), .schedule(.renewal, at: expires)])
        }
        let expires = settings.rate.end(of: offer?.period ?? product.period, from: now)
        var state = SubscriptionState(
            originalTransactionID: originalTransactionID, productID: productID, expiresDate: expires)
        if product.hasBillingPlans { state.billingPlan = .billedUpfront }
        if let offer {
            state.offer = offer.offer
            state.offerPeriodsLeft = offer.periods - 1
        }
        let notice =
            resubscribe
            ? Notice(.subscribed, .resubscribe, v1: .interactiveRenewal)
            : Notice(.subscribed, .initialBuy, v1: .initialBuy)
        return (state, [.notify(notice), .schedule(.renewal, at: expires)])
    }

    /// Applies `event` at `now` to `state`; throws, leaving `state` unchanged, when the event does not apply.
    public func handle(_ event: LifecycleEvent, to state: inout SubscriptionState, at now: Date)
        throws(LifecycleError) -> [LifecycleEffect]
    {
        var next = state
        let effects = try transition(event, &next, now)
        state = next
        return effects
    }

    private func transition(_ event: LifecycleEvent, _ state: inout SubscriptionState, _ now: Date)
        throws(LifecycleError) -> [LifecycleEffect]
    {
        switch event {
        case .periodEnded:
            guard state.status == .active, let expires = state.expiresDate, expires <= now else { return [] }
            return periodEnd(&state, at: expires)

        case .gracePeriodEnded:
            guard state.status == .billingGracePeriod else { return [] }
            state.status = .billingRetry
            state.gracePeriodExpiresDate = nil
            return [.notify(Notice(.gracePeriodExpired))]

        case .billingRetryEnded:
            guard state.isInBillingRetry else { return [] }
            return expire(&state, intent: .billingError, notice: Notice(.expired, .billingRetry))
                + [.unschedule(.gracePeriodEnd)]

        case .billingRecovered:
            guard state.isInBillingRetry else {
                throw LifecycleError("subscription \(state.originalTransactionID) has no billing issue to resolve")
            }
            let recoveringInGrace = state.status == .billingGracePeriod
            state.gracePeriodExpiresDate = nil
            state.billingRetryEndsDate = nil
            if state.commitment == nil, state.renewalBillingPlan == .monthly,
                terms(state.autoRenewProductID)?.commitment != nil
            {
                // The renewal that failed was to start a commitment: it starts now.
                state.productID = state.autoRenewProductID
                return [.unschedule(.gracePeriodEnd), .unschedule(.billingRetryEnd)]
                    + commitmentPeriod(
                        &state, number: 1, start: now, notice: Notice(.didRenew, .billingRecovery, v1: .didRecover))
            }
            if let commitment = state.commitment {
                // The month paid late starts now: the commitment's end moves with it.
                return [.unschedule(.gracePeriodEnd), .unschedule(.billingRetryEnd)]
                    + commitmentPeriod(
                        &state,
                        number: min(commitment.billingPeriodNumber, SubscriptionCommitment.periodsBound - 1) + 1,
                        start: now,
                        notice: Notice(.didRenew, .billingRecovery, v1: .didRecover), shift: true)
            }
            // Recovered within the grace period, the billing date is kept: the new period runs from the end of
            // the one that failed to renew (Apple: "the existing billing date is maintained"). Recovered later, in
            // billing retry, it starts on the day of recovery.
            var start = now
            if recoveringInGrace, let billed = state.expiresDate, let product = terms(state.autoRenewProductID),
                settings.rate.end(of: product.period, from: billed) > now
            {
                start = billed
            }
            return [.unschedule(.gracePeriodEnd), .unschedule(.billingRetryEnd)]
                + startPeriod(
                    &state, productID: state.autoRenewProductID, start: start, reason: .renewal,
                    notice: Notice(.didRenew, .billingRecovery, v1: .didRecover))

        case .setAutoRenew(let enabled):
            guard state.status != .expired, state.status != .revoked else {
                throw LifecycleError("subscription \(state.originalTransactionID) has ended; buy it again instead")
            }
            if var commitment = state.commitment {
                // Cancelling a commitment stops it renewing; the months left are still billed.
                guard commitment.autoRenew != enabled else { return [] }
                commitment.autoRenew = enabled
                state.commitment = commitment
                return [
                    .notify(
                        Notice(
                            .didChangeRenewalStatus, enabled ? .autoRenewEnabled : .autoRenewDisabled,
                            v1: .didChangeRenewalStatus))
                ]
            }
            guard state.autoRenew != enabled else { return [] }
            state.autoRenew = enabled
            // Turning it off after a price-increase notice is Apple's "no subtype" case.
            let subtype: NotificationSubtype? =
                enabled ? .autoRenewEnabled : (state.priceIncreaseStatus == .pending ? nil : .autoRenewDisabled)
            return [.notify(Notice(.didChangeRenewalStatus, subtype, v1: .didChangeRenewalStatus))]

        case .expireNow:
            guard state.status != .expired, state.status != .revoked else {
                throw LifecycleError("subscription \(state.originalTransactionID) has already ended")
            }
            let wasActive = state.status == .active
            state.autoRenew = false
            var effects: [LifecycleEffect] = wasActive ? [.endLatestPeriod(at: now, refundUnused: false)] : []
            effects += [.unschedule(.renewal), .unschedule(.gracePeriodEnd), .unschedule(.billingRetryEnd)]
            if wasActive { state.expiresDate = now }
            return effects + expire(&state, intent: .customerCancelled, notice: Notice(.expired, .voluntary))

        case .forceRenewal:
            guard state.status == .active else {
                throw LifecycleError("subscription \(state.originalTransactionID) is not active")
            }
            state.expiresDate = now
            return [.endLatestPeriod(at: now, refundUnused: false), .unschedule(.renewal)]
                + periodEnd(&state, at: now)

        case .refunded(let reason):
            guard state.status != .revoked else {
                throw LifecycleError("subscription \(state.originalTransactionID) is already refunded")
            }
            state.status = .revoked
            state.autoRenew = false
            state.gracePeriodExpiresDate = nil
            state.billingRetryEndsDate = nil
            // Refunding the current month ends the commitment.
            state.commitment = nil
            return [
                .revokeLatest(reason, at: now), .unschedule(.renewal), .unschedule(.gracePeriodEnd),
                .unschedule(.billingRetryEnd), .notify(Notice(.refund, v1: .cancel)),
            ]

        case .refundReversed:
            guard state.status == .revoked else {
                throw LifecycleError("subscription \(state.originalTransactionID) has no refund to reverse")
            }
            // The renewal date is kept; if it already passed, the subscription is simply expired.
            var effects: [LifecycleEffect] = [.revokeLatest(nil, at: now)]
            if let expires = state.expiresDate, expires > now {
                state.status = .active
                state.autoRenew = true
                effects.append(.schedule(.renewal, at: expires))
            } else {
                state.status = .expired
                state.expirationIntent = state.expirationIntent ?? .other
            }
            return effects + [.notify(Notice(.refundReversed))]

        case .extendRenewal(let days):
            guard state.status == .active, let expires = state.expiresDate, expires > now else {
                throw LifecycleError("subscription \(state.originalTransactionID) is not active")
            }
            guard (1...90).contains(days) else { throw LifecycleError("an extension is 1 to 90 days") }
            let extended = settings.rate.end(of: StorePeriod(days: days), from: expires)
            guard extended <= settings.horizon else {
                throw LifecycleError("the extended renewal date would pass the store's horizon")
            }
            state.expiresDate = extended
            return [
                .endLatestPeriod(at: extended, refundUnused: false), .schedule(.renewal, at: extended),
                .notify(Notice(.renewalExtended)),
            ]

        case .priceIncrease(let requiresConsent):
            guard state.status == .active || state.isInBillingRetry else { return [] }
            state.priceIncreaseStatus = requiresConsent ? .pending : .accepted
            return [
                .notify(
                    requiresConsent
                        ? Notice(.priceIncrease, .pending, v1: .priceIncreaseConsent)
                        : Notice(.priceIncrease, .accepted))
            ]

        case .priceConsent(let consent):
            guard state.priceIncreaseStatus == .pending else {
                throw LifecycleError(
                    "subscription \(state.originalTransactionID) has no price increase awaiting consent")
            }
            if consent {
                state.priceIncreaseStatus = .accepted
                return [.notify(Notice(.priceIncrease, .accepted))]
            }
            // Declining turns auto-renew off; the status stays pending, so the expiry says why.
            guard state.autoRenew else { return [] }
            state.autoRenew = false
            return [.notify(Notice(.didChangeRenewalStatus, v1: .didChangeRenewalStatus))]

        case .changeProduct(let productID):
            return try change(&state, to: productID, at: now)

        case .changePlan(let productID, let plan):
            guard let new = terms(productID), new.forSale else { throw LifecycleError("\(productID) is not for sale") }
            if plan == .monthly, new.commitment == nil {
                throw LifecycleError("\(productID) has no monthly plan with a commitment")
            }
            guard productID == state.productID else {
                // Another product: bought as a change of product, then on that plan from its next renewal.
                let effects = try change(&state, to: productID, at: now)
                if plan == .monthly {
                    if var commitment = state.commitment {
                        commitment.renewalPlan = .monthly
                        state.commitment = commitment
                    } else {
                        state.renewalBillingPlan = .monthly
                    }
                }
                return effects
            }
            guard state.status == .active || state.isInBillingRetry else {
                throw LifecycleError("subscription \(state.originalTransactionID) has ended")
            }
            if var commitment = state.commitment {
                guard commitment.renewalPlan != plan || !commitment.autoRenew else {
                    throw LifecycleError("already renewing on \(plan.rawValue)")
                }
                commitment.renewalPlan = plan
                commitment.autoRenew = true
                state.commitment = commitment
            } else {
                guard (state.renewalBillingPlan ?? state.billingPlan ?? .billedUpfront) != plan else {
                    throw LifecycleError("already renewing on \(plan.rawValue)")
                }
                state.renewalBillingPlan = plan == .monthly ? .monthly : nil
            }
            state.autoRenewProductID = productID
            state.autoRenew = true
            return [.notify(Notice(.didChangeRenewalPref, v1: .didChangeRenewalPref))]

        case .redeemOffer(let productID, let offer):
            guard state.commitment == nil else {
                throw LifecycleError(
                    "subscription \(state.originalTransactionID) is in a commitment: offers apply after it ends")
            }
            guard state.status == .active || state.isInBillingRetry else {
                throw LifecycleError(
                    "subscription \(state.originalTransactionID) has ended; an offer for it is a resubscription")
            }
            guard let new = terms(productID), new.forSale else { throw LifecycleError("\(productID) is not for sale") }
            guard let current = terms(state.productID) else {
                throw LifecycleError("\(state.productID) is no longer in the catalogue")
            }
            let immediate =
                productID != state.productID
                && (new.level < current.level || (new.level == current.level && new.period == current.period))
            guard immediate else {
                // From the next renewal: the same product, or a downgrade.
                let subtype: NotificationSubtype? = productID == state.productID ? nil : .downgrade
                state.autoRenewProductID = productID
                state.autoRenew = true
                state.offer = offer.offer
                state.offerPeriodsLeft = offer.periods
                return [.notify(Notice(.offerRedeemed, subtype))]
            }
            state.autoRenew = true
            state.offer = offer.offer
            state.offerPeriodsLeft = offer.periods
            return [
                .endLatestPeriod(at: now, refundUnused: state.status == .active), .unschedule(.renewal),
                .unschedule(.gracePeriodEnd), .unschedule(.billingRetryEnd),
            ]
                + startPeriod(
                    &state, productID: productID, start: now, reason: .purchase,
                    notice: Notice(.offerRedeemed, .upgrade))
        }
    }

    /// The end of a period at `end`: expiry for one of its reasons, a billing failure, or a renewal. In a
    /// commitment the months bill whatever the customer chose; at its end it renews as they left it.
    private func periodEnd(_ state: inout SubscriptionState, at end: Date) -> [LifecycleEffect] {
        if let commitment = state.commitment {
            if !commitment.isLastPeriod {
                return commitmentRenewal(&state, number: commitment.billingPeriodNumber + 1, at: end)
            }
            guard commitment.autoRenew else {
                return expire(&state, intent: .customerCancelled, notice: Notice(.expired, .voluntary))
            }
        }
        let product: ProductTerms
        switch renewal(&state) {
        case .success(let terms): product = terms
        case .failure(let expiry): return expiry.effects
        }
        if let commitment = state.commitment {
            if commitment.renewalPlan == .monthly, product.commitment != nil {
                state.productID = state.autoRenewProductID
                return commitmentRenewal(&state, number: 1, at: end)
            }
            state.commitment = nil
            state.billingPlan = product.hasBillingPlans ? .billedUpfront : nil
        } else if state.renewalBillingPlan == .monthly, product.commitment != nil {
            // Chosen for this renewal: a commitment starts.
            state.productID = state.autoRenewProductID
            state.commitment = nil
            return commitmentRenewal(&state, number: 1, at: end)
        }
        if settings.renewalsFail {
            let retryEnds = end.addingTimeInterval(settings.rate.billingRetryPeriod(from: end))
            state.billingRetryEndsDate = retryEnds
            // The period has expired for a billing error while Apple retries (`expiration_intent` 2 beside
            // `is_in_billing_retry_period` 1); a recovered renewal clears it.
            state.expirationIntent = .billingError
            var effects: [LifecycleEffect] = [.schedule(.billingRetryEnd, at: retryEnds)]
            if settings.gracePeriod {
                let graceEnds = end.addingTimeInterval(
                    settings.rate.gracePeriod(forSubscriptionOf: product.period, from: end))
                state.status = .billingGracePeriod
                state.gracePeriodExpiresDate = graceEnds
                effects.append(.schedule(.gracePeriodEnd, at: graceEnds))
                effects.append(.notify(Notice(.didFailToRenew, .gracePeriod, v1: .didFailToRenew)))
            } else {
                state.status = .billingRetry
                effects.append(.notify(Notice(.didFailToRenew, v1: .didFailToRenew)))
            }
            return effects
        }
        return startPeriod(
            &state, productID: state.autoRenewProductID, start: end, reason: .renewal,
            notice: Notice(.didRenew, v1: .didRenew))
    }

    /// Why a period's end does not renew, as the expiry it makes.
    private struct Expiry: Error { let effects: [LifecycleEffect] }

    /// The product a period's end renews to, or the expiry instead: auto-renew off, a price increase not
    /// consented to, a product no longer for sale, or the sandbox's renewal cap.
    private func renewal(_ state: inout SubscriptionState) -> Result<ProductTerms, Expiry> {
        if state.priceIncreaseStatus == .pending {
            return .failure(
                Expiry(
                    effects: expire(
                        &state, intent: .didNotConsentToPriceIncrease, notice: Notice(.expired, .priceIncrease))))
        }
        guard state.autoRenew else {
            return .failure(
                Expiry(effects: expire(&state, intent: .customerCancelled, notice: Notice(.expired, .voluntary))))
        }
        guard let product = terms(state.autoRenewProductID), product.forSale else {
            return .failure(
                Expiry(
                    effects: expire(&state, intent: .productNotAvailable, notice: Notice(.expired, .productNotForSale)))
            )
        }
        if let cap = settings.renewalCap, state.renewalCount >= cap {
            state.autoRenew = false
            return .failure(
                Expiry(effects: expire(&state, intent: .customerCancelled, notice: Notice(.expired, .voluntary))))
        }
        return .success(product)
    }

    /// A new period of `productID` from `start`, unless it would end past the horizon (then it expires).
    private func startPeriod(
        _ state: inout SubscriptionState, productID: ProductID, start: Date, reason: TransactionReason,
        notice: Notice
    ) -> [LifecycleEffect] {
        guard let product = terms(productID) else {
            return expire(&state, intent: .productNotAvailable, notice: Notice(.expired, .productNotForSale))
        }
        // A discounted period of a redeemed offer, while any are left; otherwise the product's own.
        var offer: Offer?
        var period = product.period
        if state.offerPeriodsLeft > 0, let redeemed = state.offer,
            let discounted = redeemed.period.flatMap(StorePeriod.init)
        {
            offer = redeemed
            period = discounted
        }
        let expires = settings.rate.end(of: period, from: start)
        // A period that does not end after it starts (no time at all, or a date past the calendar's reach)
        // would renew at once, without end: the subscription expires instead, as past the horizon.
        guard expires <= settings.horizon, expires > start else {
            return expire(&state, intent: .other, notice: Notice(.expired))
        }
        if offer != nil {
            state.offerPeriodsLeft -= 1
        } else {
            state.offer = nil
            state.offerPeriodsLeft = 0
        }
        state.status = .active
        state.productID = productID
        state.autoRenewProductID = productID
        // A period bought up front (no commitment here): the plan its product lists, if it lists any.
        state.billingPlan = product.hasBillingPlans ? .billedUpfront : nil
        state.expiresDate = expires
        state.expirationIntent = nil
        state.gracePeriodExpiresDate = nil
        state.billingRetryEndsDate = nil
        // A renewal at the new price settles an accepted increase.
        if reason == .renewal, state.priceIncreaseStatus == .accepted { state.priceIncreaseStatus = nil }
        if reason == .renewal { state.renewalCount += 1 }
        return [
            .startPeriod(productID: productID, start: start, expires: expires, reason: reason, offer: offer),
            .schedule(.renewal, at: expires), .notify(notice),
        ]
    }

    func expire(_ state: inout SubscriptionState, intent: ExpirationIntent, notice: Notice)
        -> [LifecycleEffect]
    {
        state.status = .expired
        state.autoRenew = false
        state.expirationIntent = intent
        state.gracePeriodExpiresDate = nil
        state.billingRetryEndsDate = nil
        state.commitment = nil
        state.renewalBillingPlan = nil
        return [.notify(notice)]
    }

    /// Buying another product of the group while subscribed: a higher level (or the same level and
    /// duration) now, with the unused part of the old period refunded; a lower level (or another duration)
    /// at the next renewal; the current product again cancels a pending change.
    private func change(_ state: inout SubscriptionState, to productID: ProductID, at now: Date)
        throws(LifecycleError) -> [LifecycleEffect]
    {
        guard state.status == .active || state.isInBillingRetry else {
            throw LifecycleError("subscription \(state.originalTransactionID) has ended; this is a resubscription")
        }
        guard let new = terms(productID), new.forSale else { throw LifecycleError("\(productID) is not for sale") }
        guard let current = terms(state.productID) else {
            throw LifecycleError("\(state.productID) is no longer in the catalogue")
        }
        if productID == state.productID {
            guard state.autoRenewProductID != productID || !state.autoRenew else {
                throw LifecycleError("already subscribed to \(productID)")
            }
            // Apple's words for what this buy changed: a pending change cancelled is DID_CHANGE_RENEWAL_PREF
            // without a subtype; auto-renew turned back on is DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_ENABLED.
            let revertsChange = state.autoRenewProductID != productID
            let wasRenewing = state.autoRenew
            state.offer = nil
            state.offerPeriodsLeft = 0
            state.autoRenewProductID = productID
            state.autoRenew = true
            if var commitment = state.commitment, current.commitment != nil {
                commitment.renewalPlan = .monthly
                commitment.autoRenew = true
                state.commitment = commitment
            }
            var effects: [LifecycleEffect] = []
            if revertsChange { effects.append(.notify(Notice(.didChangeRenewalPref, v1: .didChangeRenewalPref))) }
            if !wasRenewing {
                effects.append(
                    .notify(Notice(.didChangeRenewalStatus, .autoRenewEnabled, v1: .didChangeRenewalStatus)))
            }
            return effects
        }
        let immediate = new.level < current.level || (new.level == current.level && new.period == current.period)
        // Another product ends a running offer.
        state.offer = nil
        state.offerPeriodsLeft = 0
        guard immediate else {
            // In a commitment, a downgrade waits for the commitment's end, billed up front unless the new
            // product has the monthly plan too.
            if var commitment = state.commitment {
                commitment.renewalPlan = new.commitment == nil ? .billedUpfront : commitment.renewalPlan
                commitment.autoRenew = true
                state.commitment = commitment
            }
            state.autoRenewProductID = productID
            state.autoRenew = true
            return [.notify(Notice(.didChangeRenewalPref, .downgrade, v1: .didChangeRenewalPref))]
        }
        // An upgrade ends a commitment at once.
        if state.commitment != nil {
            state.commitment = nil
            state.billingPlan = new.hasBillingPlans ? .billedUpfront : nil
        }
        var effects: [LifecycleEffect] = [
            .endLatestPeriod(at: now, refundUnused: state.status == .active), .unschedule(.renewal),
            .unschedule(.gracePeriodEnd), .unschedule(.billingRetryEnd),
        ]
        state.autoRenew = true
        effects += startPeriod(
            &state, productID: productID, start: now, reason: .purchase,
            notice: Notice(.didChangeRenewalPref, .upgrade, v1: .interactiveRenewal))
        return effects
    }
}
