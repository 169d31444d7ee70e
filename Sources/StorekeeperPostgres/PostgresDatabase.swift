import Foundation
public import StorekeeperSQL
import Synchronization

/// A small pool of PostgreSQL connections, each on its own thread (blocking libpq calls never occupy the
/// cooperative pool), reached through transactional closures.
///
/// Reads run in one `REPEATABLE READ READ ONLY` snapshot. Writes run `SERIALIZABLE`: PostgreSQL refuses one
/// of two writes that could not have run one after the other (SQLSTATE 40001 or a deadlock, 40P01), and the
/// write runs again, so a write body must be safe to run more than once. A connection lost before `COMMIT`
/// is reopened and the transaction run again; one lost during `COMMIT` is an error (it may have committed).
public final class PostgresDatabase: Sendable {
    private let sessions: [PostgresSession]
    private let pool: Mutex<Pool>
    /// Holds session-level advisory locks: they last as long as its connection.
    private let locks: PostgresSession

    private struct Pool {
        var free: [Int]
        var waiters = WaitingLine<CheckedContinuation<Int, Never>>()
    }

    /// Retries of a write that lost to a concurrent one, at most.
    public static let maxAttempts = 30
    private let counter: RetryCounter

    /// Transactions run again (after a serialization failure or a lost connection) so far.
    public var retries: Int { counter.value.load(ordering: .relaxed) }
    /// Times the connections of this pool's transactions waited for the server (one per pipeline
    /// synchronisation or statement run alone).
    public var roundTrips: Int { counter.roundTrips.load(ordering: .relaxed) }

    /// Connects once (so a wrong URL fails here), then keeps up to `poolSize` connections.
    public init(url: String, poolSize: Int = 8) throws(PostgresError) {
        let size = max(1, poolSize)
        _ = try PostgresConnection(url: url)
        let counter = RetryCounter()
        self.counter = counter
        sessions = (0..<size).map {
            PostgresSession(url: url, label: "storekeeper.postgres.\($0)", counter: counter)
        }
        pool = Mutex(Pool(free: Array((0..<size).reversed())))
        locks = PostgresSession(url: url, label: "storekeeper.postgres.locks", counter: counter)
    }

    /// `url` without its passwords, for logs and messages: the user's (`postgres://user:secret@host/db` →
    /// `postgres://user:***@host/db`) and the `password` and `sslpassword` parameters' values.
    public static func redacted(_ url: String) -> String {
        guard let scheme = url.range(of: "://") else {
            return url.contains("password") ? "(a libpq connection string)" : url
        }
        var result = url
        if let at = userinfoEnd(url, after: scheme.upperBound),
            let colon = url[scheme.upperBound..<at].firstIndex(of: ":")
        {
            result = String(url[..<colon]) + ":***" + String(url[at...])
        }
        guard let question = result.firstIndex(of: "?") else { return result }
        let parameters = result[result.index(after: question)...].split(
            separator: "&", omittingEmptySubsequences: false
        )
        .map { parameter -> String in
            let name = parameter.prefix(while: { $0 != "=" })
            return ["password", "sslpassword"].contains(name.lowercased()) ? name + "=***" : String(parameter)
        }
        return String(result[...question]) + parameters.joined(separator: "&")
    }

    /// The `@` that ends the user information: the last one before the path (libpq looks for it up to the
    /// first `/`; a password may hold `?` or `#`), never one in a parameter's value after the path. A URL
    /// with no path and an `@` in a parameter is redacted up to that `@`: more than needed, never less.
    static func userinfoEnd(_ url: String, after start: String.Index) -> String.Index? {
        url[start...].prefix { $0 != "/" }.lastIndex(of: "@")
    }

    /// The secrets `url` holds (the user's password, the `password` and `sslpassword` values), as written and
    /// percent-decoded: what a message about it must not repeat.
    static func secrets(in url: String) -> [String] {
        guard let scheme = url.range(of: "://") else { return [] }
        var found: [Substring] = []
        if let at = userinfoEnd(url, after: scheme.upperBound),
            let colon = url[scheme.upperBound..<at].firstIndex(of: ":")
        {
            found.append(url[url.index(after: colon)..<at])
        }
        if let question = url.firstIndex(of: "?") {
            for parameter in url[url.index(after: question)...].split(separator: "&") {
                let parts = parameter.split(separator: "=", maxSplits: 1)
                if parts.count == 2, ["password", "sslpassword"].contains(parts[0].lowercased()) {
                    found.append(parts[1])
                }
            }
        }
        let texts = found.filter { !$0.isEmpty }.map(String.init)
        return Array(Set(texts + texts.compactMap { $0.removingPercentEncoding })).sorted { $0.count > $1.count }
    }

    /// libpq's message about `url` with the URL and its secrets taken out (libpq quotes a URL or a part of
    /// it that does not parse, a password included).
    static func scrubbed(_ message: String, url: String) -> String {
        var message = message.replacingOccurrences(of: url, with: redacted(url))
        for secret in secrets(in: url) { message = message.replacingOccurrences(of: secret, with: "***") }
        return message
    }

    /// Runs `body` in a read-only snapshot.
    @discardableResult
    public func read<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let index = await acquire()
        defer { release(index) }
        return try await sessions[index].transaction(.read, body)
    }

    /// Runs `body`, which makes one statement, outside any transaction: one round trip, the statement its
    /// own snapshot.
    @discardableResult
    public func readStatement<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let index = await acquire()
        defer { release(index) }
        return try await sessions[index].transaction(.statement, body)
    }

    /// Runs `body` in a serializable transaction, again after a serialization failure; committed when it
    /// returns, rolled back when it throws.
    @discardableResult
    public func write<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let index = await acquire()
        defer { release(index) }
        return try await sessions[index].transaction(.write, body)
    }

    /// Runs `body` in a `READ COMMITTED` transaction: for statements that lock the rows they change and
    /// skip rows others hold (`FOR UPDATE SKIP LOCKED` claims, counters updated in one statement).
    @discardableResult
    public func lockingWrite<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let index = await acquire()
        defer { release(index) }
        return try await sessions[index].transaction(.plain, body)
    }

    /// Applies the migrations not yet recorded in `schema_migrations`, in order, in one transaction that
    /// holds an advisory lock (processes starting together apply them once). Refuses a database whose
    /// applied list this list does not start with. Answers the ids applied. An empty database gets
    /// `baseline` instead, when there is one.
    @discardableResult
    public func migrate(_ migrations: [Migration], baseline: String? = nil) async throws -> [String] {
        let index = await acquire()
        defer { release(index) }
        return try await sessions[index].transaction(.plain) { connection in
            try connection.execute("SELECT pg_advisory_xact_lock(hashtextextended('storekeeper-migrations', 0))")
            return try Migration.run(
                migrations, baseline: baseline, on: connection, timestamp: "TIMESTAMPTZ NOT NULL DEFAULT now()",
                misuse: { PostgresError(.misuse, $0) }
            ) { apply in try apply(connection) }
        }
    }

    /// Takes (or confirms this process still holds) the session-level advisory lock `name`; false when
    /// another connection holds it or the database cannot be reached. The lock ends with its connection,
    /// so a process that dies lets another take it.
    public func tryLock(_ name: String) async -> Bool {
        await locks.tryLock(name)
    }

    /// Gives up the advisory lock `name` when this process holds it.
    public func unlock(_ name: String) async {
        await locks.unlock(name)
    }

    private func acquire() async -> Int {
        if let index = pool.withLock({ $0.free.popLast() }) { return index }
        return await withCheckedContinuation { continuation in
            let index = pool.withLock { pool -> Int? in
                if let index = pool.free.popLast() { return index }
                pool.waiters.append(continuation)
                return nil
            }
            if let index { continuation.resume(returning: index) }
        }
    }

    private func release(_ index: Int) {
        let waiter = pool.withLock { pool -> CheckedContinuation<Int, Never>? in
            guard let waiter = pool.waiters.take() else {
                pool.free.append(index)
                return nil
            }
            return waiter
        }
        waiter?.resume(returning: index)
    }
}

/// One connection, reopened when lost, confined to its own serial executor.
actor PostgresSession {
    enum Mode {
        /// `statement`: no transaction, one statement, its own snapshot.
        case read, write, plain, statement
        var begin: String? {
            switch self {
            case .read: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
            case .write: "BEGIN ISOLATION LEVEL SERIALIZABLE"
            case .plain: "BEGIN"
            case .statement: nil
            }
        }
        /// Writes run in libpq's pipeline mode: statements whose rows are not needed go with the next one
        /// that is (``PostgresConnection/executeLater(_:_:)``), `BEGIN` with the first and `COMMIT` with
        /// the last.
        var pipelines: Bool { self == .write || self == .plain }
    }

    private let executor: DispatchSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    private let url: String
    private var connection: PostgresConnection?
    private var held: Set<String> = []
    private let counter: RetryCounter

    init(url: String, label: String, counter: RetryCounter) {
        self.url = url
        self.counter = counter
        self.executor = DispatchSerialExecutor(label: label)
    }

    private func connected() throws -> PostgresConnection {
        if let connection, connection.isOpen { return connection }
        connection = nil
        held = []
        let fresh = try PostgresConnection(url: url)
        connection = fresh
        return fresh
    }

    func transaction<T>(_ mode: Mode, _ body: (PostgresConnection) throws -> T) throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            let connection: PostgresConnection
            do { connection = try connected() } catch {
                guard attempt < 3 else { throw error }
                Self.pause(attempt)
                continue
            }
            var committing = false
            let trips = connection.roundTrips
            defer { counter.roundTrips.add(connection.roundTrips - trips, ordering: .relaxed) }
            do {
                guard let begin = mode.begin else { return try body(connection) }
                if mode.pipelines { try connection.beginPipelined(begin) } else { try connection.executeScript(begin) }
                let result = try body(connection)
                committing = true
                if mode.pipelines { try connection.commitPipelined() } else { try connection.executeScript("COMMIT") }
                return result
            } catch let error as PostgresError {
                connection.abandonPipeline()
                if !connection.isOpen {
                    self.connection = nil
                } else if mode.begin != nil {
                    try? connection.executeScript("ROLLBACK")
                }
                let again =
                    error.isSerializationFailure || (error.isConnectionFailure && !committing && attempt < 3)
                guard again, attempt < PostgresDatabase.maxAttempts else { throw error }
                counter.value.add(1, ordering: .relaxed)
                Self.pause(attempt)
            } catch {
                connection.abandonPipeline()
                if !connection.isOpen {
                    self.connection = nil
                } else if mode.begin != nil {
                    try? connection.executeScript("ROLLBACK")
                }
                throw error
            }
        }
    }

    func tryLock(_ name: String) -> Bool {
        do {
            let connection = try connected()
            if held.contains(name) {
                // Still ours while the connection lives.
                try connection.execute("SELECT 1")
                return true
            }
            let row = try connection.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(?, 0)) AS locked", [.text(name)]
            ).first
            guard row?["locked"].int64 == 1 else { return false }
            held.insert(name)
            return true
        } catch {
            connection = nil
            held = []
            return false
        }
    }

    func unlock(_ name: String) {
        guard held.remove(name) != nil, let connection else { return }
        _ = try? connection.execute("SELECT pg_advisory_unlock(hashtextextended(?, 0))", [.text(name)])
    }

    /// A short random pause, longer with each attempt (at most ~100 ms).
    private static func pause(_ attempt: Int) {
        let ceiling = min(100_000, 1_000 << min(attempt, 7))
        usleep(UInt32.random(in: UInt32(ceiling / 4)...UInt32(ceiling)))
    }
}

final class RetryCounter: Sendable {
    let value = Atomic<Int>(0)
    let roundTrips = Atomic<Int>(0)
}
