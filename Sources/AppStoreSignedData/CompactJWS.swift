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
        let dots = Self.dots(in: bytes)
        guard dots.count == 2 else {
            throw FormatError(reason: "a compact JWS has 3 segments, found \(dots.count + 1)")
        }
        let segments = [bytes[..<dots.first], bytes[(dots.first + 1)..<dots.second], bytes[(dots.second + 1)...]]
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

    /// How many `.` `bytes` has, and where the first two are (0 when absent), found by `memchr`
    /// (``StoredJWS/firstRange(of:in:from:)``): a token is kilobytes, and a generic split compared them one by one
    /// and kept a slice for every dot.
    static func dots(in bytes: [UInt8]) -> (count: Int, first: Int, second: Int) {
        var found = (count: 0, first: 0, second: 0)
        var start = 0
        while let position = StoredJWS.firstRange(of: StoredJWS.dotPattern, in: bytes, from: start) {
            if found.count == 0 { found.first = position } else if found.count == 1 { found.second = position }
            found.count += 1
            start = position + 1
        }
        return found
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
        decodeTable.withUnsafeBufferPointer { table in
            // A token's segments are slices of one array: read in place, not copied first.
            if let decoded = segment.withContiguousStorageIfAvailable({ decode($0, table: table) }) { return decoded }
            return Array(segment).withUnsafeBufferPointer { decode($0, table: table) }
        }
    }

    /// Four characters to three bytes at a time, over raw buffers into an array filled in place (a generic
    /// collection walked element by element through its witness table cost ~10 ns a byte; with a byte at a
    /// time appended and the segment copied first, `bench jws` read 0.83–0.84 of bare OpenSSL, 0.86 after).
    private static func decode(_ segment: UnsafeBufferPointer<UInt8>, table: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = segment.count
        let full = count / 4
        let rest = count % 4
        // One character left over cannot end a group (6 bits of a byte).
        guard rest != 1 else { return nil }
        let length = full * 3 + (rest == 0 ? 0 : rest - 1)
        var valid = true
        let output = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            var input = 0
            var written = 0
            for _ in 0..<full {
                let a = UInt32(table[Int(segment[input])])
                let b = UInt32(table[Int(segment[input + 1])])
                let c = UInt32(table[Int(segment[input + 2])])
                let d = UInt32(table[Int(segment[input + 3])])
                // Every alphabet value is below 64; 0xff (outside the alphabet) sets the high bits.
                guard (a | b | c | d) & 0xc0 == 0 else {
                    valid = false
                    break
                }
                let group = a << 18 | b << 12 | c << 6 | d
                buffer[written] = UInt8(truncatingIfNeeded: group >> 16)
                buffer[written + 1] = UInt8(truncatingIfNeeded: group >> 8)
                buffer[written + 2] = UInt8(truncatingIfNeeded: group)
                input += 4
                written += 3
            }
            if valid, rest > 0 {
                var group: UInt32 = 0
                for index in 0..<rest {
                    let value = UInt32(table[Int(segment[input + index])])
                    guard value & 0xc0 == 0 else {
                        valid = false
                        break
                    }
                    group = group << 6 | value
                }
                // 2 or 3 characters: 12 bits give one byte and 4 unused, 18 bits two bytes and 2 unused, which
                // must be zero (one encoding for each byte string).
                let unused = UInt32(rest == 2 ? 4 : 2)
                if valid, group & ((1 << unused) - 1) == 0 {
                    group >>= unused
                    if rest == 3 {
                        buffer[written] = UInt8(truncatingIfNeeded: group >> 8)
                        buffer[written + 1] = UInt8(truncatingIfNeeded: group)
                    } else {
                        buffer[written] = UInt8(truncatingIfNeeded: group)
                    }
                    written += rest - 1
                } else {
                    valid = false
                }
            }
            initialized = valid ? written : 0
        }
        return valid ? output : nil
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
