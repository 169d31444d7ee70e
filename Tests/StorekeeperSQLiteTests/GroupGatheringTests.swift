import StorekeeperSQL
import Synchronization
import Testing

/// What decides whether a group commit waits for more writes (``GroupGathering``): the machine's load and the
/// longest wait.
@Suite("Group gathering")
struct GroupGatheringTests {
    @Test("Machine load: saturated after a window in which 85% of the cores' time was busy, not before")
    func machineLoad() {
        final class Clocks: Sendable {
            let wall = Atomic<UInt64>(0), busy = Atomic<UInt64>(0), total = Atomic<UInt64>(0)
        }
        let clocks = Clocks()
        let load = MachineLoad(
            wall: { clocks.wall.load(ordering: .relaxed) },
            times: { (clocks.busy.load(ordering: .relaxed), clocks.total.load(ordering: .relaxed)) })
        func advance(milliseconds: UInt64, busy: UInt64) {
            clocks.wall.add(milliseconds * 1_000_000, ordering: .relaxed)
            // Two cores: 200 ticks of 100 Hz a second between them.
            clocks.total.add(milliseconds / 5, ordering: .relaxed)
            clocks.busy.add(milliseconds / 5 * busy / 100, ordering: .relaxed)
        }
        #expect(!load.saturated())
        // All busy, but the window (100 ms) not over: the last window's answer stands.
        advance(milliseconds: 50, busy: 100)
        #expect(!load.saturated())
        advance(milliseconds: 50, busy: 100)
        #expect(load.saturated())
        // 90% busy over the next window: still saturated; 80%: not; half: not.
        advance(milliseconds: 100, busy: 90)
        #expect(load.saturated())
        advance(milliseconds: 100, busy: 80)
        #expect(!load.saturated())
        advance(milliseconds: 100, busy: 50)
        #expect(!load.saturated())
    }

    @Test("/proc/stat's first line: busy is every count but idle and iowait; guest time is not counted twice")
    func machineLoadParsing() {
        let line = Array("cpu  4529730 110779 879803 3285489 51585 0 195323 1357 77 3\ncpu0 1 2 3 4 5 6 7 8\n".utf8)
        let total: UInt64 = 4_529_730 + 110_779 + 879_803 + 3_285_489 + 51_585 + 0 + 195_323 + 1_357
        let parsed = MachineLoad.parseStat(line)
        #expect(parsed?.total == total)
        #expect(parsed?.busy == total - 3_285_489 - 51_585)
        // An older kernel's five counts are enough; fewer, or anything but digits, is no reading.
        #expect(MachineLoad.parseStat(Array("cpu 10 0 5 80 5".utf8))! == (15, 100))
        #expect(MachineLoad.parseStat(Array("cpu 10 0 5 80".utf8)) == nil)
        #expect(MachineLoad.parseStat(Array("cpu 10 0 x5 80 5".utf8)) == nil)
        #expect(MachineLoad.parseStat(Array("cpu 99999999999999999999 0 5 80 5".utf8)) == nil)
        #expect(MachineLoad.parseStat(Array("cpu 18446744073709551619 0 5 80 5".utf8)) == nil)
    }

    @Test("The longest wait in whole nanoseconds: none below zero, at most a century")
    func maxDelay() {
        func nanoseconds(_ delay: Duration) -> Int {
            GroupGathering(maxDelay: delay, target: 2, busy: { true }).maxDelayNanoseconds
        }
        #expect(nanoseconds(.milliseconds(1)) == 1_000_000)
        #expect(nanoseconds(.microseconds(2_500)) == 2_500_000)
        #expect(nanoseconds(.nanoseconds(1) / 2) == 0)
        #expect(nanoseconds(.milliseconds(-5)) == 0)
        #expect(nanoseconds(.seconds(3_155_760_000)) == 3_155_760_000_000_000_000)
        #expect(nanoseconds(.seconds(Int64.max)) == 3_155_760_000_000_000_000)
    }
}
