public import AppStoreReceipts
public import Foundation
public import StoreModel
import StorekeeperCrypto
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
        /// The reasons of the receipt's refunded or revoked purchases, by transaction id: `cancellation_reason`
        /// in `receipt.in_app`, whose ASN.1 has the date alone (Apple adds it from its records).
        public var revocationReasons: [String: RevocationReason] = [:]

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
            /// Whether the subscription's period has ended (expired, or in billing retry).
            public var expired: Bool
        }
    }

    /// Apple's legacy `verifyReceipt`: `production` tells which endpoint was called. Always answers; the
    /// outcome is in `status`.
    public func verifyReceipt(body: [UInt8], production: Bool) async throws -> VerifyReceiptResult {
        switch verifyReceiptFirstStep(body: body, production: production) {
        case .answered(let result): return result
        case .needsLatest(let result, let decoded, let excludeOld):
            return try await withLatest(result, decoded: decoded, excludeOld: excludeOld)
        case .needsReasons(var result, let ids):
            let stored = try await storage.read { store in try ids.compactMap { try store.transaction($0) } }
            result.revocationReasons = Self.revocationReasons(stored)
            return result
        }
    }

    /// `verifyReceipt` without awaiting, when the answer needs no stored state (no `password`, or no
    /// subscription in the receipt); nil otherwise.
    public func verifyReceiptInline(body: [UInt8], production: Bool) -> VerifyReceiptResult? {
        if case .answered(let result) = verifyReceiptFirstStep(body: body, production: production) { return result }
        return nil
    }

    enum VerifyReceiptStep {
        case answered(VerifyReceiptResult)
        case needsLatest(VerifyReceiptResult, Receipt, excludeOld: Bool)
        /// The receipt has refunded purchases: their reasons are read from the store.
        case needsReasons(VerifyReceiptResult, [TransactionID])
    }

    /// Parsing, verification and the status checks: everything but the account's latest state.
    func verifyReceiptFirstStep(body: [UInt8], production: Bool) -> VerifyReceiptStep {
        let requestDate = now
        var result = VerifyReceiptResult(
            status: 0, environment: production ? .production : .sandbox, requestDate: requestDate)
        func status(_ code: Int64) -> VerifyReceiptStep {
            var copy = result
            copy.status = code
            return .answered(copy)
        }
        guard let request = try? JSONParser.parse(body).objectValue else { return status(21000) }
        guard let text = request["receipt-data"]?.stringValue,
            let bytes = try? Receipt.bytes(fromDERorBase64: Array(text.utf8))
        else { return status(21002) }
        let verification = receiptVerifier.verify(bytes, expecting: .init(), now: requestDate)
        if verification.failure?.code == .malformed { return status(21002) }
        // A Volume Purchase Program licence past its expiry is still Apple's receipt: answered with status 0 and
        // its expiration_date, which the client compares with the date (only the expiry is checked after
        // everything else, so the failure holds the receipt).
        let accepted = verification.isValid || verification.failure?.code == .receiptExpired
        guard accepted, let decoded = verification.receipt ?? verification.failure?.receipt else {
            return status(21003)
        }
        let sandboxReceipt = ReceiptType(rawValue: decoded.receiptType)?.environment != .production
        if sandboxReceipt && production { return status(21007) }
        if !sandboxReceipt && !production { return status(21008) }
        guard let app = apps[decoded.bundleID] else { return status(21010) }
        let password = request["password"]?.stringValue
        if let secret = app.sharedSecret, let password,
            !ConstantTime.equals(Array(password.utf8), Array(secret.utf8))
        {
            return status(21004)
        }
        result.receipt = decoded
        let hasSubscriptions = decoded.inAppPurchases.contains { $0.productKind == .autoRenewable }
        guard hasSubscriptions, password != nil else {
            let cancelled = decoded.inAppPurchases.filter { $0.cancellationDate != nil }
            return cancelled.isEmpty
                ? .answered(result) : .needsReasons(result, cancelled.map { TransactionID($0.transactionID) })
        }
        return .needsLatest(result, decoded, excludeOld: request["exclude-old-transactions"]?.boolValue == true)
    }

    /// Adds `latest_receipt_info`, `latest_receipt` and `pending_renewal_info` from the account's state.
    func withLatest(_ answered: VerifyReceiptResult, decoded: Receipt, excludeOld: Bool) async throws
        -> VerifyReceiptResult
    {
        var result = answered
        try await catchUp()
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
        guard let (_, current_, subscriptions) = found else { return result }
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
                    subscription: subscription, expired: (subscription.state.expiresDate ?? .distantFuture) <= current)
            })
        result.revocationReasons = Self.revocationReasons(current_)
        return result
    }

    static func revocationReasons(_ transactions: [StoredTransaction]) -> [String: RevocationReason] {
        var reasons: [String: RevocationReason] = [:]
        for stored in transactions where stored.transaction.revocationDate != nil {
            if let reason = stored.transaction.revocationReason { reasons[stored.id.rawValue] = reason }
        }
        return reasons
    }
}
