/// The position and tag of one element within an ``ASN1Document``: no reference to the bytes, so it is
/// trivially copyable — the fast path for decoders that read thousands of elements.
public struct ASN1Node: Sendable, Hashable {
    public let tag: ASN1Tag
    /// Index of the first identifier octet.
    public let start: Int
    /// Index of the first content octet.
    public let contentStart: Int
    /// Index one past the last content octet (before the end-of-contents marker, if any).
    public let contentEnd: Int
    /// Whether the length was the BER indefinite form (`0x80 … 00 00`).
    public let isIndefiniteLength: Bool
    /// Depth below the root (the root is 0).
    public let depth: Int

    @inlinable
    public init(tag: ASN1Tag, start: Int, contentStart: Int, contentEnd: Int, isIndefiniteLength: Bool, depth: Int) {
        self.tag = tag
        self.start = start
        self.contentStart = contentStart
        self.contentEnd = contentEnd
        self.isIndefiniteLength = isIndefiniteLength
        self.depth = depth
    }

    /// Index one past the whole encoding, end-of-contents marker included.
    public var end: Int { isIndefiniteLength ? contentEnd + 2 : contentEnd }
    public var contentLength: Int { contentEnd - contentStart }
}

/// Where a reader over one node's children stands.
public struct ASN1NodeIterator: Sendable {
    public var position: Int
    public let end: Int
    public let depth: Int
    @usableFromInline var count = 0

    @inlinable init(position: Int, end: Int, depth: Int) {
        self.position = position
        self.end = end
        self.depth = depth
    }

    public var isAtEnd: Bool { position >= end }
}

/// Input bytes and the rules to read them by: reads ``ASN1Node``s in place.
///
/// Grammar (X.690 §8.1): `identifier length contents [end-of-contents]`, where the length is one octet
/// below 0x80, `0x8n` followed by n big-endian octets, or `0x80` (BER only, constructed only) with the
/// contents ending at the end-of-contents marker `00 00`.
public struct ASN1Document: Sendable {
    public let bytes: [UInt8]
    public let rules: ASN1Rules

    public init(_ bytes: [UInt8], rules: ASN1Rules) throws {
        guard bytes.count <= rules.maxSize else {
            throw ASN1Error.make(.tooLarge, "input of \(bytes.count) bytes exceeds \(rules.maxSize)")
        }
        self.bytes = bytes
        self.rules = rules
    }

    /// The single element spanning all the bytes.
    public func root() throws -> ASN1Node {
        var iterator = ASN1NodeIterator(position: 0, end: bytes.count, depth: 0)
        guard let root = try next(&iterator) else { throw ASN1Error.make(.truncated, "empty input") }
        guard iterator.isAtEnd else {
            throw ASN1Error.make(.trailingBytes, "\(bytes.count - root.end) bytes after the root element")
        }
        return root
    }

    /// An iterator over the direct children of a constructed node.
    @inlinable
    public func children(of node: ASN1Node) throws -> ASN1NodeIterator {
        guard node.tag.isConstructed else {
            throw ASN1Error.make(.unexpectedTag, "expected a constructed element, found \(node.tag)")
        }
        return ASN1NodeIterator(position: node.contentStart, end: node.contentEnd, depth: node.depth + 1)
    }

    /// The next node of `iterator`, or nil at its end.
    @inlinable
    public func next(_ iterator: inout ASN1NodeIterator) throws -> ASN1Node? {
        guard iterator.position < iterator.end else { return nil }
        iterator.count += 1
        guard iterator.count <= rules.maxChildren else {
            throw ASN1Error.make(.tooMany, "more than \(rules.maxChildren) elements in one container")
        }
        let node = try bytes.withUnsafeBufferPointer {
            try Self.node(in: $0, at: iterator.position, limit: iterator.end, depth: iterator.depth, rules: rules)
        }
        iterator.position = node.end
        return node
    }

    /// The next node, which must exist and have `tag`.
    @inlinable
    public func read(_ tag: ASN1Tag, from iterator: inout ASN1NodeIterator) throws -> ASN1Node {
        guard let node = try next(&iterator) else { throw ASN1Error.make(.truncated, "missing \(tag)") }
        guard node.tag == tag else { throw ASN1Error.make(.unexpectedTag, "expected \(tag), found \(node.tag)") }
        return node
    }

    /// The single node inside a primitive OCTET STRING node, one level deeper.
    @inlinable
    public func inner(of node: ASN1Node) throws -> ASN1Node {
        guard node.tag == .octetString else {
            throw ASN1Error.make(.unexpectedTag, "expected a primitive OCTET STRING, found \(node.tag)")
        }
        var iterator = ASN1NodeIterator(position: node.contentStart, end: node.contentEnd, depth: node.depth + 1)
        guard let inner = try next(&iterator) else { throw ASN1Error.make(.truncated, "empty OCTET STRING") }
        guard iterator.isAtEnd else {
            throw ASN1Error.make(.trailingBytes, "bytes after the element inside an OCTET STRING")
        }
        return inner
    }

    @inlinable
    public func content(_ node: ASN1Node) -> ArraySlice<UInt8> { bytes[node.contentStart..<node.contentEnd] }
    public func encoded(_ node: ASN1Node) -> ArraySlice<UInt8> { bytes[node.start..<node.end] }

    /// The value of an INTEGER that fits in 64 signed bits (X.690 §8.3, two's complement).
    @inlinable
    public func int64(_ node: ASN1Node) throws -> Int64 {
        guard node.tag == .integer else { throw ASN1Error.make(.unexpectedTag, "expected INTEGER, found \(node.tag)") }
        let count = node.contentLength
        guard count > 0 else { throw ASN1Error.make(.invalidValue, "INTEGER with no content") }
        guard count <= 8 else { throw ASN1Error.make(.invalidValue, "INTEGER longer than 64 bits") }
        return bytes.withUnsafeBufferPointer { buffer in
            var value: Int64 = buffer[node.contentStart] & 0x80 != 0 ? -1 : 0
            for index in node.contentStart..<node.contentEnd { value = value << 8 | Int64(buffer[index]) }
            return value
        }
    }

    /// The octets of an OCTET STRING; in BER a constructed string's chunks are joined (X.690 §8.7.3).
    public func octetString(_ node: ASN1Node) throws -> [UInt8] {
        if node.tag == .octetString { return Array(content(node)) }
        guard node.tag == ASN1Tag.octetString.constructed(true) else {
            throw ASN1Error.make(.unexpectedTag, "expected OCTET STRING, found \(node.tag)")
        }
        guard rules.allowsBER else { throw ASN1Error.make(.notDER, "constructed OCTET STRING in DER") }
        var joined: [UInt8] = []
        joined.reserveCapacity(node.contentLength)
        var iterator = try children(of: node)
        while let chunk = try next(&iterator) { joined.append(contentsOf: try octetString(chunk)) }
        return joined
    }

    /// A character string of one of the types receipts and certificates use, decoded as UTF-8.
    public func string(_ node: ASN1Node) throws -> String {
        switch node.tag {
        case .utf8String, .ia5String, .printableString, .utcTime, .generalizedTime:
            let text = bytes.withUnsafeBufferPointer { buffer -> String? in
                let slice = UnsafeBufferPointer(rebasing: buffer[node.contentStart..<node.contentEnd])
                let decoded = String(decoding: slice, as: UTF8.self)
                // ASCII is valid UTF-8 as it is. Otherwise decoding repairs invalid UTF-8, so only an exact
                // round trip means the bytes were valid.
                if slice.allSatisfy({ $0 < 0x80 }) { return decoded }
                return decoded.utf8.elementsEqual(slice) ? decoded : nil
            }
            guard let text else { throw ASN1Error.make(.invalidValue, "string that is not valid UTF-8") }
            return text
        default:
            throw ASN1Error.make(.unexpectedTag, "expected a character string, found \(node.tag)")
        }
    }

    // MARK: - Decoding one header

    /// Bit n is set for universal string type n, which DER requires to be primitive (X.690 §10.2).
    @usableFromInline static let stringTypeMask: UInt64 = 0x7FFC_1018  // 3, 4, 12, 18…30

    @inlinable
    static func node(in bytes: UnsafeBufferPointer<UInt8>, at start: Int, limit: Int, depth: Int, rules: ASN1Rules)
        throws -> ASN1Node
    {
        guard depth <= rules.maxDepth else { throw ASN1Error.make(.tooDeep, "nesting deeper than \(rules.maxDepth)") }
        var index = start
        guard index < limit else { throw ASN1Error.make(.truncated, "input ends inside an element header") }
        let first = bytes[index]
        index += 1
        let tagClass: ASN1Tag.TagClass =
            switch first >> 6 {
            case 0: .universal
            case 1: .application
            case 2: .contextSpecific
            default: .private
            }
        let constructed = first & 0x20 != 0
        var number = UInt64(first & 0x1f)
        if number == 0x1f {
            number = 0
            var groups = 0
            while true {
                guard index < limit else { throw ASN1Error.make(.truncated, "input ends inside an element header") }
                let byte = bytes[index]
                index += 1
                groups += 1
                if groups == 1 && byte == 0x80 {
                    throw ASN1Error.make(.invalidTag, "tag number with a leading zero group")
                }
                guard groups <= 9 else { throw ASN1Error.make(.invalidTag, "tag number wider than 63 bits") }
                number = number << 7 | UInt64(byte & 0x7f)
                if byte & 0x80 == 0 { break }
            }
            if number < 31 && !rules.allowsBER { throw ASN1Error.make(.notDER, "high-tag form for a low tag number") }
        }
        if tagClass == .universal && number == 0 {
            throw ASN1Error.make(.unexpectedEndOfContents, "end-of-contents marker where an element was expected")
        }
        let tag = ASN1Tag(tagClass, number, constructed: constructed)

        guard index < limit else { throw ASN1Error.make(.truncated, "input ends inside an element header") }
        let lengthByte = bytes[index]
        index += 1
        if lengthByte == 0x80 {
            guard rules.allowsBER else { throw ASN1Error.make(.notDER, "indefinite length in DER") }
            guard constructed else { throw ASN1Error.make(.invalidLength, "indefinite length on a primitive element") }
            // Scan children until the end-of-contents marker; each child is itself bounded one level deeper.
            var cursor = index
            var children = 0
            while true {
                guard cursor + 2 <= limit else { throw ASN1Error.make(.truncated, "missing end-of-contents marker") }
                if bytes[cursor] == 0 && bytes[cursor + 1] == 0 { break }
                children += 1
                guard children <= rules.maxChildren else {
                    throw ASN1Error.make(.tooMany, "more than \(rules.maxChildren) elements in one container")
                }
                cursor = try node(in: bytes, at: cursor, limit: limit, depth: depth + 1, rules: rules).end
            }
            return ASN1Node(
                tag: tag, start: start, contentStart: index, contentEnd: cursor, isIndefiniteLength: true, depth: depth)
        }
        var length = 0
        if lengthByte < 0x80 {
            length = Int(lengthByte)
        } else {
            let octets = Int(lengthByte & 0x7f)
            guard octets <= 8, lengthByte != 0xff else {
                throw ASN1Error.make(.invalidLength, "length field of \(octets) octets")
            }
            guard octets <= limit - index else {
                throw ASN1Error.make(.truncated, "input ends inside an element header")
            }
            var wide: UInt64 = 0
            for position in 0..<octets {
                let byte = bytes[index + position]
                if position == 0 && byte == 0 && !rules.allowsBER {
                    throw ASN1Error.make(.notDER, "length with a leading zero octet")
                }
                wide = wide << 8 | UInt64(byte)
            }
            index += octets
            guard wide <= UInt64(rules.maxSize) else {
                throw ASN1Error.make(.tooLarge, "element of \(wide) bytes exceeds \(rules.maxSize)")
            }
            length = Int(wide)
            if length < 0x80 && !rules.allowsBER { throw ASN1Error.make(.notDER, "long form for a short length") }
        }
        guard length <= limit - index else {
            throw ASN1Error.make(.truncated, "element of \(length) bytes runs past its container")
        }
        if constructed && tagClass == .universal && number < 64 && (stringTypeMask >> number) & 1 == 1
            && !rules.allowsBER
        {
            throw ASN1Error.make(.notDER, "constructed string in DER")
        }
        return ASN1Node(
            tag: tag, start: start, contentStart: index, contentEnd: index + length, isIndefiniteLength: false,
            depth: depth)
    }
}
