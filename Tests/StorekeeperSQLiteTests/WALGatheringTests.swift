import Foundation
import StorekeeperSQL
import StorekeeperTestSupport
import Testing

@testable import StorekeeperSQLite

/// The writer's VFS (CStorekeeperSQLiteVFS): a WAL file's writes gathered into few calls, in the file before a
/// commit returns, and read back by the writing connection whenever it reads the WAL. Each test uses its
/// connection on its own thread, without suspending, so that the VFS's per-thread counts are its own.
@Suite("SQLite WAL gathering")
struct WALGatheringTests {
    /// A gathering connection in WAL mode; with `cachePages`, a cache that small, so that a transaction of more
    /// pages spills them into the WAL before it commits.
    static func open(_ path: String, cachePages: Int? = nil) throws -> Connection {
        let connection = try Connection(path: path, gatheringWAL: true)
        try connection.execute("PRAGMA journal_mode=WAL")
        if let cachePages { try connection.executeScript("PRAGMA cache_size=\(cachePages)") }
        try connection.executeScript("CREATE TABLE IF NOT EXISTS blobs (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        return connection
    }

    /// Inserts `count` rows of 3,000 random bytes each: at least one page a row.
    static func insert(_ count: Int, into connection: Connection) throws {
        for _ in 0..<count { try connection.execute("INSERT INTO blobs (body) VALUES (randomblob(3000))") }
    }

    /// Opens the database at `path` with SQLite's own VFS and expects `rows` rows, whole.
    static func expectWhole(_ path: String, rows: Int64, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let plain = try Connection(path: path)
        #expect(
            try plain.execute("SELECT count(*) AS n FROM blobs").first?["n"] == .integer(rows),
            sourceLocation: sourceLocation)
        #expect(
            try plain.execute("PRAGMA integrity_check").first?["integrity_check"] == "ok",
            sourceLocation: sourceLocation)
    }

    @Test("A commit's frames go out in calls of many frames, and are in the files when the commit returns")
    func gatheredAndDurable() throws {
        let path = try DatabaseTests.temporaryPath()
        let connection = try Self.open(path)
        let before = Connection.gatheringCounts
        try connection.executeScript("BEGIN")
        try Self.insert(200, into: connection)
        try connection.executeScript("COMMIT")
        let after = Connection.gatheringCounts
        let gathered = after.gathered - before.gathered
        let written = after.written - before.written
        // Two writes a frame (its header, its page), ~200 frames: at most 31 frames a call.
        #expect(gathered >= 400)
        #expect(written >= 1)
        #expect(written <= gathered / 40)

        // The files as a crash right now would leave them (the connection still open, nothing closed): the
        // committed rows are there for a connection of SQLite's own VFS.
        let copy = try ExternalTool.temporaryDirectory().appendingPathComponent("copy.sqlite").path
        for suffix in ["", "-wal"] { try FileManager.default.copyItem(atPath: path + suffix, toPath: copy + suffix) }
        try Self.expectWhole(copy, rows: 200)
    }

    @Test("A transaction that spills its cache reads its own frames back, and its rollback leaves nothing")
    func spilledFramesReadBack() throws {
        let path = try DatabaseTests.temporaryPath()
        let connection = try Self.open(path, cachePages: 8)
        try connection.executeScript("BEGIN")
        try Self.insert(300, into: connection)
        // Most of the 300 pages left the 8-page cache for the WAL (some still in the VFS's buffer): reading every
        // row reads them back.
        #expect(
            try connection.execute("SELECT count(*) AS n, sum(length(body)) AS size FROM blobs").first.map {
                [$0["n"], $0["size"]]
            } == [300, 900_000])
        try connection.executeScript("ROLLBACK")
        #expect(try connection.execute("SELECT count(*) AS n FROM blobs").first?["n"] == 0)

        // Written again over the rolled-back frames, committed: another connection reads exactly that.
        try connection.executeScript("BEGIN")
        try Self.insert(250, into: connection)
        try connection.executeScript("COMMIT")
        try Self.expectWhole(path, rows: 250)
    }

    @Test("Many small commits and a checkpoint that starts the WAL again keep every row")
    func checkpointRestart() throws {
        let path = try DatabaseTests.temporaryPath()
        let connection = try Self.open(path)
        for round in 0..<3 {
            for _ in 0..<40 {
                try connection.executeScript("BEGIN")
                try Self.insert(3, into: connection)
                try connection.executeScript("COMMIT")
            }
            // Copies the WAL into the database; the next write starts the WAL from its beginning (its header
            // written again at offset 0, out of the buffer's order).
            let row = try connection.execute("PRAGMA wal_checkpoint(PASSIVE)").first
            #expect(row?.values.count == 3)
            try Self.expectWhole(path, rows: Int64((round + 1) * 120))
        }
    }

    @Test("A buffer that cannot go out (a full disk) fails the read that needed it and leaves the database whole")
    func failedFlushLosesNothing() throws {
        let path = try DatabaseTests.temporaryPath()
        var committed = false
        do {
            let connection = try Self.open(path, cachePages: 8)
            try connection.executeScript("BEGIN")
            // Spilled to the WAL, the last ~31 frames still in the buffer.
            try Self.insert(300, into: connection)
            try connection.executeScript("SAVEPOINT later")
            try Self.insert(10, into: connection)
            // Reading the spilled pages writes the buffer out first: that write fails (a full disk), and so does
            // the read (SQLite 3.40 then rolls the transaction back; what follows commits or finds none).
            Connection.failGatheredFlushes(1)
            #expect(throws: SQLiteError.self) { try connection.execute("SELECT sum(length(body)) FROM blobs") }
            Connection.failGatheredFlushes(0)
            try? connection.executeScript("ROLLBACK TO later")
            try? connection.executeScript("RELEASE later")
            committed = (try? connection.executeScript("COMMIT")) != nil
        }
        try Self.expectWhole(path, rows: committed ? 300 : 0)
    }

    @Test("A transaction rolled back after spilling leaves another connection's next commit whole")
    func rolledBackFramesBeforeAnotherWriter() throws {
        let path = try DatabaseTests.temporaryPath()
        do {
            let connection = try Self.open(path, cachePages: 8)
            // Spilled, every frame still in the buffer (20 pages of 4 KiB), from where the last commit ended.
            try connection.executeScript("BEGIN")
            try Self.insert(20, into: connection)
            try connection.executeScript("ROLLBACK")
            // Another connection, of SQLite's own VFS, writes the WAL from where the last commit ended.
            let other = try Connection(path: path)
            try other.executeScript("BEGIN")
            try Self.insert(10, into: other)
            try other.executeScript("COMMIT")
            // The first connection reads and closes (each writes out what its buffer still holds).
            #expect(try connection.execute("SELECT count(*) AS n FROM blobs").first?["n"] == 10)
        }
        try Self.expectWhole(path, rows: 10)
    }
}
