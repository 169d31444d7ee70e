import AppStoreEmulator
import AppStoreSignedData
import Foundation
import PurchaseServer
import StoreModel
import StorekeeperCLITestSupport
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperRehearsal
import StorekeeperTestSupport
import Synchronization
import Testing

/// `storekeeper dev`'s wiring, driven as a developer drives it: the emulator's command line against the
/// emulator, the app's post through `appstore buy --app-user-id`, and the server read with its secret key.
/// Nothing is configured by hand: the configuration is the one a first start writes.
@Suite("Rehearsal: the emulator and the purchase server wired together (storekeeper dev)")
struct RehearsalTests {
    static let monthly = "com.example.storekeeper.monthly"

    /// A rehearsal in a fresh folder on free ports, polling for missed news every `reconcileEvery` seconds.
    static func start(reconcileEvery: TimeInterval = 0) async throws -> Rehearsal {
        var options = Rehearsal.Options(dataDirectory: try ExternalTool.temporaryDirectory())
        options.emulatorPort = 0
        options.serverPort = 0
        options.reconcileEvery = reconcileEvery
        options.granularity = .milliseconds(20)
        // A loaded test machine can take longer than Apple's 700 ms to answer the cancellation page.
        options.realtimeTimeout = .seconds(5)
        return try await Rehearsal.start(options)
    }

    /// `storekeeper <arguments>` in-process against the rehearsal; fails the test on a non-zero exit.
    @discardableResult
    static func cli(_ rehearsal: Rehearsal, _ arguments: [String]) async throws -> String {
        var all = arguments
        switch arguments.first {
        case "appstore": all += ["--url", rehearsal.emulatorURL]
        case "server": all += ["--server", rehearsal.serverURL, "--config", rehearsal.configurationFile.path]
        default: break
        }
        let result = await CapturedConsole.run(all)
        #expect(result.status == 0, "storekeeper \(arguments.joined(separator: " ")): \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A customer's device with the app installed.
    static func device(_ rehearsal: Rehearsal) async throws -> String {
        let account = try await cli(rehearsal, ["appstore", "account", "--field", "accountId"])
        let device = try await cli(rehearsal, ["appstore", "device", "--account", account, "--field", "deviceId"])
        try await cli(rehearsal, ["appstore", "install", "--device", device, "--version", "1"])
        return device
    }

    /// Buys the monthly plan (or `product`); with `user`, posts it to the server as the app would. The
    /// transaction id.
    static func buy(_ rehearsal: Rehearsal, device: String, user: String?, product: String = monthly) async throws
        -> String
    {
        var arguments = [
            "appstore", "buy", "--device", device, "--product", product, "--field", "transaction.transactionIdentifier",
        ]
        if let user {
            arguments += [
                "--app-user-id", user, "--server", rehearsal.serverURL, "--app-key",
                rehearsal.configuration.apps[0].publicKey,
            ]
        }
        return try await cli(rehearsal, arguments)
    }

    static func subscriber(_ rehearsal: Rehearsal, _ user: String) async throws -> JSONValue {
        try JSONParser.parse(try await cli(rehearsal, ["server", "subscriber", user]))
    }

    /// The subscriber once `done` holds (or after about ten seconds).
    static func subscriber(_ rehearsal: Rehearsal, _ user: String, until done: (JSONValue) -> Bool) async throws
        -> JSONValue
    {
        var body: JSONValue = .null
        for _ in 0..<500 {
            body = try await subscriber(rehearsal, user)
            if done(body) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        return body
    }

    static func plus(_ body: JSONValue) -> JSONValue? { body["entitlements"]?["storekeeper-plus"] }

    static func chart(_ rehearsal: Rehearsal, _ name: String, resolution: String = "minute") async throws
        -> [Double]
    {
        let response = try await HTTPClient().send(
            "GET",
            rehearsal.serverURL + "/v1/metrics/\(name)?bundleId=com.example.storekeeper&resolution=\(resolution)",
            headers: [("Authorization", "Bearer " + rehearsal.configuration.secretKey)])
        #expect(response.status == 200)
        return (try JSONParser.parse(response.body)["values"]?.arrayValue ?? []).compactMap { $0["value"]?.doubleValue }
    }

    @Test("The first start writes a configuration that trusts the emulator, owner-only; the second reads it")
    func configuration() async throws {
        let rehearsal = try await Self.start()
        let data = rehearsal.configurationFile.deletingLastPathComponent()
        #expect(rehearsal.wroteConfiguration)
        for name in ["server.json", "api-key-com.example.storekeeper.p8", "emulator-jws-root.cer"] {
            let mode =
                try FileManager.default.attributesOfItem(atPath: data.appendingPathComponent(name).path)[
                    .posixPermissions] as? Int
            #expect(mode == 0o600, "\(name)")
        }
        let app = try #require(rehearsal.configuration.apps.first)
        #expect(app.entitlements["storekeeper-plus"] == [Self.monthly, "com.example.storekeeper.yearly"])
        #expect(app.entitlements["pro"] == ["com.example.storekeeper.pro"])
        #expect(app.jwsRoots.count == 3, "Apple's two roots and the emulator's")
        #expect(app.serverAPI?.productionURL == rehearsal.emulatorURL)
        let written = try Data(contentsOf: rehearsal.configurationFile)
        await rehearsal.stop()

        var options = Rehearsal.Options(dataDirectory: data)
        (options.emulatorPort, options.serverPort) = (0, 0)
        options.webhooks = ["http://127.0.0.1:9/hooks"]
        let again = try await Rehearsal.start(options)
        #expect(!again.wroteConfiguration)
        #expect(try Data(contentsOf: again.configurationFile) == written, "a later start leaves the file as it is")
        #expect(again.configuration.secretKey == rehearsal.configuration.secretKey)
        #expect(again.configuration.apps[0].serverAPI?.productionURL == again.emulatorURL, "the port of this start")
        #expect(
            again.configuration.apps[0].webhooks.map(\.secret) == [
                Rehearsal.webhookSecret("http://127.0.0.1:9/hooks", key: again.configuration.secretKey)
            ])
        await again.stop()
    }

    @Test("A purchase reaches the server both ways: Apple's notification, then the app's post for its user")
    func purchase() async throws {
        let rehearsal = try await Self.start()
        let device = try await Self.device(rehearsal)
        let jws = try await Self.cli(
            rehearsal,
            ["appstore", "buy", "--device", device, "--product", Self.monthly, "--field", "jwsRepresentation"])
        let transaction = try #require(
            try await Self.cli(
                rehearsal,
                ["appstore", "transactions", "--device", device, "--field", "transactions.0.transactionIdentifier"]
            ) as String?)
        // The notification alone: the server knows the subscription, not yet whose it is.
        var known = false
        for _ in 0..<500 where !known {
            known = try await rehearsal.server.storage.read { try $0.subscription(.init(transaction)) } != nil
            if !known { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(known, "SUBSCRIBED reached the server")
        // The app posts the same purchase for its user (its Transaction.jwsRepresentation).
        let posted = try await HTTPClient().send(
            "POST", rehearsal.serverURL + "/v1/transactions",
            headers: [
                ("Authorization", "Bearer " + rehearsal.configuration.apps[0].publicKey),
                ("Content-Type", "application/json"),
            ],
            body: JSONWriter.bytes(
                .object([
                    "bundleId": .string("com.example.storekeeper"), "appUserId": .string("alice"),
                    "signedTransaction": .string(jws),
                ])))
        #expect(posted.status == 200, "\(String(decoding: posted.body, as: UTF8.self))")
        let alice = try await Self.subscriber(rehearsal, "alice")
        #expect(Self.plus(alice)?["active"] == .bool(true))
        // And in one step, as `appstore buy --app-user-id` does for a second customer.
        _ = try await Self.buy(rehearsal, device: try await Self.device(rehearsal), user: "bob")
        #expect(Self.plus(try await Self.subscriber(rehearsal, "bob"))?["active"] == .bool(true))
        await rehearsal.stop()
    }

    @Test("Retention Messaging is wired: the cancellation page asks the server, whose rules offer, then message")
    func retention() async throws {
        let rehearsal = try await Self.start()
        let scenario = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("examples/retention.scenario.json").path
        let report = try await Self.cli(rehearsal, ["appstore", "scenario", "run", scenario])
        #expect(report.hasPrefix("PASS"), "\(report)")
        // The renewal after the redeemed offer is a retention offer (offerType 5) at the offer's price.
        let renewals = try await rehearsal.store.notificationHistory(
            bundleID: DefaultCatalog.bundleID, environment: .sandbox, from: .distantPast, to: .distantFuture,
            after: nil, limit: 100
        ).map(\.notification).filter { $0.notice.type == .didRenew }
        let payload = try #require(renewals.last?.signedPayload.flatMap { try? CompactJWS($0).payload })
        let transaction = try #require(
            payload["data"]?["signedTransactionInfo"]?.stringValue.flatMap { try? CompactJWS($0).payload })
        #expect(transaction["offerType"] == .integer(5), "\(transaction)")
        let answers = try await rehearsal.server.storage.read {
            try $0.retentionAnswers(
                bundle: DefaultCatalog.bundleID, from: .distantPast, to: .distantFuture, limit: 10)
        }
        #expect(answers.map(\.answer) == ["promotionalOffer", "message"])
        await rehearsal.stop()
    }

    @Test("advance P1M: the renewal is on the server and the entitlement active in store time")
    func renewal() async throws {
        let rehearsal = try await Self.start()
        _ = try await Self.buy(rehearsal, device: try await Self.device(rehearsal), user: "alice")
        let first = try #require(Self.plus(try await Self.subscriber(rehearsal, "alice"))?["expiresDate"]?.int64Value)
        try await Self.cli(rehearsal, ["appstore", "advance", "--by", "P1M"])
        let renewed = try await Self.subscriber(rehearsal, "alice") {
            (Self.plus($0)?["expiresDate"]?.int64Value ?? 0) > first
        }
        let plus = try #require(Self.plus(renewed))
        #expect(plus["active"] == .bool(true), "active at the store's time, a month past the first period's end")
        #expect(renewed["purchases"]?.arrayValue?.count == 2)
        #expect(rehearsal.server.storage.location.hasSuffix("server.sqlite"))
        await rehearsal.stop()
    }

    @Test("Auto-renew off, advance P2M: the entitlement ends and the charts show the churn")
    func churn() async throws {
        let rehearsal = try await Self.start()
        let transaction = try await Self.buy(rehearsal, device: try await Self.device(rehearsal), user: "alice")
        let first = try #require(Self.plus(try await Self.subscriber(rehearsal, "alice"))?["expiresDate"]?.int64Value)
        try await Self.cli(rehearsal, ["appstore", "advance", "--by", "P1M"])
        _ = try await Self.subscriber(rehearsal, "alice") { (Self.plus($0)?["expiresDate"]?.int64Value ?? 0) > first }
        #expect(try await Self.chart(rehearsal, "actives").last == 1)
        try await Self.cli(
            rehearsal, ["appstore", "auto-renew", "--transaction", transaction, "--enabled", "false"])
        // As a developer would: the server has heard of it before the clock moves on (notifications are
        // not ordered, at Apple's either).
        _ = try await Self.subscriber(rehearsal, "alice") { Self.plus($0)?["willRenew"] == .bool(false) }
        try await Self.cli(rehearsal, ["appstore", "advance", "--by", "P2M"])
        let ended = try await Self.subscriber(rehearsal, "alice") { Self.plus($0)?["active"] == .bool(false) }
        #expect(Self.plus(ended)?["active"] == .bool(false))
        #expect(Self.plus(ended)?["willRenew"] == .bool(false))
        // The entitlement ends with its period, in store time; the EXPIRED notification follows.
        var types: [String] = []
        for _ in 0..<500 where !types.contains("EXPIRATION") {
            let events = try JSONParser.parse(try await Self.cli(rehearsal, ["server", "events", "alice"]))
            types = (events["events"]?.arrayValue ?? []).compactMap { $0["type"]?.stringValue }
            if !types.contains("EXPIRATION") { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(types == ["INITIAL_PURCHASE", "RENEWAL", "CANCELLATION", "EXPIRATION"])
        let actives = try await Self.chart(rehearsal, "actives")
        #expect(actives.contains(1) && actives.last == 0, "\(actives.suffix(20))")
        #expect(try await Self.chart(rehearsal, "churn").contains(100), "the one subscriber churned")
        await rehearsal.stop()
    }

    @Test("Charts count what the subscriber pages show: actives and MRR against a recount")
    func chartsAgreeWithSubscribers() async throws {
        let rehearsal = try await Self.start()
        let yearly = "com.example.storekeeper.yearly"
        let plans = ["a": Self.monthly, "b": yearly, "c": Self.monthly, "d": Self.monthly, "e": yearly]
        var transactions: [String: String] = [:]
        for (user, product) in plans.sorted(by: { $0.key < $1.key }) {
            transactions[user] = try await Self.buy(
                rehearsal, device: try await Self.device(rehearsal), user: user, product: product)
        }
        try await Self.cli(
            rehearsal, ["appstore", "auto-renew", "--transaction", transactions["c"]!, "--enabled", "false"])
        try await Self.cli(rehearsal, ["appstore", "refund", "--transaction", transactions["d"]!])
        try await Self.cli(rehearsal, ["appstore", "refund", "--transaction", transactions["e"]!])
        try await Self.cli(rehearsal, ["appstore", "advance", "--by", "P2M"])
        // Settled: the monthly plan renewed twice, the cancelled one expired, the refunds revoked.
        let a = try await Self.subscriber(rehearsal, "a") { $0["purchases"]?.arrayValue?.count == 3 }
        #expect(a["purchases"]?.arrayValue?.count == 3)
        for user in ["c", "d", "e"] {
            _ = try await Self.subscriber(rehearsal, user) { Self.plus($0)?["active"] == .bool(false) }
        }
        // The recount: each subscriber's page, and the price of what it holds.
        var active = 0
        var monthly = 0.0
        for user in plans.keys {
            guard let plus = Self.plus(try await Self.subscriber(rehearsal, user)), plus["active"] == .bool(true)
            else { continue }
            active += 1
            monthly += plus["productId"]?.stringValue == yearly ? 24.99 / 12 : 2.99
        }
        #expect(active == 2, "a (monthly) and b (yearly)")
        let actives = try await Self.chart(rehearsal, "actives")
        let mrr = try await Self.chart(rehearsal, "mrr")
        #expect(actives.last == Double(active))
        #expect(abs((mrr.last ?? 0) - monthly) < 0.001, "\(mrr.suffix(3)) against \(monthly)")
        // Over the day too (the same instant: the day's snapshot is now).
        #expect(try await Self.chart(rehearsal, "actives", resolution: "day").last == Double(active))
        await rehearsal.stop()
    }

    @Test("Notifications that never arrive: reconciliation repairs the state after an advance")
    func reconciliation() async throws {
        let rehearsal = try await Self.start(reconcileEvery: 0.5)
        _ = try await Self.buy(rehearsal, device: try await Self.device(rehearsal), user: "alice")
        let first = try #require(Self.plus(try await Self.subscriber(rehearsal, "alice"))?["expiresDate"]?.int64Value)
        // The server stops hearing from the emulator (a port where nothing listens).
        try await Self.cli(
            rehearsal,
            ["appstore", "notifications", "set", "--sandbox-url", "http://127.0.0.1:9/nowhere"])
        try await Self.cli(rehearsal, ["appstore", "advance", "--by", "P1M"])
        let repaired = try await Self.subscriber(rehearsal, "alice") {
            (Self.plus($0)?["expiresDate"]?.int64Value ?? 0) > first
        }
        #expect(Self.plus(repaired)?["active"] == .bool(true))
        let events = try JSONParser.parse(try await Self.cli(rehearsal, ["server", "events", "alice"]))
        #expect(
            (events["events"]?.arrayValue ?? []).compactMap { $0["type"]?.stringValue } == [
                "INITIAL_PURCHASE", "RENEWAL",
            ])
        // The emulator never delivered the renewal's notification: the server read it from the App Store
        // Server API's notification history (its failures), as it would from Apple's.
        let history = try await rehearsal.store.notificationHistory(
            bundleID: "com.example.storekeeper", environment: .sandbox, from: .distantPast, to: .distantFuture,
            after: nil, limit: 100)
        let renewal = try #require(history.first { $0.notification.notice.type == .didRenew })
        #expect(renewal.notification.state == .failed)
        await rehearsal.stop()
    }
}

/// `serve --clock`: the server's purchase clock read from an emulator over HTTP.
@Suite("Purchase server: following an emulator's store time")
struct FollowedClockTests {
    @Test("The followed clock is the emulator's store time, and sees an advance at the next reading")
    func follows() async throws {
        let rehearsal = try await RehearsalTests.start()
        let clock = try await FollowedClock(url: rehearsal.emulatorURL + "/")
        #expect(abs(clock.now().timeIntervalSince(rehearsal.store.now)) < 1)
        #expect(abs(clock.now().timeIntervalSince(Date())) < 5, "a fresh store runs on the wall clock")
        try await RehearsalTests.cli(rehearsal, ["appstore", "advance", "--by", "P1D", "--rate", "realTime"])
        #expect(abs(clock.now().timeIntervalSince(Date())) < 5, "not read again yet")
        #expect(try await clock.refresh())
        #expect(abs(clock.now().timeIntervalSince(rehearsal.store.now)) < 1)
        #expect(clock.now().timeIntervalSince(Date()) > 86_000, "a day ahead of the wall clock")
        #expect(try await clock.refresh() == false, "an unchanged offset is kept")
        await rehearsal.stop()
        await #expect(throws: PurchaseServerError.self) { try await clock.refresh() }
        await #expect(throws: PurchaseServerError.self) { _ = try await FollowedClock(url: "ftp://x") }
    }

    @Test("A clock that answers an offset past a few centuries, or the most negative integer, is refused, not a crash")
    func hostileOffsets() async throws {
        let said = Mutex<String>("")
        var router = Router()
        router.add(
            "GET", "/_emulator/v1/clock",
            inline: { _, _ in HTTPResponse(status: 200, body: Array(said.withLock { $0 }.utf8)) })
        let server = try HTTPServer(port: 0, responder: router.freeze())
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)"
        for offset in ["-9223372036854775808", "9223372036854775807", "10000000000000", "-10000000000000"] {
            said.withLock { $0 = #"{"now": 0, "offsetMs": \#(offset)}"# }
            await #expect(throws: PurchaseServerError.self, "offset \(offset)") {
                _ = try await FollowedClock(url: url)
            }
        }
        said.withLock { $0 = #"{"now": 0, "offsetMs": -9999999999999}"# }
        let clock = try await FollowedClock(url: url)
        #expect(clock.now() < Date(timeIntervalSince1970: 0), "the largest offset allowed is followed")
    }

    @Test("dev polls at server.json's reconciliation interval (15 as first written, or as edited) unless told")
    func reconcileInterval() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        func start(_ every: TimeInterval?) async throws -> Rehearsal {
            var options = Rehearsal.Options(dataDirectory: directory)
            options.emulatorPort = 0
            options.serverPort = 0
            options.reconcileEvery = every
            options.granularity = .milliseconds(20)
            return try await Rehearsal.start(options)
        }
        let first = try await start(nil)
        #expect(first.wroteConfiguration && first.configuration.reconcileEverySeconds == 15)
        await first.stop()
        let file = directory.appendingPathComponent("server.json")
        var root = try #require(try JSONParser.parse(Array(try Data(contentsOf: file))).objectValue)
        root["reconciliation"] = .object(["intervalSeconds": .integer(2)])
        try Data(JSONWriter.bytes(.object(root))).write(to: file)
        let edited = try await start(nil)
        #expect(!edited.wroteConfiguration && edited.configuration.reconcileEverySeconds == 2)
        await edited.stop()
        let told = try await start(0)
        #expect(told.configuration.reconcileEverySeconds == 0)
        await told.stop()
    }

    @Test("The configuration's clock member is an http(s) URL")
    func configuration() throws {
        let directory = try ExternalTool.temporaryDirectory()
        let file = directory.appendingPathComponent("server.json")
        func load(_ clock: String) throws -> ServerConfiguration {
            try Data(
                """
                {"secretKey": "sk_0123456789abcdef", "clock": \(clock),
                 "apps": [{"bundleId": "com.example.app", "publicKey": "pk_12345678", "jwsRoots": ["apple"]}]}
                """.utf8
            ).write(to: file)
            return try ServerConfiguration.load(path: file.path, variables: [:])
        }
        #expect(try load(#""http://127.0.0.1:8080""#).clock == "http://127.0.0.1:8080")
        #expect(try load(#""http://127.0.0.1:8080""#).apps[0].jwsRoots.count == 2, "\"apple\" names Apple's roots")
        #expect(throws: PurchaseServerError.self) { try load("42") }
        #expect(throws: PurchaseServerError.self) { try load(#""file:///etc""#) }
    }

    @Test("Reconciliation's interval is at most a year: a larger one is refused at load, never turned into a trap")
    func reconciliationInterval() throws {
        let file = try ExternalTool.temporaryDirectory().appendingPathComponent("server.json")
        func load(_ seconds: String) throws -> ServerConfiguration {
            try Data(
                """
                {"secretKey": "sk_0123456789abcdef", "reconciliation": {"intervalSeconds": \(seconds)},
                 "apps": [{"bundleId": "com.example.app", "publicKey": "pk_12345678"}]}
                """.utf8
            ).write(to: file)
            return try ServerConfiguration.load(path: file.path, variables: [:])
        }
        #expect(try load("31536000").reconcileEverySeconds == 31_536_000)
        #expect(try load("0").reconcileEverySeconds == 0)
        #expect(try load("0.5").reconcileEverySeconds == 0.5)
        for refused in ["1e16", "31536001", "-1"] {
            #expect(throws: PurchaseServerError.self, "\(refused)") { try load(refused) }
        }
    }
}
