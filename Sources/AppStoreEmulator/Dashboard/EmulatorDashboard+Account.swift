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

/// The dashboard's page of one account: its settings, devices, a buy form, Ask to Buy requests, subscriptions,
/// transactions and family.
extension EmulatorDashboard {
    func accountPage(_ id: AccountID) async throws -> Page {
        let bundles = self.store.apps.keys.sorted().map(BundleID.init)
        let loaded = try await self.store.storage.read {
            store -> (
                Account, [Device], [StoredSubscription], [PendingPayment], [PendingPayment], [StoredTransaction],
                Family?
            )? in
            guard let account = try store.account(id) else { return nil }
            var subscriptions: [StoredSubscription] = []
            var payments: [PendingPayment] = []
            for bundle in bundles {
                subscriptions += try store.subscriptions(account: id, bundle: bundle)
                payments += try store.unfinishedPayments(account: id, bundle: bundle)
            }
            return (
                account, try store.devices(account: id), subscriptions, payments,
                try store.resolvablePayments(account: id),
                try store.transactions(matching: TransactionFilter(account: id), revisionBefore: nil, limit: 100),
                try store.family(member: id)
            )
        }
        guard let (account, devices, subscriptions, payments, resolvable, transactions, family) = loaded else {
            throw EmulatorError.notFound("no account \(id.rawValue)")
        }
        let settings = "/_emulator/v1/accounts/\(HTML.component(id.rawValue))/settings"
        var body = HTML.facts(
            [
                ("Account", "<code>\(id.rawValue)</code>"), ("Environment", "\(account.environment.rawValue)"),
                ("Storefront", "\(account.storefront)"), ("Ask to Buy", Self.yesNo(account.askToBuy)),
                ("Renewals fail (billing retry)", Self.yesNo(account.billingRetryOnRenewal)),
                ("Billing grace period", Self.yesNo(account.billingGracePeriod)),
                ("Family", family.map { "<code>\($0.id)</code> (\($0.members.count) members)" } ?? "—"),
            ], id: "account-facts")
        body += "<h2>Settings</h2>"
        for (member, label, current) in [
            ("billingRetryOnRenewal", "renewals fail", account.billingRetryOnRenewal),
            ("billingGracePeriod", "grace period", account.billingGracePeriod),
            ("askToBuy", "Ask to Buy", account.askToBuy),
        ] {
            body +=
                ActionForm(
                    current ? "Turn \(label) off" : "Turn \(label) on", action: settings,
                    fields: [.hidden(name: member, value: current ? "false" : "true", type: "bool")],
                    id: "toggle-\(member)"
                ).html
        }
        body +=
            ActionForm(
                "Set purchase outcome", action: settings,
                fields: [
                    .select(
                        name: "purchaseFailure", label: "Purchases",
                        options: [("null", "succeed"), ("\"failed\"", "fail"), ("\"interrupted\"", "are interrupted")],
                        type: "json")
                ], id: "purchase-failure"
            ).html
        body += "<h2>Devices</h2>"
        body += HTML.table(
            id: "devices", caption: "Devices", columns: ["Device"],
            rows: devices.map { ["<code>\($0.id.rawValue)</code>"] }, empty: "none; add one to buy.")
        body +=
            ActionForm(
                "Add a device", action: "/_emulator/v1/devices",
                fields: [.hidden(name: "accountId", value: id.rawValue)],
                id: "add-device"
            ).html
        if !devices.isEmpty, !bundles.isEmpty {
            body += "<h2>Buy</h2>"
            let products = self.store.catalog.all.sorted { $0.productID < $1.productID }.map { entry in
                (
                    entry.productID,
                    "\(entry.name ?? entry.productID) (\(entry.kind.rawValue), \(entry.displayPrice ?? "—"))"
                )
            }
            body +=
                ActionForm(
                    "Buy", action: "/_emulator/v1/devices/{device}/apps/{app}/payments",
                    fields: [
                        .select(
                            name: "device", label: "Device", options: devices.map { ($0.id.rawValue, $0.id.rawValue) }),
                        .select(name: "app", label: "App", options: bundles.map { ($0.rawValue, $0.rawValue) }),
                        .select(name: "productId", label: "Product", options: products),
                        .text(name: "offerCode", label: "Offer code (optional)"),
                    ], next: Self.dashboardRoot + "/transactions/{transaction.transactionIdentifier}",
                    before: ["/_emulator/v1/devices/{device}/apps/{app}/install"], id: "buy"
                ).html
        }
        let waiting = payments.filter { $0.state == .deferred }
        body += "<h2>Ask to Buy requests</h2>"
        body += HTML.table(
            id: "requests", caption: "Waiting for a parent", columns: ["Request", "Product", "Date", "Decide"],
            rows: waiting.map { payment in
                let base =
                    "/_emulator/v1/accounts/\(HTML.component(id.rawValue))/requests/\(HTML.component(payment.id.rawValue))"
                return [
                    "<code>\(payment.id.rawValue)</code>", "\(payment.productID.rawValue)", HTML.date(payment.date),
                    ActionForm("Approve", action: base + "/approve", id: "approve-\(payment.id.rawValue)").html
                        + ActionForm(
                            "Decline", action: base + "/decline", id: "decline-\(payment.id.rawValue)", style: "danger"
                        ).html,
                ]
            }, empty: "none.")
        if !resolvable.isEmpty {
            body +=
                ActionForm(
                    "Resolve \(resolvable.count) interrupted purchase(s)",
                    action: "/_emulator/v1/accounts/\(HTML.component(id.rawValue))/interruptions/resolve",
                    id: "resolve-interruptions"
                ).html
        }
        body += "<h2>Subscriptions</h2>"
        body += HTML.table(
            id: "subscriptions", caption: "Auto-renewable subscriptions",
            columns: ["Original transaction", "Product", "Status", "Expires", "Auto-renew"],
            rows: subscriptions.map { subscription in
                [
                    HTML.link(
                        subscription.originalTransactionID.rawValue,
                        to: Self.dashboardRoot + "/transactions/" + subscription.originalTransactionID.rawValue),
                    "\(subscription.state.productID.rawValue)", Self.status(subscription.state.status),
                    HTML.date(subscription.state.expiresDate), Self.yesNo(subscription.state.autoRenew),
                ]
            }, empty: "none.")
        body += "<h2>Transactions</h2>"
        body += transactionTable(transactions, caption: "This account's, most recently changed first")
        body += "<h2>Family Sharing</h2>"
        if let family {
            body +=
                ActionForm(
                    "Leave the family (its shared purchases are revoked)", method: "DELETE",
                    action:
                        "/_emulator/v1/families/\(HTML.component(family.id))/members/\(HTML.component(id.rawValue))",
                    id: "leave-family", style: "danger"
                ).html
        }
        body +=
            ActionForm(
                "Start a family with this account as organizer", action: "/_emulator/v1/families",
                fields: [
                    .hidden(name: "organizer", value: id.rawValue),
                    .text(
                        name: "members", label: "Members (JSON list of account ids)", placeholder: "[\"…\"]",
                        type: "json"),
                ], id: "create-family"
            ).html
        return dashboardPage("Account", body: body)
    }
}
