import Foundation
import StorekeeperSQL
import StorekeeperSQLite
import StorekeeperTestSupport
import Testing

@testable import AppStoreEmulator

/// Migrations applied to a store written by an earlier build.
@Suite("Emulator schema migrations")
struct EmulatorMigrationTests {
    @Test("Due events stored before migration 020 are kept by it, found by time, in a table without a rowid")
    func dueEventsKept() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        let database = try Database(path: directory.appendingPathComponent("store.sqlite").path)
        let earlier = Array(SQLiteEmulatorStorage.migrations.prefix { $0.id != "020-due-events-without-rowid" })
        #expect(earlier.count < SQLiteEmulatorStorage.migrations.count)
        try await database.migrate(earlier)
        let events: [(String, String, Double)] = [
            ("renewal", "2000000000000007", 50), ("notification-lease", "n-1", 10), ("renewal", "2000000000000003", 20),
        ]
        try await database.write { connection in
            for (kind, key, due) in events {
                try connection.execute(
                    "INSERT INTO due_events (kind, key, due) VALUES (?, ?, ?)", [.text(kind), .text(key), .real(due)])
            }
        }
        let applied = try await database.migrate(SQLiteEmulatorStorage.migrations)
        #expect(applied.first == "020-due-events-without-rowid")
        let rows = try await database.read { connection in
            try connection.execute("SELECT kind, key, due FROM due_events WHERE due <= 60 ORDER BY due, kind, key")
                .map { "\($0["kind"].string ?? "") \($0["key"].string ?? "") \($0["due"].double ?? 0)" }
        }
        #expect(
            rows == [
                "notification-lease n-1 10.0", "renewal 2000000000000003 20.0", "renewal 2000000000000007 50.0",
            ])
        let (plan, definition) = try await database.read { connection in
            (
                try connection.execute(
                    "EXPLAIN QUERY PLAN SELECT kind, key, due FROM due_events WHERE due <= 60 ORDER BY due, kind, key"
                ).compactMap { $0["detail"].string }.joined(separator: "; "),
                try connection.execute("SELECT sql FROM sqlite_master WHERE name = 'due_events'").first?["sql"].string
            )
        }
        #expect(plan.contains("due_events_by_time"), "found by the time index: \(plan)")
        #expect(definition?.contains("WITHOUT ROWID") == true)
        // One row a kind and key still: scheduling again moves the row.
        await #expect(throws: SQLiteError.self) {
            try await database.write { connection in
                try connection.execute(
                    "INSERT INTO due_events (kind, key, due) VALUES ('renewal', '2000000000000007', 99)")
            }
        }
    }
}
