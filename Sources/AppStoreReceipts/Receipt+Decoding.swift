import Foundation
import StorekeeperASN1

extension Receipt {
    /// Decodes a receipt payload: `Payload ::= SET OF ReceiptAttribute`,
    /// `ReceiptAttribute ::= SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }` (Apple's
    /// ReceiptModule). Values of types 4, 5, 6 and 7 are raw bytes; other values hold one DER element;
    /// type 17 holds a nested payload, one per in-app purchase.
    ///
    /// - Throws: ``ReceiptError`` for anything that does not follow the grammar or the limits.
    public init(payload: [UInt8], limits: ReceiptLimits = .default) throws {
        let rules = ASN1Rules(
            allowsBER: true, maxDepth: limits.maxDepth, maxSize: limits.maxSize,
            maxChildren: limits.maxPurchases + 1024)
        do {
            let document = try ASN1Document(payload, rules: rules)
            try self.init(document: document, root: try document.root(), limits: limits)
        } catch let error as ASN1Error {
            throw ReceiptError.make(
                error.code == .tooDeep || error.code == .tooLarge || error.code == .tooMany
                    ? .limitExceeded : .malformedPayload,
                error.reason)
        }
    }

    init(document: ASN1Document, root: ASN1Node, limits: ReceiptLimits) throws {
        guard root.tag == .set else { throw ReceiptError.make(.malformedPayload, "payload is not a SET") }
        var seen = SeenAttributes(level: "receipt")
        var receiptType: String?
        var appItemID: Int64?
        var bundle: (String, [UInt8])?
        var appVersion: String?
        var opaqueValue: [UInt8]?
        var sha1Hash: [UInt8]?
        var appTransactionDate: Date?
        var ageRating: String?
        var developerID: Int64?
        var creationDate: Date?
        var downloadID: Int64?
        var versionExternalID: Int64?
        var originalPurchaseDate: Date?
        var originalAppVersion: String?
        var expirationDate: Date?
        var purchases: [InAppPurchase] = []
        var unknown: [ReceiptAttribute] = []
        func lenient<T>(_ attribute: ParsedAttribute, _ read: (ParsedAttribute) throws -> T) -> T? {
            attribute.lenient(document, keptIn: &unknown, read)
        }
        var iterator = try document.children(of: root)
        while let node = try document.next(&iterator) {
            let attribute = try ParsedAttribute(node, in: document, level: "receipt")
            switch attribute.type {
            case 17:
                guard purchases.count < limits.maxPurchases else {
                    throw ReceiptError.make(.limitExceeded, "more than \(limits.maxPurchases) in-app purchases")
                }
                let purchase = try attribute.withInner(document) { document, set in
                    guard set.tag == .set else {
                        throw ReceiptError.make(.invalidAttributeValue, "attribute 17 is not a SET")
                    }
                    return try InAppPurchase(document: document, set: set, limits: limits)
                }
                purchases.append(purchase)
            case 0: try seen.mark(attribute); receiptType = try attribute.string(document)
            case 1: try seen.mark(attribute); appItemID = lenient(attribute) { try $0.integer(document) }
            case 2: try seen.mark(attribute); bundle = (try attribute.string(document), try attribute.bytes(document))
            case 3: try seen.mark(attribute); appVersion = try attribute.string(document)
            case 4: try seen.mark(attribute); opaqueValue = try attribute.bytes(document)
            case 5: try seen.mark(attribute); sha1Hash = try attribute.bytes(document)
            case 8: try seen.mark(attribute); appTransactionDate = lenient(attribute) { try $0.date(document) } ?? nil
            case 10: try seen.mark(attribute); ageRating = lenient(attribute) { try $0.string(document) }
            case 11: try seen.mark(attribute); developerID = lenient(attribute) { try $0.integer(document) }
            case 12: try seen.mark(attribute); creationDate = try attribute.date(document)
            case 15: try seen.mark(attribute); downloadID = lenient(attribute) { try $0.integer(document) }
            case 16: try seen.mark(attribute); versionExternalID = lenient(attribute) { try $0.integer(document) }
            case 18: try seen.mark(attribute); originalPurchaseDate = try attribute.date(document)
            case 19: try seen.mark(attribute); originalAppVersion = try attribute.string(document)
            case 21: try seen.mark(attribute); expirationDate = try attribute.date(document)
            default: unknown.append(attribute.kept(document))
            }
        }
        func required<T>(_ value: T?, _ type: Int, _ name: String) throws -> T {
            try requiredAttribute(value, level: "receipt", type: type, name: name)
        }
        let (bundleID, bundleIDEncoded) = try required(bundle, 2, "bundle id")
        self.init(
            receiptType: try required(receiptType, 0, "receipt type"), appItemID: appItemID, bundleID: bundleID,
            appVersion: try required(appVersion, 3, "app version"),
            opaqueValue: try required(opaqueValue, 4, "opaque value"),
            sha1Hash: try required(sha1Hash, 5, "SHA-1 hash"), appTransactionDate: appTransactionDate,
            ageRating: ageRating,
            developerID: developerID, creationDate: try required(creationDate, 12, "creation date"),
            downloadID: downloadID,
            versionExternalID: versionExternalID, originalPurchaseDate: originalPurchaseDate,
            originalAppVersion: originalAppVersion, expirationDate: expirationDate, inAppPurchases: purchases,
            unknownAttributes: unknown, bundleIDEncoded: bundleIDEncoded)
    }
}

extension InAppPurchase {
    init(document: ASN1Document, set: ASN1Node, limits: ReceiptLimits) throws {
        var seen = SeenAttributes(level: "in-app purchase")
        var quantity: Int64?
        var productID: String?
        var transactionID: String?
        var purchaseDate: Date?
        var originalTransactionID: String?
        var originalPurchaseDate: Date?
        var productTypeRaw: Int64?
        var expiresDate: Date?
        var webOrderLineItemID: Int64?
        var cancellationDate: Date?
        var isTrialPeriod: Bool?
        var isInIntroOfferPeriod: Bool?
        var promotionalOfferID: String?
        var unknown: [ReceiptAttribute] = []
        var iterator = try document.children(of: set)
        var count = 0
        while let node = try document.next(&iterator) {
            count += 1
            guard count <= limits.maxAttributesPerPurchase else {
                throw ReceiptError.make(
                    .limitExceeded, "more than \(limits.maxAttributesPerPurchase) attributes in a purchase")
            }
            let attribute = try ParsedAttribute(node, in: document, level: "in-app purchase")
            switch attribute.type {
            case 1701: try seen.mark(attribute); quantity = try attribute.integer(document)
            case 1702: try seen.mark(attribute); productID = try attribute.string(document)
            case 1703: try seen.mark(attribute); transactionID = try attribute.string(document)
            case 1704: try seen.mark(attribute); purchaseDate = try attribute.date(document)
            case 1705: try seen.mark(attribute); originalTransactionID = try attribute.string(document)
            case 1706: try seen.mark(attribute); originalPurchaseDate = try attribute.date(document)
            case 1707:
                try seen.mark(attribute)
                productTypeRaw = attribute.lenient(document, keptIn: &unknown) { try $0.nonNegative(document) }
            case 1708: try seen.mark(attribute); expiresDate = try attribute.date(document)
            case 1711: try seen.mark(attribute); webOrderLineItemID = try attribute.nonNegative(document)
            case 1712: try seen.mark(attribute); cancellationDate = try attribute.date(document)
            case 1713: try seen.mark(attribute); isTrialPeriod = try attribute.nonNegative(document) != 0
            case 1719: try seen.mark(attribute); isInIntroOfferPeriod = try attribute.nonNegative(document) != 0
            case 1721: try seen.mark(attribute); promotionalOfferID = try attribute.string(document)
            default: unknown.append(attribute.kept(document))
            }
        }
        func required<T>(_ value: T?, _ type: Int, _ name: String) throws -> T {
            try requiredAttribute(value, level: "in-app", type: type, name: name)
        }
        let count64 = try required(quantity, 1701, "quantity")
        guard count64 >= 0 else { throw ReceiptError.make(.invalidAttributeValue, "negative quantity") }
        self.init(
            quantity: count64, productID: try required(productID, 1702, "product id"),
            transactionID: try required(transactionID, 1703, "transaction id"),
            purchaseDate: try required(purchaseDate, 1704, "purchase date"),
            originalTransactionID: originalTransactionID,
            originalPurchaseDate: originalPurchaseDate, productTypeRaw: productTypeRaw, expiresDate: expiresDate,
            webOrderLineItemID: webOrderLineItemID, cancellationDate: cancellationDate, isTrialPeriod: isTrialPeriod,
            isInIntroOfferPeriod: isInIntroOfferPeriod, promotionalOfferID: promotionalOfferID,
            unknownAttributes: unknown)
    }
}

/// One `ReceiptAttribute`, read in place, with typed accessors that name the attribute on error.
struct ParsedAttribute {
    let type: Int64
    let version: Int64
    let value: ASN1Node
    let level: StaticString

    init(_ node: ASN1Node, in document: ASN1Document, level: StaticString) throws {
        guard node.tag == .sequence else {
            throw ReceiptError.make(.malformedPayload, "receipt attribute is not a SEQUENCE")
        }
        self.level = level
        if let fast = Self.readDefinite(node, in: document) {
            (type, version, value) = fast
            return
        }
        var parts = try document.children(of: node)
        type = try document.int64(try document.read(.integer, from: &parts))
        version = try document.int64(try document.read(.integer, from: &parts))
        guard let value = try document.next(&parts) else {
            throw ReceiptError.make(.malformedPayload, "attribute \(type) has no value")
        }
        self.value = value
        guard value.tag == .octetString || value.tag == ASN1Tag.octetString.constructed(true) else {
            throw ReceiptError.make(.malformedPayload, "attribute \(type) value is not an OCTET STRING")
        }
        guard parts.isAtEnd else { throw ReceiptError.make(.malformedPayload, "attribute \(type) has extra fields") }
    }

    /// The common shape read in one pass: `02 l type 02 l version 04 l value` with definite lengths filling
    /// the SEQUENCE exactly. Anything else (BER forms, errors) returns nil for the general reader to handle
    /// and report.
    private static func readDefinite(_ node: ASN1Node, in document: ASN1Document) -> (Int64, Int64, ASN1Node)? {
        document.bytes.withUnsafeBufferPointer { bytes -> (Int64, Int64, ASN1Node)? in
            var index = node.contentStart
            let end = node.contentEnd
            guard let typeField = shortHeader(bytes, tag: 0x02, at: &index, end: end),
                let type = integer(bytes, typeField),
                let versionField = shortHeader(bytes, tag: 0x02, at: &index, end: end),
                let version = integer(bytes, versionField)
            else { return nil }
            let valueStart = index
            guard let valueField = shortHeader(bytes, tag: 0x04, at: &index, end: end), index == end else { return nil }
            return (
                type, version,
                ASN1Node(
                    tag: .octetString, start: valueStart, contentStart: valueField.lowerBound,
                    contentEnd: valueField.upperBound, isIndefiniteLength: false, depth: node.depth + 1)
            )
        }
    }

    /// The content range of a definite-length element with the one-byte identifier `tag` at `index`
    /// (lengths up to three octets), advancing `index` past it; nil if anything differs.
    private static func shortHeader(_ bytes: UnsafeBufferPointer<UInt8>, tag: UInt8?, at index: inout Int, end: Int)
        -> Range<Int>?
    {
        guard end - index >= 2, tag == nil || bytes[index] == tag, bytes[index] & 0x1f != 0x1f else { return nil }
        let first = bytes[index + 1]
        var length = Int(first)
        var start = index + 2
        if first >= 0x80 {
            let octets = Int(first & 0x7f)
            guard octets >= 1, octets <= 3, end - start >= octets else { return nil }
            length = 0
            for offset in 0..<octets { length = length << 8 | Int(bytes[start + offset]) }
            start += octets
        }
        guard length <= end - start else { return nil }
        index = start + length
        return start..<start + length
    }

    private static func integer(_ bytes: UnsafeBufferPointer<UInt8>, _ field: Range<Int>) -> Int64? {
        guard field.count >= 1, field.count <= 8 else { return nil }
        var value: Int64 = bytes[field.lowerBound] & 0x80 != 0 ? -1 : 0
        for index in field { value = value << 8 | Int64(bytes[index]) }
        return value
    }

    /// The single primitive element inside a primitive value, read in one pass; nil when the general reader
    /// must decide (constructed, high tag, indefinite or malformed).
    private func innerFast(_ document: ASN1Document) -> ASN1Node? {
        guard value.tag == .octetString else { return nil }
        return document.bytes.withUnsafeBufferPointer { bytes -> ASN1Node? in
            var index = value.contentStart
            guard index < value.contentEnd else { return nil }
            let identifier = bytes[index]
            guard identifier != 0, let field = Self.shortHeader(bytes, tag: nil, at: &index, end: value.contentEnd),
                index == value.contentEnd
            else { return nil }
            let tagClass: ASN1Tag.TagClass =
                switch identifier >> 6 {
                case 0: .universal
                case 1: .application
                case 2: .contextSpecific
                default: .private
                }
            return ASN1Node(
                tag: ASN1Tag(tagClass, UInt64(identifier & 0x1f), constructed: identifier & 0x20 != 0),
                start: value.contentStart, contentStart: field.lowerBound, contentEnd: field.upperBound,
                isIndefiniteLength: false, depth: value.depth + 1)
        }
    }

    func kept(_ document: ASN1Document) -> ReceiptAttribute {
        ReceiptAttribute(type: type, version: version, value: (try? document.octetString(value)) ?? [])
    }

    /// The DER element inside the value (a BER constructed value is joined into its own document first).
    /// Runs `body` on the element inside the value, without copying the document in the common case.
    @inline(__always)
    func withInner<T>(_ document: ASN1Document, _ body: (ASN1Document, ASN1Node) throws -> T) throws -> T {
        if let node = innerFast(document) { return try body(document, node) }
        let value = try inner(document)
        return try body(value.document, value.node)
    }

    func inner(_ document: ASN1Document) throws -> InnerValue {
        do {
            if value.tag == .octetString { return InnerValue(document: document, node: try document.inner(of: value)) }
            let joined = try ASN1Document(try document.octetString(value), rules: document.rules)
            return InnerValue(document: joined, node: try joined.root())
        } catch let error as ASN1Error {
            throw ReceiptError.make(
                .invalidAttributeValue, "attribute \(type) does not hold one element: \(error.reason)")
        }
    }

    func string(_ document: ASN1Document) throws -> String {
        let text = try withInner(document) { document, inner -> String? in
            guard inner.tag == .utf8String || inner.tag == .ia5String else { return nil }
            return try? document.string(inner)
        }
        guard let text else {
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not a string")
        }
        return text
    }

    func integer(_ document: ASN1Document) throws -> Int64 {
        guard let value = try withInner(document, { document, inner in try? document.int64(inner) }) else {
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not a 64-bit INTEGER")
        }
        return value
    }

    /// An attribute Apple does not document (1, 8, 10, 11, 15, 16, 1707): read when it has the form seen so
    /// far, else kept raw in `unknown`; a change of its form must not refuse every receipt.
    func lenient<T>(_ document: ASN1Document, keptIn unknown: inout [ReceiptAttribute], _ read: (Self) throws -> T)
        -> T?
    {
        if let value = try? read(self) { return value }
        unknown.append(kept(document))
        return nil
    }

    /// A 64-bit INTEGER that is an id, a type or a flag: never negative.
    func nonNegative(_ document: ASN1Document) throws -> Int64 {
        let value = try integer(document)
        guard value >= 0 else {
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is negative")
        }
        return value
    }

    /// A date; an empty string is "absent".
    func date(_ document: ASN1Document) throws -> Date? {
        enum Outcome { case absent, date(Date), notAString, notADate }
        let outcome = try withInner(document) { document, inner -> Outcome in
            guard inner.tag == .utf8String || inner.tag == .ia5String else { return .notAString }
            guard inner.contentLength > 0 else { return .absent }
            return ReceiptDate.parse(bytes: document.content(inner)).map(Outcome.date) ?? .notADate
        }
        switch outcome {
        case .absent: return nil
        case .date(let date): return date
        case .notAString: throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not a string")
        case .notADate:
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not an RFC 3339 date")
        }
    }

    func bytes(_ document: ASN1Document) throws -> [UInt8] {
        do {
            return try document.octetString(value)
        } catch {
            throw ReceiptError.make(.invalidAttributeValue, "\(level) attribute \(type) is not an OCTET STRING")
        }
    }
}

/// The element inside an attribute's value and the document it lives in (its own for a BER constructed value).
struct InnerValue {
    let document: ASN1Document
    let node: ASN1Node
}

/// Which single-valued attributes a level has seen, to reject duplicates.
struct SeenAttributes {
    let level: StaticString
    private var bits: UInt64 = 0

    init(level: StaticString) { self.level = level }

    mutating func mark(_ attribute: ParsedAttribute) throws {
        let bit: UInt64 = 1 << UInt64(attribute.type >= 1700 ? attribute.type - 1700 : attribute.type)
        guard bits & bit == 0 else {
            throw ReceiptError.make(.duplicateAttribute, "\(level) attribute \(attribute.type) occurs twice")
        }
        bits |= bit
    }
}

/// The value of a required attribute, or a `missingAttribute` error naming it.
func requiredAttribute<T>(_ value: T?, level: String, type: Int, name: String) throws -> T {
    guard let value else {
        throw ReceiptError.make(.missingAttribute, "\(level) attribute \(type) (\(name)) is absent or empty")
    }
    return value
}
