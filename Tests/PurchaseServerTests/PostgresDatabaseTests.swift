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
