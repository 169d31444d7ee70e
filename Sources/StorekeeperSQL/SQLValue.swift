/// A value a SQL database stores or binds: SQLite's five storage classes, which PostgreSQL's columns map onto
/// (bigint, double precision, text, bytea).
public enum SQLValue: Hashable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public var int64: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    public var double: Double? {
        switch self {
        case .real(let value): value
        case .integer(let value): Double(value)
        default: nil
        }
    }

    public var string: String? {
        if case .text(let value) = self { return value }
        return nil
    }

    public var bytes: [UInt8]? {
        if case .blob(let value) = self { return value }
        return nil
    }

    public var isNull: Bool { self == .null }
}

extension SQLValue: ExpressibleByIntegerLiteral, ExpressibleByStringLiteral, ExpressibleByNilLiteral {
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(stringLiteral value: String) { self = .text(value) }
    public init(nilLiteral: ()) { self = .null }
}

/// One result row, by column name.
public struct Row: Sendable, Hashable {
    public let columns: [String]
    public let values: [SQLValue]

    public init(columns: [String], values: [SQLValue]) {
        self.columns = columns
        self.values = values
    }

    public subscript(_ column: String) -> SQLValue {
        // Lengths first: most names differ in length, and comparing two long names' bytes was most of reading a
        // wide row by its names (`perf`: ~5% of the lifecycle writer's own Swift samples).
        let length = column.utf8.count
        guard let index = columns.firstIndex(where: { $0.utf8.count == length && $0 == column }) else { return .null }
        return values[index]
    }

    public subscript(_ index: Int) -> SQLValue { values[index] }
}
