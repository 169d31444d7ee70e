import AppStoreReceipts
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperJSON

/// The wire JSON of the emulator's answers: Apple's shapes for Apple's endpoints, the emulator's own
/// (camelCase, epoch milliseconds) for `/_emulator/v1`.
extension AppStore {
    static func milliseconds(_ date: Date) -> JSONValue { .integer(ReceiptDate.milliseconds(date)) }

    static func render(_ install: Install, environment: Environment) -> JSONObject {
        [
            "bundleId": .string(install.bundleID.rawValue), "applicationVersion": .string(install.version),
            "originalApplicationVersion": .string(install.originalVersion),
            "originalPurchaseDate": milliseconds(install.originalPurchaseDate),
            "receiptType": .string(ReceiptType(environment: environment, volumePurchase: false).rawValue),
        ]
    }

    static func render(_ entry: Catalog.Entry) -> JSONObject {
        var object: JSONObject = [
            "productId": .string(entry.productID), "type": .string(entry.kind.rawValue),
            "displayName": .string(entry.name ?? entry.productID),
            "displayPrice": .string(entry.displayPrice ?? "0.00"),
        ]
        if let subscription = entry.subscription {
            object["subscriptionPeriod"] = .string(subscription.period?.description ?? "")
            object["subscriptionGroupId"] = subscription.groupID.map(JSONValue.string) ?? .null
            object["groupLevel"] = subscription.level.map { .integer(Int64($0)) } ?? .null
        }
        return object
    }

    static func render(_ entry: QueueEntry) -> JSONObject {
        switch entry {
        case .transaction(let stored, let state):
            let transaction = stored.transaction
            var object: JSONObject = [
                "transactionIdentifier": .string(transaction.id.rawValue),
                "originalTransactionIdentifier": .string(transaction.originalID.rawValue),
                "productIdentifier": .string(transaction.productID.rawValue), "state": .string(state),
                "transactionDate": milliseconds(transaction.purchaseDate),
                "quantity": .integer(Int64(transaction.quantity)),
            ]
            if let username = stored.applicationUsername { object["applicationUsername"] = .string(username) }
            if let token = transaction.appAccountToken { object["appAccountToken"] = .string(token) }
            if let order = stored.orderID { object["orderId"] = .string(order) }
            return object
        case .payment(let payment):
            var object: JSONObject = [
                "transactionIdentifier": .string(payment.id.rawValue),
                "productIdentifier": .string(payment.productID.rawValue),
                "state": .string(payment.state.rawValue), "transactionDate": milliseconds(payment.date),
                "quantity": .integer(Int64(payment.quantity)),
            ]
            if let reason = payment.reason {
                object["error"] = .object([
                    "code": .string(reason.rawValue),
                    "message": .string("the payment \(reason == .declined ? "was declined" : reason.rawValue)"),
                ])
            }
            if let username = payment.applicationUsername { object["applicationUsername"] = .string(username) }
            if let token = payment.appAccountToken { object["appAccountToken"] = .string(token) }
            return object
        }
    }

    static func render(_ account: Account) -> JSONObject {
        [
            "accountId": .string(account.id.rawValue), "askToBuy": .bool(account.askToBuy),
            "purchaseFailure": account.purchaseFailure.map { .string($0.rawValue) } ?? .null,
            "billingRetryOnRenewal": .bool(account.billingRetryOnRenewal),
            "billingGracePeriod": .bool(account.billingGracePeriod),
        ]
    }

    /// A Volume Purchase Program licence.
    static func render(_ install: Install) -> JSONObject {
        var object: JSONObject = ["assigned": .bool(install.vppAssigned)]
        if let revoked = install.vppRevokedAt {
            object["revokedAt"] = milliseconds(revoked)
            object["expiresAt"] = milliseconds(revoked.addingTimeInterval(vppGrace))
        }
        return object
    }

    /// `verifyReceipt`'s answer in Apple's JSON (shared/spec/server-api.md §B).
    static func render(_ result: VerifyReceiptResult) -> JSONObject {
        var response: JSONObject = [
            "status": .integer(result.status), "environment": .string(result.environment.rawValue),
        ]
        guard result.status == 0, let receipt = result.receipt else { return response }
        response["receipt"] = .object(appleShape(receipt.verifyReceiptJSON(requestDate: result.requestDate)))
        guard let latest = result.latest else { return response }
        response["latest_receipt_info"] = .array(
            latest.transactions.map { stored in
                var object = appleShape(InAppPurchase(stored.transaction).verifyReceiptJSON())
                object["in_app_ownership_type"] = .string(stored.transaction.ownership.rawValue)
                if let group = stored.transaction.subscriptionGroupID {
                    object["subscription_group_identifier"] = .string(group)
                }
                if let token = stored.transaction.appAccountToken { object["app_account_token"] = .string(token) }
                return .object(object)
            })
        if let signed = latest.receipt { response["latest_receipt"] = .string(Data(signed).base64EncodedString()) }
        response["pending_renewal_info"] = .array(
            latest.renewals.map { renewal in
                let state = renewal.subscription.state
                let renewing = state.autoRenew && !renewal.capped
                var object: JSONObject = [
                    "auto_renew_product_id": .string(state.autoRenewProductID.rawValue),
                    "auto_renew_status": .string(renewing ? "1" : "0"),
                    "original_transaction_id": .string(state.originalTransactionID.rawValue),
                    "product_id": .string(state.productID.rawValue),
                ]
                if !renewing, renewal.expired {
                    object["expiration_intent"] = .string(
                        String((state.expirationIntent ?? .customerCancelled).rawValue))
                }
                if state.isInBillingRetry || (!renewing && renewal.expired) {
                    object["is_in_billing_retry_period"] = .string(state.isInBillingRetry ? "1" : "0")
                }
                if let grace = state.gracePeriodExpiresDate {
                    for (key, value) in ReceiptDate.triplet("grace_period_expires_date", grace) {
                        object[key] = .string(value)
                    }
                }
                if let consent = state.priceIncreaseStatus {
                    object["price_consent_status"] = .string(String(consent.rawValue))
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
