import AppStoreEmulator
import AppStoreReceipts
import Foundation
import PurchaseServer
import StoreModel
import StoreTime
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperSQL
import Synchronization
import Testing

@Suite("Purchase server: answers rendered once per change, right as expiry dates pass")
struct RenderedAnswerTests {
    static let secret = "sk_test_rendered_0123"
    static let publicKey = "pk_test_rendered"
    static let bundleID = "com.example.rendered"

    /// The server's clock, set by the test.
    final class Clock: Sendable {
        private let time: Mutex<Date>
        init(_ start: Date) { time = Mutex(start) }
        var now: Date { time.withLock { $0 } }
        func set(_ date: Date) { time.withLock { $0 = date } }
    }

    /// A server on SQLite in a scratch directory whose clock the test sets.
    static func make(in directory: URL, clock: Clock, cachedUsers: Int? = nil) async throws -> (
        PurchaseServer, Responder
    ) {
        let (server, _) = try await makeServer(in: directory, clock: clock, cachedUsers: cachedUsers)
        return (server, server.responder())
    }

    /// The same, with its storage (for counting the writer's statements).
    static func makeServer(in directory: URL, clock: Clock, cachedUsers: Int? = nil) async throws -> (
        PurchaseServer, SQLiteServerStorage
    ) {
        let pki = try EmulatorPKI.loadOrCreate(in: directory.appendingPathComponent("pki"))
        var app = AppSettings(
            bundleID: bundleID, publicKey: publicKey, receiptRoots: [pki.receipts.root],
            jwsRoots: [pki.signedData.root],
            entitlements: ["plus": ["monthly"], "pro": ["pro"], "pass": ["season"], "archive": ["archive"]])
        // A month's season pass; the archive, non-renewing too, has no duration here.
        app.nonRenewingDurations = ["season": StorePeriod(months: 1)]
        let storage = try await SQLiteServerStorage(path: directory.appendingPathComponent("server.sqlite").path)
        var configuration = ServerConfiguration(secretKey: secret, apps: [app])
        if let cachedUsers { configuration.cachedUsers = cachedUsers }
        return (try PurchaseServer(configuration: configuration, storage: storage, now: { clock.now }), storage)
    }

    /// Runs `body` with a server whose clock (the test sets it) starts at 1,800,000,000 s, its responder, its
    /// scratch directory (removed after) and the clock.
    static func withResponder(_ body: (PurchaseServer, Responder, URL, Clock) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rendered-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let clock = Clock(Date(timeIntervalSince1970: 1_800_000_000))
        let (server, responder) = try await make(in: directory, clock: clock)
        try await body(server, responder, directory, clock)
    }

    /// Runs `body` with a server whose clock stands at 1,800,000,000 s, its storage, and its scratch directory
    /// (removed after).
    static func withServer(
        _ body: (PurchaseServer, SQLiteServerStorage, URL, Date) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rendered-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let (server, storage) = try await makeServer(in: directory, clock: Clock(now))
        try await body(server, storage, directory, now)
    }

    /// A receipt of `purchases` signed by the chain ``makeServer(in:clock:cachedUsers:)`` made in `directory`.
    static func receipt(_ purchases: [InAppPurchase], in directory: URL, at now: Date) throws -> [UInt8] {
        let pki = try EmulatorPKI.loadOrCreate(in: directory.appendingPathComponent("pki"))
        return try Receipt(
            receiptType: "ProductionSandbox", bundleID: bundleID, appVersion: "1", opaqueValue: [1, 2, 3, 4],
            sha1Hash: Array(repeating: 0, count: 20), creationDate: now, originalPurchaseDate: now,
            originalAppVersion: "1", inAppPurchases: purchases
        ).signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
    }

    static func request(_ method: String, _ path: String, key: String, body: JSONObject? = nil) -> HTTPRequest {
        var request = HTTPRequest(
            method: method, target: path,
            headers: [("Host", "127.0.0.1"), ("Content-Type", "application/json"), ("Authorization", "Bearer \(key)")],
            body: body.map { JSONWriter.bytes(.object($0)) } ?? [])
        request.remoteAddress = "127.0.0.1"
        return request
    }

    @Test(
        "A non-renewing subscription gives its entitlement for the app's duration from its purchase (the kept answer ends then); one with no duration, for good"
    )
    func nonRenewingDuration() async throws {
        try await Self.withResponder { server, responder, directory, clock in
            let start = clock.now
            let receipt = try Self.receipt(
                [
                    InAppPurchase(
                        productID: "season", transactionID: "4000000000000101", purchaseDate: start, productTypeRaw: 2),
                    InAppPurchase(
                        productID: "archive", transactionID: "4000000000000102", purchaseDate: start, productTypeRaw: 2),
                ], in: directory, at: start)
            _ = try await server.ingestReceipt(
                bundleID: Self.bundleID, appUserID: "ana", receipt: receipt, deviceID: nil)
            let ends = StorePeriod(months: 1).added(to: start)
            /// The subscriber's entitlements as answered inline (from the bytes kept, after the first).
            func entitlements() throws -> JSONValue? {
                let answered = try #require(
                    responder.respondInline(to: Self.request("GET", "/v1/subscribers/ana", key: Self.secret)))
                #expect(answered.status == 200)
                return try JSONParser.parse(answered.body)["entitlements"]
            }
            for at in [start, ends.addingTimeInterval(-1)] {
                clock.set(at)
                for _ in 0..<2 {
                    let answer = try entitlements()
                    #expect(answer?["pass"]?["active"] == .bool(true), "\(at)")
                    #expect(answer?["pass"]?["expiresDate"] == .integer(EpochMilliseconds.milliseconds(ends)))
                    #expect(answer?["archive"]?["active"] == .bool(true))
                }
            }
            clock.set(ends)
            for _ in 0..<2 {
                let answer = try entitlements()
                #expect(answer?["pass"]?["active"] == .bool(false), "the month is over")
                #expect(answer?["archive"]?["active"] == .bool(true), "no duration: for good")
                #expect(answer?["archive"]?["expiresDate"] == nil || answer?["archive"]?["expiresDate"] == .null)
            }
        }
    }

    @Test("The cached bytes are the full rendering's, before and after a grant expires, a revoke and a clock set back")
    func cachedBytesMatchTheFullRendering() async throws {
        try await Self.withResponder { _, responder, directory, clock in
            let start = clock.now

            let granted = await responder.respond(
                to: Self.request(
                    "POST", "/v1/subscribers/ana/entitlements/plus/grant", key: Self.secret,
                    body: ["durationDays": .integer(2)]))
            #expect(granted.status == 200)
            let subscriber = Self.request("GET", "/v1/subscribers/ana", key: Self.secret)
            let entitlements = Self.request("GET", "/v1/entitlements/ana", key: Self.publicKey)

            /// Both answers, inline from what the server keeps rendered, against a server just opened on the same
            /// file (nothing kept: rendered at the clock's time).
            func check(active: Bool, _ comment: Comment) async throws {
                let (_, fresh) = try await Self.make(in: directory, clock: clock)
                for request in [subscriber, entitlements] {
                    let full = await fresh.respond(to: request)
                    #expect(full.status == 200, comment)
                    // Twice inline: the first renders and keeps the bytes, the second answers from them.
                    for _ in 0..<2 {
                        let answered = responder.respondInline(to: request)
                        let inline = try #require(answered, comment)
                        #expect(inline.status == 200, comment)
                        #expect(inline.body == full.body, comment)
                    }
                    let object: JSONValue = try JSONParser.parse(full.body)
                    #expect(object["entitlements"]?["plus"]?["active"] == .bool(active), comment)
                    if request.path.hasPrefix("/v1/entitlements") {
                        let now = clock.now
                        #expect(object["requestDate"] == .integer(Int64(now.timeIntervalSince1970 * 1000)), comment)
                        #expect(object["requestDateISO"]?.stringValue != nil, comment)
                    }
                }
            }
            try await check(active: true, "just granted")
            clock.set(start.addingTimeInterval(86_400))
            try await check(active: true, "a day later (the same bytes for the subscriber; a new requestDate)")
            clock.set(start.addingTimeInterval(2 * 86_400))
            try await check(active: false, "at the grant's end")
            clock.set(start.addingTimeInterval(86_400))
            try await check(active: true, "the clock set back before the end (a followed emulator's clock can)")
            let revoked = await responder.respond(
                to: Self.request("POST", "/v1/subscribers/ana/entitlements/plus/revoke", key: Self.secret))
            #expect(revoked.status == 200)
            try await check(active: false, "revoked: the write invalidated what was rendered")
        }
    }

    @Test("The users kept are at most cachedUsers; the rest answer the same from the storage, and /metrics counts both")
    func boundedByConfiguration() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rendered-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let clock = Clock(Date(timeIntervalSince1970: 1_800_000_000))
        func metric(_ name: String, _ responder: Responder) async throws -> Int {
            var get = HTTPRequest(method: "GET", target: "/metrics", headers: [], body: [])
            get.remoteAddress = "127.0.0.1"
            let text = String(decoding: await responder.respond(to: get).body, as: UTF8.self)
            let line = try #require(text.split(separator: "\n").first { $0.hasPrefix(name + " ") }, "\(text)")
            return try #require(Int(line.split(separator: " ").last ?? ""))
        }
        // Set in code rather than read from a file, the bound is checked all the same.
        await #expect(throws: PurchaseServerError.self) {
            try await Self.make(in: directory.appendingPathComponent("negative"), clock: clock, cachedUsers: -1)
        }
        for (capacity, kept) in [(4, 4), (0, 0)] {
            let (_, responder) = try await Self.make(
                in: directory.appendingPathComponent("\(capacity)"), clock: clock, cachedUsers: capacity)
            let users = (0..<10).map { "user-\($0)" }
            for user in users {
                let granted = await responder.respond(
                    to: Self.request(
                        "POST", "/v1/subscribers/\(user)/entitlements/plus/grant", key: Self.secret,
                        body: ["durationDays": .integer(2)]))
                #expect(granted.status == 200)
            }
            // Each user's own answer, whether kept or read again.
            for user in users {
                let answer = await responder.respond(
                    to: Self.request("GET", "/v1/subscribers/\(user)", key: Self.secret))
                #expect(answer.status == 200)
                let object: JSONValue = try JSONParser.parse(answer.body)
                #expect(object["appUserId"]?.stringValue == user, "\(object)")
                #expect(object["entitlements"]?["plus"]?["active"] == .bool(true))
            }
            // Read twice in a row: the gauge is this process's, in every answer (the table counts beside it are
            // made at most once every five seconds).
            for _ in 0..<2 { #expect(try await metric("storekeeper_subscriber_cache_users", responder) == kept) }
            let misses = try await metric("storekeeper_subscriber_cache_misses_total", responder)
            let hits = try await metric("storekeeper_subscriber_cache_hits_total", responder)
            // Each of the ten posts' answers (read right after its write) and the ten reads counted once; the
            // posts' and the users not kept at least missed.
            #expect(hits + misses == 20)
            #expect(misses >= 10 + (10 - kept))
            // The last user read was kept (unless nothing is): a second read is a hit, not a miss.
            let again = Self.request("GET", "/v1/subscribers/user-9", key: Self.secret)
            #expect(await responder.respond(to: again).status == 200)
            #expect(try await metric("storekeeper_subscriber_cache_hits_total", responder) == hits + (kept > 0 ? 1 : 0))
            #expect(
                try await metric("storekeeper_subscriber_cache_misses_total", responder) == misses + (kept > 0 ? 0 : 1))
        }
    }

    /// A configuration file of one app with `app` appended to the app's members and `top` to the file's.
    static func loadConfiguration(app: String = "", top: String = "") throws -> ServerConfiguration {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rendered-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("server.json")
        try Data(
            #"{"secretKey": "sk_0123456789abcdef", "apps": [{"bundleId": "a.b", "publicKey": "pk_12345678"\#(app)}]\#(top)}"#
                .utf8
        ).write(to: file)
        return try ServerConfiguration.load(path: file.path, variables: [:])
    }

    @Test("cachedUsers in the configuration file: a whole number from 0 to 10,000,000")
    func cachedUsersConfiguration() throws {
        func load(_ value: String?) throws -> ServerConfiguration {
            try Self.loadConfiguration(top: value.map { #", "cachedUsers": \#($0)"# } ?? "")
        }
        #expect(try load(nil).cachedUsers == ServerConfiguration.defaultCachedUsers)
        #expect(try load("0").cachedUsers == 0)
        #expect(try load("500000").cachedUsers == 500_000)
        for wrong in ["-1", "1.5", "10000001", #""many""#] {
            #expect(throws: PurchaseServerError.self, "\(wrong)") { try load(wrong) }
        }
    }

    @Test("nonRenewingDurations in the configuration file: product id → an ISO 8601 duration, not empty")
    func nonRenewingDurationsConfiguration() throws {
        func load(_ value: String) throws -> [String: StorePeriod] {
            try Self.loadConfiguration(app: #", "nonRenewingDurations": {"season": \#(value)}"#).apps[0]
                .nonRenewingDurations
        }
        #expect(try Self.loadConfiguration().apps[0].nonRenewingDurations.isEmpty)
        #expect(try load(#""P3M""#) == ["season": StorePeriod(months: 3)])
        #expect(try load(#""P1Y2M10DT2H""#) == ["season": StorePeriod(years: 1, months: 2, days: 10, hours: 2)])
        for wrong in [#""3 months""#, #""P0M""#, #""P""#, "30", #""-P1M""#] {
            #expect(throws: PurchaseServerError.self, "\(wrong)") { try load(wrong) }
        }
    }

    @Test("A receipt of three purchases writes its user once; the same receipt posted again writes the user not at all")
    func userWrittenWhenChanged() async throws {
        try await Self.withServer { server, storage, directory, now in
            let receipt = try Self.receipt(
                [
                    InAppPurchase(
                        productID: "pro", transactionID: "4000000000000001", purchaseDate: now, productTypeRaw: 0),
                    InAppPurchase(
                        productID: "coins", transactionID: "4000000000000002", purchaseDate: now, productTypeRaw: 1),
                    InAppPurchase(
                        productID: "coins", transactionID: "4000000000000003", purchaseDate: now, productTypeRaw: 1),
                ], in: directory, at: now)
            /// Upserts of the user's row while `post` runs.
            func userWrites(_ post: () async throws -> Void) async throws -> Int {
                let before = await storage.writerStatementCosts().filter { $0.sql.hasPrefix("INSERT INTO subscribers") }
                try await post()
                let after = await storage.writerStatementCosts().filter { $0.sql.hasPrefix("INSERT INTO subscribers") }
                return after.reduce(0) { $0 + $1.calls } - before.reduce(0) { $0 + $1.calls }
            }
            await storage.countWriterStatements(true)
            for (time, expected) in [("first", 1), ("again", 0)] {
                let writes = try await userWrites {
                    let view = try await server.ingestReceipt(
                        bundleID: Self.bundleID, appUserID: "ana", receipt: receipt, deviceID: nil)
                    #expect(view.purchases.count == 3 && view.entitlements["pro"]?.active == true, "\(time)")
                }
                #expect(writes == expected, "\(time)")
            }
            await storage.countWriterStatements(false)
            let stored = try await storage.read { try $0.subscriber(bundle: Self.bundleID, appUserID: "ana") }
            #expect(stored?.firstSeen == now)
        }
    }

    @Test("A receipt with no purchase posted under an alias makes no user of the alias: its user is known already")
    func emptyReceiptUnderAlias() async throws {
        try await Self.withServer { server, storage, directory, now in
            let empty = try Self.receipt([], in: directory, at: now)
            _ = try await server.ingestReceipt(bundleID: Self.bundleID, appUserID: "ana", receipt: empty, deviceID: nil)
            let merged = try await server.alias(bundleID: Self.bundleID, appUserID: "ana", alias: "ipad-2")
            #expect(merged.aliases == ["ipad-2"])
            let view = try await server.ingestReceipt(
                bundleID: Self.bundleID, appUserID: "ipad-2", receipt: empty, deviceID: nil)
            #expect(view.appUserID == "ana")
            let rows = try await storage.read {
                (
                    try $0.subscriber(bundle: Self.bundleID, appUserID: "ipad-2"),
                    try $0.subscriber(bundle: Self.bundleID, appUserID: "ana")?.aliases
                )
            }
            #expect(rows.0 == nil, "no row for the alias")
            #expect(rows.1 == ["ipad-2"])
        }
    }

    @Test(
        "A receipt of two subscriptions' years: the user, its alias and its purchases looked up once, the flag for several Apple accounts set"
    )
    func receiptHistoryLookedUpOnce() async throws {
        try await Self.withServer { server, storage, directory, now in
            /// Twelve monthly periods of one subscription from each original (the last ending after `now`).
            func receipt(originals: [Int]) throws -> [UInt8] {
                var purchases: [InAppPurchase] = []
                for original in originals {
                    for month in 0..<12 {
                        let start = now.addingTimeInterval(Double(month - 11) * 30 * 86_400 - 86_400)
                        purchases.append(
                            InAppPurchase(
                                productID: "monthly",
                                transactionID: String(5_000_000_000_000_000 + original * 100 + month),
                                purchaseDate: start,
                                originalTransactionID: String(5_000_000_000_000_000 + original * 100),
                                originalPurchaseDate: now.addingTimeInterval(-12 * 30 * 86_400), productTypeRaw: 3,
                                expiresDate: start.addingTimeInterval(30 * 86_400),
                                webOrderLineItemID: Int64(original * 100 + month)))
                    }
                }
                return try Self.receipt(purchases, in: directory, at: now)
            }
            for (user, originals) in [("one", [1]), ("two", [2, 3])] {
                await storage.countWriterStatements(true)
                let view = try await server.ingestReceipt(
                    bundleID: Self.bundleID, appUserID: user, receipt: try receipt(originals: originals), deviceID: nil)
                let costs = await storage.writerStatementCosts()
                await storage.countWriterStatements(false)
                func calls(_ prefix: String) -> Int {
                    costs.filter { $0.sql.hasPrefix(prefix) }.reduce(0) { $0 + $1.calls }
                }
                #expect(view.purchases.count == 12 * originals.count && view.entitlements["plus"]?.active == true)
                // Once for the updates, once more where the user is found to hold several subscriptions' originals.
                #expect(
                    calls("SELECT document FROM subscribers WHERE bundle_id = ? AND app_user_id = ?")
                        == (originals.count > 1 ? 2 : 1), "\(user)")
                #expect(calls("SELECT app_user_id FROM aliases") == 1, "\(user)")
                #expect(calls("SELECT document FROM purchases WHERE bundle_id = ? AND owner = ?") == 1, "\(user)")
                #expect(calls("INSERT INTO subscribers") == (originals.count > 1 ? 2 : 1), "\(user)")
                #expect(view.flags == (originals.count > 1 ? ["multiple_apple_accounts"] : []), "\(user)")
            }
        }
    }

    @Test(
        "A receipt's period cancelled where the next began was upgraded, not refunded; one user's subscriptions of two products are not several Apple accounts"
    )
    func receiptUpgradeAndTwoGroups() async throws {
        try await Self.withServer { server, _, directory, now in
            let day: TimeInterval = 86_400
            let upgradedAt = now.addingTimeInterval(-10 * day)
            let purchases = [
                InAppPurchase(
                    productID: "monthly", transactionID: "7000000000000001",
                    purchaseDate: now.addingTimeInterval(-20 * day),
                    originalTransactionID: "7000000000000001", originalPurchaseDate: now.addingTimeInterval(-20 * day),
                    productTypeRaw: 3, expiresDate: now.addingTimeInterval(10 * day), webOrderLineItemID: 71,
                    cancellationDate: upgradedAt),
                InAppPurchase(
                    productID: "pro", transactionID: "7000000000000002", purchaseDate: upgradedAt,
                    originalTransactionID: "7000000000000001", originalPurchaseDate: now.addingTimeInterval(-20 * day),
                    productTypeRaw: 3, expiresDate: upgradedAt.addingTimeInterval(30 * day), webOrderLineItemID: 72),
                // A subscription of another group, from the same Apple account.
                InAppPurchase(
                    productID: "season-monthly", transactionID: "7000000000000003",
                    purchaseDate: now.addingTimeInterval(-5 * day), originalTransactionID: "7000000000000003",
                    originalPurchaseDate: now.addingTimeInterval(-5 * day), productTypeRaw: 3,
                    expiresDate: now.addingTimeInterval(25 * day), webOrderLineItemID: 73),
            ]
            let view = try await server.ingestReceipt(
                bundleID: Self.bundleID, appUserID: "upgrader",
                receipt: try Self.receipt(purchases, in: directory, at: now),
                deviceID: nil)
            #expect(view.entitlements["pro"]?.active == true)
            #expect(view.flags.isEmpty, "\(view.flags)")
            let events = try await server.events(bundleID: Self.bundleID, appUserID: "upgrader", after: nil, limit: 100)
                .map(\.event.type.rawValue)
            #expect(!events.contains("REFUND"), "\(events)")
            #expect(events.contains("PRODUCT_CHANGE"), "\(events)")
            #expect(view.purchases.allSatisfy { !$0.isRefunded }, "an upgraded period is not revoked")
            // A second Apple account's subscription to a product of the first's group (one original held both
            // products: the upgrade) is several accounts.
            let other = InAppPurchase(
                productID: "pro", transactionID: "7000000000000009", purchaseDate: now.addingTimeInterval(-3 * day),
                originalTransactionID: "7000000000000009", originalPurchaseDate: now.addingTimeInterval(-3 * day),
                productTypeRaw: 3, expiresDate: now.addingTimeInterval(27 * day), webOrderLineItemID: 79)
            let shared = try await server.ingestReceipt(
                bundleID: Self.bundleID, appUserID: "upgrader",
                receipt: try Self.receipt(purchases + [other], in: directory, at: now), deviceID: nil)
            #expect(shared.flags == ["multiple_apple_accounts"], "\(shared.flags)")
        }
    }
}
