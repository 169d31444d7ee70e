import StorekeeperSQL
import StorekeeperSQLite
import Testing

@Suite("Prepared statements and rows by name")
struct StatementCacheTests {
    /// `SELECT <digit> AS v`, padded with a comment to 80 bytes: the digit sits where the cache's fingerprint
    /// (the length and eight bytes from the end, ten apart) does not look.
    static func padded(_ digit: Int) -> String {
        let text = "SELECT \(digit) AS v -- "
        return text + String(repeating: "x", count: 80 - text.utf8.count)
    }

    @Test("Texts alike in length and in the bytes the cache samples are different statements")
    func sameFingerprint() async throws {
        let database = try Database(path: ":memory:")
        let (one, two) = (Self.padded(1), Self.padded(2))
        #expect(one.utf8.count == 80 && two.utf8.count == 80)
        let answers = try await database.read { connection in
            try (1...3).map { _ in
                (try connection.execute(one).first?["v"], try connection.execute(two).first?["v"])
            }
        }
        for (first, second) in answers {
            #expect(first == .integer(1))
            #expect(second == .integer(2))
        }
    }

    @Test("The same text made again at run time finds its statement, and a schema change its new columns")
    func sameTextAgain() async throws {
        let database = try Database(path: ":memory:")
        try await database.write { try $0.execute("CREATE TABLE t (a INTEGER)") }
        try await database.write { try $0.execute("INSERT INTO t (a) VALUES (7)") }
        let first = try await database.read { try $0.execute(["SELECT", "*", "FROM", "t"].joined(separator: " ")) }
        try await database.write { try $0.execute("ALTER TABLE t ADD COLUMN bb TEXT DEFAULT 'x'") }
        let second = try await database.read { try $0.execute(["SELECT", "*", "FROM", "t"].joined(separator: " ")) }
        #expect(first.first?.columns == ["a"])
        #expect(second.first?.columns == ["a", "bb"])
        #expect(second.first?["bb"] == .text("x"))
    }

    @Test("A row's columns by name: names of one length told apart, a missing name null")
    func rowByName() async throws {
        let database = try Database(path: ":memory:")
        let row = try await database.read {
            try $0.execute(
                "SELECT 1 AS ab, 2 AS cd, 3 AS abc, 4 AS original_purchase_date, 5 AS original_purchase_datf")
        }.first
        #expect(row?["cd"] == .integer(2))
        #expect(row?["ab"] == .integer(1))
        #expect(row?["abc"] == .integer(3))
        #expect(row?["original_purchase_datf"] == .integer(5))
        #expect(row?["original_purchase_date"] == .integer(4))
        #expect(row?["zz"] == .null)
        #expect(row?["c"] == .null)
    }
}

@Suite("What each of the writer's statements costs")
struct StatementCostTests {
    @Test("Counted only while on, from zero: each statement's calls, scripts too, the costliest first")
    func counted() async throws {
        let database = try Database(path: ":memory:")
        try await database.write { try $0.execute("CREATE TABLE t (a INTEGER)") }
        #expect(await database.writerStatementCosts.isEmpty)
        await database.countWriterStatements(true)
        let insert = "INSERT INTO t (a) VALUES (?)"
        try await database.write { connection in
            for value in 0..<3 { try connection.execute(insert, [.integer(Int64(value))]) }
            // Enough work to take measurable CPU: a recursive count to 200,000.
            try connection.execute(
                "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 200000) SELECT count(*) FROM c"
            )
        }
        let costs = await database.writerStatementCosts
        let calls = Dictionary(costs.map { ($0.sql, $0.calls) }, uniquingKeysWith: +)
        #expect(calls[insert] == 3)
        #expect(calls["BEGIN IMMEDIATE"] == 1)
        #expect(calls["COMMIT"] == 1)
        #expect(calls["CREATE TABLE t (a INTEGER)"] == nil, "run before counting began")
        #expect(costs.first?.sql.hasPrefix("WITH RECURSIVE") == true, "the costliest first")
        #expect(costs.first.map { $0.cpu > .zero } == true)
        #expect(zip(costs, costs.dropFirst()).allSatisfy { $0.cpu >= $1.cpu })
        // Off: what was counted is forgotten, and nothing more is counted.
        await database.countWriterStatements(false)
        try await database.write { try $0.execute(insert, [.integer(9)]) }
        #expect(await database.writerStatementCosts.isEmpty)
    }

    @Test("Statements the cache lets go (past 256) keep their counts")
    func keptPastTheCache() async throws {
        let database = try Database(path: ":memory:")
        await database.countWriterStatements(true)
        try await database.read { connection in
            for _ in 0..<2 {
                for value in 0..<300 { _ = try connection.execute("SELECT \(value) AS v") }
            }
        }
        let costs = await database.writerStatementCosts
        #expect(costs.count == 300)
        #expect(costs.allSatisfy { $0.calls == 2 })
    }
}
