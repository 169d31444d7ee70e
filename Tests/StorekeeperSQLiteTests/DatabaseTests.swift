import Foundation
import StorekeeperSQL
import StorekeeperSQLite
import StorekeeperTestSupport
import Synchronization
import Testing

@Suite("SQLite database")
struct DatabaseTests {
    static let schema = [
        Migration("001-accounts", "CREATE TABLE accounts (id TEXT PRIMARY KEY, storefront TEXT NOT NULL)"),
        Migration(
            "002-transactions",
            """
            CREATE TABLE transactions (
                id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts(id), amount INTEGER NOT NULL
            )
            """),
    ]

    static func temporaryPath() throws -> String {
        try ExternalTool.temporaryDirectory().appendingPathComponent("store.sqlite").path
    }

    /// Starts a write that holds the writer until `release` is signalled (or a minute passes: it then throws),
    /// once it has started.
    static func holdWriter(_ database: Database) async throws -> (
        holder: Task<Void, any Error>, release: DispatchSemaphore
    ) {
        struct NotReleased: Error {}
        let (held, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let holder = Task {
            try await database.write { _ in
                held.signal()
                guard release.wait(timeout: .now() + 60) == .success else { throw NotReleased() }
            }
        }
        while held.wait(timeout: .now()) != .success { try await Task.sleep(for: .milliseconds(2)) }
        return (holder, release)
    }

    @Test("The writer's executor knows its own queue: a block it runs is isolated there, nowhere else")
    func executorKnowsItsQueue() async {
        // What lets the group commit's `assumeIsolated` hold in every mode of the runtime's check (the legacy
        // mode asks only this, not `checkIsolated`).
        let executor = DispatchSerialExecutor(label: "test.writer")
        let other = DispatchSerialExecutor(label: "test.other")
        #expect(executor.isIsolatingCurrentContext() == false)
        let answers = await withCheckedContinuation { continuation in
            executor.submit {
                continuation.resume(
                    returning: (executor.isIsolatingCurrentContext(), other.isIsolatingCurrentContext()))
            }
        }
        #expect(answers.0 == true)
        #expect(answers.1 == false)
    }

    @Test("Values of every storage class round-trip through bound parameters")
    func values() async throws {
        let database = try Database(path: ":memory:")
        let values: [SQLValue] = [
            .null, .integer(Int64.min), .integer(Int64.max), .real(-0.5), .text("é✓ 'quoted' \0 end"), .blob([]),
            .blob([0, 255, 1]),
        ]
        let rows = try await database.read { connection in
            try connection.execute("SELECT ?, ?, ?, ?, ?, ?, ?", values)
        }
        #expect(rows.count == 1)
        #expect(rows[0].values.prefix(5) == values.prefix(5))
        #expect(rows[0][6] == .blob([0, 255, 1]))
        #expect(rows[0][5] == .blob([]) || rows[0][5] == .null)
    }

    @Test("A statement run again after the schema changed answers the new columns")
    func columnsAfterSchemaChange() async throws {
        let database = try Database(path: ":memory:")
        try await database.migrate(Self.schema)
        let rows = try await database.write { connection -> ([Row], [Row]) in
            try connection.execute("INSERT INTO accounts (id, storefront) VALUES ('a', 'USA')")
            let before = try connection.execute("SELECT * FROM accounts")
            try connection.executeScript("ALTER TABLE accounts ADD COLUMN email TEXT DEFAULT 'x@example.com'")
            return (before, try connection.execute("SELECT * FROM accounts"))
        }
        #expect(rows.0.first?.columns == ["id", "storefront"])
        #expect(rows.1.first?.columns == ["id", "storefront", "email"])
        #expect(rows.1.first?["email"] == .text("x@example.com"))
    }

    @Test("Migrations apply once, in order, and are recorded")
    func migrations() async throws {
        let path = try Self.temporaryPath()
        let database = try Database(path: path)
        #expect(try await database.migrate(Self.schema) == ["001-accounts", "002-transactions"])
        #expect(try await database.migrate(Self.schema).isEmpty)
        let extended =
            Self.schema + [Migration("003-index", "CREATE INDEX transactions_account ON transactions(account_id)")]
        #expect(try await database.migrate(extended) == ["003-index"])
        let recorded = try await database.read { try $0.execute("SELECT id FROM schema_migrations ORDER BY position") }
        #expect(recorded.map { $0["id"] } == ["001-accounts", "002-transactions", "003-index"])
    }

    @Test("A new database gets the baseline and every id recorded; one part-way goes on through the list")
    func baseline() async throws {
        let baseline = """
            CREATE TABLE accounts (id TEXT PRIMARY KEY, storefront TEXT NOT NULL);
            CREATE TABLE transactions (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, raw BLOB NOT NULL);
            CREATE TABLE from_baseline (x INTEGER);
            """
        let fresh = try Database(path: try Self.temporaryPath())
        #expect(try await fresh.migrate(Self.schema, baseline: baseline) == ["001-accounts", "002-transactions"])
        let tables = try await fresh.read {
            try $0.execute("SELECT name FROM sqlite_master WHERE name = 'from_baseline'")
        }
        #expect(tables.count == 1, "the baseline ran, not the list")
        let extended =
            Self.schema + [Migration("003-index", "CREATE INDEX transactions_account ON transactions(account_id)")]
        #expect(try await fresh.migrate(extended, baseline: baseline) == ["003-index"], "later steps still apply")

        let older = try Database(path: try Self.temporaryPath())
        #expect(try await older.migrate([Self.schema[0]]) == ["001-accounts"])
        #expect(try await older.migrate(Self.schema, baseline: baseline) == ["002-transactions"])
        let none = try await older.read {
            try $0.execute("SELECT name FROM sqlite_master WHERE name = 'from_baseline'")
        }
        #expect(none.isEmpty, "a database part-way through the list never gets the baseline")
    }

    @Test("A database with migrations this build does not know is refused")
    func unknownMigration() async throws {
        let database = try Database(path: try Self.temporaryPath())
        try await database.migrate(Self.schema)
        await #expect(throws: SQLiteError.self) { try await database.migrate([Self.schema[0]]) }
        await #expect(throws: SQLiteError.self) {
            try await database.migrate([Migration("000-other", "SELECT 1")] + Self.schema)
        }
    }

    @Test("A failing migration leaves no trace: no table, no record")
    func failingMigration() async throws {
        let database = try Database(path: ":memory:")
        let broken = [Migration("001", "CREATE TABLE a (x INTEGER); CREATE TABLE a (y INTEGER);")]
        await #expect(throws: SQLiteError.self) { try await database.migrate(broken) }
        let tables = try await database.read { try $0.execute("SELECT name FROM sqlite_master WHERE name = 'a'") }
        #expect(tables.isEmpty)
        #expect(try await database.migrate([Migration("001", "CREATE TABLE a (x INTEGER)")]) == ["001"])
    }

    @Test("A write that throws is rolled back; constraint violations are reported with their code")
    func transactions() async throws {
        let database = try Database(path: ":memory:")
        try await database.migrate(Self.schema)
        struct Abort: Error {}
        await #expect(throws: Abort.self) {
            try await database.write { connection in
                try connection.execute("INSERT INTO accounts VALUES ('a1', 'USA')")
                throw Abort()
            }
        }
        #expect(try await database.read { try $0.execute("SELECT * FROM accounts") }.isEmpty)
        try await database.write { try $0.execute("INSERT INTO accounts VALUES ('a1', 'USA')") }
        do {
            try await database.write { try $0.execute("INSERT INTO accounts VALUES (?, ?)", ["a1", "FRA"]) }
            Issue.record("duplicate primary key accepted")
        } catch let error as SQLiteError {
            #expect(error.isConstraintViolation)
            #expect(!error.description.contains("FRA"))
        }
        // Foreign keys are enforced.
        await #expect(throws: SQLiteError.self) {
            try await database.write { try $0.execute("INSERT INTO transactions VALUES ('t1', 'nobody', 1)") }
        }
    }

    @Test("Committed writes survive closing and reopening the file")
    func durability() async throws {
        let path = try Self.temporaryPath()
        do {
            let database = try Database(path: path)
            try await database.migrate(Self.schema)
            try await database.write { try $0.execute("INSERT INTO accounts VALUES (?, ?)", ["a1", "USA"]) }
        }
        let reopened = try Database(path: path)
        #expect(try await reopened.migrate(Self.schema).isEmpty)
        let rows = try await reopened.read { try $0.execute("SELECT storefront FROM accounts WHERE id = ?", ["a1"]) }
        #expect(rows.first?["storefront"] == "USA")
    }

    @Test("Concurrent writers are serialised: no write is lost")
    func concurrency() async throws {
        let database = try Database(path: try Self.temporaryPath())
        try await database.migrate(Self.schema)
        try await database.write { try $0.execute("INSERT INTO accounts VALUES ('a1', 'USA')") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                group.addTask {
                    _ = try await database.write { connection in
                        try connection.execute(
                            "INSERT INTO transactions VALUES (?, 'a1', ?)",
                            [.text("t\(index)"), .integer(Int64(index))])
                    }
                }
            }
            try await group.waitForAll()
        }
        let total = try await database.read {
            try $0.execute("SELECT COUNT(*) AS n, SUM(amount) AS s FROM transactions")
        }
        #expect(total.first?["n"] == .integer(200))
        #expect(total.first?["s"] == .integer(19_900))
    }

    @Test("Reads on the reading connections see every committed write, in one snapshot each, while writes go on")
    func concurrentReads() async throws {
        let database = try Database(path: try Self.temporaryPath())
        try await database.migrate(Self.schema)
        try await database.write { try $0.execute("INSERT INTO accounts VALUES ('a1', 'USA')") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<100 {
                group.addTask {
                    _ = try await database.writeGrouped { connection in
                        try connection.execute(
                            "INSERT INTO transactions VALUES (?, 'a1', ?)", [.text("t\(index)"), .integer(1)])
                    }
                    // Acknowledged: a read that starts now sees it, and its two statements see one state.
                    let (count, sum) = try await database.readConcurrently { connection in
                        let own = try connection.execute(
                            "SELECT COUNT(*) AS n FROM transactions WHERE id = ?", [.text("t\(index)")])
                        let all = try connection.execute("SELECT COUNT(*) AS n FROM transactions")
                        let sum = try connection.execute("SELECT SUM(amount) AS s FROM transactions")
                        return (own.first?["n"], all.first?["n"] == sum.first?["s"])
                    }
                    #expect(count == .integer(1))
                    #expect(sum)
                }
            }
            try await group.waitForAll()
        }
        await #expect(throws: SQLiteError.self) {
            try await database.readConcurrently { try $0.execute("DELETE FROM transactions") }
        }
        let total = try await database.readConcurrently { try $0.execute("SELECT COUNT(*) AS n FROM transactions") }
        #expect(total.first?["n"] == .integer(100))
        // Sixty-four slow reads at once: at most eight reading connections; the rest wait on the writer's.
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    try await database.readConcurrently { connection in
                        usleep(5_000)
                        return try connection.execute("SELECT COUNT(*) AS n FROM transactions").first?["n"]
                            == .integer(100)
                    }
                }
            }
            for try await right in group { #expect(right) }
        }
        #expect((1...8).contains(database.readingConnections))
    }

    @Test(
        "Grouped writes: one that throws is rolled back alone; repeatable ones may run again, the others once",
        arguments: [false, true])
    func groupedFailures(repeatable: Bool) async throws {
        let database = try Database(path: try Self.temporaryPath())
        try await database.migrate(Self.schema)
        try await database.write { try $0.execute("INSERT INTO accounts VALUES ('a1', 'USA')") }
        struct Refused: Error {}
        final class Runs: Sendable { let counts = Mutex([Int: Int]()) }
        let runs = Runs()
        let before = database.writeCounts
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<120 {
                group.addTask {
                    do {
                        _ = try await database.writeGrouped(repeatable: repeatable) { connection in
                            runs.counts.withLock { $0[index, default: 0] += 1 }
                            // The first holds the writer while the others gather into groups behind it.
                            if index == 0 { usleep(20_000) }
                            try connection.execute(
                                "INSERT INTO transactions VALUES (?, 'a1', ?)",
                                [.text("t\(index)"), .integer(Int64(index))])
                            // Every tenth throws after its change: the change must not stay.
                            if index % 10 == 5 { throw Refused() }
                        }
                        return index % 10 != 5
                    } catch is Refused {
                        return index % 10 == 5
                    }
                }
            }
            for try await answered in group { #expect(answered) }
        }
        let rows = try await database.read { try $0.execute("SELECT id FROM transactions ORDER BY amount") }
        #expect(rows.count == 108)
        #expect(!rows.contains { $0["id"] == "t5" || $0["id"] == "t115" })
        let counts = runs.counts.withLock { $0 }
        #expect(counts.count == 120)
        // Groups: fewer transactions than writes; a group that failed without savepoints is counted twice.
        let counted = database.writeCounts.since(before)
        #expect(counted.transactions >= 1 && counted.transactions < 120)
        if repeatable {
            // A group with a failure ran again: some bodies ran twice, none more.
            #expect(counts.values.allSatisfy { (1...2).contains($0) })
            #expect(counts.values.contains(2))
            #expect(counted.writes > 120)
        } else {
            #expect(counts.values.allSatisfy { $0 == 1 })
            #expect(counted.writes == 120)
        }
        try await database.write { try $0.execute("DELETE FROM transactions WHERE id = 't0'") }
        #expect(
            database.writeCounts.since(before)
                == WriteCounts(transactions: counted.transactions + 1, writes: counted.writes + 1))
    }

    @Test(
        "Gathering: writes from several callers on a busy machine wait for the target; otherwise none waits",
        arguments: [true, false])
    func gathering(busy: Bool) async throws {
        // Two minutes: a wait that should not happen would hold the test far past the limits below.
        let database = try Database(
            path: try Self.temporaryPath(),
            gathering: GroupGathering(maxDelay: .seconds(120), target: 3, busy: { busy }))
        try await database.migrate(Self.schema)
        try await database.write { try $0.execute("INSERT INTO accounts VALUES ('a1', 'USA')") }
        let clock = ContinuousClock()
        let start = clock.now
        // A lone write never waits, busy or not.
        _ = try await database.writeGrouped { try $0.execute("INSERT INTO transactions VALUES ('alone', 'a1', 1)") }
        #expect(clock.now - start < .seconds(60))
        let (holder, release) = try await Self.holdWriter(database)
        let before = database.writeCounts
        final class Done: Sendable { let count = Atomic<Int>(0) }
        let done = Done()
        func insert(_ index: Int) -> Task<Void, any Error> {
            Task {
                _ = try await database.writeGrouped { connection in
                    try connection.execute(
                        "INSERT INTO transactions VALUES (?, 'a1', ?)", [.text("t\(index)"), .integer(1)])
                }
                done.count.add(1, ordering: .sequentiallyConsistent)
            }
        }
        // Two callers wait behind the held writer.
        var writes = [insert(0), insert(1)]
        for _ in 0..<30_000 where database.waitingWrites < 2 { try await Task.sleep(for: .milliseconds(2)) }
        #expect(database.waitingWrites == 2)
        let released = clock.now
        release.signal()
        try await holder.value
        if busy {
            // The group waits for a third write: nothing commits meanwhile.
            try await Task.sleep(for: .milliseconds(300))
            #expect(done.count.load(ordering: .sequentiallyConsistent) == 0)
            #expect(database.waitingWrites == 2)
            writes.append(insert(2))
        }
        for write in writes { try await write.value }
        #expect(clock.now - released < .seconds(60))
        // One transaction: the two, and the third when it waited for it.
        #expect(database.writeCounts.since(before) == WriteCounts(transactions: 1, writes: busy ? 3 : 2))
        let rows = try await database.read { try $0.execute("SELECT count(*) AS n FROM transactions") }
        #expect(rows.first?["n"] == .integer(busy ? 4 : 3))
    }

    @Test(
        "Grouped writes in order behind a held writer: whichever throws, the first or a later one, is rolled back alone",
        arguments: [0, 1])
    func groupedFirstWrite(failing: Int) async throws {
        let database = try Database(path: try Self.temporaryPath())
        try await database.migrate(Self.schema)
        try await database.write { try $0.execute("INSERT INTO accounts VALUES ('a1', 'USA')") }
        struct Refused: Error {}
        // A write holds the writer while three grouped writes queue behind it, in order.
        let (holder, release) = try await Self.holdWriter(database)
        let before = database.writeCounts
        var writes: [Task<Bool, any Error>] = []
        for index in 0..<3 {
            writes.append(
                Task {
                    do {
                        _ = try await database.writeGrouped { connection in
                            try connection.execute(
                                "INSERT INTO transactions VALUES (?, 'a1', ?)", [.text("t\(index)"), .integer(1)])
                            if index == failing { throw Refused() }
                        }
                        return true
                    } catch is Refused {
                        return false
                    }
                })
            for _ in 0..<30_000 where database.waitingWrites <= index { try await Task.sleep(for: .milliseconds(2)) }
            #expect(database.waitingWrites == index + 1)
        }
        release.signal()
        try await holder.value
        var answered: [Bool] = []
        for write in writes { answered.append(try await write.value) }
        #expect(answered == (0..<3).map { $0 != failing })
        let rows = try await database.read { try $0.execute("SELECT id FROM transactions ORDER BY id") }
        #expect(rows.map { $0["id"] } == (0..<3).filter { $0 != failing }.map { .text("t\($0)") })
        // The three were one group: one transaction.
        #expect(database.writeCounts.since(before) == WriteCounts(transactions: 1, writes: 3))
    }

    @Test("The WAL stays bounded under continuous writes: checkpoints run beside the writer and it starts again")
    func walBounded() async throws {
        let path = try Self.temporaryPath()
        let database = try Database(path: path)
        try await database.migrate([Migration("001-blobs", "CREATE TABLE blobs (id INTEGER PRIMARY KEY, body BLOB)")])
        // 96 MiB in writes of 1 MiB: six times the 16 MiB of WAL at which a checkpoint is asked for.
        let body = [UInt8](repeating: 7, count: 1 << 20)
        var largest = 0
        for index in 0..<96 {
            _ = try await database.writeGrouped(repeatable: true) { connection in
                try connection.execute("INSERT INTO blobs VALUES (?, ?)", [.integer(Int64(index)), .blob(body)])
            }
            let size = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
            largest = max(largest, size)
        }
        // At most three times the threshold of 4,000 pages of 4 KiB, and one write past it.
        #expect(largest > 0)
        #expect(largest <= 3 * 4_000 * 4_096 + 2 * (1 << 20) + 65_536)
        let count = try await database.read { try $0.execute("SELECT COUNT(*) AS n FROM blobs") }
        #expect(count.first?["n"] == .integer(96))
    }

    @Test("A database let go closes its connections: the last one to close removes the WAL")
    func closes() async throws {
        let path = try Self.temporaryPath()
        do {
            let database = try Database(path: path)
            try await database.migrate(Self.schema)
            _ = try await database.writeGrouped(repeatable: true) {
                try $0.execute("INSERT INTO accounts VALUES ('a1', 'USA')")
            }
            _ = try await database.readConcurrently { try $0.execute("SELECT * FROM accounts") }
            #expect(FileManager.default.fileExists(atPath: path + "-wal"))
        }
        for _ in 0..<200 where FileManager.default.fileExists(atPath: path + "-wal") {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
    }

    @Test("A parameter count mismatch is an error, not undefined behaviour")
    func parameterCount() async throws {
        let database = try Database(path: ":memory:")
        await #expect(throws: SQLiteError.self) { try await database.read { try $0.execute("SELECT ?", []) } }
        await #expect(throws: SQLiteError.self) { try await database.read { try $0.execute("SELEC 1") } }
    }
}
