import StorekeeperSQLite

/// Where the emulator keeps its state document: written after every change, read once at start. One
/// contract (`StateStorageContractTests`) holds for every backend; a PostgreSQL backend plugs in here.
public protocol StateStorage: Sendable {
    /// The last saved document, or nil before the first save.
    func load() async throws -> [UInt8]?
    /// Replaces the document durably: when this returns, a crash cannot lose it.
    func save(_ document: [UInt8]) async throws
}

/// The state document in a SQLite file (WAL, `synchronous=FULL`).
public struct SQLiteStateStorage: StateStorage {
    private let database: Database

    static let migrations = [
        Migration("001-state", "CREATE TABLE state (id INTEGER PRIMARY KEY CHECK (id = 1), document BLOB NOT NULL)")
    ]

    public init(path: String) async throws {
        database = try Database(path: path)
        try await database.migrate(Self.migrations)
    }

    public func load() async throws -> [UInt8]? {
        try await database.read { try $0.execute("SELECT document FROM state WHERE id = 1") }.first?["document"].bytes
    }

    public func save(_ document: [UInt8]) async throws {
        try await database.write { connection in
            try connection.execute("INSERT OR REPLACE INTO state (id, document) VALUES (1, ?)", [.blob(document)])
        }
    }
}

/// The state document in memory (tests, throw-away emulators).
public actor InMemoryStateStorage: StateStorage {
    private var document: [UInt8]?

    public init() {}

    public func load() -> [UInt8]? { document }
    public func save(_ document: [UInt8]) { self.document = document }
}
