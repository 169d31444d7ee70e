import AppStoreEmulator
import Foundation
import StorekeeperTestSupport
import Testing

/// One contract for every ``StateStorage`` backend.
@Suite("State storage contract")
struct StateStorageContractTests {
    enum Backend: String, CaseIterable, CustomStringConvertible {
        case memory, sqlite
        var description: String { rawValue }

        func make(path: String) async throws -> any StateStorage {
            switch self {
            case .memory: InMemoryStateStorage()
            case .sqlite: try await SQLiteStateStorage(path: path)
            }
        }
    }

    @Test(
        "Empty before the first save; the last save wins; documents of any size round-trip", arguments: Backend.allCases
    )
    func contract(backend: Backend) async throws {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("state.sqlite").path
        let storage = try await backend.make(path: path)
        #expect(try await storage.load() == nil)
        try await storage.save(Array("first".utf8))
        try await storage.save(Array("second".utf8))
        #expect(try await storage.load() == Array("second".utf8))
        let large = (0..<2_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try await storage.save(large)
        #expect(try await storage.load() == large)
        try await storage.save([])
        #expect(try await storage.load() == [])
    }

    @Test("SQLite storage survives reopening")
    func durable() async throws {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("state.sqlite").path
        try await SQLiteStateStorage(path: path).save(Array("kept".utf8))
        #expect(try await SQLiteStateStorage(path: path).load() == Array("kept".utf8))
    }
}
