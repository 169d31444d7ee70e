/// One parsed element: a node and the document it belongs to — the convenient (if heavier) API.
public struct ASN1Element: Sendable {
    public let document: ASN1Document
    public let node: ASN1Node

    public init(document: ASN1Document, node: ASN1Node) {
        self.document = document
        self.node = node
    }

    public var tag: ASN1Tag { node.tag }
    public var storage: [UInt8] { document.bytes }
    public var rules: ASN1Rules { document.rules }
    public var start: Int { node.start }
    public var contentStart: Int { node.contentStart }
    public var contentEnd: Int { node.contentEnd }
    public var end: Int { node.end }
    public var isIndefiniteLength: Bool { node.isIndefiniteLength }
    public var depth: Int { node.depth }

    /// The content octets.
    public var content: ArraySlice<UInt8> { document.content(node) }
    /// The complete encoding: identifier, length, content and end-of-contents.
    public var encoded: ArraySlice<UInt8> { document.encoded(node) }
    public var contentLength: Int { node.contentLength }

    /// A reader over the direct children of a constructed element.
    public func children() throws -> ASN1Reader {
        ASN1Reader(document: document, iterator: try document.children(of: node))
    }

    /// Throws unless this element has the given tag.
    @discardableResult
    public func expect(_ expected: ASN1Tag) throws -> ASN1Element {
        guard tag == expected else { throw ASN1Error.make(.unexpectedTag, "expected \(expected), found \(tag)") }
        return self
    }

    public func int64() throws -> Int64 { try document.int64(node) }

    /// The content of an INTEGER as big-endian bytes (for serial numbers and RSA values).
    public func integerBytes() throws -> ArraySlice<UInt8> {
        try expect(.integer)
        guard !content.isEmpty else { throw ASN1Error.make(.invalidValue, "INTEGER with no content") }
        return content
    }

    public func octetString() throws -> [UInt8] { try document.octetString(node) }
    public func string() throws -> String { try document.string(node) }

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

    /// The single element encoded inside this OCTET STRING, as in X.509 extensions and receipt attributes.
    ///
    /// A primitive string is read in place (no copy), one level deeper; a BER constructed string is joined
    /// first. The inner element must span the whole string.
    public func innerElement() throws -> ASN1Element {
        if tag == .octetString { return ASN1Element(document: document, node: try document.inner(of: node)) }
        let joined = try ASN1Document(try octetString(), rules: rules)
        return ASN1Element(document: joined, node: try joined.root())
    }
}
