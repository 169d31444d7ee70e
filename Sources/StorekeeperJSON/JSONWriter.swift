/// Serializes ``JSONValue`` (RFC 8259), compact or indented by two spaces, members in stored order.
public enum JSONWriter {
    public static func string(_ value: JSONValue, pretty: Bool = false) -> String {
        var output = ""
        write(value, into: &output, pretty: pretty, indent: 0)
        return output
    }

    public static func bytes(_ value: JSONValue, pretty: Bool = false) -> [UInt8] {
        Array(string(value, pretty: pretty).utf8)
    }

    private static func write(_ value: JSONValue, into output: inout String, pretty: Bool, indent: Int) {
        switch value {
        case .null: output += "null"
        case .bool(let flag): output += flag ? "true" : "false"
        case .integer(let number): output += String(number)
        case .double(let number):
            if number.isFinite {
                if number.rounded() == number && abs(number) < 1e15 {
                    // Keep a fraction so the value reads back as a double, not an integer.
                    output += String(Int64(number)) + ".0"
                } else {
                    output += "\(number)"
                }
            } else {
                output += "null"
            }
        case .string(let text): writeString(text, into: &output)
        case .array(let items):
            if items.isEmpty {
                output += "[]"
                return
            }
            output += "["
            for (index, item) in items.enumerated() {
                if index > 0 { output += "," }
                newline(&output, pretty: pretty, indent: indent + 1)
                write(item, into: &output, pretty: pretty, indent: indent + 1)
            }
            newline(&output, pretty: pretty, indent: indent)
            output += "]"
        case .object(let object):
            if object.isEmpty {
                output += "{}"
                return
            }
            output += "{"
            for (index, member) in object.members.enumerated() {
                if index > 0 { output += "," }
                newline(&output, pretty: pretty, indent: indent + 1)
                writeString(member.key, into: &output)
                output += pretty ? ": " : ":"
                write(member.value, into: &output, pretty: pretty, indent: indent + 1)
            }
            newline(&output, pretty: pretty, indent: indent)
            output += "}"
        }
    }

    private static func newline(_ output: inout String, pretty: Bool, indent: Int) {
        guard pretty else { return }
        output += "\n"
        output += String(repeating: "  ", count: indent)
    }

    private static let hexDigits = Array("0123456789abcdef")

    private static func writeString(_ text: String, into output: inout String) {
        output += "\""
        // Most strings (ids, base64, JWS) need no escaping: append them whole.
        @inline(__always) func needsNoEscape(_ byte: UInt8) -> Bool {
            byte >= 0x20 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") && byte < 0xE2
        }
        // Over the contiguous bytes when the string has them (native strings do): a tight loop.
        let plain =
            text.utf8.withContiguousStorageIfAvailable { $0.allSatisfy(needsNoEscape) }
            ?? text.utf8.allSatisfy(needsNoEscape)
        if plain {
            output += text
            output += "\""
            return
        }
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x2028 || scalar.value == 0x2029:
                let value = Int(scalar.value)
                output += "\\u"
                for shift in [12, 8, 4, 0] { output.append(hexDigits[(value >> shift) & 0xf]) }
            default: output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }
}
