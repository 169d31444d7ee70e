public import Foundation
public import StoreModel
public import StorekeeperJSON

/// One thing the Retention Messaging API keeps for an app in one environment: an image, a message, a
/// default message of a product and locale, the realtime URL, or a performance test run. `state` is the
/// review state (`PENDING`, `APPROVED`, `REJECTED`) or a run's result; `document` is the rest, as JSON.
public struct RetentionItem: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case image
        case message
        case defaultMessage = "default"
        case realtimeURL = "realtime-url"
        case performanceTest = "performance-test"
    }

    public var kind: Kind
    public var bundleID: BundleID
    public var environment: Environment
    public var id: String
    public var state: String
    public var document: String
    public var created: Date

    public init(
        kind: Kind, bundleID: BundleID, environment: Environment, id: String, state: String = "",
        document: String = "{}", created: Date
    ) {
        self.kind = kind
        self.bundleID = bundleID
        self.environment = environment
        self.id = id
        self.state = state
        self.document = document
        self.created = created
    }
}

/// One realtime retention request the App Store sent (a customer on the cancellation page, or a
/// performance test's call): what was sent, what came back, how long it took and what the customer got,
/// as JSON in `document`.
public struct RetentionRequestRecord: Sendable, Hashable {
    public var requestIdentifier: String
    public var originalTransactionID: TransactionID
    public var bundleID: BundleID
    public var environment: Environment
    public var date: Date
    public var document: String

    public init(
        requestIdentifier: String, originalTransactionID: TransactionID, bundleID: BundleID,
        environment: Environment, date: Date, document: String
    ) {
        self.requestIdentifier = requestIdentifier
        self.originalTransactionID = originalTransactionID
        self.bundleID = bundleID
        self.environment = environment
        self.date = date
        self.document = document
    }
}

/// Retention Messaging: the configuration per app and environment, and the realtime requests sent.
public protocol RetentionRepository {
    func retentionItem(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, id: String) throws
        -> RetentionItem?
    /// Inserts or replaces the item of its kind, app, environment and id.
    func save(_ item: RetentionItem) throws
    /// Deletes the item; false when there was none.
    func deleteRetentionItem(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, id: String)
        throws -> Bool
    /// The app's items of one kind in `environment`, oldest first (ties by id), at most `limit`.
    func retentionItems(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, limit: Int) throws
        -> [RetentionItem]
    /// Records a request (a duplicate request identifier is an error).
    func insert(_ request: RetentionRequestRecord) throws
    /// The latest `limit` requests about one subscription, oldest first.
    func retentionRequests(original: TransactionID, limit: Int) throws -> [RetentionRequestRecord]
}

extension RetentionItem {
    /// `document` read back (empty when it is not a JSON object).
    public var object: JSONObject { (try? JSONParser.parse(Array(document.utf8)))?.objectValue ?? [:] }
}

extension RetentionRequestRecord {
    /// `document` read back (empty when it is not a JSON object).
    public var object: JSONObject { (try? JSONParser.parse(Array(document.utf8)))?.objectValue ?? [:] }
}
