public import Foundation
public import StoreModel
public import StorekeeperSQL

/// Accounts by id.
public protocol AccountRepository {
    func account(_ id: AccountID) throws -> Account?
    func insert(_ account: Account) throws
    func update(_ account: Account) throws
    /// Accounts by id, after `id` (a paging cursor), at most `limit`.
    func accounts(after id: AccountID?, limit: Int) throws -> [Account]
}

/// Devices by id (ids are upper-case UUID strings).
public protocol DeviceRepository {
    func device(_ id: DeviceID) throws -> Device?
    func insert(_ device: Device) throws
    /// The account's devices, by id.
    func devices(account: AccountID) throws -> [Device]
}

/// Installs by (device, app).
public protocol InstallRepository {
    func install(device: DeviceID, bundle: BundleID) throws -> Install?
    /// Inserts or replaces the install of `install.bundleID` on `install.deviceID`.
    func save(_ install: Install) throws
    /// The app's installs on the account's devices, earliest original purchase first.
    func installs(account: AccountID, bundle: BundleID) throws -> [Install]
}

/// Each account's download of each app, the app transaction: its id is `appTransactionId` (API 1.20), on
/// every purchase of the account in the app, and one of the ids the App Store Server API takes.
public protocol AppTransactionRepository {
    /// The account's app transaction for `bundle`, nil until it downloaded the app or bought in it.
    func appTransactionID(account: AccountID, bundle: BundleID) throws -> TransactionID?
    /// The account's app transaction for `bundle`, made now when there is none.
    func makeAppTransaction(account: AccountID, bundle: BundleID) throws -> TransactionID
    /// Whose app transaction `id` is.
    func appTransaction(_ id: TransactionID) throws -> (account: AccountID, bundle: BundleID)?
}

/// An app transaction id: `6` and a 15-digit serial, so it never looks like a purchase's id (`2…`).
public enum AppTransactionIDs {
    public static func id(serial: Int64) -> TransactionID {
        let digits = String(serial)
        return TransactionID("6" + String(repeating: "0", count: max(0, 15 - digits.count)) + digits)
    }

    public static func serial(_ id: TransactionID) -> Int64? {
        let text = id.rawValue
        guard text.utf8.count == 16, text.hasPrefix("6"), let serial = Int64(text.dropFirst()), serial > 0 else {
            return nil
        }
        return serial
    }
}

/// Transactions by id, and an account's for one app.
public protocol TransactionRepository {
    func transaction(_ id: TransactionID) throws -> StoredTransaction?
    /// A transaction's purchase date alone (a subscription's start, for its renewal info), without reading
    /// the rest of the row.
    func purchaseDate(of id: TransactionID) throws -> Date?
    func insert(_ transaction: StoredTransaction) throws
    func update(_ transaction: StoredTransaction) throws
    /// The account's transactions for the app, by purchase date then id.
    func transactions(account: AccountID, bundle: BundleID) throws -> [StoredTransaction]
    /// The original transaction ids of the account's purchases in the app (each once), without reading the
    /// transactions themselves.
    func originalIDs(account: AccountID, bundle: BundleID) throws -> Set<TransactionID>
    /// The unfinished ones among them, by purchase date then id.
    func unfinishedTransactions(account: AccountID, bundle: BundleID) throws -> [StoredTransaction]
    func transactionCount() throws -> Int
    /// The account's transactions for the app in the order they last changed (``StoredTransaction/revision``):
    /// after `revision` ascending, or before it descending (nil: from the start), at most `limit`.
    func transactions(
        account: AccountID, bundle: BundleID, revisionAfter revision: Int64?, descending: Bool, limit: Int
    )
        throws -> [StoredTransaction]
    /// Transactions of every account that match `filter`, most recently changed first, before `revision`
    /// (a paging cursor), at most `limit`.
    func transactions(matching filter: TransactionFilter, revisionBefore revision: Int64?, limit: Int) throws
        -> [StoredTransaction]
    /// The transactions of one order (Look Up Order ID).
    func transactions(orderID: String) throws -> [StoredTransaction]
    /// Every transaction of one original transaction (a purchase and its renewals), by renewal number.
    func transactions(original: TransactionID) throws -> [StoredTransaction]
}

/// Which transactions a listing shows: every given member must match (nil: any).
public struct TransactionFilter: Sendable, Hashable {
    public var account: AccountID?
    public var bundle: BundleID?
    public var product: ProductID?
    public init(account: AccountID? = nil, bundle: BundleID? = nil, product: ProductID? = nil) {
        self.account = account
        self.bundle = bundle
        self.product = product
    }

    func matches(_ stored: StoredTransaction) -> Bool {
        (account == nil || stored.accountID == account) && (bundle == nil || stored.transaction.bundleID == bundle)
            && (product == nil || stored.transaction.productID == product)
    }
}

/// Auto-renewable subscriptions by original transaction id.
public protocol SubscriptionRepository {
    func subscription(_ originalID: TransactionID) throws -> StoredSubscription?
    /// Inserts or replaces; a subscription stays with its account and app (a save that moves it is invalid).
    func save(_ subscription: StoredSubscription) throws
    /// The account's subscriptions for the app, by original transaction id.
    func subscriptions(account: AccountID, bundle: BundleID) throws -> [StoredSubscription]
    /// Subscriptions that are active or in billing retry and renew to `product`, by original id.
    func subscriptionIDs(renewingTo product: ProductID) throws -> [TransactionID]
}

/// Payments that did not become purchases (deferred, failed, interrupted).
public protocol PaymentRepository {
    func payment(_ id: TransactionID) throws -> PendingPayment?
    func insert(_ payment: PendingPayment) throws
    func update(_ payment: PendingPayment) throws
    /// The account's unfinished payments for the app, by date then id.
    func unfinishedPayments(account: AccountID, bundle: BundleID) throws -> [PendingPayment]
    /// The account's payments waiting for an interruption to be resolved, by date then id.
    func resolvablePayments(account: AccountID) throws -> [PendingPayment]
}

/// Work due at a store time, in an indexed table: the scheduler asks only for what is due.
public protocol DueEventRepository {
    /// Adds the event, replacing one of the same kind and key.
    func schedule(_ event: DueEvent) throws
    func cancel(kind: DueEvent.Kind, key: String) throws
    /// The earliest due time, if any.
    func nextDue() throws -> Date?
    /// Events due at or before `time`, earliest first (ties by kind and key), at most `limit`.
    func due(until time: Date, limit: Int) throws -> [DueEvent]
    /// Every event of one kind, at most `limit`, by key.
    func events(kind: DueEvent.Kind, limit: Int) throws -> [DueEvent]
}

/// The notification outbox: what is to be sent, was sent or failed, with every attempt.
public protocol NotificationRepository {
    func insert(_ notification: OutboundNotification) throws
    /// Replaces the state and attempts of a stored notification.
    func update(_ notification: OutboundNotification) throws
    func notification(_ id: String) throws -> OutboundNotification?
    /// A stored notification's state and attempts, without reading its payload (what recording an
    /// attempt needs).
    func delivery(_ id: String) throws -> (state: OutboxState, attempts: [SendAttempt])?
    /// The notifications about one subscription (original transaction), oldest first, at most `limit`.
    func notifications(original: TransactionID, limit: Int) throws -> [OutboundNotification]
    /// The app's notifications in `environment` created in `from..<to`, in creation order, after position
    /// `after` (a paging cursor), at most `limit`; each with its position.
    func notifications(
        bundle: BundleID, environment: Environment, from: Date, to: Date, after: Int64?, limit: Int
    ) throws -> [(position: Int64, notification: OutboundNotification)]
    /// Puts a stored notification in the queue of those waiting for a free delivery slot, at its place
    /// (its outbox position) in its receiver's (URL's) line.
    func queueForDelivery(_ id: String) throws
    /// Takes the `limit` notifications for `url` that have waited longest off the queue, oldest first.
    func takeQueued(url: String, limit: Int) throws -> [OutboundNotification]
    /// The receivers (URLs) with notifications in the queue, in URL order.
    func queuedURLs() throws -> [String]
    /// Whether any notification waits in the queue.
    func hasQueued() throws -> Bool
    /// Whether any notification for `url` waits in the queue.
    func hasQueued(url: String) throws -> Bool
    /// How many wait (counted one by one).
    func queuedCount() throws -> Int
    /// Deletes at most `limit` of the notifications created before `date` that are done (delivered, or
    /// failed for good), oldest first, with their payloads; pending ones stay. Returns how many it deleted.
    func pruneNotifications(createdBefore date: Date, limit: Int) throws -> Int
}

/// Family Sharing: families and the access their members have to one another's purchases.
public protocol FamilyRepository {
    func family(_ id: String) throws -> Family?
    /// The family `account` belongs to, if any.
    func family(member account: AccountID) throws -> Family?
    /// Inserts or replaces the family and its member list (an account already in another family is a
    /// duplicate).
    func save(_ family: Family) throws
    /// Every member's access to the purchase whose original transaction is `source`.
    func shares(source: TransactionID) throws -> [FamilyShare]
    /// Inserts or replaces the share of (source, member).
    func save(_ share: FamilyShare) throws
}

/// Small named values: the clock and rate, id counters, products off sale, notification settings.
public protocol SettingsRepository {
    func setting(_ key: String) throws -> String?
    func setSetting(_ key: String, _ value: String) throws
}

/// What the App Store Server API, refund requests and promotional offers keep, one row per thing: renewal
/// extensions, mass extensions, consumption information, refund requests waiting for Apple, API keys
/// minted at run time, and offer nonces used.
public protocol RecordRepository {
    /// A subscription's renewal-date extensions, oldest first.
    func renewalExtensions(original: TransactionID) throws -> [ExtensionRecord]
    func insert(_ record: ExtensionRecord) throws
    func massExtension(productID: String, requestIdentifier: String) throws -> MassExtension?
    /// Mass extensions not complete (a restart goes on with them), at most `limit`.
    func incompleteMassExtensions(limit: Int) throws -> [MassExtension]
    /// Inserts or replaces the progress of the mass extension it names.
    func save(_ progress: MassExtension) throws
    func consumption(_ transactionID: TransactionID) throws -> ConsumptionRecord?
    /// Inserts or replaces the transaction's consumption information.
    func save(_ consumption: ConsumptionRecord) throws
    /// A refund request waiting for Apple's decision: its reason ("" when the customer gave none).
    func refundRequest(_ transactionID: TransactionID) throws -> String?
    /// Records a waiting request, or (nil) removes it.
    func setRefundRequest(_ transactionID: TransactionID, reason: String?) throws
    /// The API keys minted at run time, in the order they were minted.
    func mintedAPIKeys() throws -> [MintedAPIKey]
    func insert(_ key: MintedAPIKey) throws
    /// Records a promotional offer's nonce as used; false when it was used already.
    func useOfferNonce(_ nonce: String) throws -> Bool
}

/// Everything one read or one write transaction reaches.
public protocol EmulatorStore: AccountRepository, DeviceRepository, InstallRepository, AppTransactionRepository,
    TransactionRepository,
    SubscriptionRepository, PaymentRepository, DueEventRepository, NotificationRepository, FamilyRepository,
    RecordRepository, RetentionRepository, SettingsRepository
{}

/// Where the emulator keeps its state. Every change runs in one ``write(_:)``: all of it is stored, or
/// none of it; writes run one at a time in the order they were submitted, and a write that returned is
/// durable. One contract suite (`EmulatorStorageContractTests`) holds for every backend.
public protocol EmulatorStorage: Sendable {
    func read<T: Sendable>(_ body: @Sendable (any EmulatorStore) throws -> T) async throws -> T
    func write<T: Sendable>(_ body: @escaping @Sendable (any EmulatorStore) throws -> T) async throws -> T
    /// How long its one writer has spent in write transactions so far; nil where it is not measured.
    var writerBusy: Duration? { get }
    /// The CPU time its writer's thread has spent in those transactions; nil where it is not measured.
    var writerCPU: Duration? { get }
    /// Counts what each statement costs its writer from now on, from zero (`on`), or stops counting.
    func countWriterStatements(_ on: Bool) async
    /// What each statement has cost its writer while counted, the costliest first; empty where not measured.
    func writerStatementCosts() async -> [StatementCost]
}

extension EmulatorStorage {
    public var writerBusy: Duration? { nil }
    public var writerCPU: Duration? { nil }
    public func countWriterStatements(_ on: Bool) async {}
    public func writerStatementCosts() async -> [StatementCost] { [] }
}
