import AppStoreEmulator
import Foundation
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperPostgres
import StorekeeperTestSupport
import Synchronization
import Testing

@testable import PurchaseServer

/// Several purchase servers on one PostgreSQL database behave as one: the end-to-end scenarios against the
/// emulator, with Apple's notifications spread over the servers and duplicated, delayed (so reordered)
/// or dropped on the way; what was dropped is repaired by reconciliation, which one server leads.
@Suite(
    "Purchase server: several servers on one PostgreSQL", .serialized,
    .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage))
struct ClusterTests {
    /// How often each server polls: the repair is awaited for one interval and the pass it takes.
    static let interval: Duration = .seconds(2)

    @Test("One server leads reconciliation; another takes over when it stops")
    func leadership() async throws {
        let url = try PostgresTesting.freshDatabase()
        let first = try await PostgresServerStorage(url: url, poolSize: 1)
        var second: PostgresServerStorage? = try await PostgresServerStorage(url: url, poolSize: 1)
        #expect(await second!.lead("reconciliation"))
        #expect(await !first.lead("reconciliation"))
        second = nil  // its connections close, as when its process dies
        var taken = false
        for _ in 0..<200 where !taken {
            taken = await first.lead("reconciliation")
            if !taken { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(taken)
    }

    @Test("A leader that lost its lock during a pass stops at its next step; the new leader's pass is the only one")
    func leadershipLostMidPass() async throws {
        let url = try PostgresTesting.freshDatabase()
        let calls = Mutex(0)
        let release = Atomic<Bool>(false)
        var router = Router()
        router.add("POST", "/inApps/v1/notifications/history") { request, _ in
            let call = calls.withLock {
                $0 += 1
                return $0
            }
            // The first ask (the first leader's) waits until the test lets it go.
            if call == 1 {
                for _ in 0..<600 where !release.load(ordering: .relaxed) {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            // Two pages: the first has more.
            let first = request.query["paginationToken"] == nil
            return HTTPResponse(
                status: 200, headers: [("Content-Type", "application/json")],
                body: JSONWriter.bytes(
                    .object([
                        "notificationHistory": .array([]), "hasMore": .bool(first),
                        "paginationToken": first ? .string("t1") : .null,
                    ])))
        }
        let apple = try HTTPServer(port: 0, responder: router.freeze())
        defer {
            release.store(true, ordering: .relaxed)
            apple.stop()
        }
        let api = ServerAPISettings(
            keyID: "KEY1234567", issuerID: "issuer", privateKey: try PrivateKey.generateP256(),
            productionURL: "http://127.0.0.1:\(apple.port)", sandboxURL: "http://127.0.0.1:\(apple.port)")
        let app = AppSettings(
            bundleID: JWSFixtures.bundleID, appAppleID: JWSFixtures.appAppleID, environments: [.sandbox],
            publicKey: "pk_12345678", receiptRoots: [], jwsRoots: [JWSFixtures.chain.root], serverAPI: api)
        let configuration = ServerConfiguration(secretKey: "sk_0123456789abcdef", apps: [app])
        let first = try PurchaseServer(
            configuration: configuration, storage: try await PostgresServerStorage(url: url, poolSize: 2))
        let second = try PurchaseServer(
            configuration: configuration, storage: try await PostgresServerStorage(url: url, poolSize: 2))
        let firstPass = Task { await first.reconcile() }
        for _ in 0..<500 where calls.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }
        // The first leader's lock connection is lost while it waits for Apple (a dropped connection, a
        // terminated backend): the lock is free, and the second process takes the lead.
        let admin = try PostgresConnection(url: url)
        _ = try admin.execute(
            """
            SELECT pg_terminate_backend(pid) FROM pg_locks
            WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """)
        var secondReport = await second.reconcile()
        for _ in 0..<100 where secondReport.notLeader {
            try await Task.sleep(for: .milliseconds(50))
            secondReport = await second.reconcile()
        }
        #expect(!secondReport.notLeader, "\(secondReport)")
        #expect(calls.withLock { $0 } == 3, "the second leader read both pages")
        release.store(true, ordering: .relaxed)
        let firstReport = await firstPass.value
        #expect(firstReport.notLeader, "the first stopped once it found it no longer led: \(firstReport)")
        #expect(calls.withLock { $0 } == 3, "and asked for no second page")
        // Nor did it write its page's checkpoint over the one the second leader finished with.
        let key = "notification-history:\(JWSFixtures.bundleID):Sandbox"
        let checkpoint = try await second.storage.read { try $0.checkpoint(key) }
        #expect(checkpoint?.contains("paginationToken") == false, "\(String(describing: checkpoint))")
    }

    /// A follower of another process takes a lease on `url`'s database, then stops asking without giving it
    /// back (as a process that died): until the lease ends, writes that change a user wait for it.
    static func stopFollowerHoldingLease(url: String) async throws {
        let storage = try await PostgresServerStorage(url: url, poolSize: 1)
        var follower: ChangeFollower? = ChangeFollower(cache: SubscriberCache(shared: true), reader: "stopped") {
            watermark, report in
            try #require(try await storage.subscriberChanges(since: watermark, reporting: report))
        }
        try await follower!.catchUp()
        for _ in 0..<500 where !follower!.vouches { try await Task.sleep(for: .milliseconds(10)) }
        #expect(follower!.vouches)
        weak let gone = follower
        follower = nil  // its loop ends at its next step; its lease stays in cache_readers
        for _ in 0..<500 where gone != nil { try await Task.sleep(for: .milliseconds(10)) }
        #expect(gone == nil)
    }

    @Test("What a process keeps of a user is never older than a write another process acknowledged")
    func sharedCache() async throws {
        let url = try PostgresTesting.freshDatabase()
        let harness = try await ServerHarness.make(withAPI: false, postgres: url, instances: 2)
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (_, jws) = try await harness.buy("monthly", device: device)
        _ = try await harness.post(jws, user: "ola")
        let (writer, reader) = (harness.instances[0], harness.instances[1])
        func read(_ route: String, key: String) async throws -> JSONValue {
            let response = try await HTTPClient().send(
                "GET", "http://127.0.0.1:\(reader.http.port)/v1/\(route)/ola",
                headers: [("Authorization", "Bearer " + key)], body: [])
            #expect(response.status == 200)
            return try JSONParser.parse(response.body)
        }
        let follower = try #require(reader.server.follower)
        for round in 0..<12 {
            // The reader keeps both answers (read twice: the second from what it kept, once the follower caught up).
            for _ in 0..<2 {
                _ = try await read("subscribers", key: ServerHarness.secret)
                _ = try await read("entitlements", key: ServerHarness.publicKey)
            }
            // Once its lease runs, the reader answers from memory without asking PostgreSQL.
            for _ in 0..<500 where !follower.vouches { try await Task.sleep(for: .milliseconds(10)) }
            #expect(follower.vouches, "round \(round)")
            #expect(
                try reader.server.cachedAnswer(.subscriber, bundleID: ServerHarness.bundleID, appUserID: "ola") != nil,
                "round \(round)")
            // The other process changes the user and acknowledges.
            let granted = round % 2 == 0
            if granted {
                _ = try await writer.server.grant(
                    bundleID: ServerHarness.bundleID, appUserID: "ola", entitlement: "pro", expiresDate: nil)
            } else {
                _ = try await writer.server.revokeGrant(
                    bundleID: ServerHarness.bundleID, appUserID: "ola", entitlement: "pro")
            }
            // Acknowledged only once the reader dropped what it kept of the user.
            #expect(!reader.server.cache.holds(ServerHarness.bundleID, "ola"), "round \(round)")
            let subscriber = try await read("subscribers", key: ServerHarness.secret)
            #expect(subscriber["entitlements"]?["pro"]?["active"]?.boolValue ?? false == granted, "round \(round)")
            let entitlements = try await read("entitlements", key: ServerHarness.publicKey)
            #expect(entitlements["entitlements"]?["pro"]?["active"]?.boolValue ?? false == granted, "round \(round)")
            // The subscription bought stays in every answer.
            #expect(subscriber["entitlements"]?["plus"]?["active"]?.boolValue == true)
        }
    }

    @Test(
        "A process that dies holding a lease holds other processes' writes back only until its lease ends, and only writes that change a user"
    )
    func deadReader() async throws {
        let url = try PostgresTesting.freshDatabase()
        let harness = try await ServerHarness.make(withAPI: false, postgres: url, instances: 1)
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (_, jws) = try await harness.buy("monthly", device: device)
        _ = try await harness.post(jws, user: "ola")
        let writer = harness.instances[0].server
        // Another process's follower holds a lease; then it stops asking without giving it back.
        try await Self.stopFollowerHoldingLease(url: url)
        // A write that changes no user's answers, and after which no view is answered (as Apple's
        // notifications), leaves the dead reader nothing to drop: it is not held back. It runs in a server of
        // its own, where nothing else is written meanwhile.
        let quietServer = try PurchaseServer(
            configuration: writer.configuration, storage: try await PostgresServerStorage(url: url, poolSize: 1))
        let quiet = ContinuousClock.now
        let input = (key: "test:nobody", kind: "test", body: Array("{}".utf8))
        #expect(try await quietServer.write(input: input, viewFollows: false) { _ in [] }.duplicate == false)
        #expect(ContinuousClock.now - quiet < .milliseconds(500))
        await quietServer.leave()
        let started = ContinuousClock.now
        let done = ServerStorageContractTests.Flag()
        let granted = Task {
            _ = try await writer.grant(
                bundleID: ServerHarness.bundleID, appUserID: "ola", entitlement: "pro", expiresDate: nil)
            done.set()
        }
        for _ in 0..<1_500 where !done.isSet { try await Task.sleep(for: .milliseconds(10)) }
        #expect(done.isSet, "the write is still waiting after 15 s")
        guard done.isSet else { return }
        try await granted.value
        // It waited for the lease (PostgreSQL's, up to two seconds from the last renewal), not for nothing.
        #expect(ContinuousClock.now - started > .milliseconds(500))
        let view = try await writer.subscriber(bundleID: ServerHarness.bundleID, appUserID: "ola")
        #expect(view.entitlements["pro"]?.active == true)
    }

    @Test("A webhook is sent only once every process answering from memory has dropped what its write changed")
    func webhookAfterAcknowledgement() async throws {
        let url = try PostgresTesting.freshDatabase()
        let harness = try await ServerHarness.make(withAPI: false, postgres: url, instances: 1)
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (_, jws) = try await harness.buy("monthly", device: device)
        _ = try await harness.post(jws, user: "ola")
        let settled = try await harness.sink.settledEventIDs().count
        // Another process's follower holds a lease, then stops asking: acknowledgements wait for the lease.
        try await Self.stopFollowerHoldingLease(url: url)
        let started = ContinuousClock.now
        let (_, pro) = try await harness.buy("pro", device: device)
        let posted = Task { try await harness.post(pro, user: "ola") }
        var arrived: ContinuousClock.Instant?
        for _ in 0..<1_500 {
            if harness.sink.state.received.withLock({ $0.count }) > settled {
                arrived = .now
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        _ = try await posted.value
        let first = try #require(arrived, "no webhook within 15 s")
        // Sent once the stopped reader's lease ended (PostgreSQL's, up to two seconds), not at the commit.
        #expect(first - started > .milliseconds(500))
    }

    @Test("A notification dropped on every attempt is repaired by the leader's next pass")
    func repairAndBudget() async throws {
        let url = try PostgresTesting.freshDatabase()
        // Every notification dropped: only reconciliation can tell the servers.
        let harness = try await ServerHarness.make(
            postgres: url, instances: 2, faults: NotificationFaults(dropped: 100))
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device)
        _ = try await harness.post(jws, user: "ola")
        _ = try await harness.store.setClock(advance: StorePeriod(months: 1), rate: nil)
        try await harness.settleNotifications()
        let reports = await [harness.instances[0].server.reconcile(), harness.instances[1].server.reconcile()]
        #expect(reports.filter(\.notLeader).count == 1, "one server leads")
        let led = try #require(reports.first { !$0.notLeader })
        #expect(led.failures.isEmpty, "\(led.failures)")
        #expect(led.notificationsRecovered >= 1)
        #expect(led.repairs >= 1)
        let truth = try #require(try await harness.store.subscriptionState(originalTransactionID: id))
        let view = try await harness.subscriber("ola")
        #expect(
            view["subscriptions"]?[id]?["expiresDate"]?.doubleValue
                == truth.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) })
        #expect(harness.balancer?.count("dropped") ?? 0 >= 2)
    }

    @Test("Every server takes from one request budget: a spent budget stops the pass until it refills")
    func sharedBudget() async throws {
        let url = try PostgresTesting.freshDatabase()
        // One request a minute, per endpoint: the first overdue subscription is asked for, the second waits.
        let harness = try await ServerHarness.make(
            postgres: url, instances: 2, faults: NotificationFaults(dropped: 100), maxAPIRequestsPerHour: 60)
        defer { harness.stop() }
        for user in ["pia", "raf"] {
            let (_, device) = try await harness.customer()
            let (_, jws) = try await harness.buy("monthly", device: device)
            // Posting spends the budget of Get All Subscription Statuses (one) on the first purchase.
            _ = try await harness.post(jws, user: user)
        }
        _ = try await harness.store.setClock(advance: StorePeriod(months: 1), rate: nil)
        _ = try await harness.store.setClock(advance: StorePeriod(days: 3), rate: nil)
        try await harness.settleNotifications()
        var first: [PurchaseServer.ReconciliationReport] = []
        for instance in harness.instances { first.append(await instance.server.reconcile()) }
        #expect(first.filter(\.notLeader).count == 1, "one server leads")
        let led = try #require(first.first { !$0.notLeader })
        #expect(led.notificationsRecovered >= 2, "one history page fits the budget: \(led)")
        // The leader's next pass finds the history's budget spent: it stops and leaves the rest for later.
        let leader = harness.instances[try #require(first.firstIndex { !$0.notLeader })].server
        let second = await leader.reconcile()
        #expect(second.budgetExhausted, "\(second)")
        #expect(second.notificationsRecovered == 0)
        // The two posts went to different servers: the second found the budget the first had spent.
        var refusals = 0
        for instance in harness.instances {
            let metrics = try await HTTPClient().send("GET", "http://127.0.0.1:\(instance.http.port)/metrics")
            let text = String(decoding: metrics.body, as: UTF8.self)
            refusals +=
                text.split(separator: "\n").filter {
                    $0.hasPrefix("storekeeper_api_budget_refusals_total{endpoint=\"subscriptionStatuses\"}")
                }.count
        }
        #expect(refusals >= 1, "a server was refused the statuses budget the other had spent")
    }
}

/// The scenarios against several servers on one PostgreSQL, in three lanes that run side by side (each lane
/// one scenario at a time): most of a case is waiting for a reconciliation pass, so lanes overlap well, and
/// this suite is the longest of the run (two lanes took 131–164 s of it). Each lane holds a few hundred
/// descriptors; child processes are started with posix_spawn (``ChildProcess``), which closes them in the
/// child without listing them.
@Suite(
    "Purchase server: every scenario with several servers on one PostgreSQL",
    .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage))
struct ClusterScenarioTests {
    static let lanes = 3

    static let cases: [(Int, String)] = [2, 4].flatMap { count in ScenarioTruthTests.scenarios.map { (count, $0) } }

    @Test(
        "Every lifecycle scenario ends as the emulator's truth with 2 and 4 servers and rough notifications",
        arguments: 0..<lanes)
    func scenarios(lane: Int) async throws {
        #expect(Self.cases.count == 2 * ScenarioTruthTests.scenarios.count && !Self.cases.isEmpty)
        for (index, (instances, path)) in Self.cases.enumerated() where index % Self.lanes == lane {
            try await Self.scenario(instances: instances, path: path)
        }
    }

    static func scenario(instances: Int, path: String) async throws {
        let url = try PostgresTesting.freshDatabase()
        let harness = try await ServerHarness.make(
            postgres: url, instances: instances, faults: .rough, reconcileEvery: ClusterTests.interval)
        defer { harness.stop() }
        let reader = try await PostgresServerStorage(url: url, poolSize: 1)
        try await ScenarioTruthTests.check(
            path, harness: harness, storage: reader, allDelivered: false,
            repairWithin: ClusterTests.interval * 2 + .seconds(5))
        let fates = ["passed", "duplicated", "delayed", "dropped"].map { harness.balancer?.count($0) ?? 0 }
        #expect(fates.reduce(0, +) > 0, "notifications went through the balancer (\(instances) servers, \(path))")
        // Each event reached the receiver once, though several servers send webhooks.
        let ids = try await harness.sink.settledEventIDs()
        #expect(Set(ids).count == ids.count, "an event was delivered twice (\(path)): \(ids.sorted())")
    }
}
