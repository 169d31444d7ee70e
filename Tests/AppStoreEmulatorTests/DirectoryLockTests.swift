import Foundation
import StorekeeperTestSupport
import Testing

@testable import AppStoreEmulator

/// The data directory's lock: one emulator at a time, and a lock given up a moment ago is taken.
@Suite("App Store emulator data directory lock")
struct DirectoryLockTests {
    @Test("A lock released within half a second is taken; one held longer refuses the directory with its reason")
    func waitsBriefly() throws {
        let directory = try ExternalTool.temporaryDirectory()
        let first = try DirectoryLock(directory: directory)
        // As a forked child's copy of the descriptor would: the lock goes ~100 ms after the second asks (on a
        // thread of its own: the asking one sleeps between its tries).
        Thread.detachNewThread {
            usleep(100_000)
            first.release()
        }
        let second = try DirectoryLock(directory: directory)
        defer { second.release() }
        #expect(throws: EmulatorError.self) { _ = try DirectoryLock(directory: directory) }
    }
}
