import Foundation
import StorekeeperSQLite
import StorekeeperTestSupport
import Testing

/// Database files hold secrets (purchases, keys' names, shared secrets in raw inputs): owner only.
@Suite("SQLite database files are readable by their owner only")
struct FileModeTests {
    @Test("A new file is 0600 under a loose umask; one left readable by others (and its WAL files) is narrowed")
    func modes() async throws {
        let old = umask(0o022)
        defer { umask(old) }
        let fresh = try DatabaseTests.temporaryPath()
        let database = try Database(path: fresh)
        try await database.write { try $0.executeScript("CREATE TABLE t (x INTEGER)") }
        for path in [fresh, fresh + "-wal", fresh + "-shm"] where FileManager.default.fileExists(atPath: path) {
            #expect(try ExternalTool.mode(path) == 0o600, "\(path)")
        }
        let left = try DatabaseTests.temporaryPath()
        for path in [left, left + "-wal", left + "-shm"] {
            #expect(FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o644]))
        }
        _ = try Database(path: left)
        for path in [left, left + "-wal", left + "-shm"] { #expect(try ExternalTool.mode(path) == 0o600, "\(path)") }
    }
}
