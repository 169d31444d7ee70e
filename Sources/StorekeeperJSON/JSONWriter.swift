/// Serializes ``JSONValue`` (RFC 8259), compact or indented by two spaces, members in stored order.
public enum JSONWriter {
    /// Members written beside others as the value is written, with no copy of it: after an integer member
    /// `key`, the member `add` answers (a date's ISO 8601 form beside its epoch milliseconds); nothing inside
    /// the members named in `skipping` (maps keyed by ids).
    public struct Siblings: Sendable {
        public var add: @Sendable (_ key: String, _ value: Int64) -> (key: String, value: String)?
        public var skipping: Set<String>

        public init(
            skipping: Set<String> = [], add: @escaping @Sendable (String, Int64) -> (key: String, value: String)?
        ) {
            self.add = add
            self.skipping = skipping
        }
    }

    public static func string(_ value: JSONValue, pretty: Bool = false) -> String {
        String(decoding: bytes(value, pretty: pretty), as: UTF8.self)
    }

    /// The UTF-8 bytes, written straight into one array (no intermediate string to copy out of).
    public static func bytes(_ value: JSONValue, pretty: Bool = false, siblings: Siblings? = nil) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        write(value, into: &output, pretty: pretty, indent: 0, siblings: siblings)
        return output
    }

    private static func write(
        _ value: JSONValue, into output: inout [UInt8], pretty: Bool, indent: Int, siblings: Siblings? = nil
    ) {
        switch value {
        case .null: output += "null".utf8
        case .bool(let flag): output += (flag ? "true" : "false").utf8
        case .integer(let number): output += String(number).utf8
        case .double(let number):
            if number.isFinite {
                if number.rounded() == number && abs(number) < 1e15 {
                    // Keep a fraction so the value reads back as a double, not an integer.
                    output += (String(Int64(number)) + ".0").utf8
                } else {
                    output += "\(number)".utf8
                }
            } else {
                output += "null".utf8
            }
        case .string(let text): writeString(text, into: &output)
        case .array(let items):
            if items.isEmpty {
                output += "[]".utf8
                return
            }
            output.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                newline(&output, pretty: pretty, indent: indent + 1)
                write(item, into: &output, pretty: pretty, indent: indent + 1, siblings: siblings)
            }
            newline(&output, pretty: pretty, indent: indent)
            output.append(UInt8(ascii: "]"))
        case .object(let object):
            if object.isEmpty {
                output += "{}".utf8
                return
            }
            output.append(UInt8(ascii: "{"))
            for (index, member) in object.members.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                newline(&output, pretty: pretty, indent: indent + 1)
                writeString(member.key, into: &output)
                output += (pretty ? ": " : ":").utf8
                guard let siblings else {
                    write(member.value, into: &output, pretty: pretty, indent: indent + 1)
                    continue
                }
                switch member.value {
                case .integer(let number):
                    write(member.value, into: &output, pretty: pretty, indent: indent + 1)
                    if let sibling = siblings.add(member.key, number) {
                        output.append(UInt8(ascii: ","))
                        newline(&output, pretty: pretty, indent: indent + 1)
                        writeString(sibling.key, into: &output)
                        output += (pretty ? ": " : ":").utf8
                        writeString(sibling.value, into: &output)
                    }
                case .object, .array:
                    write(
                        member.value, into: &output, pretty: pretty, indent: indent + 1,
                        siblings: siblings.skipping.contains(member.key) ? nil : siblings)
                default:
                    write(member.value, into: &output, pretty: pretty, indent: indent + 1)
                }
            }
            newline(&output, pretty: pretty, indent: indent)
            output.append(UInt8(ascii: "}"))
        }
    }

    private static func newline(_ output: inout [UInt8], pretty: Bool, indent: Int) {
        guard pretty else { return }
        output.append(UInt8(ascii: "\n"))
        output += repeatElement(UInt8(ascii: " "), count: 2 * indent)
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private static func writeString(_ text: String, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        // Most strings (ids, base64, JWS) need no escaping: append them whole.
        @inline(__always) func needsNoEscape(_ byte: UInt8) -> Bool {
            byte >= 0x20 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") && byte < 0xE2
        }
        // Over the contiguous bytes when the string has them (native strings do): a tight loop, then one copy.
        let plain =
            text.utf8.withContiguousStorageIfAvailable { bytes in
                guard bytes.allSatisfy(needsNoEscape) else { return false }
                output.append(contentsOf: bytes)
                return true
            }
            ?? false
        if plain {
            output.append(UInt8(ascii: "\""))
            return
        }
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\"".utf8
            case "\\": output += "\\\\".utf8
            case "\n": output += "\\n".utf8
            case "\r": output += "\\r".utf8
            case "\t": output += "\\t".utf8
            case _ where scalar.value < 0x20 || scalar.value == 0x2028 || scalar.value == 0x2029:
                let value = Int(scalar.value)
                output += "\\u".utf8
                for shift in [12, 8, 4, 0] { output.append(hexDigits[(value >> shift) & 0xf]) }
            default: if let encoded = UTF8.encode(scalar) { output += encoded }
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}
