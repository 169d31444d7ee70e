import Foundation
import StoreModel
import StorekeeperDashboard
import StorekeeperHTTP

/// The server's web dashboard at `/dashboard`, behind the secret key (a sign-in form sets a session cookie;
/// a bearer secret key also does): look up a subscriber, recent notifications and webhook deliveries with
/// failures marked, and charts drawn as SVG from the same numbers `GET /v1/metrics/{chart}` answers.
extension PurchaseServer {
    static let dashboardRoot = "/dashboard"

    /// The dashboard's sign-in, made once per responder; sign-outs are kept in the storage (``StoredSignOuts``),
    /// so that every process on it, and this one after a restart, refuses a signed-out session's cookie.
    func makeDashboardLogin(secureCookies: Bool) -> DashboardLogin {
        DashboardLogin(
            root: Self.dashboardRoot, product: "Purchase server", assets: Self.dashboardRoot + "/assets",
            secret: configuration.secretKey, secureCookies: secureCookies, cookieName: "storekeeper_server",
            signOuts: StoredSignOuts(storage: storage, clock: wallClock), clock: wallClock)
    }

    /// Dashboard sign-outs as checkpoints (`dashboard-signout:<session id>`, the session's expiry in seconds),
    /// each kept until an hour past that expiry (processes' clocks may differ by less): a sign-out removes up to
    /// ``pruned`` of those, so they do not pile up.
    struct StoredSignOuts: DashboardSignOutStore {
        static let prefix = "dashboard-signout:"
        static let pruned = 100
        static let margin: TimeInterval = 3_600
        let storage: any ServerStorage
        let clock: @Sendable () -> Date

        func isSignedOut(_ session: String) async throws -> Bool {
            try await storage.read { try $0.checkpoint(Self.prefix + session) } != nil
        }

        func signOut(_ session: String, until expiry: Int64) async throws {
            let before = clock().timeIntervalSince1970 - Self.margin
            try await storage.write { store in
                try store.setCheckpoint(Self.prefix + session, String(expiry))
                let expired = try store.checkpoints(prefix: Self.prefix, limit: 1_000)
                    .filter { Double($0.value).map { $0 <= before } ?? true }
                for entry in expired.prefix(Self.pruned) { try store.removeCheckpoint(entry.key) }
            }
        }
    }

    func addDashboardRoutes(to router: inout Router, login: DashboardLogin) {
        let server = self
        func page(_ build: @escaping @Sendable (HTTPRequest) async throws -> Page) -> Handler {
            { request, _ in
                // The guard asked the storage about a session cookie's sign-out already.
                guard login.isSignedIn(request) else { return login.redirectToLogin }
                do {
                    return DashboardLogin.page(try await build(request))
                } catch let error as PurchaseServerError {
                    let body: HTML = "<p class=\"badge bad\" role=\"alert\">\(error.message)</p>"
                    return DashboardLogin.page(server.dashboardPage("Not available", body: body), status: error.status)
                }
            }
        }
        router.get(Self.dashboardRoot, page { request in try await server.overviewPage(request.query) })
        router.get(
            Self.dashboardRoot + "/assets/{file}", { _, context in DashboardLogin.asset(try context.parameter("file")) }
        )
        router.get(Self.dashboardRoot + "/login", { _, _ in login.form(secretName: "Secret key") })
        router.post(
            Self.dashboardRoot + "/login",
            { request, _ in login.signIn(request, home: Self.dashboardRoot, secretName: "Secret key") })
        router.post(Self.dashboardRoot + "/logout", { request, _ in await login.signOutEverywhere(request) })
        router.get(
            Self.dashboardRoot + "/subscribers", page { request in try await server.subscriberPage(request.query) })
        router.get(Self.dashboardRoot + "/charts", page { request in try await server.chartsPage(request.query) })
    }

    func dashboardPage(_ title: String, current: String = "", body: HTML) -> Page {
        Page(
            title: title, product: "Purchase server",
            navigation: [
                ("Overview", Self.dashboardRoot), ("Charts", Self.dashboardRoot + "/charts"),
            ], current: current, assets: Self.dashboardRoot + "/assets",
            body: body
                + "<form method=\"post\" action=\"\(Self.dashboardRoot)/logout\"><button type=\"submit\">Sign out</button></form>"
        )
    }

    func appOptions(selected: String?) -> HTML {
        HTML.join(
            configuration.apps.map(\.bundleID).sorted().map { bundle in
                "<option value=\"\(bundle)\"\(bundle == selected ? HTML(raw: " selected") : "")>\(bundle)</option>"
            })
    }

    func lookupForm(app: String?, user: String?) -> HTML {
        """
        <form method="get" action="\(Self.dashboardRoot)/subscribers" id="lookup">\
        <label>App <select name="app">\(appOptions(selected: app))</select></label> \
        <label>App user id <input name="user" value="\(user)" required></label> \
        <button type="submit">Look up</button></form>
        """
    }

    // MARK: Pages

    func overviewPage(_ query: HTTPQuery) async throws -> Page {
        let deliveries = try await storage.read { try $0.latestDeliveries(limit: 50) }
        let notifications = notificationLog.latest.prefix(50)
        var body: HTML = "<h2>Look up a subscriber</h2>" + lookupForm(app: nil, user: nil)
        body += "<h2>Recent notifications</h2>"
        body += HTML.table(
            id: "notifications", caption: "Received by this process, newest first",
            columns: ["Received", "App", "Type", "Outcome", "Events"],
            rows: notifications.map { entry in
                [
                    HTML.date(entry.received), "\(entry.bundleID)", "\(entry.type ?? "—")",
                    entry.outcome == "rejected"
                        ? "<span class=\"badge bad\">rejected</span> \(entry.error ?? "")"
                        : "<span class=\"badge\(entry.outcome == "stored" ? " good" : "")\">\(entry.outcome)</span>",
                    "\(entry.events)",
                ]
            }, empty: "none since this process started.",
            rowClasses: notifications.map { $0.outcome == "rejected" ? "failed" : nil })
        body += "<h2>Webhook deliveries</h2>"
        body += HTML.table(
            id: "deliveries", caption: "Newest first",
            columns: ["Created", "Event", "To", "State", "Attempts", "Next attempt"],
            rows: deliveries.map { delivery in
                [
                    HTML.date(delivery.created), "\(delivery.eventType)",
                    "<code>\(HTTPClient.printable(delivery.url))</code>",
                    delivery.state == .failed || (delivery.state == .pending && !delivery.attempts.isEmpty)
                        ? "<span class=\"badge bad\">\(delivery.state.rawValue)</span>"
                        : "<span class=\"badge\(delivery.state == .delivered ? " good" : "")\">\(delivery.state.rawValue)</span>",
                    HTML.join(
                        delivery.attempts.map { attempt in
                            "\(HTML.date(attempt.date)) \(attempt.status.map(String.init) ?? "no answer")\(attempt.error.map { " (\($0))" } ?? "")"
                        }, separator: "; "),
                    HTML.date(delivery.nextAttempt),
                ]
            }, empty: "none.",
            rowClasses: deliveries.map {
                $0.state == .failed || ($0.state == .pending && !$0.attempts.isEmpty) ? "failed" : nil
            })
        return dashboardPage("Purchase server", current: Self.dashboardRoot, body: body)
    }

    func subscriberPage(_ query: HTTPQuery) async throws -> Page {
        let bundleID = try bundleID(query["app"].flatMap { $0.isEmpty ? nil : $0 })
        guard let requested = query["user"], !requested.isEmpty, requested.utf8.count <= 512 else {
            return dashboardPage("Subscriber", body: lookupForm(app: bundleID, user: nil))
        }
        let view = try await subscriber(bundleID: bundleID, appUserID: requested)
        let events = try await events(bundleID: bundleID, appUserID: requested, after: nil, limit: 500)
        var body = lookupForm(app: bundleID, user: requested)
        body += HTML.facts(
            [
                ("App user", "<code id=\"app-user\">\(view.appUserID)</code>"),
                ("Aliases", view.aliases.isEmpty ? "—" : "\(view.aliases.joined(separator: ", "))"),
                (
                    "Flags",
                    view.flags.isEmpty ? "—" : HTML.join(view.flags.map { "<span class=\"badge bad\">\($0)</span>" })
                ),
            ], id: "subscriber-facts")
        body += "<h2>Entitlements</h2>"
        body += HTML.table(
            id: "entitlements", caption: "Entitlements",
            columns: ["Name", "Active", "Product", "Expires", "Will renew", "Period", "Issue", "Source"],
            rows: view.entitlements.sorted { $0.key < $1.key }.map { name, entitlement in
                [
                    "\(name)",
                    entitlement.active
                        ? "<span class=\"badge good\">active</span>" : "<span class=\"badge\">inactive</span>",
                    "\(entitlement.productID ?? "—")", HTML.date(entitlement.expiresDate),
                    entitlement.willRenew ? "yes" : "no",
                    "\(entitlement.periodType)",
                    entitlement.inBillingRetry
                        ? "<span class=\"badge bad\">billing retry</span>"
                        : entitlement.inGracePeriod ? "<span class=\"badge bad\">grace period</span>" : "—",
                    "\(entitlement.source)",
                ]
            }, empty: "none.")
        body += "<h2>Subscriptions</h2>"
        body += HTML.table(
            id: "subscriptions", caption: "Subscriptions",
            columns: ["Original transaction", "Product", "Status", "Expires", "Auto-renew", "Revoked"],
            rows: view.subscriptions.map { subscription in
                [
                    "<code>\(subscription.originalTransactionID.rawValue)</code>", "\(subscription.productID.rawValue)",
                    Self.statusBadge(subscription.status), HTML.date(subscription.expiresDate),
                    subscription.autoRenewStatus ? "on" : "off", HTML.date(subscription.revocationDate),
                ]
            }, empty: "none.", rowClasses: view.subscriptions.map { [3, 4, 5].contains($0.status) ? "bad" : nil })
        body += "<h2>Purchases</h2>"
        body += HTML.table(
            id: "purchases", caption: "Transactions",
            columns: ["Transaction", "Product", "Type", "Purchased", "Expires", "Price", "Refunded"],
            rows: view.purchases.map { purchase in
                [
                    "<code>\(purchase.transactionID.rawValue)</code>", "\(purchase.productID.rawValue)",
                    "\(purchase.kind.rawValue)",
                    HTML.date(purchase.purchaseDate), HTML.date(purchase.expiresDate),
                    purchase.price.map { "\(String(format: "%.2f", Double($0) / 1000)) \(purchase.currency ?? "")" }
                        ?? "—",
                    purchase.revocationDate.map { HTML.date($0) } ?? "no",
                ]
            }, empty: "none.", rowClasses: view.purchases.map { $0.revocationDate != nil ? "bad" : nil })
        body += "<h2>Balances</h2>"
        body += HTML.table(
            id: "balances", caption: "Consumable balances", columns: ["Product", "Balance"],
            rows: view.balances.sorted { $0.key < $1.key }.map { ["\($0.key)", "\($0.value)"] }, empty: "none.")
        body += "<h2>Events</h2>"
        body += HTML.table(
            id: "events", caption: "Oldest first",
            columns: ["Date", "Event", "Product", "Source", "Apple notification"],
            rows: events.map { item in
                let event = item.event
                return [
                    HTML.date(event.date), "<span class=\"event-type\">\(event.type.rawValue)</span>",
                    "\(event.productID?.rawValue ?? "—")",
                    "\(event.source.rawValue)",
                    "\(event.appleNotificationType.map { type in event.appleSubtype.map { "\(type) / \($0)" } ?? type } ?? "—")",
                ]
            }, empty: "none.",
            rowClasses: events.map {
                $0.event.type.isLoss ? "bad" : nil
            })
        return dashboardPage("Subscriber", body: body)
    }

    func chartsPage(_ query: HTTPQuery) async throws -> Page {
        // The form speaks days (yyyy-mm-dd); the JSON API speaks milliseconds.
        func day(_ name: String) -> String? {
            guard let text = query[name], !text.isEmpty else { return nil }
            guard let date = try? Date(text + "T00:00:00Z", strategy: .iso8601) else { return "x" }
            return EpochMilliseconds.string(date)
        }
        let chartQuery = try self.chartQuery { name in
            switch name {
            case "bundleId": query["app"].flatMap { $0.isEmpty ? nil : $0 }
            case "from", "to": day(name)
            default: query[name]
            }
        }
        // `to` names the last day shown, so the range runs to the end of it.
        var range = chartQuery
        if query["to"].map({ !$0.isEmpty }) == true { range.to = range.to.addingTimeInterval(86_400) }
        let results = try await charts(SubscriptionCharts.Chart.allCases, range)
        func dayText(_ date: Date) -> String { String(date.ISO8601Format().prefix(10)) }
        let resolutions = HTML.join(
            SubscriptionCharts.Resolution.allCases.map { resolution -> HTML in
                let selected: HTML = resolution == range.resolution ? " selected" : ""
                return "<option value=\"\(resolution.rawValue)\"\(selected)>\(resolution.rawValue)</option>"
            })
        let environments = HTML.join(
            ["all", "Production", "Sandbox"].map { name -> HTML in
                let selected: HTML = (range.environment?.rawValue ?? "all") == name ? " selected" : ""
                return "<option value=\"\(name)\"\(selected)>\(name)</option>"
            })
        let fromText = dayText(range.from)
        let toText = dayText(range.to.addingTimeInterval(-1))
        var body: HTML = """
            <form method="get" action="\(Self.dashboardRoot)/charts" id="range">\
            <label>App <select name="app">\(appOptions(selected: range.bundleID))</select></label> \
            <label>From <input type="date" name="from" value="\(fromText)"></label> \
            <label>To <input type="date" name="to" value="\(toText)"></label> \
            <label>By <select name="resolution">\(resolutions)</select></label> \
            <label>Environment <select name="environment">\(environments)</select></label> \
            <button type="submit">Show</button></form>
            """
        let currency = results.first?.currency ?? "USD"
        body += "<p>Money in \(currency), gross; the same numbers: <code>GET /v1/metrics/{chart}</code>.</p>"
        body += "<div class=\"charts\">"
        for result in results {
            let chart = result.chart
            let title: String = chart.isMoney ? chart.title + " (" + currency + ")" : chart.title
            let labels: [String] = result.points.map {
                range.resolution.isFixed ? String($0.start.ISO8601Format().dropFirst(5).prefix(11)) : dayText($0.start)
            }
            let values: [Double] = result.points.map { Self.chartValue(chart, $0.value) }
            let format: @Sendable (Double) -> String = chart.isMoney ? Self.moneyText : LineChart.number
            let drawn = LineChart(
                id: "chart-" + chart.rawValue, title: title, labels: labels, values: values, format: format)
            body += drawn.html
        }
        body += "</div>"
        if let other = results.map(\.otherCurrencies).max(), other > 0 {
            body += "<p>\(other) transactions in other currencies are left out.</p>"
        }
        return dashboardPage("Charts", current: Self.dashboardRoot + "/charts", body: body)
    }

    /// Money in units of its currency, to the cent.
    @Sendable static func moneyText(_ value: Double) -> String { String(format: "%.2f", value) }

    static func statusBadge(_ status: Int64) -> HTML {
        let (text, style): (String, String) =
            switch status {
            case 1: ("active", "good")
            case 2: ("expired", "")
            case 3: ("billing retry", "bad")
            case 4: ("grace period", "bad")
            case 5: ("revoked", "bad")
            default: ("unknown", "")
            }
        return "<span class=\"badge \(style)\">\(text)</span>"
    }
}
