import Foundation
import StoreModel
import Synchronization

/// The emulator's state in memory (tests, throw-away emulators): indexed dictionaries, one write at a time,
/// and an undo log so a write that throws leaves nothing behind.
public final class InMemoryEmulatorStorage: EmulatorStorage {
    private let tables = Mutex(Tables())

    public init() {}

    public func read<T: Sendable>(_ body: @Sendable (any EmulatorStore) throws -> T) async throws -> T {
        try tables.withLock { tables in
            let store = Store(tables: tables)
            return try body(store)
        }
    }

    public func write<T: Sendable>(_ body: @escaping @Sendable (any EmulatorStore) throws -> T) async throws -> T {
        try tables.withLock { tables in
            // Hand the tables over so the store holds the only reference: a change copies nothing.
            var taken = Tables()
            swap(&taken, &tables)
            let store = Store(tables: taken)
            taken = Tables()
            do {
                let result = try body(store)
                tables = store.tables
                return result
            } catch {
                store.rollBack()
                tables = store.tables
                throw error
            }
        }
    }

    struct Key<A: Hashable, B: Hashable>: Hashable {
        let a: A
        let b: B
    }

    struct RetentionKey: Hashable {
        var kind: RetentionItem.Kind
        var bundle: BundleID
        var environment: Environment
        var id: String
    }

    struct Tables {
        var accounts: [AccountID: Account] = [:]
        var devices: [DeviceID: Device] = [:]
        var installs: [Key<DeviceID, BundleID>: Install] = [:]
        /// App transactions in the order they were made (serial = index + 1).
        var appTransactions: [Key<AccountID, BundleID>] = []
        var appTransactionSerials: [Key<AccountID, BundleID>: Int64] = [:]
        var transactions: [TransactionID: StoredTransaction] = [:]
        /// Transaction ids per (account, app), in insertion order.
        var transactionsByOwner: [Key<AccountID, BundleID>: [TransactionID]] = [:]
        var subscriptions: [TransactionID: StoredSubscription] = [:]
        var subscriptionsByOwner: [Key<AccountID, BundleID>: Set<TransactionID>] = [:]
        var payments: [TransactionID: PendingPayment] = [:]
        var paymentsByAccount: [AccountID: [TransactionID]] = [:]
        var events: [Key<String, String>: DueEvent] = [:]
        var settings: [String: String] = [:]
        /// The largest transaction revision given so far.
        var lastRevision: Int64 = 0
        var notifications: [String: OutboundNotification] = [:]
        var notificationPositions: [String: Int64] = [:]
        /// The largest outbox position given so far (positions are not reused after a prune).
        var lastNotificationPosition: Int64 = 0
        /// Notifications waiting for a delivery slot, by id, each with its outbox position (the queue's order).
        var deliveryQueue: [String: Int64] = [:]
        var families: [String: Family] = [:]
        var familyOfMember: [AccountID: String] = [:]
        var shares: [TransactionID: [AccountID: FamilyShare]] = [:]
        var extensions: [TransactionID: [ExtensionRecord]] = [:]
        var massExtensions: [Key<String, String>: MassExtension] = [:]
        var consumption: [TransactionID: ConsumptionRecord] = [:]
        var refundRequests: [TransactionID: String] = [:]
        /// Minted keys by position (the order they were minted).
        var apiKeys: [Int: MintedAPIKey] = [:]
        var offerNonces: [String: Bool] = [:]
        var retentionItems: [RetentionKey: RetentionItem] = [:]
        var retentionRequests: [Int: RetentionRequestRecord] = [:]
        var retentionRequestIDs: [String: Int] = [:]
    }

    /// One transaction's view: mutates a copy of the tables (dictionaries are copied lazily, per table
    /// touched) and records how to undo each change.
    final class Store: EmulatorStore {
        var tables: Tables
        private var undo: [(inout Tables) -> Void] = []

        init(tables: Tables) { self.tables = tables }

        func rollBack() {
            for step in undo.reversed() { step(&tables) }
            undo.removeAll()
        }

        private func change<K: Hashable, V>(
            _ path: WritableKeyPath<Tables, [K: V]>, _ key: K, _ value: V?
        ) {
            let old = tables[keyPath: path][key]
            tables[keyPath: path][key] = value
            undo.append { $0[keyPath: path][key] = old }
        }

        func account(_ id: AccountID) -> Account? { tables.accounts[id] }
        func insert(_ account: Account) throws {
            guard tables.accounts[account.id] == nil else { throw EmulatorStorageError.duplicate("account") }
            change(\.accounts, account.id, account)
        }
        func update(_ account: Account) throws {
            guard tables.accounts[account.id] != nil else { throw EmulatorStorageError.missing("account") }
            change(\.accounts, account.id, account)
        }

        func accounts(after id: AccountID?, limit: Int) -> [Account] {
            Array(
                tables.accounts.values.filter { id == nil || $0.id.rawValue > id!.rawValue }
                    .sorted { $0.id.rawValue < $1.id.rawValue }.prefix(max(0, limit)))
        }

        func device(_ id: DeviceID) -> Device? { tables.devices[id] }
        func devices(account: AccountID) -> [Device] {
            tables.devices.values.filter { $0.accountID == account }.sorted { $0.id.rawValue < $1.id.rawValue }
        }
        func insert(_ device: Device) throws {
            guard tables.devices[device.id] == nil else { throw EmulatorStorageError.duplicate("device") }
            guard tables.accounts[device.accountID] != nil else { throw EmulatorStorageError.missing("account") }
            change(\.devices, device.id, device)
        }

        func install(device: DeviceID, bundle: BundleID) -> Install? { tables.installs[Key(a: device, b: bundle)] }
        func installs(account: AccountID, bundle: BundleID) -> [Install] {
            tables.installs.values.filter {
                $0.bundleID == bundle && tables.devices[$0.deviceID]?.accountID == account
            }.sorted { ($0.originalPurchaseDate, $0.deviceID) < ($1.originalPurchaseDate, $1.deviceID) }
        }
        func save(_ install: Install) throws {
            guard tables.devices[install.deviceID] != nil else { throw EmulatorStorageError.missing("device") }
            change(\.installs, Key(a: install.deviceID, b: install.bundleID), install)
        }

        func appTransactionID(account: AccountID, bundle: BundleID) -> TransactionID? {
            tables.appTransactionSerials[Key(a: account, b: bundle)].map(AppTransactionIDs.id(serial:))
        }
        func makeAppTransaction(account: AccountID, bundle: BundleID) throws -> TransactionID {
            if let id = appTransactionID(account: account, bundle: bundle) { return id }
            guard tables.accounts[account] != nil else { throw EmulatorStorageError.missing("account") }
            let key = Key(a: account, b: bundle)
            tables.appTransactions.append(key)
            undo.append { $0.appTransactions.removeLast() }
            let serial = Int64(tables.appTransactions.count)
            change(\.appTransactionSerials, key, serial)
            return AppTransactionIDs.id(serial: serial)
        }
        func appTransaction(_ id: TransactionID) -> (account: AccountID, bundle: BundleID)? {
            guard let serial = AppTransactionIDs.serial(id), serial <= tables.appTransactions.count else { return nil }
            let key = tables.appTransactions[Int(serial) - 1]
            return (key.a, key.b)
        }

        func transaction(_ id: TransactionID) -> StoredTransaction? { tables.transactions[id] }
        func purchaseDate(of id: TransactionID) -> Date? { tables.transactions[id]?.transaction.purchaseDate }
        func insert(_ transaction: StoredTransaction) throws {
            guard tables.transactions[transaction.id] == nil else {
                throw EmulatorStorageError.duplicate("transaction")
            }
            var transaction = transaction
            transaction.revision = nextRevision()
            change(\.transactions, transaction.id, transaction)
            let owner = Key(a: transaction.accountID, b: transaction.transaction.bundleID)
            change(\.transactionsByOwner, owner, (tables.transactionsByOwner[owner] ?? []) + [transaction.id])
        }
        func update(_ transaction: StoredTransaction) throws {
            guard let old = tables.transactions[transaction.id] else {
                throw EmulatorStorageError.missing("transaction")
            }
            guard old.accountID == transaction.accountID, old.transaction.bundleID == transaction.transaction.bundleID
            else { throw EmulatorStorageError.invalid("a transaction's account and app cannot change") }
            var transaction = transaction
            transaction.revision = old.transaction == transaction.transaction ? old.revision : nextRevision()
            change(\.transactions, transaction.id, transaction)
        }
        private func nextRevision() -> Int64 {
            let previous = tables.lastRevision
            undo.append { $0.lastRevision = previous }
            tables.lastRevision += 1
            return tables.lastRevision
        }
        func originalIDs(account: AccountID, bundle: BundleID) -> Set<TransactionID> {
            Set(
                (tables.transactionsByOwner[Key(a: account, b: bundle)] ?? []).compactMap {
                    tables.transactions[$0]?.transaction.originalID
                })
        }
        func transactions(account: AccountID, bundle: BundleID) -> [StoredTransaction] {
            (tables.transactionsByOwner[Key(a: account, b: bundle)] ?? []).compactMap { tables.transactions[$0] }
                .sorted(by: Self.purchaseOrder)
        }
        func transactions(
            account: AccountID, bundle: BundleID, revisionAfter revision: Int64?, descending: Bool, limit: Int
        ) -> [StoredTransaction] {
            let all = (tables.transactionsByOwner[Key(a: account, b: bundle)] ?? []).compactMap {
                tables.transactions[$0]
            }
            let ordered = all.sorted { descending ? $0.revision > $1.revision : $0.revision < $1.revision }
            return Array(
                ordered.filter { stored in
                    guard let revision else { return true }
                    return descending ? stored.revision < revision : stored.revision > revision
                }.prefix(max(0, limit)))
        }
        func transactions(matching filter: TransactionFilter, revisionBefore revision: Int64?, limit: Int)
            -> [StoredTransaction]
        {
            Array(
                tables.transactions.values.filter { filter.matches($0) && (revision == nil || $0.revision < revision!) }
                    .sorted { $0.revision > $1.revision }.prefix(max(0, limit)))
        }
        func transactions(orderID: String) -> [StoredTransaction] {
            tables.transactions.values.filter { $0.orderID == orderID }.sorted(by: Self.purchaseOrder)
        }
        func transactions(original: TransactionID) -> [StoredTransaction] {
            tables.transactions.values.filter { $0.transaction.originalID == original }.sorted {
                ($0.renewalNumber, $0.id.rawValue.count, $0.id.rawValue)
                    < ($1.renewalNumber, $1.id.rawValue.count, $1.id.rawValue)
            }
        }
        func unfinishedTransactions(account: AccountID, bundle: BundleID) -> [StoredTransaction] {
            transactions(account: account, bundle: bundle).filter { !$0.finished }
        }
        func transactionCount() -> Int { tables.transactions.count }

        static func purchaseOrder(_ a: StoredTransaction, _ b: StoredTransaction) -> Bool {
            (a.transaction.purchaseDate, a.id.rawValue.count, a.id.rawValue)
                < (b.transaction.purchaseDate, b.id.rawValue.count, b.id.rawValue)
        }

        func subscription(_ originalID: TransactionID) -> StoredSubscription? { tables.subscriptions[originalID] }
        func save(_ subscription: StoredSubscription) throws {
            if let old = tables.subscriptions[subscription.originalTransactionID],
                old.accountID != subscription.accountID || old.bundleID != subscription.bundleID
            {
                throw EmulatorStorageError.invalid("a subscription's account and app cannot change")
            }
            let owner = Key(a: subscription.accountID, b: subscription.bundleID)
            change(\.subscriptions, subscription.originalTransactionID, subscription)
            change(
                \.subscriptionsByOwner, owner,
                (tables.subscriptionsByOwner[owner] ?? []).union([subscription.originalTransactionID]))
        }
        func subscriptions(account: AccountID, bundle: BundleID) -> [StoredSubscription] {
            (tables.subscriptionsByOwner[Key(a: account, b: bundle)] ?? []).compactMap { tables.subscriptions[$0] }
                .sorted {
                    ($0.originalTransactionID.rawValue.count, $0.originalTransactionID.rawValue)
                        < ($1.originalTransactionID.rawValue.count, $1.originalTransactionID.rawValue)
                }
        }

        func subscriptionIDs(renewingTo product: ProductID) -> [TransactionID] {
            tables.subscriptions.values.filter {
                $0.state.autoRenewProductID == product && ($0.state.status == .active || $0.state.isInBillingRetry)
            }.map(\.originalTransactionID).sorted {
                ($0.rawValue.count, $0.rawValue) < ($1.rawValue.count, $1.rawValue)
            }
        }

        func payment(_ id: TransactionID) -> PendingPayment? { tables.payments[id] }
        func insert(_ payment: PendingPayment) throws {
            guard tables.payments[payment.id] == nil else { throw EmulatorStorageError.duplicate("payment") }
            change(\.payments, payment.id, payment)
            change(
                \.paymentsByAccount, payment.accountID,
                (tables.paymentsByAccount[payment.accountID] ?? []) + [payment.id])
        }
        func update(_ payment: PendingPayment) throws {
            guard tables.payments[payment.id] != nil else { throw EmulatorStorageError.missing("payment") }
            change(\.payments, payment.id, payment)
        }
        private func payments(of account: AccountID) -> [PendingPayment] {
            (tables.paymentsByAccount[account] ?? []).compactMap { tables.payments[$0] }
                .sorted { ($0.date, $0.id.rawValue) < ($1.date, $1.id.rawValue) }
        }
        func unfinishedPayments(account: AccountID, bundle: BundleID) -> [PendingPayment] {
            payments(of: account).filter { $0.bundleID == bundle && !$0.finished }
        }
        func resolvablePayments(account: AccountID) -> [PendingPayment] {
            payments(of: account).filter(\.resolvable)
        }

        func schedule(_ event: DueEvent) { change(\.events, Key(a: event.kind.rawValue, b: event.key), event) }
        func cancel(kind: DueEvent.Kind, key: String) { change(\.events, Key(a: kind.rawValue, b: key), nil) }
        func events(kind: DueEvent.Kind, limit: Int) -> [DueEvent] {
            Array(tables.events.values.filter { $0.kind == kind }.sorted { $0.key < $1.key }.prefix(limit))
        }
        func nextDue() -> Date? { tables.events.values.lazy.map(\.due).min() }
        func due(until time: Date, limit: Int) -> [DueEvent] {
            Array(
                tables.events.values.filter { $0.due <= time }
                    .sorted { ($0.due, $0.kind.rawValue, $0.key) < ($1.due, $1.kind.rawValue, $1.key) }.prefix(limit))
        }

        func insert(_ notification: OutboundNotification) throws {
            guard tables.notifications[notification.id] == nil else {
                throw EmulatorStorageError.duplicate("notification")
            }
            var notification = notification
            notification.compactPayload = nil
            change(\.notifications, notification.id, notification)
            let previous = tables.lastNotificationPosition
            undo.append { $0.lastNotificationPosition = previous }
            tables.lastNotificationPosition += 1
            change(\.notificationPositions, notification.id, tables.lastNotificationPosition)
        }
        func pruneNotifications(createdBefore date: Date, limit: Int) -> Int {
            let done = tables.notifications.values.filter { $0.state != .pending && $0.created < date }
                .map { (position: tables.notificationPositions[$0.id] ?? 0, notification: $0) }
                .sorted { ($0.notification.created, $0.position) < ($1.notification.created, $1.position) }
                .prefix(max(0, limit))
            for entry in done {
                change(\.notifications, entry.notification.id, nil)
                change(\.notificationPositions, entry.notification.id, nil)
            }
            return done.count
        }
        func update(_ notification: OutboundNotification) throws {
            guard var stored = tables.notifications[notification.id] else {
                throw EmulatorStorageError.missing("notification")
            }
            (stored.state, stored.attempts) = (notification.state, notification.attempts)
            change(\.notifications, notification.id, stored)
        }
        func notification(_ id: String) -> OutboundNotification? { tables.notifications[id] }
        func queueForDelivery(_ id: String) throws {
            guard let position = tables.notificationPositions[id] else {
                throw EmulatorStorageError.missing("notification")
            }
            change(\.deliveryQueue, id, position)
        }
        func takeQueued(url: String, limit: Int) -> [OutboundNotification] {
            let taken = tables.deliveryQueue.filter { tables.notifications[$0.key]?.url == url }
                .sorted { $0.value < $1.value }.prefix(max(0, limit))
            for (id, _) in taken { change(\.deliveryQueue, id, nil) }
            return taken.compactMap { tables.notifications[$0.key] }
        }
        func queuedURLs() -> [String] {
            // In SQLite's order (bytes).
            Set(tables.deliveryQueue.keys.compactMap { tables.notifications[$0]?.url }).sorted {
                $0.utf8.lexicographicallyPrecedes($1.utf8)
            }
        }
        func hasQueued() -> Bool { !tables.deliveryQueue.isEmpty }
        func hasQueued(url: String) -> Bool {
            tables.deliveryQueue.keys.contains { tables.notifications[$0]?.url == url }
        }
        func queuedCount() -> Int { tables.deliveryQueue.count }
        func delivery(_ id: String) -> (state: OutboxState, attempts: [SendAttempt])? {
            tables.notifications[id].map { ($0.state, $0.attempts) }
        }

        func family(_ id: String) -> Family? { tables.families[id] }
        func family(member account: AccountID) -> Family? {
            tables.familyOfMember[account].flatMap { tables.families[$0] }
        }
        func save(_ family: Family) throws {
            for member in family.members {
                guard tables.accounts[member] != nil else { throw EmulatorStorageError.missing("owner of the family") }
                if let other = tables.familyOfMember[member], other != family.id {
                    throw EmulatorStorageError.duplicate("family member")
                }
            }
            for member in tables.families[family.id]?.members ?? [] where !family.members.contains(member) {
                change(\.familyOfMember, member, nil)
            }
            for member in family.members { change(\.familyOfMember, member, family.id) }
            change(\.families, family.id, family)
        }
        func shares(source: TransactionID) -> [FamilyShare] {
            (tables.shares[source] ?? [:]).values.sorted { $0.memberAccountID.rawValue < $1.memberAccountID.rawValue }
        }
        func save(_ share: FamilyShare) throws {
            var bySource = tables.shares[share.sourceOriginalID] ?? [:]
            bySource[share.memberAccountID] = share
            change(\.shares, share.sourceOriginalID, bySource)
        }
        func notifications(original: TransactionID, limit: Int) -> [OutboundNotification] {
            Array(
                tables.notifications.values.filter { $0.originalTransactionID == original }
                    .sorted { (tables.notificationPositions[$0.id] ?? 0) < (tables.notificationPositions[$1.id] ?? 0) }
                    .prefix(max(0, limit)))
        }

        func notifications(
            bundle: BundleID, environment: Environment, from: Date, to: Date, after: Int64?, limit: Int
        ) -> [(position: Int64, notification: OutboundNotification)] {
            tables.notifications.values.compactMap { notification -> (Int64, OutboundNotification)? in
                guard notification.bundleID == bundle, notification.environment == environment,
                    notification.created >= from, notification.created < to,
                    let position = tables.notificationPositions[notification.id], position > (after ?? 0)
                else { return nil }
                return (position, notification)
            }.sorted { $0.0 < $1.0 }.prefix(limit).map { (position: $0.0, notification: $0.1) }
        }

        func renewalExtensions(original: TransactionID) -> [ExtensionRecord] { tables.extensions[original] ?? [] }
        func insert(_ record: ExtensionRecord) throws {
            let existing = tables.extensions[record.originalTransactionID] ?? []
            guard !existing.contains(where: { $0.requestIdentifier == record.requestIdentifier }) else {
                throw EmulatorStorageError.duplicate("renewal extension")
            }
            change(\.extensions, record.originalTransactionID, existing + [record])
        }
        func massExtension(productID: String, requestIdentifier: String) -> MassExtension? {
            tables.massExtensions[Key(a: productID, b: requestIdentifier)]
        }
        func incompleteMassExtensions(limit: Int) -> [MassExtension] {
            Array(
                tables.massExtensions.values.filter { !$0.complete }
                    .sorted { ($0.productID, $0.requestIdentifier) < ($1.productID, $1.requestIdentifier) }
                    .prefix(max(0, limit)))
        }
        func save(_ progress: MassExtension) {
            change(\.massExtensions, Key(a: progress.productID, b: progress.requestIdentifier), progress)
        }
        func consumption(_ transactionID: TransactionID) -> ConsumptionRecord? { tables.consumption[transactionID] }
        func save(_ consumption: ConsumptionRecord) { change(\.consumption, consumption.transactionID, consumption) }
        func refundRequest(_ transactionID: TransactionID) -> String? { tables.refundRequests[transactionID] }
        func setRefundRequest(_ transactionID: TransactionID, reason: String?) {
            change(\.refundRequests, transactionID, reason)
        }
        func mintedAPIKeys() -> [MintedAPIKey] { tables.apiKeys.sorted { $0.key < $1.key }.map(\.value) }
        func insert(_ key: MintedAPIKey) throws {
            guard !tables.apiKeys.values.contains(where: { $0.keyID == key.keyID }) else {
                throw EmulatorStorageError.duplicate("API key")
            }
            change(\.apiKeys, tables.apiKeys.count, key)
        }
        func useOfferNonce(_ nonce: String) -> Bool {
            guard tables.offerNonces[nonce] == nil else { return false }
            change(\.offerNonces, nonce, true)
            return true
        }

        func retentionItem(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, id: String)
            -> RetentionItem?
        {
            tables.retentionItems[RetentionKey(kind: kind, bundle: bundle, environment: environment, id: id)]
        }
        func save(_ item: RetentionItem) {
            change(
                \.retentionItems,
                RetentionKey(kind: item.kind, bundle: item.bundleID, environment: item.environment, id: item.id), item)
        }
        func deleteRetentionItem(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, id: String)
            -> Bool
        {
            let key = RetentionKey(kind: kind, bundle: bundle, environment: environment, id: id)
            guard tables.retentionItems[key] != nil else { return false }
            change(\.retentionItems, key, nil)
            return true
        }
        func retentionItems(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, limit: Int)
            -> [RetentionItem]
        {
            Array(
                tables.retentionItems.values.filter {
                    $0.kind == kind && $0.bundleID == bundle && $0.environment == environment
                }.sorted { ($0.created, $0.id) < ($1.created, $1.id) }.prefix(max(0, limit)))
        }
        func insert(_ request: RetentionRequestRecord) throws {
            guard tables.retentionRequestIDs[request.requestIdentifier] == nil else {
                throw EmulatorStorageError.duplicate("retention request")
            }
            let position = tables.retentionRequests.count
            change(\.retentionRequests, position, request)
            change(\.retentionRequestIDs, request.requestIdentifier, position)
        }
        func retentionRequests(original: TransactionID, limit: Int) -> [RetentionRequestRecord] {
            Array(
                tables.retentionRequests.sorted { $0.key < $1.key }.map(\.value)
                    .filter { $0.originalTransactionID == original }.suffix(max(0, limit)))
        }

        func setting(_ key: String) -> String? { tables.settings[key] }
        func setSetting(_ key: String, _ value: String) { change(\.settings, key, value) }
    }
}

/// A storage failure the backends report alike (the contract suite checks them).
public struct EmulatorStorageError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable { case duplicate, missing, invalid, locked, io }
    public let kind: Kind
    public let message: String

    static func duplicate(_ what: String) -> Self { Self(kind: .duplicate, message: "the \(what) exists already") }
    static func missing(_ what: String) -> Self { Self(kind: .missing, message: "no such \(what)") }
    static func invalid(_ message: String) -> Self { Self(kind: .invalid, message: message) }

    public var description: String { message }
}
