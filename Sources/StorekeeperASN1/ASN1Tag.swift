/// An ASN.1 identifier: class, number and whether the encoding is constructed (X.690 §8.1.2).
public struct ASN1Tag: Hashable, Sendable, CustomStringConvertible {
    /// The two class bits of the identifier octet.
    public enum TagClass: UInt8, Sendable {
        case universal = 0
        case application = 1
        case contextSpecific = 2
        case `private` = 3
    }

    public var tagClass: TagClass
    public var number: UInt64
    public var isConstructed: Bool

    public init(_ tagClass: TagClass, _ number: UInt64, constructed: Bool) {
        self.tagClass = tagClass
        self.number = number
        self.isConstructed = constructed
    }

    public static let boolean = ASN1Tag(.universal, 1, constructed: false)
    public static let integer = ASN1Tag(.universal, 2, constructed: false)
    public static let bitString = ASN1Tag(.universal, 3, constructed: false)
    public static let octetString = ASN1Tag(.universal, 4, constructed: false)
    public static let null = ASN1Tag(.universal, 5, constructed: false)
    public static let objectIdentifier = ASN1Tag(.universal, 6, constructed: false)
    public static let utf8String = ASN1Tag(.universal, 12, constructed: false)
    public static let printableString = ASN1Tag(.universal, 19, constructed: false)
    public static let ia5String = ASN1Tag(.universal, 22, constructed: false)
    public static let utcTime = ASN1Tag(.universal, 23, constructed: false)
    public static let generalizedTime = ASN1Tag(.universal, 24, constructed: false)
    public static let sequence = ASN1Tag(.universal, 16, constructed: true)
    public static let set = ASN1Tag(.universal, 17, constructed: true)

    /// `[n]` in the context-specific class.
    public static func contextSpecific(_ number: UInt64, constructed: Bool) -> ASN1Tag {
        ASN1Tag(.contextSpecific, number, constructed: constructed)
    }

    /// The same tag with the constructed bit set or cleared.
    public func constructed(_ flag: Bool) -> ASN1Tag { ASN1Tag(tagClass, number, constructed: flag) }

    /// The identifier octets of this tag (low-tag or high-tag-number form).
    public var encoded: [UInt8] {
        let first = tagClass.rawValue << 6 | (isConstructed ? 0x20 : 0)
        if number < 31 { return [first | UInt8(number)] }
        var groups: [UInt8] = []
        var remaining = number
        repeat {
            groups.append(UInt8(remaining & 0x7f))
            remaining >>= 7
        } while remaining > 0
        var result = [first | 0x1f]
        for (index, group) in groups.reversed().enumerated() {
            result.append(index == groups.count - 1 ? group : group | 0x80)
        }
        return result
    }

    public var description: String {
        let kind = isConstructed ? "constructed" : "primitive"
        switch tagClass {
        case .universal: return "UNIVERSAL \(number) (\(kind))"
        case .application: return "[APPLICATION \(number)] (\(kind))"
        case .contextSpecific: return "[\(number)] (\(kind))"
        case .private: return "[PRIVATE \(number)] (\(kind))"
        }
    }
}
