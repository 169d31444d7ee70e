import Foundation
import PurchaseServer
import StoreModel
import Testing

/// The purchase server's one transition, without storage: later-signed facts win, a change learned twice
/// is one change, events follow from changes of state.
@Suite("Purchase engine")
struct PurchaseEngineTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)
    static let month: TimeInterval = 300

    static func period(
        _ index: Int, product: String = "monthly", signed: TimeInterval? = nil, revoked: Bool = false,
        reason: TransactionReason? = nil
    ) -> PurchaseRecord {
        let begins = start.addingTimeInterval(Double(index) * month)
        return PurchaseRecord(
            transactionID: TransactionID(String(1000 + index)), originalTransactionID: "1000", bundleID: "app",
            productID: ProductID(product),
            kind: .autoRenewable, purchaseDate: begins, expiresDate: begins.addingTimeInterval(month),
            environment: .sandbox, revocationDate: revoked ? begins.addingTimeInterval(10) : nil,
            reason: reason ?? (index == 0 ? .purchase : .renewal), signedDate: begins.addingTimeInterval(signed ?? 1))
    }

    static func renewal(
        _ signed: TimeInterval, status: Int64, autoRenew: Bool = true, next: String = "monthly",
        intent: Int64? = nil
    ) -> RenewalFacts {
        RenewalFacts(
            originalTransactionID: "1000", status: status, autoRenewStatus: autoRenew,
            autoRenewProductID: ProductID(next),
            expirationIntent: intent, signedDate: start.addingTimeInterval(signed))
    }

    /// Applies updates in order, keeping the records between them; answers the last records and every event.
    static func run(_ updates: [PurchaseUpdate], now: Date = start) -> (
        purchases: [TransactionID: PurchaseRecord], subscription: SubscriptionRecord?, events: [ServerEventType],
        ledger: [LedgerEntry], ids: [String]
    ) {
        var purchases: [TransactionID: PurchaseRecord] = [:]
        var subscription: SubscriptionRecord?
        var events: [ServerEventType] = []
        var seen: Set<String> = []
        var ids: [String] = []
        var ledger: [LedgerEntry] = []
        for update in updates {
            let outcome = PurchaseEngine.apply(
                update, purchase: update.transaction.flatMap { purchases[$0.transactionID] },
                subscription: subscription,
                owner: "user", now: now)
            if let purchase = outcome.purchase { purchases[purchase.transactionID] = purchase }
            subscription = outcome.subscription ?? subscription
            for event in outcome.events where seen.insert(event.id).inserted {
                events.append(event.type)
                ids.append(event.id)
            }
            ledger += outcome.ledger
        }
        return (purchases, subscription, events, ledger, ids)
    }

    @Test("A purchase, its renewals and a replay: INITIAL_PURCHASE, RENEWAL once each, nothing for the replay")
    func purchaseAndRenewals() {
        let first = PurchaseUpdate(source: "app", transaction: Self.period(0))
        let renewed = PurchaseUpdate(
            source: "notification", transaction: Self.period(1), renewal: Self.renewal(Self.month + 1, status: 1),
            notice: .v2("DID_RENEW", nil))
        let result = Self.run([first, renewed, renewed, first], now: Self.start.addingTimeInterval(Self.month + 5))
        #expect(result.events == ["INITIAL_PURCHASE", "RENEWAL"])
        // Stored ids de-duplicate events across restarts and processes: their form must not change.
        #expect(result.ids == ["INITIAL_PURCHASE:1000:1000", "RENEWAL:1001"])
        #expect(result.subscription?.latestTransactionID == "1001")
        #expect(result.subscription?.status == 1 && result.subscription?.autoRenewStatus == true)
    }

    @Test("Renewal facts signed earlier than what is stored change nothing")
    func staleRenewal() {
        let bought = PurchaseUpdate(source: "app", transaction: Self.period(0), renewal: Self.renewal(50, status: 1))
        let off = PurchaseUpdate(source: "notification", renewal: Self.renewal(100, status: 1, autoRenew: false))
        let stale = PurchaseUpdate(source: "notification", renewal: Self.renewal(60, status: 1, autoRenew: true))
        let result = Self.run([bought, off, stale])
        #expect(result.subscription?.autoRenewStatus == false)
        #expect(result.events == ["INITIAL_PURCHASE", "CANCELLATION"])
        let outcome = PurchaseEngine.apply(
            stale, purchase: nil, subscription: result.subscription, owner: "user", now: Self.start)
        #expect(outcome.stale && outcome.events.isEmpty && outcome.subscription == result.subscription)
    }

    @Test("Auto-renew off and on, billing trouble, expiry: CANCELLATION, UNCANCELLATION, BILLING_ISSUE, EXPIRATION")
    func stateChanges() {
        let updates = [
            PurchaseUpdate(source: "app", transaction: Self.period(0), renewal: Self.renewal(1, status: 1)),
            PurchaseUpdate(source: "notification", renewal: Self.renewal(10, status: 1, autoRenew: false)),
            PurchaseUpdate(source: "notification", renewal: Self.renewal(20, status: 1, autoRenew: true)),
            PurchaseUpdate(source: "notification", renewal: Self.renewal(Self.month + 1, status: 4)),
            PurchaseUpdate(source: "notification", renewal: Self.renewal(Self.month + 50, status: 3)),
            PurchaseUpdate(
                source: "notification", renewal: Self.renewal(Self.month * 3, status: 2, autoRenew: false, intent: 2)),
        ]
        let result = Self.run(updates)
        #expect(result.events == ["INITIAL_PURCHASE", "CANCELLATION", "UNCANCELLATION", "BILLING_ISSUE", "EXPIRATION"])
        #expect(result.subscription?.status == 2 && result.subscription?.expirationIntent == 2)
    }

    @Test("Renewal info without Apple's status: billing retry read from it, in grace while the grace period runs")
    func statusFromRenewalInfo() {
        func retry(_ signed: TimeInterval, grace: Date?) -> RenewalFacts {
            var facts = Self.renewal(signed, status: 1)
            facts.status = nil
            facts.isInBillingRetryPeriod = true
            facts.gracePeriodExpiresDate = grace
            return facts
        }
        let bought = PurchaseUpdate(source: "app", transaction: Self.period(0), renewal: Self.renewal(1, status: 1))
        let graced = Self.run([
            bought,
            PurchaseUpdate(
                source: "notification",
                renewal: retry(Self.month + 1, grace: Self.start.addingTimeInterval(Self.month + 6 * 86_400))),
        ])
        #expect(graced.subscription?.status == 4, "in its grace period")
        let retrying = Self.run([
            bought, PurchaseUpdate(source: "notification", renewal: retry(Self.month + 1, grace: nil)),
        ])
        #expect(retrying.subscription?.status == 3, "billing retry, no grace")
        var plain = Self.renewal(Self.month + 1, status: 1)
        plain.status = nil
        let kept = Self.run([bought, PurchaseUpdate(source: "notification", renewal: plain)])
        #expect(kept.subscription?.status == 1, "nothing said: the status stays")
        // The retry over (not retrying any more) with the period passed: expired; while it runs, still retrying.
        var over = Self.renewal(Self.month * 2, status: 1)
        (over.status, over.isInBillingRetryPeriod) = (nil, false)
        let expired = Self.run([
            bought, PurchaseUpdate(source: "notification", renewal: retry(Self.month + 1, grace: nil)),
            PurchaseUpdate(source: "notification", renewal: over),
        ])
        #expect(expired.subscription?.status == 2, "billing retry ended")
        #expect(expired.events.contains("EXPIRATION"))
    }

    @Test("A plan change at renewal is PRODUCT_CHANGE now; an upgrade bought now is PRODUCT_CHANGE and RENEWAL")
    func productChanges() {
        let pending = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0), renewal: Self.renewal(1, status: 1)),
            PurchaseUpdate(source: "notification", renewal: Self.renewal(10, status: 1, next: "basic")),
        ])
        #expect(pending.events == ["INITIAL_PURCHASE", "PRODUCT_CHANGE"])
        let upgrade = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(source: "notification", transaction: Self.period(1, product: "premium", reason: .purchase)),
        ])
        #expect(upgrade.events == ["INITIAL_PURCHASE", "PRODUCT_CHANGE", "RENEWAL"])
        #expect(upgrade.subscription?.productID == "premium")
        // A resubscription to another product whose EXPIRED has not arrived yet: Apple's RESUBSCRIBE says so.
        let resubscribed = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(3, product: "premium", reason: .purchase),
                notice: .v2(.subscribed, .resubscribe)),
        ])
        #expect(resubscribed.events == ["INITIAL_PURCHASE", "INITIAL_PURCHASE"])
    }

    @Test("Renewal facts signed before the current period was first signed do not set its status (a late retry)")
    func lateRetryAfterPostedPeriod() {
        // In the grace period (signed at 10), the grace period's end is told at 20 but arrives late, after the
        // app posted the recovered period (signed at 30): it must not put the paying user in billing retry.
        var grace = Self.renewal(10, status: 4)
        grace.gracePeriodExpiresDate = Self.start.addingTimeInterval(Self.month + 60)
        let late = Self.run(
            [
                PurchaseUpdate(source: "app", transaction: Self.period(0, signed: 1)),
                PurchaseUpdate(
                    source: "notification", renewal: grace, notice: .v2("DID_FAIL_TO_RENEW", "GRACE_PERIOD")),
                PurchaseUpdate(source: "app", transaction: Self.period(1, signed: 30)),
                PurchaseUpdate(
                    source: "notification", renewal: Self.renewal(20, status: 3, autoRenew: false),
                    notice: .v2("GRACE_PERIOD_EXPIRED", nil)),
            ], now: Self.start.addingTimeInterval(Self.month + 40))
        #expect(late.subscription?.status == 1, "\(String(describing: late.subscription))")
        #expect(late.subscription?.autoRenewStatus == false, "the customer's choice still holds")
        #expect(!late.events.contains("BILLING_ISSUE"), "\(late.events)")
    }

    @Test(
        "Without Apple's reason (receipts, V1) the dates classify a period: renewal, bought while subscribed, resubscription"
    )
    func periodsByDate() {
        /// A receipt's record of period `index`: no transactionReason.
        func receipt(_ index: Int, product: String = "monthly", starts: TimeInterval? = nil) -> PurchaseUpdate {
            var period = Self.period(index, product: product)
            period.reason = nil
            if let starts {
                period.purchaseDate = Self.start.addingTimeInterval(starts)
                period.expiresDate = period.purchaseDate.addingTimeInterval(Self.month)
            }
            var update = PurchaseUpdate(source: "app", transaction: period)
            update.fromReceipt = true
            return update
        }
        // A receipt with three periods of history, for a subscription the server has not seen, read long after
        // the first ended: one purchase and two renewals, not three purchases.
        let history = Self.run(
            [receipt(0), receipt(1), receipt(2)], now: Self.start.addingTimeInterval(2.5 * Self.month))
        #expect(history.events == ["INITIAL_PURCHASE", "RENEWAL", "RENEWAL"])
        // After a gap (the subscription had expired): a resubscription.
        let gap = Self.run([receipt(0), receipt(3)], now: Self.start.addingTimeInterval(3.5 * Self.month))
        #expect(gap.events == ["INITIAL_PURCHASE", "INITIAL_PURCHASE"])
        // Bought before the period ended, another product: an upgrade.
        let upgrade = Self.run([receipt(0), receipt(1, product: "premium", starts: Self.month / 2)])
        #expect(upgrade.events == ["INITIAL_PURCHASE", "PRODUCT_CHANGE", "RENEWAL"])
        // A downgrade told by V1's DID_CHANGE_RENEWAL_PREF (its PRODUCT_CHANGE), then its renewal: one
        // PRODUCT_CHANGE, not two.
        let downgrade = Self.run([
            receipt(0),
            PurchaseUpdate(source: "notification", renewal: Self.renewal(10, status: 1, next: "basic")),
            receipt(1, product: "basic"),
        ])
        #expect(downgrade.events == ["INITIAL_PURCHASE", "PRODUCT_CHANGE", "RENEWAL"])
        // A renewal into another product no notification announced (its DOWNGRADE lost): told now.
        let unannounced = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(source: "notification", transaction: Self.period(1, product: "basic")),
        ])
        #expect(unannounced.events == ["INITIAL_PURCHASE", "PRODUCT_CHANGE", "RENEWAL"])
    }

    @Test("Consumables: a purchase credits, a refund debits (below zero), a reversal credits again, each once")
    func ledger() {
        func coins(revoked: Bool, signed: TimeInterval) -> PurchaseUpdate {
            PurchaseUpdate(
                source: "notification",
                transaction: PurchaseRecord(
                    transactionID: "77", originalTransactionID: "77", bundleID: "app", productID: "coins",
                    kind: .consumable, quantity: 3, purchaseDate: Self.start, environment: .sandbox,
                    revocationDate: revoked ? Self.start.addingTimeInterval(5) : nil,
                    signedDate: Self.start.addingTimeInterval(signed)))
        }
        let result = Self.run([
            coins(revoked: false, signed: 1), coins(revoked: true, signed: 5), coins(revoked: true, signed: 5),
            coins(revoked: false, signed: 2), coins(revoked: false, signed: 9),
        ])
        #expect(result.ledger.map(\.quantity) == [3, -3, 3])
        #expect(result.events == ["NON_RENEWING_PURCHASE", "REFUND", "REFUND_REVERSED"])
        // Refunded again after the reversal (a later revocation): a second debit and a second REFUND.
        var again = coins(revoked: true, signed: 12)
        again.transaction?.revocationDate = Self.start.addingTimeInterval(11)
        let twice = Self.run([
            coins(revoked: false, signed: 1), coins(revoked: true, signed: 5), coins(revoked: false, signed: 9), again,
        ])
        #expect(twice.ledger.map(\.quantity) == [3, -3, 3, -3])
        #expect(twice.events == ["NON_RENEWING_PURCHASE", "REFUND", "REFUND_REVERSED", "REFUND"])
        #expect(Set(twice.ledger.map(\.key)).count == 4, "each its own entry in the ledger")
        // Told again later (a newer record still showing the first refund, then unrevoked again): the same
        // entries, so the ledger keeps one of each.
        let retold = Self.run([
            coins(revoked: false, signed: 1), coins(revoked: true, signed: 5), coins(revoked: false, signed: 9),
            coins(revoked: true, signed: 10), coins(revoked: false, signed: 11),
        ])
        #expect(Set(retold.ledger.map(\.key)).count == 3, "\(retold.ledger.map(\.key))")
        // A refund of coins already spent leaves the balance below zero.
        let refundedFirst = Self.run([coins(revoked: true, signed: 5)])
        #expect(refundedFirst.ledger.map(\.quantity) == [3, -3])
        // A prorated refund (one of three, 33.333%) takes back one; its reversal gives back that one.
        var prorated = coins(revoked: true, signed: 5)
        prorated.transaction?.revocationType = "REFUND_PRORATED"
        prorated.transaction?.revocationPercentage = 33_333
        let partly = Self.run([coins(revoked: false, signed: 1), prorated, coins(revoked: false, signed: 9)])
        #expect(partly.ledger.map(\.quantity) == [3, -1, 1])
    }

    @Test("A refund request (CONSUMPTION_REQUEST) of any product is one REFUND_REQUEST event with Apple's reason")
    func refundRequests() {
        let coins = PurchaseRecord(
            transactionID: "77", originalTransactionID: "77", bundleID: "app", productID: "coins", kind: .consumable,
            quantity: 3, purchaseDate: Self.start, environment: .sandbox, signedDate: Self.start.addingTimeInterval(60))
        let request = PurchaseUpdate(
            source: "notification", transaction: coins, notice: .v2(.consumptionRequest, nil),
            requestReason: "UNINTENDED_PURCHASE")
        let result = Self.run([PurchaseUpdate(source: "notification", transaction: coins), request, request])
        #expect(result.events == ["NON_RENEWING_PURCHASE", "REFUND_REQUEST"], "the same request once")
        let outcome = PurchaseEngine.apply(request, purchase: coins, subscription: nil, owner: "user", now: Self.start)
        #expect(outcome.events.first?.details["consumptionRequestReason"] == "UNINTENDED_PURCHASE")
        // A subscription's request is an event too, beside the refund request it keeps.
        let subscribed = Self.run([
            PurchaseUpdate(source: "notification", transaction: Self.period(0)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(0, signed: 30), notice: .v2(.consumptionRequest, nil)),
        ])
        #expect(subscribed.events == ["INITIAL_PURCHASE", "REFUND_REQUEST"])
        #expect(subscribed.subscription?.refundRequestDate != nil)
    }

    @Test(
        "Refund requests and revocations told twice or late: the request's date moves on only, a replayed request after the refund is no event, a later unsigned record keeps Apple's revocation type"
    )
    func lateAndRepeated() {
        func coins(_ signed: TimeInterval, revoked: Bool = false, type: String? = nil) -> PurchaseRecord {
            var record = PurchaseRecord(
                transactionID: "77", originalTransactionID: "77", bundleID: "app", productID: "coins",
                kind: .consumable, quantity: 3, purchaseDate: Self.start, environment: .sandbox,
                revocationDate: revoked ? Self.start.addingTimeInterval(5) : nil,
                signedDate: Self.start.addingTimeInterval(signed))
            if let type {
                record.revocationType = type
                record.revocationPercentage = 33_333
            }
            return record
        }
        // Prorated (a third of 3), then a receipt's record of the same refund without the type, then reversed.
        let prorated = Self.run([
            PurchaseUpdate(source: "notification", transaction: coins(1)),
            PurchaseUpdate(source: "notification", transaction: coins(5, revoked: true, type: "REFUND_PRORATED")),
            PurchaseUpdate(source: "receipt", transaction: coins(7, revoked: true)),
            PurchaseUpdate(source: "notification", transaction: coins(9)),
        ])
        #expect(prorated.ledger.map(\.quantity) == [3, -1, 1], "the reversal gives back what the refund took")
        // A request replayed after the refund is no REFUND_REQUEST.
        let replayed = Self.run([
            PurchaseUpdate(source: "notification", transaction: coins(1)),
            PurchaseUpdate(source: "notification", transaction: coins(5, revoked: true)),
            PurchaseUpdate(source: "notification", transaction: coins(3), notice: .v2(.consumptionRequest, nil)),
        ])
        #expect(replayed.events == ["NON_RENEWING_PURCHASE", "REFUND"])
        // A subscription's request date: a later request moves it on, an older one replayed does not.
        let requests = Self.run([
            PurchaseUpdate(source: "notification", transaction: Self.period(0)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(0, signed: 50), notice: .v2(.consumptionRequest, nil)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(0, signed: 90), notice: .v2(.consumptionRequest, nil)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(0, signed: 70), notice: .v2(.consumptionRequest, nil)),
        ])
        #expect(requests.subscription?.refundRequestDate == Self.start.addingTimeInterval(90))
        // A family-shared transaction revoked without Apple's type (V1, a receipt) is the family's revocation.
        var shared = Self.period(0, revoked: true)
        shared.ownership = .familyShared
        let family = PurchaseEngine.apply(
            PurchaseUpdate(source: "receipt", transaction: shared), purchase: nil, subscription: nil, owner: "user",
            now: Self.start)
        #expect(family.events.first { $0.type == .refund }?.details["reason"] == "FAMILY_REVOKE")
    }

    @Test("A family member's revocation is a refund event with reason FAMILY_REVOKE, not a customer's refund")
    func familyRevocation() {
        var revoked = Self.period(0, revoked: true)
        revoked.ownership = .familyShared
        revoked.revocationType = "FAMILY_REVOKE"
        let outcome = PurchaseEngine.apply(
            PurchaseUpdate(source: "notification", transaction: revoked), purchase: nil, subscription: nil,
            owner: "user", now: Self.start)
        let refund = outcome.events.first { $0.type == .refund }
        #expect(refund?.details["reason"] == "FAMILY_REVOKE" && refund?.details["revocationType"] == "FAMILY_REVOKE")
        var full = Self.period(0, revoked: true)
        full.revocationType = "REFUND_FULL"
        full.revocationPercentage = 100_000
        let refunded = PurchaseEngine.apply(
            PurchaseUpdate(source: "notification", transaction: full), purchase: nil, subscription: nil,
            owner: "user", now: Self.start)
        let event = refunded.events.first { $0.type == .refund }
        #expect(event?.details["reason"] == "CUSTOMER_SUPPORT" && event?.details["revocationPercentage"] == "100000")
        // V1's REVOKE (a receipt's record, no revocationType, ownership unknown) is the family's too.
        let v1 = PurchaseEngine.apply(
            PurchaseUpdate(source: "notification", transaction: Self.period(0, revoked: true), notice: .v1(.revoke)),
            purchase: nil, subscription: nil, owner: "user", now: Self.start)
        #expect(v1.events.first { $0.type == .refund }?.details["reason"] == "FAMILY_REVOKE")
    }

    @Test(
        "Receipts: a consumable's refund is never read as reversed (receipts do not show it); V1's refund request marks no subscription"
    )
    func receiptRecords() {
        let coins = PurchaseRecord(
            transactionID: "77", originalTransactionID: "77", bundleID: "app", productID: "coins", kind: .consumable,
            quantity: 3, purchaseDate: Self.start, environment: .sandbox, signedDate: Self.start.addingTimeInterval(1))
        var refunded = coins
        refunded.revocationDate = Self.start.addingTimeInterval(5)
        refunded.signedDate = Self.start.addingTimeInterval(5)
        // A receipt made later, still listing the coins (unfinished), without a cancellation date.
        var inReceipt = PurchaseUpdate(source: "app", transaction: coins)
        inReceipt.transaction?.signedDate = Self.start.addingTimeInterval(9)
        inReceipt.fromReceipt = true
        let result = Self.run([
            PurchaseUpdate(source: "app", transaction: coins),
            PurchaseUpdate(source: "notification", transaction: refunded),
            inReceipt,
        ])
        #expect(result.ledger.map(\.quantity) == [3, -3], "no credit back")
        #expect(result.events == ["NON_RENEWING_PURCHASE", "REFUND"])

        // V1's CONSUMPTION_REQUEST comes with every purchase of the receipt: a subscription in it is not asked
        // about as if its refund were requested.
        var period = PurchaseUpdate(
            source: "notification", transaction: Self.period(0), notice: .v1(.consumptionRequest))
        period.fromReceipt = true
        let asked = Self.run([PurchaseUpdate(source: "app", transaction: Self.period(0)), period])
        #expect(asked.subscription?.refundRequestDate == nil)
    }

    @Test("A signed quantity is counted within 0 and a million: no absurd number reaches the ledger's sums")
    func signedQuantities() {
        #expect(PurchaseRecord.quantity(3) == 3)
        #expect(PurchaseRecord.quantity(0) == 0)
        #expect(PurchaseRecord.quantity(-5) == 0)
        #expect(PurchaseRecord.quantity(.min) == 0)
        #expect(PurchaseRecord.quantity(.max) == 1_000_000)
        #expect(PurchaseRecord.quantity(1_000_001) == 1_000_000)
    }

    @Test("A refunded subscription is revoked (5); an extension moves the renewal date (SUBSCRIPTION_EXTENDED)")
    func refundAndExtension() {
        var extended = Self.period(0, signed: 20)
        extended.expiresDate = extended.expiresDate?.addingTimeInterval(50)
        let result = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(source: "notification", transaction: extended, notice: .v2("RENEWAL_EXTENDED", nil)),
            PurchaseUpdate(source: "notification", transaction: Self.period(0, signed: 30, revoked: true)),
        ])
        #expect(result.events == ["INITIAL_PURCHASE", "SUBSCRIPTION_EXTENDED", "REFUND"])
        #expect(result.subscription?.status == 5)
    }

    @Test("Whatever order notifications arrive in, the subscription ends as the newest facts say", arguments: 0..<24)
    func orderIndependence(permutation: Int) {
        let updates = [
            PurchaseUpdate(source: "notification", transaction: Self.period(0), renewal: Self.renewal(1, status: 1)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(1), renewal: Self.renewal(Self.month + 1, status: 1)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(1, signed: 40),
                renewal: Self.renewal(Self.month + 40, status: 1, autoRenew: false)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(1, signed: Self.month),
                renewal: Self.renewal(Self.month * 2, status: 2, autoRenew: false, intent: 1)),
        ]
        var remaining = updates
        var order: [PurchaseUpdate] = []
        var index = permutation
        for base in stride(from: remaining.count, to: 0, by: -1) {
            order.append(remaining.remove(at: index % base))
            index /= base
        }
        let inOrder = Self.run(updates).subscription
        var shuffled = Self.run(order).subscription
        // What was first seen with the update that happened to come first is not state.
        shuffled?.renewalSignedDate = inOrder?.renewalSignedDate
        #expect(shuffled?.status == inOrder?.status)
        #expect(shuffled?.autoRenewStatus == inOrder?.autoRenewStatus)
        #expect(shuffled?.latestTransactionID == inOrder?.latestTransactionID)
        #expect(shuffled?.expiresDate == inOrder?.expiresDate)
        #expect(shuffled?.expirationIntent == inOrder?.expirationIntent)
    }

    @Test(
        "Renewal facts signed before a refund the app posted do not give access back; before a reversal, do not revoke")
    func olderFactsDoNotUndoRevocation() {
        let refunded = Self.run([
            PurchaseUpdate(source: "notification", transaction: Self.period(0), renewal: Self.renewal(1, status: 1)),
            PurchaseUpdate(source: "app", transaction: Self.period(0, signed: 200, revoked: true)),
            // The customer's auto-renew turned off while asking for the refund, told late (signed at 150).
            PurchaseUpdate(
                source: "notification", renewal: Self.renewal(150, status: 1, autoRenew: false),
                notice: .v2("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED")),
        ])
        #expect(refunded.subscription?.status == 5)
        #expect(refunded.subscription?.autoRenewStatus == false, "the customer's choice still holds")
        #expect(refunded.events == ["INITIAL_PURCHASE", "REFUND"], "no CANCELLATION of a revoked subscription")

        // The other way round: the reversal (signed at 300) posted before Apple's older REFUND (250) arrives.
        let reversed = Self.run([
            PurchaseUpdate(source: "notification", transaction: Self.period(0), renewal: Self.renewal(1, status: 1)),
            PurchaseUpdate(source: "app", transaction: Self.period(0, signed: 300)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(0, signed: 250, revoked: true),
                renewal: Self.renewal(250, status: 5), notice: .v2("REFUND", nil)),
        ])
        #expect(reversed.subscription?.status == 1)
    }

    @Test(
        "A period replaced by an upgrade is no refund: PRODUCT_CHANGE and RENEWAL, the subscription active throughout")
    func upgradeIsNoRefund() {
        var replaced = Self.period(0, signed: 100, revoked: true)
        replaced.isUpgraded = true
        replaced.revocationType = "REFUND_PRORATED"
        replaced.revocationPercentage = 50_000
        let result = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(source: "app", transaction: replaced),
        ])
        #expect(result.events == ["INITIAL_PURCHASE"], "no REFUND")
        #expect(result.subscription?.status == 1 && result.subscription?.revocationDate == nil)
        let upgraded = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(source: "app", transaction: replaced),
            PurchaseUpdate(
                source: "app", transaction: Self.period(1, product: "premium", signed: 101, reason: .purchase)),
        ])
        #expect(upgraded.events == ["INITIAL_PURCHASE", "PRODUCT_CHANGE", "RENEWAL"])
        #expect(upgraded.subscription?.productID == "premium" && upgraded.subscription?.status == 1)
    }

    @Test(
        "A receipt made after a signed record keeps what receipts cannot say; a consumable's refund stays to be reversed"
    )
    func receiptKeepsSignedFacts() {
        var coins = PurchaseRecord(
            transactionID: "77", originalTransactionID: "77", bundleID: "app", productID: "coins", kind: .consumable,
            quantity: 3, purchaseDate: Self.start, environment: .sandbox, ownership: .familyShared, price: 990,
            currency: "EUR", signedDate: Self.start.addingTimeInterval(1))
        coins.subscriptionGroupID = nil
        var refunded = coins
        refunded.revocationDate = Self.start.addingTimeInterval(5)
        refunded.signedDate = Self.start.addingTimeInterval(5)
        var receiptRecord = coins
        receiptRecord.ownership = .purchased
        receiptRecord.price = nil
        receiptRecord.currency = nil
        receiptRecord.signedDate = Self.start.addingTimeInterval(9)
        var inReceipt = PurchaseUpdate(source: "app", transaction: receiptRecord)
        inReceipt.fromReceipt = true
        var reversal = coins
        reversal.signedDate = Self.start.addingTimeInterval(12)
        let result = Self.run([
            PurchaseUpdate(source: "app", transaction: coins),
            PurchaseUpdate(source: "notification", transaction: refunded),
            inReceipt,
            PurchaseUpdate(source: "notification", transaction: reversal, notice: .v2("REFUND_REVERSED", nil)),
        ])
        #expect(result.ledger.map(\.quantity) == [3, -3, 3])
        #expect(result.events == ["NON_RENEWING_PURCHASE", "REFUND", "REFUND_REVERSED"])
        let kept = Self.run([PurchaseUpdate(source: "app", transaction: coins), inReceipt]).purchases["77"]
        #expect(kept?.ownership == .familyShared && kept?.price == 990 && kept?.currency == "EUR")
        #expect(kept?.signedDate == Self.start.addingTimeInterval(9), "the receipt's record is the newer one")
    }

    @Test("Grace-period facts signed when a period posted late ended apply to it; a recovered period's are not undone")
    func graceAfterLatePost() {
        // Period 1's DID_RENEW lost; the app posts it after it ended (signed then); Apple's GRACE_PERIOD,
        // signed when the period ended, arrives after.
        var grace = Self.renewal(2 * Self.month + 1, status: 4)
        grace.gracePeriodExpiresDate = Self.start.addingTimeInterval(2 * Self.month + 100)
        let late = Self.run(
            [
                PurchaseUpdate(source: "app", transaction: Self.period(0)),
                PurchaseUpdate(source: "app", transaction: Self.period(1, signed: Self.month + 20)),
                PurchaseUpdate(
                    source: "notification", renewal: grace, notice: .v2("DID_FAIL_TO_RENEW", "GRACE_PERIOD")),
            ], now: Self.start.addingTimeInterval(2 * Self.month + 30))
        #expect(late.subscription?.status == 4, "\(String(describing: late.subscription))")
        // A grace period's recovery keeps the renewal date: the recovered period begins before the grace facts
        // were signed, and was seen after them; those facts, arriving late, are about the failed renewal.
        var earlier = Self.renewal(Self.month + 10, status: 4)
        earlier.gracePeriodExpiresDate = Self.start.addingTimeInterval(Self.month + 100)
        let recovered = Self.run(
            [
                PurchaseUpdate(source: "app", transaction: Self.period(0)),
                PurchaseUpdate(source: "notification", transaction: Self.period(1, signed: 50)),
                PurchaseUpdate(
                    source: "notification", renewal: earlier, notice: .v2("DID_FAIL_TO_RENEW", "GRACE_PERIOD")),
            ], now: Self.start.addingTimeInterval(Self.month + 60))
        #expect(recovered.subscription?.status == 1)
    }

    @Test("Another product bought after the last period ended (its EXPIRED lost) is a resubscription, not an upgrade")
    func purchaseAfterUnnoticedExpiry() {
        let result = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(source: "app", transaction: Self.period(4, product: "premium", reason: .purchase)),
        ])
        #expect(result.events == ["INITIAL_PURCHASE", "INITIAL_PURCHASE"])
        // Apple's UPGRADE says it was not: a renewal lost in between does not make it a new subscription.
        let upgrade = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(
                source: "notification", transaction: Self.period(4, product: "premium", reason: .purchase),
                notice: .v2("DID_CHANGE_RENEWAL_PREF", "UPGRADE")),
        ])
        #expect(upgrade.events == ["INITIAL_PURCHASE", "PRODUCT_CHANGE", "RENEWAL"])
    }

    @Test("A period first taken as refunded, then told upgraded: the subscription is not revoked, the refund reversed")
    func refundThenUpgraded() {
        var replaced = Self.period(0, signed: 150, revoked: true)
        replaced.isUpgraded = true
        let result = Self.run([
            PurchaseUpdate(source: "app", transaction: Self.period(0)),
            PurchaseUpdate(source: "app", transaction: Self.period(0, signed: 100, revoked: true)),
            PurchaseUpdate(source: "app", transaction: replaced),
        ])
        #expect(result.events == ["INITIAL_PURCHASE", "REFUND", "REFUND_REVERSED"])
        #expect(result.subscription?.status == 1 && result.subscription?.revocationDate == nil)
    }
}
