public import Foundation
public import StorekeeperJSON

extension Receipt {
    /// The receipt as verifyReceipt's `receipt` object (shared/spec/server-api.md §B.4–B.5): strings almost
    /// everywhere, JSON numbers for the four app-level ids, date triplets, `in_app` in payload order; plus
    /// Storekeeper's `raw` member with the opaque value, the hash and the unknown attributes.
    ///
    /// - Parameter requestDate: verifyReceipt's `request_date` (the time of the call), or nil to omit it.
    public func verifyReceiptJSON(requestDate: Date?) -> JSONObject {
        var object = JSONObject()
        object["receipt_type"] = .string(receiptType)
        if let appItemID {
            object["adam_id"] = .integer(appItemID)
            object["app_item_id"] = .integer(appItemID)
        }
        object["bundle_id"] = .string(bundleID)
        object["application_version"] = .string(appVersion)
        if let downloadID { object["download_id"] = .integer(downloadID) }
        if let versionExternalID { object["version_external_identifier"] = .integer(versionExternalID) }
        object.addDate("receipt_creation_date", creationDate)
        if let requestDate { object.addDate("request_date", requestDate) }
        if let originalPurchaseDate { object.addDate("original_purchase_date", originalPurchaseDate) }
        if let originalAppVersion { object["original_application_version"] = .string(originalAppVersion) }
        if let expirationDate { object.addDate("expiration_date", expirationDate) }
        object["in_app"] = .array(inAppPurchases.map { .object($0.verifyReceiptJSON()) })
        object["raw"] = .object([
            "opaque_value": .string(Data(opaqueValue).base64EncodedString()),
            "sha1_hash": .string(Data(sha1Hash).base64EncodedString()),
            "unknown_attributes": .array(unknownAttributes.map(\.json)),
        ])
        return object
    }
}

extension InAppPurchase {
    /// One `in_app` entry: every value a string; keys omitted for absent attributes, empty dates and a zero
    /// `web_order_line_item_id`.
    public func verifyReceiptJSON() -> JSONObject {
        var object = JSONObject()
        object["quantity"] = .string(String(quantity))
        object["product_id"] = .string(productID)
        object["transaction_id"] = .string(transactionID)
        if let originalTransactionID { object["original_transaction_id"] = .string(originalTransactionID) }
        object.addDate("purchase_date", purchaseDate)
        if let originalPurchaseDate { object.addDate("original_purchase_date", originalPurchaseDate) }
        if let expiresDate { object.addDate("expires_date", expiresDate) }
        if let webOrderLineItemID, webOrderLineItemID != 0 {
            object["web_order_line_item_id"] = .string(String(webOrderLineItemID))
        }
        if let isTrialPeriod { object["is_trial_period"] = .string(isTrialPeriod ? "true" : "false") }
        if let isInIntroOfferPeriod {
            object["is_in_intro_offer_period"] = .string(isInIntroOfferPeriod ? "true" : "false")
        }
        if let promotionalOfferID { object["promotional_offer_id"] = .string(promotionalOfferID) }
        if let cancellationDate { object.addDate("cancellation_date", cancellationDate) }
        object["raw"] = .object(["unknown_attributes": .array(unknownAttributes.map(\.json))])
        return object
    }
}

extension ReceiptAttribute {
    /// `{"type", "version", "value"}` with the value in base64.
    public var json: JSONValue {
        .object([
            "type": .integer(type), "version": .integer(version), "value": .string(Data(value).base64EncodedString()),
        ])
    }
}

extension JSONObject {
    mutating func addDate(_ name: String, _ date: Date) {
        for (key, value) in ReceiptDate.triplet(name, date) { self[key] = .string(value) }
    }
}
