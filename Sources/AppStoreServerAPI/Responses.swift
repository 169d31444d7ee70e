public import Foundation
import StoreModel
public import StorekeeperJSON

/// A decoded API answer that keeps every member it was given (unknown fields survive) and offers typed
/// accessors with Apple's names (shared/spec/server-api.md §A.4).
public protocol APIResponseBody: Sendable, Hashable {
    var json: JSONObject { get }
    init(json: JSONObject)
}

extension APIResponseBody {
    public func string(_ key: String) -> String? { json[key]?.stringValue }
    public func int64(_ key: String) -> Int64? { json[key]?.int64Value }
    public func bool(_ key: String) -> Bool? { json[key]?.boolValue }
    public func strings(_ key: String) -> [String] { json[key]?.arrayValue?.compactMap(\.stringValue) ?? [] }
    public func date(_ key: String) -> Date? {
        json[key]?.doubleValue.flatMap { EpochMilliseconds.date($0) }
    }
    public var jsonText: String { JSONWriter.string(.object(json)) }
}

/// Get Transaction Info.
public struct TransactionInfoResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var signedTransactionInfo: String? { string("signedTransactionInfo") }
}

/// Get Transaction History (v1 and v2): a page of at most 20 signed transactions.
public struct HistoryResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var revision: String? { string("revision") }
    public var hasMore: Bool { bool("hasMore") ?? false }
    public var bundleID: String? { string("bundleId") }
    public var appAppleID: Int64? { int64("appAppleId") }
    public var environment: String? { string("environment") }
    public var signedTransactions: [String] { strings("signedTransactions") }
}

/// Get Refund History: a page of refunded transactions.
public struct RefundHistoryResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var revision: String? { string("revision") }
    public var hasMore: Bool { bool("hasMore") ?? false }
    public var signedTransactions: [String] { strings("signedTransactions") }
}

/// Get All Subscription Statuses.
public struct StatusResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var environment: String? { string("environment") }
    public var bundleID: String? { string("bundleId") }
    public var appAppleID: Int64? { int64("appAppleId") }

    /// One subscription's latest transaction and renewal info.
    public struct LastTransaction: Sendable, Hashable {
        public var status: Int64?
        public var originalTransactionID: String?
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?
    }

    /// The subscriptions by group.
    public var groups: [(subscriptionGroupIdentifier: String, lastTransactions: [LastTransaction])] {
        (json["data"]?.arrayValue ?? []).compactMap { item in
            guard let group = item.objectValue else { return nil }
            let last = (group["lastTransactions"]?.arrayValue ?? []).compactMap { $0.objectValue }.map {
                LastTransaction(
                    status: $0["status"]?.int64Value, originalTransactionID: $0["originalTransactionId"]?.stringValue,
                    signedTransactionInfo: $0["signedTransactionInfo"]?.stringValue,
                    signedRenewalInfo: $0["signedRenewalInfo"]?.stringValue)
            }
            return (group["subscriptionGroupIdentifier"]?.stringValue ?? "", last)
        }
    }
}

/// Look Up Order ID: `status` 0 valid, 1 invalid.
public struct OrderLookupResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var status: Int64? { int64("status") }
    public var signedTransactions: [String] { strings("signedTransactions") }
}

/// Extend a Subscription Renewal Date.
public struct ExtendRenewalDateResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var originalTransactionID: String? { string("originalTransactionId") }
    public var webOrderLineItemID: String? { string("webOrderLineItemId") }
    public var success: Bool? { bool("success") }
    public var effectiveDate: Date? { date("effectiveDate") }
}

/// Extend Subscription Renewal Dates for All Active Subscribers: the request was taken.
public struct MassExtendRenewalDateResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var requestIdentifier: String? { string("requestIdentifier") }
}

/// Get Status of Subscription Renewal Date Extensions.
public struct MassExtendRenewalDateStatusResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var requestIdentifier: String? { string("requestIdentifier") }
    public var complete: Bool? { bool("complete") }
    public var completeDate: Date? { date("completeDate") }
    public var succeededCount: Int64? { int64("succeededCount") }
    public var failedCount: Int64? { int64("failedCount") }
}

/// Request a Test Notification.
public struct SendTestNotificationResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var testNotificationToken: String? { string("testNotificationToken") }
}

/// One attempt to deliver a notification.
public struct SendAttemptItem: Sendable, Hashable {
    public var attemptDate: Date?
    public var sendAttemptResult: String?

    static func list(_ value: JSONValue?) -> [SendAttemptItem] {
        (value?.arrayValue ?? []).compactMap(\.objectValue).map {
            SendAttemptItem(
                attemptDate: $0["attemptDate"]?.doubleValue.flatMap { EpochMilliseconds.date($0) },
                sendAttemptResult: $0["sendAttemptResult"]?.stringValue)
        }
    }
}

/// Get Test Notification Status.
public struct CheckTestNotificationResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var signedPayload: String? { string("signedPayload") }
    public var sendAttempts: [SendAttemptItem] { SendAttemptItem.list(json["sendAttempts"]) }
}

/// Get Notification History: a page of notifications with their attempts.
public struct NotificationHistoryResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var paginationToken: String? { string("paginationToken") }
    public var hasMore: Bool { bool("hasMore") ?? false }

    public struct Item: Sendable, Hashable {
        public var signedPayload: String?
        public var sendAttempts: [SendAttemptItem]
    }

    public var notificationHistory: [Item] {
        (json["notificationHistory"]?.arrayValue ?? []).compactMap(\.objectValue).map {
            Item(
                signedPayload: $0["signedPayload"]?.stringValue, sendAttempts: SendAttemptItem.list($0["sendAttempts"]))
        }
    }
}

/// Get App Transaction Info.
public struct AppTransactionInfoResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var signedAppTransactionInfo: String? { string("signedAppTransactionInfo") }
}

/// An answer without a body (202 / 200 of the PUT endpoints), or any other answer as it came.
public struct EmptyResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
}
