import AppStoreReceipts
import AppStoreSignedData
package import Foundation
package import StoreModel
package import StorekeeperJSON

/// Apple's payloads read into the server's records: signed transactions and renewal info, receipts, and V1
/// notifications (read from their JSON at the edge of ingestion).
extension PurchaseServer {
    static func purchase(_ transaction: JWSTransaction) -> PurchaseRecord? {
        guard let id = transaction.transactionID, let bundleID = transaction.bundleID,
            let productID = transaction.productID, let purchaseDate = transaction.purchaseDate,
            let kind = transaction.type?.known,
            let environment = transaction.environment?.known
        else { return nil }
        var record = PurchaseRecord(
            transactionID: TransactionID(id),
            originalTransactionID: TransactionID(transaction.originalTransactionID ?? id),
            bundleID: BundleID(bundleID), productID: ProductID(productID), kind: kind,
            quantity: PurchaseRecord.quantity(transaction.quantity ?? 1),
            purchaseDate: purchaseDate,
            expiresDate: transaction.expiresDate, webOrderLineItemID: transaction.webOrderLineItemID,
            environment: environment, ownership: transaction.inAppOwnershipType?.known ?? .purchased,
            revocationDate: transaction.revocationDate, revocationReason: transaction.revocationReason?.rawValue,
            offerType: transaction.offerType?.rawValue, offerDiscountType: transaction.string("offerDiscountType"),
            appAccountToken: transaction.appAccountToken?.uuidString.lowercased(), price: transaction.price,
            currency: transaction.currency, reason: transaction.transactionReason?.known,
            signedDate: transaction.signedDate ?? purchaseDate)
        record.billingPlanType = transaction.billingPlanType
        record.subscriptionGroupID = transaction.subscriptionGroupIdentifier
        if transaction.isUpgraded == true { record.isUpgraded = true }
        if record.revocationDate != nil {
            record.revocationType = transaction.string("revocationType")
            record.revocationPercentage = transaction.int64("revocationPercentage")
        }
        if let info = transaction.commitmentInfo {
            record.commitment = CommitmentFacts(
                billingPeriodNumber: info["billingPeriodNumber"]?.int64Value.map { Int(clamping: $0) },
                totalBillingPeriods: info["totalBillingPeriods"]?.int64Value.map { Int(clamping: $0) },
                expiresDate: info["commitmentExpiresDate"]?.doubleValue.flatMap { EpochMilliseconds.date($0) },
                price: info["commitmentPrice"]?.int64Value)
        }
        return record
    }

    static func renewal(_ info: JWSRenewalInfo, status: Int64?, signedDate: Date) -> RenewalFacts? {
        guard let original = info.originalTransactionID else { return nil }
        var facts = RenewalFacts(
            originalTransactionID: TransactionID(original), status: status,
            autoRenewStatus: info.autoRenewStatus.map { $0 == 1 },
            autoRenewProductID: info.autoRenewProductID.map(ProductID.init),
            expirationIntent: info.expirationIntent?.rawValue,
            gracePeriodExpiresDate: info.gracePeriodExpiresDate, isInBillingRetryPeriod: info.isInBillingRetryPeriod,
            priceIncreaseStatus: info.priceIncreaseStatus, renewalDate: info.renewalDate,
            signedDate: info.signedDate ?? signedDate)
        facts.renewalBillingPlanType = info.renewalBillingPlanType
        if let commitment = info.commitmentInfo {
            facts.commitmentAutoRenewStatus = commitment["commitmentAutoRenewStatus"]?.int64Value.map { $0 == 1 }
            facts.commitmentRenewalDate = commitment["commitmentRenewalDate"]?.doubleValue.flatMap {
                EpochMilliseconds.date($0)
            }
        }
        return facts
    }

    /// What to do when signed data does not chain to the app's roots: the usual cause is a rehearsal.
    static func trustHint(_ status: VerificationStatus) -> String {
        switch status {
        case .invalidChain, .verificationFailure, .invalidCertificate:
            "; if it comes from the Storekeeper emulator, add its roots (storekeeper appstore certs) to the app's "
                + "jwsRoots and receiptRoots beside \"apple\", or run storekeeper dev"
        case .invalidChainLength:
            "; Xcode's StoreKit Testing signs with one certificate of its own: name it in the app's "
                + "\"xcode\": {\"certificates\": [...]}"
        default: ""
        }
    }

    /// The purchases a receipt holds, as of its creation date, in the environment it was verified for.
    static func purchases(of receipt: Receipt, environment: Environment) -> [PurchaseRecord] {
        // Receipts do not say which periods an upgrade replaced: a cancelled period of a subscription whose
        // next period (in the same receipt) began when it was cancelled was upgraded, not refunded.
        let starts = Dictionary(
            grouping: receipt.inAppPurchases.filter { $0.expiresDate != nil },
            by: { $0.originalTransactionID ?? $0.transactionID })
        func upgraded(_ item: InAppPurchase) -> Bool {
            guard let cancelled = item.cancellationDate, item.expiresDate != nil else { return false }
            return (starts[item.originalTransactionID ?? item.transactionID] ?? []).contains {
                $0.transactionID != item.transactionID && abs($0.purchaseDate.timeIntervalSince(cancelled)) < 60
                    && $0.purchaseDate > item.purchaseDate
            }
        }
        return receipt.inAppPurchases.map { item in
            let kind =
                item.productKind
                ?? (item.expiresDate != nil || item.webOrderLineItemID != nil ? .autoRenewable : .nonConsumable)
            var record = PurchaseRecord(
                transactionID: TransactionID(item.transactionID),
                originalTransactionID: TransactionID(item.originalTransactionID ?? item.transactionID),
                bundleID: BundleID(receipt.bundleID), productID: ProductID(item.productID), kind: kind,
                quantity: PurchaseRecord.quantity(item.quantity),
                purchaseDate: item.purchaseDate, expiresDate: item.expiresDate,
                webOrderLineItemID: item.webOrderLineItemID.map { String($0) }, environment: environment,
                revocationDate: item.cancellationDate,
                offerType: item.isTrialPeriod == true || item.isInIntroOfferPeriod == true ? 1 : nil,
                offerDiscountType: item.isTrialPeriod == true ? "FREE_TRIAL" : nil, signedDate: receipt.creationDate)
            if upgraded(item) { record.isUpgraded = true }
            return record
        }
    }
}

/// An App Store Server Notification V1 as the server uses it: read from its JSON at the edge of ingestion.
/// Nothing in it is trusted but through the app's shared secret (`password`) and the receipt it carries,
/// which is verified again.
package struct V1Notification: Sendable {
    package var type: NotificationTypeV1
    package var password: String?
    /// `unified_receipt.latest_receipt`, base64.
    package var latestReceipt: String?
    /// `unified_receipt.pending_renewal_info`.
    package var pendingRenewals: [PendingRenewal]
    /// `unified_receipt.latest_receipt_info`'s cancelled transactions (id → cancellation date): a consumable's
    /// refund is told only there, its receipt not listing it (at most 100 read).
    package var cancellations: [(transactionID: String, date: Date)]

    package struct PendingRenewal: Sendable {
        package var originalTransactionID: String
        package var autoRenewStatus: Bool?
        package var autoRenewProductID: String?
        package var expirationIntent: Int64?
        package var isInBillingRetryPeriod: Bool?
        package var gracePeriodExpiresDate: Date?

        package init(
            originalTransactionID: String, autoRenewStatus: Bool? = nil, autoRenewProductID: String? = nil,
            expirationIntent: Int64? = nil, isInBillingRetryPeriod: Bool? = nil, gracePeriodExpiresDate: Date? = nil
        ) {
            self.originalTransactionID = originalTransactionID
            self.autoRenewStatus = autoRenewStatus
            self.autoRenewProductID = autoRenewProductID
            self.expirationIntent = expirationIntent
            self.isInBillingRetryPeriod = isInBillingRetryPeriod
            self.gracePeriodExpiresDate = gracePeriodExpiresDate
        }

        /// Apple's status (1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked), which V1 does not
        /// send: from the receipt's latest period for this subscription (when it ends, whether it was revoked)
        /// and the retry and grace facts, at `date`; nil when the receipt has no period of it.
        package func status(latestExpires: Date?, revoked: Bool = false, at date: Date) -> Int64? {
            if revoked { return 5 }
            if let latestExpires, latestExpires > date { return 1 }
            if isInBillingRetryPeriod == true {
                return (gracePeriodExpiresDate.map { $0 > date } ?? false) ? 4 : 3
            }
            return latestExpires == nil ? nil : 2
        }
    }

    /// Nil when `object` is not a V1 notification (no `notification_type`).
    package init?(_ object: JSONObject) {
        guard let type = object["notification_type"] else { return nil }
        self.type = NotificationTypeV1(rawValue: type.stringValue ?? "UNKNOWN")
        password = object["password"]?.stringValue
        latestReceipt = object["unified_receipt"]?["latest_receipt"]?.stringValue
        cancellations = (object["unified_receipt"]?["latest_receipt_info"]?.arrayValue ?? []).prefix(100).compactMap {
            item in
            guard let id = Self.text(item["transaction_id"]),
                let date = Self.text(item["cancellation_date_ms"]).flatMap({ Int64($0) }).flatMap({
                    EpochMilliseconds.date($0)
                })
            else { return nil }
            return (id, date)
        }
        pendingRenewals = (object["unified_receipt"]?["pending_renewal_info"]?.arrayValue ?? []).compactMap {
            renewal in
            guard let original = Self.text(renewal["original_transaction_id"]) else { return nil }
            return PendingRenewal(
                originalTransactionID: original,
                autoRenewStatus: Self.flag(renewal["auto_renew_status"]),
                autoRenewProductID: renewal["auto_renew_product_id"]?.stringValue,
                expirationIntent: Self.text(renewal["expiration_intent"]).flatMap { Int64($0) },
                isInBillingRetryPeriod: Self.flag(renewal["is_in_billing_retry_period"]),
                gracePeriodExpiresDate: Self.text(renewal["grace_period_expires_date_ms"])
                    .flatMap { Int64($0) }.flatMap { EpochMilliseconds.date($0) })
        }
    }

    /// A V1 id, intent or date: Apple's strings, or the JSON numbers some senders use.
    static func text(_ value: JSONValue?) -> String? {
        if let string = value?.stringValue { return string }
        return value?.int64Value.map { String($0) }
    }

    /// A V1 flag: `"1"`/`"0"` (pending renewal info), `"true"`/`"false"` (the notification's own), or a
    /// JSON boolean.
    static func flag(_ value: JSONValue?) -> Bool? {
        if let bool = value?.boolValue { return bool }
        switch text(value)?.lowercased() {
        case "1", "true": return true
        case "0", "false": return false
        default: return nil
        }
    }
}
