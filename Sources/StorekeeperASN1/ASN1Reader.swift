/// Entry points of the bounded BER/DER reader.
public enum ASN1 {
    /// Parses exactly one element that spans all of `bytes`.
    ///
    /// - Throws: ``ASN1Error`` for malformed input, input past a bound of `rules`, or trailing bytes.
    public static func parse(_ bytes: [UInt8], rules: ASN1Rules = .der) throws -> ASN1Element {
        let document = try ASN1Document(bytes, rules: rules)
        return ASN1Element(document: document, node: try document.root())
    }
}

/// Reads consecutive elements of one container, one level of nesting at a time (see ``ASN1Document``).
public struct ASN1Reader: Sendable {
    public let document: ASN1Document
    public private(set) var iterator: ASN1NodeIterator

    init(document: ASN1Document, iterator: ASN1NodeIterator) {
        self.document = document
        self.iterator = iterator
    }

    public var isAtEnd: Bool { iterator.isAtEnd }

    /// The next element, or `nil` at the end of the range.
    public mutating func next() throws -> ASN1Element? {
        guard let node = try document.next(&iterator) else { return nil }
        return ASN1Element(document: document, node: node)
    }

    /// The next element, which must exist and have the given tag.
    public mutating func read(_ tag: ASN1Tag) throws -> ASN1Element {
        ASN1Element(document: document, node: try document.read(tag, from: &iterator))
    }

    /// The next element if it has the given tag; otherwise nothing is consumed.
    public mutating func readIfPresent(_ tag: ASN1Tag) throws -> ASN1Element? {
        var probe = iterator
        guard let node = try document.next(&probe), node.tag == tag else { return nil }
        iterator = probe
        return ASN1Element(document: document, node: node)
    }

    /// Throws if any element remains.
    public func finish() throws {
        guard isAtEnd else { throw ASN1Error.make(.trailingBytes, "unexpected element after the last field") }
    }
}
