public import Foundation
public import StoreModel

/// The payload of a unified App Store receipt: the app-level attributes and every in-app purchase.
///
/// Field names follow shared/spec/receipts.md §4. Attributes Storekeeper does not name (6, 7, 9, 13, 14,
/// 20, 25 and any future type) are kept in ``unknownAttributes`` with their type, version and raw value.
public struct Receipt: Sendable, Hashable {
    /// 0: `Production`, `ProductionSandbox`, `ProductionVPP`, `ProductionVPPSandbox` or `Xcode`.
    public var receiptType: String
    /// 1: the app's App Store id (0 in the sandbox).
    public var appItemID: Int64?
    /// 2: the bundle identifier.
    public var bundleID: String
    /// 3: the app version (`CFBundleVersion` on iOS, `CFBundleShortVersionString` on macOS).
    public var appVersion: String
    /// 4: opaque bytes that enter the device hash.
    public var opaqueValue: [UInt8]
    /// 5: SHA-1 of device identifier ‖ opaque value ‖ bundle-id TLV.
    public var sha1Hash: [UInt8]
    /// 8: date of the app download transaction (empty in sandbox and Xcode receipts).
    public var appTransactionDate: Date?
    /// 10: age rating, e.g. `4+`.
    public var ageRating: String?
    /// 11: provider id (0 in the sandbox).
    public var developerID: Int64?
    /// 12: when the receipt was created and signed.
    public var creationDate: Date
    /// 15: download id.
    public var downloadID: Int64?
    /// 16: App Store id of the app version.
    public var versionExternalID: Int64?
    /// 18: when the user first obtained the app.
    public var originalPurchaseDate: Date?
    /// 19: the app version first obtained.
    public var originalAppVersion: String?
    /// 21: expiry of a Volume Purchase Program licence; absent means the receipt does not expire.
    public var expirationDate: Date?
    /// 17: the in-app purchases, in payload order.
    public var inAppPurchases: [InAppPurchase]
    /// Attributes without a Storekeeper name, in payload order.
    public var unknownAttributes: [ReceiptAttribute]
    /// The complete DER TLV of attribute 2's value (`0c len bytes`), which the device hash covers.
    public var bundleIDEncoded: [UInt8]

    public init(
        receiptType: String, appItemID: Int64? = nil, bundleID: String, appVersion: String, opaqueValue: [UInt8],
        sha1Hash: [UInt8], appTransactionDate: Date? = nil, ageRating: String? = nil, developerID: Int64? = nil,
        creationDate: Date, downloadID: Int64? = nil, versionExternalID: Int64? = nil,
        originalPurchaseDate: Date? = nil, originalAppVersion: String? = nil, expirationDate: Date? = nil,
        inAppPurchases: [InAppPurchase] = [], unknownAttributes: [ReceiptAttribute] = [],
        bundleIDEncoded: [UInt8]? = nil
    ) {
        self.receiptType = receiptType
        self.appItemID = appItemID
        self.bundleID = bundleID
        self.appVersion = appVersion
        self.opaqueValue = opaqueValue
        self.sha1Hash = sha1Hash
        self.appTransactionDate = appTransactionDate
        self.ageRating = ageRating
        self.developerID = developerID
        self.creationDate = creationDate
        self.downloadID = downloadID
        self.versionExternalID = versionExternalID
        self.originalPurchaseDate = originalPurchaseDate
        self.originalAppVersion = originalAppVersion
        self.expirationDate = expirationDate
        self.inAppPurchases = inAppPurchases
        self.unknownAttributes = unknownAttributes
        self.bundleIDEncoded = bundleIDEncoded ?? Receipt.utf8StringTLV(bundleID)
    }

    /// The environment verifyReceipt would report: `Production`, `Sandbox`, `Xcode`, or the raw type.
    public var environment: String { ReceiptType(rawValue: receiptType)?.environment.rawValue ?? receiptType }

    /// The DER UTF8String encoding of `text`.
    static func utf8StringTLV(_ text: String) -> [UInt8] {
        let content = Array(text.utf8)
        var length: [UInt8] = []
        if content.count < 0x80 {
            length = [UInt8(content.count)]
        } else {
            var rest = content.count
            while rest > 0 {
                length.insert(UInt8(rest & 0xff), at: 0)
                rest >>= 8
            }
            length.insert(0x80 | UInt8(length.count), at: 0)
        }
        return [0x0c] + length + content
    }
}

/// One in-app purchase (a type-17 attribute), field names per shared/spec/receipts.md §4.2.
public struct InAppPurchase: Sendable, Hashable {
    /// 1701: number of items purchased.
    public var quantity: Int64
    /// 1702: product identifier.
    public var productID: String
    /// 1703: transaction identifier.
    public var transactionID: String
    /// 1704: when the purchase (or renewal period) was charged.
    public var purchaseDate: Date
    /// 1705: transaction identifier of the original purchase.
    public var originalTransactionID: String?
    /// 1706: date of the original purchase.
    public var originalPurchaseDate: Date?
    /// 1707: product type as written (0 non-consumable, 1 consumable, 2 non-renewing, 3 auto-renewable).
    public var productTypeRaw: Int64?
    /// 1708: subscription expiry (absent for other products).
    public var expiresDate: Date?
    /// 1711: subscription purchase-event identifier (0 for other products).
    public var webOrderLineItemID: Int64?
    /// 1712: refund or revocation date.
    public var cancellationDate: Date?
    /// 1713: whether this period is a free trial.
    public var isTrialPeriod: Bool?
    /// 1719: whether this period is an introductory offer.
    public var isInIntroOfferPeriod: Bool?
    /// 1721: identifier of the redeemed promotional offer.
    public var promotionalOfferID: String?
    /// Attributes without a Storekeeper name, in payload order.
    public var unknownAttributes: [ReceiptAttribute]

    public init(
        quantity: Int64 = 1, productID: String, transactionID: String, purchaseDate: Date,
        originalTransactionID: String? = nil, originalPurchaseDate: Date? = nil, productTypeRaw: Int64? = nil,
        expiresDate: Date? = nil, webOrderLineItemID: Int64? = nil, cancellationDate: Date? = nil,
        isTrialPeriod: Bool? = nil, isInIntroOfferPeriod: Bool? = nil, promotionalOfferID: String? = nil,
        unknownAttributes: [ReceiptAttribute] = []
    ) {
        self.quantity = quantity
        self.productID = productID
        self.transactionID = transactionID
        self.purchaseDate = purchaseDate
        self.originalTransactionID = originalTransactionID
        self.originalPurchaseDate = originalPurchaseDate
        self.productTypeRaw = productTypeRaw
        self.expiresDate = expiresDate
        self.webOrderLineItemID = webOrderLineItemID
        self.cancellationDate = cancellationDate
        self.isTrialPeriod = isTrialPeriod
        self.isInIntroOfferPeriod = isInIntroOfferPeriod
        self.promotionalOfferID = promotionalOfferID
        self.unknownAttributes = unknownAttributes
    }

    /// The product kind, when ``productTypeRaw`` is one Storekeeper knows.
    public var productKind: ProductKind? { productTypeRaw.flatMap(ProductKind.init(receiptProductType:)) }
}

/// A receipt attribute kept as it came: `ReceiptAttribute ::= SEQUENCE { type, version, value OCTET STRING }`.
public struct ReceiptAttribute: Sendable, Hashable {
    public var type: Int64
    public var version: Int64
    /// The OCTET STRING's content (for most types another DER element).
    public var value: [UInt8]

    public init(type: Int64, version: Int64, value: [UInt8]) {
        self.type = type
        self.version = version
        self.value = value
    }
}
