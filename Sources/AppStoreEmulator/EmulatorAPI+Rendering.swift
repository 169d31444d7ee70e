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
}

/// The control plane's wire JSON for the store's values.
extension EmulatorRoutes {
    static func render(_ install: Install, environment: Environment) -> JSONObject {
        [
            "bundleId": .string(install.bundleID.rawValue), "applicationVersion": .string(install.version),
            "originalApplicationVersion": .string(install.originalVersion),
            "originalPurchaseDate": AppStore.milliseconds(install.originalPurchaseDate),
            "receiptType": .string(ReceiptType(environment: environment, volumePurchase: false).rawValue),
        ]
    }

    /// A product as the store sells it now: `displayPrice` when it was raised since the catalogue was read.
    static func render(_ entry: Catalog.Entry, displayPrice: String? = nil) -> JSONObject {
        var object: JSONObject = [
            "productId": .string(entry.productID), "type": .string(entry.kind.rawValue),
            "displayName": .string(entry.name ?? entry.productID),
            "displayPrice": .string(displayPrice ?? entry.displayPrice ?? "0.00"),
        ]
        if let subscription = entry.subscription {
            object["subscriptionPeriod"] = .string(subscription.period?.description ?? "")
            object["subscriptionGroupId"] = subscription.groupID.map(JSONValue.string) ?? .null
            object["groupLevel"] = subscription.level.map { .integer(Int64($0)) } ?? .null
            // StoreKit's `Product.SubscriptionInfo`: the offers an app can show, and the billing plans.
            object["introductoryOffer"] =
                subscription.introductoryOffer.map { render($0, type: "introductory") } ?? .null
            object["promotionalOffers"] = .array(subscription.promotionalOffers.map { render($0, type: "promotional") })
            object["winBackOffers"] = .array(subscription.winBackOffers.map { render($0, type: "winBack") })
            object["offerCodes"] = .array(subscription.codeOffers.map { render($0, type: "code") })
            if let plan = entry.subscription?.monthlyPlan {
                object["billingPlans"] = .array([
                    .object([
                        "billingPlanType": .string(BillingPlanType.monthly.rawValue),
                        "displayPrice": plan.displayPrice.map(JSONValue.string) ?? .null,
                        "commitmentDisplayPrice": plan.commitmentDisplayPrice.map(JSONValue.string) ?? .null,
                        "totalBillingPeriods": .integer(Int64(plan.totalBillingPeriods)),
                    ])
                ])
            }
        }
        return object
    }

    /// An offer as StoreKit's `Product.SubscriptionOffer` describes it (`paymentMode` in StoreKit's words).
    static func render(_ offer: SubscriptionOffer, type: String) -> JSONValue {
        let mode: JSONValue =
            switch offer.paymentMode {
            case "free": .string("freeTrial")
            case let other?: .string(other)
            case nil: .null
            }
        return .object([
            "id": offer.offerID.map(JSONValue.string) ?? .null, "type": .string(type), "paymentMode": mode,
            "period": offer.period.map { .string($0.description) } ?? .null,
            "periodCount": .integer(Int64(offer.numberOfPeriods)),
            "displayPrice": .string(offer.displayPrice ?? "0.00"),
            "referenceName": offer.referenceName.map(JSONValue.string) ?? .null,
        ])
    }

    static func render(_ entry: AppStore.QueueEntry) -> JSONObject {
        switch entry {
        case .transaction(let stored, let state):
            let transaction = stored.transaction
            var object: JSONObject = [
                "transactionIdentifier": .string(transaction.id.rawValue),
                "originalTransactionIdentifier": .string(transaction.originalID.rawValue),
                "productIdentifier": .string(transaction.productID.rawValue), "state": .string(state),
                "transactionDate": AppStore.milliseconds(transaction.purchaseDate),
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
                "state": .string(payment.state.rawValue), "transactionDate": AppStore.milliseconds(payment.date),
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
            object["revokedAt"] = AppStore.milliseconds(revoked)
            object["expiresAt"] = AppStore.milliseconds(revoked.addingTimeInterval(AppStore.vppGrace))
        }
        return object
    }

    /// `verifyReceipt`'s answer in Apple's JSON (shared/spec/server-api.md §B).
}

/// verifyReceipt's answer in Apple's shape: what the endpoint returns and what a V1 notification carries.
extension AppStore {
    static func render(_ result: VerifyReceiptResult) -> JSONObject {
        var response: JSONObject = [
            "status": .integer(result.status), "environment": .string(result.environment.rawValue),
        ]
        guard result.status == 0, let receipt = result.receipt else { return response }
        var decoded = appleShape(receipt.verifyReceiptJSON(requestDate: result.requestDate))
        let reasons = result.revocationReasons
        if !reasons.isEmpty, let purchases = decoded["in_app"]?.arrayValue {
            // The receipt's ASN.1 has a cancellation date but no reason: Apple adds it from its records.
            decoded["in_app"] = .array(
                purchases.map { entry in
                    guard var object = entry.objectValue, object["cancellation_date_ms"] != nil,
                        let id = object["transaction_id"]?.stringValue, let reason = reasons[id]
                    else { return entry }
                    object["cancellation_reason"] = .string(String(reason.rawValue))
                    return .object(object)
                })
        }
        response["receipt"] = .object(decoded)
        guard let latest = result.latest else { return response }
        response["latest_receipt_info"] = .array(
            latest.transactions.map { stored in
                let transaction = stored.transaction
                var object = appleShape(InAppPurchase(transaction).verifyReceiptJSON())
                if transaction.revocationDate != nil, let reason = transaction.revocationReason {
                    object["cancellation_reason"] = .string(String(reason.rawValue))
                }
                object["in_app_ownership_type"] = .string(transaction.ownership.rawValue)
                if let group = transaction.subscriptionGroupID {
                    object["subscription_group_identifier"] = .string(group)
                }
                if transaction.isUpgraded { object["is_upgraded"] = .string("true") }
                if transaction.offer?.type == .offerCode, let name = transaction.offer?.identifier {
                    object["offer_code_ref_name"] = .string(name)
                }
                if let token = transaction.appAccountToken { object["app_account_token"] = .string(token) }
                return .object(object)
            })
        if let signed = latest.receipt { response["latest_receipt"] = .string(Data(signed).base64EncodedString()) }
        response["pending_renewal_info"] = .array(
            latest.renewals.map { renewal in
                let state = renewal.subscription.state
                var object: JSONObject = [
                    "auto_renew_product_id": .string(state.autoRenewProductID.rawValue),
                    "auto_renew_status": .string(state.autoRenew ? "1" : "0"),
                    "original_transaction_id": .string(state.originalTransactionID.rawValue),
                    "product_id": .string(state.productID.rawValue),
                ]
                // Present for an expired subscription, billing retry included (its period has ended).
                if renewal.expired || state.isInBillingRetry {
                    object["expiration_intent"] = .string(
                        String((state.expirationIntent ?? .customerCancelled).rawValue))
                    object["is_in_billing_retry_period"] = .string(state.isInBillingRetry ? "1" : "0")
                }
                // The offer the next renewal is made with.
                if state.offerPeriodsLeft > 0, let offer = state.offer, let identifier = offer.identifier {
                    switch offer.type {
                    case .offerCode: object["offer_code_ref_name"] = .string(identifier)
                    case .promotional: object["promotional_offer_id"] = .string(identifier)
                    default: break
                    }
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
