public import Foundation
public import StoreModel

/// What the server learned, verified: a transaction, renewal facts (with Apple's status), or both, and the
/// Apple notification that carried them when there was one.
public struct PurchaseUpdate: Sendable, Hashable {
    public var source: ServerEventSource
    public var transaction: PurchaseRecord?
    public var renewal: RenewalFacts?
    public var notice: AppleNotice?
    /// Apple's `consumptionRequestReason`, with a CONSUMPTION_REQUEST.
    public var requestReason: String?
    /// The transaction is a receipt's record (a post's receipt, a V1 notification's), not Apple's signed one:
    /// a receipt never shows a consumable's refund, so it cannot tell that one was reversed.
    public var fromReceipt = false

    public init(
        source: ServerEventSource, transaction: PurchaseRecord? = nil, renewal: RenewalFacts? = nil,
        notice: AppleNotice? = nil, requestReason: String? = nil
    ) {
        self.source = source
        self.transaction = transaction
        self.renewal = renewal
        self.notice = notice
        self.requestReason = requestReason
    }

    /// The subscription (or one-time purchase) it is about; nil when it names none (nothing is applied).
    public var originalTransactionID: TransactionID? {
        transaction?.originalTransactionID ?? renewal?.originalTransactionID
    }
}

/// The Apple notification an update came in: V2's type and subtype, or V1's type.
public enum AppleNotice: Sendable, Hashable {
    case v2(NotificationType, NotificationSubtype?)
    case v1(NotificationTypeV1)

    /// Apple's name for it, as an event records it.
    public var typeName: String {
        switch self {
        case .v2(let type, _): type.rawValue
        case .v1(let type): type.rawValue
        }
    }

    public var subtypeName: String? {
        if case .v2(_, let subtype) = self { return subtype?.rawValue }
        return nil
    }

    /// The customer asked for a refund (CONSUMPTION_REQUEST in either version).
    var isRefundRequest: Bool {
        switch self {
        case .v2(let type, _): type == .consumptionRequest
        case .v1(let type): type == .consumptionRequest
        }
    }

    /// V2's type; nil for V1.
    var type: NotificationType? {
        if case .v2(let type, _) = self { return type }
        return nil
    }

    /// Apple decided a refund request (REFUND, REFUND_DECLINED or REFUND_REVERSED; V1 only has REFUND).
    var decidesRefundRequest: Bool {
        switch self {
        case .v2(let type, _): [.refund, .refundDeclined, .refundReversed].contains(type)
        case .v1(let type): type == .refund
        }
    }
}

/// The purchase server's one transition: the records before and a verified update in, the records after,
/// ledger entries and events out. Pure (time is given), so replaying, duplicating or reordering updates is
/// tested without storage: whatever Apple signed later wins, a change learned twice is one change, and
/// events come from changes of state — never from the message that told of them.
public enum PurchaseEngine {
    public struct Outcome: Sendable, Hashable {
        public var purchase: PurchaseRecord?
        public var subscription: SubscriptionRecord?
        public var ledger: [LedgerEntry] = []
        public var events: [ServerEvent] = []
        /// The update was older than what is stored: nothing changed.
        public var stale = false
    }

    /// Applies `update` to the stored transaction it names and the stored subscription it belongs to.
    /// `owner` is the app user the purchase belongs to (nil: unknown yet).
    public static func apply(
        _ update: PurchaseUpdate, purchase stored: PurchaseRecord?,
        subscription storedSubscription: SubscriptionRecord?,
        owner: String?, now: Date
    ) -> Outcome {
        var outcome = Outcome(purchase: stored, subscription: storedSubscription)
        var context = EventContext(update: update, owner: owner ?? storedSubscription?.owner ?? stored?.owner)
        var appliedTransaction = false
        if var transaction = update.transaction {
            if let stored, transaction.signedDate < stored.signedDate {
                outcome.stale = true
            } else {
                transaction.owner = context.owner
                if update.fromReceipt, let stored { transaction.keepSignedFacts(of: stored) }
                // A later record of the same revocation without Apple's type (a receipt, V1) keeps what the
                // signed one said, so that a reversal gives back what the refund took.
                if let stored, transaction.revocationDate != nil, transaction.revocationType == nil,
                    stored.revocationDate != nil
                {
                    transaction.revocationType = stored.revocationType
                    transaction.revocationPercentage = stored.revocationPercentage
                }
                applyPurchase(transaction, over: stored, into: &outcome, context: &context)
                outcome.purchase = transaction
                appliedTransaction = true
            }
        }
        // A refund request, of any product: the developer has 12 hours to send Apple consumption information.
        // One event a request (the transaction as Apple signed it for this one). V2's only: V1's names no
        // transaction (every one in its receipt comes with it).
        // Not for a purchase refunded already (a request replayed from the history after its decision).
        if update.notice?.type == .consumptionRequest, let transaction = update.transaction ?? stored,
            !(stored?.isRefunded ?? false)
        {
            outcome.events.append(
                context.event(
                    .refundRequest,
                    key: "\(transaction.transactionID):\(milliseconds(transaction.signedDate))",
                    subscription: storedSubscription, transaction: transaction, date: transaction.signedDate,
                    details: update.requestReason.map { ["consumptionRequestReason": $0] } ?? [:]))
        }
        guard let kind = update.transaction?.kind ?? stored?.kind ?? (storedSubscription != nil ? .autoRenewable : nil),
            kind == .autoRenewable
        else { return outcome }
        var subscription = storedSubscription
        if appliedTransaction, let transaction = update.transaction {
            subscription = applyPeriod(transaction, to: storedSubscription, now: now, context: &context, into: &outcome)
        }
        if let renewal = update.renewal, var current = subscription {
            if let applied = current.renewalSignedDate, renewal.signedDate < applied {
                if !appliedTransaction { outcome.stale = true }
            } else {
                // Facts signed before the current period began, or before the server first saw it and while it
                // still ran (a grace period's recovery keeps its renewal date), are about an earlier one: its
                // status (billing retry, say, before the app posted the recovered period) is not this period's;
                // facts signed once it ended are about it, however late the app posted it. Facts signed before a
                // transaction that told of a revocation (or of its reversal) do not undo what it told: a late
                // DID_CHANGE_RENEWAL_STATUS does not give a refunded customer access back.
                // (A second of slack: one notification's records are signed together.)
                let slack = renewal.signedDate.addingTimeInterval(1)
                let earlierPeriod =
                    slack < current.latestPurchaseDate
                    || ((current.periodSignedDate.map { slack < $0 } ?? false)
                        && (current.expiresDate.map { slack < $0 } ?? true))
                let beforeRevocationNews =
                    slack < current.transactionSignedDate
                    && (current.status == 5 || current.revocationDate != nil || renewal.status == 5)
                applyRenewal(renewal, to: &current, setsStatus: !earlierPeriod && !beforeRevocationNews)
                subscription = current
            }
        }
        if var current = subscription {
            current.owner = context.owner
            // V2's request names its transaction; V1's (about a consumable) comes with every purchase of the
            // receipt, so it marks no subscription.
            if update.notice?.isRefundRequest == true, update.notice?.type != nil {
                // When Apple signed it (a later request moves it on; a replayed older one does not).
                let asked = update.transaction?.signedDate ?? now
                current.refundRequestDate = max(current.refundRequestDate ?? asked, asked)
            } else if update.notice?.decidesRefundRequest == true || current.revocationDate != nil {
                current.refundRequestDate = nil
            }
            if let before = storedSubscription { diffEvents(before, current, context: context, into: &outcome) }
            subscription = current
        }
        outcome.subscription = subscription
        return outcome
    }

    /// Who and what the events are about.
    struct EventContext {
        var update: PurchaseUpdate
        var owner: String?

        func event(
            _ type: ServerEventType, key: String, subscription: SubscriptionRecord?, transaction: PurchaseRecord?,
            date: Date, details: [String: String] = [:]
        ) -> ServerEvent {
            ServerEvent(
                id: "\(type.rawValue):\(key)", type: type,
                bundleID: transaction?.bundleID ?? subscription?.bundleID ?? "", appUserID: owner,
                date: date, environment: transaction?.environment ?? subscription?.environment,
                productID: transaction?.productID ?? subscription?.productID,
                transactionID: transaction?.transactionID ?? subscription?.latestTransactionID,
                originalTransactionID: transaction?.originalTransactionID ?? subscription?.originalTransactionID,
                expiresDate: transaction?.expiresDate ?? subscription?.expiresDate, source: update.source,
                appleNotificationType: update.notice?.typeName, appleSubtype: update.notice?.subtypeName,
                details: details)
        }
    }

    static func milliseconds(_ date: Date?) -> String {
        date.map(EpochMilliseconds.string) ?? "-"
    }

    /// One-time purchases, refunds and their reversal, and the consumable ledger.
    static func applyPurchase(
        _ transaction: PurchaseRecord, over stored: PurchaseRecord?, into outcome: inout Outcome,
        context: inout EventContext
    ) {
        let id = transaction.transactionID
        if stored == nil {
            if transaction.kind == .consumable {
                outcome.ledger.append(
                    LedgerEntry(
                        transactionID: id, productID: transaction.productID, quantity: transaction.quantity,
                        reason: .purchase, date: transaction.purchaseDate))
            }
            if transaction.kind != .autoRenewable {
                outcome.events.append(
                    context.event(
                        .nonRenewingPurchase, key: "\(id)", subscription: nil,
                        transaction: transaction, date: transaction.purchaseDate))
            }
        }
        // An upgrade's revocation of the period it replaced is not a refund (Apple tells no REFUND of it).
        let wasRevoked = stored?.isRefunded ?? false
        let isRevoked = transaction.isRefunded
        if isRevoked && !wasRevoked {
            if transaction.kind == .consumable {
                // A prorated refund takes back its share of the units (Apple's revocationPercentage).
                outcome.ledger.append(
                    LedgerEntry(
                        transactionID: id, productID: transaction.productID, quantity: -transaction.revokedUnits,
                        reason: .refund, date: transaction.revocationDate ?? transaction.signedDate))
            }
            // A family member's access ended by the family (Apple's REVOKE, FAMILY_REVOKE) is not a refund
            // the customer asked support for: a family-shared transaction is never refunded itself.
            let family =
                transaction.revocationType.map { $0 == "FAMILY_REVOKE" }
                ?? (transaction.ownership == .familyShared || context.update.notice?.type == .revoke
                    || context.update.notice == .v1(.revoke))
            var details = [
                "reason": family ? "FAMILY_REVOKE" : "CUSTOMER_SUPPORT",
                "revocationReason": String(transaction.revocationReason ?? 0),
            ]
            if let type = transaction.revocationType { details["revocationType"] = type }
            if let share = transaction.revocationPercentage { details["revocationPercentage"] = String(share) }
            outcome.events.append(
                context.event(
                    // With its date: a refund reversed and refunded again is a second REFUND.
                    .refund, key: "\(id):\(milliseconds(transaction.revocationDate ?? transaction.signedDate))",
                    subscription: nil, transaction: transaction,
                    date: transaction.revocationDate ?? transaction.signedDate, details: details))
        } else if wasRevoked && !isRevoked && !(context.update.fromReceipt && transaction.kind == .consumable) {
            if transaction.kind == .consumable {
                // What the refund took back (the stored record still says how much), given back; dated by the
                // revocation it undoes, so that each refund is reversed once however often it is told.
                outcome.ledger.append(
                    LedgerEntry(
                        transactionID: id, productID: transaction.productID,
                        quantity: stored?.revokedUnits ?? transaction.quantity, reason: .refundReversed,
                        date: stored?.revocationDate ?? transaction.signedDate))
            }
            outcome.events.append(
                context.event(
                    .refundReversed,
                    key: "\(id):\(milliseconds(stored?.revocationDate ?? transaction.signedDate))",
                    subscription: nil, transaction: transaction, date: transaction.signedDate))
        }
    }

    /// A subscription period: the first one, a later one, or news about the current one.
    static func applyPeriod(
        _ transaction: PurchaseRecord, to stored: SubscriptionRecord?, now: Date, context: inout EventContext,
        into outcome: inout Outcome
    ) -> SubscriptionRecord {
        guard var subscription = stored else {
            var record = SubscriptionRecord(
                originalTransactionID: transaction.originalTransactionID, bundleID: transaction.bundleID,
                environment: transaction.environment, productID: transaction.productID,
                latestTransactionID: transaction.transactionID, latestPurchaseDate: transaction.purchaseDate,
                status: inferredStatus(transaction, now: now), autoRenewStatus: !transaction.isRefunded,
                autoRenewProductID: transaction.productID, expiresDate: transaction.expiresDate,
                ownership: transaction.ownership,
                revocationDate: transaction.isRefunded ? transaction.revocationDate : nil,
                revocationReason: transaction.isRefunded ? transaction.revocationReason : nil,
                offerType: transaction.offerType,
                offerDiscountType: transaction.offerDiscountType, transactionSignedDate: transaction.signedDate,
                renewalSignedDate: nil, owner: context.owner)
            record.periodSignedDate = transaction.signedDate
            record.billingPlanType = transaction.billingPlanType
            record.commitment = transaction.commitment
            outcome.events.append(
                context.event(
                    .initialPurchase,
                    key: "\(transaction.originalTransactionID):\(transaction.transactionID)",
                    subscription: record, transaction: transaction, date: transaction.purchaseDate,
                    details: ["periodType": periodType(transaction.offerType, transaction.offerDiscountType)]))
            return record
        }
        let newPeriod =
            transaction.transactionID != subscription.latestTransactionID
            && transaction.purchaseDate >= subscription.latestPurchaseDate
        let samePeriod = transaction.transactionID == subscription.latestTransactionID
        guard newPeriod || samePeriod else { return subscription }
        if samePeriod, transaction.isUpgraded == true {
            // The current period, replaced by an upgrade whose own period has not arrived yet: that period
            // (its PRODUCT_CHANGE and RENEWAL) says where the subscription stands, not this one's end. A
            // revocation first taken for a refund (a record that did not say upgraded) is undone.
            if subscription.revocationDate != nil {
                subscription.revocationDate = nil
                subscription.revocationReason = nil
                if subscription.status == 5 { subscription.status = inferredStatus(transaction, now: now) }
            }
            subscription.transactionSignedDate = max(subscription.transactionSignedDate, transaction.signedDate)
            return subscription
        }
        if newPeriod {
            // Apple's reason says what a new period is: a renewal, or bought — an upgrade while subscribed, or a
            // resubscription. Without one (receipts, V1) the dates do: a period starting where the last one ended
            // renews it, one starting before it is bought while subscribed, one after a gap is a resubscription
            // unless billing was being retried (a recovery). Apple's SUBSCRIBED/RESUBSCRIBE says so too, when its
            // EXPIRED has not arrived yet.
            let resubscribed = context.update.notice == .v2(.subscribed, .resubscribe)
            let upgradeNotice = context.update.notice?.subtypeName == NotificationSubtype.upgrade.rawValue
            var renews = transaction.reason == .renewal
            let wasEnded: Bool
            switch transaction.reason {
            case .renewal?: wasEnded = false
            case .purchase?:
                // Bought after the last period ended (its EXPIRED not arrived) is a resubscription, whatever the
                // stored status still says; during billing retry the subscription has not ended.
                let endedBefore =
                    subscription.expiresDate.map { $0 < transaction.purchaseDate.addingTimeInterval(-60) } ?? false
                wasEnded =
                    transaction.productID == subscription.productID || [2, 5].contains(subscription.status)
                    || resubscribed
                    || (endedBefore && ![3, 4].contains(subscription.status) && !upgradeNotice)
            default:
                if let previous = subscription.expiresDate {
                    let gap = transaction.purchaseDate.timeIntervalSince(previous)
                    if abs(gap) < 60 {
                        (wasEnded, renews) = (resubscribed, !resubscribed)
                    } else if gap < 0 {
                        wasEnded = resubscribed
                    } else {
                        wasEnded = ![3, 4].contains(subscription.status) || resubscribed
                        renews = !wasEnded
                    }
                } else {
                    wasEnded = [2, 5].contains(subscription.status) || resubscribed
                }
            }
            // A renewal into the product a plan change named was told when the change was (its PRODUCT_CHANGE);
            // one no change announced (the notification lost) is told now.
            let announced = renews && transaction.productID == subscription.autoRenewProductID
            if transaction.productID != subscription.productID && !wasEnded && !announced {
                outcome.events.append(
                    context.event(
                        .productChange, key: "\(transaction.transactionID)",
                        subscription: subscription,
                        transaction: transaction, date: transaction.purchaseDate,
                        details: [
                            "newProductId": transaction.productID.rawValue,
                            "previousProductId": subscription.productID.rawValue,
                        ]))
            }
            outcome.events.append(
                context.event(
                    wasEnded ? .initialPurchase : .renewal,
                    key: wasEnded
                        ? "\(transaction.originalTransactionID):\(transaction.transactionID)"
                        : transaction.transactionID.rawValue,
                    subscription: subscription, transaction: transaction, date: transaction.purchaseDate,
                    details: ["periodType": periodType(transaction.offerType, transaction.offerDiscountType)]))
            subscription.latestTransactionID = transaction.transactionID
            subscription.latestPurchaseDate = transaction.purchaseDate
            subscription.periodSignedDate = transaction.signedDate
            subscription.productID = transaction.productID
            subscription.offerType = transaction.offerType
            subscription.offerDiscountType = transaction.offerDiscountType
        } else if let expires = transaction.expiresDate, let before = subscription.expiresDate, expires > before,
            transaction.revocationDate == nil,
            context.update.notice?.type == .renewalExtended
                || transaction.signedDate > subscription.transactionSignedDate
        {
            outcome.events.append(
                context.event(
                    .subscriptionExtended,
                    key: "\(transaction.transactionID):\(milliseconds(expires))",
                    subscription: subscription, transaction: transaction, date: transaction.signedDate))
        }
        subscription.expiresDate = transaction.expiresDate
        subscription.revocationDate = transaction.isRefunded ? transaction.revocationDate : nil
        subscription.revocationReason = transaction.isRefunded ? transaction.revocationReason : nil
        subscription.ownership = transaction.ownership
        if newPeriod || samePeriod {
            subscription.billingPlanType = transaction.billingPlanType
            if let month = transaction.commitment {
                var commitment = subscription.commitment ?? CommitmentFacts()
                commitment.billingPeriodNumber = month.billingPeriodNumber
                commitment.totalBillingPeriods = month.totalBillingPeriods
                commitment.expiresDate = month.expiresDate
                commitment.price = month.price
                subscription.commitment = commitment
            } else {
                subscription.commitment = nil
            }
        }
        subscription.transactionSignedDate = max(subscription.transactionSignedDate, transaction.signedDate)
        // Without newer renewal facts, the period itself says where the subscription stands.
        if subscription.renewalSignedDate.map({ transaction.signedDate > $0 }) ?? true {
            let inferred = inferredStatus(transaction, now: now)
            if newPeriod || inferred == 5 || subscription.status == 5 || subscription.renewalSignedDate == nil {
                subscription.status = inferred
                if inferred == 1 { subscription.gracePeriodExpiresDate = nil }
            }
        }
        return subscription
    }

    static func inferredStatus(_ transaction: PurchaseRecord, now: Date) -> Int64 {
        if transaction.isRefunded { return 5 }
        return (transaction.expiresDate ?? .distantFuture) > now ? 1 : 2
    }

    static func applyRenewal(
        _ renewal: RenewalFacts, to subscription: inout SubscriptionRecord, setsStatus: Bool = true
    ) {
        if !setsStatus {
            // Only what still holds: the customer's choices, not where billing stood then.
        } else if let status = renewal.status {
            subscription.status = status
        } else if subscription.status != 5, let retrying = renewal.isInBillingRetryPeriod {
            // No status from Apple (a notification from before it had one): the renewal info says billing retry,
            // in its grace period until that ends, as V1's facts are read; a retry over with the period passed
            // is expired.
            if retrying {
                subscription.status =
                    (renewal.gracePeriodExpiresDate.map { $0 > renewal.signedDate } ?? false) ? 4 : 3
            } else if [3, 4].contains(subscription.status),
                (subscription.expiresDate ?? .distantFuture) <= renewal.signedDate
            {
                subscription.status = 2
            }
        }
        if let autoRenew = renewal.autoRenewStatus { subscription.autoRenewStatus = autoRenew }
        if let product = renewal.autoRenewProductID { subscription.autoRenewProductID = product }
        if setsStatus {
            subscription.expirationIntent = renewal.expirationIntent
            subscription.gracePeriodExpiresDate = renewal.gracePeriodExpiresDate
        }
        subscription.priceIncreaseStatus = renewal.priceIncreaseStatus
        subscription.renewalSignedDate = renewal.signedDate
        subscription.renewalBillingPlanType = renewal.renewalBillingPlanType
        if renewal.commitmentAutoRenewStatus != nil || renewal.commitmentRenewalDate != nil {
            var commitment = subscription.commitment ?? CommitmentFacts()
            commitment.autoRenewStatus = renewal.commitmentAutoRenewStatus
            commitment.renewalDate = renewal.commitmentRenewalDate
            subscription.commitment = commitment
        }
    }

    /// Events that follow from a change of a subscription's state, whatever told of it.
    static func diffEvents(
        _ before: SubscriptionRecord, _ after: SubscriptionRecord, context: EventContext, into outcome: inout Outcome
    ) {
        let key = after.originalTransactionID
        let at = after.renewalSignedDate ?? after.transactionSignedDate
        let stamp = milliseconds(at)
        let live: Set<Int64> = [1, 3, 4]
        if before.autoRenewStatus && !after.autoRenewStatus && after.status != 5 && live.contains(after.status) {
            outcome.events.append(
                context.event(
                    .cancellation, key: "\(key):\(stamp)", subscription: after,
                    transaction: nil, date: at,
                    details: ["reason": after.status == 1 ? "UNSUBSCRIBE" : "BILLING_ERROR"]))
        }
        // A commitment cancelled (or taken back): the subscription still renews month by month until its end.
        let commitmentBefore = before.commitment?.autoRenewStatus
        let commitmentAfter = after.commitment?.autoRenewStatus
        if let was = commitmentBefore, let now = commitmentAfter, was != now, live.contains(after.status) {
            outcome.events.append(
                context.event(
                    now ? .uncancellation : .cancellation, key: "\(key):commitment:\(stamp)", subscription: after,
                    transaction: nil, date: at,
                    details: now ? ["commitment": "true"] : ["reason": "UNSUBSCRIBE", "commitment": "true"]))
        }
        if !before.autoRenewStatus && after.autoRenewStatus && live.contains(after.status)
            && live.contains(before.status)
        {
            outcome.events.append(
                context.event(
                    .uncancellation, key: "\(key):\(stamp)", subscription: after,
                    transaction: nil,
                    date: at))
        }
        if before.status == 1 && (after.status == 3 || after.status == 4) {
            var details: [String: String] = [:]
            if let grace = after.gracePeriodExpiresDate { details["gracePeriodExpiresDate"] = milliseconds(grace) }
            outcome.events.append(
                context.event(
                    .billingIssue, key: "\(key):\(milliseconds(after.expiresDate))",
                    subscription: after,
                    transaction: nil, date: at, details: details))
        }
        if live.contains(before.status) && after.status == 2 {
            let reasons: [Int64: String] = [1: "UNSUBSCRIBE", 2: "BILLING_ERROR", 3: "PRICE_INCREASE", 4: "UNKNOWN"]
            outcome.events.append(
                context.event(
                    .expiration, key: "\(key):\(milliseconds(after.expiresDate))",
                    subscription: after,
                    transaction: nil, date: at,
                    details: ["reason": after.expirationIntent.flatMap { reasons[$0] } ?? "UNKNOWN"]))
        }
        if let next = after.autoRenewProductID, next != before.autoRenewProductID, next != after.productID,
            after.productID == before.productID
        {
            outcome.events.append(
                context.event(
                    .productChange, key: "\(key):\(next):\(stamp)", subscription: after,
                    transaction: nil,
                    date: at, details: ["newProductId": next.rawValue, "previousProductId": after.productID.rawValue]))
        }
    }

    /// RevenueCat's period types: `trial`, `intro`, `promotional` or `normal`.
    public static func periodType(_ offerType: Int64?, _ discount: String?) -> String {
        switch offerType {
        case 1: discount == "FREE_TRIAL" ? "trial" : "intro"
        case 2, 3, 4: "promotional"
        default: "normal"
        }
    }
}
