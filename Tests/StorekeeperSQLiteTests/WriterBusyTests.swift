import Foundation
import StorekeeperSQL
import StorekeeperSQLite
import Synchronization
import Testing

@Suite("SQLite writer's busy time")
struct WriterBusyTests {
    @Test("Write transactions add their time to the writer's busy time; reads and waiting for the writer do not")
    func writerBusy() async throws {
        let database = try Database(path: try DatabaseTests.temporaryPath())
        try await database.migrate(DatabaseTests.schema)
        let before = database.writerBusy
        // A read that takes 50 ms is not the writer's.
        try await database.read { _ in usleep(50_000) }
        _ = try await database.readConcurrently { _ in usleep(50_000) }
        #expect(database.writerBusy - before < .milliseconds(50))
        // A write and a group commit that each take 40 ms, one of them rolled back.
        struct Refused: Error {}
        try await database.write { connection in
            try connection.execute("INSERT INTO accounts VALUES ('a1', 'USA')")
            usleep(40_000)
        }
        await #expect(throws: Refused.self) {
            try await database.writeGrouped { _ -> Void in
                usleep(40_000)
                throw Refused()
            }
        }
        let afterWrites = database.writerBusy
        #expect(afterWrites - before >= .milliseconds(80))
        // Waiting for the writer is not being the writer: a write queued behind a held one for 300 ms or more
        // adds its own short time, not its wait.
        let (held, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let inside = Mutex<(start: ContinuousClock.Instant, end: ContinuousClock.Instant)?>(nil)
        let holder = Task {
            try await database.write { _ in
                let start = ContinuousClock.now
                held.signal()
                _ = release.wait(timeout: .now() + 60)
                inside.withLock { $0 = (start, ContinuousClock.now) }
            }
        }
        while held.wait(timeout: .now()) != .success { try await Task.sleep(for: .milliseconds(2)) }
        let queued = Task { try await database.writeGrouped { _ in () } }
        while database.waitingWrites == 0 { try await Task.sleep(for: .milliseconds(2)) }
        try await Task.sleep(for: .milliseconds(300))
        release.signal()
        try await holder.value
        try await queued.value
        let body = try #require(inside.withLock { $0 })
        let added = database.writerBusy - afterWrites
        // The holder's body is in it; the queued write's wait is not (its own transaction, and the holder's
        // BEGIN and COMMIT, changing nothing, take far less than 300 ms).
        #expect(added >= body.end - body.start)
        #expect(added - (body.end - body.start) < .milliseconds(300))
    }

    @Test("The writer's CPU time counts a transaction's work on its thread, not its sleeping")
    func writerCPU() async throws {
        let database = try Database(path: try DatabaseTests.temporaryPath())
        try await database.migrate(DatabaseTests.schema)
        let (busy, cpu) = (database.writerBusy, database.writerCPU)
        // 60 ms asleep in a write and in a group: busy, not on a core.
        try await database.write { _ in usleep(60_000) }
        _ = try await database.writeGrouped { _ in usleep(60_000) }
        #expect(database.writerBusy - busy >= .milliseconds(120))
        #expect(database.writerCPU - cpu < .milliseconds(60))
        // 20 ms of this thread's CPU in a write (however long the wall clock takes on a busy machine): counted.
        let (busyBefore, cpuBefore) = (database.writerBusy, database.writerCPU)
        let worked = try await database.write { _ -> Duration in
            func threadCPU() -> Duration {
                var time = timespec()
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
                return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
            }
            let (start, began) = (threadCPU(), ContinuousClock.now)
            while threadCPU() - start < .milliseconds(20), ContinuousClock.now - began < .seconds(60) {}
            return threadCPU() - start
        }
        let addedCPU = database.writerCPU - cpuBefore
        #expect(worked >= .milliseconds(20))
        #expect(addedCPU >= worked)
        #expect(addedCPU <= database.writerBusy - busyBefore + .milliseconds(1))
    }
}
