import StoreTime

/// How a group commit gathers writes while the machine is busy, as PostgreSQL's `commit_delay` does with
/// `commit_siblings`: when ``busy`` says waiting costs nothing (the cores are full of other work, much of it
/// the requests that will write next), the writer waits up to ``maxDelay`` for ``target`` writes before it
/// begins the group. Larger groups cost less a write: one transaction, one WAL write and one fsync (or one
/// round trip) for more of them. A group gathers only when two or more writes already wait as it begins
/// (callers write concurrently) and the machine is busy: a lone write, or writes on an idle machine, commit at
/// once.
public struct GroupGathering: Sendable {
    public var maxDelay: Duration
    public var target: Int
    public var busy: @Sendable () -> Bool

    public init(maxDelay: Duration, target: Int, busy: @escaping @Sendable () -> Bool) {
        self.maxDelay = maxDelay
        self.target = max(1, target)
        self.busy = busy
    }

    /// Up to `maxDelay` for `target` writes while the machine's cores are nearly all busy (``MachineLoad``).
    public static func whenSaturated(maxDelay: Duration, target: Int) -> GroupGathering {
        let load = MachineLoad.shared
        return GroupGathering(maxDelay: maxDelay, target: target, busy: { load.saturated() })
    }

    /// Whether a group that begins with `waiting` writes waits for more: two or more wait (callers write
    /// concurrently), fewer than the target, and the machine is busy. The writer checks the target again
    /// under its own lock as it starts to wait.
    public func worthWaiting(waiting: Int) -> Bool {
        waiting >= 2 && waiting < target && busy()
    }

    /// ``maxDelay`` in whole nanoseconds (at most a century: a larger one is as good as no limit).
    public var maxDelayNanoseconds: Int {
        Int(min(max(maxDelay, .zero), .seconds(3_155_760_000)).wholeNanoseconds)
    }
}
