import Foundation
import StorekeeperASN1
public import StorekeeperCrypto

extension Receipt {
    /// The payload as DER: a `SET OF ReceiptAttribute`, sorted as DER requires (Apple's order), or in the
    /// order written (ascending type, as Xcode writes) when `sorted` is false.
    public func payloadDER(sorted: Bool = true) -> [UInt8] {
        var attributes: [[UInt8]] = []
        func add(_ type: Int64, version: Int64 = 1, _ value: [UInt8]) {
            attributes.append(Self.encodeAttribute(type: type, version: version, value: value))
        }
        add(0, Self.der { $0.appendUTF8String(receiptType) })
        if let appItemID { add(1, Self.der { $0.appendInteger(appItemID) }) }
        add(2, bundleIDEncoded)
        add(3, Self.der { $0.appendUTF8String(appVersion) })
        add(4, version: 2, opaqueValue)
        add(5, sha1Hash)
        if let appTransactionDate { add(8, Self.dateDER(appTransactionDate)) }
        if let ageRating { add(10, Self.der { $0.appendIA5String(ageRating) }) }
        if let developerID { add(11, Self.der { $0.appendInteger(developerID) }) }
        add(12, Self.dateDER(creationDate))
        if let downloadID { add(15, Self.der { $0.appendInteger(downloadID) }) }
        if let versionExternalID { add(16, Self.der { $0.appendInteger(versionExternalID) }) }
        for purchase in inAppPurchases { add(17, purchase.payloadDER(sorted: sorted)) }
        if let originalPurchaseDate { add(18, Self.dateDER(originalPurchaseDate)) }
        if let originalAppVersion { add(19, Self.der { $0.appendUTF8String(originalAppVersion) }) }
        if let expirationDate { add(21, Self.dateDER(expirationDate)) }
        for attribute in unknownAttributes { add(attribute.type, version: attribute.version, attribute.value) }
        return Self.set(attributes, sorted: sorted)
    }

    /// A signed receipt: PKCS #7 signed-data over ``payloadDER(sorted:)`` without signed attributes, the
    /// signer's certificate first and then `chain`, as Apple writes them.
    public func signed(
        by signer: Certificate, key: PrivateKey, chain: [Certificate], digest: DigestAlgorithm = .sha256,
        sorted: Bool = true
    ) throws -> [UInt8] {
        try PKCS7.sign(content: payloadDER(sorted: sorted), signer: signer, key: key, chain: chain, digest: digest)
    }

    static func encodeAttribute(type: Int64, version: Int64, value: [UInt8]) -> [UInt8] {
        der { writer in
            writer.appendSequence { sequence in
                sequence.appendInteger(type)
                sequence.appendInteger(version)
                sequence.appendOctetString(value)
            }
        }
    }

    static func der(_ body: (inout DERWriter) -> Void) -> [UInt8] { DERWriter.encode(body) }

    static func dateDER(_ date: Date?) -> [UInt8] {
        der { $0.appendIA5String(date.map(ReceiptDate.rfc3339String) ?? "") }
    }

    static func set(_ members: [[UInt8]], sorted: Bool) -> [UInt8] {
        der { writer in
            if sorted {
                writer.appendSetOf(members)
            } else {
                writer.append(.set, content: members.flatMap { $0 })
            }
        }
    }
}

extension InAppPurchase {
    /// The purchase's nested `SET OF ReceiptAttribute`. Like Apple, an absent expiry or cancellation date is
    /// written as an empty string.
    public func payloadDER(sorted: Bool = true) -> [UInt8] {
        var attributes: [[UInt8]] = []
        func add(_ type: Int64, _ value: [UInt8]) {
            attributes.append(Receipt.encodeAttribute(type: type, version: 1, value: value))
        }
        add(1701, Receipt.der { $0.appendInteger(quantity) })
        add(1702, Receipt.der { $0.appendUTF8String(productID) })
        add(1703, Receipt.der { $0.appendUTF8String(transactionID) })
        add(1704, Receipt.dateDER(purchaseDate))
        if let originalTransactionID { add(1705, Receipt.der { $0.appendUTF8String(originalTransactionID) }) }
        if let originalPurchaseDate { add(1706, Receipt.dateDER(originalPurchaseDate)) }
        if let productTypeRaw { add(1707, Receipt.der { $0.appendInteger(productTypeRaw) }) }
        add(1708, Receipt.dateDER(expiresDate))
        if let webOrderLineItemID { add(1711, Receipt.der { $0.appendInteger(webOrderLineItemID) }) }
        add(1712, Receipt.dateDER(cancellationDate))
        if let isTrialPeriod { add(1713, Receipt.der { $0.appendInteger(isTrialPeriod ? 1 : 0) }) }
        if let isInIntroOfferPeriod { add(1719, Receipt.der { $0.appendInteger(isInIntroOfferPeriod ? 1 : 0) }) }
        if let promotionalOfferID { add(1721, Receipt.der { $0.appendUTF8String(promotionalOfferID) }) }
        for attribute in unknownAttributes {
            attributes.append(
                Receipt.encodeAttribute(type: attribute.type, version: attribute.version, value: attribute.value))
        }
        return Receipt.set(attributes, sorted: sorted)
    }
}
