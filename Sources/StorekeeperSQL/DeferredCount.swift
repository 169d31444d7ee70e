import Synchronization

/// How many rows a statement changed, known once the statement has run: at once where a statement runs
/// when it is given (SQLite), when the pipeline it was sent in is answered on PostgreSQL (at `COMMIT` at
/// the latest). A statement that failed leaves it unknown, and its transaction does not commit.
public final class DeferredCount: Sendable {
    /// -1 until known.
    private let stored = Atomic<Int>(-1)

    /// Not known yet.
    public init() {}

    /// Known already.
    public init(_ count: Int) { stored.store(max(0, count), ordering: .relaxed) }

    /// Nil until the statement has run.
    public var value: Int? {
        let count = stored.load(ordering: .acquiring)
        return count < 0 ? nil : count
    }

    /// Records the count (by whoever reads the statement's result).
    public func fill(_ count: Int) { stored.store(max(0, count), ordering: .releasing) }
}
