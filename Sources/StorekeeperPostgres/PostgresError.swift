/// A PostgreSQL failure: where it happened, the server's SQLSTATE when it sent one, and its message.
///
/// The message is libpq's or the server's; a connection's is scrubbed of its URL and that URL's passwords
/// (libpq quotes a URL, or a part of it, that does not parse).
public struct PostgresError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable {
        /// The connection could not be opened or was lost.
        case connection
        /// The server refused a statement (see ``sqlState``).
        case server
        /// The caller's mistake (a statement with the wrong number of values, say).
        case misuse
    }

    public let kind: Kind
    /// The five-character SQLSTATE (`40001`, `23505`, …), when the server sent one.
    public let sqlState: String?
    public let message: String

    public init(_ kind: Kind, sqlState: String? = nil, _ message: String) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
    }

    public var description: String {
        "PostgreSQL \(kind.rawValue) error" + (sqlState.map { " \($0)" } ?? "") + ": " + message
    }

    /// A serializable transaction lost to a concurrent one (40001) or a deadlock (40P01): run it again.
    public var isSerializationFailure: Bool { sqlState == "40001" || sqlState == "40P01" }

    /// The connection is gone (class 08, or the server shutting down: 57P01–57P03).
    public var isConnectionFailure: Bool {
        kind == .connection || sqlState?.hasPrefix("08") == true || ["57P01", "57P02", "57P03"].contains(sqlState)
    }

    /// A unique or primary key already holds the value (23505).
    public var isUniqueViolation: Bool { sqlState == "23505" }
}
