import Dispatch
public import StorekeeperSQL
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

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
    /// `gathering`, when given, lets a group commit wait a moment for more writes while the machine is busy
    /// (``GroupGathering``).
    public init(
        path: String, gathering: GroupGathering? = nil, afterCommit: @escaping @Sendable () -> Void = {}
    ) throws(SQLiteError) {
        self.afterCommit = afterCommit
        self.gathering = gathering
        if path != ":memory:" { try Self.ownerOnly(path) }
        executor = DispatchSerialExecutor(label: "storekeeper.sqlite")
        connection = try Connection(path: path, gatheringWAL: path != ":memory:")
        if path != ":memory:" { try connection.execute("PRAGMA journal_mode=WAL") }
        try connection.executeScript("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
        // A write of a few hundred renewals and notifications dirties megabytes of pages: with SQLite's
        // default 2 MiB cache it spilled them into the WAL mid-transaction and read them back, and every
        // commit crossed the 1,000-page checkpoint mark. Up to 32 MiB of cache (used only as it fills) and
        // a checkpoint every 4,000 pages (16 MiB of WAL) copy each hot page back once per checkpoint.
        try connection.executeScript("PRAGMA cache_size=-32768;")
        // Savepoints of a group commit keep their sub-journal in memory.
        try connection.executeScript("PRAGMA temp_store=MEMORY")
        readers = path == ":memory:" ? nil : ReaderPool(path: path)
        if path != ":memory:" {
            // The checkpoint runs on a connection of its own, beside the writer: run by the writer after its
            // commit, it held up every write behind it (a fifth of the writer's time ingesting notifications).
            let checkpointer = Checkpointer(path: path)
            self.checkpointer = checkpointer
            // Unowned: the connection keeps the hook, and calls it only while it lives.
            connection.onCommit { [unowned connection] frames in
                switch checkpointer.afterCommit(walFrames: frames) {
                case .none: break
                case .background: checkpointer.request()
                case .here:
                    // Only the frames since the background checkpoint are left: copying them here lets the
                    // next write start the WAL again from its beginning (it otherwise grows without end).
                    // One row: busy, frames in the WAL, frames copied; caught up when the last two agree.
                    if let row = try? connection.execute("PRAGMA wal_checkpoint(PASSIVE)").first,
                        row.values.count == 3, row.values[1] == row.values[2]
                    {
                        checkpointer.restarted()
                    }
                }
            }
        } else {
            checkpointer = nil
        }
    }

    /// The database file readable by its owner only from its first byte (created with mode 0600, or an
    /// existing one of this process's user narrowed to it, with any WAL, shared-memory or journal file beside
    /// it): SQLite gives the files it makes the database file's mode. A file another user owns is left as it
    /// is (its owner chose its mode).
    static func ownerOnly(_ path: String) throws(SQLiteError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw SQLiteError(
                code: .cantOpen, message: "cannot create \(path): \(String(cString: strerror(errno)))", sql: nil)
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_uid == geteuid() else { return }
        guard fchmod(descriptor, 0o600) == 0 else {
            throw SQLiteError(
                code: .cantOpen, message: "cannot restrict \(path) to its owner: \(String(cString: strerror(errno)))",
                sql: nil)
        }
        for suffix in ["-wal", "-shm", "-journal"]
        where chmod(path + suffix, 0o600) != 0 && errno != ENOENT && errno != EPERM {
            throw SQLiteError(
                code: .cantOpen,
                message: "cannot restrict \(path + suffix) to its owner: \(String(cString: strerror(errno)))", sql: nil)
        }
    }

    /// Copies the WAL back into the database file when it has grown past its threshold.
    private nonisolated let checkpointer: Checkpointer?

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

    /// Write transactions run so far (``write(_:)`` and group commits) and the writes they held.
    public nonisolated var writeCounts: WriteCounts { writeCounter.counts }
    private nonisolated let writeCounter = WriteCounter()

    /// How long the writer has spent in write transactions so far, from `BEGIN` to the end of `COMMIT` or
    /// `ROLLBACK` (a group's gathering wait not included). Its share of a span tells whether the one writer
    /// sets a workload's rate: near the whole span, only less work a write makes the workload faster.
    public nonisolated var writerBusy: Duration { busy.withLock { $0.wall } }

    /// The writer's thread's CPU time in those transactions (`CLOCK_THREAD_CPUTIME_ID`; a transaction runs on
    /// one thread): the rest of ``writerBusy`` is waiting, for the disk, for a core, or for what a write waits on.
    public nonisolated var writerCPU: Duration { busy.withLock { $0.cpu } }
    private nonisolated let busy = Mutex((wall: Duration.zero, cpu: Duration.zero))

    /// Counts what each statement run on the writer's connection costs from now on, from zero (`on`), or
    /// stops counting: where a workload's write time goes (`storekeeper bench lifecycle --statements`).
    public func countWriterStatements(_ on: Bool) {
        connection.resetStatementCosts()
        connection.countsStatements = on
    }

    /// What each statement run on the writer's connection has cost while counted, the costliest first.
    public var writerStatementCosts: [StatementCost] { connection.statementCosts }

    /// When a write transaction began: the clock's time and its thread's CPU time.
    private struct Began {
        let at = ContinuousClock.now
        let cpu = Database.threadCPU()
    }

    /// This thread's CPU time so far.
    private static func threadCPU() -> Duration { .nanoseconds(Connection.threadNanoseconds()) }

    /// Adds the time since `began` to ``writerBusy`` and ``writerCPU``.
    private func countBusy(since began: Began) {
        let (elapsed, cpu) = (ContinuousClock.now - began.at, Self.threadCPU() - began.cpu)
        busy.withLock {
            $0.wall += elapsed
            $0.cpu += cpu
        }
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    @discardableResult
    public func write<T: Sendable>(_ body: @Sendable (Connection) throws -> T) throws -> T {
        let began = Began()
        defer { countBusy(since: began) }
        try connection.executeScript("BEGIN IMMEDIATE")
        writeCounter.ran(writes: 1)
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

    /// Writes waiting for the next group commit. Behind a lock rather than on the actor: a write joins the
    /// group from its own thread, and only the first of a group hops to the writer's executor (a hop per
    /// write was a job and a thread wake-up per write on the writer's queue).
    private nonisolated let group = Mutex(Group())

    private struct Group {
        var writes: [GroupedWrite] = []
        /// The writer is waiting for more writes (``GroupGathering``), and whether one woke it.
        var gathering = false
        var woken = false
    }

    /// Grouped writes waiting for the next group commit (tests).
    package nonisolated var waitingWrites: Int { group.withLock { $0.writes.count } }

    private nonisolated let gathering: GroupGathering?
    /// Signalled once when a gathering group reaches its target.
    private nonisolated let gathered = DispatchSemaphore(value: 0)

    private struct GroupedWrite: Sendable {
        let body: @Sendable (Connection) throws -> any Sendable
        let repeatable: Bool
        let resume: @Sendable (Result<any Sendable, any Error>) -> Void
    }

    /// Runs `body` in a transaction shared with the other grouped writes waiting at the moment it runs (a
    /// group commit: one fsync for many). Each body is all or nothing on its own, and a write returns only
    /// after the group committed, so it is durable.
    ///
    /// A `repeatable` body may run twice (its effects outside the database must not matter when repeated):
    /// a group of them runs without a savepoint per write, and only when one throws is the group rolled
    /// back and run again with savepoints. A savepoint makes SQLite copy each page a write changes; that
    /// was a sixth of the time of ingesting notifications.
    public nonisolated func writeGrouped<T: Sendable>(
        repeatable: Bool = false, _ body: @escaping @Sendable (Connection) throws -> T
    ) async throws -> T {
        let result: any Sendable = try await withCheckedThrowingContinuation { continuation in
            let write = GroupedWrite(
                body: { try body($0) }, repeatable: repeatable, resume: { continuation.resume(with: $0) })
            let (first, wake) = group.withLock { group in
                group.writes.append(write)
                guard group.gathering, !group.woken, group.writes.count >= gathering?.target ?? .max else {
                    return (group.writes.count == 1, false)
                }
                group.woken = true
                return (false, true)
            }
            if wake { gathered.signal() }
            // The group's commit runs on the writer's executor; writes arriving until it starts join the group.
            // Straight onto the writer's queue: a `Task` waited on the cooperative pool behind the jobs queued
            // there (the callers of the last group, resumed together), so the writer started only once they
            // had all run, and the writer and the callers took turns instead of running side by side.
            if first { executor.submit { self.assumeIsolated { $0.commitGroup() } } }
        }
        return result as! T
    }

    /// Runs every waiting write in one transaction and answers them once it committed.
    private func commitGroup() {
        gather()
        let writes = group.withLock { group in
            let writes = group.writes
            group.writes = []
            return writes
        }
        guard !writes.isEmpty else { return }
        let began = Began()
        let results: [Result<any Sendable, any Error>]
        // The hook runs once the transaction has ended and before any write is answered: a write's caller
        // that reads next must find nothing kept from before its own commit.
        do {
            if writes.count == 1 || writes.allSatisfy(\.repeatable), let together = try runTogether(writes) {
                results = together
            } else {
                results = try runApart(writes)
            }
        } catch {
            try? connection.executeScript("ROLLBACK")
            countBusy(since: began)
            afterCommit()
            for write in writes { write.resume(.failure(error)) }
            return
        }
        countBusy(since: began)
        afterCommit()
        for (write, result) in zip(writes, results) { write.resume(result) }
    }

    /// While the machine is busy and writes come from more than one caller (two or more already wait), waits
    /// up to the gathering's delay for the group to reach its target. A lone write never waits.
    private func gather() {
        guard let gathering, gathering.worthWaiting(waiting: group.withLock({ $0.writes.count })) else { return }
        let waits = group.withLock { group in
            guard group.writes.count < gathering.target else { return false }
            group.gathering = true
            group.woken = false
            return true
        }
        guard waits else { return }
        let timedOut =
            gathered.wait(timeout: .now() + .nanoseconds(gathering.maxDelayNanoseconds)) == .timedOut
        let signalled = group.withLock { group in
            defer { group.gathering = false }
            return group.woken
        }
        // Woken just after the time ran out: the signal is taken now, so that the next gathering waits.
        if timedOut && signalled { gathered.wait() }
    }

    /// The writes in one transaction with no savepoint: their results, or nil when one threw (the
    /// transaction rolled back). A write alone is answered with its failure: it is the transaction.
    private func runTogether(_ writes: [GroupedWrite]) throws -> [Result<any Sendable, any Error>]? {
        try connection.executeScript("BEGIN IMMEDIATE")
        writeCounter.ran(writes: writes.count)
        var results: [Result<any Sendable, any Error>] = []
        results.reserveCapacity(writes.count)
        for write in writes {
            do {
                results.append(.success(try write.body(connection)))
            } catch {
                // SQLite may have rolled back already (a full disk, an I/O error): the body's error is the one
                // to answer, not ROLLBACK's.
                try? connection.executeScript("ROLLBACK")
                return writes.count == 1 ? [.failure(error)] : nil
            }
        }
        try connection.executeScript("COMMIT")
        return results
    }

    /// The writes in one transaction, each in a savepoint: one that throws is rolled back alone.
    private func runApart(_ writes: [GroupedWrite]) throws -> [Result<any Sendable, any Error>] {
        try connection.executeScript("BEGIN IMMEDIATE")
        writeCounter.ran(writes: writes.count)
        var results: [Result<any Sendable, any Error>] = []
        for write in writes {
            try connection.executeScript("SAVEPOINT grouped")
            do {
                // Answered only once released: a failed RELEASE is this write's failure, one answer each.
                let value = try write.body(connection)
                try connection.executeScript("RELEASE grouped")
                results.append(.success(value))
            } catch {
                try connection.executeScript("ROLLBACK TO grouped; RELEASE grouped")
                results.append(.failure(error))
            }
        }
        try connection.executeScript("COMMIT")
        return results
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

/// Checkpoints of one database's WAL. Most of the copying runs on a connection and a thread of their own,
/// when the writer asks (after a commit that left the WAL past ``threshold`` frames); a passive checkpoint
/// copies what no reader still needs and never waits for the writer or a reader. The WAL starts again from
/// its beginning only after a checkpoint that caught up with the last commit, which one running beside a
/// busy writer never does: once the background one has copied all but a few frames, the writer copies
/// those itself, right after its commit.
final class Checkpointer: Sendable {
    /// 4,000 pages (16 MiB of WAL), as the writer's automatic checkpoint was set before.
    static let threshold = 4_000
    enum Step { case none, background, here }

    private let queue = DispatchQueue(label: "storekeeper.sqlite.checkpoint")
    private let path: String
    // @unchecked Sendable: the connection is used on `queue` only.
    private struct Slot: @unchecked Sendable { var connection: Connection? }
    private let slot = Mutex(Slot())
    /// Whether a background checkpoint is asked for or running (requests meanwhile are the same one).
    private let busy = Atomic<Bool>(false)
    /// Frames of the WAL the last background checkpoint copied.
    private let copied = Atomic<Int>(0)

    init(path: String) { self.path = path }

    /// What to do after a commit left the WAL at `frames` frames.
    func afterCommit(walFrames frames: Int) -> Step {
        // Fewer frames than the last checkpoint copied: the WAL started again since.
        if frames < copied.load(ordering: .acquiring) { copied.store(0, ordering: .releasing) }
        guard frames >= Self.threshold else { return .none }
        // A quarter of the threshold left; or the WAL at three times it (a bound, however far behind).
        if frames - copied.load(ordering: .acquiring) <= Self.threshold / 4, !busy.load(ordering: .acquiring) {
            return .here
        }
        return frames >= 3 * Self.threshold ? .here : .background
    }

    /// The writer's checkpoint caught up: the WAL starts again at its next write.
    func restarted() { copied.store(0, ordering: .releasing) }

    func request() {
        guard !busy.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { [self] in
            defer { busy.store(false, ordering: .releasing) }
            slot.withLock { slot in
                do {
                    if slot.connection == nil {
                        let connection = try Connection(path: path)
                        // A checkpoint syncs the WAL before copying and the database after.
                        try connection.executeScript("PRAGMA synchronous=FULL")
                        slot.connection = connection
                    }
                    // One row: busy, frames in the WAL, frames copied.
                    if let row = try slot.connection?.execute("PRAGMA wal_checkpoint(PASSIVE)").first,
                        row.values.count == 3, let done = row.values[2].int64
                    {
                        copied.store(Int(done), ordering: .releasing)
                    }
                } catch {
                    // A busy or failed checkpoint leaves the WAL as it is: the next request tries again.
                }
            }
        }
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
