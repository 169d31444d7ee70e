import AppStoreEmulator
import Foundation
import PurchaseServer
import StorekeeperHTTP
import StorekeeperJSON
import Testing

/// The server's dashboard and `GET /v1/metrics/{chart}`: behind the secret key, escaped, and drawing the
/// numbers the JSON answers.
@Suite("Purchase server: dashboard and metrics")
struct ServerDashboardTests {
    static func get(_ responder: Responder, _ path: String, query: HTTPQuery = [:], headers: [(String, String)] = [])
        async -> HTTPResponse
    {
        await responder.respond(
            to: HTTPRequest(method: "GET", path: path, query: query, headers: headers.map { (name: $0.0, value: $0.1) })
        )
    }

    static func cookie(_ responder: Responder, secret: String) async -> String? {
        let response = await responder.respond(
            to: HTTPRequest(
                method: "POST", path: "/dashboard/login",
                headers: [(name: "Content-Type", value: "application/x-www-form-urlencoded")],
                body: Array("secret=\(secret)".utf8)))
        return response.header("Set-Cookie")?.split(separator: ";").first.map(String.init)
    }

    @Test("Signed out, every page goes to the form; a wrong key is refused; the right one opens the pages")
    func signIn() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let responder = harness.server.responder()
        for path in ["/dashboard", "/dashboard/subscribers", "/dashboard/charts"] {
            let response = await Self.get(responder, path)
            #expect(response.status == 303, "\(path)")
            #expect(response.header("Location") == "/dashboard/login", "\(path)")
        }
        // The server's address in a browser leads there too.
        let root = await Self.get(responder, "/")
        #expect(root.status == 303 && root.header("Location") == "/dashboard")
        #expect(await Self.cookie(responder, secret: "wrong") == nil)
        let wrong = await responder.respond(
            to: HTTPRequest(method: "POST", path: "/dashboard/login", body: Array("secret=wrong".utf8)))
        #expect(wrong.status == 401)
        let cookie = try #require(await Self.cookie(responder, secret: ServerHarness.secret))
        #expect(!cookie.contains(ServerHarness.secret), "the cookie does not hold the key")
        #expect(cookie.hasPrefix("storekeeper_server="), "its own name, not the emulator's")
        let page = await Self.get(responder, "/dashboard", headers: [("Cookie", cookie)])
        #expect(page.status == 200)
        #expect(page.header("Content-Security-Policy")?.contains("script-src 'self'") == true)
        #expect(String(decoding: page.body, as: UTF8.self).contains("id=\"lookup\""))
        // The bearer secret key works as well; the public key does not.
        #expect(
            await Self.get(responder, "/dashboard", headers: [("Authorization", "Bearer \(ServerHarness.secret)")])
                .status == 200)
        #expect(
            await Self.get(responder, "/dashboard", headers: [("Authorization", "Bearer \(ServerHarness.publicKey)")])
                .status == 303)
    }

    @Test("Signing out holds in every process on the storage: another responder refuses the cookie")
    func signOutEverywhere() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        // Two responders, each its own sign-in and its own memory of sign-outs, as two processes would have.
        let first = harness.server.responder()
        let second = harness.server.responder()
        let cookie = try #require(await Self.cookie(first, secret: ServerHarness.secret))
        #expect(await Self.get(second, "/dashboard", headers: [("Cookie", cookie)]).status == 200)
        #expect(await Self.get(second, "/dashboard/charts", headers: [("Cookie", cookie)]).status == 200)
        let out = await first.respond(
            to: HTTPRequest(method: "POST", path: "/dashboard/logout", headers: [(name: "Cookie", value: cookie)]))
        #expect(out.status == 303 && out.header("Set-Cookie")?.contains("Max-Age=0") == true)
        // A session cookie this process has not seen signed out is never answered inline: only the
        // asynchronous path asks the storage. Once refused, it is refused inline too.
        let inline = HTTPRequest(method: "GET", path: "/dashboard", headers: [(name: "Cookie", value: cookie)])
        #expect(second.respondInline(to: inline) == nil)
        #expect(first.respondInline(to: inline)?.status == 303, "signed out here")
        for responder in [first, second] {
            let page = await Self.get(responder, "/dashboard", headers: [("Cookie", cookie)])
            #expect(page.status == 303 && page.header("Location") == "/dashboard/login")
            #expect(await Self.get(responder, "/dashboard/charts", headers: [("Cookie", cookie)]).status == 303)
        }
        #expect(second.respondInline(to: inline)?.status == 303)
        // The bearer secret is not a session: it still opens the pages.
        #expect(
            await Self.get(second, "/dashboard", headers: [("Authorization", "Bearer \(ServerHarness.secret)")])
                .status == 200)
        // A sign-out removes those whose sessions expired over an hour ago (stored by hand); its own stays.
        let prefix = "dashboard-signout:"
        try await harness.server.storage.write { try $0.setCheckpoint(prefix + "old", "1") }
        let other = try #require(await Self.cookie(first, secret: ServerHarness.secret))
        _ = await second.respond(
            to: HTTPRequest(method: "POST", path: "/dashboard/logout", headers: [(name: "Cookie", value: other)]))
        let kept = try await harness.server.storage.read { try $0.checkpoints(prefix: prefix, limit: 10) }
        #expect(kept.count == 2 && !kept.contains { $0.key == prefix + "old" }, "\(kept.map(\.key))")
        #expect(await Self.get(first, "/dashboard", headers: [("Cookie", other)]).status == 303)
    }

    @Test("A subscriber's page shows the purchase and its events, with what the user typed escaped")
    func subscriberPage() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let customer = try await harness.customer()
        let bought = try await harness.buy("monthly", device: customer.device)
        let user = "<img src=x onerror=alert(1)>"
        #expect(try await harness.post(bought.jws, user: user).0 == 200)
        let responder = harness.server.responder()
        let cookie = try #require(await Self.cookie(responder, secret: ServerHarness.secret))
        let page = await Self.get(
            responder, "/dashboard/subscribers", query: ["user": user], headers: [("Cookie", cookie)])
        let html = String(decoding: page.body, as: UTF8.self)
        #expect(page.status == 200)
        #expect(!html.contains("<img src=x"))
        #expect(html.contains("&lt;img src=x onerror=alert(1)&gt;"))
        #expect(html.contains(bought.id))
        #expect(html.contains("INITIAL_PURCHASE"))
        let missing = await Self.get(
            responder, "/dashboard/subscribers", query: ["user": "nobody"], headers: [("Cookie", cookie)])
        #expect(missing.status == 404)
        // Rejected notifications are listed for this server's apps only: a path naming none puts no text there.
        for bundle in [ServerHarness.bundleID, "URGENT-re-enter-the-key-at-evil.example"] {
            let (status, _) = try await harness.call(
                "POST", "/v1/notifications/apple/\(bundle)", ["signedPayload": .string("not.a.jws")], key: nil)
            #expect(status >= 400)
        }
        let overview = String(
            decoding: await Self.get(responder, "/dashboard", headers: [("Cookie", cookie)]).body, as: UTF8.self)
        #expect(overview.contains("rejected"), "the app's own rejection is listed")
        #expect(!overview.contains("URGENT-re-enter"))
    }

    @Test(
        "GET /v1/metrics/{chart}: secret key only, known charts, bounded ranges; the charts page draws the same numbers"
    )
    func metrics() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let customer = try await harness.customer()
        let bought = try await harness.buy("monthly", device: customer.device)
        #expect(try await harness.post(bought.jws, user: "u1").0 == 200)
        #expect(try await harness.call("GET", "/v1/metrics/actives", key: ServerHarness.publicKey).0 == 401)
        #expect(try await harness.call("GET", "/v1/metrics/nonsense").0 == 404)
        #expect(try await harness.call("GET", "/v1/metrics/actives?resolution=year").0 == 400)
        #expect(try await harness.call("GET", "/v1/metrics/actives?from=0&to=999999999999").0 == 400)
        let list = try await harness.call("GET", "/v1/metrics").1
        #expect(list["charts"]?.arrayValue?.count == 7)

        let now = harness.store.now
        let from = Int64(now.timeIntervalSince1970 * 1000) - 86_400_000
        let to = Int64(now.timeIntervalSince1970 * 1000) + 86_400_000
        let responder = harness.server.responder()
        let cookie = try #require(await Self.cookie(responder, secret: ServerHarness.secret))
        for chart in ["actives", "trials", "actives_new", "churn", "revenue", "mrr", "retention_save_rate"] {
            let (status, body) = try await harness.call(
                "GET", "/v1/metrics/\(chart)?from=\(from)&to=\(to)&resolution=day")
            #expect(status == 200, "\(body)")
            #expect(body["currency"]?.stringValue == "USD")
            let values = body["values"]?.arrayValue?.compactMap { $0["value"]?.doubleValue } ?? []
            #expect(values.count >= 2, "\(chart)")
            if chart == "actives_new" { #expect(values.reduce(0, +) == 1) }
            if chart == "revenue" { #expect(values.reduce(0, +) == 2.99) }
        }
        let dayStart = Date(timeIntervalSince1970: Double(from) / 1000).ISO8601Format().prefix(10)
        let dayEnd = Date(timeIntervalSince1970: Double(to) / 1000 - 1).ISO8601Format().prefix(10)
        let page = await Self.get(
            responder, "/dashboard/charts", query: ["from": String(dayStart), "to": String(dayEnd)],
            headers: [("Cookie", cookie)])
        let html = String(decoding: page.body, as: UTF8.self)
        #expect(page.status == 200)
        for chart in ["actives", "trials", "actives_new", "churn", "revenue", "mrr", "retention_save_rate"] {
            #expect(html.contains("id=\"chart-\(chart)-svg\""), "\(chart)")
        }
        #expect(html.contains("<span class=\"value\">2.99</span>"), "revenue and MRR drawn in dollars")
    }
}
