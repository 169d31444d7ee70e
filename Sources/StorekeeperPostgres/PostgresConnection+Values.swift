internal import CStorekeeperPostgres
import StorekeeperSQL

/// Values between the SQL vocabulary and libpq's text formats: result rows, `bytea`'s hex form, doubles that
/// read back exactly, and `?` placeholders as PostgreSQL's `$n`.
extension PostgresConnection {
    static func rows(_ result: OpaquePointer) -> [Row] {
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
}
