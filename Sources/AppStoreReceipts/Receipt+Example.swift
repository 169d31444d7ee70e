public import Foundation
import StoreModel

extension Receipt {
    /// An example receipt shaped like a real production one (every app attribute Apple writes, a
    /// subscription renewed `renewals` times and one unfinished consumable), for demos, benchmarks and tests.
    ///
    /// Deterministic for given arguments; the device hash is computed for `deviceIdentifier`.
    public static func example(
        bundleID: String = "com.example.storekeeper", appVersion: String = "42", creationDate: Date,
        deviceIdentifier: [UInt8], renewals: Int = 3, receiptType: String = "Production",
        expirationDate: Date? = nil, unknownAttributes: [ReceiptAttribute] = []
    ) -> Receipt {
        let month: TimeInterval = 30 * 86_400
        let start = creationDate.addingTimeInterval(-Double(renewals + 1) * month)
        var purchases: [InAppPurchase] = []
        for index in 0..<renewals {
            let purchased = start.addingTimeInterval(Double(index) * month)
            purchases.append(
                InAppPurchase(
                    quantity: 1, productID: bundleID + ".monthly", transactionID: String(340_001_196_262_039 + index),
                    purchaseDate: purchased, originalTransactionID: "340001196262039", originalPurchaseDate: start,
                    productTypeRaw: ProductKind.autoRenewable.receiptProductType,
                    expiresDate: purchased.addingTimeInterval(month),
                    webOrderLineItemID: 340_000_558_053_130 + Int64(index),
                    isTrialPeriod: index == 0, isInIntroOfferPeriod: false,
                    unknownAttributes: [ReceiptAttribute(type: 1722, version: 1, value: [0x02, 0x01, 0x00])]))
        }
        purchases.append(
            InAppPurchase(
                quantity: 3, productID: bundleID + ".coins", transactionID: "340001311555626",
                purchaseDate: creationDate.addingTimeInterval(-60), originalTransactionID: "340001311555626",
                originalPurchaseDate: creationDate.addingTimeInterval(-60),
                productTypeRaw: ProductKind.consumable.receiptProductType, webOrderLineItemID: 0, isTrialPeriod: false))
        var receipt = Receipt(
            receiptType: receiptType, appItemID: 690_661_663, bundleID: bundleID, appVersion: appVersion,
            opaqueValue: [
                0x5d, 0xf7, 0x13, 0x2d, 0x42, 0xab, 0x2c, 0xfb, 0xa2, 0x4a, 0xd5, 0x46, 0xb6, 0x36, 0x19, 0x06,
            ],
            sha1Hash: [], appTransactionDate: creationDate.addingTimeInterval(-3600), ageRating: "4+",
            developerID: 125_402_914, creationDate: creationDate, downloadID: 74_011_462_945_433,
            versionExternalID: 863_855_306, originalPurchaseDate: Date(timeIntervalSince1970: 1_471_360_543),
            originalAppVersion: "1.0", expirationDate: expirationDate, inAppPurchases: purchases,
            unknownAttributes: unknownAttributes)
        receipt.sha1Hash = receipt.deviceHash(for: deviceIdentifier)
        return receipt
    }
}
