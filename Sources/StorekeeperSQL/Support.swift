import Dispatch

/// Runs actor jobs on one private dispatch queue, so blocking database calls never occupy the cooperative pool.
public final class DispatchSerialExecutor: SerialExecutor {
    private let queue: DispatchQueue
    /// Set on `queue` alone, so that a block can tell it runs there.
    private let mark = DispatchSpecificKey<Bool>()

    public init(label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: mark, value: true)
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    /// Lets `assumeIsolated` accept a block run by ``submit(_:)``; the runtime asks this first, and calls
    /// ``checkIsolated()`` only in modes that do not ask.
    public func isIsolatingCurrentContext() -> Bool? { DispatchQueue.getSpecific(key: mark) == true }
    public func checkIsolated() { dispatchPrecondition(condition: .onQueue(queue)) }

    /// Runs `body` on the queue, after the jobs enqueued before it, without a task: a `Task` started from
    /// outside the actor first waits its turn on the cooperative pool, behind every job queued there.
    public func submit(_ body: @escaping @Sendable () -> Void) { queue.async(execute: body) }
}

/// An append-only schema step, identified by a string and applied once, in order, in its own transaction.
public struct Migration: Sendable, Hashable {
    public let id: String
    public let sql: String

    public init(_ id: String, _ sql: String) {
        self.id = id
        self.sql = sql
    }

    /// The migrations of `list` still to apply, with their positions, after those a database recorded as
    /// `applied`; nil when `applied` is not the start of `list` (a newer build's database, or an edited list).
    public static func pending(_ list: [Migration], applied: [String]) -> [(position: Int, migration: Migration)]? {
        guard applied.count <= list.count, zip(applied, list).allSatisfy({ $0 == $1.id }) else { return nil }
        return list.enumerated().dropFirst(applied.count).map { ($0.offset, $0.element) }
    }

    /// The one migration runner, for both wrappers: makes `schema_migrations` (its timestamp column in the
    /// dialect's `timestamp` type), reads what was applied, then runs each pending migration and records it,
    /// each inside `step` (SQLite: a write transaction each; PostgreSQL: the caller's one transaction).
    /// Throws `misuse` when the database's list does not start this build's; answers the ids it applied.
    ///
    /// With a `baseline` (the schema the whole list ends with, declared at once), an empty database gets
    /// the baseline in one step and every id of `list` recorded as applied; a database that has applied
    /// part of the list goes on through the list.
    public static func run<C: MigrationConnection & SendableMetatype>(
        _ list: [Migration], baseline: String? = nil, on connection: C, timestamp: String,
        misuse: (String) -> any Error, step: (@escaping @Sendable (C) throws -> Void) throws -> Void
    ) throws -> [String] {
        try connection.executeScript(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                position INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                applied_at \(timestamp)
            )
            """)
        let applied = try connection.execute("SELECT id FROM schema_migrations ORDER BY position", []).compactMap {
            $0["id"].string
        }
        guard let pending = pending(list, applied: applied) else {
            throw misuse("the database's migrations \(applied) do not start this build's list")
        }
        if let baseline, applied.isEmpty, !list.isEmpty {
            try step { connection in
                try connection.executeScript(baseline)
                for (position, migration) in list.enumerated() {
                    _ = try connection.execute(
                        "INSERT INTO schema_migrations (position, id) VALUES (?, ?)",
                        [.integer(Int64(position)), .text(migration.id)])
                }
            }
            return list.map(\.id)
        }
        var done: [String] = []
        for (position, migration) in pending {
            try step { connection in
                try connection.executeScript(migration.sql)
                _ = try connection.execute(
                    "INSERT INTO schema_migrations (position, id) VALUES (?, ?)",
                    [.integer(Int64(position)), .text(migration.id)])
            }
            done.append(migration.id)
        }
        return done
    }
}

/// What the migration runner needs of a connection; both wrappers' connections have it.
public protocol MigrationConnection {
    func executeScript(_ sql: String) throws
    func execute(_ sql: String, _ values: [SQLValue]) throws -> [Row]
}
