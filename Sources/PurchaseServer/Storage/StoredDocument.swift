import Foundation
import StoreModel
package import StorekeeperJSON

/// A record every ingestion writes, as its stored JSON document built member by member: the members, order
/// and forms its `Encodable` conformance gives through ``SQLDocuments/encoder`` (optionals left out when nil,
/// dates in fractional epoch milliseconds, identifiers and enumerations as their raw strings), without the
/// coder's boxes and casts, which were most of the writer's own work for a notification. `StoredDocumentTests`
/// compares both for records with every member set and with none.
package protocol StoredDocument: Encodable {
    var storedDocument: JSONValue { get }
}

/// Builds one document's members in order (each key once: the caller writes each property once).
struct DocumentMembers {
    private(set) var object = JSONObject()

    mutating func text(_ key: String, _ value: String?) {
        if let value { object.appendUnique(key, .string(value)) }
    }
    mutating func name<Name: RawRepresentable<String>>(_ key: String, _ value: Name?) {
        if let value { object.appendUnique(key, .string(value.rawValue)) }
    }
    mutating func date(_ key: String, _ value: Date?) {
        if let value { object.appendUnique(key, .double(EpochMilliseconds.fractional(value))) }
    }
    mutating func integer(_ key: String, _ value: Int64?) {
        if let value { object.appendUnique(key, .integer(value)) }
    }
    mutating func integer(_ key: String, _ value: Int?) {
        if let value { object.appendUnique(key, .integer(Int64(value))) }
    }
    mutating func flag(_ key: String, _ value: Bool?) {
        if let value { object.appendUnique(key, .bool(value)) }
    }
    mutating func value(_ key: String, _ value: JSONValue?) {
        if let value { object.appendUnique(key, value) }
    }
}

extension PurchaseRecord: StoredDocument {
    package var storedDocument: JSONValue {
        var members = DocumentMembers()
        members.name("transactionID", transactionID)
        members.name("originalTransactionID", originalTransactionID)
        members.name("bundleID", bundleID)
        members.name("productID", productID)
        members.name("kind", kind)
        members.integer("quantity", quantity)
        members.date("purchaseDate", purchaseDate)
        members.date("expiresDate", expiresDate)
        members.text("webOrderLineItemID", webOrderLineItemID)
        members.name("environment", environment)
        members.name("ownership", ownership)
        members.date("revocationDate", revocationDate)
        members.integer("revocationReason", revocationReason)
        members.integer("offerType", offerType)
        members.text("offerDiscountType", offerDiscountType)
        members.text("appAccountToken", appAccountToken)
        members.integer("price", price)
        members.text("currency", currency)
        members.name("reason", reason)
        members.date("signedDate", signedDate)
        members.text("owner", owner)
        members.text("billingPlanType", billingPlanType)
        members.value("commitment", commitment?.storedDocument)
        members.text("revocationType", revocationType)
        members.integer("revocationPercentage", revocationPercentage)
        members.flag("isUpgraded", isUpgraded)
        members.text("subscriptionGroupID", subscriptionGroupID)
        return .object(members.object)
    }
}

extension CommitmentFacts {
    var storedDocument: JSONValue {
        var members = DocumentMembers()
        members.integer("billingPeriodNumber", billingPeriodNumber)
        members.integer("totalBillingPeriods", totalBillingPeriods)
        members.date("expiresDate", expiresDate)
        members.integer("price", price)
        members.flag("autoRenewStatus", autoRenewStatus)
        members.date("renewalDate", renewalDate)
        return .object(members.object)
    }
}

extension SubscriptionRecord: StoredDocument {
    package var storedDocument: JSONValue {
        var members = DocumentMembers()
        members.name("originalTransactionID", originalTransactionID)
        members.name("bundleID", bundleID)
        members.name("environment", environment)
        members.name("productID", productID)
        members.name("latestTransactionID", latestTransactionID)
        members.date("latestPurchaseDate", latestPurchaseDate)
        members.integer("status", status)
        members.flag("autoRenewStatus", autoRenewStatus)
        members.name("autoRenewProductID", autoRenewProductID)
        members.date("expiresDate", expiresDate)
        members.date("gracePeriodExpiresDate", gracePeriodExpiresDate)
        members.integer("expirationIntent", expirationIntent)
        members.integer("priceIncreaseStatus", priceIncreaseStatus)
        members.name("ownership", ownership)
        members.date("revocationDate", revocationDate)
        members.integer("revocationReason", revocationReason)
        members.integer("offerType", offerType)
        members.text("offerDiscountType", offerDiscountType)
        members.date("transactionSignedDate", transactionSignedDate)
        members.date("renewalSignedDate", renewalSignedDate)
        members.date("periodSignedDate", periodSignedDate)
        members.text("owner", owner)
        members.text("billingPlanType", billingPlanType)
        members.text("renewalBillingPlanType", renewalBillingPlanType)
        members.value("commitment", commitment?.storedDocument)
        members.date("refundRequestDate", refundRequestDate)
        members.date("lastPolled", lastPolled)
        return .object(members.object)
    }
}

extension ServerEvent: StoredDocument {
    package var storedDocument: JSONValue {
        var members = DocumentMembers()
        members.text("id", id)
        members.name("type", type)
        members.name("bundleID", bundleID)
        members.text("appUserID", appUserID)
        members.date("date", date)
        members.name("environment", environment)
        members.name("productID", productID)
        members.name("transactionID", transactionID)
        members.name("originalTransactionID", originalTransactionID)
        members.date("expiresDate", expiresDate)
        members.name("source", source)
        members.text("appleNotificationType", appleNotificationType)
        members.text("appleSubtype", appleSubtype)
        // A dictionary's order is its hash order, different in each process; sorted, the bytes are stable.
        var details = JSONObject()
        for (key, value) in self.details.sorted(by: { $0.key < $1.key }) { details.appendUnique(key, .string(value)) }
        members.value("details", .object(details))
        return .object(members.object)
    }
}
