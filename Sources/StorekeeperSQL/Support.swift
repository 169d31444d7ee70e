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
}
