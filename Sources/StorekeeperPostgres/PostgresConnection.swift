internal import CStorekeeperPostgres
import Foundation
public import StorekeeperSQL

/// One libpq connection. Not thread-safe: ``PostgresDatabase`` confines each to its own serial executor.
///
/// Statements are written with `?` placeholders, as for SQLite, and prepared once per connection (named
/// server-side statements); values go as text except `bytea`, which goes and comes back as bytes.
public final class PostgresConnection {
    private let handle: OpaquePointer  // PGconn, owned
    /// Prepared statement names by SQL text and value types.
    private var statements: [String: String] = [:]
    /// Rows the last statement changed.
    public private(set) var changes = 0

    /// Opens a connection to `url` (`postgres://user:password@host:port/database?…`, or libpq's
    /// `key=value` form). Statements are bounded: `statement_timeout` 30 s, and a transaction left idle is
    /// ended after 60 s.
    public init(url: String, connectTimeoutSeconds: Int = 10) throws(PostgresError) {
        let keys = ["dbname", "connect_timeout", "application_name", "options"]
        let values = [
            url, String(connectTimeoutSeconds), "storekeeper",
            "-c statement_timeout=30000 -c idle_in_transaction_session_timeout=60000",
        ]
        let connection = Self.withCStrings(keys) { keys in
            Self.withCStrings(values) { values in PQconnectdbParams(keys, values, 1) }
        }
        guard let connection else { throw PostgresError(.connection, "out of memory") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Self.trimmed(PQerrorMessage(connection))
            PQfinish(connection)
            throw PostgresError(.connection, message)
        }
        handle = connection
        // The server's notices (NOTICE, WARNING) are not errors: libpq would print them on stderr.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
    }

    deinit { PQfinish(handle) }

    /// Whether libpq still considers the connection usable.
    public var isOpen: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Runs statements without values (one or several separated by `;`), as a script.
    public func executeScript(_ sql: String) throws(PostgresError) {
        guard let result = PQexec(handle, sql) else { throw connectionError() }
        defer { PQclear(result) }
        try check(result)
    }

    /// Runs one statement with its values and answers every row.
    @discardableResult
    public func execute(_ sql: String, _ values: [SQLValue] = []) throws(PostgresError) -> [Row] {
        var types: [UInt32] = []
        var formats: [Int32] = []
        var buffers: [[UInt8]?] = []
        types.reserveCapacity(values.count)
        for value in values {
            switch value {
            case .null:
                types.append(0)
                formats.append(0)
                buffers.append(nil)
            case .integer(let number):
                types.append(20)  // int8
                formats.append(0)
                buffers.append(Array(String(number).utf8) + [0])
            case .real(let number):
                types.append(701)  // float8
                formats.append(0)
                buffers.append(Array(Self.text(number).utf8) + [0])
            case .text(let string):
                types.append(0)  // inferred from the statement
                formats.append(0)
                buffers.append(Array(string.utf8) + [0])
            case .blob(let bytes):
                types.append(17)  // bytea, sent as bytes
                formats.append(1)
                buffers.append(bytes)
            }
        }
        let name = try prepared(sql, types: types)
        let lengths = buffers.map { Int32($0?.count ?? 0) }
        let pointers = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: max(values.count, 1))
        var owned: [UnsafeMutableRawPointer] = []
        defer {
            for pointer in owned { pointer.deallocate() }
            pointers.deallocate()
        }
        for (index, buffer) in buffers.enumerated() {
            guard let buffer else {
                pointers[index] = nil
                continue
            }
            let copy = UnsafeMutableRawPointer.allocate(byteCount: max(buffer.count, 1), alignment: 1)
            buffer.withUnsafeBytes { copy.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            owned.append(copy)
            pointers[index] = UnsafePointer(copy.assumingMemoryBound(to: CChar.self))
        }
        let result = lengths.withUnsafeBufferPointer { lengths in
            formats.withUnsafeBufferPointer { formats in
                PQexecPrepared(
                    handle, name, Int32(values.count), pointers, lengths.baseAddress, formats.baseAddress, 0)
            }
        }
        guard let result else { throw connectionError() }
        defer { PQclear(result) }
        try check(result, sql: sql)
        changes = Int(String(cString: PQcmdTuples(result))) ?? 0
        return Self.rows(result)
    }

    private func prepared(_ sql: String, types: [UInt32]) throws(PostgresError) -> String {
        let key = types.map(String.init).joined(separator: ",") + "|" + sql
        if let name = statements[key] { return name }
        if statements.count >= 256 {
            try executeScript("DEALLOCATE ALL")
            statements.removeAll()
        }
        let name = "sk\(statements.count + 1)"
        let text = Self.numberedPlaceholders(sql)
        guard
            let result = types.withUnsafeBufferPointer({
                PQprepare(handle, name, text, Int32(types.count), $0.baseAddress)
            })
        else { throw connectionError() }
        defer { PQclear(result) }
        try check(result, sql: sql)
        statements[key] = name
        return name
    }

    private func check(_ result: OpaquePointer, sql: String? = nil) throws(PostgresError) {
        let status = PQresultStatus(result)
        guard status != PGRES_COMMAND_OK, status != PGRES_TUPLES_OK, status != PGRES_EMPTY_QUERY else { return }
        let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let message = Self.trimmed(PQresultErrorMessage(result))
        let kind: PostgresError.Kind = isOpen ? .server : .connection
        throw PostgresError(kind, sqlState: state, message + (sql.map { " in `\(Self.shortened($0))`" } ?? ""))
    }

    private func connectionError() -> PostgresError {
        PostgresError(.connection, Self.trimmed(PQerrorMessage(handle)))
    }

    // MARK: Conversions

    private static func rows(_ result: OpaquePointer) -> [Row] {
        let count = Int(PQntuples(result))
        let fields = Int(PQnfields(result))
        guard count > 0, fields > 0 else { return [] }
        let columns = (0..<fields).map { String(cString: PQfname(result, Int32($0))) }
        let types = (0..<fields).map { PQftype(result, Int32($0)) }
        var rows: [Row] = []
        rows.reserveCapacity(count)
        for row in 0..<Int32(count) {
            var values: [SQLValue] = []
            values.reserveCapacity(fields)
            for field in 0..<Int32(fields) {
                guard PQgetisnull(result, row, field) == 0, let pointer = PQgetvalue(result, row, field) else {
                    values.append(.null)
                    continue
                }
                let length = Int(PQgetlength(result, row, field))
                let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
                values.append(value(bytes, type: types[Int(field)]))
            }
            rows.append(Row(columns: columns, values: values))
        }
        return rows
    }

    /// A text-format result value as the SQL vocabulary's value, by the column's type.
    static func value(_ bytes: UnsafeRawBufferPointer, type: UInt32) -> SQLValue {
        let text = String(decoding: bytes, as: UTF8.self)
        switch type {
        case 20, 21, 23, 26:  // int8, int2, int4, oid
            return Int64(text).map(SQLValue.integer) ?? .text(text)
        case 700, 701, 1700:  // float4, float8, numeric
            return Double(text).map(SQLValue.real) ?? .text(text)
        case 16:  // bool
            return .integer(text == "t" ? 1 : 0)
        case 17:  // bytea, hex form
            return hexBytes(bytes).map(SQLValue.blob) ?? .text(text)
        default:
            return .text(text)
        }
    }

    /// `\x0a1b…` as bytes; nil when it is not that form.
    static func hexBytes(_ bytes: UnsafeRawBufferPointer) -> [UInt8]? {
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "\\"), bytes[1] == UInt8(ascii: "x"), bytes.count % 2 == 0
        else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count - 2) / 2)
        var index = 2
        while index < bytes.count {
            guard let high = nibble(bytes[index]), let low = nibble(bytes[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    /// A double as PostgreSQL reads it back exactly.
    static func text(_ number: Double) -> String {
        if number.isNaN { return "NaN" }
        if number.isInfinite { return number > 0 ? "Infinity" : "-Infinity" }
        return number.description
    }

    /// SQLite's `?` placeholders as PostgreSQL's `$1`, `$2`, … (a `?` inside a quoted string or identifier
    /// stays).
    static func numberedPlaceholders(_ sql: String) -> String {
        var out = ""
        out.reserveCapacity(sql.utf8.count + 16)
        var number = 0
        var quote: Character?
        for character in sql {
            if let open = quote {
                if character == open { quote = nil }
                out.append(character)
            } else if character == "'" || character == "\"" {
                quote = character
                out.append(character)
            } else if character == "?" {
                number += 1
                out += "$\(number)"
            } else {
                out.append(character)
            }
        }
        return out
    }

    private static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
        guard let message else { return "unknown error" }
        return String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func shortened(_ sql: String) -> String {
        let line = sql.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .joined(separator: " ")
        return line.count > 120 ? String(line.prefix(117)) + "..." : line
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R)
        -> R
    {
        let copies = strings.map { strdup($0) }
        defer { for copy in copies { free(copy) } }
        let pointers = copies.map { UnsafePointer($0) } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

extension PostgresConnection: MigrationConnection {}
