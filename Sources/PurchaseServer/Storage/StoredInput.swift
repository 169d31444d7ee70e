import AppStoreSignedData
import Foundation
import StorekeeperCrypto
import StorekeeperJSON
import Synchronization

/// How a raw input is kept. A V2 notification as Apple posts it, `{"signedPayload":"<JWS>"}`, is ~14 KB of
/// which each of its three JWS headers (the same `x5c` chain) is ~3 KB, the nested two base64url-encoded
/// twice. It is kept in ``StoredJWS``'s form (~3 KB: the outer payload decoded, each header named by a
/// fingerprint), with the header once in `signing_headers`; ``expand(_:header:)`` gives the exact bytes back.
/// Anything else (another wrapping, a JWS that cannot be kept so) is kept whole. A compact input starts
/// with `~`; a whole V2 notification never does (it is JSON).
enum StoredInput {
    static let kind = "notification-v2"
    private static let prefix = Array(#"{"signedPayload":""#.utf8)
    private static let suffix = Array(#""}"#.utf8)

    /// A header and what names it: SHA-256 in hexadecimal, so that one name never stands for two headers.
    struct Header: Sendable, Equatable {
        let fingerprint: String
        let bytes: [UInt8]
    }

    /// The `signedPayload` of a body exactly as Apple posts it, `{"signedPayload":"<JWS>"}` with nothing but
    /// printable ASCII other than a quote or backslash inside (``JSONParser/plainEnd(in:from:)``), read without
    /// parsing JSON (the parser made and checked a ~14 KB string a notification, ~5 µs); nil for any other
    /// body, which the JSON parser reads.
    static func signedPayload(of body: [UInt8]) -> String? {
        guard let range = wrapped(body),
            body.withUnsafeBufferPointer({ JSONParser.plainEnd(in: $0, from: range.lowerBound) }) == range.upperBound
        else { return nil }
        return String(decoding: body[range], as: UTF8.self)
    }

    /// The compact form of a V2 notification's body and the header it names; nil to keep `body` whole.
    static func compact(_ body: [UInt8]) -> (stored: [UInt8], header: Header)? {
        guard let (slice, header) = unwrap(body) else { return nil }
        let jws = Array(slice)
        guard let stored = StoredJWS.compact(jws, header: header.bytes, fingerprint: header.fingerprint),
            StoredJWS.expand(stored, header: header.bytes) == jws
        else { return nil }
        return (stored, header)
    }

    /// The same compact form, from the `signedPayload` the body holds (`token`, as parsed from it) and that
    /// token's payload as its verification decoded it (`payload`): ~10 KB of base64url not decoded again.
    /// Nil when the body does not hold `token` as is (an escape in the JSON string, another wrapping).
    static func compact(_ body: [UInt8], token: String, payload: [UInt8]) -> (stored: [UInt8], header: Header)? {
        // The token verified had three segments, so its first and last dots bound the segment `payload` was
        // decoded from (canonical base64url, so encoding `payload` again gives it back: its length is checked).
        guard let (jws, header) = unwrap(body), holds(jws, token), let last = jws.lastIndex(of: StoredJWS.dot),
            last - (jws.startIndex + header.bytes.count) - 1 == (payload.count * 4 + 2) / 3,
            let stored = StoredJWS.compact(
                payload: payload, signature: jws[(last + 1)...], header: header.bytes, fingerprint: header.fingerprint)
        else { return nil }
        return (stored, header)
    }

    /// Where the string inside `{"signedPayload":"…"}` lies in `body`; nil for a body not wrapped so.
    private static func wrapped(_ body: [UInt8]) -> Range<Int>? {
        guard body.count > prefix.count + suffix.count, body.starts(with: prefix), body.suffix(2).elementsEqual(suffix)
        else { return nil }
        return prefix.count..<(body.count - suffix.count)
    }

    /// The JWS a body wraps exactly as Apple posts it, and that JWS's header with its name; nil for any other
    /// body.
    private static func unwrap(_ body: [UInt8]) -> (jws: ArraySlice<UInt8>, header: Header)? {
        guard let range = wrapped(body) else { return nil }
        let jws = body[range]
        // A JWS's protected header is never empty. Its end found by `memchr` (~4 KB: a loop a byte took ~2 µs),
        // the search `CompactJWS` splits tokens with.
        guard let dot = StoredJWS.firstRange(of: StoredJWS.dotPattern, in: jws), dot > jws.startIndex else {
            return nil
        }
        let encoded = jws[..<dot]
        // Apple signs with one chain for months: the last header named is named again without hashing its
        // ~4 KB (SHA-256 and a copy were ~3 µs a notification).
        if let last = lastHeader.withLock({ $0 }),
            last.bytes.withUnsafeBufferPointer({ known in encoded.withUnsafeBufferPointer { same(known, $0) } })
        {
            return (jws, last)
        }
        let bytes = Array(encoded)
        let header = Header(fingerprint: Digest.hex(Digest.sha256(bytes)), bytes: bytes)
        lastHeader.withLock { $0 = header }
        return (jws, header)
    }

    /// The header ``unwrap(_:)`` named last.
    private static let lastHeader = Mutex<Header?>(nil)

    /// Whether `jws` is `token`'s bytes: one `memcmp`, not a walk over ~14 KB.
    private static func holds(_ jws: ArraySlice<UInt8>, _ token: String) -> Bool {
        var token = token
        return token.withUTF8 { bytes in jws.withUnsafeBufferPointer { same($0, bytes) } }
    }

    /// Whether two byte buffers are equal: their counts, then one `memcmp` (none for empty ones).
    private static func same(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> Bool {
        guard left.count == right.count else { return false }
        guard let a = left.baseAddress, let b = right.baseAddress, left.count > 0 else { return true }
        return memcmp(a, b, left.count) == 0
    }

    /// The fingerprint a compact input names; nil for one kept whole.
    static func fingerprint(of stored: [UInt8]) -> String? { StoredJWS.fingerprint(of: stored) }

    /// The body as received, from its compact form and the header it names; nil when malformed.
    static func expand(_ stored: [UInt8], header: [UInt8]) -> [UInt8]? {
        StoredJWS.expand(stored, header: header).map { prefix + $0 + suffix }
    }
}
