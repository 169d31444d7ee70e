public import AppStoreReceipts
public import Foundation
public import StoreModel
import StorekeeperJSON

extension AppStore {
    /// What Apple's legacy `verifyReceipt` answers (shared/spec/server-api.md §B), as values; the HTTP
    /// layer renders it in Apple's JSON.
    public struct VerifyReceiptResult: Sendable {
        public var status: Int64
        public var environment: Environment
        public var requestDate: Date
        /// The decoded receipt, when `status` is 0.
        public var receipt: Receipt?
        /// With a `password` and subscriptions in the receipt: the account's current purchases.
        public var latest: Latest?

        public struct Latest: Sendable {
            /// `latest_receipt_info`, newest purchase first.
            public var transactions: [StoredTransaction]
            /// The receipt sent, re-signed now with the account's current purchases.
            public var receipt: [UInt8]?
            /// `pending_renewal_info`, one per subscription, by original transaction id.
            public var renewals: [Renewal]
        }

        public struct Renewal: Sendable {
            public var subscription: StoredSubscription
            /// Whether the sandbox's renewal cap has been reached: auto-renew is off.
            public var capped: Bool
            public var expired: Bool
        }
    }

    /// Apple's legacy `verifyReceipt`: `production` tells which endpoint was called. Always answers; the
    /// outcome is in `status`.
    public func verifyReceipt(body: [UInt8], production: Bool) async throws -> VerifyReceiptResult {
        let requestDate = now
        var result = VerifyReceiptResult(
            status: 0, environment: production ? .production : .sandbox, requestDate: requestDate)
        func status(_ code: Int64) -> VerifyReceiptResult {
            var copy = result
            copy.status = code
            return copy
        }
        guard let request = try? JSONParser.parse(body).objectValue else { return status(21000) }
        guard let text = request["receipt-data"]?.stringValue,
            let bytes = try? Receipt.bytes(fromDERorBase64: Array(text.utf8)),
            let decoded = try? Receipt(decoding: bytes)
        else { return status(21002) }
        let verification = ReceiptVerifier(trustedRoots: [pki.receipts.root]).verify(
            bytes, expecting: .init(), now: requestDate)
        guard verification.isValid else { return status(21003) }
        let sandboxReceipt = decoded.receiptType != "Production" && decoded.receiptType != "ProductionVPP"
        if sandboxReceipt && production { return status(21007) }
        if !sandboxReceipt && !production { return status(21008) }
        guard let app = apps[decoded.bundleID] else { return status(21010) }
        let password = request["password"]?.stringValue
        if let secret = app.sharedSecret, let password, password != secret { return status(21004) }
        result.receipt = decoded

        let hasSubscriptions = decoded.inAppPurchases.contains { $0.productKind == .autoRenewable }
        guard hasSubscriptions, password != nil else { return result }
        try await catchUp()
        let excludeOld = request["exclude-old-transactions"]?.boolValue == true
        let bundle = BundleID(decoded.bundleID)
        let current = now
        let found = try await storage.read { store -> (Account, [StoredTransaction], [StoredSubscription])? in
            guard
                let owner = try decoded.inAppPurchases.lazy.compactMap({
                    try store.transaction(TransactionID($0.transactionID))
                }).first,
                let account = try store.account(owner.accountID)
            else { return nil }
            return (
                account, try store.transactions(account: account.id, bundle: bundle).filter(\.isInReceipt),
                try store.subscriptions(account: account.id, bundle: bundle)
            )
        }
        guard let (account, current_, subscriptions) = found else { return result }
        var latest = current_
        if excludeOld {
            let newest = Set(subscriptions.map(\.latestTransactionID))
            latest = current_.filter { $0.transaction.kind != .autoRenewable || newest.contains($0.id) }
        }
        var refreshed = decoded
        refreshed.creationDate = Self.wholeSeconds(current)
        refreshed.inAppPurchases = current_.map { InAppPurchase($0.transaction) }
        let signed = try? refreshed.signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
        result.latest = VerifyReceiptResult.Latest(
            transactions: latest.sorted { $0.transaction.purchaseDate > $1.transaction.purchaseDate },
            receipt: signed,
            renewals: subscriptions.map { subscription in
                VerifyReceiptResult.Renewal(
                    subscription: subscription,
                    capped: account.environment != .production
                        && subscription.state.renewalCount >= Self.sandboxRenewalCap,
                    expired: (subscription.state.expiresDate ?? .distantFuture) <= current)
            })
        return result
    }
}
