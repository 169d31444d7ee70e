public import StorekeeperSQL
import Synchronization

/// A SQLite database reached only through ``read(_:)`` and transactional ``write(_:)`` closures, each run on
/// the database's own serial executor (GRDB's model). Opened in WAL mode with `synchronous=FULL`, so a write
/// that returned is on disk.
public actor Database {
    private let executor: DispatchSerialExecutor
    private let connection: Connection

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// Run on the writer's executor after every write transaction ends (committed or rolled back), before
    /// any other write begins and before the writes are answered.
    private let afterCommit: @Sendable () -> Void

    /// Opens or creates the database file at `path` (`":memory:"` for a private in-memory database).
    /// `afterCommit` runs after every write transaction ends (see ``readConcurrently(_:)``: a reader that
    /// keeps what it read must know which writes have committed).
    public init(path: String, afterCommit: @escaping @Sendable () -> Void = {}) throws(SQLiteError) {
        self.afterCommit = afterCommit
        executor = DispatchSerialExecutor(label: "storekeeper.sqlite")
        connection = try Connection(path: path)
        if path != ":memory:" { try connection.execute("PRAGMA journal_mode=WAL") }
        try connection.executeScript("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
        // A write of a few hundred renewals and notifications dirties megabytes of pages: with SQLite's
        // default 2 MiB cache it spilled them into the WAL mid-transaction and read them back, and every
        // commit crossed the 1,000-page checkpoint mark. Up to 32 MiB of cache (used only as it fills) and
        // a checkpoint every 4,000 pages (16 MiB of WAL) copy each hot page back once per checkpoint.
        try connection.executeScript("PRAGMA cache_size=-32768; PRAGMA wal_autocheckpoint=4000;")
        // Savepoints of a group commit keep their sub-journal in memory.
        try connection.executeScript("PRAGMA temp_store=MEMORY")
        readers = path == ":memory:" ? nil : ReaderPool(path: path)
    }

    /// Reading connections open now (at most ``ReaderPool/limit``).
    package nonisolated var readingConnections: Int { readers?.open ?? 0 }

    /// Runs `body` with the connection, outside any explicit transaction.
    @discardableResult
    public func read<T: Sendable>(_ body: @Sendable (Connection) throws -> T) throws -> T {
        try body(connection)
    }

    /// Connections that only read, beside the writer's: WAL lets them read the last commit while the writer
    /// writes, so reads neither wait for a group commit nor hold one up. Nil for `:memory:` (a private
    /// database no other connection can open).
    private nonisolated let readers: ReaderPool?

    /// Runs `body` in a read transaction of its own (one snapshot: the last commit when it began) on one of
    /// the reading connections, on the caller's thread. With every reading connection busy (or for
    /// `:memory:`), it waits its turn on the writer's connection instead.
    public nonisolated func readConcurrently<T: Sendable>(_ body: @Sendable (Connection) throws -> T) async throws -> T
    {
        guard let readers, let connection = try readers.take() else { return try await read(body) }
        defer { readers.give(connection) }
        try connection.executeScript("BEGIN")
        defer { try? connection.executeScript("COMMIT") }
        return try body(connection)
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    @discardableResult
    public func write<T: Sendable>(_ body: @Sendable (Connection) throws -> T) throws -> T {
        try connection.executeScript("BEGIN IMMEDIATE")
        defer { afterCommit() }
        do {
            let result = try body(connection)
            try connection.executeScript("COMMIT")
            return result
        } catch {
            try? connection.executeScript("ROLLBACK")
            throw error
        }
    }

    /// Writes waiting for the next group commit.
    private var group: [GroupedWrite] = []

    private struct GroupedWrite {
        let body: (Connection) throws -> any Sendable
        let resume: (Result<any Sendable, any Error>) -> Void
    }

    /// Runs `body` in a transaction shared with the other grouped writes waiting at the moment it runs (a
    /// group commit: one fsync for many). Each body is all or nothing on its own — a savepoint rolls back
    /// one that throws — and a write returns only after the group committed, so it is durable.
    public func writeGrouped<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let result: any Sendable = try await withCheckedThrowingContinuation { continuation in
            group.append(
                GroupedWrite(body: { try body($0) }, resume: { continuation.resume(with: $0) }))
            // A task on this actor: it runs after the jobs already waiting, so their writes join the group.
            if group.count == 1 { Task { self.commitGroup() } }
        }
        return result as! T
    }

    /// Runs every waiting write in one transaction and answers them once it committed.
    private func commitGroup() {
        let writes = group
        group = []
        guard !writes.isEmpty else { return }
        var results: [Result<any Sendable, any Error>] = []
        // The hook runs once the transaction has ended and before any write is answered: a write's caller
        // that reads next must find nothing kept from before its own commit.
        do {
            try connection.executeScript("BEGIN IMMEDIATE")
            // Alone, a write is the transaction: no savepoint (inside a transaction one makes SQLite copy every
            // page it changes to a sub-journal, a third of a large write's time).
            if writes.count == 1 {
                do {
                    results.append(.success(try writes[0].body(connection)))
                } catch {
                    try connection.executeScript("ROLLBACK")
                    afterCommit()
                    writes[0].resume(.failure(error))
                    return
                }
            }
            for write in writes where writes.count > 1 {
                try connection.executeScript("SAVEPOINT grouped")
                do {
                    results.append(.success(try write.body(connection)))
                    try connection.executeScript("RELEASE grouped")
                } catch {
                    try connection.executeScript("ROLLBACK TO grouped; RELEASE grouped")
                    results.append(.failure(error))
                }
            }
            try connection.executeScript("COMMIT")
        } catch {
            try? connection.executeScript("ROLLBACK")
            afterCommit()
            for write in writes { write.resume(.failure(error)) }
            return
        }
        afterCommit()
        for (write, result) in zip(writes, results) { write.resume(result) }
    }

    /// Applies the migrations not yet recorded in `schema_migrations`, in order, each in its own transaction;
    /// returns the ids applied. Refuses a database that has a migration this list does not start with
    /// (a newer build's, or an edited list). An empty database gets `baseline` instead, when there is one
    /// (``Migration/run(_:baseline:on:timestamp:misuse:step:)``).
    @discardableResult
    public func migrate(_ migrations: [Migration], baseline: String? = nil) throws -> [String] {
        try Migration.run(
            migrations, baseline: baseline, on: connection, timestamp: "TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP",
            misuse: { SQLiteError(code: .misuse, message: $0, sql: nil) }
        ) { apply in try write { try apply($0) } }
    }
}

/// Reading connections to one database file, opened as needed, at most `limit` of them.
final class ReaderPool: Sendable {
    // @unchecked Sendable: a connection is used by one thread at a time, the one that took it from the pool.
    private struct State: @unchecked Sendable {
        var idle: [Connection] = []
        var open = 0
    }
    private let state = Mutex(State())
    private let path: String
    static let limit = 8

    init(path: String) { self.path = path }

    /// An idle connection, a new one while fewer than `limit` are open, or nil when all are busy.
    func take() throws -> Connection? {
        enum Taken { case idle(Connection), new, none }
        let taken: Taken = state.withLock { state in
            if let connection = state.idle.popLast() { return .idle(connection) }
            guard state.open < Self.limit else { return .none }
            state.open += 1
            return .new
        }
        switch taken {
        case .idle(let connection): return connection
        case .none: return nil
        case .new:
            do {
                let connection = try Connection(path: path)
                // Reads only; a small cache each (the writer's holds the hot pages, the OS the rest).
                try connection.executeScript("PRAGMA query_only=1; PRAGMA cache_size=-8192;")
                return connection
            } catch {
                state.withLock { $0.open -= 1 }
                throw error
            }
        }
    }

    func give(_ connection: Connection) { state.withLock { $0.idle.append(connection) } }

    var open: Int { state.withLock { $0.open } }
}
