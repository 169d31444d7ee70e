import StoreKitCatalog
import Foundation
public import StorekeeperJSON
import AppStoreReceipts

extension AppStore {
    /// Apple's legacy `verifyReceipt` (shared/spec/server-api.md §B): `production` tells which endpoint was
    /// called. Always answers; the outcome is in `status`.
    public func verifyReceipt(body: [UInt8], production: Bool) -> JSONObject {
        func status(_ code: Int64) -> JSONObject {
            ["status": .integer(code), "environment": .string(production ? "Production" : "Sandbox")]
        }
        guard let request = try? JSONParser.parse(body).objectValue else { return status(21000) }
        guard let text = request["receipt-data"]?.stringValue,
            let bytes = try? Receipt.bytes(fromDERorBase64: Array(text.utf8)),
            let decoded = try? Receipt(decoding: bytes)
        else { return status(21002) }
        let verification = ReceiptVerifier(trustedRoots: [pki.receipts.root]).verify(
            bytes, expecting: .init(), now: now)
        guard verification.isValid else { return status(21003) }
        let sandboxReceipt = decoded.receiptType != "Production" && decoded.receiptType != "ProductionVPP"
        if sandboxReceipt && production { return status(21007) }
        if !sandboxReceipt && !production { return status(21008) }
        guard let app = apps[decoded.bundleID] else { return status(21010) }
        let password = request["password"]?.stringValue
        if let secret = app.sharedSecret, let password, password != secret { return status(21004) }

        var response = status(0)
        response["receipt"] = .object(Self.appleShape(decoded.verifyReceiptJSON(requestDate: now)))
        let transactionIDs = decoded.inAppPurchases.map(\.transactionID)
        let hasSubscriptions = decoded.inAppPurchases.contains { $0.productType == .autoRenewableSubscription }
        guard hasSubscriptions, password != nil, let account = accountOwning(transactionIDs: transactionIDs) else {
            return response
        }

        let current = receiptTransactions(accountID: account.id, bundleID: decoded.bundleID)
        var latest = current
        if request["exclude-old-transactions"]?.boolValue == true {
            let newest = Dictionary(
                grouping: current.filter { $0.kind == ProductKind.autoRenewable.rawValue }, by: \.originalID
            )
            .compactMapValues { $0.max { $0.renewalNumber < $1.renewalNumber } }
            latest = current.filter {
                $0.kind != ProductKind.autoRenewable.rawValue || newest[$0.originalID]?.id == $0.id
            }
        }
        response["latest_receipt_info"] = .array(
            latest.sorted { $0.purchaseDate > $1.purchaseDate }.map { transaction in
                var object = Self.appleShape(Self.inAppPurchase(transaction).verifyReceiptJSON())
                object["in_app_ownership_type"] = .string("PURCHASED")
                if let group = transaction.subscriptionGroupID {
                    object["subscription_group_identifier"] = .string(group)
                }
                if let token = transaction.appAccountToken { object["app_account_token"] = .string(token) }
                return .object(object)
            })
        // The latest receipt: the one sent, re-signed now with the account's current purchases.
        var refreshed = decoded
        refreshed.creationDate = Self.wholeSeconds(now)
        refreshed.inAppPurchases = current.map(Self.inAppPurchase)
        if let signed = try? refreshed.signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
        {
            response["latest_receipt"] = .string(Data(signed).base64EncodedString())
        }
        let subscriptions = Dictionary(
            grouping: current.filter { $0.kind == ProductKind.autoRenewable.rawValue }, by: \.originalID)
        response["pending_renewal_info"] = .array(
            subscriptions.keys.sorted().compactMap { original -> JSONValue? in
                guard let newest = subscriptions[original]?.max(by: { $0.renewalNumber < $1.renewalNumber }) else {
                    return nil
                }
                let capped = account.environment != "Production" && newest.renewalNumber >= Self.sandboxRenewalCap
                var object: JSONObject = [
                    "auto_renew_product_id": .string(newest.productID),
                    "auto_renew_status": .string(capped ? "0" : "1"),
                    "original_transaction_id": .string(original), "product_id": .string(newest.productID),
                ]
                if capped, (newest.expiresDate ?? .distantFuture) <= now {
                    object["expiration_intent"] = .string("1")
                    object["is_in_billing_retry_period"] = .string("0")
                }
                return .object(object)
            })
        return response
    }

    /// Storekeeper's JSON minus its own `raw` members: Apple's shape exactly.
    static func appleShape(_ object: JSONObject) -> JSONObject {
        var copy = object
        copy["raw"] = nil
        if let purchases = copy["in_app"]?.arrayValue {
            copy["in_app"] = .array(
                purchases.map { entry in
                    var inner = entry.objectValue ?? JSONObject()
                    inner["raw"] = nil
                    return .object(inner)
                })
        }
        return copy
    }
}
