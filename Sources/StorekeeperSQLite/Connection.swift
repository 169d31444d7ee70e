internal import CStorekeeperSQLite
internal import CStorekeeperSQLiteVFS
public import StorekeeperSQL

#if canImport(Glibc)
    import Glibc
#endif

/// One SQLite connection. Not thread-safe: ``Database`` confines it to its own serial executor.
public final class Connection {
    private let handle: OpaquePointer  // sqlite3, owned

    /// Opens (creating if needed) the database at `path`; `":memory:"` for a private in-memory database.
    /// `gatheringWAL` writes each transaction's WAL frames in one call (``gatheringVFS``); only for a
    /// connection that syncs at every commit (`synchronous=FULL`), which it sets itself.
    package init(path: String, gatheringWAL: Bool = false) throws(SQLiteError) {
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let vfs = gatheringWAL ? try Self.gatheringVFS() : nil
        let status = sqlite3_open_v2(path, &db, flags, vfs)
        guard status == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            throw SQLiteError(code: .init(status), message: message, sql: nil)
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 5000)
        // Before any write: every commit syncs the WAL, which writes the VFS's buffer out first.
        if gatheringWAL { try executeScript("PRAGMA synchronous=FULL") }
    }

    /// The VFS that gathers a WAL file's writes (vfs.c), registered at the first use: SQLite writes each WAL
    /// frame as two calls (its header, then its page), ~150 `pwrite`s a group commit of ~70 pages; gathered,
    /// they are three, each of up to 126 KiB, the last before the commit's sync.
    private static func gatheringVFS() throws(SQLiteError) -> String {
        let status = storekeeper_sqlite_vfs_register()
        guard status == SQLITE_OK else {
            throw SQLiteError(code: .init(status), message: "cannot register the WAL-gathering VFS", sql: nil)
        }
        return STOREKEEPER_SQLITE_VFS_NAME
    }

    /// Makes the next `count` writes of a gathered buffer on this thread fail, keeping their bytes (tests).
    package static func failGatheredFlushes(_ count: Int) { storekeeper_sqlite_vfs_fail_flushes(Int32(count)) }

    /// Writes the gathering VFS has taken into a buffer and writes it made to WAL files on this thread
    /// (tests).
    package static var gatheringCounts: (gathered: Int, written: Int) {
        var gathered: Int64 = 0
        var written: Int64 = 0
        storekeeper_sqlite_vfs_counts(&gathered, &written)
        return (Int(gathered), Int(written))
    }

    /// Prepared statements by SQL text, reused (reset and re-bound) by ``execute(_:_:)``.
    private var statements = StatementCache()

    /// Whether each statement's calls and CPU time are counted (``statementCosts``): two reads of the
    /// thread's CPU clock a statement while on, one test of this flag while off.
    package var countsStatements = false
    /// Counts of statements no longer in the cache, and of scripts (`BEGIN`, `COMMIT`, savepoints).
    private var otherCosts: [String: (calls: Int, nanoseconds: Int)] = [:]

    /// What each statement has cost while counted, the costliest first.
    package var statementCosts: [StatementCost] {
        var all = otherCosts
        for entry in statements.entries where entry.calls > 0 {
            Self.tally(&all, entry.sql, calls: entry.calls, nanoseconds: entry.cpuNanoseconds)
        }
        return all.map { StatementCost(sql: $0.key, calls: $0.value.calls, cpu: .nanoseconds($0.value.nanoseconds)) }
            .sorted { ($0.cpu, $1.sql) > ($1.cpu, $0.sql) }
    }

    /// Adds `calls` and `nanoseconds` to `sql`'s counts in `table`.
    private static func tally(
        _ table: inout [String: (calls: Int, nanoseconds: Int)], _ sql: String, calls: Int, nanoseconds: Int
    ) {
        table[sql, default: (0, 0)].calls += calls
        table[sql, default: (0, 0)].nanoseconds += nanoseconds
    }

    /// Forgets what was counted so far.
    package func resetStatementCosts() {
        otherCosts = [:]
        nestedNanoseconds = 0
        for entry in statements.entries { (entry.calls, entry.cpuNanoseconds) = (0, 0) }
    }

    /// The CPU time of the statements that ran inside the one being counted now (a checkpoint the commit
    /// hook runs inside `COMMIT`): taken off its count, so that each nanosecond is counted once.
    private var nestedNanoseconds = 0

    /// Starts counting a statement: its start and the nested time counted so far, for ``counted(since:)``.
    private func startCounting() -> (began: Int, nested: Int) {
        defer { nestedNanoseconds = 0 }
        return (Self.threadNanoseconds(), nestedNanoseconds)
    }

    /// Ends counting a statement begun at `start`: its own CPU time (the statements inside it taken off).
    private func counted(since start: (began: Int, nested: Int)) -> Int {
        let elapsed = Self.threadNanoseconds() - start.began
        defer { nestedNanoseconds = start.nested + elapsed }
        return elapsed - nestedNanoseconds
    }

    /// This thread's CPU time in nanoseconds (0 where the clock cannot be read).
    static func threadNanoseconds() -> Int {
        var time = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time) == 0 else { return 0 }
        return Int(time.tv_sec) &* 1_000_000_000 &+ Int(time.tv_nsec)
    }

    deinit {
        for entry in statements.entries { sqlite3_finalize(entry.statement) }
        sqlite3_close_v2(handle)
    }

    /// What ``onCommit(_:)`` calls, kept alive as long as the connection.
    private final class CommitHook {
        let call: (Int) -> Void
        init(_ call: @escaping (Int) -> Void) { self.call = call }
    }
    private var commitHook: CommitHook?

    /// Calls `hook` after each commit in WAL mode with the number of frames the WAL holds, in place of
    /// SQLite's automatic checkpoint (which ran on the committing connection, inside its write).
    func onCommit(walFrames hook: @escaping (Int) -> Void) {
        let box = CommitHook(hook)
        commitHook = box
        sqlite3_wal_hook(
            handle,
            { context, _, _, frames in
                if let context { Unmanaged<CommitHook>.fromOpaque(context).takeUnretainedValue().call(Int(frames)) }
                return SQLITE_OK
            }, Unmanaged.passUnretained(box).toOpaque())
    }

    private func prepared(_ sql: String) throws(SQLiteError) -> StatementCache.Entry {
        let fingerprint = StatementCache.fingerprint(sql)
        if let entry = statements.entry(sql, fingerprint: fingerprint) { return entry }
        var statement: OpaquePointer?  // sqlite3_stmt
        let status = sql.withCString {
            sqlite3_prepare_v3(handle, $0, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        }
        guard status == SQLITE_OK, let statement else { throw error(status, sql) }
        if statements.count >= 256 {
            for old in statements.removeAll() {
                if old.calls > 0 {
                    Self.tally(&otherCosts, old.sql, calls: old.calls, nanoseconds: old.cpuNanoseconds)
                }
                sqlite3_finalize(old.statement)
            }
        }
        let entry = StatementCache.Entry(sql: sql, statement: statement)
        statements.insert(entry, fingerprint: fingerprint)
        return entry
    }

    /// Result column names, made once per statement rather than per call (a `SELECT *` of a wide table made a
    /// string per column per call); made again when the count changes (a statement SQLite prepared again after
    /// a schema change; no migration renames a column).
    private func columnNames(_ entry: StatementCache.Entry, count: Int32) -> [String] {
        if let names = entry.columns, names.count == Int(count) { return names }
        let names = (0..<count).map { String(cString: sqlite3_column_name(entry.statement, $0)) }
        entry.columns = names
        return names
    }

    /// Runs one statement with bound values and returns every row.
    @discardableResult
    public func execute(_ sql: String, _ values: [SQLValue] = []) throws(SQLiteError) -> [Row] {
        let entry = try prepared(sql)
        let start = countsStatements ? startCounting() : nil
        let statement = entry.statement
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
            if let start {
                entry.calls += 1
                entry.cpuNanoseconds += counted(since: start)
            }
        }
        guard Int(sqlite3_bind_parameter_count(statement)) == values.count else {
            throw SQLiteError(
                code: .misuse,
                message: "\(values.count) values for \(sqlite3_bind_parameter_count(statement)) parameters", sql: sql)
        }
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let status: Int32
            switch value {
            case .null: status = sqlite3_bind_null(statement, index)
            case .integer(let number): status = sqlite3_bind_int64(statement, index, number)
            case .real(let number): status = sqlite3_bind_double(statement, index, number)
            case .text(var text):
                // In place for a native string (no copy of its bytes).
                status = text.withUTF8 { buffer in
                    UnsafeRawPointer(buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!).withMemoryRebound(
                        to: CChar.self, capacity: max(buffer.count, 1)
                    ) { shim_sqlite3_bind_text(statement, index, $0, Int32(buffer.count)) }
                }
            case .blob(let bytes):
                status = bytes.withUnsafeBytes {
                    shim_sqlite3_bind_blob(
                        statement, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count))
                }
            }
            guard status == SQLITE_OK else { throw error(status, sql) }
        }
        var rows: [Row] = []
        // Read after the first step: a statement SQLite prepares again there (the schema changed since it
        // was cached, `SELECT *` after `ALTER TABLE … ADD COLUMN`) may have other columns than before it.
        var columnCount: Int32 = 0
        var columns: [String] = []
        while true {
            let step = sqlite3_step(statement)
            if step == SQLITE_DONE { break }
            guard step == SQLITE_ROW else { throw error(step, sql) }
            if rows.isEmpty {
                columnCount = sqlite3_column_count(statement)
                columns = columnNames(entry, count: columnCount)
            }
            var values: [SQLValue] = []
            values.reserveCapacity(Int(columnCount))
            for column in 0..<columnCount {
                switch sqlite3_column_type(statement, column) {
                case SQLITE_INTEGER: values.append(.integer(sqlite3_column_int64(statement, column)))
                case SQLITE_FLOAT: values.append(.real(sqlite3_column_double(statement, column)))
                case SQLITE_TEXT:
                    let count = Int(sqlite3_column_bytes(statement, column))
                    let text = sqlite3_column_text(statement, column).map {
                        String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
                    }
                    values.append(.text(text ?? ""))
                case SQLITE_BLOB:
                    let count = Int(sqlite3_column_bytes(statement, column))
                    let pointer = sqlite3_column_blob(statement, column)
                    values.append(.blob(pointer.map { Array(UnsafeRawBufferPointer(start: $0, count: count)) } ?? []))
                default: values.append(.null)
                }
            }
            rows.append(Row(columns: columns, values: values))
        }
        return rows
    }

    /// Runs several statements without values (schema scripts).
    public func executeScript(_ sql: String) throws(SQLiteError) {
        let start = countsStatements ? startCounting() : nil
        defer {
            if let start { Self.tally(&otherCosts, sql, calls: 1, nanoseconds: counted(since: start)) }
        }
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &message)
        guard status == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(status))
            sqlite3_free(message)
            throw SQLiteError(code: .init(sqlite3_extended_errcode(handle)), message: text, sql: nil)
        }
    }

    /// The rowid of the last inserted row.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// Rows changed by the last statement.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    private func error(_ status: Int32, _ sql: String) -> SQLiteError {
        SQLiteError(
            code: .init(sqlite3_extended_errcode(handle)), message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }
}

extension Connection: MigrationConnection {}
