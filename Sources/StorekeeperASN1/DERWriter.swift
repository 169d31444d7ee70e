/// Writes DER (X.690 §10): definite, minimal lengths; `SET OF` sorted when asked.
public struct DERWriter: Sendable {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    /// The length octets for a content of `length` bytes.
    public static func lengthOctets(_ length: Int) -> [UInt8] {
        precondition(length >= 0)
        if length < 0x80 { return [UInt8(length)] }
        var octets: [UInt8] = []
        var rest = length
        while rest > 0 {
            octets.append(UInt8(rest & 0xff))
            rest >>= 8
        }
        return [0x80 | UInt8(octets.count)] + octets.reversed()
    }

    /// Appends one element with the given content octets.
    public mutating func append(_ tag: ASN1Tag, content: some Collection<UInt8>) {
        bytes.append(contentsOf: tag.encoded)
        bytes.append(contentsOf: Self.lengthOctets(content.count))
        bytes.append(contentsOf: content)
    }

    /// Appends a constructed element whose content `body` writes.
    public mutating func append(_ tag: ASN1Tag, _ body: (inout DERWriter) throws -> Void) rethrows {
        var inner = DERWriter()
        try body(&inner)
        append(tag.constructed(true), content: inner.bytes)
    }

    /// Appends bytes that are already a complete encoding.
    public mutating func appendEncoded(_ encoded: some Collection<UInt8>) {
        bytes.append(contentsOf: encoded)
    }

    public mutating func appendInteger(_ value: Int64) {
        append(.integer, content: Self.integerContent(value))
    }

    /// Appends a non-negative INTEGER given as big-endian magnitude bytes (a serial number, say).
    public mutating func appendUnsignedInteger(magnitude: some Collection<UInt8>) {
        var content = Array(magnitude.drop(while: { $0 == 0 }))
        if content.isEmpty || content[0] & 0x80 != 0 { content.insert(0, at: 0) }
        append(.integer, content: content)
    }

    public mutating func appendBoolean(_ value: Bool) { append(.boolean, content: [value ? 0xff : 0x00]) }
    public mutating func appendNull() { append(.null, content: []) }
    public mutating func appendOctetString(_ value: some Collection<UInt8>) { append(.octetString, content: value) }
    public mutating func appendUTF8String(_ value: String) { append(.utf8String, content: Array(value.utf8)) }
    public mutating func appendIA5String(_ value: String) { append(.ia5String, content: Array(value.utf8)) }
    public mutating func appendObjectIdentifier(_ oid: ASN1ObjectIdentifier) {
        append(.objectIdentifier, content: oid.contentBytes)
    }

    public mutating func appendSequence(_ body: (inout DERWriter) throws -> Void) rethrows {
        try append(.sequence, body)
    }

    /// Appends a `SET OF` whose members are complete encodings, sorted as DER requires (X.690 §11.6:
    /// ascending as octet strings, the shorter padded with zeros at its end).
    public mutating func appendSetOf(_ members: [[UInt8]]) {
        let sorted = members.sorted { lhs, rhs in
            for index in 0..<max(lhs.count, rhs.count) {
                let left = index < lhs.count ? lhs[index] : 0
                let right = index < rhs.count ? rhs[index] : 0
                if left != right { return left < right }
            }
            return lhs.count < rhs.count
        }
        append(.set, content: sorted.flatMap { $0 })
    }

    /// Minimal two's complement content octets of an INTEGER.
    public static func integerContent(_ value: Int64) -> [UInt8] {
        var content = withUnsafeBytes(of: value.bigEndian) { Array($0) }
        while content.count > 1
            && (content[0] == 0x00 && content[1] & 0x80 == 0 || content[0] == 0xff && content[1] & 0x80 != 0)
        {
            content.removeFirst()
        }
        return content
    }

    /// Encodes one element in a fresh writer.
    public static func encode(_ body: (inout DERWriter) throws -> Void) rethrows -> [UInt8] {
        var writer = DERWriter()
        try body(&writer)
        return writer.bytes
    }
}
