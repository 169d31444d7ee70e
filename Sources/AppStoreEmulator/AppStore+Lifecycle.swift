import AppStoreSignedData
import Foundation
import StoreKitCatalog
public import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperJSON
public import SubscriptionLifecycle
import Synchronization

/// The subscription lifecycle in the store: the pure engine decides, these functions apply its effects
/// (transactions, due events, the notification outbox) inside the write that caused them.
extension AppStore {
    /// The engine for an account: the store's rate, the account's billing settings, the sandbox's cap.
    func lifecycle(for account: Account) -> Lifecycle {
        let catalog = self.catalog
        let unavailable = productsNotForSale.withLock { $0 }
        return Lifecycle(
            settings: LifecycleSettings(
                rate: rate, renewalsFail: account.billingRetryOnRenewal, gracePeriod: account.billingGracePeriod,
                renewalCap: account.environment == .production ? nil : Self.sandboxRenewalCap, horizon: Self.horizon),
            terms: { productID in
                guard let entry = catalog.entry(productID.rawValue), let subscription = entry.subscription,
                    let period = subscription.period
                else { return nil }
                return ProductTerms(
                    period: period, level: subscription.level ?? 1, forSale: !unavailable.contains(productID),
                    commitment: entry.monthlyPlan.map { CommitmentTerms(periods: $0.periods) },
                    hasBillingPlans: subscription.json["billingPlans"]?.arrayValue?.isEmpty == false)
            })
    }

    /// What a month of a commitment costs and the `commitmentInfo` of its transaction.
    func commitmentBilling(_ commitment: SubscriptionCommitment, productID: ProductID, account: Account) -> (
        price: Money?, commitment: TransactionCommitment
    ) {
        let plan = catalog.entry(productID.rawValue)?.monthlyPlan
        let monthly = plan?.price
        let total = plan?.commitmentPrice
        return (
            charged(monthly, account),
            TransactionCommitment(
                billingPeriodNumber: commitment.billingPeriodNumber,
                totalBillingPeriods: commitment.totalBillingPeriods,
                expiresDate: commitment.expiresDate, price: charged(total, account))
        )
    }

    /// Applies `effects` to `subscription` (whose state the engine already changed) and saves it; notices
    /// go to the outbox after the state they describe is stored.
    func apply(
        _ effects: [LifecycleEffect], to subscription: inout StoredSubscription, account: Account,
        in store: any EmulatorStore, now: Date
    ) throws {
        var notices: [Notice] = []
        let key = subscription.originalTransactionID.rawValue
        // The latest transaction as last read or written here (the notifications read it otherwise).
        var latestKnown: StoredTransaction?
        var originalKnown: StoredTransaction?
        for effect in effects {
            switch effect {
            case .startPeriod(let productID, let start, let expires, let reason, let offer):
                guard var next = try latestKnown ?? store.transaction(subscription.latestTransactionID) else {
                    continue
                }
                let original = next.renewalNumber == 0 ? next : nil
                next.transaction.id = try newTransactionID(in: store)
                next.transaction.productID = productID
                next.transaction.purchaseDate = start
                next.transaction.expiresDate = expires
                next.transaction.webOrderLineItemID = try newWebOrderLineItemID(in: store)
                next.transaction.reason = reason
                next.transaction.offer = offer
                next.transaction.price = charged(
                    offer.map { price(of: $0, productID: productID) } ?? listPrice(productID.rawValue),
                    account)
                next.transaction.billingPlan = subscription.state.billingPlan
                next.transaction.commitment = nil
                if let commitment = subscription.state.commitment {
                    let billed = commitmentBilling(commitment, productID: productID, account: account)
                    next.transaction.price = billed.price
                    next.transaction.commitment = billed.commitment
                }
                next.transaction.setRevocation(nil, reason: nil)
                next.transaction.isUpgraded = false
                next.renewalNumber += 1
                next.finished = false
                // A period bought (a renewal, an upgrade) is billed on an order of its own, dated when it starts.
                next.orderID = newOrderID(at: start)
                try store.insert(next)
                subscription.latestTransactionID = next.id
                latestKnown = next
                originalKnown = originalKnown ?? original
            case .endLatestPeriod(let date, let refundUnused):
                guard var latest = try latestKnown ?? store.transaction(subscription.latestTransactionID) else {
                    continue
                }
                if refundUnused {
                    // The upgraded period ends now; its unused part is refunded, as a share of the period.
                    latest.transaction.isUpgraded = true
                    latest.transaction.setRevocation(
                        date, reason: .other,
                        share: Self.unusedShare(
                            of: latest.transaction.purchaseDate, until: latest.transaction.expiresDate, at: date))
                }
                latest.transaction.expiresDate = date
                try store.update(latest)
                latestKnown = latest
            case .revokeLatest(let reason, let date):
                guard var latest = try latestKnown ?? store.transaction(subscription.latestTransactionID) else {
                    continue
                }
                latest.transaction.setRevocation(reason == nil ? nil : date, reason: reason)
                try store.update(latest)
                latestKnown = latest
            case .schedule(let kind, let date):
                try schedule(DueEvent(kind: Self.dueKind(kind), key: key, due: date), in: store)
            case .unschedule(let kind):
                try store.cancel(kind: Self.dueKind(kind), key: key)
            case .notify(let notice):
                notices.append(notice)
            }
        }
        try store.save(subscription)
        for notice in notices {
            try enqueue(
                notice, subscription: subscription, account: account, in: store, now: now, latest: latestKnown,
                original: originalKnown)
        }
        try shareSubscription(subscription, account: account, notices: notices, in: store, now: now)
    }

    /// A family member's access follows the purchaser's purchase: only the purchaser can act on it.
    static func refuseFamilyShared(_ stored: StoredTransaction) throws {
        guard stored.transaction.ownership != .familyShared else {
            throw EmulatorError.invalid(
                "transaction \(stored.id.rawValue) is a family member's access (FAMILY_SHARED); act on the purchaser's")
        }
    }

    /// The share of the period from `start` to `end` not used by `date`, in milliunits (0 to 100,000).
    static func unusedShare(of start: Date, until end: Date?, at date: Date) -> Int64? {
        guard let end, end > start else { return nil }
        let unused = end.timeIntervalSince(date) / end.timeIntervalSince(start)
        return Int64((min(max(unused, 0), 1) * 100_000).rounded())
    }

    /// The engine's refusal as a 400.
    static func refusing<T>(_ body: () throws(LifecycleError) -> T) throws(EmulatorError) -> T {
        do { return try body() } catch { throw EmulatorError.invalid(error.message) }
    }

    static func dueKind(_ kind: DueKind) -> DueEvent.Kind {
        switch kind {
        case .renewal: .renewal
        case .gracePeriodEnd: .gracePeriodEnd
        case .billingRetryEnd: .billingRetryEnd
        }
    }

    /// A due lifecycle event for the subscription keyed by `originalID`.
    /// nil when the event does not apply (no such subscription, or the engine refused it).
    func runLifecycle(_ event: LifecycleEvent, originalID: TransactionID, in store: any EmulatorStore, now: Date)
        throws -> DueWork.Outcome?
    {
        guard var subscription = try store.subscription(originalID),
            let account = try store.account(subscription.accountID)
        else { return nil }
        let before = subscription.state
        let effects: [LifecycleEffect]
        do {
            effects = try lifecycle(for: account).handle(event, to: &subscription.state, at: now)
        } catch {
            return nil
        }
        try apply(effects, to: &subscription, account: account, in: store, now: now)
        for effect in effects {
            if case .startPeriod(_, _, let expires, _, _) = effect { return .renewed(nextDue: expires) }
        }
        return before.status != .expired && subscription.state.status == .expired ? .expired : .nothing
    }

    /// A control verb on the subscription that `transactionID` belongs to (any of its transactions): the
    /// engine decides; a verb that does not apply is a 400. Answers the subscription's latest transaction.
    public func subscriptionVerb(_ event: LifecycleEvent, transactionID: String) async throws -> (
        transaction: StoredTransaction, subscription: SubscriptionState?
    ) {
        try await catchUp()
        let current = now
        return try await storage.write { store in
            try self.subscriptionVerb(event, transactionID: transactionID, in: store, now: current)
        }
    }

    func subscriptionVerb(_ event: LifecycleEvent, transactionID: String, in store: any EmulatorStore, now: Date)
        throws -> (transaction: StoredTransaction, subscription: SubscriptionState?)
    {
        guard let stored = try store.transaction(TransactionID(transactionID)) else {
            throw EmulatorError.notFound("no transaction \(transactionID)")
        }
        try Self.refuseFamilyShared(stored)
        guard var subscription = try store.subscription(stored.transaction.originalID),
            let account = try store.account(subscription.accountID)
        else { throw EmulatorError.invalid("transaction \(transactionID) is not an auto-renewable subscription") }
        let engine = lifecycle(for: account)
        let effects = try Self.refusing { () throws(LifecycleError) in
            try engine.handle(event, to: &subscription.state, at: now)
        }
        try apply(effects, to: &subscription, account: account, in: store, now: now)
        guard let latest = try store.transaction(subscription.latestTransactionID) else {
            throw EmulatorError.notFound("no transaction \(subscription.latestTransactionID)")
        }
        return (latest, subscription.state)
    }

    /// Refunds a purchase granted outside the app: subscriptions through the engine; other products are
    /// revoked here (REFUND; V1 REFUND).
    public func refund(transactionID: String, reason: RevocationReason) async throws -> (
        transaction: StoredTransaction, subscription: SubscriptionState?
    ) {
        try await catchUp()
        let current = now
        return try await storage.write { store in
            try self.refund(transactionID: transactionID, reason: reason, in: store, now: current)
        }
    }

    func refund(transactionID: String, reason: RevocationReason, in store: any EmulatorStore, now: Date) throws -> (
        transaction: StoredTransaction, subscription: SubscriptionState?
    ) {
        guard var stored = try store.transaction(TransactionID(transactionID)),
            let account = try store.account(stored.accountID)
        else { throw EmulatorError.notFound("no transaction \(transactionID)") }
        try Self.refuseFamilyShared(stored)
        if stored.transaction.kind == .autoRenewable {
            if let past = try pastPeriod(stored, refund: reason, account: account, in: store, now: now) { return past }
            return try subscriptionVerb(.refunded(reason), transactionID: transactionID, in: store, now: now)
        }
        guard stored.transaction.revocationDate == nil else {
            throw EmulatorError.invalid("transaction \(transactionID) is already refunded")
        }
        stored.transaction.setRevocation(now, reason: reason)
        try store.update(stored)
        try enqueue(
            Notice(.refund, v1: .refund), transaction: stored, renewal: nil, account: account, in: store, now: now)
        try revokeShares(of: stored.transaction.originalID, in: store, now: now)
        return (stored, nil)
    }

    /// A refund (`reason`) or its reversal (nil) of a subscription's past period: that transaction alone
    /// changes (REFUND, V1 CANCEL; or REFUND_REVERSED), while the current period, the renewal state and
    /// family access stay. Nil when `stored` is the current period: the engine handles that one.
    func pastPeriod(
        _ stored: StoredTransaction, refund reason: RevocationReason?, account: Account, in store: any EmulatorStore,
        now: Date
    ) throws -> (transaction: StoredTransaction, subscription: SubscriptionState?)? {
        guard let subscription = try store.subscription(stored.transaction.originalID),
            subscription.latestTransactionID != stored.id
        else { return nil }
        var past = stored
        if let reason {
            guard past.transaction.revocationDate == nil else {
                throw EmulatorError.invalid("transaction \(stored.id.rawValue) is already refunded")
            }
            past.transaction.setRevocation(now, reason: reason)
        } else {
            guard past.transaction.revocationDate != nil, !past.transaction.isUpgraded else {
                throw EmulatorError.invalid("transaction \(stored.id.rawValue) has no refund to reverse")
            }
            past.transaction.setRevocation(nil, reason: nil)
        }
        try store.update(past)
        let started = try store.purchaseDate(of: subscription.originalTransactionID)
        try enqueue(
            reason == nil ? Notice(.refundReversed) : Notice(.refund, v1: .cancel), transaction: past,
            renewal: (subscription.state, started), account: account, in: store, now: now)
        return (past, subscription.state)
    }

    /// A transaction and, for a subscription, its state now (`GET /_emulator/v1/transactions/{id}`).
    public func transactionAndSubscription(_ id: String) async throws -> (
        transaction: StoredTransaction, subscription: SubscriptionState?
    ) {
        let (stored, subscription) = try await transactionAndSubscriptionRecord(id)
        return (stored, subscription?.state)
    }

    /// ``transactionAndSubscription(_:)`` with the subscription's record (its current period's transaction).
    func transactionAndSubscriptionRecord(_ id: String) async throws -> (
        transaction: StoredTransaction, subscription: StoredSubscription?
    ) {
        try await catchUp()
        return try await storage.read { store in
            guard let stored = try store.transaction(TransactionID(id)) else {
                throw EmulatorError.notFound("no transaction \(id)")
            }
            return (stored, try store.subscription(stored.transaction.originalID))
        }
    }

    /// A subscription's state now, by any of its transaction ids.
    public func subscriptionState(originalTransactionID id: String) async throws -> SubscriptionState? {
        try await storage.read { store in
            guard let original = try store.transaction(TransactionID(id))?.transaction.originalID else { return nil }
            return try store.subscription(original)?.state
        }
    }

    /// The account a device belongs to.
    public func accountID(ofDevice deviceID: String) async throws -> String {
        try await storage.read { store in try self.device(deviceID, in: store).1.id.rawValue }
    }

    /// Sets the account's billing-failure switches (`billingRetryOnRenewal`, `billingGracePeriod`).
    public func configureBilling(_ accountID: String, retryOnRenewal: Bool?, gracePeriod: Bool?) async throws
        -> Account
    {
        try await storage.write { store in
            guard var account = try store.account(AccountID(accountID)) else {
                throw EmulatorError.notFound("no account \(accountID)")
            }
            if let retryOnRenewal { account.billingRetryOnRenewal = retryOnRenewal }
            if let gracePeriod { account.billingGracePeriod = gracePeriod }
            try store.update(account)
            return account
        }
    }

    /// A price increase of `productID` for its current subscribers (active or in billing retry), purchasers
    /// only: a family member's access follows the purchaser's answer. With `displayPrice` (above the price
    /// now) the product costs that from now on: new purchases at once, the subscribers told at their renewal
    /// (those who must consent and did not, expire then). Answers how many were told.
    public func announcePriceIncrease(productID: String, requiresConsent: Bool, displayPrice: String? = nil)
        async throws -> Int
    {
        guard catalog.entry(productID)?.subscription != nil else {
            throw EmulatorError.notFound("no auto-renewable subscription \(productID)")
        }
        let raised: (displayPrice: String, price: Money)? = try displayPrice.map { displayPrice in
            guard let price = Money(decimal: displayPrice, currency: "USD"),
                price.milliunits > (listPrice(productID)?.milliunits ?? 0)
            else {
                throw EmulatorError.invalid(
                    "displayPrice '\(displayPrice.prefix(32))' is not a price above the one now")
            }
            return (displayPrice, price)
        }
        try await catchUp()
        let current = now
        // The price is changed inside the write (the renewal info of its PRICE_INCREASE shows it), and read
        // back from the storage if the write fails.
        return try await writingCachedSettings { store in
            if let raised {
                var prices = try Self.raisedPrices(in: store)
                prices[productID] = raised
                var object = JSONObject()
                for (product, price) in prices.sorted(by: { $0.key < $1.key }) {
                    object[product] = .string(price.displayPrice)
                }
                try store.setSetting(Setting.raisedPrices, JSONWriter.string(.object(object)))
                self.raisedPrices.withLock { $0 = prices }
            }
            var count = 0
            for original in try store.subscriptionIDs(renewingTo: ProductID(productID)) {
                // A family member's access follows the purchaser's, who alone is asked to consent.
                if try store.transaction(original)?.transaction.ownership == .familyShared { continue }
                let before = try store.subscription(original)?.state
                _ = try self.runLifecycle(
                    .priceIncrease(requiresConsent: requiresConsent), originalID: original, in: store, now: current)
                if try store.subscription(original)?.state != before { count += 1 }
            }
            return count
        }
    }

    /// Takes `productID` off sale (renewals to it then expire) or puts it back.
    public func setAvailability(productID: String, forSale: Bool) async throws {
        guard catalog.entry(productID) != nil else { throw EmulatorError.notFound("no product \(productID)") }
        let id = ProductID(productID)
        // Changed inside the write: writes run one after another, so the cached set follows the order of the
        // stored one (two requests at once cannot store them the other way round).
        try await writingCachedSettings { store in
            let updated = self.productsNotForSale.withLock { set -> [String] in
                if forSale { set.remove(id) } else { set.insert(id) }
                return set.map(\.rawValue).sorted()
            }
            try store.setSetting(Setting.productsNotForSale, updated.joined(separator: ","))
        }
    }
}
