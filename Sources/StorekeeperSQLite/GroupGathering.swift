import Glibc
import Synchronization

/// How a group commit gathers writes while the process is busy, as PostgreSQL's `commit_delay` does with
/// `commit_siblings`: when ``busy`` says waiting costs nothing (the cores are full of work that will write
/// next), the writer waits up to ``maxDelay`` for ``target`` writes before it begins the group. Larger groups
/// cost less a write (one transaction, one WAL write and one fsync for more of them). A group gathers only when
/// two or more writes already wait as it begins (callers write concurrently) and the process is busy: a lone
/// write, or writes on an idle machine, commit at once.
public struct GroupGathering: Sendable {
    public var maxDelay: Duration
    public var target: Int
    public var busy: @Sendable () -> Bool

    public init(maxDelay: Duration, target: Int, busy: @escaping @Sendable () -> Bool) {
        self.maxDelay = maxDelay
        self.target = max(1, target)
        self.busy = busy
    }

    /// Up to a millisecond for 32 writes, while the process keeps its cores busy (``ProcessLoad``).
    public static func whenSaturated() -> GroupGathering {
        let load = ProcessLoad()
        return GroupGathering(maxDelay: .milliseconds(1), target: 32, busy: { load.saturated() })
    }

    var maxDelayNanoseconds: Int {
        let (seconds, attoseconds) = maxDelay.components
        return Int(clamping: seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}

/// Whether this process used nearly all of the machine's cores lately: its CPU time (every thread) against the
/// time passed, over windows of ``window`` nanoseconds, so that one short burst does not decide.
public final class ProcessLoad: Sendable {
    static let window: UInt64 = 20_000_000
    /// The share of every core the process must use to count as saturated.
    static let threshold = 0.85

    private let cores: Double
    /// Nanoseconds: time passed (monotonic), and the process's CPU time.
    private let wall: @Sendable () -> UInt64
    private let cpu: @Sendable () -> UInt64
    private let state: Mutex<(wall: UInt64, cpu: UInt64, saturated: Bool)>

    public convenience init() {
        self.init(
            cores: Double(max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))), wall: { Self.clock(CLOCK_MONOTONIC) },
            cpu: { Self.clock(CLOCK_PROCESS_CPUTIME_ID) })
    }

    /// Over given clocks (tests).
    package init(cores: Double, wall: @escaping @Sendable () -> UInt64, cpu: @escaping @Sendable () -> UInt64) {
        self.cores = cores
        self.wall = wall
        self.cpu = cpu
        state = Mutex((wall(), cpu(), false))
    }

    /// Whether the last complete window was saturated.
    public func saturated() -> Bool {
        let now = wall()
        return state.withLock { state in
            let elapsed = now &- state.wall
            guard elapsed >= Self.window else { return state.saturated }
            let used = cpu()
            state.saturated = Double(used &- state.cpu) >= Self.threshold * cores * Double(elapsed)
            state.wall = now
            state.cpu = used
            return state.saturated
        }
    }

    private static func clock(_ id: clockid_t) -> UInt64 {
        var time = timespec()
        guard clock_gettime(id, &time) == 0 else { return 0 }
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
