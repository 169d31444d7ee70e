import Foundation
import StoreModel
import StorekeeperJSON

/// The `commitment` columns of transactions and subscriptions: a small JSON object each (null without one).
/// Period counts read back are bounded (``SubscriptionCommitment/bounded(_:)``).
enum CommitmentColumns {
    static func text(_ commitment: TransactionCommitment?) -> String? {
        guard let commitment else { return nil }
        var object: JSONObject = [
            "number": .integer(Int64(commitment.billingPeriodNumber)),
            "total": .integer(Int64(commitment.totalBillingPeriods)),
            "expires": .double(commitment.expiresDate.timeIntervalSince1970),
        ]
        if let price = commitment.price {
            object["price"] = .integer(price.milliunits)
            object["currency"] = .string(price.currency)
        }
        return JSONWriter.string(.object(object))
    }

    static func transactionCommitment(_ text: String?) -> TransactionCommitment? {
        guard let object = parse(text), let number = object["number"]?.int64Value,
            let total = object["total"]?.int64Value, let expires = object["expires"]?.doubleValue
        else { return nil }
        return TransactionCommitment(
            billingPeriodNumber: SubscriptionCommitment.bounded(number),
            totalBillingPeriods: SubscriptionCommitment.bounded(total),
            expiresDate: Date(timeIntervalSince1970: expires),
            price: object["price"]?.int64Value.map {
                Money(milliunits: $0, currency: object["currency"]?.stringValue ?? "USD")
            })
    }

    static func text(_ commitment: SubscriptionCommitment?) -> String? {
        guard let commitment else { return nil }
        return JSONWriter.string(
            .object([
                "number": .integer(Int64(commitment.billingPeriodNumber)),
                "total": .integer(Int64(commitment.totalBillingPeriods)),
                "expires": .double(commitment.expiresDate.timeIntervalSince1970),
                "autoRenew": .bool(commitment.autoRenew), "renewalPlan": .string(commitment.renewalPlan.rawValue),
            ]))
    }

    static func subscriptionCommitment(_ text: String?) -> SubscriptionCommitment? {
        guard let object = parse(text), let number = object["number"]?.int64Value,
            let total = object["total"]?.int64Value, let expires = object["expires"]?.doubleValue
        else { return nil }
        return SubscriptionCommitment(
            billingPeriodNumber: SubscriptionCommitment.bounded(number),
            totalBillingPeriods: SubscriptionCommitment.bounded(total),
            expiresDate: Date(timeIntervalSince1970: expires), autoRenew: object["autoRenew"]?.boolValue ?? true,
            renewalPlan: object["renewalPlan"]?.stringValue.flatMap(BillingPlanType.init(rawValue:)) ?? .monthly)
    }

    private static func parse(_ text: String?) -> JSONObject? {
        text.flatMap { try? JSONParser.parse(Array($0.utf8)) }?.objectValue
    }
}
