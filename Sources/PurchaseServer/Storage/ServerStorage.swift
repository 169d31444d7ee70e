public import Foundation
public import StoreModel
public import StorekeeperSQL

/// App users by (app, user id) and by the app account tokens they use.
public protocol SubscriberRepository {
    func subscriber(bundle: String, appUserID: String) throws -> Subscriber?
    func subscriber(bundle: String, appAccountToken: String) throws -> Subscriber?
    /// Inserts or replaces.
    func save(_ subscriber: Subscriber) throws
    /// Counts a change to what the user's answers are made from (their records, purchases, subscriptions,
    /// ledger or grants): another process that kept the user's answers in memory finds the count moved.
    func touch(bundle: String, appUserID: String) throws
    /// The count of changes ``touch(bundle:appUserID:)`` made to the user; nil when there is no such user.
    func version(bundle: String, appUserID: String) throws -> Int64?
    /// Everything the answers of `appUserID` (or of the user it is an alias of) are made from, with their
    /// version; nil when there is no such user. One statement on PostgreSQL.
    func subscriberRecords(bundle: String, appUserID: String) throws -> SubscriberRecords?
    /// The user an alias stands for, if it is one.
    func user(bundle: String, alias: String) throws -> String?
    /// Records that `alias` stands for `user` from now on.
    func saveAlias(bundle: String, alias: String, user: String) throws
}

/// The users other processes changed since a process last asked (``ServerStorage/subscriberChanges(since:)``).
public struct SubscriberChanges: Sendable, Hashable {
    /// Where the next asking starts: on PostgreSQL the oldest transaction still running at this asking
    /// (every one before it had ended), so a transaction that commits later is in a later answer.
    public struct Watermark: Sendable, Hashable {
        public var value: String
        public init(_ value: String) { self.value = value }
    }

    public var watermark: Watermark
    /// (app, user) pairs; empty at the first asking (nothing was kept before it).
    public var users: [Pair]
    /// False when more users changed than an answer holds (``limit``): the asker drops everything it keeps.
    public var complete: Bool

    public struct Pair: Sendable, Hashable {
        public var bundleID: String
        public var appUserID: String
        public init(bundleID: String, appUserID: String) {
            self.bundleID = bundleID
            self.appUserID = appUserID
        }
    }

    /// Users an answer names at most.
    public static let limit = 10_000

    /// When the asking began, in microseconds on the storage's clock; nil when the storage keeps no
    /// leases for the processes asking (then nothing may be answered from memory without asking first).
    public var askedAt: Int64?
    /// The oldest ``askedAt`` another process holding a live lease has applied (reported at its later
    /// asking); nil when no other process holds one. A write this process committed before an asking that
    /// began at `T` is in every other live process's memory once this is at least `T`.
    public var othersApplied: Int64?
    /// For each user in ``users``, the change that named it (on PostgreSQL the transaction that last changed
    /// it); empty when not known. An asking names a user again as long as its change is at or after the
    /// mark, and an asker that applied that change already need not drop the user again.
    public var marks: [String] = []
    /// Whether this asking renewed the asker's lease: not when the asker had not applied the asking that ran
    /// for it before (its answer was lost), so that one whose answers never arrive stops being waited for.
    public var leaseRenewed = true

    public init(
        watermark: Watermark, users: [Pair], complete: Bool, askedAt: Int64? = nil, othersApplied: Int64? = nil
    ) {
        self.watermark = watermark
        self.users = users
        self.complete = complete
        self.askedAt = askedAt
        self.othersApplied = othersApplied
    }
}

/// A process's report as it asks which users changed (``ServerStorage/subscriberChanges(since:reporting:)``):
/// what it has applied, and how long it may answer from memory without asking again.
public struct CacheReaderReport: Sendable, Hashable {
    /// The process, unique among those sharing the storage.
    public var reader: String
    /// The ``SubscriberChanges/askedAt`` of the last answer this process applied; nil before the first.
    public var applied: Int64?
    /// How long from this asking the process may answer from memory (writers wait for it until then);
    /// zero withdraws the process (it answers nothing from memory any more).
    public var lease: Duration

    public init(reader: String, applied: Int64?, lease: Duration) {
        self.reader = reader
        self.applied = applied
        self.lease = lease
    }
}

/// What a subscriber's answers are made from, read together.
public struct SubscriberRecords: Sendable, Hashable {
    public var subscriber: Subscriber
    public var subscriptions: [SubscriptionRecord]
    public var purchases: [PurchaseRecord]
    public var balances: [String: Int]
    public var grants: [Grant]
    /// ``SubscriberRepository/version(bundle:appUserID:)`` when they were read.
    public var version: Int64

    public init(
        subscriber: Subscriber, subscriptions: [SubscriptionRecord], purchases: [PurchaseRecord],
        balances: [String: Int], grants: [Grant], version: Int64
    ) {
        self.subscriber = subscriber
        self.subscriptions = subscriptions
        self.purchases = purchases
        self.balances = balances
        self.grants = grants
        self.version = version
    }
}

extension ServerStore {
    /// The records one repository call after another (the version first: records read after it are at least
    /// as new as it says).
    public func subscriberRecordsOneByOne(bundle: String, appUserID requested: String) throws -> SubscriberRecords? {
        let appUserID = try user(bundle: bundle, alias: requested) ?? requested
        guard let version = try version(bundle: bundle, appUserID: appUserID),
            let subscriber = try subscriber(bundle: bundle, appUserID: appUserID)
        else { return nil }
        return SubscriberRecords(
            subscriber: subscriber, subscriptions: try subscriptions(bundle: bundle, owner: appUserID),
            purchases: try purchases(bundle: bundle, owner: appUserID),
            balances: try balances(bundle: bundle, owner: appUserID),
            grants: try grants(bundle: bundle, owner: appUserID),
            version: version)
    }
}

/// Transactions by id, and an owner's.
public protocol PurchaseRepository {
    func purchase(_ transactionID: TransactionID) throws -> PurchaseRecord?
    /// Inserts or replaces.
    func save(_ purchase: PurchaseRecord) throws
    /// The owner's transactions for the app, by purchase date.
    func purchases(bundle: String, owner: String) throws -> [PurchaseRecord]
    /// The transactions of one original transaction (a purchase and its renewals), by purchase date.
    func purchases(original: TransactionID) throws -> [PurchaseRecord]
    /// The owner of the earliest of one original transaction's transactions that has one: what applying an
    /// update reads when neither its subscription nor its transaction names an owner, without reading every
    /// renewal's record.
    func firstOwner(original: TransactionID) throws -> String?
    /// What charts need of the app's transactions bought before `to` whose last date (expiry, refund or
    /// purchase) is at or after `from`, by purchase date, at most `limit`.
    func chartRecords(bundle: String, from: Date, to: Date, limit: Int) throws -> [SubscriptionCharts.Record]
}

/// Subscriptions by original transaction id, and an owner's.
public protocol SubscriptionRecordRepository {
    func subscription(_ originalTransactionID: TransactionID) throws -> SubscriptionRecord?
    /// Inserts or replaces.
    func save(_ subscription: SubscriptionRecord) throws
    func subscriptions(bundle: String, owner: String) throws -> [SubscriptionRecord]
    /// Subscriptions of the app whose ``SubscriptionRecord/reconciliationDue`` passed before `date` (news the
    /// server should have heard of), the longest overdue first.
    func overdueSubscriptions(bundle: String, before date: Date, limit: Int) throws -> [SubscriptionRecord]
    /// A named position of a background task (the notification-history checkpoint).
    func checkpoint(_ key: String) throws -> String?
    func setCheckpoint(_ key: String, _ value: String) throws
    /// The checkpoints whose keys start with `prefix` (compared by Unicode scalars), in key order, at most
    /// `limit`.
    func checkpoints(prefix: String, limit: Int) throws -> [(key: String, value: String)]
    func removeCheckpoint(_ key: String) throws
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
    /// Adds the event as ``append(_:)`` does, for a write in which nothing but its answer depends on whether
    /// the event is new: the count (1 new, 0 known) may be known only once the write has committed, and on
    /// PostgreSQL the insert then waits for no round trip of its own.
    func appendLater(_ event: ServerEvent) throws -> DeferredCount
    /// The owner's events (and those of purchases the owner owns now), oldest first, after `position`.
    func events(bundle: String, owner: String, after position: Int64?, limit: Int) throws -> [(
        position: Int64, event: ServerEvent
    )]
    /// Gives the events of `original` that had no owner to `owner`; answers them as they are now.
    func claimOwnerlessEvents(original: TransactionID, owner: String) throws -> [ServerEvent]
    /// The earliest date of a cancellation of `original`'s subscription among its events dated in
    /// `from...through` (of the latest 100 cancellations); nil when there is none.
    func cancellation(original: TransactionID, from: Date, through: Date) throws -> Date?
    /// Keeps an input exactly as received; false when one with this key was kept before (a duplicate).
    func recordInput(_ input: RawInput, received: Date) throws -> Bool
    /// An input's bytes as received; nil when no input has this key.
    func input(key: String) throws -> [UInt8]?
    func inputCount() throws -> Int
}

/// Retention Messaging: the realtime requests Apple sent and what the server answered, for the save rate.
public protocol RetentionAnswerRepository {
    /// Records an answer once; false when its request was recorded before (Apple asked again).
    func insert(_ answer: RetentionAnswer) throws -> Bool
    /// Marks the subscription's answers dated in `since...until`, not yet marked, as followed by a
    /// cancellation at `date` (they did not save it).
    func markRetentionCancelled(original: TransactionID, since: Date, until: Date, at date: Date) throws
    /// The app's answers dated in `from..<to`, oldest first, at most `limit`.
    func retentionAnswers(bundle: String, from: Date, to: Date, limit: Int) throws -> [RetentionAnswer]
    /// The subscription's latest `limit` answers, oldest first.
    func retentionAnswers(original: TransactionID, limit: Int) throws -> [RetentionAnswer]
}

/// The webhook outbox: what is to be sent, was sent or failed, with every attempt.
public protocol DeliveryRepository {
    /// Adds the delivery; false when it exists.
    func insert(_ delivery: WebhookDelivery) throws -> Bool
    func update(_ delivery: WebhookDelivery) throws
    /// Records an attempt of a delivery claimed until `lease` (``ServerStorage/claimDueDeliveries(until:lease:limit:)``):
    /// only while it is still that claim's; false when its lease ran out and another claim took it over (that
    /// claim's attempt is the one kept).
    func recordAttempt(_ delivery: WebhookDelivery, claimedUntil lease: Date) throws -> Bool
    /// Pending deliveries whose next attempt is due at `time`, earliest first.
    func dueDeliveries(until time: Date, limit: Int) throws -> [WebhookDelivery]
    func nextDeliveryDue() throws -> Date?
    /// The newest deliveries, newest first.
    func latestDeliveries(limit: Int) throws -> [WebhookDelivery]
    /// Every delivery after `position`, oldest first.
    func deliveries(after position: Int64?, limit: Int) throws -> [(position: Int64, delivery: WebhookDelivery)]
    func pendingDeliveryCount() throws -> Int
}

/// Everything one read or write reaches.
public protocol ServerStore: SubscriberRepository, PurchaseRepository, SubscriptionRecordRepository,
    LedgerRepository, EventRepository, DeliveryRepository, RetentionAnswerRepository
{
    /// Holds `key` until the write ends: writes that lock the same key run one after the other, and what a
    /// write reads after taking its lock is what the last holder committed. Records read to be changed
    /// must be read after their lock (a subscription's: `"o:" + original id`; a user's: ``userKey(_:_:)``; an
    /// account token's binding: `"t:"`, the bundle id and the token).
    func lock(_ key: String) throws
    /// Says what applying an update is about to read (its subscription, its purchases, the transaction, the
    /// owner of its account token), after its locks, and the input the write records first if any
    /// (``recordInput(_:received:)`` with the same time): PostgreSQL sends them all in one round trip and
    /// answers the reads and the insert that follow from them. A hint; nothing on other backends.
    func readAhead(_ ahead: WriteAhead) throws
}

/// An input as received, and the compact form a V2 notification is kept in (``StoredInput``), made with the
/// input rather than inside the write.
public struct RawInput: Sendable {
    public let key: String
    public let kind: String
    public let body: [UInt8]
    let compact: (stored: [UInt8], header: StoredInput.Header)?

    public init(key: String, kind: String, body: [UInt8]) {
        self.key = key
        self.kind = kind
        self.body = body
        compact = kind == StoredInput.kind ? StoredInput.compact(body) : nil
    }

    /// A V2 notification whose `signedPayload`, `token`, was verified: its compact form made from the payload
    /// the verification decoded (`payload`), or else as ``init(key:kind:body:)`` makes it.
    init(key: String, body: [UInt8], token: String, payload: [UInt8]?) {
        self.key = key
        kind = StoredInput.kind
        self.body = body
        compact = payload.flatMap { StoredInput.compact(body, token: token, payload: $0) } ?? StoredInput.compact(body)
    }
}

extension RawInput {
    /// The key a V2 notification is kept under: `notification:<signedDate>:<notificationUUID>`, its signing
    /// date in epoch milliseconds as 13 digits (zero-padded; 0 when it has none). Keys in signing order make
    /// the unique index grow at its end: with the random UUID first, each insert landed on a page of its own, a
    /// quarter of the WAL's pages a group commit wrote (2026-12-06). A notification posted again with the same
    /// signed payload (a replay from Apple's notification history, which keeps one payload for every send
    /// attempt) finds its key. That Apple's live retries resend the payload unchanged is assumed, not
    /// documented by Apple: one signed again would be kept and applied again, which changes no state (facts
    /// are ordered by the transaction's and renewal info's own dates, events and ledger entries have keys of
    /// their own). Inputs kept by builds before it keep `notification:<uuid>`.
    static func notificationKey(signedDate: Int64?, uuid: String) -> String {
        let digits = String(min(max(signedDate ?? 0, 0), 9_999_999_999_999))
        return "notification:" + String(repeating: "0", count: 13 - digits.count) + digits + ":" + uuid
    }
}

extension ServerStore {
    /// Keeps an input exactly as received; false when one with this key was kept before (a duplicate).
    public func recordInput(key: String, kind: String, body: [UInt8], received: Date) throws -> Bool {
        try recordInput(RawInput(key: key, kind: kind, body: body), received: received)
    }

    public func readAhead(_ ahead: WriteAhead) throws {}
    /// The lock of one app user's records.
    public func lock(user: String, bundle: String) throws { try lock("u:" + bundle + "\u{1F}" + user) }
    /// The lock of one purchase and its subscription (its original transaction's).
    public func lock(original: TransactionID) throws { try lock("o:" + original.rawValue) }
    /// The lock of one app account token (lowercased): the users it is bound to.
    public func lock(accountToken: String, bundle: String) throws { try lock("t:" + bundle + "\u{1F}" + accountToken) }
}

/// Where the purchase server keeps its state. A write is all or nothing and durable when it returns. On
/// SQLite and in memory writes run one at a time; on PostgreSQL, writes holding the same lock
/// (``ServerStore/lock(_:)``) do, and the rest run side by side. One contract suite holds for every backend.
public protocol ServerStorage: Sendable {
    func read<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T
    /// A read whose `body` makes one statement, run as cheaply as the storage can (on PostgreSQL outside a
    /// transaction: one round trip, the statement its own snapshot).
    func readStatement<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T
    /// `body` may be held until the write commits (SQLite commits concurrent writes together), and may run
    /// more than once (PostgreSQL runs a write again that lost to a concurrent one): it must not have
    /// effects outside the store that matter when repeated.
    func write<T: Sendable>(_ body: @escaping @Sendable (any ServerStore) throws -> T) async throws -> T

    /// A write that applies an update to one subscription: it takes the subscription's lock, reads what
    /// `ahead` names and records its input, then runs `body`, unless the input was recorded before (nil
    /// then: a duplicate). PostgreSQL may run several of them for distinct subscriptions in one transaction:
    /// one round trip for all their locks, inputs and reads, one for all their writes and the commit (a
    /// failure of one runs the others again on their own). As ``write(_:)``, `body` may run more than once.
    func write<T: Sendable>(ahead: WriteAhead, _ body: @escaping @Sendable (any ServerStore) throws -> T)
        async throws -> T?

    /// Whether other processes write the same state (then nothing read may be kept in memory).
    var isShared: Bool { get }

    /// Asks for `hook` after every write transaction ends, before the write is answered; false when the
    /// storage has no such moment to offer (its reads never see a write before it committed).
    func afterCommit(_ hook: @escaping @Sendable () -> Void) -> Bool

    /// On storage other processes write (``isShared``): the users changed (``SubscriberRepository/touch(bundle:appUserID:)``)
    /// by transactions that committed since the asking that answered `watermark`, in one round trip. A write
    /// acknowledged before this call is in its answer or an earlier one. Nil when the storage is not shared.
    func subscriberChanges(since watermark: SubscriberChanges.Watermark?) async throws -> SubscriberChanges?
    /// The same, with this process's report as a reader of what it keeps in memory, in the same round trip:
    /// the storage holds a lease for it and says what the other leaseholders have applied
    /// (``SubscriberChanges/askedAt`` and ``SubscriberChanges/othersApplied``; nil where it keeps no leases).
    func subscriberChanges(since watermark: SubscriberChanges.Watermark?, reporting report: CacheReaderReport)
        async throws -> SubscriberChanges?

    /// Where the state is, for people (a path, or a database URL without its password).
    var location: String { get }

    /// The write transactions this process ran on the storage so far and the writes they held (nil where
    /// it keeps no count): with group commits, the writes a transaction is the groups' mean size.
    var writeCounts: WriteCounts? { get }

    /// Claims up to `limit` pending deliveries due at `time` for this process until `lease` (their next
    /// attempt moves to it): other processes skip them, and they are due again if this one dies.
    func claimDueDeliveries(until time: Date, lease: Date, limit: Int) async throws -> [WebhookDelivery]

    /// Whether this process leads `task` now: one process at a time, taken over when it dies.
    func lead(_ task: String) async -> Bool

    /// Takes one request from the budget `key` (a token bucket holding at most `burst`, refilled at `rate`
    /// a second, shared by every process); false when it is empty.
    func takeRequest(from key: String, rate: Double, burst: Double, now: Date) async throws -> Bool

    /// Empties the budget `key` until `date` (Apple's `Retry-After`).
    func blockRequests(to key: String, until date: Date) async throws
}

/// What a write applying an update to one subscription locks, reads first and records
/// (``ServerStorage/write(ahead:_:)``, ``ServerStore/readAhead(_:)``).
public struct WriteAhead: Sendable {
    public let transaction: TransactionID?
    public let original: TransactionID
    public let bundle: String
    public let appAccountToken: String?
    /// The input the write records, received at `received`.
    public private(set) var input: RawInput? = nil
    public private(set) var received = Date.distantPast

    /// What applying `update` reads; nil for an update naming no subscription (nothing is applied).
    init?(_ update: PurchaseUpdate, bundleID: String) {
        guard let original = update.originalTransactionID else { return nil }
        (transaction, self.original) = (update.transaction?.transactionID, original)
        (bundle, appAccountToken) = (bundleID, update.transaction?.appAccountToken)
    }

    /// The same, recording `input` first, received at `received`.
    func recording(_ input: RawInput?, received: Date) -> WriteAhead {
        var ahead = self
        (ahead.input, ahead.received) = (input, received)
        return ahead
    }

    /// The one order in which a write takes several subscriptions' locks (a group of notifications, a write
    /// applying several updates): no two writes then each hold one the other waits for.
    static func locksFirst(_ original: TransactionID, before other: TransactionID) -> Bool {
        original.rawValue < other.rawValue
    }

    /// In a write of its own: takes the lock, reads ahead and records the input in `store`, then runs `body`;
    /// nil for a duplicate input (nothing run).
    func run<T>(in store: any ServerStore, _ body: (any ServerStore) throws -> T) throws -> T? {
        try store.lock(original: original)
        try store.readAhead(self)
        if let input, !(try store.recordInput(input, received: received)) { return nil }
        return try body(store)
    }
}

extension ServerStorage {
    /// One write at a time, or each on its own: the lock, the reads and the input first, then `body`.
    public func write<T: Sendable>(ahead: WriteAhead, _ body: @escaping @Sendable (any ServerStore) throws -> T)
        async throws -> T?
    {
        try await write { store -> T? in try ahead.run(in: store, body) }
    }
}

/// One process owns the state: leading is always true, and claims and budgets are ordinary writes.
extension ServerStorage {
    public var isShared: Bool { false }
    public func readStatement<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T {
        try await read(body)
    }
    public func afterCommit(_ hook: @escaping @Sendable () -> Void) -> Bool { false }
    public func subscriberChanges(since watermark: SubscriberChanges.Watermark?) async throws -> SubscriberChanges? {
        nil
    }
    public func subscriberChanges(
        since watermark: SubscriberChanges.Watermark?, reporting report: CacheReaderReport
    ) async throws -> SubscriberChanges? {
        try await subscriberChanges(since: watermark)
    }

    public var location: String { "memory" }
    public var writeCounts: WriteCounts? { nil }

    public func claimDueDeliveries(until time: Date, lease: Date, limit: Int) async throws -> [WebhookDelivery] {
        try await write { store in
            try store.dueDeliveries(until: time, limit: limit).map { delivery in
                var claimed = delivery
                claimed.nextAttempt = lease
                try store.update(claimed)
                return delivery
            }
        }
    }

    public func lead(_ task: String) async -> Bool { true }

    public func takeRequest(from key: String, rate: Double, burst: Double, now: Date) async throws -> Bool {
        try await write { store in
            var budget =
                RequestBudget(try store.checkpoint("budget:" + key)) ?? RequestBudget(tokens: burst, updated: now)
            let taken = budget.take(rate: rate, burst: burst, now: now)
            try store.setCheckpoint("budget:" + key, budget.text)
            return taken
        }
    }

    public func blockRequests(to key: String, until date: Date) async throws {
        try await write { store in
            try store.setCheckpoint("budget:" + key, RequestBudget(tokens: 0, updated: date).text)
        }
    }
}

/// A token bucket as stored: tokens left at `updated` (a time in the future holds it empty until then).
struct RequestBudget: Hashable, Sendable {
    var tokens: Double
    var updated: Date

    init(tokens: Double, updated: Date) {
        self.tokens = tokens
        self.updated = updated
    }

    init?(_ text: String?) {
        guard let parts = text?.split(separator: " "), parts.count == 2, let tokens = Double(parts[0]),
            let seconds = Double(parts[1])
        else { return nil }
        self.init(tokens: tokens, updated: Date(timeIntervalSince1970: seconds))
    }

    var text: String { "\(tokens) \(updated.timeIntervalSince1970)" }

    /// One token if there is one. A `now` older than `updated` (a taker that read the clock before another
    /// took, or a block still running) refills nothing and leaves `updated` as it is.
    mutating func take(rate: Double, burst: Double, now: Date) -> Bool {
        let available = min(burst, tokens + max(0, now.timeIntervalSince(updated)) * rate)
        guard available >= 1 else { return false }
        tokens = available - 1
        updated = max(updated, now)
        return true
    }
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

        public init(date: Date, status: Int?, error: String?) {
            self.date = date
            self.status = status
            self.error = error
        }
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
