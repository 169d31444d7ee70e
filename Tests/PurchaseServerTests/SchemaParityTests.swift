import Foundation
import PurchaseServer
import StorekeeperPostgres
import StorekeeperSQL
import StorekeeperTestSupport
import Testing

/// The server's two SQL backends hold the same things: after their migrations, SQLite and PostgreSQL have
/// the same tables with the same columns (types differ by dialect: TEXT/BLOB/REAL against TEXT/BYTEA/
/// DOUBLE PRECISION; the few tables only one dialect needs are named below).
@Suite(
    "Purchase server: both SQL backends end with the same schema",
    .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage),
    .enabled(if: ExternalTool.find("sqlite3") != nil, "needs the sqlite3 command"))
struct SchemaParityTests {
    /// Tables only one backend has, and why.
    static let onlySQLite: Set<String> = ["sqlite_sequence"]  // SQLite's own AUTOINCREMENT bookkeeping
    /// Many processes take from one App Store Server API budget under a row lock; one SQLite process keeps
    /// its budgets among its checkpoints.
    static let onlyPostgres: Set<String> = ["request_budgets"]

    @Test("Tables and columns match after every migration")
    func parity() async throws {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path
        _ = try await SQLiteServerStorage(path: path)
        let sqlite = try ExternalTool.run(
            try #require(ExternalTool.find("sqlite3")),
            [
                path,
                """
                SELECT m.name || '.' || p.name FROM sqlite_master m, pragma_table_info(m.name) p
                WHERE m.type = 'table' ORDER BY 1
                """,
            ])
        #expect(sqlite.status == 0, "\(sqlite.stderrText)")
        let url = try PostgresTesting.freshDatabase()
        _ = try await PostgresServerStorage(url: url, poolSize: 1)
        let connection = try PostgresConnection(url: url)
        let postgres = try connection.execute(
            """
            SELECT table_name || '.' || column_name AS name FROM information_schema.columns
            WHERE table_schema = 'public' ORDER BY 1
            """
        ).compactMap { $0["name"].string }
        func tables(_ columns: [String]) -> Set<String> {
            Set(columns.compactMap { $0.split(separator: ".").first.map(String.init) })
        }
        let fromSQLite = sqlite.stdoutText.split(separator: "\n").map(String.init).filter {
            !Self.onlySQLite.contains(String($0.split(separator: ".")[0]))
        }
        let fromPostgres = postgres.filter { !Self.onlyPostgres.contains(String($0.split(separator: ".")[0])) }
        #expect(tables(fromSQLite).count >= 5, "the schema was read: \(fromSQLite)")
        #expect(
            Set(fromSQLite).subtracting(fromPostgres).isEmpty,
            "only in SQLite: \(Set(fromSQLite).subtracting(fromPostgres).sorted())")
        #expect(
            Set(fromPostgres).subtracting(fromSQLite).isEmpty,
            "only in PostgreSQL: \(Set(fromPostgres).subtracting(fromSQLite).sorted())")
    }
}
