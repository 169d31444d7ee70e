import AppStoreReceipts
import Foundation
import StorekeeperASN1
import StorekeeperCrypto
import StorekeeperTestSupport
import Testing

/// The 26 real receipts of shared/vectors, checked against the values its README lists.
@Suite(
    "Real receipts from shared/vectors", .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
struct VectorReceiptTests {
    static let index: ReceiptVectorIndex = (try? ReceiptVectorIndex.load()) ?? ReceiptVectorIndex.empty
    static let files = index.entries.map(\.file)

    static func entry(_ file: String) throws -> ReceiptVectorIndex.Entry {
        try #require(index.entries.first(where: { $0.file == file }))
    }

    static func decode(_ file: String) throws -> (envelope: [UInt8], receipt: Receipt) {
        let bytes = try Vectors.bytes("receipts/" + file)
        let verifier = ReceiptVerifier(trustedRoots: [])
        let result = verifier.verify(bytes, expecting: ReceiptExpectations(), now: Date())
        let receipt = try #require(result.receipt, "\(file) does not decode: \(String(describing: result.failure))")
        return (bytes, receipt)
    }

    @Test("The README lists all 26 receipts, with attributes and purchase tables")
    func indexIsComplete() {
        #expect(Self.index.entries.count == 26)
        #expect(Self.index.entries.allSatisfy { !$0.attributes.isEmpty })
        // Every purchase is listed, except in the 187-purchase receipt (first three and last).
        #expect(Self.index.entries.allSatisfy { Int($0.purchases.last?["#"] ?? "-1") == $0.purchaseCount - 1 })
        #expect(Self.index.deviceHashes.count == 5)
    }

    @Test("Each receipt decodes with the summary values", arguments: files)
    func summary(file: String) throws {
        let entry = try Self.entry(file)
        let (bytes, receipt) = try Self.decode(file)
        #expect(bytes.count == entry.byteCount)
        #expect(receipt.receiptType == entry.receiptType)
        #expect(receipt.bundleID == entry.bundleID)
        #expect(receipt.inAppPurchases.count == entry.purchaseCount)
        #expect(receipt.creationDate == ReceiptDate.parse(entry.created))
    }

    @Test("Each receipt decodes every app-level attribute the README lists", arguments: files)
    func appAttributes(file: String) throws {
        let entry = try Self.entry(file)
        let (_, receipt) = try Self.decode(file)
        for (type, listed) in entry.attributes {
            let value = ReceiptVectorIndex.code(listed)
            switch type {
            case 0: #expect(receipt.receiptType == value)
            case 1: #expect(receipt.appItemID == Int64(value))
            case 2: #expect(receipt.bundleID == value)
            case 3: #expect(receipt.appVersion == value)
            case 4: #expect(receipt.opaqueValue == ReceiptVectorIndex.hex(value))
            case 5: #expect(receipt.sha1Hash == ReceiptVectorIndex.hex(value))
            case 8: Self.expectDate(receipt.appTransactionDate, value, "\(file) attribute 8")
            case 10: #expect(receipt.ageRating == value)
            case 11: #expect(receipt.developerID == Int64(value))
            case 12: Self.expectDate(receipt.creationDate, value, "\(file) attribute 12")
            case 15: #expect(receipt.downloadID == Int64(value))
            case 16: #expect(receipt.versionExternalID == Int64(value))
            case 18: Self.expectDate(receipt.originalPurchaseDate, value, "\(file) attribute 18")
            case 19: #expect(receipt.originalAppVersion == value)
            case 21: Self.expectDate(receipt.expirationDate, value, "\(file) attribute 21")
            default:
                let attribute = try #require(
                    receipt.unknownAttributes.first(where: { $0.type == Int64(type) }), "\(file) \(type)")
                Self.expectRaw(attribute, listed: listed, "\(file) attribute \(type)")
            }
        }
        for type in entry.absent {
            #expect(!receipt.unknownAttributes.contains(where: { $0.type == Int64(type) }), "\(file) \(type) absent")
            switch type {
            case 18: #expect(receipt.originalPurchaseDate == nil)
            case 19: #expect(receipt.originalAppVersion == nil)
            case 21: #expect(receipt.expirationDate == nil)
            case 15: #expect(receipt.downloadID == nil)
            default: break
            }
        }
        // Attribute 4 of Apple receipts has version 2 and is the only such; it is kept in `opaqueValue`.
        #expect(receipt.unknownAttributes.allSatisfy { $0.version == 1 })
    }

    @Test("Each receipt decodes every purchase as the README's table lists it, in payload order", arguments: files)
    func purchases(file: String) throws {
        let entry = try Self.entry(file)
        let (_, receipt) = try Self.decode(file)
        try #require(receipt.inAppPurchases.count == entry.purchaseCount)
        for row in entry.purchases {
            let purchase = receipt.inAppPurchases[try #require(Int(row["#"] ?? ""))]
            func cell(_ column: String) -> String? {
                guard let text = row[column], text != "—" else { return nil }
                return ReceiptVectorIndex.code(text)
            }
            #expect(purchase.productID == cell("1702"))
            #expect(purchase.transactionID == cell("1703"))
            #expect(purchase.originalTransactionID == cell("1705"))
            Self.expectDate(purchase.purchaseDate, cell("1704") ?? "?", "\(file) 1704")
            Self.expectDate(purchase.originalPurchaseDate, cell("1706"), "\(file) 1706")
            Self.expectDate(purchase.expiresDate, cell("1708"), "\(file) 1708")
            #expect(purchase.webOrderLineItemID == cell("1711").flatMap { Int64($0) })
            #expect(purchase.productTypeRaw == cell("1707").flatMap { Int64($0) })
            #expect(purchase.isTrialPeriod == cell("1713").map { $0 == "1" })
            #expect(purchase.isInIntroOfferPeriod == cell("1719").map { $0 == "1" })
            let other = row["other"] ?? ""
            for part in other.components(separatedBy: ", ") where part.contains("=") {
                let pieces = part.split(separator: "=", maxSplits: 1).map(String.init)
                let type = try #require(Int64(pieces[0]))
                let value = ReceiptVectorIndex.code(pieces[1])
                if type == 1721 {
                    #expect(purchase.promotionalOfferID == value)
                } else {
                    let attribute = try #require(purchase.unknownAttributes.first(where: { $0.type == type }))
                    #expect(try ASN1.parse(attribute.value).int64() == Int64(value), "\(file) \(type)")
                }
            }
            if !other.contains("1721") { #expect(purchase.promotionalOfferID == nil) }
        }
    }

    static func expectDate(_ decoded: Date?, _ listed: String?, _ label: String) {
        guard let listed, listed != "\"\"" else {
            #expect(decoded == nil, "\(label) should be absent")
            return
        }
        #expect(
            decoded != nil && decoded == ReceiptDate.parse(listed),
            "\(label): \(String(describing: decoded)) vs \(listed)")
    }

    /// Unknown attributes are listed as `N B`, `` `number` ``, `` `""` `` or `` `text` ``.
    static func expectRaw(_ attribute: ReceiptAttribute, listed: String, _ label: String) {
        if let size = listed.split(separator: " ").first.flatMap({ Int($0) }), listed.contains(" B") {
            #expect(attribute.value.count == size, "\(label) size")
            return
        }
        let value = ReceiptVectorIndex.code(listed)
        guard let inner = try? ASN1.parse(attribute.value) else {
            Issue.record("\(label) does not hold one DER element")
            return
        }
        if let number = Int64(value) {
            #expect((try? inner.int64()) == number, "\(label)")
        } else if value == "\"\"" {
            #expect((try? inner.string()) == "", "\(label)")
        } else {
            #expect((try? inner.string()) == value, "\(label)")
        }
    }
}

extension ReceiptVectorIndex {
    static let empty = try! ReceiptVectorIndex(readme: "")
}
