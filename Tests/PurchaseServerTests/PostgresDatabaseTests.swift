import Foundation
import StorekeeperPostgres
import StorekeeperSQL
import StorekeeperTestSupport
import Testing

/// The libpq wrapper on a real server: values both ways, SQLSTATE in errors, retried serialization
/// failures, advisory locks.
@Suite("PostgreSQL wrapper", .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage))
struct PostgresDatabaseTests {
    @Test("Values go and come back as they were; ? placeholders are numbered outside quotes")
    func values() async throws {
        let database = try PostgresDatabase(url: try PostgresTesting.freshDatabase(), poolSize: 2)
        let bytes: [UInt8] = [0, 1, 2, 0xFF, 0x5C, 0x78]
        let row = try await database.read { connection in
            try connection.execute(
                "SELECT ?::bigint AS i, ?::float8 AS r, ? AS t, ?::bytea AS b, ?::text AS n, '?' AS q",
                [.integer(-42), .real(1_800_000_000.125), .text("héllo ?"), .blob(bytes), .null]
            ).first
        }
        #expect(row?["i"] == .integer(-42))
        #expect(row?["r"] == .real(1_800_000_000.125))
        #expect(row?["t"] == .text("héllo ?"))
        #expect(row?["b"] == .blob(bytes))
        #expect(row?["n"] == .null)
        #expect(row?["q"] == .text("?"))
    }

    @Test("A refused statement keeps its SQLSTATE; a wrong URL is a connection error")
    func errors() async throws {
        let database = try PostgresDatabase(url: try PostgresTesting.freshDatabase(), poolSize: 1)
        try await database.write { try $0.executeScript("CREATE TABLE t (k TEXT PRIMARY KEY)") }
        try await database.write { try $0.execute("INSERT INTO t (k) VALUES (?)", [.text("a")]) }
        do {
            try await database.write { try $0.execute("INSERT INTO t (k) VALUES (?)", [.text("a")]) }
            Issue.record("a duplicate key was accepted")
        } catch let error as PostgresError {
            #expect(error.sqlState == "23505")
            #expect(error.isUniqueViolation)
        }
        // The pool's connection is still usable after the error.
        #expect(try await database.read { try $0.execute("SELECT count(*) AS n FROM t").first?["n"] } == .integer(1))
        #expect(throws: PostgresError.self) {
            try PostgresDatabase(url: "postgres://nobody:secret-password@127.0.0.1:1/none", poolSize: 1)
        }
        do { _ = try PostgresConnection(url: "postgres://nobody:secret-password@127.0.0.1:1/none") } catch {
            #expect(error.kind == .connection)
            #expect(!error.description.contains("secret-password"))
        }
    }

    @Test("Connections give up on a silent server: TCP keepalives and a user timeout, unless the URL says otherwise")
    func transportBounds() throws {
        let url = try PostgresTesting.freshDatabase()
        let connection = try PostgresConnection(url: url)
        #expect(connection.option("keepalives") == "1")
        #expect(connection.option("keepalives_idle") == "10")
        #expect(connection.option("keepalives_interval") == "5")
        #expect(connection.option("keepalives_count") == "3")
        #expect(connection.option("tcp_user_timeout") == "35000")
        let own = try PostgresConnection(url: url + (url.contains("?") ? "&" : "?") + "keepalives_idle=60")
        #expect(own.option("keepalives_idle") == "60", "the URL's value wins")
    }

    @Test("Concurrent read-modify-writes of one row are serialized: none is lost")
    func serializable() async throws {
        let database = try PostgresDatabase(url: try PostgresTesting.freshDatabase(), poolSize: 8)
        try await database.write { try $0.executeScript("CREATE TABLE c (k TEXT PRIMARY KEY, n BIGINT NOT NULL)") }
        try await database.write { try $0.execute("INSERT INTO c VALUES ('x', 0)") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    try await database.write { connection in
                        let n = try connection.execute("SELECT n FROM c WHERE k = 'x'").first?["n"].int64 ?? -1
                        try connection.execute("UPDATE c SET n = ? WHERE k = 'x'", [.integer(n + 1)])
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await database.read { try $0.execute("SELECT n FROM c").first?["n"] } == .integer(50))
        #expect(database.retries > 0)
    }

    @Test("A write is pipelined: statements not read go with the next one read, BEGIN and COMMIT included")
    func pipelined() async throws {
        let database = try PostgresDatabase(url: try PostgresTesting.freshDatabase(), poolSize: 1)
        try await database.write { try $0.executeScript("CREATE TABLE p (k TEXT PRIMARY KEY, n BIGINT NOT NULL)") }
        // Prepared once, so the counts below are of statements only.
        try await database.write { connection in
            try connection.executeLater("INSERT INTO p VALUES (?, ?)", [.text("warm"), .integer(0)])
            _ = try connection.execute("SELECT count(*) AS n FROM p")
        }
        let (trips, seen) = try await database.write { connection -> (Int, Int64?) in
            let before = connection.roundTrips
            try connection.executeLater("INSERT INTO p VALUES (?, ?)", [.text("a"), .integer(1)])
            try connection.executeLater("INSERT INTO p VALUES (?, ?)", [.text("b"), .integer(2)])
            // Read after the two inserts, in the same round trip as them (and as BEGIN).
            let n = try connection.execute("SELECT count(*) AS n FROM p").first?["n"].int64
            try connection.executeLater("INSERT INTO p VALUES (?, ?)", [.text("c"), .integer(3)])
            return (connection.roundTrips - before, n)
        }
        #expect(seen == 3, "the read saw the inserts sent before it")
        #expect(trips == 1, "two inserts and a read in one round trip")
        #expect(try await database.read { try $0.execute("SELECT count(*) AS n FROM p").first?["n"] } == .integer(4))

        // A failed statement sent earlier fails the read it went with; the write commits nothing.
        do {
            try await database.write { connection in
                try connection.executeLater("INSERT INTO p VALUES (?, ?)", [.text("d"), .integer(4)])
                try connection.executeLater("INSERT INTO p VALUES (?, ?)", [.text("a"), .integer(5)])
                _ = try connection.execute("SELECT count(*) AS n FROM p")
                Issue.record("the duplicate key went unnoticed")
            }
        } catch let error as PostgresError {
            #expect(error.isUniqueViolation)
        }
        // A caller that catches that failure still cannot commit: PostgreSQL would roll back in silence.
        do {
            try await database.write { connection in
                try connection.executeLater("INSERT INTO p VALUES (?, ?)", [.text("e"), .integer(6)])
                try connection.executeLater("INSERT INTO p VALUES (?, ?)", [.text("a"), .integer(7)])
                _ = try? connection.execute("SELECT 1 AS one")
            }
            Issue.record("a write whose statement failed was reported committed")
        } catch let error as PostgresError {
            #expect(error.isUniqueViolation)
        }
        #expect(try await database.read { try $0.execute("SELECT count(*) AS n FROM p").first?["n"] } == .integer(4))
        // The connection is usable afterwards, in and out of pipeline mode.
        try await database.write { try $0.executeLater("INSERT INTO p VALUES (?, ?)", [.text("f"), .integer(8)]) }
        #expect(try await database.read { try $0.execute("SELECT count(*) AS n FROM p").first?["n"] } == .integer(5))
    }

    @Test("Reads ahead answer the statements they were made for, also when the statement cache is full")
    func readAheadAtTheCacheLimit() async throws {
        let database = try PostgresDatabase(url: try PostgresTesting.freshDatabase(), poolSize: 1)
        let answers = try await database.write { connection -> [Int64?] in
            // Fill the connection's cache to one short of its limit with distinct statements.
            for number in 0..<(PostgresConnection.statementLimit - 1) {
                _ = try connection.execute("SELECT \(number)::bigint AS n")
            }
            let first = ("SELECT ?::bigint + 1000 AS n", [SQLValue.integer(1)])
            let second = ("SELECT ?::bigint + 2000 AS n", [SQLValue.integer(2)])
            let before = connection.roundTrips
            try connection.readAhead([first, second])
            let trips = connection.roundTrips
            #expect(trips == before + 1, "the cache emptied within the read's round trip")
            let answers = [
                try connection.execute(second.0, second.1).first?["n"].int64,
                try connection.execute(first.0, first.1).first?["n"].int64,
            ]
            #expect(connection.roundTrips == trips, "both answered from what was read ahead")
            return answers
        }
        #expect(answers == [2002, 1001])
    }

    @Test("A cache filling between sets of reads sent ahead empties in the pipeline: every set keeps its answers")
    func deallocationInThePipeline() async throws {
        let database = try PostgresDatabase(url: try PostgresTesting.freshDatabase(), poolSize: 1)
        let (trips, answers, held) = try await database.write { connection -> (Int, [Int64?], Int64?) in
            for number in 0..<(PostgresConnection.statementLimit - 1) {
                _ = try connection.execute("SELECT \(number)::bigint AS n")
            }
            let before = connection.roundTrips
            // The first set fills the cache; preparing its second statement empties it, after the first ran.
            let a = ("SELECT ?::bigint + 1000 AS n", [SQLValue.integer(1)])
            let b = ("SELECT ?::bigint + 2000 AS n", [SQLValue.integer(2)])
            let c = ("SELECT ?::bigint + 3000 AS n", [SQLValue.integer(3)])
            let first = try connection.readAheadLater([a, b])
            let second = try connection.readAheadLater([c, a])
            try connection.synchronizeReadAheads()
            let trips = connection.roundTrips - before
            connection.useReadAhead(second)
            var answers = [
                try connection.execute(a.0, a.1).first?["n"].int64, try connection.execute(c.0, c.1).first?["n"].int64,
            ]
            connection.useReadAhead(first)
            answers += [
                try connection.execute(b.0, b.1).first?["n"].int64, try connection.execute(a.0, a.1).first?["n"].int64,
            ]
            #expect(connection.roundTrips - before == trips, "answered from what was read ahead")
            // What the server holds now: the statements prepared after the deallocation, and this one.
            let held = try connection.execute("SELECT count(*) AS n FROM pg_prepared_statements").first?["n"].int64
            return (trips, answers, held)
        }
        #expect(trips == 1, "two sets, a deallocation between them, one round trip")
        #expect(answers == [1001, 3003, 2002, 1001])
        #expect(held.map { $0 <= 4 } == true, "the server deallocated the full cache (\(held ?? -1) held)")
    }

    @Test("A deallocation a failed pipeline skipped runs before the next statement is prepared")
    func missedDeallocation() async throws {
        let database = try PostgresDatabase(url: try PostgresTesting.freshDatabase(), poolSize: 1)
        let first = try await database.write { try $0.execute("SELECT pg_backend_pid() AS pid").first?["pid"] }
        do {
            try await database.write { connection in
                for number in 0..<(PostgresConnection.statementLimit - 2) {
                    _ = try connection.execute("SELECT \(number)::bigint AS n")
                }
                // Fills the cache and aborts the pipeline: the deallocation the next preparation sends after
                // it does not run.
                try connection.executeLater("SELECT 1 / ?::bigint AS n", [.integer(0)])
                _ = try connection.execute("SELECT ?::bigint + 1 AS n", [.integer(1)])
                Issue.record("the division by zero went unnoticed")
            }
        } catch let error as PostgresError {
            #expect(error.sqlState == "22012")
        }
        let (held, pid) = try await database.write { connection in
            (
                try connection.execute("SELECT count(*) AS n FROM pg_prepared_statements").first?["n"].int64,
                try connection.execute("SELECT pg_backend_pid() AS pid").first?["pid"]
            )
        }
        #expect(pid != nil && pid == first, "the same connection, not a new one with nothing prepared")
        #expect(held.map { $0 <= 2 } == true, "the skipped deallocation ran first (\(held ?? -1) held)")
    }

    @Test("An advisory lock has one holder; it passes on when the holder lets go")
    func locks() async throws {
        let url = try PostgresTesting.freshDatabase()
        let first = try PostgresDatabase(url: url, poolSize: 1)
        var second: PostgresDatabase? = try PostgresDatabase(url: url, poolSize: 1)
        #expect(await second!.tryLock("reconcile"))
        #expect(await second!.tryLock("reconcile"))
        #expect(await !first.tryLock("reconcile"))
        #expect(await first.tryLock("other"))
        second = nil  // its connections close, as when a process dies
        var taken = false
        for _ in 0..<100 where !taken {
            taken = await first.tryLock("reconcile")
            if !taken { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(taken)
    }
}
