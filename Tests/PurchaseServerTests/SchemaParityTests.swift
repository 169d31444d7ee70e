import Foundation
import PurchaseServer
import StorekeeperPostgres
import StorekeeperSQL
import StorekeeperTestSupport
import Testing

/// The server's schema is declared once (`ServerSchema.current`) and each backend keeps the migrations its
/// older databases went through. Both routes must end in the same place, on both backends, and the two
/// backends must hold the same tables and columns (types differ by dialect: TEXT/BLOB/REAL against
/// TEXT/BYTEA/DOUBLE PRECISION; the few tables only one dialect needs are named below).
@Suite(
    "Purchase server: one schema, both SQL backends, old databases and new",
    .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage),
    .enabled(if: ExternalTool.find("sqlite3") != nil, "needs the sqlite3 command"))
struct SchemaParityTests {
    /// Tables only one backend has, and why.
    static let onlySQLite: Set<String> = ["sqlite_sequence"]  // SQLite's own AUTOINCREMENT bookkeeping
    /// Many processes take from one App Store Server API budget under a row lock; one SQLite process keeps
    /// its budgets among its checkpoints. The leases of processes answering reads from memory: one SQLite
    /// process has no one to wait for.
    static let onlyPostgres: Set<String> = ["request_budgets", "cache_readers"]
    /// The transaction that last changed a user: what processes sharing PostgreSQL ask for (one SQLite
    /// process knows its own writes).
    static let onlyPostgresColumns: Set<String> = ["subscribers.changed"]

    /// Every column (`table.column type notnull pk`) and index (`table index unique partial columns`).
    static func sqliteSchema(replayingHistory: Bool) async throws -> (columns: [String], indexes: [String]) {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path
        _ = try await SQLiteServerStorage(path: path, replayingHistory: replayingHistory)
        func query(_ sql: String) throws -> [String] {
            let result = try ExternalTool.run(try #require(ExternalTool.find("sqlite3")), [path, sql])
            #expect(result.status == 0, "\(result.stderrText)")
            return result.stdoutText.split(separator: "\n").map(String.init)
        }
        let columns = try query(
            """
            SELECT m.name || '.' || p.name || ' ' || p.type || ' ' || p."notnull" || ' ' || p.pk
            FROM sqlite_master m, pragma_table_info(m.name) p WHERE m.type = 'table' AND m.name != 'schema_migrations'
            ORDER BY 1
            """)
        let indexes = try query(
            """
            SELECT m.name || ' ' || l.name || ' ' || l."unique" || ' ' || l.partial || ' ' ||
                (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_index_xinfo(l.name) WHERE key
                    ORDER BY seqno))
            FROM sqlite_master m, pragma_index_list(m.name) l WHERE m.type = 'table' ORDER BY 1
            """)
        return (columns, indexes)
    }

    /// Every column (`table.column type nullable identity`) and index definition.
    static func postgresSchema(replayingHistory: Bool) async throws -> (columns: [String], indexes: [String]) {
        let url = try PostgresTesting.freshDatabase()
        _ = try await PostgresServerStorage(url: url, poolSize: 1, replayingHistory: replayingHistory)
        let connection = try PostgresConnection(url: url)
        let columns = try connection.execute(
            """
            SELECT c.table_name || '.' || c.column_name || ' ' || c.data_type || ' ' || c.is_nullable || ' ' ||
                c.is_identity || ' ' || a.attstorage::text AS line
            FROM information_schema.columns c
            JOIN pg_attribute a ON a.attrelid = ('public.' || quote_ident(c.table_name))::regclass
                AND a.attname = c.column_name
            WHERE c.table_schema = 'public' AND c.table_name != 'schema_migrations' ORDER BY 1
            """
        ).compactMap { $0["line"].string }
        let indexes = try connection.execute(
            """
            SELECT indexdef AS line FROM pg_indexes
            WHERE schemaname = 'public' AND tablename != 'schema_migrations' ORDER BY 1
            """
        ).compactMap { $0["line"].string }
        return (columns, indexes)
    }

    @Test("A new database (the schema declared once) equals one brought up through every migration")
    func currentEqualsHistory() async throws {
        let sqliteNew = try await Self.sqliteSchema(replayingHistory: false)
        let sqliteOld = try await Self.sqliteSchema(replayingHistory: true)
        #expect(sqliteNew.columns.count >= 40 && sqliteNew.indexes.count >= 10, "read: \(sqliteNew)")
        #expect(sqliteNew.columns == sqliteOld.columns)
        #expect(sqliteNew.indexes == sqliteOld.indexes)
        let postgresNew = try await Self.postgresSchema(replayingHistory: false)
        let postgresOld = try await Self.postgresSchema(replayingHistory: true)
        #expect(postgresNew.columns.count >= 40 && postgresNew.indexes.count >= 10, "read: \(postgresNew)")
        #expect(postgresNew.columns == postgresOld.columns)
        #expect(postgresNew.indexes == postgresOld.indexes)
        // Raw inputs are stored out of line, never compressed (attstorage 'e'), on both routes.
        #expect(postgresNew.columns.contains("inputs.body bytea NO NO e"), "\(postgresNew.columns)")
    }

    @Test("Both backends hold the same tables and columns")
    func parity() async throws {
        func names(_ columns: [String], without: Set<String>) -> Set<String> {
            Set(
                columns.compactMap { $0.split(separator: " ").first.map(String.init) }.filter {
                    !without.contains(String($0.split(separator: ".")[0]))
                })
        }
        let fromSQLite = names(try await Self.sqliteSchema(replayingHistory: false).columns, without: Self.onlySQLite)
        let fromPostgres = names(
            try await Self.postgresSchema(replayingHistory: false).columns, without: Self.onlyPostgres
        ).subtracting(Self.onlyPostgresColumns)
        #expect(fromSQLite.count >= 40, "the schema was read: \(fromSQLite)")
        #expect(
            fromSQLite.subtracting(fromPostgres).isEmpty,
            "only in SQLite: \(fromSQLite.subtracting(fromPostgres).sorted())")
        #expect(
            fromPostgres.subtracting(fromSQLite).isEmpty,
            "only in PostgreSQL: \(fromPostgres.subtracting(fromSQLite).sorted())")
    }
}
