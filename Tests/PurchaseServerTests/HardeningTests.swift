import Foundation
import PurchaseServer
import StoreModel
import StorekeeperDashboard
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

@Suite("Purchase server: strict admin routes, purchases bound to their user, sessions")
struct ServerHardeningTests {
    /// A raw body to the server (the harness's `call` only sends JSON objects).
    static func send(
        _ harness: ServerHarness, _ method: String, _ path: String, body: String, key: String? = ServerHarness.secret
    ) async throws -> (Int, JSONValue) {
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json")]
        if let key { headers.append(("Authorization", "Bearer " + key)) }
        let response = try await HTTPClient().send(
            method, harness.base + path, headers: headers, body: Array(body.utf8))
        return (response.status, (try? JSONParser.parse(response.body)) ?? .null)
    }

    @Test("Grant bodies are closed, typed and ranged: out-of-range dates, strings, fractions, unknown members refused")
    func strictGrants() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let path = "/v1/subscribers/g3/entitlements/plus/grant"
        for body in [
            #"{"expiresDate":1e19}"#, #"{"expiresDate":-1e19}"#, #"{"expiresDate":8640000000000001}"#,
            #"{"durationDays":"30"}"#, #"{"durationDays":30.5}"#, #"{"durationDays":0}"#,
            #"{"durationDays":123456789012345678901234567890}"#, #"{"durationDays":30,"expiresDate":1}"#,
            #"{"durationDays":30,"gift":true}"#, #"{"bundleId":7}"#, "[]", "\"x\"", "{",
        ] {
            let (status, answer) = try await Self.send(harness, "POST", path, body: body)
            #expect(status == 400, "\(body): \(answer)")
            #expect(
                ["invalid_request", "invalid_body"].contains(answer["error"]?["code"]?.stringValue ?? ""),
                "\(body): \(answer)")
        }
        // A body past the route's 16 KiB is refused from its headers, before any of it is sent: a raw client
        // sends the headers alone. (Sent whole by libcurl, the server's close while the body is still
        // arriving can reach the client before its 413 under load: "Send failure: Broken pipe".)
        let tooLarge = try await RawClient.exchange(
            port: harness.http.port,
            "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(ServerHarness.secret)\r\n"
                + "Content-Type: application/json\r\nContent-Length: \(1 << 20)\r\n\r\n")
        #expect(tooLarge.status == 413 && tooLarge.code == "payload_too_large", "\(tooLarge.raw)")
        let (health, _) = try await harness.call("GET", "/healthz", key: nil)
        #expect(health == 200)
        let (granted, view) = try await Self.send(harness, "POST", path, body: #"{"durationDays":30}"#)
        #expect(granted == 200 && view["entitlements"]?["plus"]?["active"] == .bool(true), "\(view)")
    }

    @Test("A grant at the end of what dates can carry renders and can be revoked; nothing traps")
    func extremeGrant() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let last = EpochMilliseconds.range.upperBound
        let (status, view) = try await harness.call(
            "POST", "/v1/subscribers/g4/entitlements/plus/grant", ["expiresDate": .integer(last)])
        #expect(status == 200)
        #expect(view["entitlements"]?["plus"]?["expiresDate"]?.int64Value == last)
        // A record stored with a date past every format (by an older version, say) still renders, clamped.
        _ = try await harness.server.grant(
            bundleID: ServerHarness.bundleID, appUserID: "g5", entitlement: "plus",
            expiresDate: Date(timeIntervalSince1970: 1e16))
        let stored = try await harness.subscriber("g5")
        #expect(stored["entitlements"]?["plus"]?["expiresDate"]?.int64Value == last)
        let (revoked, after) = try await harness.call("POST", "/v1/subscribers/g5/entitlements/plus/revoke")
        #expect(revoked == 200 && after["entitlements"]?["plus"]?["active"] == .bool(false))
    }

    @Test("EpochMilliseconds: floor, the formats' range, no trap at any Double")
    func epochMilliseconds() {
        #expect(EpochMilliseconds.milliseconds(Date(timeIntervalSince1970: 1.0019)) == 1_001)
        #expect(EpochMilliseconds.milliseconds(Date(timeIntervalSince1970: -0.0005)) == -1)
        #expect(
            EpochMilliseconds.milliseconds(Date(timeIntervalSince1970: 1e300)) == EpochMilliseconds.range.upperBound)
        #expect(
            EpochMilliseconds.milliseconds(Date(timeIntervalSince1970: -.infinity))
                == EpochMilliseconds.range.lowerBound)
        #expect(EpochMilliseconds.range.contains(EpochMilliseconds.milliseconds(Date(timeIntervalSince1970: .nan))))
        #expect(EpochMilliseconds.date(1e19) == nil)
        #expect(EpochMilliseconds.date(1.5) == Date(timeIntervalSince1970: 0.0015))
        #expect(EpochMilliseconds.date(Double(EpochMilliseconds.range.upperBound) + 1) == nil)
        #expect(EpochMilliseconds.date(-62_135_769_600_000.0) != nil, "Xcode's year 0")
        #expect(EpochMilliseconds.date(Double.nan) == nil)
        #expect(EpochMilliseconds.date(Int64.max) == nil)
        let date = EpochMilliseconds.date(Int64(1_764_547_200_123))!
        #expect(EpochMilliseconds.milliseconds(date) == 1_764_547_200_123)
    }

    @Test(
        "A signed appAccountToken binds the purchase to its user: another claimant is refused 409 under either policy",
        arguments: [TransferPolicy.transfer, .keep])
    func accountTokenBinding(policy: TransferPolicy) async throws {
        let harness = try await ServerHarness.make(transferPolicy: policy, withAPI: false)
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let bobToken = UUID()
        let (_, jws) = try await harness.buy("monthly", device: device, token: bobToken)
        let (bob, _) = try await harness.post(jws, user: "bob")
        #expect(bob == 200)
        let (mallory, answer) = try await harness.post(jws, user: "mallory")
        #expect(mallory == 409)
        #expect(answer["error"]?["code"]?.stringValue == "app_account_token_mismatch", "\(answer)")
        let stillBob = try await harness.subscriber("bob")
        #expect(stillBob["entitlements"]?["plus"]?["active"] == .bool(true))
        // A user whose id is the token's UUID owns purchases made with it, even before any claim.
        let (_, device2) = try await harness.customer()
        let carolToken = UUID()
        _ = try await harness.call(
            "POST", "/v1/subscribers/\(carolToken.uuidString.lowercased())/entitlements/pro/grant",
            ["durationDays": .integer(1)])
        let (_, carolJWS) = try await harness.buy("monthly", device: device2, token: carolToken)
        let (stranger, _) = try await harness.post(carolJWS, user: "mallory")
        #expect(stranger == 409)
        let (carol, _) = try await harness.post(carolJWS, user: carolToken.uuidString.lowercased())
        #expect(carol == 200)
    }

    @Test("The app key's answer carries the entitlements and this post's purchase only; the secret key's all")
    func appKeyAnswer() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (firstID, first) = try await harness.buy("pro", device: device)
        let (secondID, second) = try await harness.buy("monthly", device: device)
        _ = try await harness.post(first, user: "ida")
        _ = try await harness.call("POST", "/v1/subscribers/ida/aliases", ["alias": .string("anon-1")])
        let (status, answer) = try await harness.post(second, user: "ida")
        #expect(status == 200)
        #expect(answer["entitlements"]?["pro"]?["active"] == .bool(true))
        #expect(answer["aliases"] == nil && answer["balances"] == nil)
        let ids = (answer["purchases"]?.arrayValue ?? []).compactMap { $0["transactionId"]?.stringValue }
        #expect(ids == [secondID])
        #expect(answer["subscriptions"]?[secondID] != nil || answer["subscriptions"]?.objectValue?.isEmpty == false)
        let (_, full) = try await harness.call(
            "POST", "/v1/transactions",
            [
                "bundleId": .string(ServerHarness.bundleID), "appUserId": .string("ida"),
                "signedTransaction": .string(second),
            ])
        let all = Set((full["purchases"]?.arrayValue ?? []).compactMap { $0["transactionId"]?.stringValue })
        #expect(all == [firstID, secondID])
        #expect(full["aliases"]?.arrayValue?.contains(.string("anon-1")) == true)
    }

    @Test("Deny by default: unknown and non-canonical paths need the secret key; errors echo a short prefix only")
    func denyByDefault() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let (unknown, _) = try await harness.call("GET", "/v1/anything", key: nil)
        #expect(unknown == 401)
        let (known, _) = try await harness.call("GET", "/v1/anything")
        #expect(known == 404)
        let (doubled, answer) = try await harness.call("GET", "//v1/subscribers/x", key: nil)
        #expect(doubled == 400 && answer["error"]?["code"]?.stringValue == "non_canonical_path")
        let long = String(repeating: "z", count: 250)
        let (missing, echoed) = try await harness.call("GET", "/v1/subscribers/u?bundleId=\(long)")
        #expect(missing == 404)
        let (tooLong, _) = try await harness.call("GET", "/v1/subscribers/u?bundleId=\(long + long)")
        #expect(tooLong == 400)
        #expect((echoed["error"]?["message"]?.stringValue ?? long).count < 120, "\(echoed)")
    }

    @Test("Dashboard sessions: signing out ends the session; Secure cookies under HTTPS")
    func sessions() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let login = DashboardLogin(
            root: "/dashboard", product: "P", assets: "/dashboard/assets", secret: "the-secret", secureCookies: true,
            clock: { now })
        let form = HTTPRequest(method: "POST", path: "/dashboard/login", body: Array("secret=the-secret".utf8))
        let signedIn = login.signIn(form, home: "/dashboard", secretName: "Secret")
        let setCookie = signedIn.headers.first { $0.name == "Set-Cookie" }?.value ?? ""
        #expect(
            setCookie.contains("; Secure") && setCookie.contains("HttpOnly") && setCookie.contains("SameSite=Strict"))
        #expect(setCookie.hasPrefix("__Host-"), "bound to the host under HTTPS")
        let cookie = String(setCookie.prefix { $0 != ";" })
        let page = HTTPRequest(method: "GET", path: "/dashboard", headers: [("Cookie", cookie)])
        #expect(login.isSignedIn(page))
        // Another sign-in is another session.
        let other = login.signIn(form, home: "/dashboard", secretName: "Secret")
        let otherCookie = String((other.headers.first { $0.name == "Set-Cookie" }?.value ?? "").prefix { $0 != ";" })
        #expect(otherCookie != cookie)
        _ = login.signOut(HTTPRequest(method: "POST", path: "/dashboard/logout", headers: [("Cookie", cookie)]))
        #expect(!login.isSignedIn(page))
        #expect(login.isSignedIn(HTTPRequest(method: "GET", path: "/dashboard", headers: [("Cookie", otherCookie)])))
        // Tampered or expired cookies sign no one in.
        let tampered = cookie.replacingOccurrences(of: "=1", with: "=2")
        #expect(!login.isSignedIn(HTTPRequest(method: "GET", path: "/", headers: [("Cookie", tampered)])))
        let later = DashboardLogin(
            root: "/dashboard", product: "P", assets: "/dashboard/assets", secret: "the-secret",
            clock: { now.addingTimeInterval(DashboardLogin.lifetime + 1) })
        #expect(!later.isSignedIn(HTTPRequest(method: "GET", path: "/", headers: [("Cookie", otherCookie)])))
        let wrong = DashboardLogin(
            root: "/dashboard", product: "P", assets: "/a", secret: "another-secret", clock: { now })
        #expect(!wrong.isSignedIn(HTTPRequest(method: "GET", path: "/", headers: [("Cookie", otherCookie)])))
    }

    @Test("Webhook receivers: a URL listed twice is refused, the error naming it without its credentials or query")
    func webhookURLs() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        let file = directory.appendingPathComponent("server.json")
        let hook = #"{"url": "https://user:pass@hooks.example/in?token=abc", "secret": "whsec_12345678"}"#
        try Data(
            #"{"secretKey": "sk_0123456789abcdef", "apps": [{"bundleId": "a.b", "publicKey": "pk_12345678", "webhooks": [\#(hook), \#(hook)]}]}"#
                .utf8
        ).write(to: file)
        do {
            _ = try ServerConfiguration.load(path: file.path, variables: [:])
            Issue.record("a URL listed twice was accepted")
        } catch let error as PurchaseServerError {
            #expect(error.message.contains("listed twice") && !error.message.contains("pass"), "\(error.message)")
        }
    }

    @Test(
        "server.json: a known member of the wrong type is refused, naming it, never read as its default; one app twice")
    func configurationTypes() throws {
        let refused: [(app: String, top: String, member: String)] = [
            (#", "environments": "Production""#, "", "environments"),
            (#", "environments": []"#, "", "environments"),
            (#", "receiptRoots": "apple""#, "", "receiptRoots"), (#", "jwsRoots": "roots.pem""#, "", "jwsRoots"),
            (#", "webhooks": {"url": "https://hooks.example", "secret": "whsec_12345678"}"#, "", "webhooks"),
            (#", "appAppleId": "1234567890""#, "", "appAppleId"), (#", "sharedSecret": 42"#, "", "sharedSecret"),
            (#", "entitlements": {"pro": "com.example.pro"}"#, "", "entitlements.pro"),
            (#", "entitlements": ["pro"]"#, "", "entitlements"),
            (#", "subscriptionPeriods": ["P1M"]"#, "", "subscriptionPeriods"),
            (#", "appStoreServerAPI": "key.p8""#, "", "appStoreServerAPI"),
            ("", #", "transferPolicy": 1"#, "transferPolicy"),
            ("", #", "webhookRetrySchedule": 300"#, "webhookRetrySchedule"),
            ("", #", "webhookRetrySchedule": [300, -1]"#, "webhookRetrySchedule"),
            ("", #", "webhookRetrySchedule": ["300"]"#, "webhookRetrySchedule"),
            ("", #", "reconciliation": 3600"#, "reconciliation"),
        ]
        for (app, top, member) in refused {
            do {
                _ = try RenderedAnswerTests.loadConfiguration(app: app, top: top)
                Issue.record("accepted: \(app)\(top)")
            } catch let error as PurchaseServerError {
                #expect(
                    error.message.contains(member + " is") || error.message.contains(member + " names"),
                    "\(error.message)")
            }
        }
        let accepted = try RenderedAnswerTests.loadConfiguration(
            app: #", "appAppleId": null, "environments": ["Sandbox"], "entitlements": {"pro": ["com.example.pro"]}"#,
            top: #", "webhookRetrySchedule": [0, 60.5]"#)
        #expect(accepted.apps.first?.environments == [.sandbox] && accepted.apps.first?.appAppleID == nil)
        #expect(accepted.apps.first?.entitlements == ["pro": ["com.example.pro"]])
        #expect(accepted.webhookRetrySchedule == [0, 60.5])
        // Two entries for one app: the later one silently won.
        var doubled = try RenderedAnswerTests.loadConfiguration()
        doubled.apps.append(doubled.apps[0])
        #expect(throws: PurchaseServerError.self) {
            _ = try PurchaseServer(configuration: doubled, storage: InMemoryServerStorage())
        }
    }

    @Test("Members the server does not know are warned about, with the one meant; JSON errors say where they are")
    func unknownMembersAndSyntax() throws {
        let plain = try RenderedAnswerTests.loadConfiguration(
            app: #", "entitlements": {}, "webhooks": [{"url": "https://h.example", "secret": "whsec_12345678"}]"#,
            top: #", "reconciliation": {"intervalSeconds": 60}"#)
        #expect(plain.warnings.isEmpty, "\(plain.warnings)")
        let typos = try RenderedAnswerTests.loadConfiguration(
            app: #", "entitlement": {"pro": ["p"]}, "webhooks": "#
                + #"[{"url": "https://h.example", "secret": "whsec_12345678", "secrets": "x"}]"#,
            top: #", "reconcilation": {"intervalSecond": 60}, "somethingElse": 1"#)
        #expect(
            typos.warnings == [
                #""reconcilation" is not a member the server knows; it is ignored (did you mean "reconciliation"?)"#,
                #""somethingElse" is not a member the server knows; it is ignored"#,
                #"a.b: "entitlement" is not a member the server knows; it is ignored (did you mean "entitlements"?)"#,
                #"a.b: webhooks[]."secrets" is not a member the server knows; it is ignored (did you mean "secret"?)"#,
            ], "\(typos.warnings)")
        // A syntax error names its line and column.
        let directory = try ExternalTool.temporaryDirectory()
        let file = directory.appendingPathComponent("server.json")
        try Data("{\n  \"secretKey\": \"sk_0123456789abcdef\",\n  \"apps\": [],\n}\n".utf8).write(to: file)
        do {
            _ = try ServerConfiguration.load(path: file.path, variables: [:])
            Issue.record("a trailing comma was accepted")
        } catch let error as PurchaseServerError {
            #expect(error.message.contains("is not valid JSON: line 4, column 1"), "\(error.message)")
        }
        try Data("[]".utf8).write(to: file)
        #expect(throws: PurchaseServerError.self) { _ = try ServerConfiguration.load(path: file.path, variables: [:]) }
    }

    @Test("Dashboard sign-out with a store: a failed store answers 503 and the retry stores it; others then refuse")
    func signOutStored() async throws {
        /// Fails its first sign-out, then keeps them.
        final class FlakyStore: DashboardSignOutStore, Sendable {
            let state = Mutex((failures: 1, signedOut: Set<String>()))
            func isSignedOut(_ session: String) async throws -> Bool {
                state.withLock { $0.signedOut.contains(session) }
            }
            func signOut(_ session: String, until expiry: Int64) async throws {
                try state.withLock { state in
                    if state.failures > 0 {
                        state.failures -= 1
                        throw CancellationError()
                    }
                    state.signedOut.insert(session)
                }
            }
        }
        let store = FlakyStore()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        func login() -> DashboardLogin {
            DashboardLogin(
                root: "/dashboard", product: "P", assets: "/a", secret: "the-secret", signOuts: store, clock: { now })
        }
        let (here, elsewhere) = (login(), login())
        let form = HTTPRequest(method: "POST", path: "/dashboard/login", body: Array("secret=the-secret".utf8))
        let setCookie = here.signIn(form, home: "/dashboard", secretName: "Secret").header("Set-Cookie") ?? ""
        let cookie = String(setCookie.prefix { $0 != ";" })
        let page = HTTPRequest(method: "GET", path: "/dashboard", headers: [("Cookie", cookie)])
        #expect(elsewhere.needsSignOutCheck(page))
        #expect(await elsewhere.isSignedInEverywhere(page))
        let logout = HTTPRequest(method: "POST", path: "/dashboard/logout", headers: [("Cookie", cookie)])
        let failed = await here.signOutEverywhere(logout)
        #expect(failed.status == 503 && failed.header("Set-Cookie") == nil, "the cookie is kept for the retry")
        #expect(!here.isSignedIn(page), "ended in this process")
        #expect(await elsewhere.isSignedInEverywhere(page), "not stored: another process still takes it")
        let retried = await here.signOutEverywhere(logout)
        #expect(retried.status == 303)
        #expect(store.state.withLock { $0.signedOut.count } == 1, "stored on the retry")
        #expect(!(await elsewhere.isSignedInEverywhere(page)))
        #expect(!elsewhere.isSignedIn(page), "then refused here without asking")
    }

    @Test("Dashboard sign-in: ten wrong secrets from an address in a minute, then 429 for it until the minute is over")
    func signInAttempts() {
        let now = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
        let login = DashboardLogin(
            root: "/dashboard", product: "P", assets: "/a", secret: "the-secret", clock: { now.withLock { $0 } })
        func post(_ secret: String, from address: String) -> Int {
            var form = HTTPRequest(method: "POST", path: "/dashboard/login", body: Array("secret=\(secret)".utf8))
            form.remoteAddress = address
            return login.signIn(form, home: "/dashboard", secretName: "Secret").status
        }
        for _ in 0..<10 { #expect(post("guess", from: "203.0.113.7") == 401) }
        #expect(post("guess", from: "203.0.113.7") == 429)
        #expect(post("the-secret", from: "203.0.113.7") == 429, "not even the right one, for that minute")
        #expect(post("the-secret", from: "198.51.100.1") == 303, "another address signs in")
        now.withLock { $0 = $0.addingTimeInterval(61) }
        #expect(post("the-secret", from: "203.0.113.7") == 303)
    }

    @Test("Dashboard sign-in behind a proxy on the same machine counts the proxy's client; IPv6 counts by /64")
    func signInAttemptsByClient() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let login = DashboardLogin(root: "/dashboard", product: "P", assets: "/a", secret: "the-secret", clock: { now })
        func post(_ secret: String, from address: String, forwarded: String? = nil) -> Int {
            var form = HTTPRequest(
                method: "POST", path: "/dashboard/login", headers: forwarded.map { [("X-Forwarded-For", $0)] } ?? [],
                body: Array("secret=\(secret)".utf8))
            form.remoteAddress = address
            return login.signIn(form, home: "/dashboard", secretName: "Secret").status
        }
        // Through nginx on loopback: one client's guesses lock that client out, not everyone behind the proxy.
        for _ in 0..<10 { #expect(post("guess", from: "127.0.0.1", forwarded: "10.0.0.9, 203.0.113.7") == 401) }
        #expect(post("the-secret", from: "127.0.0.1", forwarded: "203.0.113.7") == 429)
        #expect(post("the-secret", from: "127.0.0.1", forwarded: "198.51.100.1") == 303, "the administrator")
        // A header from a remote peer is not believed: it counts against the peer.
        for _ in 0..<10 { _ = post("guess", from: "192.0.2.44", forwarded: "198.51.100.99") }
        #expect(post("the-secret", from: "192.0.2.44", forwarded: "198.51.100.2") == 429)
        // Every address of one IPv6 /64 is one client.
        for host in 1...10 { #expect(post("guess", from: "2001:db8:1:2::\(String(host, radix: 16))") == 401) }
        #expect(post("the-secret", from: "2001:db8:1:2:ffff:ffff:ffff:ffff") == 429)
        #expect(post("the-secret", from: "2001:db8:1:3::1") == 303, "the next /64")
    }

    @Test("Dashboard sign-in: a flood of addresses past the table's size shares one count instead of going uncounted")
    func signInAttemptsOverflow() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let login = DashboardLogin(root: "/dashboard", product: "P", assets: "/a", secret: "the-secret", clock: { now })
        func post(from address: String) -> Int {
            var form = HTTPRequest(method: "POST", path: "/dashboard/login", body: Array("secret=guess".utf8))
            form.remoteAddress = address
            return login.signIn(form, home: "/dashboard", secretName: "Secret").status
        }
        for index in 0..<10_000 { _ = post(from: "10.\(index / 65_536).\(index / 256 % 256).\(index % 256)") }
        let fresh = (0..<11).map { post(from: "172.16.0.\($0)") }
        #expect(fresh.last == 429, "\(fresh)")
    }
}
