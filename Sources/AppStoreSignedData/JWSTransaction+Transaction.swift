public import Foundation
public import StoreModel
import StorekeeperJSON

extension JWSTransaction {
    /// The StoreKit 2 rendering of a transaction (`JWSTransactionDecodedPayload`, shared/spec/signed-data.md
    /// §7.1), ready to sign with ``JWSSigner``.
    public init(
        _ transaction: Transaction, environment: Environment, signedDate: Date, storefront: String,
        storefrontID: String
    ) {
        func milliseconds(_ date: Date) -> JSONValue {
            .integer(EpochMilliseconds.milliseconds(date))
        }
        var payload: JSONObject = [
            "transactionId": .string(transaction.id.rawValue),
            "originalTransactionId": .string(transaction.originalID.rawValue),
            "bundleId": .string(transaction.bundleID.rawValue), "productId": .string(transaction.productID.rawValue),
            "purchaseDate": milliseconds(transaction.purchaseDate),
            "originalPurchaseDate": milliseconds(transaction.originalPurchaseDate),
            "quantity": .integer(Int64(transaction.quantity)), "type": .string(transaction.kind.rawValue),
            "inAppOwnershipType": .string(transaction.ownership.rawValue), "signedDate": milliseconds(signedDate),
            "environment": .string(environment.rawValue), "transactionReason": .string(transaction.reason.rawValue),
            "storefront": .string(storefront), "storefrontId": .string(storefrontID),
        ]
        if let web = transaction.webOrderLineItemID { payload["webOrderLineItemId"] = .string(String(web)) }
        if let group = transaction.subscriptionGroupID { payload["subscriptionGroupIdentifier"] = .string(group) }
        if let expires = transaction.expiresDate { payload["expiresDate"] = milliseconds(expires) }
        if let token = transaction.appAccountToken { payload["appAccountToken"] = .string(token) }
        if let app = transaction.appTransactionID { payload["appTransactionId"] = .string(app.rawValue) }
        if let price = transaction.price {
            payload["price"] = .integer(price.milliunits)
            payload["currency"] = .string(price.currency)
        }
        if let offer = transaction.offer {
            payload["offerType"] = .integer(offer.type.rawValue)
            if let identifier = offer.identifier { payload["offerIdentifier"] = .string(identifier) }
            if let discount = offer.discountType { payload["offerDiscountType"] = .string(discount.rawValue) }
            if let period = offer.period { payload["offerPeriod"] = .string(period) }
        }
        if let revoked = transaction.revocationDate {
            payload["revocationDate"] = milliseconds(revoked)
            // The emulator refunds whole purchases; a family member's access ends by the family's revocation;
            // an upgraded period's unused part is refunded (prorated, its share as the upgrade found it).
            // The percentage is a refund's (in milliunits), absent from a family revocation.
            if transaction.ownership == .familyShared {
                payload["revocationType"] = .string("FAMILY_REVOKE")
            } else if transaction.isUpgraded {
                payload["revocationType"] = .string("REFUND_PRORATED")
                if let share = transaction.revocationPercentage { payload["revocationPercentage"] = .integer(share) }
            } else {
                payload["revocationType"] = .string("REFUND_FULL")
                payload["revocationPercentage"] = .integer(100_000)
            }
        }
        if let reason = transaction.revocationReason { payload["revocationReason"] = .integer(reason.rawValue) }
        if transaction.isUpgraded { payload["isUpgraded"] = .bool(true) }
        if let plan = transaction.billingPlan { payload["billingPlanType"] = .string(plan.rawValue) }
        if let commitment = transaction.commitment {
            var info: JSONObject = [
                "billingPeriodNumber": .integer(Int64(commitment.billingPeriodNumber)),
                "commitmentExpiresDate": milliseconds(commitment.expiresDate),
            ]
            if let price = commitment.price { info["commitmentPrice"] = .integer(price.milliunits) }
            info["totalBillingPeriods"] = .integer(Int64(commitment.totalBillingPeriods))
            payload["commitmentInfo"] = .object(info)
        }
        self.init(json: payload)
    }
}
