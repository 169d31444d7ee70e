import Dispatch

/// Runs actor jobs on one private dispatch queue, so blocking database calls never occupy the cooperative pool.
public final class DispatchSerialExecutor: SerialExecutor {
    private let queue: DispatchQueue

    public init(label: String) { queue = DispatchQueue(label: label) }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }
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
}
