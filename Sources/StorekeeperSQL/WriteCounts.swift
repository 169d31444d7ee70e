import Synchronization

/// Write transactions a storage ran and the writes they held: with group commits the writes a transaction
/// is the group's mean size (what each commit's fixed cost is shared by).
public struct WriteCounts: Sendable, Hashable {
    /// Write transactions run, committed or rolled back (a group commit is one).
    public var transactions: Int
    /// The writes they held.
    public var writes: Int

    public init(transactions: Int, writes: Int) {
        self.transactions = transactions
        self.writes = writes
    }

    /// What was counted since `earlier`.
    public func since(_ earlier: WriteCounts) -> WriteCounts {
        WriteCounts(transactions: transactions - earlier.transactions, writes: writes - earlier.writes)
    }
}

/// Counts write transactions from any thread: two relaxed additions a transaction.
public final class WriteCounter: Sendable {
    private let transactions = Atomic<Int>(0)
    private let writes = Atomic<Int>(0)

    public init() {}

    /// One transaction ran holding `writes` writes.
    public func ran(writes count: Int) {
        transactions.add(1, ordering: .relaxed)
        writes.add(count, ordering: .relaxed)
    }

    public var counts: WriteCounts {
        WriteCounts(transactions: transactions.load(ordering: .relaxed), writes: writes.load(ordering: .relaxed))
    }
}
