/// Entry points of the bounded BER/DER reader.
public enum ASN1 {
    /// Parses exactly one element that spans all of `bytes`.
    ///
    /// - Throws: ``ASN1Error`` for malformed input, input past a bound of `rules`, or trailing bytes.
    public static func parse(_ bytes: [UInt8], rules: ASN1Rules = .der) throws -> ASN1Element {
        guard bytes.count <= rules.maxSize else {
            throw ASN1Error.make(.tooLarge, "input of \(bytes.count) bytes exceeds \(rules.maxSize)")
        }
        var reader = ASN1Reader(storage: bytes, start: 0, end: bytes.count, depth: 0, rules: rules)
        guard let root = try reader.next() else { throw ASN1Error.make(.truncated, "empty input") }
        guard reader.isAtEnd else {
            throw ASN1Error.make(.trailingBytes, "\(bytes.count - root.end) bytes after the root element")
        }
        return root
    }
}

/// Reads consecutive elements from a range of the input, one level of nesting at a time.
///
/// Grammar (X.690 §8.1): `identifier length contents [end-of-contents]`, where the length is one octet
/// below 0x80, `0x8n` followed by n big-endian octets, or `0x80` (BER only, constructed only) with the
/// contents ending at the end-of-contents marker `00 00`.
public struct ASN1Reader: Sendable {
    public let storage: [UInt8]
    public private(set) var position: Int
    public let end: Int
    public let depth: Int
    public let rules: ASN1Rules
    private var count = 0

    init(storage: [UInt8], start: Int, end: Int, depth: Int, rules: ASN1Rules) {
        self.storage = storage
        self.position = start
        self.end = end
        self.depth = depth
        self.rules = rules
    }

    public var isAtEnd: Bool { position >= end }

    /// The next element, or `nil` at the end of the range.
    public mutating func next() throws -> ASN1Element? {
        guard position < end else { return nil }
        count += 1
        guard count <= rules.maxChildren else {
            throw ASN1Error.make(.tooMany, "more than \(rules.maxChildren) elements in one container")
        }
        let element = try Self.element(in: storage, at: position, limit: end, depth: depth, rules: rules)
        position = element.end
        return element
    }

    /// The next element, which must exist and have the given tag.
    public mutating func read(_ tag: ASN1Tag) throws -> ASN1Element {
        guard let element = try next() else { throw ASN1Error.make(.truncated, "missing \(tag)") }
        return try element.expect(tag)
    }

    /// The next element if it has the given tag; otherwise nothing is consumed.
    public mutating func readIfPresent(_ tag: ASN1Tag) throws -> ASN1Element? {
        guard position < end else { return nil }
        let saved = (position, count)
        let element = try next()!
        if element.tag == tag { return element }
        (position, count) = saved
        return nil
    }

    /// Throws if any element remains.
    public func finish() throws {
        guard isAtEnd else { throw ASN1Error.make(.trailingBytes, "unexpected element after the last field") }
    }

    // MARK: - Decoding one header

    /// Universal string types, which DER requires to be primitive (X.690 §10.2).
    private static let stringTypes: Set<UInt64> = [3, 4, 12, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]

    static func element(in bytes: [UInt8], at start: Int, limit: Int, depth: Int, rules: ASN1Rules) throws
        -> ASN1Element
    {
        guard depth <= rules.maxDepth else {
            throw ASN1Error.make(.tooDeep, "nesting deeper than \(rules.maxDepth)")
        }
        var index = start
        func nextByte() throws -> UInt8 {
            guard index < limit else { throw ASN1Error.make(.truncated, "input ends inside an element header") }
            defer { index += 1 }
            return bytes[index]
        }

        // Identifier.
        let first = try nextByte()
        let tagClass = ASN1Tag.TagClass(rawValue: first >> 6)!
        let constructed = first & 0x20 != 0
        var number = UInt64(first & 0x1f)
        if number == 0x1f {
            number = 0
            var groups = 0
            while true {
                let byte = try nextByte()
                groups += 1
                if groups == 1 && byte == 0x80 { throw ASN1Error.make(.invalidTag, "tag number with a leading zero group") }
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

        // Length.
        let lengthByte = try nextByte()
        if lengthByte == 0x80 {
            guard rules.allowsBER else { throw ASN1Error.make(.notDER, "indefinite length in DER") }
            guard constructed else { throw ASN1Error.make(.invalidLength, "indefinite length on a primitive element") }
            let contentStart = index
            // Scan children until the end-of-contents marker; each child is itself bounded one level deeper.
            var cursor = contentStart
            var children = 0
            while true {
                guard cursor + 2 <= limit else { throw ASN1Error.make(.truncated, "missing end-of-contents marker") }
                if bytes[cursor] == 0 && bytes[cursor + 1] == 0 { break }
                children += 1
                guard children <= rules.maxChildren else {
                    throw ASN1Error.make(.tooMany, "more than \(rules.maxChildren) elements in one container")
                }
                cursor = try element(in: bytes, at: cursor, limit: limit, depth: depth + 1, rules: rules).end
            }
            return ASN1Element(
                tag: tag, storage: bytes, start: start, contentStart: contentStart, contentEnd: cursor,
                end: cursor + 2, isIndefiniteLength: true, depth: depth, rules: rules)
        }
        var length = 0
        if lengthByte < 0x80 {
            length = Int(lengthByte)
        } else {
            let octets = Int(lengthByte & 0x7f)
            guard octets <= 8, lengthByte != 0xff else { throw ASN1Error.make(.invalidLength, "length field of \(octets) octets") }
            var wide: UInt64 = 0
            for position in 0..<octets {
                let byte = try nextByte()
                if position == 0 && byte == 0 && !rules.allowsBER {
                    throw ASN1Error.make(.notDER, "length with a leading zero octet")
                }
                wide = wide << 8 | UInt64(byte)
            }
            guard wide <= UInt64(rules.maxSize) else {
                throw ASN1Error.make(.tooLarge, "element of \(wide) bytes exceeds \(rules.maxSize)")
            }
            length = Int(wide)
            if length < 0x80 && !rules.allowsBER { throw ASN1Error.make(.notDER, "long form for a short length") }
        }
        guard length <= limit - index else {
            throw ASN1Error.make(.truncated, "element of \(length) bytes runs past its container")
        }
        if constructed && tagClass == .universal && Self.stringTypes.contains(number) && !rules.allowsBER {
            throw ASN1Error.make(.notDER, "constructed string in DER")
        }
        return ASN1Element(
            tag: tag, storage: bytes, start: start, contentStart: index, contentEnd: index + length,
            end: index + length, isIndefiniteLength: false, depth: depth, rules: rules)
    }
}
