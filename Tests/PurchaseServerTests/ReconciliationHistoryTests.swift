import AppStoreEmulator
import AppStoreReceipts
import Foundation
import PurchaseServer
import StoreModel
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

/// Reconciliation reading Apple's notification history from a stand-in for the App Store Server API.
@Suite("Purchase server: reconciliation from the notification history")
struct ReconciliationHistoryTests {
    /// A stand-in for Apple's notification history answering with `answer`, and a server on SQLite whose app's
    /// App Store Server API is that stand-in (stop `apple` when done).
    static func stand(
        answer: @escaping @Sendable (HTTPRequest) -> HTTPResponse
    ) async throws -> (apple: HTTPServer, server: PurchaseServer, storage: SQLiteServerStorage) {
        var router = Router()
        router.add("POST", "/inApps/v1/notifications/history", inline: { request, _ in answer(request) })
        let apple = try HTTPServer(port: 0, responder: router.freeze())
        let url = "http://127.0.0.1:\(apple.port)"
        let (server, storage) = try await FixtureServer.make(
            serverAPI: ServerAPISettings(
                keyID: "KEY1234567", issuerID: "issuer", privateKey: try PrivateKey.generateP256(), productionURL: url,
                sandboxURL: url))
        return (apple, server, storage)
    }

    /// A last page of the history holding one notification, signed by the fixtures' chain.
    static func page(of notification: JSONObject) throws -> JSONObject {
        [
            "notificationHistory": .array([.object(["signedPayload": .string(try JWSFixtures.sign(notification))])]),
            "hasMore": .bool(false),
        ]
    }

    static func json(_ object: JSONObject, status: Int = 200) -> HTTPResponse {
        HTTPResponse(
            status: status, headers: [("Content-Type", "application/json")], body: JSONWriter.bytes(.object(object)))
    }

    @Test("A notification of the history the server refuses is reported and passed over: the pass goes on and ends")
    func refusedNotification() async throws {
        // Both signed by a chain the server trusts: the first without the notificationUUID the server keys
        // notifications by (refused), the second a subscription it takes.
        let known = try JWSFixtures.notification()
        var unknown = known
        unknown["notificationUUID"] = nil
        let page: JSONObject = [
            "notificationHistory": .array([
                .object(["signedPayload": .string(try JWSFixtures.sign(unknown))]),
                .object(["signedPayload": .string(try JWSFixtures.sign(known))]),
            ]),
            "hasMore": .bool(false),
        ]
        let (apple, server, storage) = try await Self.stand { _ in Self.json(page) }
        defer { apple.stop() }
        let report = await server.reconcile()
        #expect(
            report.failures.contains { $0.contains("history: a notification refused") }, "\(report.failures)")
        #expect(report.notificationsRecovered == 1, "the one after it is read")
        // The pass went on to its end: the history's checkpoint is stored, the next pass starts after it.
        let checkpoint = try await storage.read {
            try $0.checkpoint("notification-history:\(JWSFixtures.bundleID):Sandbox")
        }
        #expect(checkpoint != nil)
    }

    @Test("A stored page token Apple refuses (expired) is dropped: the window is read again from its start")
    func expiredPageToken() async throws {
        let known = try JWSFixtures.notification()
        let page = try Self.page(of: known)
        let tokens = Mutex<[String?]>([])
        let (apple, server, storage) = try await Self.stand { request in
            let token = request.query["paginationToken"]
            tokens.withLock { $0.append(token) }
            guard token == nil else {
                return Self.json(
                    ["errorCode": .integer(4_000_017), "errorMessage": .string("Pagination token expired.")],
                    status: 400)
            }
            return Self.json(page)
        }
        defer { apple.stop() }
        // A pass cut short long ago left a page token behind.
        let key = "notification-history:\(JWSFixtures.bundleID):Sandbox"
        let start = Int64(Date().timeIntervalSince1970 * 1_000) - 3_600_000
        let stale = #"{"start":\#(start),"end":\#(start + 60_000),"paginationToken":"stale"}"#
        try await storage.write { try $0.setCheckpoint(key, stale) }
        let report = await server.reconcile()
        #expect(tokens.withLock { $0 } == ["stale", nil], "asked once with the token, then from the window's start")
        #expect(report.notificationsRecovered == 1, "\(report.failures)")
        #expect(report.failures.contains { $0.contains("page token was refused") }, "\(report.failures)")
        let checkpoint = try #require(try await storage.read { try $0.checkpoint(key) })
        #expect(!checkpoint.contains("paginationToken"), "the next pass starts a new window: \(checkpoint)")
        // The next pass does not ask with the refused token again.
        _ = await server.reconcile()
        #expect(!tokens.withLock { $0 }.dropFirst(2).contains("stale"))
    }

    @Test(
        "An overdue subscription Apple answers with an error is asked again an hour later, not every pass; Xcode's never"
    )
    func overdueWithoutAnswer() async throws {
        let asked = Mutex<[String]>([])
        var router = Router()
        router.add(
            "POST", "/inApps/v1/notifications/history",
            inline: { _, _ in
                Self.json(["notificationHistory": .array([]), "hasMore": .bool(false)])
            })
        router.add(
            "GET", "/inApps/v1/subscriptions/{id}",
            inline: { _, context in
                asked.withLock { $0.append((try? context.parameter("id")) ?? "?") }
                return Self.json(
                    ["errorCode": .integer(4_040_010), "errorMessage": .string("Transaction id not found.")],
                    status: 404)
            })
        let apple = try HTTPServer(port: 0, responder: router.freeze())
        defer { apple.stop() }
        let url = "http://127.0.0.1:\(apple.port)"
        let (server, storage) = try await FixtureServer.make(
            serverAPI: ServerAPISettings(
                keyID: "KEY1234567", issuerID: "issuer", privateKey: try PrivateKey.generateP256(), productionURL: url,
                sandboxURL: url))
        let expired = Int64(Date().timeIntervalSince1970 * 1_000) - 86_400_000
        for (id, environment) in [("1000000000000001", "Sandbox"), ("1000000000000002", "Xcode")] {
            let text = """
                {"originalTransactionID": "\(id)", "bundleID": "\(JWSFixtures.bundleID)",
                 "environment": "\(environment)", "productID": "monthly", "latestTransactionID": "\(id)",
                 "latestPurchaseDate": \(expired - 86_400_000), "expiresDate": \(expired), "status": 1,
                 "autoRenewStatus": true, "ownership": "PURCHASED", "transactionSignedDate": \(expired)}
                """
            let record = try SQLDocuments.decoder.decode(
                SubscriptionRecord.self, from: JSONParser.parse(Array(text.utf8)))
            try await storage.write { try $0.save(record) }
        }
        _ = await server.reconcile()
        _ = await server.reconcile()
        #expect(asked.withLock { $0 } == ["1000000000000001"], "asked once; the Xcode purchase never")
        let polled = try await storage.read { try $0.subscription("1000000000000001") }
        #expect(polled?.lastPolled != nil)
        #expect((polled?.reconciliationDue ?? .distantPast) > Date().addingTimeInterval(3_000), "an hour on")
    }

    @Test("The reconciler's retries take from the request budget too: with the budget spent, none is made")
    func retriesTakeFromTheBudget() async throws {
        let asked = Atomic<Int>(0)
        var router = Router()
        router.add(
            "POST", "/inApps/v1/notifications/history",
            inline: { _, _ in Self.json(["notificationHistory": .array([]), "hasMore": .bool(false)]) })
        // Apple fails without a body: an answer worth asking again.
        router.add(
            "GET", "/inApps/v1/subscriptions/{id}",
            inline: { _, _ in
                asked.add(1, ordering: .relaxed)
                return HTTPResponse(status: 500)
            })
        let apple = try HTTPServer(port: 0, responder: router.freeze())
        defer { apple.stop() }
        let url = "http://127.0.0.1:\(apple.port)"
        let app = AppSettings(
            bundleID: JWSFixtures.bundleID, appAppleID: JWSFixtures.appAppleID, environments: [.sandbox],
            publicKey: "pk_12345678", receiptRoots: [], jwsRoots: [JWSFixtures.chain.root],
            serverAPI: ServerAPISettings(
                keyID: "KEY1234567", issuerID: "issuer", privateKey: try PrivateKey.generateP256(), productionURL: url,
                sandboxURL: url))
        // One request a minute for each endpoint: a bucket of one.
        var configuration = ServerConfiguration(secretKey: "sk_0123456789abcdef", apps: [app])
        configuration.maxAPIRequestsPerHour = 60
        let storage = try await SQLiteServerStorage(
            path: try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path)
        let server = try PurchaseServer(configuration: configuration, storage: storage)
        let expired = Int64(Date().timeIntervalSince1970 * 1_000) - 86_400_000
        let text = """
            {"originalTransactionID": "1000000000000001", "bundleID": "\(JWSFixtures.bundleID)",
             "environment": "Sandbox", "productID": "monthly", "latestTransactionID": "1000000000000001",
             "latestPurchaseDate": \(expired - 86_400_000), "expiresDate": \(expired), "status": 1,
             "autoRenewStatus": true, "ownership": "PURCHASED", "transactionSignedDate": \(expired)}
            """
        let record = try SQLDocuments.decoder.decode(SubscriptionRecord.self, from: JSONParser.parse(Array(text.utf8)))
        try await storage.write { try $0.save(record) }
        _ = await server.reconcile()
        #expect(asked.load(ordering: .relaxed) == 1, "asked once: the budget had no request left for a retry")
    }

    @Test("An app's post waits at most a few seconds for Apple's answer about its subscription, and asks once")
    func postDoesNotWaitLong() async throws {
        let apple = try HangingApple()
        defer { apple.stop() }
        let (server, _) = try await FixtureServer.make(serverAPI: try apple.settings())
        let body: JSONObject = [
            "appUserId": .string("ivy"), "signedTransaction": .string(try JWSFixtures.sign(JWSFixtures.transaction())),
        ]
        let request = HTTPRequest(
            method: "POST", path: "/v1/transactions",
            headers: [("Content-Type", "application/json"), ("Authorization", "Bearer pk_12345678")],
            body: JSONWriter.bytes(.object(body)))
        let response = await server.responder().respond(to: request)
        #expect(response.status == 200, "\(String(decoding: response.body, as: UTF8.self))")
        // Answered while Apple still had not: the post gave up on it (one try), its own write stands.
        let released = apple.state.release.load(ordering: .relaxed)
        #expect(!released && apple.state.asked.withLock { $0.count } == 1)
    }

    @Test(
        "A receipt's post asks Apple about its three newest subscriptions at once, not each of many in turn"
    )
    func receiptAsksFewAtOnce() async throws {
        let apple = try HangingApple()
        defer { apple.stop() }
        let directory = try ExternalTool.temporaryDirectory()
        let pki = try EmulatorPKI.loadOrCreate(in: directory.appendingPathComponent("pki"))
        let (server, _) = try await FixtureServer.make(
            serverAPI: try apple.settings(), receiptRoots: [pki.receipts.root])
        // Eight subscriptions (each its own original), the eighth bought last; the sixth has an older renewal too.
        let now = Date()
        let day: TimeInterval = 86_400
        var purchases = (1...8).map { index in
            InAppPurchase(
                productID: "monthly\(index)", transactionID: "500000000000000\(index)",
                purchaseDate: now.addingTimeInterval(Double(index - 9) * day),
                originalTransactionID: "500000000000000\(index)", productTypeRaw: 3,
                expiresDate: now.addingTimeInterval(Double(index + 20) * day))
        }
        purchases[0].purchaseDate = now.addingTimeInterval(-60)  // the first renewed a minute ago
        let receipt = try Receipt(
            receiptType: "ProductionSandbox", bundleID: JWSFixtures.bundleID, appVersion: "1",
            opaqueValue: [1, 2, 3, 4], sha1Hash: Array(repeating: 0, count: 20), creationDate: now,
            originalPurchaseDate: now, originalAppVersion: "1", inAppPurchases: purchases
        ).signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
        let body: JSONObject = [
            "appUserId": .string("ivy"), "receipt": .string(Data(receipt).base64EncodedString()),
        ]
        let request = HTTPRequest(
            method: "POST", path: "/v1/receipts",
            headers: [("Content-Type", "application/json"), ("Authorization", "Bearer pk_12345678")],
            body: JSONWriter.bytes(.object(body)))
        let response = await server.responder().respond(to: request)
        #expect(response.status == 200, "\(String(decoding: response.body, as: UTF8.self))")
        let released = apple.state.release.load(ordering: .relaxed)
        #expect(!released)
        #expect(
            apple.state.asked.withLock { $0 }.sorted() == ["5000000000000001", "5000000000000007", "5000000000000008"],
            "the three bought last, once each")
        let together = apple.state.most.load(ordering: .sequentiallyConsistent)
        #expect(together == 3, "asked together")
    }

    @Test("A Sandbox checkpoint older than Apple's 30 days restarts inside them; Apple's 4000012 moves it on once")
    func windowAppleKeeps() async throws {
        let known = try JWSFixtures.notification()
        let page = try Self.page(of: known)
        let day: Int64 = 86_400_000
        let starts = Mutex<[Int64]>([])
        // A stand-in whose clock is a day and a half ahead of the server's: the server's first start (29 days
        // back on its own clock) is 30.5 days back on Apple's, refused; the next one, two days later, is taken.
        let (apple, server, storage) = try await Self.stand { request in
            let start = (try? JSONParser.parse(request.body))?["startDate"]?.int64Value ?? 0
            starts.withLock { $0.append(start) }
            let appleNow = Int64(Date().timeIntervalSince1970 * 1_000) + day * 3 / 2
            guard start >= appleNow - 30 * day else {
                return Self.json(
                    [
                        "errorCode": .integer(4_000_012),
                        "errorMessage": .string("Invalid request. Start date too far in the past."),
                    ],
                    status: 400)
            }
            return Self.json(page)
        }
        defer { apple.stop() }
        let key = "notification-history:\(JWSFixtures.bundleID):Sandbox"
        let now = Int64(Date().timeIntervalSince1970 * 1_000)
        try await storage.write {
            try $0.setCheckpoint(key, #"{"start":\#(now - 60 * day),"end":\#(now - 59 * day),"paginationToken":"p"}"#)
        }
        let report = await server.reconcile()
        let asked = starts.withLock { $0 }
        #expect(asked.count == 2, "\(asked)")
        #expect(abs(asked[0] - (now - 29 * day)) < 60_000, "the stored start of 60 days ago is not asked for")
        #expect(asked.count == 2 && asked[1] - asked[0] == 2 * day)
        #expect(report.notificationsRecovered == 1, "\(report.failures)")
        let checkpoint = try #require(try await storage.read { try $0.checkpoint(key) })
        #expect(!checkpoint.contains("paginationToken"), "the pass ended: \(checkpoint)")
        // When Apple refuses even the later start, the pass stops there, reported, without asking in a loop.
        let (always, refusing, refusingStorage) = try await Self.stand { _ in
            Self.json(["errorCode": .integer(4_000_012), "errorMessage": .string("too far")], status: 400)
        }
        defer { always.stop() }
        _ = refusingStorage
        let refused = await refusing.reconcile()
        #expect(refused.failures.contains { $0.contains("4000012") || $0.contains("too far") }, "\(refused.failures)")
    }
}

/// The order writes take their locks in (PostgreSQL's advisory locks; recorded by the in-memory storage): a
/// subscription's before a user's, so that two writes never wait for each other.
@Suite("Purchase server: lock order")
struct LockOrderTests {
    @Test("Making an alias takes the alias's subscriptions' locks before the users' (a post of one takes them so)")
    func aliasLocksSubscriptionsFirst() async throws {
        let storage = InMemoryServerStorage()
        let app = AppSettings(
            bundleID: JWSFixtures.bundleID, appAppleID: JWSFixtures.appAppleID, environments: [.sandbox],
            publicKey: "pk_12345678", receiptRoots: [], jwsRoots: [JWSFixtures.chain.root])
        let server = try PurchaseServer(
            configuration: ServerConfiguration(secretKey: "sk_0123456789abcdef", apps: [app]), storage: storage)
        let body: JSONObject = [
            "appUserId": .string("anon-7"),
            "signedTransaction": .string(try JWSFixtures.sign(JWSFixtures.transaction())),
        ]
        let post = HTTPRequest(
            method: "POST", path: "/v1/transactions",
            headers: [("Content-Type", "application/json"), ("Authorization", "Bearer pk_12345678")],
            body: JSONWriter.bytes(.object(body)))
        let posted = await server.responder().respond(to: post)
        #expect(posted.status == 200, "\(String(decoding: posted.body, as: UTF8.self))")
        let postLocks = try #require(storage.writeLocks.last { $0.contains { $0.hasPrefix("o:") } })
        _ = try await server.alias(bundleID: JWSFixtures.bundleID, appUserID: "user-42", alias: "anon-7")
        let locks = try #require(storage.writeLocks.last)
        let firstUser = try #require(locks.firstIndex { $0.hasPrefix("u:") })
        let subscriptions = Set(locks.filter { $0.hasPrefix("o:") })
        #expect(!subscriptions.isEmpty && subscriptions == Set(postLocks.filter { $0.hasPrefix("o:") }), "\(locks)")
        for key in subscriptions {
            #expect(try #require(locks.firstIndex(of: key)) < firstUser, "\(key) after a user's lock: \(locks)")
        }
    }
}

/// A stand-in for Get All Subscription Statuses that does not answer until stopped (at most a minute): it
/// records the ids it is asked about and the most asks it had in flight at once.
struct HangingApple {
    final class State: Sendable {
        let release = Atomic<Bool>(false)
        let asked = Mutex<[String]>([])
        let inFlight = Atomic<Int>(0)
        let most = Atomic<Int>(0)
    }

    let state = State()
    let server: HTTPServer

    init() throws {
        let state = self.state
        var router = Router()
        router.add("GET", "/inApps/v1/subscriptions/{id}") { _, context in
            state.asked.withLock { $0.append((try? context.parameter("id")) ?? "?") }
            let now = state.inFlight.add(1, ordering: .sequentiallyConsistent).newValue
            _ = state.most.max(now, ordering: .sequentiallyConsistent)
            defer { state.inFlight.subtract(1, ordering: .sequentiallyConsistent) }
            for _ in 0..<600 where !state.release.load(ordering: .relaxed) {
                try await Task.sleep(for: .milliseconds(100))
            }
            return HTTPResponse(status: 500)
        }
        server = try HTTPServer(port: 0, responder: router.freeze())
    }

    /// An API key for the stand-in, in both environments.
    func settings() throws -> ServerAPISettings {
        let url = "http://127.0.0.1:\(server.port)"
        return ServerAPISettings(
            keyID: "KEY1234567", issuerID: "issuer", privateKey: try PrivateKey.generateP256(), productionURL: url,
            sandboxURL: url)
    }

    func stop() {
        state.release.store(true, ordering: .relaxed)
        server.stop()
    }
}
