import Foundation
import StoreModel
import StorekeeperSQL
import Synchronization

/// The purchase server's state in memory (tests, throw-away servers): one write at a time; a write that
/// throws leaves the state as it was.
public final class InMemoryServerStorage: ServerStorage {
    private let tables = Mutex(Tables())
    /// The lock keys each write took, in order (the last 100 writes): what PostgreSQL's advisory locks would
    /// be, for checking the order writes take them in.
    private let locksTaken = Mutex<[[String]]>([])

    public init() {}

    /// The lock keys of the writes so far (at most the last 100), each write's in the order it took them.
    package var writeLocks: [[String]] { locksTaken.withLock { $0 } }

    struct Tables {
        var subscribers: [String: Subscriber] = [:]
        var versions: [String: Int64] = [:]
        var tokens: [String: String] = [:]
        var aliases: [String: String] = [:]
        var checkpoints: [String: String] = [:]
        var purchases: [TransactionID: PurchaseRecord] = [:]
        var subscriptions: [TransactionID: SubscriptionRecord] = [:]
        var ledger: [String: LedgerEntry] = [:]
        var grants: [String: Grant] = [:]
        var events: [(position: Int64, event: ServerEvent)] = []
        var eventIDs: Set<String> = []
        var inputs: [String: [UInt8]] = [:]
        var deliveries: [(position: Int64, delivery: WebhookDelivery)] = []
        var deliveryIndex: [String: Int] = [:]
        var retentionAnswers: [RetentionAnswer] = []
    }

    public func read<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T {
        try tables.withLock { tables in try body(Store(tables: tables)) }
    }

    public func write<T: Sendable>(_ body: @escaping @Sendable (any ServerStore) throws -> T) async throws -> T {
        try tables.withLock { tables in
            let store = Store(tables: tables)
            defer { locksTaken.withLock { $0 = Array(($0 + [store.locks]).suffix(100)) } }
            let result = try body(store)
            tables = store.tables
            return result
        }
    }

    final class Store: ServerStore {
        var tables: Tables
        var locks: [String] = []
        init(tables: Tables) { self.tables = tables }

        static func key(_ parts: String...) -> String { parts.joined(separator: "\u{1F}") }

        func subscriber(bundle: String, appUserID: String) -> Subscriber? {
            tables.subscribers[Self.key(bundle, appUserID)]
        }
        func touch(bundle: String, appUserID: String) {
            let key = Self.key(bundle, appUserID)
            if tables.subscribers[key] != nil { tables.versions[key, default: 0] += 1 }
        }
        func version(bundle: String, appUserID: String) -> Int64? {
            let key = Self.key(bundle, appUserID)
            return tables.subscribers[key] == nil ? nil : tables.versions[key, default: 0]
        }
        func subscriberRecords(bundle: String, appUserID: String) throws -> SubscriberRecords? {
            try subscriberRecordsOneByOne(bundle: bundle, appUserID: appUserID)
        }
        func subscriber(bundle: String, appAccountToken: String) -> Subscriber? {
            tables.tokens[Self.key(bundle, appAccountToken.lowercased())].flatMap {
                subscriber(bundle: bundle, appUserID: $0)
            }
        }
        func save(_ subscriber: Subscriber) {
            tables.subscribers[Self.key(subscriber.bundleID, subscriber.appUserID)] = subscriber
            for token in subscriber.appAccountTokens {
                tables.tokens[Self.key(subscriber.bundleID, token.lowercased())] = subscriber.appUserID
            }
        }

        func user(bundle: String, alias: String) -> String? { tables.aliases[Self.key(bundle, alias)] }
        func saveAlias(bundle: String, alias: String, user: String) {
            tables.aliases[Self.key(bundle, alias)] = user
        }

        func purchase(_ transactionID: TransactionID) -> PurchaseRecord? { tables.purchases[transactionID] }
        func save(_ purchase: PurchaseRecord) { tables.purchases[purchase.transactionID] = purchase }
        func purchases(bundle: String, owner: String) -> [PurchaseRecord] {
            tables.purchases.values.filter { $0.bundleID.rawValue == bundle && $0.owner == owner }.sorted {
                ($0.purchaseDate, $0.transactionID) < ($1.purchaseDate, $1.transactionID)
            }
        }

        func purchases(original: TransactionID) -> [PurchaseRecord] {
            tables.purchases.values.filter { $0.originalTransactionID == original }.sorted {
                ($0.purchaseDate, $0.transactionID) < ($1.purchaseDate, $1.transactionID)
            }
        }

        func firstOwner(original: TransactionID) -> String? {
            purchases(original: original).lazy.compactMap(\.owner).first
        }

        func chartRecords(bundle: String, from: Date, to: Date, limit: Int) -> [SubscriptionCharts.Record] {
            Array(
                tables.purchases.values.map { ($0, SubscriptionCharts.Record($0)) }
                    .filter { $0.0.bundleID.rawValue == bundle && $0.1.purchaseDate < to && $0.1.lastDate >= from }
                    .sorted { ($0.0.purchaseDate, $0.0.transactionID) < ($1.0.purchaseDate, $1.0.transactionID) }
                    .prefix(limit).map(\.1))
        }

        func subscription(_ originalTransactionID: TransactionID) -> SubscriptionRecord? {
            tables.subscriptions[originalTransactionID]
        }
        func save(_ subscription: SubscriptionRecord) {
            tables.subscriptions[subscription.originalTransactionID] = subscription
        }
        func subscriptions(bundle: String, owner: String) -> [SubscriptionRecord] {
            tables.subscriptions.values.filter { $0.bundleID.rawValue == bundle && $0.owner == owner }.sorted {
                $0.originalTransactionID < $1.originalTransactionID
            }
        }

        /// Writes run one at a time already: the key is only recorded (``writeLocks``).
        func lock(_ key: String) { locks.append(key) }

        func overdueSubscriptions(bundle: String, before date: Date, limit: Int) -> [SubscriptionRecord] {
            Array(
                tables.subscriptions.values.filter {
                    $0.bundleID.rawValue == bundle && ($0.reconciliationDue.map { $0 < date } ?? false)
                }.sorted { ($0.reconciliationDue ?? .distantPast) < ($1.reconciliationDue ?? .distantPast) }
                    .prefix(limit))
        }
        func checkpoint(_ key: String) -> String? { tables.checkpoints[key] }
        func setCheckpoint(_ key: String, _ value: String) { tables.checkpoints[key] = value }
        func checkpoints(prefix: String, limit: Int) -> [(key: String, value: String)] {
            Array(
                tables.checkpoints.filter { $0.key.unicodeScalars.starts(with: prefix.unicodeScalars) }.sorted {
                    $0.key < $1.key
                }
                .prefix(max(0, limit)).map { ($0.key, $0.value) })
        }
        func removeCheckpoint(_ key: String) { tables.checkpoints[key] = nil }

        func append(_ entry: LedgerEntry) -> Bool {
            let key = Self.key(entry.transactionID.rawValue, entry.key)
            guard tables.ledger[key] == nil else { return false }
            tables.ledger[key] = entry
            return true
        }
        func balances(bundle: String, owner: String) -> [String: Int] {
            var result: [String: Int] = [:]
            for entry in tables.ledger.values {
                guard let purchase = tables.purchases[entry.transactionID], purchase.bundleID.rawValue == bundle,
                    purchase.owner == owner
                else { continue }
                result[entry.productID.rawValue, default: 0] += entry.quantity
            }
            return result
        }
        func grants(bundle: String, owner: String) -> [Grant] {
            tables.grants.filter { $0.key.hasPrefix(Self.key(bundle, owner) + "\u{1F}") }.map(\.value).sorted {
                $0.entitlement < $1.entitlement
            }
        }
        func save(_ grant: Grant, bundle: String, owner: String) {
            tables.grants[Self.key(bundle, owner, grant.entitlement)] = grant
        }

        func insert(_ answer: RetentionAnswer) -> Bool {
            guard !tables.retentionAnswers.contains(where: { $0.requestIdentifier == answer.requestIdentifier }) else {
                return false
            }
            tables.retentionAnswers.append(answer)
            return true
        }
        func markRetentionCancelled(original: TransactionID, since: Date, until: Date, at date: Date) {
            for index in tables.retentionAnswers.indices {
                let answer = tables.retentionAnswers[index]
                if answer.originalTransactionID == original, answer.date >= since, answer.date <= until,
                    answer.cancelled == nil
                {
                    tables.retentionAnswers[index].cancelled = date
                }
            }
        }
        func retentionAnswers(bundle: String, from: Date, to: Date, limit: Int) -> [RetentionAnswer] {
            Array(
                tables.retentionAnswers.filter { $0.bundleID.rawValue == bundle && $0.date >= from && $0.date < to }
                    .sorted { $0.date < $1.date }.prefix(max(0, limit)))
        }
        func retentionAnswers(original: TransactionID, limit: Int) -> [RetentionAnswer] {
            Array(
                tables.retentionAnswers.filter { $0.originalTransactionID == original }.sorted { $0.date < $1.date }
                    .suffix(max(0, limit)))
        }

        func cancellation(original: TransactionID, from: Date, through: Date) -> Date? {
            tables.events.lazy.reversed().map(\.event)
                .filter { $0.type == .cancellation && $0.originalTransactionID == original }
                .prefix(100).map(\.date).filter { $0 >= from && $0 <= through }.min()
        }

        func append(_ event: ServerEvent) -> Bool {
            guard tables.eventIDs.insert(event.id).inserted else { return false }
            tables.events.append(((tables.events.last?.position ?? 0) + 1, event))
            return true
        }
        func appendLater(_ event: ServerEvent) -> DeferredCount { DeferredCount(append(event) ? 1 : 0) }
        func events(bundle: String, owner: String, after position: Int64?, limit: Int) -> [(
            position: Int64, event: ServerEvent
        )] {
            let owned = Set(
                tables.purchases.values.filter { $0.bundleID.rawValue == bundle && $0.owner == owner }.map(
                    \.originalTransactionID))
            return Array(
                tables.events.filter { item in
                    item.position > (position ?? 0) && item.event.bundleID.rawValue == bundle
                        && (item.event.appUserID == owner
                            || item.event.originalTransactionID.map(owned.contains) == true)
                }.prefix(limit))
        }
        func claimOwnerlessEvents(original: TransactionID, owner: String) -> [ServerEvent] {
            var claimed: [ServerEvent] = []
            for index in tables.events.indices
            where tables.events[index].event.originalTransactionID == original
                && tables.events[index].event.appUserID == nil
            {
                tables.events[index].event.appUserID = owner
                claimed.append(tables.events[index].event)
            }
            return claimed
        }
        func recordInput(_ input: RawInput, received: Date) -> Bool {
            guard tables.inputs[input.key] == nil else { return false }
            tables.inputs[input.key] = input.body
            return true
        }
        func input(key: String) -> [UInt8]? { tables.inputs[key] }
        func inputCount() -> Int { tables.inputs.count }

        func insert(_ delivery: WebhookDelivery) -> Bool {
            guard tables.deliveryIndex[delivery.id] == nil else { return false }
            tables.deliveryIndex[delivery.id] = tables.deliveries.count
            tables.deliveries.append(((tables.deliveries.last?.position ?? 0) + 1, delivery))
            return true
        }
        func update(_ delivery: WebhookDelivery) throws {
            guard let index = tables.deliveryIndex[delivery.id] else { throw ServerStorageError.missing("delivery") }
            tables.deliveries[index].delivery = delivery
        }
        func recordAttempt(_ delivery: WebhookDelivery, claimedUntil lease: Date) -> Bool {
            guard let index = tables.deliveryIndex[delivery.id], tables.deliveries[index].delivery.nextAttempt == lease
            else { return false }
            tables.deliveries[index].delivery = delivery
            return true
        }
        func dueDeliveries(until time: Date, limit: Int) -> [WebhookDelivery] {
            Array(
                tables.deliveries.map(\.delivery).filter {
                    $0.state == .pending && ($0.nextAttempt ?? .distantFuture) <= time
                }
                .sorted { ($0.nextAttempt ?? .distantFuture) < ($1.nextAttempt ?? .distantFuture) }.prefix(limit))
        }
        func nextDeliveryDue() -> Date? {
            tables.deliveries.map(\.delivery).filter { $0.state == .pending }.compactMap(\.nextAttempt).min()
        }
        func latestDeliveries(limit: Int) -> [WebhookDelivery] {
            Array(tables.deliveries.suffix(limit).reversed().map(\.delivery))
        }
        func deliveries(after position: Int64?, limit: Int) -> [(position: Int64, delivery: WebhookDelivery)] {
            Array(tables.deliveries.filter { $0.position > (position ?? 0) }.prefix(limit))
        }
        func pendingDeliveryCount() -> Int { tables.deliveries.filter { $0.delivery.state == .pending }.count }
    }
}
