/// One parsed TLV element, pointing into the shared input bytes.
///
/// Reading an element costs nothing beyond its header; its children are read on demand through
/// ``children()``, which enforces the same ``ASN1Rules`` one level deeper.
public struct ASN1Element: Sendable {
    public let tag: ASN1Tag
    /// The whole input this element was read from (shared, copy-on-write).
    public let storage: [UInt8]
    /// Index of the first identifier octet.
    public let start: Int
    /// Index of the first content octet.
    public let contentStart: Int
    /// Index one past the last content octet (before the end-of-contents marker, if any).
    public let contentEnd: Int
    /// Index one past the whole encoding (after the end-of-contents marker, if any).
    public let end: Int
    /// Whether the length was the BER indefinite form (`0x80 … 00 00`).
    public let isIndefiniteLength: Bool
    /// Depth of this element below the root (the root is 0).
    public let depth: Int
    public let rules: ASN1Rules

    /// The content octets.
    public var content: ArraySlice<UInt8> { storage[contentStart..<contentEnd] }
    /// The complete encoding: identifier, length, content and end-of-contents.
    public var encoded: ArraySlice<UInt8> { storage[start..<end] }
    public var contentLength: Int { contentEnd - contentStart }

    /// A reader over the direct children of a constructed element.
    public func children() throws -> ASN1Reader {
        guard tag.isConstructed else {
            throw ASN1Error.make(.unexpectedTag, "expected a constructed element, found \(tag)")
        }
        return ASN1Reader(storage: storage, start: contentStart, end: contentEnd, depth: depth + 1, rules: rules)
    }

    /// Throws unless this element has the given tag.
    @discardableResult
    public func expect(_ expected: ASN1Tag) throws -> ASN1Element {
        guard tag == expected else {
            throw ASN1Error.make(.unexpectedTag, "expected \(expected), found \(tag)")
        }
        return self
    }
}

extension ASN1Element {
    /// The value of an INTEGER that fits in 64 signed bits (X.690 §8.3, two's complement).
    public func int64() throws -> Int64 {
        try expect(.integer)
        let bytes = content
        guard !bytes.isEmpty else { throw ASN1Error.make(.invalidValue, "INTEGER with no content") }
        guard bytes.count <= 8 else { throw ASN1Error.make(.invalidValue, "INTEGER longer than 64 bits") }
        var value: Int64 = bytes.first! & 0x80 != 0 ? -1 : 0
        for byte in bytes { value = value << 8 | Int64(byte) }
        return value
    }

    /// The content of an INTEGER as unsigned big-endian magnitude bytes (for serial numbers and RSA values).
    public func integerBytes() throws -> ArraySlice<UInt8> {
        try expect(.integer)
        guard !content.isEmpty else { throw ASN1Error.make(.invalidValue, "INTEGER with no content") }
        return content
    }

    /// The octets of an OCTET STRING; in BER a constructed string's chunks are joined (X.690 §8.7.3).
    public func octetString() throws -> [UInt8] {
        if tag == .octetString { return Array(content) }
        guard tag == ASN1Tag.octetString.constructed(true) else {
            throw ASN1Error.make(.unexpectedTag, "expected OCTET STRING, found \(tag)")
        }
        guard rules.allowsBER else { throw ASN1Error.make(.notDER, "constructed OCTET STRING in DER") }
        var joined: [UInt8] = []
        joined.reserveCapacity(contentLength)
        var reader = try children()
        while let chunk = try reader.next() {
            joined.append(contentsOf: try chunk.octetString())
        }
        return joined
    }

    /// A character string of one of the types receipts and certificates use, decoded as UTF-8.
    public func string() throws -> String {
        switch tag {
        case .utf8String, .ia5String, .printableString, .utcTime, .generalizedTime:
            guard let text = String(validating: content, as: UTF8.self) else {
                throw ASN1Error.make(.invalidValue, "string that is not valid UTF-8")
            }
            return text
        default:
            throw ASN1Error.make(.unexpectedTag, "expected a character string, found \(tag)")
        }
    }

    /// The value of an OBJECT IDENTIFIER.
    public func objectIdentifier() throws -> ASN1ObjectIdentifier {
        try expect(.objectIdentifier)
        return try ASN1ObjectIdentifier(contentBytes: Array(content))
    }

    /// The value of a BOOLEAN.
    public func boolean() throws -> Bool {
        try expect(.boolean)
        guard contentLength == 1 else { throw ASN1Error.make(.invalidValue, "BOOLEAN of \(contentLength) bytes") }
        return content.first! != 0
    }
}

extension ASN1Element {
    /// The single element encoded inside this OCTET STRING, as in X.509 extensions and receipt attributes.
    ///
    /// A primitive string is read in place (no copy), one level deeper; a BER constructed string is joined
    /// first. The inner element must span the whole string.
    public func innerElement() throws -> ASN1Element {
        if tag == .octetString {
            var reader = ASN1Reader(storage: storage, start: contentStart, end: contentEnd, depth: depth + 1, rules: rules)
            guard let inner = try reader.next() else { throw ASN1Error.make(.truncated, "empty OCTET STRING") }
            guard reader.isAtEnd else { throw ASN1Error.make(.trailingBytes, "bytes after the element inside an OCTET STRING") }
            return inner
        }
        let joined = try octetString()
        var reader = ASN1Reader(storage: joined, start: 0, end: joined.count, depth: depth + 1, rules: rules)
        guard let inner = try reader.next() else { throw ASN1Error.make(.truncated, "empty OCTET STRING") }
        guard reader.isAtEnd else { throw ASN1Error.make(.trailingBytes, "bytes after the element inside an OCTET STRING") }
        return inner
    }
}
