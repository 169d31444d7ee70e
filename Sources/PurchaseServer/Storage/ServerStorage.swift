public import Foundation

/// App users by (app, user id) and by the app account tokens they use.
public protocol SubscriberRepository {
    func subscriber(bundle: String, appUserID: String) throws -> Subscriber?
    func subscriber(bundle: String, appAccountToken: String) throws -> Subscriber?
    /// Inserts or replaces.
    func save(_ subscriber: Subscriber) throws
    /// The user an alias stands for, if it is one.
    func user(bundle: String, alias: String) throws -> String?
    /// Records that `alias` stands for `user` from now on.
    func saveAlias(bundle: String, alias: String, user: String) throws
}

/// Transactions by id, and an owner's.
public protocol PurchaseRepository {
    func purchase(_ transactionID: String) throws -> PurchaseRecord?
    /// Inserts or replaces.
    func save(_ purchase: PurchaseRecord) throws
    /// The owner's transactions for the app, by purchase date.
    func purchases(bundle: String, owner: String) throws -> [PurchaseRecord]
    /// The transactions of one original transaction (a purchase and its renewals), by purchase date.
    func purchases(original: String) throws -> [PurchaseRecord]
}

/// Subscriptions by original transaction id, and an owner's.
public protocol SubscriptionRecordRepository {
    func subscription(_ originalTransactionID: String) throws -> SubscriptionRecord?
    /// Inserts or replaces.
    func save(_ subscription: SubscriptionRecord) throws
    func subscriptions(bundle: String, owner: String) throws -> [SubscriptionRecord]
    /// Active subscriptions of the app whose renewal date passed before `date` with no newer renewal facts
    /// (a renewal or an expiry the server should have heard of), oldest first.
    func overdueSubscriptions(bundle: String, before date: Date, limit: Int) throws -> [SubscriptionRecord]
    /// A named position of a background task (the notification-history checkpoint).
    func checkpoint(_ key: String) throws -> String?
    func setCheckpoint(_ key: String, _ value: String) throws
}

/// The consumable ledger and the developer's grants.
public protocol LedgerRepository {
    /// Adds the entry; false when one for the same transaction and reason exists.
    func append(_ entry: LedgerEntry) throws -> Bool
    /// Balances of the consumables whose transactions the owner owns, by product.
    func balances(bundle: String, owner: String) throws -> [String: Int]
    func grants(bundle: String, owner: String) throws -> [Grant]
    /// Inserts or replaces the owner's grant of `grant.entitlement`.
    func save(_ grant: Grant, bundle: String, owner: String) throws
}

/// The event log and the raw inputs.
public protocol EventRepository {
    /// Adds the event; false when one with its id exists (the same change learned again).
    func append(_ event: ServerEvent) throws -> Bool
    /// The owner's events (and those of purchases the owner owns now), oldest first, after `position`.
    func events(bundle: String, owner: String, after position: Int64?, limit: Int) throws -> [(
        position: Int64, event: ServerEvent
    )]
    /// Gives the events of `original` that had no owner to `owner`; answers them as they are now.
    func claimOwnerlessEvents(original: String, owner: String) throws -> [ServerEvent]
    /// Keeps an input exactly as received; false when one with this key was kept before (a duplicate).
    func recordInput(key: String, kind: String, body: [UInt8], received: Date) throws -> Bool
    func inputCount() throws -> Int
}

/// The webhook outbox: what is to be sent, was sent or failed, with every attempt.
public protocol DeliveryRepository {
    /// Adds the delivery; false when it exists.
    func insert(_ delivery: WebhookDelivery) throws -> Bool
    func update(_ delivery: WebhookDelivery) throws
    /// Pending deliveries whose next attempt is due at `time`, earliest first.
    func dueDeliveries(until time: Date, limit: Int) throws -> [WebhookDelivery]
    func nextDeliveryDue() throws -> Date?
    /// Every delivery after `position`, oldest first.
    func deliveries(after position: Int64?, limit: Int) throws -> [(position: Int64, delivery: WebhookDelivery)]
    func pendingDeliveryCount() throws -> Int
}

/// Everything one read or write reaches.
public protocol ServerStore: SubscriberRepository, PurchaseRepository, SubscriptionRecordRepository,
    LedgerRepository, EventRepository, DeliveryRepository
{}

/// Where the purchase server keeps its state. A write is all or nothing and durable when it returns; writes
/// run one at a time. One contract suite holds for every backend.
public protocol ServerStorage: Sendable {
    func read<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T
    /// `body` may be held until the write commits (SQLite commits concurrent writes together).
    func write<T: Sendable>(_ body: @escaping @Sendable (any ServerStore) throws -> T) async throws -> T
}

/// A webhook to send: the event, the URL, the exact body, and every attempt.
public struct WebhookDelivery: Codable, Sendable, Hashable {
    public enum State: String, Codable, Sendable, Hashable { case pending, delivered, failed }
    public struct Attempt: Codable, Sendable, Hashable {
        public var date: Date
        /// The receiver's HTTP status, when it answered.
        public var status: Int?
        /// Why it failed without an answer.
        public var error: String?
    }

    public var id: String
    public var eventID: String
    public var eventType: String
    public var bundleID: String
    public var url: String
    public var body: String
    public var state: State
    public var attempts: [Attempt]
    public var nextAttempt: Date?
    public var created: Date

    public init(
        id: String, eventID: String, eventType: String, bundleID: String, url: String, body: String, created: Date
    ) {
        self.id = id
        self.eventID = eventID
        self.eventType = eventType
        self.bundleID = bundleID
        self.url = url
        self.body = body
        self.state = .pending
        self.attempts = []
        self.nextAttempt = created
        self.created = created
    }
}

/// A storage failure of the purchase server.
public struct ServerStorageError: Error, Hashable, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
    static func missing(_ what: String) -> Self { Self(message: "no such \(what)") }
}
