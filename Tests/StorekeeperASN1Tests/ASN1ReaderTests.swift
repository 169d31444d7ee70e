import StorekeeperASN1
import Testing

@Suite("ASN.1 reader")
struct ASN1ReaderTests {
    @Test("Reads a DER SEQUENCE of INTEGER, OCTET STRING, UTF8String and OID")
    func readsDER() throws {
        let bytes: [UInt8] = [
            0x30, 0x15, 0x02, 0x02, 0x01, 0x00, 0x04, 0x02, 0xca, 0xfe, 0x0c, 0x02, 0x68, 0x69,
            0x06, 0x07, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01,
        ]
        let root = try ASN1.parse(bytes)
        #expect(root.tag == .sequence)
        var reader = try root.children()
        #expect(try reader.read(.integer).int64() == 256)
        #expect(try reader.read(.octetString).octetString() == [0xca, 0xfe])
        #expect(try reader.read(.utf8String).string() == "hi")
        #expect(try reader.read(.objectIdentifier).objectIdentifier().description == "1.2.840.113549.1")
        #expect(reader.isAtEnd)
    }

    @Test(
        "INTEGER values are two's complement, up to 64 bits",
        arguments: [
            ([0x00], 0), ([0x7f], 127), ([0x00, 0x80], 128), ([0x80], -128), ([0xff], -1),
            ([0x07, 0x1a, 0xfd, 0x50, 0xe7, 0x48, 0x2e], 2_000_000_123_357_230),
            ([0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], Int64.max),
            ([0x80, 0, 0, 0, 0, 0, 0, 0], Int64.min),
        ] as [([UInt8], Int64)])
    func integers(content: [UInt8], value: Int64) throws {
        let element = try ASN1.parse([0x02, UInt8(content.count)] + content)
        #expect(try element.int64() == value)
        #expect(DERWriter.integerContent(value) == content)
    }

    @Test("INTEGERs wider than 64 bits or empty are invalid values")
    func wideIntegers() throws {
        #expect(throws: ASN1Error.make(.invalidValue, "")) {
            try ASN1.parse([0x02, 0x09, 1, 0, 0, 0, 0, 0, 0, 0, 0]).int64()
        }
        #expect(throws: ASN1Error.make(.invalidValue, "")) { try ASN1.parse([0x02, 0x00]).int64() }
    }

    @Test("BER indefinite lengths and constructed OCTET STRINGs are read; DER rejects them")
    func berForms() throws {
        // SEQUENCE (indefinite) { OCTET STRING constructed (indefinite) { "ab", "c" } }
        let bytes: [UInt8] = [0x30, 0x80, 0x24, 0x80, 0x04, 0x02, 0x61, 0x62, 0x04, 0x01, 0x63, 0x00, 0x00, 0x00, 0x00]
        let root = try ASN1.parse(bytes, rules: .ber)
        #expect(root.isIndefiniteLength)
        var reader = try root.children()
        let string = try #require(try reader.next())
        #expect(try string.octetString() == Array("abc".utf8))
        #expect(reader.isAtEnd)
        #expect(throws: ASN1Error.make(.notDER, "")) { try ASN1.parse(bytes, rules: .der) }
    }

    @Test("An empty definite constructed element is not an end-of-contents marker")
    func emptyDefinite() throws {
        let root = try ASN1.parse([0x30, 0x80, 0x30, 0x00, 0x31, 0x00, 0x00, 0x00], rules: .ber)
        var reader = try root.children()
        #expect(try reader.next()?.tag == .sequence)
        #expect(try reader.next()?.tag == .set)
        #expect(try reader.next() == nil)
    }

    @Test("High tag numbers are read whole, not as one byte")
    func highTags() throws {
        let element = try ASN1.parse([0x9f, 0x81, 0x00, 0x01, 0xaa], rules: .ber)
        #expect(element.tag == ASN1Tag(.contextSpecific, 128, constructed: false))
        #expect(element.tag.encoded == [0x9f, 0x81, 0x00])
        #expect(Array(element.content) == [0xaa])
    }

    @Test(
        "Malformed encodings give the right error",
        arguments: [
            ([], ASN1Error.Code.truncated),
            ([0x30], .truncated),
            ([0x30, 0x03, 0x02, 0x01], .truncated),
            ([0x02, 0x01, 0x00, 0x00], .trailingBytes),
            ([0x30, 0x80, 0x02, 0x01, 0x00], .truncated),
            ([0x04, 0x80, 0x00, 0x00], .invalidLength),
            ([0x30, 0xff], .invalidLength),
            ([0x30, 0x89, 1, 0, 0, 0, 0, 0, 0, 0, 0], .invalidLength),
            ([0x30, 0x84, 0x7f, 0xff, 0xff, 0xff], .tooLarge),
            ([0x00, 0x00], .unexpectedEndOfContents),
            ([0x1f, 0x80, 0x01, 0x00], .invalidTag),
            ([0x30, 0x81, 0x01, 0x00], .notDER),
            ([0x30, 0x82, 0x00, 0x01, 0x00], .notDER),
        ] as [([UInt8], ASN1Error.Code)])
    func malformed(bytes: [UInt8], code: ASN1Error.Code) {
        let rules = code == .notDER ? ASN1Rules.der : ASN1Rules.ber
        #expect(throws: ASN1Error.make(code, "")) {
            let root = try ASN1.parse(bytes, rules: rules)
            if root.tag.isConstructed {
                var reader = try root.children()
                while try reader.next() != nil {}
            }
        }
    }

    @Test("Depth and count limits hold")
    func limits() throws {
        let deep = Array([[UInt8]](repeating: [0x30, 0x80], count: 40).joined()) + Array(repeating: 0, count: 80)
        #expect(throws: ASN1Error.make(.tooDeep, "")) { try ASN1.parse(deep, rules: .ber) }
        let many = [0x30, 0x0a] + Array([[UInt8]](repeating: [0x05, 0x00], count: 5).joined())
        var rules = ASN1Rules.der
        rules.maxChildren = 4
        var reader = try ASN1.parse(many, rules: rules).children()
        #expect(throws: ASN1Error.make(.tooMany, "")) { while try reader.next() != nil {} }
    }

    @Test("Object identifiers round-trip between arcs, dotted text and bytes")
    func objectIdentifiers() throws {
        let oid = ASN1ObjectIdentifier([1, 2, 840, 113_635, 100, 6, 11, 1])
        #expect(oid.description == "1.2.840.113635.100.6.11.1")
        #expect(try ASN1ObjectIdentifier(dotted: "1.2.840.113635.100.6.11.1") == oid)
        #expect(try ASN1ObjectIdentifier(contentBytes: oid.contentBytes) == oid)
        #expect(ASN1ObjectIdentifier([2, 999, 3]).description == "2.999.3")
        #expect(throws: ASN1Error.self) { try ASN1ObjectIdentifier(dotted: "1.2.x") }
        // The first component (2 × 40 + second) would overflow 64 bits: an error, not a trap.
        #expect(throws: ASN1Error.self) { try ASN1ObjectIdentifier(dotted: "2.18446744073709551615") }
        #expect(try ASN1ObjectIdentifier(dotted: "2.999.3").arcs == [2, 999, 3])
        #expect(throws: ASN1Error.self) { try ASN1ObjectIdentifier(contentBytes: [0x2a, 0x86]) }
        #expect(throws: ASN1Error.self) { try ASN1ObjectIdentifier(contentBytes: [0x2a, 0x80, 0x01]) }
    }
}

@Suite("DER writer")
struct DERWriterTests {
    @Test("Lengths use the minimal form", arguments: [0, 1, 127, 128, 255, 256, 65_535, 65_536, 16_777_216])
    func lengths(length: Int) throws {
        let content = [UInt8](repeating: 0xab, count: length)
        let encoded = DERWriter.encode { $0.appendOctetString(content) }
        let element = try ASN1.parse(encoded, rules: ASN1Rules(allowsBER: false, maxSize: 32 << 20))
        #expect(element.contentLength == length)
        #expect(try element.octetString() == content)
    }

    @Test("Nested structures round-trip through the reader")
    func roundTrip() throws {
        let encoded = DERWriter.encode { writer in
            writer.appendSequence { sequence in
                sequence.appendInteger(-129)
                sequence.appendBoolean(true)
                sequence.appendNull()
                sequence.appendUTF8String("é✓")
                sequence.appendIA5String("2024-02-23T17:27:16Z")
                sequence.appendUnsignedInteger(magnitude: [0x00, 0x80, 0x01])
                sequence.append(.contextSpecific(3, constructed: true)) { $0.appendInteger(7) }
            }
        }
        var reader = try ASN1.parse(encoded).children()
        #expect(try reader.read(.integer).int64() == -129)
        #expect(try reader.read(.boolean).boolean())
        _ = try reader.read(.null)
        #expect(try reader.read(.utf8String).string() == "é✓")
        #expect(try reader.read(.ia5String).string() == "2024-02-23T17:27:16Z")
        #expect(Array(try reader.read(.integer).integerBytes()) == [0x00, 0x80, 0x01])
        var tagged = try reader.read(.contextSpecific(3, constructed: true)).children()
        #expect(try tagged.read(.integer).int64() == 7)
        #expect(reader.isAtEnd)
    }

    @Test("SET OF members are sorted as DER requires, shorter first on a common prefix")
    func setOfOrder() throws {
        let members: [[UInt8]] = [
            [0x04, 0x02, 0x01, 0x02], [0x02, 0x01, 0x05], [0x04, 0x01, 0x01], [0x02, 0x01, 0x01],
        ]
        let encoded = DERWriter.encode { $0.appendSetOf(members) }
        #expect(encoded == [0x31, 0x0d, 0x02, 0x01, 0x01, 0x02, 0x01, 0x05, 0x04, 0x01, 0x01, 0x04, 0x02, 0x01, 0x02])
    }
}
