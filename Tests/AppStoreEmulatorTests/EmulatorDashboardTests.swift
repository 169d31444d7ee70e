import AppStoreEmulator
import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import Testing

/// The emulator's dashboard sits behind the control plane's guard, signs in with the token, and shows
/// what the store holds.
@Suite("Emulator dashboard")
struct EmulatorDashboardTests {
    static func send(
        _ responder: Responder, _ method: String, _ path: String, query: HTTPQuery = [:],
        headers: [(String, String)] = [("Host", "127.0.0.1:8080")], body: String = ""
    ) async -> HTTPResponse {
        await responder.respond(
            to: HTTPRequest(
                method: method, path: path, query: query, headers: headers.map { (name: $0.0, value: $0.1) },
                body: Array(body.utf8)))
    }

    @Test("With a token: pages go to the form, a wrong token is refused, the right one sets a cookie that works")
    func signIn() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let responder = EmulatorRoutes(harness.store).responder(
            guard: ControlPlaneGuard(listeningOn: "127.0.0.1", token: "t0ken-123"))
        for path in ["/", "/dashboard/accounts/x", "/dashboard/certificates/jws-root.cer"] {
            let response = await Self.send(responder, "GET", path)
            #expect(response.status == 303, "\(path)")
            #expect(response.header("Location") == "/dashboard/login")
        }
        // The control plane's JSON answers 401, not a redirect.
        #expect(await Self.send(responder, "GET", "/_emulator/v1/faults").status == 401)
        #expect(await Self.send(responder, "GET", "/dashboard/assets/dashboard.css").status == 200)
        let form = [("Host", "127.0.0.1:8080"), ("Content-Type", "application/x-www-form-urlencoded")]
        let wrong = await Self.send(responder, "POST", "/dashboard/login", headers: form, body: "secret=nope")
        #expect(wrong.status == 401)
        #expect(wrong.header("Set-Cookie") == nil)
        // A page elsewhere cannot post the form (Origin) nor reach it under another host name.
        let foreign = await Self.send(
            responder, "POST", "/dashboard/login", headers: form + [("Origin", "http://attacker.example")],
            body: "secret=t0ken-123")
        #expect(foreign.status == 403)
        #expect(await Self.send(responder, "GET", "/", headers: [("Host", "attacker.example")]).status == 403)
        let right = await Self.send(responder, "POST", "/dashboard/login", headers: form, body: "secret=t0ken-123")
        #expect(right.status == 303)
        let cookie = try #require(right.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        #expect(right.header("Set-Cookie")?.contains("HttpOnly") == true)
        // Its own name: the purchase server's dashboard on another port of the host keeps its session.
        #expect(cookie.hasPrefix("storekeeper_emulator="))
        #expect(right.header("Set-Cookie")?.contains("SameSite=Strict") == true)
        #expect(!cookie.contains("t0ken-123"))
        let page = await Self.send(responder, "GET", "/", headers: [("Host", "127.0.0.1:8080"), ("Cookie", cookie)])
        #expect(page.status == 200)
        #expect(page.header("Content-Type")?.hasPrefix("text/html") == true)
        // The cookie also stands in for the bearer token on the JSON control plane (same origin, JSON only).
        let created = await Self.send(
            responder, "POST", "/_emulator/v1/accounts",
            headers: [("Host", "127.0.0.1:8080"), ("Cookie", cookie), ("Content-Type", "application/json")], body: "{}")
        #expect(created.status == 201)
        let forged = await Self.send(
            responder, "POST", "/_emulator/v1/accounts",
            headers: [
                ("Host", "127.0.0.1:8080"), ("Cookie", "storekeeper_emulator=00"),
                ("Content-Type", "application/json"),
            ],
            body: "{}")
        #expect(forged.status == 401)
    }

    @Test(
        "The pages show accounts, devices, transactions, a subscription's timeline and its buttons; certificates download"
    )
    func pages() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let store = harness.store
        let responder = EmulatorRoutes(store).responder()
        let account = try await store.createAccount(environment: .sandbox, storefront: "USA")
        let device = try await store.createDevice(accountID: account.id, deviceID: nil)
        _ = try await store.install(deviceID: device.id.rawValue, bundleID: AppStoreTests.bundleID, version: "1")
        let outcome = try await store.pay(
            deviceID: device.id.rawValue, bundleID: AppStoreTests.bundleID, productID: "monthly",
            quantity: 1, applicationUsername: nil, appAccountToken: nil)
        guard case .purchased(let stored, _) = outcome else {
            Issue.record("the payment did not go through")
            return
        }
        let overview = String(decoding: await Self.send(responder, "GET", "/").body, as: UTF8.self)
        #expect(overview.contains(account.id.rawValue))
        #expect(overview.contains(stored.id.rawValue))
        #expect(overview.contains("id=\"advance-clock\""))
        // Filtering by another product hides it.
        let filtered = await Self.send(responder, "GET", "/", query: ["product": "pro"])
        #expect(!String(decoding: filtered.body, as: UTF8.self).contains(">\(stored.id.rawValue)<"))
        let accountPage = String(
            decoding: await Self.send(responder, "GET", "/dashboard/accounts/\(account.id.rawValue)").body,
            as: UTF8.self)
        #expect(accountPage.contains(device.id.rawValue))
        #expect(accountPage.contains("id=\"buy\""))
        let transactionPage = await Self.send(responder, "GET", "/dashboard/transactions/\(stored.id.rawValue)")
        let html = String(decoding: transactionPage.body, as: UTF8.self)
        #expect(transactionPage.status == 200)
        for verb in [
            "refund", "refund-request", "refund-approve", "refund-decline", "renew", "expire", "auto-renew",
            "resolve-issue", "price-consent", "price-decline", "billing-retry", "advance-period", "retention-request",
        ] {
            #expect(html.contains("id=\"\(verb)\""), "\(verb)")
        }
        #expect(html.contains("data-api=\"/_emulator/v1/transactions/\(stored.id.rawValue)/refund\""))
        #expect(html.contains("Purchase"))
        // The cancellation page opened (no realtime URL: nothing shown) is on the timeline.
        let request = await Self.send(
            responder, "POST", "/_emulator/v1/transactions/\(stored.id.rawValue)/retention-request",
            headers: [("Host", "127.0.0.1:8080"), ("Content-Type", "application/json")], body: "{}")
        #expect(request.status == 200, "\(String(decoding: request.body, as: UTF8.self))")
        let after = String(
            decoding: await Self.send(responder, "GET", "/dashboard/transactions/\(stored.id.rawValue)").body,
            as: UTF8.self)
        #expect(after.contains("Cancellation page (retention request)") && after.contains("shown: none"))
        #expect(await Self.send(responder, "GET", "/dashboard/transactions/999").status == 404)
        #expect(await Self.send(responder, "GET", "/dashboard/accounts/nobody").status == 404)
        let certificate = await Self.send(responder, "GET", "/dashboard/certificates/receipt-root.cer")
        #expect(certificate.body == store.pki.receipts.root.derEncoded)
    }

    @Test("Notification URLs show without their credentials or query on the pages")
    func urlsWithoutSecrets() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let responder = EmulatorRoutes(harness.store).responder()
        let set = await Self.send(
            responder, "PUT", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications",
            headers: [("Host", "127.0.0.1:8080"), ("Content-Type", "application/json")],
            body: #"{"sandboxURL": "https://user:hunter2@receiver.invalid/hook?token=abc123"}"#)
        #expect(set.status == 200, "\(String(decoding: set.body, as: UTF8.self))")
        let overview = String(decoding: await Self.send(responder, "GET", "/").body, as: UTF8.self)
        #expect(overview.contains("https://receiver.invalid/hook"))
        #expect(!overview.contains("hunter2") && !overview.contains("abc123"))
    }
}
