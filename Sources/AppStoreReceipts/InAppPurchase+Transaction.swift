import Foundation
public import StoreModel

extension InAppPurchase {
    /// The receipt's rendering of a transaction (an in-app purchase attribute set, dates in whole seconds as
    /// the receipt's RFC 3339 strings carry them).
    public init(_ transaction: Transaction) {
        func seconds(_ date: Date) -> Date { Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down)) }
        let subscription = transaction.kind == .autoRenewable
        self.init(
            quantity: Int64(transaction.quantity), productID: transaction.productID.rawValue,
            transactionID: transaction.id.rawValue, purchaseDate: seconds(transaction.purchaseDate),
            originalTransactionID: transaction.originalID.rawValue,
            originalPurchaseDate: seconds(transaction.originalPurchaseDate),
            productTypeRaw: transaction.kind.receiptProductType, expiresDate: transaction.expiresDate.map(seconds),
            webOrderLineItemID: transaction.webOrderLineItemID ?? 0,
            cancellationDate: transaction.revocationDate.map(seconds),
            isTrialPeriod: transaction.offer?.isFreeTrial ?? false,
            isInIntroOfferPeriod: subscription
                ? (transaction.offer?.type == .introductory && transaction.offer?.isFreeTrial == false) : nil,
            promotionalOfferID: transaction.offer?.type == .promotional ? transaction.offer?.identifier : nil)
    }
}
