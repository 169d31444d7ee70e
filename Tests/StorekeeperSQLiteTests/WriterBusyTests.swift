import Foundation
import StorekeeperSQL
import StorekeeperSQLite
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
        // Waiting for the writer is not being the writer: a write queued for 60 ms behind a held one adds its
        // own short time, not its wait (which would add as much again as the holder's).
        let (holder, release) = try await DatabaseTests.holdWriter(database)
        let heldFrom = ContinuousClock.now
        let queued = Task { try await database.writeGrouped { _ in () } }
        while database.waitingWrites == 0 { try await Task.sleep(for: .milliseconds(2)) }
        try await Task.sleep(for: .milliseconds(60))
        let heldFor = ContinuousClock.now - heldFrom
        release.signal()
        try await holder.value
        try await queued.value
        let added = database.writerBusy - afterWrites
        #expect(added >= .milliseconds(60))
        #expect(added < heldFor + .milliseconds(50))
    }
}
