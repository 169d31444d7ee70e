import Foundation
public import JSON

/// A JWS in compact serialization (RFC 7515 §7.1): `B64URL(header) "." B64URL(payload) "." B64URL(signature)`,
/// read within size limits; header and payload must be JSON objects.
public struct CompactJWS: Sendable {
    /// The protected header, e.g. `{"alg":"ES256","x5c":[…]}`.
    public let header: JSONObject
    /// The payload object.
    public let payload: JSONObject
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

    public init(_ token: some StringProtocol) throws(FormatError) {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxSize else {
            throw FormatError(reason: "JWS of \(bytes.count) bytes exceeds \(Self.maxSize)")
        }
        let segments = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else {
            throw FormatError(reason: "a compact JWS has 3 segments, found \(segments.count)")
        }
        guard let headerBytes = Base64URL.decode(segments[0]), let payloadBytes = Base64URL.decode(segments[1]),
            let signature = Base64URL.decode(segments[2])
        else { throw FormatError(reason: "a segment is not base64url") }
        let limits = JSONParser.Limits(maxSize: Self.maxSize, maxDepth: 32, maxMembers: 10_000)
        guard let header = try? JSONParser.parse(headerBytes, limits: limits).objectValue else {
            throw FormatError(reason: "the header is not a JSON object")
        }
        guard let payload = try? JSONParser.parse(payloadBytes, limits: limits).objectValue else {
            throw FormatError(reason: "the payload is not a JSON object")
        }
        self.header = header
        self.payload = payload
        self.signature = signature
        self.signingInput = Array(bytes[..<segments[1].endIndex])
    }

    /// The `x5c` header: standard base64 (RFC 7515 §4.1.6), not base64url.
    public var certificateChain: [String]? {
        header["x5c"]?.arrayValue?.compactMap(\.stringValue)
    }
}

/// base64url without padding (RFC 7515 §2); decoding also accepts padding.
public enum Base64URL {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    public static func decode(_ segment: some Collection<UInt8>) -> [UInt8]? {
        var standard: [UInt8] = []
        standard.reserveCapacity(segment.count + 3)
        for byte in segment {
            switch byte {
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            case UInt8(ascii: "+"), UInt8(ascii: "/"): return nil
            default: standard.append(byte)
            }
        }
        while standard.count % 4 != 0 { standard.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(standard)).map { Array($0) }
    }
}
