import Synchronization

/// Write transactions a storage ran and the writes they held: with group commits the writes a transaction
/// is the group's mean size (what each commit's fixed cost is shared by). Each storage says when it counts
/// (SQLite once its transaction has begun; PostgreSQL as it sends one).
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

/// Counts write transactions from any thread, under a lock: one taking a transaction (a pair read is always
/// one that was counted together).
public final class WriteCounter: Sendable {
    private let counted = Mutex(WriteCounts(transactions: 0, writes: 0))

    public init() {}

    /// One transaction ran holding `writes` writes.
    public func ran(writes count: Int) {
        counted.withLock { counts in
            counts.transactions += 1
            counts.writes += count
        }
    }

    public var counts: WriteCounts { counted.withLock { $0 } }
}
