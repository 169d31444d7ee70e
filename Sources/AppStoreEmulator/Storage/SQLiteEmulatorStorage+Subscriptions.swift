import Foundation
import StoreModel
import StorekeeperSQL
import StorekeeperSQLite
import SubscriptionLifecycle

/// Subscriptions, pending payments (deferred by Ask to Buy, failed or interrupted) and due events, over one
/// connection.
extension SQLiteEmulatorStorage.Store {
    // MARK: Subscriptions

    func storedSubscription(_ row: Row) -> StoredSubscription {
        var state = SubscriptionState(
            originalTransactionID: TransactionID(row["original_id"].string ?? ""),
            productID: ProductID(row["product_id"].string ?? ""),
            autoRenewProductID: ProductID(row["auto_renew_product_id"].string ?? ""),
            status: SubscriptionStatus(rawValue: row["status"].int64 ?? 1) ?? .active,
            autoRenew: row["auto_renew"].int64 == 1, expiresDate: date(row["expires_date"]),
            expirationIntent: row["expiration_intent"].int64.flatMap(ExpirationIntent.init(rawValue:)),
            gracePeriodExpiresDate: date(row["grace_period_expires_date"]),
            billingRetryEndsDate: date(row["billing_retry_ends_date"]),
            renewalCount: Int(row["renewal_count"].int64 ?? 0),
            priceIncreaseStatus: row["price_increase_status"].int64.flatMap(PriceIncreaseStatus.init(rawValue:)))
        state.offer = row["offer_type"].int64.flatMap(OfferType.init(rawValue:)).map {
            Offer(
                type: $0, identifier: row["offer_id"].string,
                discountType: row["offer_discount"].string.flatMap(OfferDiscountType.init(rawValue:)),
                period: row["offer_period"].string)
        }
        state.offerPeriodsLeft = Int(row["offer_periods_left"].int64 ?? 0)
        state.billingPlan = row["billing_plan"].string.flatMap(BillingPlanType.init(rawValue:))
        state.commitment = CommitmentColumns.subscriptionCommitment(row["commitment"].string)
        state.renewalBillingPlan = row["renewal_billing_plan"].string.flatMap(BillingPlanType.init(rawValue:))
        state.runStart = date(row["run_start"])
        return StoredSubscription(
            state: state, accountID: AccountID(row["account_id"].string ?? ""),
            bundleID: BundleID(row["bundle_id"].string ?? ""),
            latestTransactionID: TransactionID(row["latest_transaction_id"].string ?? ""))
    }

    func subscription(_ originalID: TransactionID) throws -> StoredSubscription? {
        try connection.execute("SELECT * FROM subscriptions WHERE original_id = ?", [.text(originalID.rawValue)])
            .first.map(storedSubscription)
    }

    func save(_ subscription: StoredSubscription) throws {
        let state = subscription.state
        try inserting("subscription") {
            try connection.execute(
                """
                INSERT INTO subscriptions (original_id, account_id, bundle_id, product_id,
                    auto_renew_product_id, status, auto_renew, expires_date, expiration_intent,
                    grace_period_expires_date, billing_retry_ends_date, renewal_count, latest_transaction_id,
                    price_increase_status, offer_type, offer_id, offer_discount, offer_period, offer_periods_left,
                    billing_plan, commitment, renewal_billing_plan, run_start)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (original_id) DO UPDATE SET product_id = excluded.product_id,
                    auto_renew_product_id = excluded.auto_renew_product_id, status = excluded.status,
                    auto_renew = excluded.auto_renew, expires_date = excluded.expires_date,
                    expiration_intent = excluded.expiration_intent,
                    grace_period_expires_date = excluded.grace_period_expires_date,
                    billing_retry_ends_date = excluded.billing_retry_ends_date,
                    renewal_count = excluded.renewal_count, latest_transaction_id = excluded.latest_transaction_id,
                    price_increase_status = excluded.price_increase_status, offer_type = excluded.offer_type,
                    offer_id = excluded.offer_id, offer_discount = excluded.offer_discount,
                    offer_period = excluded.offer_period, offer_periods_left = excluded.offer_periods_left,
                    billing_plan = excluded.billing_plan, commitment = excluded.commitment,
                    renewal_billing_plan = excluded.renewal_billing_plan, run_start = excluded.run_start
                WHERE account_id = excluded.account_id AND bundle_id = excluded.bundle_id
                """,
                [
                    .text(state.originalTransactionID.rawValue), .text(subscription.accountID.rawValue),
                    .text(subscription.bundleID.rawValue), .text(state.productID.rawValue),
                    .text(state.autoRenewProductID.rawValue), .integer(state.status.rawValue),
                    flag(state.autoRenew), real(state.expiresDate), integer(state.expirationIntent?.rawValue),
                    real(state.gracePeriodExpiresDate), real(state.billingRetryEndsDate),
                    .integer(Int64(state.renewalCount)), .text(subscription.latestTransactionID.rawValue),
                    integer(state.priceIncreaseStatus?.rawValue), integer(state.offer?.type.rawValue),
                    text(state.offer?.identifier), text(state.offer?.discountType?.rawValue),
                    text(state.offer?.period), .integer(Int64(state.offerPeriodsLeft)),
                    text(state.billingPlan?.rawValue), text(CommitmentColumns.text(state.commitment)),
                    text(state.renewalBillingPlan?.rawValue), real(state.runStart),
                ])
        }
        // The owner is not assigned on update (an index of it would be rewritten at every renewal): a save
        // that would change it changes nothing, and is refused.
        guard connection.changes > 0 else {
            throw EmulatorStorageError.invalid("a subscription's account and app cannot change")
        }
    }

    func subscriptionIDs(renewingTo product: ProductID) throws -> [TransactionID] {
        try connection.execute(
            """
            SELECT original_id FROM subscriptions WHERE auto_renew_product_id = ? AND status IN (1, 3, 4)
            ORDER BY length(original_id), original_id
            """, [.text(product.rawValue)]
        ).compactMap { $0["original_id"].string.map(TransactionID.init) }
    }

    func subscriptions(account: AccountID, bundle: BundleID) throws -> [StoredSubscription] {
        try connection.execute(
            """
            SELECT * FROM subscriptions WHERE account_id = ? AND bundle_id = ?
            ORDER BY length(original_id), original_id
            """, [.text(account.rawValue), .text(bundle.rawValue)]
        ).map(storedSubscription)
    }

    // MARK: Pending payments

    func pendingPayment(_ row: Row) -> PendingPayment {
        PendingPayment(
            id: TransactionID(row["id"].string ?? ""), accountID: AccountID(row["account_id"].string ?? ""),
            bundleID: BundleID(row["bundle_id"].string ?? ""), productID: ProductID(row["product_id"].string ?? ""),
            quantity: Int(row["quantity"].int64 ?? 1), date: date(row["date"]) ?? .distantPast,
            state: PendingPayment.State(rawValue: row["state"].string ?? "") ?? .failed,
            reason: row["reason"].string.flatMap(PendingPayment.Reason.init(rawValue:)),
            finished: row["finished"].int64 == 1, appAccountToken: row["app_account_token"].string,
            applicationUsername: row["application_username"].string, resolvable: row["resolvable"].int64 == 1)
    }

    func values(_ payment: PendingPayment) -> [SQLValue] {
        [
            .text(payment.id.rawValue), .text(payment.accountID.rawValue), .text(payment.bundleID.rawValue),
            .text(payment.productID.rawValue), .integer(Int64(payment.quantity)), real(payment.date),
            .text(payment.state.rawValue), text(payment.reason?.rawValue), flag(payment.finished),
            text(payment.appAccountToken), text(payment.applicationUsername), flag(payment.resolvable),
        ]
    }

    func payment(_ id: TransactionID) throws -> PendingPayment? {
        try connection.execute("SELECT * FROM pending_payments WHERE id = ?", [.text(id.rawValue)]).first.map(
            pendingPayment)
    }

    func insert(_ payment: PendingPayment) throws {
        try inserting("payment") {
            try connection.execute(
                """
                INSERT INTO pending_payments (id, account_id, bundle_id, product_id, quantity, date, state, reason,
                    finished, app_account_token, application_username, resolvable)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, values(payment))
        }
    }

    func update(_ payment: PendingPayment) throws {
        try connection.execute(
            """
            UPDATE pending_payments SET account_id = ?, bundle_id = ?, product_id = ?, quantity = ?, date = ?,
                state = ?, reason = ?, finished = ?, app_account_token = ?, application_username = ?,
                resolvable = ?
            WHERE id = ?
            """, Array(values(payment).dropFirst()) + [.text(payment.id.rawValue)])
        try changed("payment")
    }

    func unfinishedPayments(account: AccountID, bundle: BundleID) throws -> [PendingPayment] {
        try connection.execute(
            """
            SELECT * FROM pending_payments WHERE account_id = ? AND bundle_id = ? AND finished = 0 ORDER BY date, id
            """, [.text(account.rawValue), .text(bundle.rawValue)]
        ).map(pendingPayment)
    }

    func resolvablePayments(account: AccountID) throws -> [PendingPayment] {
        try connection.execute(
            "SELECT * FROM pending_payments WHERE account_id = ? AND resolvable = 1 ORDER BY date, id",
            [.text(account.rawValue)]
        ).map(pendingPayment)
    }

    // MARK: Due events

    func schedule(_ event: DueEvent) throws {
        try connection.execute(
            """
            INSERT INTO due_events (kind, key, due) VALUES (?, ?, ?)
            ON CONFLICT (kind, key) DO UPDATE SET due = excluded.due
            """,
            [.text(event.kind.rawValue), .text(event.key), real(event.due)])
    }

    func cancel(kind: DueEvent.Kind, key: String) throws {
        try connection.execute(
            "DELETE FROM due_events WHERE kind = ? AND key = ?", [.text(kind.rawValue), .text(key)])
    }

    func events(kind: DueEvent.Kind, limit: Int) throws -> [DueEvent] {
        try connection.execute(
            "SELECT kind, key, due FROM due_events WHERE kind = ? ORDER BY key LIMIT ?",
            [.text(kind.rawValue), .integer(Int64(limit))]
        ).map { row in
            DueEvent(
                kind: DueEvent.Kind(rawValue: row["kind"].string ?? ""), key: row["key"].string ?? "",
                due: date(row["due"]) ?? .distantPast)
        }
    }

    func nextDue() throws -> Date? {
        try connection.execute("SELECT min(due) AS due FROM due_events").first.flatMap { date($0["due"]) }
    }

    func due(until time: Date, limit: Int) throws -> [DueEvent] {
        try connection.execute(
            "SELECT kind, key, due FROM due_events WHERE due <= ? ORDER BY due, kind, key LIMIT ?",
            [real(time), .integer(Int64(limit))]
        ).map { row in
            DueEvent(
                kind: DueEvent.Kind(rawValue: row["kind"].string ?? ""), key: row["key"].string ?? "",
                due: date(row["due"]) ?? .distantPast)
        }
    }
}
