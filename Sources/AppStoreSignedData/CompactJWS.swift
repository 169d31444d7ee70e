import Foundation
public import StorekeeperJSON

#if canImport(Glibc)
    import Glibc
#endif

/// A JWS in compact serialization (RFC 7515 §7.1): `B64URL(header) "." B64URL(payload) "." B64URL(signature)`,
/// read within size limits; header and payload must be JSON objects.
public struct CompactJWS: Sendable {
    /// The protected header, e.g. `{"alg":"ES256","x5c":[…]}`.
    public let header: JSONObject
    /// The payload object.
    public let payload: JSONObject
    /// The payload's bytes as signed (the second segment decoded).
    public let payloadBytes: [UInt8]
    /// The decoded signature bytes (for ES256, `r‖s`).
    public let signature: [UInt8]
    /// The ASCII bytes the signature covers: the first two segments exactly as received.
    public let signingInput: [UInt8]

    /// Largest accepted token (Apple's signed notifications are a few kilobytes).
    public static let maxSize = 1 << 20

    public struct FormatError: Error, Hashable, Sendable, CustomStringConvertible {
        public let reason: String
        public var description: String { reason }
    }

    /// The first segment exactly as received (base64url of the header).
    public let encodedHeader: ArraySlice<UInt8>

    public init(_ token: some StringProtocol) throws(FormatError) {
        try self.init(token, reusing: nil)
    }

    /// Parses `token`; when its header segment is byte-equal to `known`'s, reuses that header instead of
    /// decoding it again (a stream of tokens from one signer shares one header).
    public init(_ token: some StringProtocol, reusing known: CompactJWS?) throws(FormatError) {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxSize else {
            throw FormatError(reason: "JWS of \(bytes.count) bytes exceeds \(Self.maxSize)")
        }
        let segments = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else {
            throw FormatError(reason: "a compact JWS has 3 segments, found \(segments.count)")
        }
        let limits = JSONParser.Limits(maxSize: Self.maxSize, maxDepth: 32, maxMembers: 10_000)
        let header: JSONObject
        if let known, known.hasHeader(segments[0]) {
            header = known.header
        } else {
            guard let headerBytes = Base64URL.decode(segments[0]) else {
                throw FormatError(reason: "a segment is not base64url")
            }
            guard let parsed = try? JSONParser.parse(headerBytes, limits: limits).objectValue else {
                throw FormatError(reason: "the header is not a JSON object")
            }
            header = parsed
        }
        guard let payloadBytes = Base64URL.decode(segments[1]), let signature = Base64URL.decode(segments[2]) else {
            throw FormatError(reason: "a segment is not base64url")
        }
        guard let payload = try? JSONParser.parse(payloadBytes, limits: limits).objectValue else {
            throw FormatError(reason: "the payload is not a JSON object")
        }
        try Self.checkHeaderTypes(header)
        self.header = header
        self.payload = payload
        self.payloadBytes = payloadBytes
        self.signature = signature
        self.signingInput = Array(bytes[..<segments[1].endIndex])
        self.encodedHeader = signingInput[..<segments[0].endIndex]
    }

    /// The registered header members Storekeeper reads must have their types (RFC 7515 §4.1): `alg`, `kid`,
    /// `typ` strings, `x5c` an array of strings; `crit` (extensions this verifier cannot honour) is refused.
    static func checkHeaderTypes(_ header: JSONObject) throws(FormatError) {
        guard header["alg"]?.stringValue != nil else {
            throw FormatError(reason: "the header's alg is missing or not a string")
        }
        for name in ["kid", "typ"] where header[name] != nil && header[name]?.stringValue == nil {
            throw FormatError(reason: "the header's \(name) is not a string")
        }
        if let x5c = header["x5c"], x5c.arrayValue?.allSatisfy({ $0.stringValue != nil }) != true {
            throw FormatError(reason: "the header's x5c is not an array of strings")
        }
        guard header["crit"] == nil else { throw FormatError(reason: "the header has critical extensions (crit)") }
    }

    /// Whether this token's header segment is byte-equal to `segment`.
    public func hasHeader(_ segment: ArraySlice<UInt8>) -> Bool {
        guard encodedHeader.count == segment.count else { return false }
        return encodedHeader.withUnsafeBufferPointer { mine in
            segment.withUnsafeBufferPointer { other in memcmp(mine.baseAddress!, other.baseAddress!, mine.count) == 0 }
        }
    }

    /// The `x5c` header: standard base64 (RFC 7515 §4.1.6), not base64url.
    public var certificateChain: [String]? {
        header["x5c"]?.arrayValue?.compactMap(\.stringValue)
    }
}

/// base64url without padding (RFC 7515 §2), canonical both ways.
public enum Base64URL {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        encode(bytes, alphabet: urlAlphabet, pad: false)
    }

    /// Standard base64 with padding (the `x5c` header's certificates).
    public static func standard(_ bytes: some Collection<UInt8>) -> String {
        encode(bytes, alphabet: standardAlphabet, pad: true)
    }

    static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// Appends the base64url encoding of `bytes` to `output` (a JWS built as bytes, copied into a string once).
    public static func append(_ bytes: some Collection<UInt8>, to output: inout [UInt8]) {
        append(bytes, alphabet: urlAlphabet, pad: false, to: &output)
    }

    static func encode(_ bytes: some Collection<UInt8>, alphabet: [UInt8], pad: Bool) -> String {
        var output: [UInt8] = []
        append(bytes, alphabet: alphabet, pad: pad, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Three bytes to four characters at a time, over raw buffers (no bounds check per byte).
    static func append(_ bytes: some Collection<UInt8>, alphabet: [UInt8], pad: Bool, to output: inout [UInt8]) {
        let count = bytes.count
        let full = count / 3 * 3
        let rest = count - full
        let length = full / 3 * 4 + (rest == 0 ? 0 : (pad ? 4 : rest + 1))
        let start = output.count
        output += repeatElement(UInt8(ascii: "="), count: length)
        func fill(_ input: UnsafeBufferPointer<UInt8>) {
            alphabet.withUnsafeBufferPointer { alphabet in
                output.withUnsafeMutableBufferPointer { buffer in
                    let output = UnsafeMutableBufferPointer(rebasing: buffer[start...])
                    var out = 0
                    var index = 0
                    while index < full {
                        let value =
                            UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
                        output[out] = alphabet[Int(value >> 18 & 63)]
                        output[out + 1] = alphabet[Int(value >> 12 & 63)]
                        output[out + 2] = alphabet[Int(value >> 6 & 63)]
                        output[out + 3] = alphabet[Int(value & 63)]
                        out += 4
                        index += 3
                    }
                    // The last one or two bytes; any padding is already in place.
                    if rest > 0 {
                        let value = UInt32(input[index]) << 16 | (rest == 2 ? UInt32(input[index + 1]) << 8 : 0)
                        output[out] = alphabet[Int(value >> 18 & 63)]
                        output[out + 1] = alphabet[Int(value >> 12 & 63)]
                        if rest == 2 { output[out + 2] = alphabet[Int(value >> 6 & 63)] }
                    }
                }
            }
        }
        if bytes.withContiguousStorageIfAvailable(fill) == nil { Array(bytes).withUnsafeBufferPointer(fill) }
    }

    /// Decodes canonical base64url (RFC 7515 §2, RFC 4648 §3.5): the URL-safe alphabet, no `=` padding, and
    /// the unused low bits of the last character zero, so that each byte string has exactly one encoding.
    /// Nil for anything else.
    public static func decode(_ segment: some Collection<UInt8>) -> [UInt8]? {
        let input = Array(segment)
        return input.withUnsafeBufferPointer { bytes in
            decodeTable.withUnsafeBufferPointer { table in decode(bytes, table: table) }
        }
    }

    /// The loop over raw buffers (a generic collection walked element by element through its witness table
    /// cost ~10 ns a byte).
    private static func decode(_ segment: UnsafeBufferPointer<UInt8>, table: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var output: [UInt8] = []
        output.reserveCapacity(segment.count * 3 / 4 + 2)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in segment {
            let value = table[Int(byte)]
            guard value != 0xff else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // 2 or 4 leftover bits end the last group and must be zero; 6 leftover bits cannot end one.
        guard bits < 6, accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return output
    }

    /// base64url alphabet value of each byte, 0xff for bytes outside it.
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xff, count: 256)
        for (index, character) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8.enumerated() {
            table[Int(character)] = UInt8(index)
        }
        return table
    }()
}
