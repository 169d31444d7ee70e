/// A failure reported by SQLite, with its extended result code and message (never the bound values).
public struct SQLiteError: Error, Hashable, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int32
        public init(_ rawValue: Int32) { self.rawValue = rawValue }

        /// The primary result code (the low byte of an extended code).
        public var primary: Int32 { rawValue & 0xff }

        public static let constraint = Code(19)  // SQLITE_CONSTRAINT
        public static let busy = Code(5)  // SQLITE_BUSY
        public static let misuse = Code(21)  // SQLITE_MISUSE
        public static let cantOpen = Code(14)  // SQLITE_CANTOPEN

        public var description: String { String(rawValue) }
    }

    public let code: Code
    public let message: String
    /// The SQL being run, when known (statements never contain values: those are bound).
    public let sql: String?

    public var description: String { "SQLiteError \(code): \(message)" + (sql.map { " in `\($0)`" } ?? "") }

    public static func == (lhs: SQLiteError, rhs: SQLiteError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    /// Whether the failure is a constraint violation (unique, foreign key, not null, check).
    public var isConstraintViolation: Bool { code.primary == Code.constraint.rawValue }
}
