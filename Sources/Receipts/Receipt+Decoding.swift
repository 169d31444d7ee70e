import ASN1
import Foundation

extension Receipt {
    /// Decodes a receipt payload: `Payload ::= SET OF ReceiptAttribute`,
    /// `ReceiptAttribute ::= SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }` (Apple's
    /// ReceiptModule). Values of types 4, 5, 6 and 7 are raw bytes; other values hold one DER element;
    /// type 17 holds a nested payload, one per in-app purchase.
    ///
    /// - Throws: ``ReceiptError`` for anything that does not follow the grammar or the limits.
    public init(payload: [UInt8], limits: ReceiptLimits = .default) throws {
        let rules = ASN1Rules(allowsBER: true, maxDepth: limits.maxDepth, maxSize: limits.maxSize,
            maxChildren: limits.maxPurchases + 1024)
        do {
            let root = try ASN1.parse(payload, rules: rules)
            try self.init(payloadElement: root, limits: limits)
        } catch let error as ASN1Error {
            throw ReceiptError.make(
                error.code == .tooDeep || error.code == .tooLarge || error.code == .tooMany
                    ? .limitExceeded : .malformedPayload,
                error.reason)
        }
    }

    init(payloadElement root: ASN1Element, limits: ReceiptLimits) throws {
        guard root.tag == .set else { throw ReceiptError.make(.malformedPayload, "payload is not a SET") }
        var fields = AttributeFields(level: "receipt")
        var purchases: [InAppPurchase] = []
        var unknown: [ReceiptAttribute] = []
        var reader = try root.children()
        while let element = try reader.next() {
            let attribute = try ParsedAttribute(element)
            switch attribute.type {
            case 17:
                guard purchases.count < limits.maxPurchases else {
                    throw ReceiptError.make(.limitExceeded, "more than \(limits.maxPurchases) in-app purchases")
                }
                let set = try attribute.inner()
                guard set.tag == .set else { throw ReceiptError.make(.invalidAttributeValue, "attribute 17 is not a SET") }
                purchases.append(try InAppPurchase(set: set, limits: limits))
            case 0, 1, 2, 3, 4, 5, 8, 10, 11, 12, 15, 16, 18, 19, 21:
                try fields.add(attribute)
            default:
                unknown.append(attribute.raw)
            }
        }
        guard let bundle = fields[2] else { throw ReceiptError.make(.missingAttribute, "receipt attribute 2 (bundle id) is absent") }
        self.init(
            receiptType: try fields.requiredString(0, "receipt type"),
            appItemID: try fields.integer(1),
            bundleID: try fields.requiredString(2, "bundle id"),
            appVersion: try fields.requiredString(3, "app version"),
            opaqueValue: try fields.requiredRaw(4, "opaque value"),
            sha1Hash: try fields.requiredRaw(5, "SHA-1 hash"),
            appTransactionDate: try fields.date(8),
            ageRating: try fields.string(10),
            developerID: try fields.integer(11),
            creationDate: try fields.requiredDate(12, "creation date"),
            downloadID: try fields.integer(15),
            versionExternalID: try fields.integer(16),
            originalPurchaseDate: try fields.date(18),
            originalAppVersion: try fields.string(19),
            expirationDate: try fields.date(21),
            inAppPurchases: purchases,
            unknownAttributes: unknown,
            bundleIDEncoded: Array(bundle.value.content))
    }
}

extension InAppPurchase {
    init(set: ASN1Element, limits: ReceiptLimits) throws {
        var fields = AttributeFields(level: "in-app purchase")
        var unknown: [ReceiptAttribute] = []
        var reader = try set.children()
        var count = 0
        while let element = try reader.next() {
            count += 1
            guard count <= limits.maxAttributesPerPurchase else {
                throw ReceiptError.make(.limitExceeded, "more than \(limits.maxAttributesPerPurchase) attributes in a purchase")
            }
            let attribute = try ParsedAttribute(element)
            switch attribute.type {
            case 1701, 1702, 1703, 1704, 1705, 1706, 1707, 1708, 1711, 1712, 1713, 1719, 1721:
                try fields.add(attribute)
            default:
                unknown.append(attribute.raw)
            }
        }
        guard let quantity = try fields.integer(1701) else {
            throw ReceiptError.make(.missingAttribute, "in-app attribute 1701 (quantity) is absent")
        }
        guard quantity >= 0 else { throw ReceiptError.make(.invalidAttributeValue, "negative quantity") }
        self.init(
            quantity: quantity,
            productID: try fields.requiredString(1702, "product id"),
            transactionID: try fields.requiredString(1703, "transaction id"),
            purchaseDate: try fields.requiredDate(1704, "purchase date"),
            originalTransactionID: try fields.string(1705),
            originalPurchaseDate: try fields.date(1706),
            productTypeRaw: try fields.integer(1707),
            expiresDate: try fields.date(1708),
            webOrderLineItemID: try fields.integer(1711),
            cancellationDate: try fields.date(1712),
            isTrialPeriod: try fields.integer(1713).map { $0 != 0 },
            isInIntroOfferPeriod: try fields.integer(1719).map { $0 != 0 },
            promotionalOfferID: try fields.string(1721),
            unknownAttributes: unknown)
    }
}

/// One `ReceiptAttribute`, read in place.
struct ParsedAttribute {
    var type: Int64
    var version: Int64
    var value: ASN1Element

    init(_ element: ASN1Element) throws {
        guard element.tag == .sequence else {
            throw ReceiptError.make(.malformedPayload, "receipt attribute is not a SEQUENCE")
        }
        var parts = try element.children()
        type = try parts.read(.integer).int64()
        version = try parts.read(.integer).int64()
        guard let value = try parts.next() else {
            throw ReceiptError.make(.malformedPayload, "attribute \(type) has no value")
        }
        self.value = value
        guard value.tag == .octetString || value.tag == ASN1Tag.octetString.constructed(true) else {
            throw ReceiptError.make(.malformedPayload, "attribute \(type) value is not an OCTET STRING")
        }
        try parts.finish()
    }

    var raw: ReceiptAttribute {
        ReceiptAttribute(type: type, version: version, value: (try? value.octetString()) ?? [])
    }

    /// The DER element inside the value.
    func inner() throws -> ASN1Element {
        do {
            return try value.innerElement()
        } catch let error as ASN1Error {
            throw ReceiptError.make(.invalidAttributeValue, "attribute \(type) does not hold one element: \(error.reason)")
        }
    }
}

/// The known single-valued attributes of one level, with typed accessors that name the attribute on error.
struct AttributeFields {
    let level: String
    private var values: [Int64: ParsedAttribute] = [:]

    init(level: String) { self.level = level }

    subscript(type: Int64) -> ParsedAttribute? { values[type] }

    mutating func add(_ attribute: ParsedAttribute) throws {
        guard values[attribute.type] == nil else {
            throw ReceiptError.make(.duplicateAttribute, "\(level) attribute \(attribute.type) occurs twice")
        }
        values[attribute.type] = attribute
    }

    func string(_ type: Int64) throws -> String? {
        guard let attribute = values[type] else { return nil }
        let inner = try attribute.inner()
        guard inner.tag == .utf8String || inner.tag == .ia5String, let text = try? inner.string() else {
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not a string")
        }
        return text
    }

    func integer(_ type: Int64) throws -> Int64? {
        guard let attribute = values[type] else { return nil }
        guard let value = try? attribute.inner().int64() else {
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not a 64-bit INTEGER")
        }
        return value
    }

    /// A date; an empty string is "absent".
    func date(_ type: Int64) throws -> Date? {
        guard let text = try string(type), !text.isEmpty else { return nil }
        guard let date = ReceiptDate.parse(text) else {
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not an RFC 3339 date")
        }
        return date
    }

    func raw(_ type: Int64) throws -> [UInt8]? {
        guard let attribute = values[type] else { return nil }
        do {
            return try attribute.value.octetString()
        } catch {
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not an OCTET STRING")
        }
    }

    func requiredString(_ type: Int64, _ name: String) throws -> String {
        guard let value = try string(type) else { throw missing(type, name) }
        return value
    }

    func requiredRaw(_ type: Int64, _ name: String) throws -> [UInt8] {
        guard let value = try raw(type) else { throw missing(type, name) }
        return value
    }

    func requiredDate(_ type: Int64, _ name: String) throws -> Date {
        guard let value = try date(type) else { throw missing(type, name) }
        return value
    }

    private func missing(_ type: Int64, _ name: String) -> ReceiptError {
        ReceiptError.make(.missingAttribute, "\(level) attribute \(type) (\(name)) is absent or empty")
    }
}
