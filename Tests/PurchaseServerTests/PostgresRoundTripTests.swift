import Dispatch
import Foundation
import StoreModel
import StorekeeperPostgres
import StorekeeperSQL
import StorekeeperTestSupport
import Synchronization
import Testing

@testable import PurchaseServer

/// What a notification's write costs in waits for PostgreSQL (issue 34: at most a few round trips, not one
/// per statement).
@Suite(
    "PostgreSQL: a notification's write in few round trips",
    .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage))
struct PostgresRoundTripTests {
    @Test(
        "A new subscription's renewal: its lock, input and reads, then its writes with COMMIT: two round trips"
    )
    func notificationWrite() async throws {
        let (storage, server) = try await Self.server(poolSize: 1)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        func renewal(_ id: String, original: String) -> PurchaseUpdate {
            var record = PurchaseRecord(
                transactionID: TransactionID(id), originalTransactionID: TransactionID(original), bundleID: "app",
                productID: "monthly", kind: .autoRenewable, purchaseDate: now,
                expiresDate: now.addingTimeInterval(86_400),
                environment: .sandbox, signedDate: now)
            record.appAccountToken = "0f4b8f3e-0000-4000-8000-00000000000" + String(id.suffix(1))
            return PurchaseUpdate(source: .notification, transaction: record, notice: .v2(.didRenew, nil))
        }
        // As a V2 notification is ingested: what applying it reads goes with the input's insert.
        func ingest(_ update: PurchaseUpdate, key: String) async throws -> (trips: Int, events: Int) {
            let before = storage.roundTrips
            let raw = RawInput(key: key, kind: "notification-v2", body: Array("{}".utf8))
            let result = try await server.write(raw: raw, ahead: .init(update, bundleID: "app"), viewFollows: false) {
                store in
                try server.apply(update, bundleID: "app", claimant: nil, in: store, now: now)
            }
            return (storage.roundTrips - before, result.events.count)
        }
        // Statements are prepared on a connection's first use of them; count from the second notification.
        _ = try await ingest(renewal("1", original: "1"), key: "notification:1")
        // The follower asks on its own while it holds a lease; without one it asks only for those waiting.
        await server.leave()
        // Two round trips in the write: its lock, the input's insert and every read; its writes with COMMIT
        // (whether its events are new is read from their inserts' answers then: no user owns the subscription
        // yet, so nothing else in the write depends on it). It changed no user's answers, so no process has
        // anything of it to drop: no asking follows (a write that changes a user's is acknowledged after one:
        // ClusterTests).
        let second = try await ingest(renewal("2", original: "2"), key: "notification:2")
        #expect(second.events > 0, "the renewal was applied")
        #expect(second.trips == 2, "round trips: \(second.trips)")
        // The same again is a duplicate: the input's insert finds it, nothing more runs.
        let duplicate = try await ingest(renewal("2", original: "2"), key: "notification:2")
        #expect(duplicate.events == 0)
        #expect(duplicate.trips == 2, "round trips: \(duplicate.trips)")
        // The same renewal in another input (Apple's notification and a poll of the Server API both tell it):
        // applied again, its event is known, and the answer counts none.
        let again = try await ingest(renewal("2", original: "2"), key: "notification:2-again")
        #expect(again.events == 0, "the renewal's event was recorded before")
        #expect(again.trips == 2, "round trips: \(again.trips)")
        // What was read ahead is what the write used: the stored subscription is the renewal's.
        let stored = try await storage.read { try $0.subscription(TransactionID("2")) }
        #expect(stored?.owner == nil && stored?.originalTransactionID == TransactionID("2"))
    }

    /// A server of one app on a fresh PostgreSQL database.
    private static func server(poolSize: Int, url: String? = nil, gathering: GroupGathering? = nil) async throws -> (
        PostgresServerStorage, PurchaseServer
    ) {
        let url = try url ?? PostgresTesting.freshDatabase()
        let storage =
            if let gathering {
                try await PostgresServerStorage(
                    url: url, poolSize: poolSize, replayingHistory: false, gathering: gathering)
            } else {
                try await PostgresServerStorage(url: url, poolSize: poolSize)
            }
        let server = try PurchaseServer(
            configuration: ServerConfiguration(
                secretKey: "sk_round_trips_0123",
                apps: [
                    AppSettings(
                        bundleID: "app", publicKey: "pk_round_trips", receiptRoots: [], jwsRoots: [],
                        entitlements: ["plus": ["monthly"]])
                ]),
            storage: storage)
        return (storage, server)
    }

    /// A server with one group runner (a pool of two), not holding a lease (it asks only for writes waiting).
    private static func groupedServer(url: String? = nil, gathering: GroupGathering? = nil) async throws -> (
        PostgresServerStorage, PurchaseServer
    ) {
        let (storage, server) = try await server(poolSize: 2, url: url, gathering: gathering)
        await server.leave()
        return (storage, server)
    }

    private static let now = Date(timeIntervalSince1970: 1_800_000_000)

    private static func renewal(_ id: Int, original: Int, token: String? = nil) -> PurchaseUpdate {
        var record = PurchaseRecord(
            transactionID: TransactionID(String(id)), originalTransactionID: TransactionID(String(original)),
            bundleID: "app", productID: "monthly", kind: .autoRenewable, purchaseDate: now,
            expiresDate: now.addingTimeInterval(86_400), environment: .sandbox, signedDate: now)
        record.appAccountToken = token
        return PurchaseUpdate(source: .notification, transaction: record, notice: .v2(.didRenew, nil))
    }

    /// Ingests `update` as a V2 notification is, `hold` run first in its write (on the write's thread).
    private static func ingest(
        _ update: PurchaseUpdate, key: String, server: PurchaseServer, fail: Bool = false,
        hold: @escaping @Sendable () -> Void = {}
    ) async throws -> PurchaseServer.Ingested {
        let raw = RawInput(key: key, kind: "notification-v2", body: Array("{}".utf8))
        return try await server.write(raw: raw, ahead: .init(update, bundleID: "app"), viewFollows: false) { store in
            hold()
            let events = try server.apply(update, bundleID: "app", claimant: nil, in: store, now: now)
            if fail { throw PurchaseServerError.invalid("this write fails after its writes were sent") }
            return events
        }
    }

    /// Starts a write that holds the only group runner until `release` is signalled, and waits until `count`
    /// more writes wait behind it.
    private static func holdRunner<R: Sendable>(
        _ storage: PostgresServerStorage, _ server: PurchaseServer, until count: Int,
        then writes: @escaping @Sendable () async throws -> R
    ) async throws -> R {
        let (started, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let held = Task {
            try await ingest(renewal(9_000, original: 9_000), key: "notification:hold", server: server) {
                started.signal()
                release.wait()
            }
        }
        // The held write's body runs on the only runner; the others then queue behind it. A write that never
        // comes fails the test (after a minute) rather than hanging it.
        let others: Task<R, any Error>
        do {
            try await waitUntil("the held write to start") { started.wait(timeout: .now()) == .success }
            others = Task { try await writes() }
            try await waitUntil("\(count) writes to wait") { storage.waitingWrites >= count }
        } catch {
            release.signal()
            throw error
        }
        release.signal()
        _ = try await held.value
        return try await others.value
    }

    /// Waits until `condition` holds, checking every 5 ms; throws after a minute (a test that would hang fails).
    private static func waitUntil(_ what: String, _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while try !condition() {
            guard ContinuousClock.now < deadline else {
                throw PurchaseServerError.invalid("waited a minute for \(what)")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test(
        "A write outside the groups (a V1 notification's) holding a subscription's lock holds back the group that needs it; then both apply"
    )
    func groupWaitsForALock() async throws {
        let url = try PostgresTesting.freshDatabase()
        let (storage, server) = try await Self.groupedServer(url: url)
        _ = try await Self.ingest(Self.renewal(1, original: 1), key: "notification:first", server: server)
        // The V1 notification's write takes subscription 302's lock (as every write outside the groups does)
        // and holds it until released.
        let (locked, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let outside = Task {
            try await server.write(
                input: ("notification-v1:race", "notification-v1", Array("{}".utf8)), viewFollows: false
            ) {
                store in
                try server.lockSubscriptions(of: [TransactionID("302")], in: store)
                // The lock is sent with the next statement: a read (as applying starts with) makes it taken.
                #expect(try store.subscription(TransactionID("302")) == nil)
                locked.signal()
                guard release.wait(timeout: .now() + 60) == .success else {
                    throw PurchaseServerError.invalid("the V1 write was not released within a minute")
                }
                // A day after the group's renewal of 302: the subscription ends with this one's expiry.
                var later = Self.renewal(1_302, original: 302)
                later.transaction?.purchaseDate = Self.now.addingTimeInterval(86_400)
                later.transaction?.expiresDate = Self.now.addingTimeInterval(2 * 86_400)
                return try server.apply(later, bundleID: "app", claimant: nil, in: store, now: Self.now)
            }
        }
        let apart = storage.groupsApart
        do {
            try await Self.waitUntil("the V1 write to hold the lock") { locked.wait(timeout: .now()) == .success }
            // Renewals of five subscriptions, 302 among them, as V2 notifications, gathered behind the held
            // runner: one group takes them.
            let grouped = Task {
                try await Self.holdRunner(storage, server, until: 5) {
                    try await withThrowingTaskGroup(of: (Int, PurchaseServer.Ingested).self) { group in
                        for id in 300..<305 {
                            group.addTask {
                                (
                                    id,
                                    try await Self.ingest(
                                        Self.renewal(id, original: id), key: "notification:\(id)", server: server)
                                )
                            }
                        }
                        var answered: [Int: PurchaseServer.Ingested] = [:]
                        for try await (id, result) in group { answered[id] = result }
                        return answered
                    }
                }
            }
            // The group waits on 302's lock: PostgreSQL shows an advisory lock in this database not granted.
            let observer = try PostgresConnection(url: url)
            try await Self.waitUntil("the group to wait on the lock") {
                let rows = try observer.execute(
                    """
                    SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """)
                return (rows.first?["n"].int64 ?? 0) > 0
            }
            release.signal()
            let v1 = try await outside.value
            let v2 = try await grouped.value
            #expect(v1.events.count == 1, "the V1 write's renewal applied")
            #expect(v2.keys.sorted() == [300, 301, 302, 303, 304])
            #expect(v2.values.allSatisfy { !$0.duplicate })
            #expect([300, 301, 303, 304].allSatisfy { v2[$0]?.events.count == 1 })
            #expect(v2[302]?.events.map(\.type.rawValue) == [], "302: \(v2[302]?.events.map(\.type.rawValue) ?? [])")
            #expect(storage.groupsApart == apart, "the five committed as one group")
        } catch {
            release.signal()
            throw error
        }
        // 302's renewal in the group read what the V1 write committed (after its lock): the subscription holds
        // both purchases and the later one's expiry.
        let stored = try await storage.read { store in
            (
                try store.purchases(original: TransactionID("302")).map(\.transactionID.rawValue).sorted(),
                try (300..<305).allSatisfy { try store.subscription(TransactionID(String($0))) != nil },
                try store.input(key: "notification-v1:race") != nil,
                try store.subscription(TransactionID("302"))?.expiresDate
            )
        }
        #expect(stored.0 == ["1302", "302"])
        #expect(stored.3 == Self.now.addingTimeInterval(2 * 86_400), "the group's write read the V1 write's commit")
        #expect(stored.1)
        #expect(stored.2)
    }

    /// Two servers (two processes' worth) on one fresh database, neither holding a lease: a write does not
    /// wait for the other's cache.
    private static func twoServers() async throws -> (url: String, first: PurchaseServer, second: PurchaseServer) {
        let url = try PostgresTesting.freshDatabase()
        let (_, first) = try await server(poolSize: 2, url: url)
        let (_, second) = try await server(poolSize: 2, url: url)
        await first.leave()
        await second.leave()
        return (url, first, second)
    }

    /// Runs `held` in a write of `first` that stays open until `racing`, on another server sharing the
    /// database, waits on an advisory lock; then lets the first commit and answers how `racing` ended.
    /// Throws when `racing` did not wait (it finished while the first write was open).
    private static func race<Answer: Sendable>(
        url: String, _ first: PurchaseServer,
        holding held: @escaping @Sendable (any ServerStore) throws -> PurchaseServer.RecordedEvents,
        racing: @escaping @Sendable () async throws -> Answer
    ) async throws -> Result<Answer, any Error> {
        let (entered, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let heldWrite = Task {
            try await first.write(input: nil, viewFollows: false) { store in
                let events = try held(store)
                entered.signal()
                guard release.wait(timeout: .now() + 60) == .success else {
                    throw PurchaseServerError.invalid("the first write was not released within a minute")
                }
                return events
            }
        }
        let done = RaceFlag()
        do {
            try await waitUntil("the first write to do its work") { entered.wait(timeout: .now()) == .success }
            let racingWrite = Task {
                defer { done.set() }
                return try await racing()
            }
            let observer = try PostgresConnection(url: url)
            func waiting() throws -> Int64 {
                try observer.execute(
                    """
                    SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """
                ).first?["n"].int64 ?? 0
            }
            try await waitUntil("the second write to wait or finish") { try waiting() > 0 || done.isSet }
            guard !done.isSet else {
                release.signal()
                _ = try await heldWrite.value
                throw PurchaseServerError.invalid("the second write did not wait for the first")
            }
            release.signal()
            _ = try await heldWrite.value
            return await racingWrite.result
        } catch {
            release.signal()
            throw error
        }
    }

    @Test(
        "Two processes binding one account token to two users at once: the second waits for the first's commit, then is refused"
    )
    func accountTokenRace() async throws {
        let (url, first, second) = try await Self.twoServers()
        let token = "5a0c55e2-0000-4000-8000-00000000aaaa"
        // Two purchases (two subscriptions) carrying the same token, posted by two users. The second waits on
        // an advisory lock (the token's) while the first is open; without it, it would see no binding yet and
        // finish.
        let (ana, ben) = (
            Self.renewal(700, original: 700, token: token), Self.renewal(701, original: 701, token: token)
        )
        let outcome = try await Self.race(
            url: url, first, holding: { try first.apply(ana, bundleID: "app", claimant: "ana", in: $0, now: Self.now) },
            racing: {
                try await second.write(
                    input: ("transaction:701:ben", "transaction", Array("{}".utf8)), viewFollows: false
                ) { try second.apply(ben, bundleID: "app", claimant: "ben", in: $0, now: Self.now) }
            })
        #expect(throws: PurchaseServerError.self) { try outcome.get() }
        if case .failure(let error as PurchaseServerError) = outcome {
            #expect(error.code == .accountTokenMismatch, "\(error)")
        }
        let owners = try await first.storage.read { store in
            (
                try store.subscriber(bundle: "app", appAccountToken: token)?.appUserID,
                try store.subscription(TransactionID("701"))?.owner
            )
        }
        #expect(owners.0 == "ana")
        #expect(owners.1 == nil, "the refused write left the second purchase unbound")
    }

    /// What a write for an id does while another process makes that id an alias.
    enum AliasedWrite: String, CaseIterable, Sendable {
        /// An app posts a purchase for the id; an administrator grants the id an entitlement; a notification of
        /// a purchase no one owns yet carries an account token the id holds.
        case purchase, grant, notification
    }

    @Test(
        "A purchase, grant or token's notification for an id while another process makes it an alias: it waits, then goes to the alias's user",
        arguments: AliasedWrite.allCases)
    func aliasRace(_ write: AliasedWrite) async throws {
        let (url, first, second) = try await Self.twoServers()
        let token = "5a0c55e2-0000-4000-8000-00000000bbbb"
        if write == .notification {
            // "anon" is a user already, known by the token its first purchase carried.
            _ = try await second.write(
                input: ("transaction:711:anon", "transaction", Array("{}".utf8)), viewFollows: false
            ) {
                try second.apply(
                    Self.renewal(711, original: 711, token: token), bundleID: "app", claimant: "anon", in: $0,
                    now: Self.now)
            }
        }
        // The first process makes "anon" an alias of "ana" as `alias(bundleID:appUserID:alias:)` does (both ids'
        // locks, the alias, the user's row with the alias's tokens) and holds its write open. The second posts a
        // purchase for "anon", grants "anon" an entitlement, or takes a notification of a purchase nobody owns
        // yet carrying "anon"'s token. Before the second read the alias under the id's lock, it read "no alias"
        // first (waiting for the lock, or for none), and wrote to "anon", a user no request reaches any more.
        let outcome = try await Self.race(
            url: url, first,
            holding: { store in
                try store.lock(user: "ana", bundle: "app")
                try store.lock(user: "anon", bundle: "app")
                var ana = Subscriber(bundleID: "app", appUserID: "ana", firstSeen: Self.now)
                ana.aliases = ["anon"]
                ana.appAccountTokens = try store.subscriber(bundle: "app", appUserID: "anon")?.appAccountTokens ?? []
                try store.saveAlias(bundle: "app", alias: "anon", user: "ana")
                try store.save(ana)
                return []
            },
            racing: {
                switch write {
                case .purchase:
                    _ = try await second.write(
                        input: ("transaction:710:anon", "transaction", Array("{}".utf8)), viewFollows: false
                    ) {
                        try second.apply(
                            Self.renewal(710, original: 710), bundleID: "app", claimant: "anon", in: $0, now: Self.now)
                    }
                case .grant:
                    _ = try await second.grant(
                        bundleID: "app", appUserID: "anon", entitlement: "plus", expiresDate: nil)
                case .notification:
                    _ = try await second.write(
                        input: ("notification:710", "notification-v2", Array("{}".utf8)), viewFollows: false
                    ) {
                        try second.apply(
                            Self.renewal(710, original: 710, token: token), bundleID: "app", claimant: nil, in: $0,
                            now: Self.now)
                    }
                }
            })
        try outcome.get()
        let stored = try await first.storage.read { store in
            (
                try store.purchase(TransactionID("710"))?.owner, try store.subscription(TransactionID("710"))?.owner,
                try store.subscriber(bundle: "app", appUserID: "anon"),
                try store.grants(bundle: "app", owner: "ana").map(\.entitlement),
                try store.grants(bundle: "app", owner: "anon").count
            )
        }
        #expect(write == .notification || stored.2 == nil, "no user row for the alias")
        let view = try await second.subscriber(bundleID: "app", appUserID: "anon")
        #expect(view.appUserID == "ana")
        switch write {
        case .purchase, .notification:
            #expect(stored.0 == "ana")
            #expect(stored.1 == "ana")
            #expect(!view.subscriptions.isEmpty, "the alias's user has the purchase")
        case .grant:
            #expect(stored.3 == ["plus"])
            #expect(stored.4 == 0)
            #expect(view.entitlements["plus"]?.active == true, "the alias's user has the grant")
        }
    }

    @Test("Notifications of distinct subscriptions waiting together are written in one transaction")
    func groupCommit() async throws {
        let (storage, server) = try await Self.groupedServer()
        // Statements are prepared on first use: one write first.
        _ = try await Self.ingest(Self.renewal(1, original: 1), key: "notification:first", server: server)
        // A user known by an account token two of the renewals carry: both change the user, once.
        let token = "7d3c1e1a-0000-4000-8000-000000000001"
        try await storage.write { store in
            var user = Subscriber(bundleID: "app", appUserID: "u1", firstSeen: Self.now)
            user.appAccountTokens = [token]
            try store.save(user)
        }
        let version = try await storage.read { try $0.version(bundle: "app", appUserID: "u1") }
        let before = storage.roundTrips
        // Twenty renewals of new subscriptions; the same renewal in a second input (its event known); a
        // renewal of one of the twenty's subscriptions (not in the same group: it reads what the first wrote);
        // an input sent twice.
        var writes: [(key: String, update: PurchaseUpdate)] = (100..<120).map {
            ("notification:\($0)", Self.renewal($0, original: $0, token: [110, 111].contains($0) ? token : nil))
        }
        writes += [
            ("notification:100-again", Self.renewal(100, original: 100)),
            ("notification:101-next", Self.renewal(1_101, original: 101)),
            ("notification:102", Self.renewal(102, original: 102)),
        ]
        let all = writes
        let answered = try await Self.holdRunner(storage, server, until: all.count) {
            try await withThrowingTaskGroup(of: (String, PurchaseServer.Ingested).self) { group in
                for write in all {
                    group.addTask { (write.key, try await Self.ingest(write.update, key: write.key, server: server)) }
                }
                var answered: [String: [PurchaseServer.Ingested]] = [:]
                for try await (key, result) in group { answered[key, default: []].append(result) }
                return answered
            }
        }
        let trips = storage.roundTrips - before
        // The held write's two, then two groups (the twenty-one distinct subscriptions, then the rest) of two
        // round trips each; a renewal of the user's adds its own (its user read, its event's insert answered,
        // the askings its change waits for). Alone, the twenty-three would take two each at least.
        #expect(trips < all.count, "round trips: \(trips)")
        #expect(storage.groupsApart == 0, "every group committed as one")
        for id in 103..<120 { #expect(answered["notification:\(id)"]?.first?.events.count == 1, "notification \(id)") }
        // Whichever of the renewal's two inputs ran first recorded its event; the other found it known.
        let renewal100 = ["notification:100", "notification:100-again"].compactMap { answered[$0]?.first?.events.count }
        #expect(renewal100.sorted() == [0, 1])
        #expect(answered["notification:101-next"]?.first?.events.count == 1, "the next renewal applied after the first")
        #expect(answered["notification:102"]?.map { $0.duplicate ? 1 : 0 }.sorted() == [0, 1], "one of the two")
        let stored = try await storage.read { store in
            (
                try store.inputCount(),
                try store.purchases(original: TransactionID("101")).map(\.transactionID.rawValue).sorted(),
                try (100..<120).allSatisfy { try store.subscription(TransactionID(String($0))) != nil }
            )
        }
        // The first, the held one, twenty, and the two other inputs (the repeated input is one).
        #expect(stored.0 == 24)
        #expect(stored.1 == ["101", "1101"])
        #expect(stored.2)
        let owned = try await storage.read { store in
            (
                try store.purchases(bundle: "app", owner: "u1").map(\.transactionID.rawValue).sorted(),
                try store.version(bundle: "app", appUserID: "u1")
            )
        }
        #expect(owned.0 == ["110", "111"])
        #expect((owned.1 ?? 0) > (version ?? 0), "the user's version moved with the group's commit")
    }

    @Test(
        "Gathering: writes from several callers on a busy machine wait for the target; otherwise they run at once",
        arguments: [true, false])
    func gathering(busy: Bool) async throws {
        // Two minutes: a wait that should not happen would hold the test far past the limit below.
        let (storage, server) = try await Self.groupedServer(
            gathering: GroupGathering(maxDelay: .seconds(120), target: 3, busy: { busy }))
        let clock = ContinuousClock()
        let (started, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let held = Task {
            try await Self.ingest(Self.renewal(9_000, original: 9_000), key: "notification:hold", server: server) {
                started.signal()
                release.wait()
            }
        }
        var writes: [Task<PurchaseServer.Ingested, any Error>] = []
        let before: WriteCounts
        do {
            try await Self.waitUntil("the held write to start") { started.wait(timeout: .now()) == .success }
            before = try #require(storage.writeCounts)
            for id in 400..<402 {
                writes.append(
                    Task {
                        try await Self.ingest(Self.renewal(id, original: id), key: "notification:\(id)", server: server)
                    })
            }
            try await Self.waitUntil("two writes to wait") { storage.waitingWrites >= 2 }
        } catch {
            release.signal()
            throw error
        }
        let released = clock.now
        release.signal()
        _ = try await held.value
        if busy {
            // The runner waits for a third write: the two stay queued meanwhile.
            try await Task.sleep(for: .milliseconds(300))
            #expect(storage.waitingWrites == 2)
            writes.append(
                Task {
                    try await Self.ingest(Self.renewal(402, original: 402), key: "notification:402", server: server)
                })
        }
        for write in writes { #expect(try await write.value.events.count == 1) }
        #expect(clock.now - released < .seconds(60))
        // One transaction: the two, and the third when the runner waited for it.
        let counted = try #require(storage.writeCounts).since(before)
        #expect(counted == WriteCounts(transactions: 1, writes: busy ? 3 : 2))
    }

    @Test("A write that fails in a group fails alone: the others commit, its input is not kept")
    func groupFailure() async throws {
        let (storage, server) = try await Self.groupedServer()
        let apart = storage.groupsApart
        let before = try #require(storage.writeCounts)
        let answered = try await Self.holdRunner(storage, server, until: 6) {
            await withTaskGroup(of: (String, Bool).self) { group in
                for id in 200..<206 {
                    group.addTask {
                        let key = "notification:\(id)"
                        let result = try? await Self.ingest(
                            Self.renewal(id, original: id), key: key, server: server, fail: id == 203)
                        return (key, result != nil)
                    }
                }
                var answered: [String: Bool] = [:]
                for await (key, succeeded) in group { answered[key] = succeeded }
                return answered
            }
        }
        #expect(
            answered.filter(\.value).keys.sorted() == ["200", "201", "202", "204", "205"].map { "notification:\($0)" })
        let kept = try await storage.read { store in
            try (200..<206).map { try store.input(key: "notification:\($0)") != nil }
        }
        #expect(kept == [true, true, true, false, true, true])
        let subscription = try await storage.read { try $0.subscription(TransactionID("203")) }
        #expect(subscription == nil, "the failed write's records were rolled back with it")
        #expect(storage.groupsApart == apart + 1, "the six were one group, run again one by one")
        // Every other write is a transaction of its own: only the group holds more writes than transactions.
        let counted = try #require(storage.writeCounts).since(before)
        #expect(counted.transactions >= 8, "the held write, the group, and the six again one by one")
        #expect(counted.writes - counted.transactions == 5, "the group of six counted as one transaction")
    }
}

/// Set once the racing side of ``PostgresRoundTripTests`` `race` has finished, however.
private final class RaceFlag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    func set() { value.store(true, ordering: .releasing) }
}
