#if canImport(Glibc)
    import Glibc
#endif

/// How a V2 `signedPayload` is kept small (the emulator's outbox, the purchase server's raw inputs). Each of its three JWS (the payload and, inside
/// it, `signedTransactionInfo` and `signedRenewalInfo`) starts with the same protected header, whose
/// `x5c` chain is ~4.5 KB of the ~14 KB. The stored form names the header by a fingerprint, keeps the
/// outer signature and the outer payload decoded, with each nested `"<header>.` written `"~.`:
///
///     ~<fingerprint>~<signature>.<payload JSON, nested headers replaced>
///
/// ``expand(_:header:)`` rebuilds the exact bytes: the payload segment was canonical base64url, so encoding
/// it again gives it back, and ``compact(_:header:fingerprint:)`` declines a payload that already holds a
/// `"~.` (every one in the stored form is then a replaced header). A stored payload that does not start
/// with `~` is a whole JWS (what older builds stored, or what was declined).
public enum StoredJWS {
    public static let marker = UInt8(ascii: "~")
    public static let dot = UInt8(ascii: ".")
    /// ``dot`` as a pattern for ``firstRange(of:in:from:)``, made once (a JWS's segments are found with it).
    package static let dotPattern = [dot]
    /// What a nested header becomes in the stored form: `"~.`.
    static let shortNested: [UInt8] = [UInt8(ascii: "\""), marker, dot]

    /// A signer's protected header, encoded, and its fingerprint: what a stored form names.
    public struct Header: Sendable {
        public let bytes: [UInt8]
        public let fingerprint: String

        public init(_ bytes: [UInt8]) {
            self.bytes = bytes
            fingerprint = StoredJWS.fingerprint(header: bytes)
        }
    }

    /// A nested JWS's start inside the payload JSON: `"<header>.`.
    static func nested(_ header: [UInt8]) -> [UInt8] { [UInt8(ascii: "\"")] + header + [dot] }

    /// The stored form of `jws`, or nil when it is not signed under `header` or cannot be kept this way.
    public static func compact(_ jws: [UInt8], header: [UInt8], fingerprint: String) -> [UInt8]? {
        guard jws.count > header.count + 2, jws[header.count] == dot, jws.starts(with: header),
            let last = jws.lastIndex(of: dot), last > header.count
        else { return nil }
        let segment = jws[(header.count + 1)..<last]
        guard !segment.contains(dot), let payload = Base64URL.decode(segment) else { return nil }
        return compact(payload: payload, signature: jws[(last + 1)...], header: header, fingerprint: fingerprint)
    }

    /// The stored form of a JWS signed under `header` from the payload bytes its signer encoded (the
    /// signing thread has them: the writer then decodes nothing), or nil when it cannot be kept this way.
    public static func compact(
        payload: [UInt8], signature: some Collection<UInt8>, header: [UInt8], fingerprint: String
    ) -> [UInt8]? {
        guard firstRange(of: shortNested, in: payload) == nil, !signature.contains(dot) else { return nil }
        var stored: [UInt8] = []
        stored.reserveCapacity(fingerprint.utf8.count + signature.count + payload.count + 3)
        stored.append(marker)
        stored += fingerprint.utf8
        stored.append(marker)
        stored += signature
        stored.append(dot)
        stored += replacing(nested(header), with: shortNested, in: payload)
        return stored
    }

    /// The fingerprint a stored form names (nil for a whole JWS).
    public static func fingerprint(of stored: [UInt8]) -> String? {
        guard stored.first == marker, let end = stored.dropFirst().firstIndex(of: marker) else { return nil }
        return String(decoding: stored[1..<end], as: UTF8.self)
    }

    /// The JWS a stored form was made from, given the header its fingerprint names; nil when malformed.
    public static func expand(_ stored: [UInt8], header: [UInt8]) -> [UInt8]? {
        guard stored.first == marker, let end = stored.dropFirst().firstIndex(of: marker),
            let split = stored[(end + 1)...].firstIndex(of: dot)
        else { return nil }
        let payload = replacing(shortNested, with: nested(header), in: stored[(split + 1)...])
        var jws = header
        jws.append(dot)
        jws += Base64URL.encode(payload).utf8
        jws.append(dot)
        jws += stored[(end + 1)..<split]
        return jws
    }

    /// A stable fingerprint of a header (FNV-1a, 64 bits, in hex): the same in every process.
    public static func fingerprint(header: [UInt8]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in header {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Every occurrence of `pattern` replaced, left to right.
    static func replacing(_ pattern: [UInt8], with replacement: [UInt8], in bytes: some Collection<UInt8>)
        -> [UInt8]
    {
        let input = Array(bytes)
        var output: [UInt8] = []
        output.reserveCapacity(input.count + 2 * max(0, replacement.count - pattern.count))
        var start = 0
        while let range = firstRange(of: pattern, in: input, from: start) {
            output += input[start..<range]
            output += replacement
            start = range + pattern.count
        }
        output += input[start...]
        return output
    }

    /// Where `pattern` first occurs in `bytes` at or after `from`: `memchr` for its first byte, then `memcmp`.
    package static func firstRange(of pattern: [UInt8], in bytes: [UInt8], from: Int = 0) -> Int? {
        firstRange(of: pattern, in: bytes[...], from: from)
    }

    /// The same in a slice, `from` and the answer indexes of `bytes` (from its start when nil).
    package static func firstRange(of pattern: [UInt8], in bytes: ArraySlice<UInt8>, from: Int? = nil) -> Int? {
        let from = from ?? bytes.startIndex
        guard !pattern.isEmpty, from >= bytes.startIndex, bytes.count >= pattern.count,
            from <= bytes.endIndex - pattern.count
        else { return nil }
        return bytes.withUnsafeBufferPointer { haystack in
            pattern.withUnsafeBufferPointer { needle in
                guard let base = haystack.baseAddress, let first = needle.baseAddress else { return nil }
                var index = from - bytes.startIndex
                let lastStart = haystack.count - needle.count
                while index <= lastStart {
                    guard let hit = memchr(base + index, Int32(first.pointee), lastStart - index + 1) else {
                        return nil
                    }
                    let found = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                    if memcmp(base + found, first, needle.count) == 0 { return bytes.startIndex + found }
                    index = found + 1
                }
                return nil
            }
        }
    }
}
