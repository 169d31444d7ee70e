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

/// The emulator's web dashboard at `/` (Xcode's Transaction Manager, for the whole store): the clock,
/// accounts and devices, every transaction (filterable), one subscription's timeline with a button for
/// every control verb, the notification outbox and the certificates. Pages are server-rendered HTML behind
/// the control plane's guard; buttons send the control plane's own JSON requests (see `dashboard.js`).
struct EmulatorDashboard: Sendable {
    /// The store it shows and drives (through the control plane's routes).
    let store: AppStore

    static let dashboardRoot = "/dashboard"
    static let dashboardAssets = "/dashboard/assets"

    func addDashboardRoutes(to router: inout Router, login: DashboardLogin) {
        let dashboard = self
        func page(_ build: @escaping @Sendable (HTTPRequest, RequestContext) async throws -> Page) -> Handler {
            { request, context in
                do {
                    try await store.catchUp()
                    return DashboardLogin.page(try await build(request, context))
                } catch let error as EmulatorError {
                    let body: HTML = "<p class=\"badge bad\" role=\"alert\">\(error.message)</p>"
                    return DashboardLogin.page(dashboard.dashboardPage("Not found", body: body), status: error.status)
                }
            }
        }
        router.get("/", page { request, _ in try await dashboard.overviewPage(request.query) })
        router.get(Self.dashboardRoot, { _, _ in HTTPResponse(status: 303, headers: [("Location", "/")]) })
        router.get(
            Self.dashboardAssets + "/{file}", { _, context in DashboardLogin.asset(try context.parameter("file")) })
        router.get(Self.dashboardRoot + "/login", { _, _ in login.form(secretName: "Control-plane token") })
        router.post(
            Self.dashboardRoot + "/login",
            { request, _ in login.signIn(request, home: "/", secretName: "Control-plane token") })
        router.post(Self.dashboardRoot + "/logout", { request, _ in login.signOut(request) })
        router.get(
            Self.dashboardRoot + "/accounts/{account}",
            page { _, context in try await dashboard.accountPage(AccountID(try context.parameter("account"))) })
        router.get(
            Self.dashboardRoot + "/transactions/{transaction}",
            { request, context in
                let id = TransactionID(try context.parameter("transaction"))
                do {
                    try await store.catchUp()
                    // A payment that is not a transaction (yet): its account's page lists it.
                    if let account = try await store.storage.read({ store in
                        try store.transaction(id) == nil ? try store.payment(id)?.accountID : nil
                    }) {
                        return HTTPResponse(
                            status: 303,
                            headers: [
                                ("Location", Self.dashboardRoot + "/accounts/" + HTML.component(account.rawValue))
                            ])
                    }
                    return DashboardLogin.page(try await dashboard.transactionPage(id))
                } catch let error as EmulatorError {
                    let body: HTML = "<p class=\"badge bad\" role=\"alert\">\(error.message)</p>"
                    return DashboardLogin.page(dashboard.dashboardPage("Not found", body: body), status: error.status)
                }
            })
        for (name, root) in [("receipt-root.cer", true), ("jws-root.cer", false)] {
            router.get(
                Self.dashboardRoot + "/certificates/" + name,
                { _, _ in
                    HTTPResponse(
                        status: 200,
                        headers: [
                            ("Content-Type", "application/pkix-cert"),
                            ("Content-Disposition", "attachment; filename=\"\(name)\""),
                        ],
                        body: root ? store.pki.receipts.root.derEncoded : store.pki.signedData.root.derEncoded)
                })
        }
    }

    func dashboardPage(_ title: String, current: String = "", body: HTML) -> Page {
        Page(
            title: title, product: "App Store emulator",
            navigation: [("Overview", "/"), ("Outbox", "/#outbox"), ("Certificates", "/#certificates")],
            current: current, assets: Self.dashboardAssets, body: body)
    }

    // MARK: Pages

    /// Accounts the overview lists at a time.
    static let accountsPerPage = 50

    func overviewPage(_ query: HTTPQuery) async throws -> Page {
        let filter = TransactionFilter(
            account: query["account"].flatMap { $0.isEmpty ? nil : AccountID($0) },
            bundle: query["app"].flatMap { $0.isEmpty ? nil : BundleID($0) },
            product: query["product"].flatMap { $0.isEmpty ? nil : ProductID($0) })
        let before = query["before"].flatMap { Int64($0) }
        let accountsAfter = query["accountsAfter"].flatMap { $0.isEmpty ? nil : AccountID($0) }
        let (accounts, transactions, outbox, deviceCounts) = try await self.store.storage.read { store in
            // A page of accounts, as of transactions: the page costs the same whatever the store holds.
            let accounts = try store.accounts(after: accountsAfter, limit: Self.accountsPerPage)
            let transactions = try store.transactions(matching: filter, revisionBefore: before, limit: 50)
            let pending = try store.events(kind: .notificationAttempt, limit: 200).sorted { $0.due < $1.due }
            let outbox = try pending.prefix(50).compactMap { event in
                try store.notification(event.key).map { ($0, event.due) }
            }
            let counts = try accounts.map { try store.devices(account: $0.id).count }
            return (accounts, transactions, outbox, counts)
        }
        var body: HTML = "<section aria-labelledby=\"clock-heading\"><h2 id=\"clock-heading\">Clock</h2>"
        body += clockSection()
        body += "</section><section aria-labelledby=\"accounts-heading\"><h2 id=\"accounts-heading\">Accounts</h2>"
        body += HTML.table(
            id: "accounts", caption: "Accounts by id, \(Self.accountsPerPage) at a time",
            columns: ["Account", "Environment", "Storefront", "Devices", "Ask to Buy", "Billing retry", "Grace"],
            rows: accounts.enumerated().map { index, account in
                [
                    HTML.link(account.id.rawValue, to: Self.dashboardRoot + "/accounts/" + account.id.rawValue),
                    "\(account.environment.rawValue)", "\(account.storefront)", "\(deviceCounts[index])",
                    Self.yesNo(account.askToBuy), Self.yesNo(account.billingRetryOnRenewal),
                    Self.yesNo(account.billingGracePeriod),
                ]
            }, empty: "no account yet; create one below.")
        if accounts.count == Self.accountsPerPage, let last = accounts.last {
            var next = query.parameters.filter { $0.name != "accountsAfter" }.map {
                "\($0.name)=\(HTML.component($0.value))"
            }
            next.append("accountsAfter=\(HTML.component(last.id.rawValue))")
            body += "<p>" + HTML.link("Next accounts", to: "/?" + next.joined(separator: "&")) + "</p>"
        }
        body +=
            ActionForm(
                "Create account", action: "/_emulator/v1/accounts",
                fields: [
                    .select(
                        name: "environment", label: "Environment",
                        options: [("Sandbox", "Sandbox"), ("Production", "Production")]),
                    .text(name: "storefront", label: "Storefront", placeholder: store.defaultStorefront.countryCode),
                ], next: Self.dashboardRoot + "/accounts/{accountId}", id: "create-account"
            ).html
        body += "</section><section aria-labelledby=\"transactions-heading\">"
        body += "<h2 id=\"transactions-heading\">Transactions</h2>"
        body += """
            <form method="get" action="/" id="transaction-filter">\
            <label>Account <input name="account" value="\(filter.account?.rawValue)"></label> \
            <label>App <select name="app"><option value="">Any</option>\(HTML.join(self.store.apps.keys.sorted().map { bundle in
                "<option value=\"\(bundle)\"\(filter.bundle?.rawValue == bundle ? HTML(raw: " selected") : "")>\(bundle)</option>"
            }))</select></label> \
            <label>Product <select name="product"><option value="">Any</option>\(HTML.join(self.store.catalog.all.map(\.productID).sorted().map { product in
                "<option value=\"\(product)\"\(filter.product?.rawValue == product ? HTML(raw: " selected") : "")>\(product)</option>"
            }))</select></label> <button type="submit">Filter</button></form>
            """
        body += transactionTable(transactions, caption: "Most recently changed first")
        if transactions.count == 50, let last = transactions.last {
            var older = query.parameters.filter { $0.name != "before" }.map { "\($0.name)=\(HTML.component($0.value))" }
            older.append("before=\(last.revision)")
            body += "<p>" + HTML.link("Older transactions", to: "/?" + older.joined(separator: "&")) + "</p>"
        }
        body += "</section>" + appsSection() + productsSection()
        body += "<section aria-labelledby=\"outbox-heading\" id=\"outbox\">"
        body += "<h2 id=\"outbox-heading\">Notification outbox</h2>"
        body += HTML.table(
            id: "outbox-table", caption: "Notifications waiting for an attempt (soonest first)",
            columns: ["Notification", "Type", "To", "Attempts", "Next attempt"],
            rows: outbox.map { notification, due in
                [
                    "<code>\(notification.id)</code>", Self.notice(notification),
                    "<code>\(HTTPClient.printable(notification.url))</code>",
                    Self.attempts(notification), HTML.date(due),
                ]
            }, empty: "nothing waiting.")
        body += "</section><section aria-labelledby=\"certificates-heading\" id=\"certificates\">"
        body += "<h2 id=\"certificates-heading\">Certificates</h2>"
        body += """
            <p>Trust these roots in the app or server under test instead of Apple's.</p><ul>\
            <li>\(HTML.link("Receipt root (DER)", to: Self.dashboardRoot + "/certificates/receipt-root.cer"))</li>\
            <li>\(HTML.link("Signed-data (JWS) root (DER)", to: Self.dashboardRoot + "/certificates/jws-root.cer"))</li>\
            <li>\(HTML.link("Both, base64 in JSON", to: "/_emulator/v1/certificates"))</li></ul></section>
            """
        return dashboardPage("App Store emulator", current: "/", body: body)
    }

    /// Where each app's notifications go, with a form to change it (`PUT …/apps/{bundleId}/notifications`).
    func appsSection() -> HTML {
        var html: HTML =
            "<section aria-labelledby=\"apps-heading\"><h2 id=\"apps-heading\">Apps and notifications</h2>"
        for bundle in self.store.apps.keys.sorted() {
            let settings = self.store.notificationSettings.withLock { $0[bundle] } ?? AppNotifications()
            func urls(_ list: [String]) -> HTML {
                // Without credentials or query (tokens travel there): a page is not where secrets are shown.
                list.isEmpty ? "nowhere" : "<code>\(list.map(HTTPClient.printable).joined(separator: ", "))</code>"
            }
            html += "<h3>\(bundle)</h3>"
            html += HTML.facts(
                [
                    ("Sandbox notifications to", urls(settings.sandboxURLs)),
                    ("Production notifications to", urls(settings.productionURLs)),
                    ("Version", "V\(settings.version)"),
                ], id: "notifications-\(bundle)")
            html +=
                ActionForm(
                    "Send notifications there", method: "PUT",
                    action: "/_emulator/v1/apps/\(HTML.component(bundle))/notifications",
                    fields: [
                        .text(
                            name: "sandboxURL", label: "Sandbox URL",
                            placeholder: "http://127.0.0.1:8090/v1/notifications/apple/\(bundle)"),
                        .text(name: "productionURL", label: "Production URL"),
                        .select(name: "version", label: "Version", options: [("2", "V2"), ("1", "V1")], type: "int"),
                    ], id: "notifications-form"
                ).html
        }
        return html + "</section>"
    }

    /// The catalogue, with each product's availability (a product off sale cannot renew).
    func productsSection() -> HTML {
        let offSale = self.store.productsNotForSale.withLock { $0 }
        let products = self.store.catalog.all.sorted { $0.productID < $1.productID }
        let rows = products.map { entry -> [HTML] in
            let forSale = !offSale.contains(ProductID(entry.productID))
            let toggle = ActionForm(
                forSale ? "Remove from sale" : "Put on sale",
                action: "/_emulator/v1/products/\(HTML.component(entry.productID))/availability",
                fields: [.hidden(name: "forSale", value: forSale ? "false" : "true", type: "bool")],
                id: "availability-\(entry.productID.replacingOccurrences(of: ".", with: "-"))")
            return [
                "<code>\(entry.productID)</code>", "\(entry.name ?? "—")", "\(entry.kind.rawValue)",
                "\(entry.displayPrice ?? "—")", "\(entry.subscription?.period?.description ?? "—")", toggle.html,
            ]
        }
        return "<section aria-labelledby=\"products-heading\"><h2 id=\"products-heading\">Products</h2>"
            + HTML.table(
                id: "products", caption: "The catalogue",
                columns: ["Product", "Name", "Type", "Price", "Period", "For sale"], rows: rows) + "</section>"
    }

    func clockSection() -> HTML {
        let (now, rate) = (self.store.now, self.store.rate)
        var html = HTML.facts([("Store time", HTML.date(now)), ("Time rate", "<span id=\"rate\">\(rate.name)</span>")])
        html +=
            ActionForm(
                "Advance the clock", action: "/_emulator/v1/clock",
                fields: [
                    .select(
                        name: "advance", label: "By",
                        options: [
                            ("PT1H", "an hour"), ("P1D", "a day"), ("P1W", "a week"), ("P1M", "a month"),
                            ("P1Y", "a year"),
                        ])
                ], id: "advance-clock"
            ).html
        html +=
            ActionForm(
                "Set the rate", action: "/_emulator/v1/clock",
                fields: [
                    .select(
                        name: "rate", label: "Rate",
                        options: TimeRate.all.map { ($0.name, $0.name) }.sorted {
                            ($0.0 != rate.name ? 1 : 0) < ($1.0 != rate.name ? 1 : 0)
                        })
                ], id: "set-rate"
            ).html
        return html
    }

    // MARK: Pieces

    func transactionTable(_ transactions: [StoredTransaction], caption: String) -> HTML {
        HTML.table(
            id: "transactions", caption: caption,
            columns: ["Transaction", "Account", "Product", "Type", "Purchased", "Expires", "Price", "State"],
            rows: transactions.map { stored in
                let t = stored.transaction
                return [
                    HTML.link(t.id.rawValue, to: Self.dashboardRoot + "/transactions/" + t.id.rawValue),
                    HTML.link(
                        String(stored.accountID.rawValue.prefix(8)) + "…",
                        to: Self.dashboardRoot + "/accounts/" + stored.accountID.rawValue),
                    "\(t.productID.rawValue)", "\(t.kind.rawValue)", HTML.date(t.purchaseDate),
                    HTML.date(t.expiresDate),
                    Self.money(t.price), Self.state(stored),
                ]
            }, empty: "none match.", rowClasses: transactions.map { $0.transaction.revocationDate != nil ? "bad" : nil }
        )
    }

    static func yesNo(_ value: Bool) -> HTML {
        value ? "<span class=\"badge good\">on</span>" : "<span class=\"badge\">off</span>"
    }

    static func money(_ money: Money?) -> HTML {
        guard let money else { return "—" }
        return "\(money.decimalString) \(money.currency)"
    }

    static func state(_ stored: StoredTransaction) -> HTML {
        let t = stored.transaction
        if t.revocationDate != nil { return "<span class=\"badge bad\">refunded</span>" }
        if t.isUpgraded { return "<span class=\"badge\">upgraded</span>" }
        return stored.finished
            ? "<span class=\"badge good\">finished</span>" : "<span class=\"badge\">unfinished</span>"
    }

    static func status(_ status: SubscriptionStatus) -> HTML {
        let (text, style): (String, String) =
            switch status {
            case .active: ("active", "good")
            case .expired: ("expired", "")
            case .billingRetry: ("billing retry", "bad")
            case .billingGracePeriod: ("billing grace period", "bad")
            case .revoked: ("revoked", "bad")
            }
        return "<span class=\"badge \(style)\" data-status=\"\(status.rawValue)\">\(text)</span>"
    }

    static func notice(_ notification: OutboundNotification) -> HTML {
        let type = notification.notice.type.rawValue
        guard let subtype = notification.notice.subtype?.rawValue else { return "\(type)" }
        return "\(type) / \(subtype)"
    }

    static func attempts(_ notification: OutboundNotification) -> HTML {
        guard !notification.attempts.isEmpty else { return "no attempt yet" }
        return HTML.join(
            notification.attempts.map { "\(HTML.date($0.date)) \($0.result.rawValue)" }, separator: "; ")
    }
}
