public import Foundation
import StoreModel
public import StorekeeperJSON

/// Get Transaction History's filters and order (query parameters; resend the same with each `revision`).
public struct TransactionHistoryQuery: Sendable, Hashable {
    public enum Sort: String, Sendable, Hashable { case ascending = "ASCENDING", descending = "DESCENDING" }

    public var startDate: Date?
    public var endDate: Date?
    public var productIDs: [String] = []
    /// `AUTO_RENEWABLE`, `NON_RENEWABLE`, `CONSUMABLE`, `NON_CONSUMABLE`.
    public var productTypes: [String] = []
    public var sort: Sort?
    public var subscriptionGroupIdentifiers: [String] = []
    /// `PURCHASED` or `FAMILY_SHARED`.
    public var inAppOwnershipType: String?
    public var revoked: Bool?

    public init() {}

    /// The query parameters, repeated names for the repeatable filters.
    public var parameters: [(String, String)] {
        var result: [(String, String)] = []
        if let startDate { result.append(("startDate", String(milliseconds(startDate)))) }
        if let endDate { result.append(("endDate", String(milliseconds(endDate)))) }
        result += productIDs.map { ("productId", $0) }
        result += productTypes.map { ("productType", $0) }
        if let sort { result.append(("sort", sort.rawValue)) }
        result += subscriptionGroupIdentifiers.map { ("subscriptionGroupIdentifier", $0) }
        if let inAppOwnershipType { result.append(("inAppOwnershipType", inAppOwnershipType)) }
        if let revoked { result.append(("revoked", revoked ? "true" : "false")) }
        return result
    }
}

func milliseconds(_ date: Date) -> Int64 { EpochMilliseconds.milliseconds(date) }

/// Extend a Subscription Renewal Date's body.
public struct ExtendRenewalDateRequest: Sendable, Hashable {
    public var extendByDays: Int
    /// 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
    public var extendReasonCode: Int
    public var requestIdentifier: String

    public init(extendByDays: Int, extendReasonCode: Int, requestIdentifier: String) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode
        self.requestIdentifier = requestIdentifier
    }

    public var json: JSONObject {
        [
            "extendByDays": .integer(Int64(extendByDays)), "extendReasonCode": .integer(Int64(extendReasonCode)),
            "requestIdentifier": .string(requestIdentifier),
        ]
    }
}

/// Extend Subscription Renewal Dates for All Active Subscribers' body.
public struct MassExtendRenewalDateRequest: Sendable, Hashable {
    public var extendByDays: Int
    public var extendReasonCode: Int
    public var requestIdentifier: String
    public var productID: String
    /// ISO 3166-1 alpha-3 storefronts to limit the extension to; nil for all.
    public var storefrontCountryCodes: [String]?

    public init(
        extendByDays: Int, extendReasonCode: Int, requestIdentifier: String, productID: String,
        storefrontCountryCodes: [String]? = nil
    ) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode
        self.requestIdentifier = requestIdentifier
        self.productID = productID
        self.storefrontCountryCodes = storefrontCountryCodes
    }

    public var json: JSONObject {
        var object: JSONObject = [
            "extendByDays": .integer(Int64(extendByDays)), "extendReasonCode": .integer(Int64(extendReasonCode)),
            "requestIdentifier": .string(requestIdentifier), "productId": .string(productID),
        ]
        if let storefrontCountryCodes {
            object["storefrontCountryCodes"] = .array(storefrontCountryCodes.map(JSONValue.string))
        }
        return object
    }
}

/// Get Notification History's body (resend the same with each `paginationToken`).
public struct NotificationHistoryRequest: Sendable, Hashable {
    public var startDate: Date
    public var endDate: Date
    public var notificationType: String?
    public var notificationSubtype: String?
    public var transactionID: String?
    public var onlyFailures: Bool?

    public init(
        startDate: Date, endDate: Date, notificationType: String? = nil, notificationSubtype: String? = nil,
        transactionID: String? = nil, onlyFailures: Bool? = nil
    ) {
        self.startDate = startDate
        self.endDate = endDate
        self.notificationType = notificationType
        self.notificationSubtype = notificationSubtype
        self.transactionID = transactionID
        self.onlyFailures = onlyFailures
    }

    public var json: JSONObject {
        var object: JSONObject = [
            "startDate": .integer(milliseconds(startDate)), "endDate": .integer(milliseconds(endDate)),
        ]
        if let notificationType { object["notificationType"] = .string(notificationType) }
        if let notificationSubtype { object["notificationSubtype"] = .string(notificationSubtype) }
        if let transactionID { object["transactionId"] = .string(transactionID) }
        if let onlyFailures { object["onlyFailures"] = .bool(onlyFailures) }
        return object
    }
}

/// Send Consumption Information (v2) body.
public struct ConsumptionRequest: Sendable, Hashable {
    public var customerConsented: Bool
    /// Share consumed in thousandths of a percent (0–100000).
    public var consumptionPercentage: Int?
    /// `DELIVERED`, `UNDELIVERED_QUALITY_ISSUE`, `UNDELIVERED_WRONG_ITEM`, `UNDELIVERED_SERVER_OUTAGE`,
    /// `UNDELIVERED_OTHER`.
    public var deliveryStatus: String
    /// `DECLINE`, `GRANT_FULL`, `GRANT_PRORATED`.
    public var refundPreference: String?
    public var sampleContentProvided: Bool

    public init(
        customerConsented: Bool, consumptionPercentage: Int? = nil, deliveryStatus: String,
        refundPreference: String? = nil, sampleContentProvided: Bool
    ) {
        self.customerConsented = customerConsented
        self.consumptionPercentage = consumptionPercentage
        self.deliveryStatus = deliveryStatus
        self.refundPreference = refundPreference
        self.sampleContentProvided = sampleContentProvided
    }

    public var json: JSONObject {
        var object: JSONObject = [
            "customerConsented": .bool(customerConsented), "deliveryStatus": .string(deliveryStatus),
            "sampleContentProvided": .bool(sampleContentProvided),
        ]
        if let consumptionPercentage { object["consumptionPercentage"] = .integer(Int64(consumptionPercentage)) }
        if let refundPreference { object["refundPreference"] = .string(refundPreference) }
        return object
    }
}
