import AppStoreEmulator
import Foundation
import StoreKitCatalog
import StoreModel
import StorekeeperJSON
import StorekeeperSQL
import StorekeeperSQLite
import StorekeeperTestSupport
import Synchronization
import Testing

/// The emulator's foundations: the scheduler, the data directory's lock and certificates, old data.
@Suite("Emulator foundations")
struct AppStoreFoundationTests {
    typealias Harness = AppStoreTests.Harness

    @Test("The scheduler renews due subscriptions while no request arrives")
    func schedulerRunsWithoutRequests() async throws {
        let time = AppStoreTests.FakeTime()
        let harness = try await Harness.make(time: time)
        let app = try await harness.device()
        let (status, _) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        #expect(status == 201)
        harness.store.startScheduler(granularity: .milliseconds(20))
        defer { harness.store.stopScheduler() }
        // Two store months at the catalogue's rate pass in fake real time; no request is made meanwhile.
        time.value.withLock { $0 = $0.addingTimeInterval(2 * 31 * 86_400) }
        var count = 0
        for _ in 0..<1_500 {  // up to 30 s: the scheduler's task may start late on a loaded machine
            count = try await harness.store.transactionCount()
            if count >= 3 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(count >= 3, "the purchase and at least two renewals")
    }

    @Test("A data directory whose certificates exist but cannot be read stops the start, naming the problem")
    func damagedPKI() async throws {
        let harness = try await Harness.make()
        let directory = harness.directory
        harness.store.close()
        let leaf = directory.appendingPathComponent("pki/receipt-leaf.pem")
        let handle = try FileHandle(forUpdating: leaf)
        try handle.truncate(atOffset: 100)
        try handle.close()
        do {
            _ = try await Harness.make(directory: directory)
            Issue.record("a damaged chain must not be replaced")
        } catch let error as EmulatorError {
            #expect(error.message.contains("receipt signing chain"))
        }
        // Nothing was regenerated.
        #expect(try Data(contentsOf: leaf).count == 100)
        try FileManager.default.removeItem(at: leaf)
        await #expect(throws: EmulatorError.self) { _ = try await Harness.make(directory: directory) }
        #expect(!FileManager.default.fileExists(atPath: leaf.path))
    }

    @Test("State written by the whole-document build is imported into the tables once")
    func legacyImport() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        let database = try Database(path: directory.appendingPathComponent("store.sqlite").path)
        try await database.migrate([
            Migration(
                "001-state", "CREATE TABLE state (id INTEGER PRIMARY KEY CHECK (id = 1), document BLOB NOT NULL)")
        ])
        let document = """
            {"accounts":[{"id":"ACC","environment":"Sandbox","storefront":"USA"}],
             "devices":[{"id":"10111213-1415-4617-9819-1a1b1c1d1e1f","accountID":"ACC"}],
             "installs":[{"deviceID":"10111213-1415-4617-9819-1a1b1c1d1e1f","bundleID":"com.example.storekeeper",
                          "version":"1","originalVersion":"1","originalPurchaseDate":725760000}],
             "transactions":[{"id":"2000000000000001","originalID":"2000000000000001","accountID":"ACC",
                              "bundleID":"com.example.storekeeper","productID":"monthly",
                              "kind":"Auto-Renewable Subscription","quantity":1,"purchaseDate":725760000,
                              "originalPurchaseDate":725760000,"expiresDate":725760300,"webOrderLineItemID":5,
                              "renewalNumber":0,"finished":false,"isTrialPeriod":false}],
             "pending":[],"nextTransactionID":2000000000000002,"nextWebOrderLineItemID":6,
             "clockOffset":0,"rateName":"monthlyRenewalEveryFiveMinutes"}
            """
        try await database.write { connection in
            try connection.execute("INSERT INTO state (id, document) VALUES (1, ?)", [.blob(Array(document.utf8))])
        }
        let harness = try await Harness.make(directory: directory)
        let app = "/_emulator/v1/devices/10111213-1415-4617-9819-1A1B1C1D1E1F/apps/\(AppStoreTests.bundleID)"
        let (_, queue) = try await harness.call("GET", app + "/transactions")
        #expect(queue["transactions"]?.arrayValue?.first?["transactionIdentifier"] == .string("2000000000000001"))
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("pro")])
        #expect(bought["transaction"]?["transactionIdentifier"] == .string("2000000000000002"))
        #expect(try await database.read { try $0.execute("SELECT count(*) AS n FROM state") }.first?["n"].int64 == 0)
    }

    @Test("A renewal moves its due event to the new period's end; an expiry removes it")
    func renewalDueEvent() async throws {
        let harness = try await Harness.make()
        let app = try await harness.device()
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        let original = try #require(bought["transaction"]?["originalTransactionIdentifier"]?.stringValue)
        // Read beside the emulator's own connection (WAL: the last commit).
        let connection = try Connection(path: harness.directory.appendingPathComponent("store.sqlite").path)
        func dueEvents() throws -> [String] {
            try connection.execute("SELECT kind, key, due FROM due_events ORDER BY kind, key").map {
                "\($0["kind"].string ?? "") \($0["key"].string ?? "") \($0["due"].double ?? 0)"
            }
        }
        func latestExpiry() throws -> Double {
            try #require(
                try connection.execute(
                    "SELECT max(expires_date) AS expires FROM transactions WHERE original_id = ?", [.text(original)]
                ).first?["expires"].double)
        }
        #expect(try dueEvents() == ["renewal \(original) \(try latestExpiry())"])
        for renewals in 1...3 {
            let (_, clock) = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
            #expect(clock["ran"]?["renewals"] == .integer(1))
            // One row for the subscription, now due when the period just bought ends.
            #expect(try dueEvents() == ["renewal \(original) \(try latestExpiry())"], "after renewal \(renewals)")
        }
        // Auto-renew off: the period's end expires the subscription and schedules nothing after it.
        let (status, _) = try await harness.call(
            "POST", "/_emulator/v1/transactions/\(original)/auto-renew", ["enabled": .bool(false)])
        #expect(status == 200)
        let (_, clock) = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        #expect(clock["ran"] == .object(["renewals": .integer(0), "expirations": .integer(1)]))
        #expect(try dueEvents() == [])
    }
}

@Suite("Emulator secrets on disk")
struct SecretsOnDiskTests {
    @Test("Keys are 0600 from the first byte, the data and pki directories 0700, the database files 0600")
    func modes() async throws {
        // A loose umask, as on many machines: nothing secret may be created group- or world-readable.
        let old = umask(0o022)
        defer { umask(old) }
        let parent = try ExternalTool.temporaryDirectory()
        let directory = parent.appendingPathComponent("data")
        let harness = try await AppStoreTests.Harness.make(directory: directory)
        _ = try await harness.accountAndApp()
        #expect(try ExternalTool.mode(directory.path) == 0o700)
        #expect(try ExternalTool.mode(directory.appendingPathComponent("pki").path) == 0o700)
        for key in ["receipt-leaf-key.pem", "jws-leaf-key.pem"] {
            #expect(try ExternalTool.mode(directory.appendingPathComponent("pki/\(key)").path) == 0o600, "\(key)")
        }
        for file in ["store.sqlite", "store.sqlite-wal", "store.sqlite-shm", "lock"] {
            let path = directory.appendingPathComponent(file).path
            guard FileManager.default.fileExists(atPath: path) else { continue }
            #expect(try ExternalTool.mode(path) == 0o600, "\(file)")
        }
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("store.sqlite").path))
    }
}
