import Foundation
import PurchaseServer
import StoreModel
import StorekeeperJSON
import StorekeeperSQL
import StorekeeperTestSupport
import Synchronization
import Testing

/// One contract for every ``ServerStorage`` backend.
@Suite("Purchase server storage contract")
struct ServerStorageContractTests {
    enum Backend: String, CustomStringConvertible {
        case memory, sqlite, postgres
        var description: String { rawValue }
        /// Every backend this machine has (PostgreSQL when the test script started one).
        static let allCases: [Backend] = [.memory, .sqlite] + (PostgresTesting.url == nil ? [] : [.postgres])
        func make() async throws -> any ServerStorage {
            switch self {
            case .memory: InMemoryServerStorage()
            case .sqlite:
                try await SQLiteServerStorage(
                    path: try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path)
            case .postgres: try await PostgresServerStorage(url: try PostgresTesting.freshDatabase(), poolSize: 4)
            }
        }
    }

    @Test("PostgreSQL is among the backends", .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage))
    func postgresIsHere() async throws {
        #expect(Backend.allCases.contains(.postgres))
        let storage = try await Backend.postgres.make()
        #expect(storage.isShared)
    }

    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    final class Flag: Sendable {
        private let value = Mutex(false)
        func set() { value.withLock { $0 = true } }
        var isSet: Bool { value.withLock { $0 } }
    }

    static func purchase(_ id: String, original: String? = nil, owner: String?, kind: ProductKind = .consumable)
        -> PurchaseRecord
    {
        PurchaseRecord(
            transactionID: TransactionID(id), originalTransactionID: TransactionID(original ?? id), bundleID: "app",
            productID: "coins", kind: kind,
            quantity: 2, purchaseDate: start.addingTimeInterval(Double(id) ?? 0), environment: .sandbox,
            appAccountToken: "0f4b8f3e-0000-4000-8000-000000000001", signedDate: start, owner: owner)
    }

    /// A refunded free-trial period bought before `start`, expiring after it.
    static let period = PurchaseRecord(
        transactionID: "9", originalTransactionID: "9", bundleID: "app", productID: "monthly", kind: .autoRenewable,
        purchaseDate: start.addingTimeInterval(-100), expiresDate: start.addingTimeInterval(5), environment: .sandbox,
        revocationDate: start.addingTimeInterval(4), offerType: 1, offerDiscountType: "FREE_TRIAL", price: 0,
        currency: "EUR", signedDate: start, owner: "u3")

    @Test(
        "Retention answers: once per request, by date and by subscription; a cancellation marks those since",
        arguments: Backend.allCases)
    func retentionAnswers(backend: Backend) async throws {
        let storage = try await backend.make()
        @Sendable func answer(_ id: String, _ original: TransactionID, at offset: Double, bundle: BundleID = "app")
            -> RetentionAnswer
        {
            RetentionAnswer(
                requestIdentifier: id, bundleID: bundle, originalTransactionID: original, environment: .sandbox,
                date: Self.start.addingTimeInterval(offset), answer: "message", rule: offset > 5 ? "late" : nil)
        }
        let inserted = try await storage.write { store in
            [
                try store.insert(answer("r1", "100", at: 0)), try store.insert(answer("r2", "100", at: 10)),
                try store.insert(answer("r3", "200", at: 5)),
                try store.insert(answer("r4", "100", at: 20, bundle: "other")),
                try store.insert(answer("r1", "100", at: 30)),
            ]
        }
        #expect(inserted == [true, true, true, true, false], "a request is recorded once")
        try await storage.write {
            try $0.markRetentionCancelled(
                original: "100", since: Self.start.addingTimeInterval(5), until: Self.start.addingTimeInterval(15),
                at: Self.start.addingTimeInterval(15))
        }
        try await storage.read { store in
            let byDate = try store.retentionAnswers(
                bundle: "app", from: Self.start, to: Self.start.addingTimeInterval(11), limit: 10)
            #expect(byDate.map(\.requestIdentifier) == ["r1", "r3", "r2"])
            #expect(byDate.map(\.cancelled) == [nil, nil, Self.start.addingTimeInterval(15)], "only those since")
            #expect(byDate.last?.rule == "late" && byDate.first?.rule == nil && byDate.first?.environment == .sandbox)
            #expect(try store.retentionAnswers(bundle: "app", from: Self.start, to: Self.start, limit: 10).isEmpty)
            let latest = try store.retentionAnswers(original: "100", limit: 2)
            #expect(latest.map(\.requestIdentifier) == ["r2", "r4"], "the latest, oldest first")
            #expect(latest.map(\.cancelled) == [Self.start.addingTimeInterval(15), nil], "not one after it")
        }
    }

    @Test("A subscription's cancellations are found by date among its events", arguments: Backend.allCases)
    func cancellations(backend: Backend) async throws {
        let storage = try await backend.make()
        @Sendable func event(_ id: String, _ type: ServerEventType, _ original: TransactionID, at offset: Double)
            -> ServerEvent
        {
            ServerEvent(
                id: "\(type.rawValue):\(id)", type: type, bundleID: "app", appUserID: nil,
                date: Self.start.addingTimeInterval(offset), originalTransactionID: original, source: "notification")
        }
        try await storage.write { store in
            for item in [
                event("1", .cancellation, "100", at: 30), event("2", .cancellation, "100", at: 10),
                event("3", .uncancellation, "100", at: 5), event("4", .cancellation, "200", at: 6),
                event("5", .renewal, "100", at: 7),
            ] {
                _ = try store.append(item)
            }
        }
        try await storage.read { store in
            let found = try [(0.0, 40.0), (11, 40), (0, 9), (31, 40), (10, 10)].map { from, through in
                try store.cancellation(
                    original: "100", from: Self.start.addingTimeInterval(from),
                    through: Self.start.addingTimeInterval(through))
            }
            let expected: [Date?] = ([10, 30, nil, nil, 10] as [Double?]).map {
                $0.map { Self.start.addingTimeInterval($0) }
            }
            #expect(found == expected, "the earliest in the range, of that subscription, cancellations only")
            #expect(try store.cancellation(original: "300", from: Self.start, through: Self.start + 100) == nil)
        }
    }

    @Test("Records round-trip; owners, tokens and originals find them", arguments: Backend.allCases)
    func roundTrip(backend: Backend) async throws {
        let storage = try await backend.make()
        var subscriber = Subscriber(bundleID: "app", appUserID: "u1", firstSeen: Self.start)
        subscriber.appAccountTokens = ["0f4b8f3e-0000-4000-8000-000000000001"]
        subscriber.flags = ["multiple_apple_accounts"]
        let saved = subscriber
        try await storage.write { store in
            try store.save(saved)
            try store.save(Self.purchase("1", owner: "u1"))
            try store.save(Self.purchase("2", original: "1", owner: "u1"))
            try store.save(Self.purchase("3", owner: "u2"))
            try store.save(Self.period)
            // An original whose earliest transactions have no owner yet, and one with none at all.
            try store.save(Self.purchase("20", owner: nil))
            try store.save(Self.purchase("21", original: "20", owner: nil))
            try store.save(Self.purchase("23", original: "20", owner: "u5"))
            try store.save(Self.purchase("22", original: "20", owner: "u4"))
            try store.save(Self.purchase("30", owner: nil))
        }
        try await storage.read { (store: any ServerStore) throws in
            #expect(try store.subscriber(bundle: "app", appUserID: "u1") == saved)
            #expect(
                try store.subscriber(bundle: "app", appAccountToken: "0F4B8F3E-0000-4000-8000-000000000001")?.appUserID
                    == "u1")
            #expect(try store.subscriber(bundle: "other", appUserID: "u1") == nil)
            #expect(try store.purchase("1") == Self.purchase("1", owner: "u1"))
            #expect(try store.purchases(bundle: "app", owner: "u1").map(\.transactionID) == ["1", "2"])
            #expect(try store.purchases(original: "1").map(\.transactionID) == ["1", "2"])
            // The owner of the earliest transaction that has one.
            #expect(try store.firstOwner(original: "1") == "u1")
            #expect(try store.firstOwner(original: "20") == "u4")
            #expect(try store.firstOwner(original: "30") == nil)
            #expect(try store.firstOwner(original: "404") == nil)
            // What charts read: bought before `to`, last needed (expiry, refund, purchase) at or after `from`.
            func chart(_ from: Double, _ to: Double, limit: Int = 10) throws -> [Date] {
                try store.chartRecords(
                    bundle: "app", from: Self.start.addingTimeInterval(from), to: Self.start.addingTimeInterval(to),
                    limit: limit
                ).map(\.purchaseDate)
            }
            #expect(
                try chart(2, 10) == [
                    Self.start.addingTimeInterval(-100), Self.start.addingTimeInterval(2),
                    Self.start.addingTimeInterval(3),
                ])
            #expect(
                try chart(0, 10, limit: 2) == [Self.start.addingTimeInterval(-100), Self.start.addingTimeInterval(1)])
            #expect(try chart(6, 10) == [])
            let record = try #require(
                try store.chartRecords(bundle: "app", from: Self.start, to: Self.start.addingTimeInterval(1), limit: 1)
                    .first)
            #expect(record == SubscriptionCharts.Record(Self.period))
            #expect(
                try store.chartRecords(
                    bundle: "other", from: Self.start, to: Self.start.addingTimeInterval(10), limit: 9
                )
                .isEmpty)
        }
    }

    @Test(
        "Shared storage names the users changed since the last asking, a transaction still running at it included",
        arguments: Backend.allCases)
    func subscriberChanges(backend: Backend) async throws {
        let storage = try await backend.make()
        guard storage.isShared else {
            #expect(try await storage.subscriberChanges(since: nil) == nil)
            return
        }
        try await storage.write { store in
            for user in ["u1", "u2", "u3"] {
                try store.save(Subscriber(bundleID: "app", appUserID: user, firstSeen: Self.start))
            }
        }
        let first = try #require(try await storage.subscriberChanges(since: nil))
        #expect(first.users.isEmpty && first.complete)
        try await storage.write { store in try store.touch(bundle: "app", appUserID: "u1") }
        let second = try #require(try await storage.subscriberChanges(since: first.watermark))
        #expect(second.users == [.init(bundleID: "app", appUserID: "u1")])
        // A write still running when another asking is made: not in that answer (not committed), in the next.
        let entered = Flag()
        let release = DispatchSemaphore(value: 0)
        let running = Task {
            try await storage.write { store in
                try store.touch(bundle: "app", appUserID: "u2")
                entered.set()
                release.wait()  // on the storage's own connection thread
            }
        }
        while !entered.isSet { try await Task.sleep(for: .milliseconds(1)) }
        // A later transaction commits first: the answer covers it without passing the one still running.
        try await storage.write { store in try store.touch(bundle: "app", appUserID: "u3") }
        let third = try #require(try await storage.subscriberChanges(since: second.watermark))
        #expect(!third.users.contains(.init(bundleID: "app", appUserID: "u2")))
        #expect(third.users.contains(.init(bundleID: "app", appUserID: "u3")))
        release.signal()
        try await running.value
        let fourth = try #require(try await storage.subscriberChanges(since: third.watermark))
        #expect(fourth.users.contains(.init(bundleID: "app", appUserID: "u2")))
    }

    @Test(
        "Shared storage keeps readers' leases: each asking says what the other live readers applied",
        arguments: Backend.allCases)
    func cacheReaderLeases(backend: Backend) async throws {
        let storage = try await backend.make()
        func ask(_ reader: String, _ applied: Int64?, lease: Duration = .seconds(60)) async throws
            -> SubscriberChanges?
        {
            try await storage.subscriberChanges(
                since: nil, reporting: CacheReaderReport(reader: reader, applied: applied, lease: lease))
        }
        guard storage.isShared else {
            #expect(try await ask("a", nil) == nil)
            return
        }
        let a1 = try #require(try await ask("a", nil))
        let asked = try #require(a1.askedAt)
        #expect(a1.othersApplied == nil)  // no other reader
        // A reader that has applied nothing yet holds others back to nothing.
        let b1 = try #require(try await ask("b", nil))
        #expect(b1.othersApplied == 0)
        #expect(try #require(b1.askedAt) >= asked)
        let a2 = try #require(try await ask("a", asked))
        #expect(a2.othersApplied == 0)
        let b2 = try #require(try await ask("b", b1.askedAt))
        #expect(b2.othersApplied == asked)
        #expect(try #require(try await ask("a", a2.askedAt)).othersApplied == b1.askedAt)
        // A reader that gives its lease back, or whose lease ran out, is waited for no more.
        _ = try await ask("b", b2.askedAt, lease: .zero)
        #expect(try #require(try await ask("a", a2.askedAt)).othersApplied == nil)
        _ = try await ask("c", nil, lease: .milliseconds(1))
        try await Task.sleep(for: .milliseconds(20))
        #expect(try #require(try await ask("a", a2.askedAt)).othersApplied == nil)
        // An asking whose answer was lost (the reader reports again what it applied before) does not renew the
        // lease: a reader that never gets its answers is not waited for once its lease ends.
        let d1 = try #require(try await ask("d", nil, lease: .milliseconds(300)))
        #expect(d1.leaseRenewed)
        let d2 = try #require(try await ask("d", d1.askedAt, lease: .milliseconds(300)))
        #expect(d2.leaseRenewed)
        let lost = try #require(try await ask("d", d2.askedAt, lease: .milliseconds(300)))  // never applied
        #expect(lost.leaseRenewed)
        for _ in 0..<3 {
            #expect(try #require(try await ask("d", d2.askedAt, lease: .seconds(60))).leaseRenewed == false)
        }
        try await Task.sleep(for: .milliseconds(400))
        #expect(try #require(try await ask("a", a2.askedAt)).othersApplied == nil)
        // Once it applies the last asking that ran for it, it is renewed again (and waited for).
        let last = try #require(try await ask("d", d2.askedAt, lease: .seconds(60)))
        #expect(!last.leaseRenewed)
        let back = try #require(try await ask("d", last.askedAt, lease: .seconds(60)))
        #expect(back.leaseRenewed)
        #expect(try #require(try await ask("a", a2.askedAt)).othersApplied == last.askedAt)
        // The answer is the changes' answer too.
        try await storage.write { store in
            try store.save(Subscriber(bundleID: "app", appUserID: "u1", firstSeen: Self.start))
            try store.touch(bundle: "app", appUserID: "u1")
        }
        let changed = try #require(
            try await storage.subscriberChanges(
                since: a1.watermark, reporting: CacheReaderReport(reader: "a", applied: nil, lease: .seconds(60))))
        #expect(changed.users == [.init(bundleID: "app", appUserID: "u1")])
    }

    @Test(
        "A user's records read together equal those read one by one, through an alias too; touches count changes",
        arguments: Backend.allCases)
    func subscriberRecords(backend: Backend) async throws {
        let storage = try await backend.make()
        let grant = try JSONDecoder().decode(
            Grant.self, from: Data(#"{"entitlement":"plus","grantedAt":100,"expiresDate":900}"#.utf8))
        try await storage.write { store in
            for user in ["u1", "u2"] {
                try store.save(Subscriber(bundleID: "app", appUserID: user, firstSeen: Self.start))
            }
            try store.save(Self.purchase("3", owner: "u1"))
            try store.save(Self.purchase("1", owner: "u1"))
            try store.save(Self.purchase("2", owner: "u2"))
            try store.save(Self.period)
            for id in ["1", "3"] {
                _ = try store.append(
                    LedgerEntry(
                        transactionID: TransactionID(id), productID: "coins", quantity: 2, reason: .purchase,
                        date: Self.start))
            }
            try store.save(grant, bundle: "app", owner: "u1")
            try store.saveAlias(bundle: "app", alias: "old-u1", user: "u1")
        }
        let together = try await storage.readStatement { try $0.subscriberRecords(bundle: "app", appUserID: "u1") }
        let apart = try await storage.read { try $0.subscriberRecordsOneByOne(bundle: "app", appUserID: "u1") }
        let records = try #require(together)
        #expect(together == apart)
        #expect(records.purchases.map(\.transactionID) == ["1", "3"])
        #expect(records.balances == ["coins": 4])
        #expect(records.grants == [grant])
        #expect(records.subscriptions.isEmpty)
        #expect(records.version == 0)
        // Through the alias: the same user's records.
        #expect(
            try await storage.readStatement { try $0.subscriberRecords(bundle: "app", appUserID: "old-u1") } == together
        )
        #expect(try await storage.readStatement { try $0.subscriberRecords(bundle: "app", appUserID: "nobody") } == nil)
        #expect(try await storage.readStatement { try $0.subscriberRecords(bundle: "other", appUserID: "u1") } == nil)
        // A touch moves one user's version, and nobody else's; a user who does not exist has none.
        try await storage.write { store in
            try store.touch(bundle: "app", appUserID: "u1")
            try store.touch(bundle: "app", appUserID: "u1")
            try store.touch(bundle: "app", appUserID: "nobody")
        }
        #expect(try await storage.readStatement { try $0.version(bundle: "app", appUserID: "u1") } == 2)
        #expect(try await storage.readStatement { try $0.version(bundle: "app", appUserID: "u2") } == 0)
        #expect(try await storage.readStatement { try $0.version(bundle: "app", appUserID: "nobody") } == nil)
        #expect(
            try await storage.readStatement { try $0.subscriberRecords(bundle: "app", appUserID: "u1") }?.version == 2)
        // Saving the subscriber again keeps its count.
        try await storage.write { store in
            try store.save(Subscriber(bundleID: "app", appUserID: "u1", firstSeen: Self.start))
        }
        #expect(try await storage.readStatement { try $0.version(bundle: "app", appUserID: "u1") } == 2)
    }

    @Test(
        "The ledger keeps one entry per transaction and reason (a refund's and a reversal's at their dates); balances follow ownership",
        arguments: Backend.allCases)
    func ledger(backend: Backend) async throws {
        let storage = try await backend.make()
        let added = try await storage.write { store -> [Bool] in
            try store.save(Self.purchase("1", owner: "u1"))
            let credit = LedgerEntry(
                transactionID: "1", productID: "coins", quantity: 2, reason: .purchase, date: Self.start)
            let debit = LedgerEntry(
                transactionID: "1", productID: "coins", quantity: -2, reason: .refund, date: Self.start)
            return [try store.append(credit), try store.append(credit), try store.append(debit)]
        }
        #expect(added == [true, false, true])
        #expect(try await storage.read { try $0.balances(bundle: "app", owner: "u1") } == ["coins": 0])
        // Reversed, then refunded again: each at its own date is its own entry; told twice, one.
        let cycle = try await storage.write { store -> [Bool] in
            let reversal = LedgerEntry(
                transactionID: "1", productID: "coins", quantity: 2, reason: .refundReversed,
                date: Self.start.addingTimeInterval(60))
            let again = LedgerEntry(
                transactionID: "1", productID: "coins", quantity: -2, reason: .refund,
                date: Self.start.addingTimeInterval(120))
            return [try store.append(reversal), try store.append(again), try store.append(again)]
        }
        #expect(cycle == [true, true, false])
        #expect(try await storage.read { try $0.balances(bundle: "app", owner: "u1") } == ["coins": 0], "2 - 2 + 2 - 2")
        try await storage.write { store in
            var moved = Self.purchase("1", owner: "u2")
            moved.owner = "u2"
            try store.save(moved)
        }
        #expect(try await storage.read { try $0.balances(bundle: "app", owner: "u1") }.isEmpty)
    }

    @Test(
        "Events are unique by id and found by owner or by the purchases the owner owns now", arguments: Backend.allCases
    )
    func events(backend: Backend) async throws {
        let storage = try await backend.make()
        let appended = try await storage.write { store -> [Bool] in
            try store.save(Self.purchase("9", owner: "u1"))
            let mine = ServerEvent(
                id: "a", type: "RENEWAL", bundleID: "app", appUserID: "u1", date: Self.start, source: "app")
            let ownerless = ServerEvent(
                id: "b", type: "REFUND", bundleID: "app", appUserID: nil, date: Self.start, originalTransactionID: "9",
                source: "notification")
            let other = ServerEvent(
                id: "c", type: "RENEWAL", bundleID: "app", appUserID: "u2", date: Self.start, source: "app")
            return [
                try store.append(mine), try store.append(mine), try store.append(ownerless), try store.append(other),
            ]
        }
        #expect(appended == [true, false, true, true])
        let events = try await storage.read { try $0.events(bundle: "app", owner: "u1", after: nil, limit: 10) }
        #expect(events.map(\.event.id) == ["a", "b"])
        let after = try await storage.read {
            try $0.events(bundle: "app", owner: "u1", after: events[0].position, limit: 10)
        }
        #expect(after.map(\.event.id) == ["b"])
        // An ownerless event goes to the user who claims its purchase, once.
        let claimed = try await storage.write { store in
            [
                try store.claimOwnerlessEvents(original: "9", owner: "u3"),
                try store.claimOwnerlessEvents(original: "9", owner: "u4"),
            ]
        }
        #expect(claimed.map { $0.map(\.appUserID) } == [["u3"], []])
    }

    @Test(
        "An event appended for the answer alone counts 1 when new and 0 when known, once the write commits",
        arguments: Backend.allCases)
    func eventsAppendedLater(backend: Backend) async throws {
        let storage = try await backend.make()
        @Sendable func event(_ id: String) -> ServerEvent {
            ServerEvent(
                id: id, type: "RENEWAL", bundleID: "app", appUserID: nil, date: Self.start, originalTransactionID: "9",
                source: "notification")
        }
        #expect(try await storage.write { try $0.append(event("known")) })
        let (counts, inside) = try await storage.write { store -> ([DeferredCount], [Int?]) in
            let counts = [
                try store.appendLater(event("new")), try store.appendLater(event("new")),
                try store.appendLater(event("known")),
            ]
            return (counts, counts.map(\.value))
        }
        #expect(counts.map(\.value) == [1, 0, 0])
        // On PostgreSQL the inserts went with the commit: nothing was known inside the write.
        if backend == .postgres { #expect(inside == [nil, nil, nil]) }
        let stored = try await storage.read { try $0.events(bundle: "app", owner: "u1", after: nil, limit: 10) }
        #expect(stored.isEmpty, "owned by nobody yet")
        let all = try await storage.write { try $0.claimOwnerlessEvents(original: "9", owner: "u1") }
        #expect(all.map(\.id).sorted() == ["known", "new"])
    }

    @Test(
        "SQLite: purchases stored before the chart columns existed get them when the database is opened",
        .enabled(if: ExternalTool.find("sqlite3") != nil, "needs the sqlite3 command"))
    func chartColumnsBackfill() async throws {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path
        let storage = try await SQLiteServerStorage(path: path)
        try await storage.write { store in
            for index in 0..<7 { try store.save(Self.purchase(String(index + 1), owner: "u1")) }
            try store.save(Self.period)
        }
        // As a database written by the previous build has them: no chart columns filled in.
        let sqlite = try #require(ExternalTool.find("sqlite3"))
        let cleared = try ExternalTool.run(
            sqlite, [path, "UPDATE purchases SET product_id = NULL, kind = NULL, last_date = NULL, trial = NULL"])
        #expect(cleared.status == 0, "\(cleared.stderrText)")
        let reopened = try await SQLiteServerStorage(path: path)
        let records = try await reopened.read { store in
            try store.chartRecords(bundle: "app", from: .distantPast, to: .distantFuture, limit: 100)
        }
        #expect(records.count == 8)
        #expect(records.first == SubscriptionCharts.Record(Self.period))
    }

    @Test(
        "Inputs come back byte for byte: V2 notifications kept compact, anything else whole",
        arguments: Backend.allCases)
    func inputsAsReceived(backend: Backend) async throws {
        let storage = try await backend.make()
        let signed = try JWSFixtures.sign(try JWSFixtures.notification())
        let notification = Array(#"{"signedPayload":"\#(signed)"}"#.utf8)
        let spaced = Array(#"{ "signedPayload": "\#(signed)" }"#.utf8)
        // A payload holding the marker the compact form uses cannot be kept compact.
        let marked = Array(
            #"{"signedPayload":"\#(try JWSFixtures.sign(["note": .string("\"~.\(signed)")]))"}"#.utf8)
        let inputs: [(key: String, kind: String, body: [UInt8])] = [
            ("n:1", "notification-v2", notification), ("n:2", "notification-v2", notification),
            ("n:3", "notification-v2", spaced), ("n:4", "notification-v2", marked),
            ("n:5", "notification-v2", Array("~not json".utf8)), ("r:1", "receipt", Array(signed.utf8)),
            ("n:6", "notification-v2", Array(#"{"signedPayload":"a.b"}"#.utf8)),
        ]
        let kept = try await storage.write { store in
            try inputs.map { try store.recordInput(key: $0.key, kind: $0.kind, body: $0.body, received: Self.start) }
        }
        #expect(kept.allSatisfy { $0 })
        for input in inputs {
            let read = try await storage.read { try $0.input(key: input.key) }
            #expect(read == input.body, "\(backend) \(input.key)")
        }
        #expect(try await storage.read { try $0.input(key: "none") } == nil)
        #expect(try await storage.read { try $0.inputCount() } == inputs.count)
    }

    @Test("Inputs are kept once; deliveries are due in order and updated", arguments: Backend.allCases)
    func inputsAndDeliveries(backend: Backend) async throws {
        let storage = try await backend.make()
        let kept = try await storage.write { store -> [Bool] in
            [
                try store.recordInput(key: "n:1", kind: "notification", body: [1], received: Self.start),
                try store.recordInput(key: "n:1", kind: "notification", body: [1], received: Self.start),
            ]
        }
        #expect(kept == [true, false])
        var first = WebhookDelivery(
            id: "e1@x", eventID: "e1", eventType: "RENEWAL", bundleID: "app", url: "http://x", body: "{}",
            created: Self.start)
        let second = WebhookDelivery(
            id: "e2@x", eventID: "e2", eventType: "RENEWAL", bundleID: "app", url: "http://x", body: "{}",
            created: Self.start.addingTimeInterval(5))
        let pending = first
        let inserted = try await storage.write { store in
            [try store.insert(pending), try store.insert(second), try store.insert(pending)]
        }
        #expect(inserted == [true, true, false])
        #expect(try await storage.read { try $0.dueDeliveries(until: Self.start, limit: 10) }.map(\.id) == ["e1@x"])
        first.state = .delivered
        first.nextAttempt = nil
        let delivered = first
        try await storage.write { try $0.update(delivered) }
        try await storage.read { (store: any ServerStore) throws in
            #expect(try store.dueDeliveries(until: Self.start.addingTimeInterval(10), limit: 10).map(\.id) == ["e2@x"])
            #expect(try store.nextDeliveryDue() == Self.start.addingTimeInterval(5))
            #expect(try store.pendingDeliveryCount() == 1)
            #expect(try store.deliveries(after: nil, limit: 10).map(\.delivery.state) == [.delivered, .pending])
            #expect(try store.latestDeliveries(limit: 10).map(\.id) == ["e2@x", "e1@x"])
            #expect(try store.latestDeliveries(limit: 1).map(\.id) == ["e2@x"])
        }
    }

    @Test("A write that throws leaves nothing behind", arguments: Backend.allCases)
    func rollback(backend: Backend) async throws {
        let storage = try await backend.make()
        struct Boom: Error {}
        await #expect(throws: Boom.self) {
            try await storage.write { store in
                try store.save(Self.purchase("1", owner: "u1"))
                _ = try store.recordInput(key: "k", kind: "x", body: [], received: Self.start)
                throw Boom()
            }
        }
        try await storage.read { (store: any ServerStore) throws in
            #expect(try store.purchase("1") == nil)
            #expect(try store.inputCount() == 0)
        }
    }

    @Test("A claimed delivery is not due again until its lease ends", arguments: Backend.allCases)
    func claims(backend: Backend) async throws {
        let storage = try await backend.make()
        let deliveries = (1...5).map {
            WebhookDelivery(
                id: "e\($0)@x", eventID: "e\($0)", eventType: "RENEWAL", bundleID: "app", url: "http://x", body: "{}",
                created: Self.start.addingTimeInterval(Double($0)))
        }
        _ = try await storage.write { store in try deliveries.map { try store.insert($0) } }
        let now = Self.start.addingTimeInterval(10)
        let lease = now.addingTimeInterval(60)
        let first = try await storage.claimDueDeliveries(until: now, lease: lease, limit: 3)
        let second = try await storage.claimDueDeliveries(until: now, lease: lease, limit: 3)
        let third = try await storage.claimDueDeliveries(until: now, lease: lease, limit: 3)
        #expect(first.map(\.id) == ["e1@x", "e2@x", "e3@x"])
        #expect(second.map(\.id) == ["e4@x", "e5@x"])
        #expect(third.isEmpty)
        // After the lease, a process that died is replaced: they are due again.
        let again = try await storage.claimDueDeliveries(until: lease, lease: lease.addingTimeInterval(60), limit: 10)
        #expect(Set(again.map(\.id)) == Set(deliveries.map(\.id)))
        // An attempt is recorded only by the claim that holds the delivery now: the first claim, its lease
        // over, records nothing; the second does.
        let sent = {
            var sent = deliveries[0]
            sent.state = .delivered
            sent.attempts = [.init(date: lease, status: 200, error: nil)]
            return sent
        }()
        #expect(try await storage.write { try $0.recordAttempt(sent, claimedUntil: lease) } == false)
        #expect(try await storage.read { try $0.deliveries(after: nil, limit: 10) }.first?.delivery.state == .pending)
        #expect(try await storage.write { try $0.recordAttempt(sent, claimedUntil: lease.addingTimeInterval(60)) })
        #expect(
            try await storage.read { try $0.deliveries(after: nil, limit: 10) }.first?.delivery.state == .delivered)
    }

    @Test("Concurrent claims never hand out one delivery twice", arguments: Backend.allCases)
    func concurrentClaims(backend: Backend) async throws {
        let storage = try await backend.make()
        let deliveries = (1...200).map {
            WebhookDelivery(
                id: "e\($0)@x", eventID: "e\($0)", eventType: "RENEWAL", bundleID: "app", url: "http://x", body: "{}",
                created: Self.start)
        }
        _ = try await storage.write { store in try deliveries.map { try store.insert($0) } }
        let lease = Self.start.addingTimeInterval(600)
        let claimed = try await withThrowingTaskGroup(of: [String].self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var mine: [String] = []
                    while true {
                        let batch = try await storage.claimDueDeliveries(until: Self.start, lease: lease, limit: 7)
                        if batch.isEmpty { return mine }
                        mine += batch.map(\.id)
                    }
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(claimed.count == 200)
        #expect(Set(claimed).count == 200)
    }

    @Test("A request budget refills at its rate and can be emptied until a date", arguments: Backend.allCases)
    func budgets(backend: Backend) async throws {
        let storage = try await backend.make()
        var taken = 0
        for _ in 0..<10 where try await storage.takeRequest(from: "k", rate: 1, burst: 3, now: Self.start) {
            taken += 1
        }
        #expect(taken == 3)
        #expect(try await storage.takeRequest(from: "k", rate: 1, burst: 3, now: Self.start.addingTimeInterval(1.5)))
        #expect(try await !storage.takeRequest(from: "k", rate: 1, burst: 3, now: Self.start.addingTimeInterval(1.6)))
        try await storage.blockRequests(to: "k", until: Self.start.addingTimeInterval(100))
        #expect(try await !storage.takeRequest(from: "k", rate: 1, burst: 3, now: Self.start.addingTimeInterval(50)))
        #expect(try await storage.takeRequest(from: "k", rate: 1, burst: 3, now: Self.start.addingTimeInterval(102)))
        // Another budget is its own.
        #expect(try await storage.takeRequest(from: "other", rate: 1, burst: 3, now: Self.start))
        // A taker whose clock read is older than the last take's (it waited for a connection while another
        // took) takes what is left, without a refill, and the budget's time does not go back.
        let late = Self.start.addingTimeInterval(10)
        let earlier = Self.start.addingTimeInterval(5)
        let order = [(late, true), (earlier, true), (earlier, true), (late, false)]
        for (index, (time, expected)) in order.enumerated() {
            let took = try await storage.takeRequest(from: "behind", rate: 1, burst: 3, now: time)
            #expect(took == expected, "take \(index)")
        }
    }

    @Test("Checkpoints are listed by key prefix, in key order, up to a limit, and removed", arguments: Backend.allCases)
    func checkpointsByPrefix(backend: Backend) async throws {
        let storage = try await backend.make()
        try await storage.write { store in
            for key in ["p:b", "p:a", "p:c", "q:a", "p", "xp:a"] { try store.setCheckpoint(key, "v" + key) }
        }
        try await storage.read { (store: any ServerStore) throws in
            #expect(try store.checkpoints(prefix: "p:", limit: 10).map(\.key) == ["p:a", "p:b", "p:c"])
            #expect(try store.checkpoints(prefix: "p:", limit: 2).map(\.value) == ["vp:a", "vp:b"])
            #expect(try store.checkpoints(prefix: "z", limit: 10).isEmpty)
        }
        try await storage.write { try $0.removeCheckpoint("p:b") }
        try await storage.read { (store: any ServerStore) throws in
            #expect(try store.checkpoints(prefix: "p:", limit: 10).map(\.key) == ["p:a", "p:c"])
            #expect(try store.checkpoint("p:b") == nil && store.checkpoint("q:a") == "vq:a")
        }
    }

    @Test("Concurrent writes holding one lock are applied one after the other", arguments: Backend.allCases)
    func noLostUpdate(backend: Backend) async throws {
        let storage = try await backend.make()
        try await storage.write { try $0.save(Subscriber(bundleID: "app", appUserID: "u1", firstSeen: Self.start)) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<40 {
                group.addTask {
                    try await storage.write { store in
                        try store.lock(user: "u1", bundle: "app")
                        struct Missing: Error {}
                        guard var subscriber = try store.subscriber(bundle: "app", appUserID: "u1") else {
                            throw Missing()
                        }
                        subscriber.flags.append("f\(index)")
                        try store.save(subscriber)
                    }
                }
            }
            try await group.waitForAll()
        }
        let flags = try await storage.read { try $0.subscriber(bundle: "app", appUserID: "u1")?.flags ?? [] }
        #expect(Set(flags) == Set((0..<40).map { "f\($0)" }))
    }
}
