import Glibc
import Synchronization

/// Whether the machine's cores were nearly all busy lately (every process's work, from `/proc/stat`), judged
/// over windows of at least ``window`` nanoseconds: `/proc/stat` counts in hundredths of a second, so a window
/// of 100 ms on two cores holds 20 counts (one is 5%), and one short burst does not decide. Where `/proc/stat`
/// cannot be read, never saturated.
public final class MachineLoad: Sendable {
    /// One for the process: each reading covers the time since the last.
    public static let shared = MachineLoad()

    static let window: UInt64 = 100_000_000
    /// The share of the cores' time that must be busy to count as saturated.
    static let threshold = 0.85

    /// Nanoseconds passed (monotonic), and the cores' busy and total time in any one unit.
    private let wall: @Sendable () -> UInt64
    private let times: @Sendable () -> (busy: UInt64, total: UInt64)?
    private let state: Mutex<(wall: UInt64, busy: UInt64, total: UInt64, saturated: Bool)>

    public convenience init() {
        self.init(wall: { Self.monotonic() }, times: { Self.readStat() })
    }

    /// Over given clocks (tests).
    package init(
        wall: @escaping @Sendable () -> UInt64, times: @escaping @Sendable () -> (busy: UInt64, total: UInt64)?
    ) {
        self.wall = wall
        self.times = times
        let start = times() ?? (0, 0)
        state = Mutex((wall(), start.busy, start.total, false))
    }

    /// Whether the last complete window was saturated.
    public func saturated() -> Bool {
        state.withLock { state in
            // Read under the lock: a time read before another caller's update would be behind it.
            let now = wall()
            guard now >= state.wall, now - state.wall >= Self.window else { return state.saturated }
            guard let times = times() else {
                state.saturated = false
                return false
            }
            let (busy, total) = (times.busy &- state.busy, times.total &- state.total)
            state.saturated = total > 0 && Double(busy) >= Self.threshold * Double(total)
            state = (now, times.busy, times.total, state.saturated)
            return state.saturated
        }
    }

    /// The busy and total time of all cores in `/proc/stat`'s first line (`cpu user nice system idle iowait
    /// irq softirq steal …`): idle and iowait are not busy; guest time is already in user and nice.
    package static func parseStat(_ line: some Collection<UInt8>) -> (busy: UInt64, total: UInt64)? {
        var fields: [UInt64] = []
        var current: UInt64?
        var words = 0
        var inWord = false
        for byte in line {
            if byte == UInt8(ascii: "\n") { break }
            if byte == UInt8(ascii: " ") {
                if let value = current { fields.append(value) }
                current = nil
                inWord = false
                continue
            }
            if !inWord {
                inWord = true
                words += 1
            }
            // The first word is the label "cpu"; the rest are counts.
            if words == 1 { continue }
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            let (times, overflow) = (current ?? 0).multipliedReportingOverflow(by: 10)
            let (sum, carry) = times.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow, !carry else { return nil }
            current = sum
            if fields.count >= 8 { break }
        }
        if let value = current, fields.count < 8 { fields.append(value) }
        guard fields.count >= 5 else { return nil }
        let counted = fields.prefix(8)
        let total = counted.reduce(0, &+)
        return (total &- fields[3] &- fields[4], total)
    }

    private static func readStat() -> (busy: UInt64, total: UInt64)? {
        let descriptor = open("/proc/stat", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 4, buffer.starts(with: Array("cpu ".utf8)) else { return nil }
        return parseStat(buffer.prefix(count))
    }

    private static func monotonic() -> UInt64 {
        var time = timespec()
        guard clock_gettime(CLOCK_MONOTONIC, &time) == 0 else { return 0 }
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
