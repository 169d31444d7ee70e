import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperDashboard
import StorekeeperHTTP
import StorekeeperJSON
import SubscriptionLifecycle
import Synchronization

/// The dashboard's page of one transaction: its subscription, a button for every control verb that applies,
/// and a timeline of the subscription's transactions and notifications.
extension EmulatorDashboard {
    func transactionPage(_ id: TransactionID) async throws -> Page {
        let loaded = try await self.store.storage.read {
            store -> (
                StoredTransaction, [StoredTransaction], StoredSubscription?, [OutboundNotification], Account?, Install?,
                [RetentionRequestRecord]
            )? in
            guard let stored = try store.transaction(id) else { return nil }
            let original = stored.transaction.originalID
            return (
                stored, try store.transactions(original: original), try store.subscription(original),
                try store.notifications(original: original, limit: 500), try store.account(stored.accountID),
                try store.installs(account: stored.accountID, bundle: stored.transaction.bundleID).first,
                try store.retentionRequests(original: original, limit: RetentionLimits.requestsShown)
            )
        }
        guard let (stored, history, subscription, notifications, account, install, retention) = loaded else {
            throw EmulatorError.notFound("no transaction \(id.rawValue)")
        }
        let transaction = stored.transaction
        var body = HTML.facts(
            [
                ("Transaction", "<code id=\"transaction-id\">\(transaction.id.rawValue)</code>"),
                (
                    "Original",
                    HTML.link(
                        transaction.originalID.rawValue,
                        to: Self.dashboardRoot + "/transactions/" + transaction.originalID.rawValue)
                ),
                ("Product", "\(transaction.productID.rawValue)"), ("Type", "\(transaction.kind.rawValue)"),
                (
                    "Account",
                    HTML.link(
                        stored.accountID.rawValue, to: Self.dashboardRoot + "/accounts/" + stored.accountID.rawValue)
                ),
                ("App", "\(transaction.bundleID.rawValue)"), ("Purchased", HTML.date(transaction.purchaseDate)),
                ("Expires", HTML.date(transaction.expiresDate)), ("Price", Self.money(transaction.price)),
                ("Offer", transaction.offer.map { "\($0.type.rawValue) \($0.identifier ?? "")" } ?? "—"),
                ("Ownership", "\(transaction.ownership.rawValue)"),
                (
                    "Revoked",
                    transaction.revocationDate.map {
                        HTML.date($0) + " (reason \(transaction.revocationReason?.rawValue ?? 0))"
                    } ?? "no"
                ),
                ("Finished", Self.yesNo(stored.finished)),
            ], id: "transaction-facts")
        if let state = subscription?.state {
            body += "<h2>Subscription</h2>"
            body += HTML.facts(
                [
                    ("Status", Self.status(state.status)), ("Product", "\(state.productID.rawValue)"),
                    ("Renews to", "\(state.autoRenewProductID.rawValue)"), ("Auto-renew", Self.yesNo(state.autoRenew)),
                    ("Expires", HTML.date(state.expiresDate)),
                    ("Grace period ends", HTML.date(state.gracePeriodExpiresDate)),
                    ("Billing retry ends", HTML.date(state.billingRetryEndsDate)),
                    ("Expiration intent", state.expirationIntent.map { "\($0.rawValue)" } ?? "—"),
                    ("Price increase", state.priceIncreaseStatus.map { "\($0.rawValue)" } ?? "—"),
                    ("Renewals", "\(state.renewalCount)"),
                    ("Billing plan", state.billingPlan.map { "\($0.rawValue)" } ?? "—"),
                    (
                        "Commitment",
                        state.commitment.map { commitment -> HTML in
                            let months: HTML =
                                "month \(commitment.billingPeriodNumber) of \(commitment.totalBillingPeriods), ends "
                            let renewal: HTML =
                                commitment.autoRenew
                                ? ", renews (\(commitment.renewalPlan.rawValue))" : ", cancelled: does not renew"
                            return months + HTML.date(commitment.expiresDate) + renewal
                        } ?? "—"
                    ),
                ], id: "subscription-facts")
        }
        body += "<h2>Actions</h2>"
        body += verbButtons(stored, subscription: subscription?.state, account: account)
        if !stored.finished, let install {
            // What the app does once it has delivered the content.
            let device = HTML.component(install.deviceID.rawValue)
            let app = HTML.component(install.bundleID.rawValue)
            body +=
                ActionForm(
                    "Finish (as the app would)",
                    action:
                        "/_emulator/v1/devices/\(device)/apps/\(app)/transactions/\(HTML.component(stored.id.rawValue))/finish",
                    id: "finish"
                ).html
        }
        body += "<h2>Timeline</h2>"
        var entries: [(date: Date, what: HTML, detail: HTML, bad: Bool)] = []
        for item in history {
            let t = item.transaction
            let kind =
                item.renewalNumber == 0
                ? (t.reason == .purchase ? "Purchase" : "Renewal") : "Renewal \(item.renewalNumber)"
            entries.append(
                (
                    t.purchaseDate, HTML.link(kind, to: Self.dashboardRoot + "/transactions/" + t.id.rawValue),
                    "\(t.productID.rawValue), \(Self.money(t.price).text == "—" ? "no price" : Self.money(t.price).text)\(t.isUpgraded ? " (upgraded)" : "")"
                        as HTML, false
                ))
            if let revoked = t.revocationDate {
                entries.append(
                    (
                        revoked, "Refunded",
                        "transaction \(t.id.rawValue), reason \(t.revocationReason?.rawValue ?? 0)", true
                    ))
            }
        }
        for request in retention {
            // A customer on the cancellation page: what the realtime URL answered, how fast, what was shown.
            let object = request.object
            let outcome = object["outcome"]?.stringValue ?? "?"
            var detail = "shown: \(outcome)"
            if let result = object["result"]?.stringValue {
                detail += "; \(result)"
                if let ms = object["milliseconds"]?.doubleValue { detail += " in \(ms) ms" }
            }
            if object["accepted"] == .bool(true) { detail += "; taken" }
            if let problem = object["problem"]?.stringValue { detail += "; \(problem)" }
            entries.append(
                (
                    request.date, "Cancellation page (retention request)", "\(detail)",
                    outcome == "none" || outcome == "defaultMessage"
                ))
        }
        for notification in notifications {
            let failed = notification.state == .failed
            entries.append(
                (
                    notification.created, "Notification " + Self.notice(notification),
                    "V\(notification.version) to <code>\(HTTPClient.printable(notification.url))</code>: \(notification.state.rawValue); "
                        + Self.attempts(notification),
                    failed || notification.notice.type == .didFailToRenew
                ))
        }
        entries.sort { $0.date < $1.date }
        body += HTML.table(
            id: "timeline", caption: "What happened, oldest first", columns: ["When", "What", "Detail"],
            rows: entries.map { [HTML.date($0.date), $0.what, $0.detail] },
            rowClasses: entries.map { $0.bad ? "bad" : nil })
        return dashboardPage("Transaction \(transaction.id.rawValue)", body: body)
    }

    /// A button per control verb that applies to the transaction.
    func verbButtons(_ stored: StoredTransaction, subscription: SubscriptionState?, account: Account?) -> HTML {
        let base = "/_emulator/v1/transactions/\(HTML.component(stored.id.rawValue))"
        var html = HTML(raw: "")
        let refundReasons = RefundReason.allCases.map { ($0.rawValue, $0.rawValue) }
        if stored.transaction.revocationDate == nil {
            html +=
                ActionForm(
                    "Refund", action: base + "/refund",
                    fields: [.select(name: "reason", label: "Reason", options: refundReasons)], id: "refund",
                    style: "danger"
                ).html
            html += ActionForm("Refund request", action: base + "/refund-request", id: "refund-request").html
            html +=
                ActionForm(
                    "Approve refund request", action: base + "/refund-decision",
                    fields: [.hidden(name: "approved", value: "true", type: "bool")], id: "refund-approve"
                ).html
            html +=
                ActionForm(
                    "Decline refund request", action: base + "/refund-decision",
                    fields: [.hidden(name: "approved", value: "false", type: "bool")], id: "refund-decline"
                ).html
        } else {
            html += ActionForm("Reverse the refund", action: base + "/refund-reversal", id: "refund-reversal").html
        }
        if let state = subscription {
            html += ActionForm("Renew now", action: base + "/renew", id: "renew").html
            html += ActionForm("Expire now", action: base + "/expire", id: "expire", style: "danger").html
            html +=
                ActionForm(
                    state.autoRenew ? "Turn auto-renew off" : "Turn auto-renew on", action: base + "/auto-renew",
                    fields: [.hidden(name: "enabled", value: state.autoRenew ? "false" : "true", type: "bool")],
                    id: "auto-renew"
                ).html
            html += ActionForm("Resolve billing issue", action: base + "/resolve-issue", id: "resolve-issue").html
            html +=
                ActionForm(
                    "Open the cancellation page (retention request)", action: base + "/retention-request",
                    id: "retention-request"
                ).html
            html +=
                ActionForm(
                    "Consent to price increase", action: base + "/price-consent",
                    fields: [.hidden(name: "consent", value: "true", type: "bool")], id: "price-consent"
                ).html
            html +=
                ActionForm(
                    "Decline price increase", action: base + "/price-consent",
                    fields: [.hidden(name: "consent", value: "false", type: "bool")], id: "price-decline"
                ).html
            html +=
                ActionForm(
                    "Price increase for all subscribers",
                    action: "/_emulator/v1/products/\(HTML.component(state.productID.rawValue))/price-increase",
                    fields: [.hidden(name: "requiresConsent", value: "true", type: "bool")], id: "price-increase"
                ).html
            if let account {
                html +=
                    ActionForm(
                        account.billingRetryOnRenewal ? "Renewals succeed again" : "Make renewals fail (billing retry)",
                        action: "/_emulator/v1/accounts/\(HTML.component(account.id.rawValue))/settings",
                        fields: [
                            .hidden(
                                name: "billingRetryOnRenewal", value: account.billingRetryOnRenewal ? "false" : "true",
                                type: "bool")
                        ], id: "billing-retry"
                    ).html
            }
            let period = self.store.catalog.entry(state.productID.rawValue)?.subscription?.period?.description ?? "P1M"
            html +=
                ActionForm(
                    "Advance the clock one period (\(period))", action: "/_emulator/v1/clock",
                    fields: [.hidden(name: "advance", value: period)], id: "advance-period"
                ).html
        }
        return html
    }
}
