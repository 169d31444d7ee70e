/// A bounded JSON reader (RFC 8259) that keeps member order and integer exactness.
///
/// Bounds: input size, nesting depth, members per container and string length. Duplicate keys are an
/// error (a signed payload must mean one thing). Numbers without fraction or exponent that fit in 64 bits
/// become ``JSONValue/integer(_:)``; all others ``JSONValue/double(_:)``.
public struct JSONParser {
    public struct Limits: Sendable, Hashable {
        public var maxSize: Int
        public var maxDepth: Int
        public var maxMembers: Int

        public init(maxSize: Int = 4 << 20, maxDepth: Int = 32, maxMembers: Int = 100_000) {
            self.maxSize = maxSize
            self.maxDepth = maxDepth
            self.maxMembers = maxMembers
        }
    }

    public struct Error: Swift.Error, Hashable, CustomStringConvertible, Sendable {
        public let reason: String
        public let offset: Int
        public var description: String { "invalid JSON at byte \(offset): \(reason)" }

        /// Where the error is in `bytes` (the document parsed), as a person finds it: line and column, from 1.
        public func location(in bytes: some Collection<UInt8>) -> String {
            var line = 1
            var column = 1
            for byte in bytes.prefix(offset) {
                if byte == UInt8(ascii: "\n") {
                    line += 1
                    column = 1
                } else if byte & 0xC0 != 0x80 {
                    column += 1
                }
            }
            return "line \(line), column \(column): \(reason)"
        }
    }

    private let bytes: [UInt8]
    private let limits: Limits
    private var index = 0

    private init(bytes: [UInt8], limits: Limits) {
        self.bytes = bytes
        self.limits = limits
    }

    /// Parses one JSON value spanning all of `bytes` (surrounding whitespace allowed).
    public static func parse(_ bytes: some Collection<UInt8>, limits: Limits = Limits()) throws -> JSONValue {
        let array = Array(bytes)
        guard array.count <= limits.maxSize else {
            throw Error(reason: "document of \(array.count) bytes exceeds \(limits.maxSize)", offset: 0)
        }
        var parser = JSONParser(bytes: array, limits: limits)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == array.count else { throw parser.error("trailing characters") }
        return value
    }

    public static func parse(_ text: String, limits: Limits = Limits()) throws -> JSONValue {
        try parse(Array(text.utf8), limits: limits)
    }

    private func error(_ reason: String) -> Error { Error(reason: reason, offset: index) }

    private mutating func skipWhitespace() {
        while index < bytes.count, [0x20, 0x09, 0x0a, 0x0d].contains(bytes[index]) { index += 1 }
    }

    private mutating func value(depth: Int) throws -> JSONValue {
        guard depth <= limits.maxDepth else { throw error("nesting deeper than \(limits.maxDepth)") }
        guard index < bytes.count else { throw error("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth)
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        default: return try number()
        }
    }

    private mutating func literal(_ word: String) throws {
        let expected = Array(word.utf8)
        guard bytes.count - index >= expected.count, Array(bytes[index..<index + expected.count]) == expected else {
            throw error("unexpected character")
        }
        index += expected.count
    }

    private mutating func object(depth: Int) throws -> JSONValue {
        index += 1
        var object = JSONObject()
        var seen = Set<String>()
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a member name") }
            let key = try string()
            guard seen.insert(key).inserted else { throw error("duplicate member name") }
            guard seen.count <= limits.maxMembers else { throw error("more than \(limits.maxMembers) members") }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            // `seen` has just refused a repeated name: appended without a search (a search per member made
            // an object of n members cost n² comparisons).
            object.appendUnique(key, try value(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw error("unterminated object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(object)
            } else {
                throw error("expected ',' or '}'")
            }
        }
    }

    private mutating func array(depth: Int) throws -> JSONValue {
        index += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try value(depth: depth + 1))
            guard items.count <= limits.maxMembers else { throw error("more than \(limits.maxMembers) elements") }
            skipWhitespace()
            guard index < bytes.count else { throw error("unterminated array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(items)
            } else {
                throw error("expected ',' or ']'")
            }
        }
    }

    private mutating func hex4() throws -> UInt32 {
        guard bytes.count - index >= 4 else { throw error("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case 0x30...0x39: digit = UInt32(byte - 0x30)
            case 0x41...0x46: digit = UInt32(byte - 0x37)
            case 0x61...0x66: digit = UInt32(byte - 0x57)
            default: throw error("bad \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    private mutating func string() throws -> String {
        index += 1
        // Fast path: printable ASCII up to the closing quote, no escapes.
        let start = index
        let end = bytes.withUnsafeBufferPointer { Self.plainEnd(in: $0, from: start) }
        if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
            let text = String(decoding: bytes[index..<end], as: UTF8.self)
            index = end + 1
            return text
        }
        var output: [UInt8] = []
        while true {
            guard index < bytes.count else { throw error("unterminated string") }
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: output, as: UTF8.self) else { throw error("string is not UTF-8") }
                return text
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { throw error("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): output.append(escape)
                case UInt8(ascii: "b"): output.append(0x08)
                case UInt8(ascii: "f"): output.append(0x0c)
                case UInt8(ascii: "n"): output.append(0x0a)
                case UInt8(ascii: "r"): output.append(0x0d)
                case UInt8(ascii: "t"): output.append(0x09)
                case UInt8(ascii: "u"):
                    var scalarValue = try hex4()
                    if (0xD800...0xDBFF).contains(scalarValue) {
                        guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw error("unpaired surrogate") }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate") }
                        scalarValue = 0x10000 + ((scalarValue - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(scalarValue) else { throw error("invalid code point") }
                    output.append(contentsOf: Array(String(Character(scalar)).utf8))
                default:
                    throw error("bad escape")
                }
            case 0x00..<0x20:
                throw error("control character in string")
            default:
                output.append(byte)
            }
        }
    }

    /// Where the run of printable ASCII other than `"` and `\` that starts at `from` ends: what a JSON string
    /// holds as it is, without escapes. Sixteen bytes at a time while none of them ends it (a base64url JWS is
    /// thousands of such bytes; a loop a byte the compiler leaves scalar took ~10 µs for 14 KB), then one at a
    /// time. Also how the purchase server reads Apple's `{"signedPayload":"…"}` without parsing it. A chunk's
    /// mask is tested as two 64-bit words of 0 and 1 bytes: `any(_:)` on it was reduced lane by lane (2.2 µs
    /// for 14 KB in a loop of its own; 0.9 µs so).
    package static func plainEnd(in buffer: UnsafeBufferPointer<UInt8>, from: Int) -> Int {
        var end = from
        if let base = UnsafeRawPointer(buffer.baseAddress) {
            let quote = SIMD16<UInt8>(repeating: 0x22)
            let backslash = SIMD16<UInt8>(repeating: 0x5C)
            let space = SIMD16<UInt8>(repeating: 0x20)
            let high = SIMD16<UInt8>(repeating: 0x80)
            let (zero, one) = (SIMD16<UInt8>(repeating: 0), SIMD16<UInt8>(repeating: 1))
            while end + 16 <= buffer.count {
                let chunk = base.loadUnaligned(fromByteOffset: end, as: SIMD16<UInt8>.self)
                let ends = (chunk .== quote) .| (chunk .== backslash) .| (chunk .< space) .| (chunk .>= high)
                let words = unsafeBitCast(zero.replacing(with: one, where: ends), to: SIMD2<UInt64>.self)
                if words[0] | words[1] != 0 { break }
                end += 16
            }
        }
        while end < buffer.count {
            let byte = buffer[end]
            guard byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\"), byte >= 0x20, byte < 0x80 else { break }
            end += 1
        }
        return end
    }

    private mutating func number() throws -> JSONValue {
        let start = index
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let integerStart = index
        while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
        guard index > integerStart else { throw error("unexpected character") }
        guard !(bytes[integerStart] == 0x30 && index - integerStart > 1) else { throw error("leading zero") }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let fractionStart = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            guard index > fractionStart else { throw error("empty fraction") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            let exponentStart = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            guard index > exponentStart else { throw error("empty exponent") }
        }
        guard index - start <= 64 else { throw error("number too long") }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger, let integer = Int64(text) { return .integer(integer) }
        guard let double = Double(text), double.isFinite else { throw error("number out of range") }
        return .double(double)
    }
}
