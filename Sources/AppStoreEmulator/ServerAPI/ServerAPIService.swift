import AppStoreReceipts
import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import StoreKitCatalog
public import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperLogging
import SubscriptionLifecycle
import Synchronization

extension EmulatorError {
    /// One of Apple's App Store Server API errors (its HTTP status is the code's first three digits).
    static func api(_ code: APIErrorCode, _ message: String) -> EmulatorError {
        EmulatorError(status: code.httpStatus, code: String(code.rawValue), message: message)
    }
}

/// Who an App Store Server API request acts for: the app its token names and the environment its path
/// or host names.
public struct APIScope: Sendable, Hashable {
    public var bundleID: String
    public var environment: Environment
    public init(bundleID: String, environment: Environment) {
        self.bundleID = bundleID
        self.environment = environment
    }
}

/// Get Transaction History's and Get Refund History's filters, checked.
struct HistoryFilter: Sendable {
    var start: Date?
    var end: Date?
    var productIDs: Set<String> = []
    var kinds: Set<ProductKind> = []
    var groups: Set<String> = []
    var ownership: OwnershipType?
    var revoked: Bool?
    /// v1 leaves finished consumables out, unless refunded or revoked (Apple keeps those).
    var excludeFinishedConsumables = false
    /// Refund history: refunded purchases only.
    var refundsOnly = false

    func accepts(_ stored: StoredTransaction) -> Bool {
        let transaction = stored.transaction
        if let start, transaction.purchaseDate < start { return false }
        if let end, transaction.purchaseDate >= end { return false }
        if !productIDs.isEmpty, !productIDs.contains(transaction.productID.rawValue) { return false }
        if !kinds.isEmpty, !kinds.contains(transaction.kind) { return false }
        if !groups.isEmpty, !groups.contains(transaction.subscriptionGroupID ?? "") { return false }
        if let ownership, transaction.ownership != ownership { return false }
        if let revoked, (transaction.revocationDate != nil) != revoked { return false }
        if excludeFinishedConsumables, transaction.kind == .consumable, stored.finished,
            transaction.revocationDate == nil
        {
            return false
        }
        if refundsOnly, transaction.revocationDate == nil || transaction.isUpgraded { return false }
        return true
    }
}

/// One page of a history: the transactions, signed, and where the next page starts.
struct HistoryPage: Sendable {
    var signedTransactions: [String]
    var revision: String
    var hasMore: Bool
}

/// The App Store Server API over the store: each endpoint's rules and Apple's errors, typed requests in and
/// typed values out (the routes in ServerAPIRoutes.swift read and write the JSON); what it changes goes
/// through the lifecycle engine and the outbox like every other change. It owns the API's keys, faults and
/// rate limits, and the jobs its requests start (``close()`` cancels them).
public final class ServerAPIService: Sendable {
    /// The store whose customers and transactions the API reads and changes (it owns this service).
    unowned let appStore: AppStore
    /// Keys, faults and rate limits.
    let state: ServerAPIState
    /// Mass extensions, runs of due events and performance tests that requests start.
    let jobs = BackgroundJobs()
    /// The Retention Messaging performance tests this process is running, by request id.
    let performanceRuns = Mutex<Set<String>>([])

    init(appStore: AppStore, state: ServerAPIState) {
        self.appStore = appStore
        self.state = state
    }

    /// Cancels the jobs still running.
    func close() { jobs.close() }

    /// Transactions on one history page.
    static let historyPageSize = 20
    /// Rows one history request looks at, at most (a selective filter gets a short page with `hasMore`).
    static let historyScanLimit = 5_000
    /// History pages Get Refund History v1 reads at most for its one answer (100,000 rows looked at).
    static let refundLookupScans = 20

    /// One page of rows read in batches of 100 from `start` on (`fetch` answers the rows after a position
    /// with their positions), keeping those `accepts` takes: at most `size` (``historyPageSize``), looking at
    /// no more than ``historyScanLimit`` rows. `position` is where the next page starts (after the last row
    /// looked at); `hasMore` when an accepted row was left for it or the scan was cut short.
    static func scanPage<Row>(
        from start: Int64?, size: Int = historyPageSize, fetch: (Int64?, Int) throws -> [(position: Int64, row: Row)],
        accepts: (Row) -> Bool
    ) rethrows -> (rows: [Row], position: Int64?, hasMore: Bool) {
        var rows: [Row] = []
        var position = start
        var scanned = 0
        while scanned < historyScanLimit {
            let batch = try fetch(position, 100)
            for (rowPosition, row) in batch {
                let accepted = accepts(row)
                if accepted, rows.count >= size { return (rows, position, true) }
                scanned += 1
                position = rowPosition
                if accepted { rows.append(row) }
            }
            if batch.count < 100 { return (rows, position, false) }
        }
        return (rows, position, true)
    }

    /// The position a page token (`revision`, `paginationToken`: the prefix, then a position ≥ 0) starts after;
    /// nil for no token, Apple's error `invalid` for one the emulator did not give.
    static func position(
        of token: String?, prefix: Character, invalid: APIErrorCode, _ message: String
    ) throws -> Int64? {
        guard let token else { return nil }
        guard token.first == prefix, let value = Int64(token.dropFirst()), value >= 0 else {
            throw EmulatorError.api(invalid, message)
        }
        return value
    }

    /// The configured app of a token's `bid`.
    func apiApp(_ scope: APIScope) throws -> AppConfiguration {
        guard let app = self.appStore.apps[scope.bundleID] else {
            throw EmulatorError.api(.appNotFound, "App not found.")
        }
        return app
    }

    /// A transaction of the app in the scope's environment, by an id of the customer's.
    func apiTransaction(
        _ id: String, scope: APIScope, in store: any EmulatorStore, invalid: APIErrorCode = .invalidTransactionId,
        notFound: APIErrorCode = .transactionIdNotFound
    ) throws -> (StoredTransaction, Account) {
        guard (1...32).contains(id.utf8.count), id.utf8.allSatisfy({ (48...57).contains($0) }) else {
            throw EmulatorError.api(invalid, "Invalid transaction id.")
        }
        // An app transaction's id names the customer, not a purchase: endpoints about one purchase refuse it.
        if let owner = try store.appTransaction(TransactionID(id)), owner.bundle.rawValue == scope.bundleID {
            throw EmulatorError.api(
                .appTransactionIdNotSupported, "Invalid request. App transactions aren't supported by this endpoint.")
        }
        guard let stored = try store.transaction(TransactionID(id)),
            stored.transaction.bundleID.rawValue == scope.bundleID,
            let account = try store.account(stored.accountID), account.environment == scope.environment
        else { throw EmulatorError.api(notFound, "Transaction id not found.") }
        return (stored, account)
    }

    /// The customer (account and app) of an `anyTransactionId`: a transaction's id, its original's, or the
    /// app transaction's (API 1.20).
    func apiCustomer(_ id: String, scope: APIScope, in store: any EmulatorStore) throws -> (
        account: Account, bundle: BundleID
    ) {
        guard (1...32).contains(id.utf8.count), id.utf8.allSatisfy({ (48...57).contains($0) }) else {
            throw EmulatorError.api(.invalidTransactionId, "Invalid transaction id.")
        }
        if let owner = try store.appTransaction(TransactionID(id)), owner.bundle.rawValue == scope.bundleID {
            guard let account = try store.account(owner.account), account.environment == scope.environment else {
                throw EmulatorError.api(.transactionIdNotFound, "Transaction id not found.")
            }
            return (account, owner.bundle)
        }
        let (stored, account) = try apiTransaction(id, scope: scope, in: store)
        return (account, stored.transaction.bundleID)
    }

    func signed(_ transactions: [StoredTransaction], account: Account) throws -> [String] {
        try transactions.map { try self.appStore.signedTransaction($0, account: account) }
    }

    // MARK: - Transactions

    func apiTransactionInfo(_ id: String, scope: APIScope) async throws -> String {
        try await self.appStore.catchUp()
        let (stored, account) = try await self.appStore.storage.read {
            try self.apiTransaction(id, scope: scope, in: $0)
        }
        return try self.appStore.signedTransaction(stored, account: account)
    }

    /// Finish Transaction (API 1.20): the server says it delivered the purchase, and the transaction leaves
    /// the devices' queue of unfinished transactions as the app's own `finish()` takes it out. Idempotent.
    func apiFinishTransaction(_ id: String, scope: APIScope) async throws {
        try await self.appStore.storage.write { store in
            var (stored, _) = try self.apiTransaction(id, scope: scope, in: store)
            guard !stored.finished else { return }
            stored.finished = true
            try store.update(stored)
        }
    }

    /// A page of the customer's history in the order transactions last changed, from `revision`: at most
    /// `size` transactions (signed: a caller that needs fewer than a page asks for fewer).
    func apiHistory(
        _ id: String, scope: APIScope, filter: HistoryFilter, descending: Bool, revision: String?,
        size: Int = historyPageSize
    ) async throws -> HistoryPage {
        let start = try Self.position(
            of: revision, prefix: "r", invalid: .invalidRequestRevision, "Invalid request revision.")
        try await self.appStore.catchUp()
        let (page, account, next, hasMore) = try await self.appStore.storage.read {
            store -> ([StoredTransaction], Account, Int64, Bool) in
            let (account, bundle) = try self.apiCustomer(id, scope: scope, in: store)
            let scan = try Self.scanPage(from: start, size: size) { position, limit in
                try store.transactions(
                    account: account.id, bundle: bundle, revisionAfter: position,
                    descending: descending, limit: limit
                ).map { ($0.revision, $0) }
            } accepts: {
                filter.accepts($0)
            }
            return (scan.rows, account, scan.position ?? 0, scan.hasMore)
        }
        return HistoryPage(
            signedTransactions: try signed(page, account: account), revision: "r\(next)", hasMore: hasMore)
    }

    // MARK: - Subscriptions

    /// One subscription's latest transaction and renewal info, signed.
    struct SubscriptionStatusItem: Sendable {
        var groupID: String
        var status: SubscriptionStatus
        var originalTransactionID: String
        var signedTransactionInfo: String
        var signedRenewalInfo: String
    }

    func apiSubscriptionStatuses(_ id: String, scope: APIScope, statuses: Set<Int64>) async throws
        -> [SubscriptionStatusItem]
    {
        try await self.appStore.catchUp()
        let current = self.appStore.now
        let (account, rows) = try await self.appStore.storage.read { store in
            let (account, bundle) = try self.apiCustomer(id, scope: scope, in: store)
            var rows: [(StoredSubscription, StoredTransaction, Date?)] = []
            for subscription in try store.subscriptions(account: account.id, bundle: bundle)
            where statuses.isEmpty || statuses.contains(subscription.state.status.rawValue) {
                guard let latest = try store.transaction(subscription.latestTransactionID) else { continue }
                let first = try store.purchaseDate(of: subscription.originalTransactionID)
                rows.append((subscription, latest, first))
            }
            return (account, rows)
        }
        return try rows.map { subscription, latest, started in
            let info = self.appStore.renewalInfo(
                subscription.state, account: account, signedDate: current, started: started,
                latest: latest.transaction)
            return SubscriptionStatusItem(
                groupID: latest.transaction.subscriptionGroupID
                    ?? self.appStore.catalog.entry(subscription.state.productID.rawValue)?.subscription?.groupID ?? "",
                status: subscription.state.status, originalTransactionID: subscription.originalTransactionID.rawValue,
                signedTransactionInfo: try self.appStore.signedTransaction(latest, account: account),
                signedRenewalInfo: try self.appStore.sign(info))
        }
    }

    // MARK: - Orders

    /// The transactions of an order: status 0 with them, or 1 when the order is not the app's.
    func apiLookUpOrder(_ orderID: String, scope: APIScope) async throws -> (status: Int, signed: [String]) {
        guard (1...64).contains(orderID.utf8.count), orderID.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) })
        else { return (1, []) }
        try await self.appStore.catchUp()
        let found = try await self.appStore.storage.read { store -> (Account, [StoredTransaction])? in
            let rows = try store.transactions(orderID: orderID.uppercased()).filter {
                $0.transaction.bundleID.rawValue == scope.bundleID
            }
            guard let first = rows.first, let account = try store.account(first.accountID),
                account.environment == scope.environment
            else { return nil }
            return (account, rows)
        }
        guard let (account, rows) = found else { return (1, []) }
        return (0, try signed(rows, account: account))
    }

    // MARK: - Renewal-date extensions

    /// Extensions allowed per subscription within a year.
    static let maxExtensionsPerYear = 2

    /// Extends one subscription's renewal date inside a write (RENEWAL_EXTENDED); the same request identifier
    /// answers what it answered before.
    func extendRenewal(
        _ subscription: StoredSubscription, account: Account, request: ExtensionRequest, in store: any EmulatorStore,
        now: Date
    ) throws -> ExtensionRecord {
        let records = try store.renewalExtensions(original: subscription.originalTransactionID)
        if let earlier = records.first(where: { $0.requestIdentifier == request.requestIdentifier }) { return earlier }
        guard let latest = try store.transaction(subscription.latestTransactionID),
            latest.transaction.ownership != .familyShared
        else {
            throw EmulatorError.api(
                .familySharedSubscriptionExtensionIneligible, "Family-shared subscriptions cannot be extended.")
        }
        // Apple extends paid periods only: a subscription in a free offer period is ineligible (4030004).
        guard latest.transaction.offer?.isFreeTrial != true else {
            throw EmulatorError.api(
                .subscriptionExtensionIneligible, "Subscriptions in a free offer period cannot be extended.")
        }
        let yearAgoCount = records.filter { self.appStore.rate.end(of: StorePeriod(years: 1), from: $0.date) > now }
            .count
        guard yearAgoCount < Self.maxExtensionsPerYear else {
            throw EmulatorError.api(
                .subscriptionMaxExtension, "The subscription has been extended twice in the past 365 days.")
        }
        var changed = subscription
        let effects: [LifecycleEffect]
        do {
            effects = try self.appStore.lifecycle(for: account).handle(
                .extendRenewal(days: request.days), to: &changed.state, at: now)
        } catch {
            throw EmulatorError.api(.subscriptionExtensionIneligible, "The subscription is not eligible: \(error)")
        }
        try self.appStore.apply(effects, to: &changed, account: account, in: store, now: now)
        let record = ExtensionRecord(
            originalTransactionID: subscription.originalTransactionID, requestIdentifier: request.requestIdentifier,
            date: now, effectiveDate: changed.state.expiresDate ?? now,
            webOrderLineItemID: latest.transaction.webOrderLineItemID.map { String($0) } ?? "")
        try store.insert(record)
        return record
    }

    func apiExtend(originalTransactionID id: String, request: ExtensionRequest, scope: APIScope) async throws
        -> ExtensionRecord
    {
        try await self.appStore.catchUp()
        let current = self.appStore.now
        return try await self.appStore.storage.write { store in
            let (stored, account) = try self.apiTransaction(
                id, scope: scope, in: store, invalid: .invalidOriginalTransactionId,
                notFound: .originalTransactionIdNotFound)
            guard stored.transaction.originalID == stored.id else {
                throw EmulatorError.api(.originalTransactionIdNotFound, "Original transaction id not found.")
            }
            guard stored.transaction.ownership != .familyShared else {
                throw EmulatorError.api(
                    .familySharedSubscriptionExtensionIneligible, "Family-shared subscriptions cannot be extended.")
            }
            guard stored.transaction.kind == .autoRenewable, let subscription = try store.subscription(stored.id) else {
                throw EmulatorError.api(.subscriptionExtensionIneligible, "Not an auto-renewable subscription.")
            }
            return try self.extendRenewal(subscription, account: account, request: request, in: store, now: current)
        }
    }

    // MARK: - Mass extensions (ServerAPIService+MassExtensions.swift)

    /// Mass extensions running now (``maxMassExtensions`` at most).
    let massExtensionsRunning = Atomic<Int>(0)
    /// Whether incomplete mass extensions were resumed (once a process: a scheduler started again finds its
    /// own still running).
    let massExtensionsResumed = Atomic<Bool>(false)

    // MARK: - Notifications (ServerAPIService+Notifications.swift)

    // MARK: - Consumption, app account tokens, app transactions

    /// Send Consumption Information (v2, or v1's integer codes): checked and kept with the transaction.
    func apiConsumption(_ id: String, _ information: ConsumptionInformation, scope: APIScope) async throws {
        let text = information.stored
        try await self.appStore.storage.write { store in
            let (stored, _) = try self.apiTransaction(id, scope: scope, in: store)
            // v1 is for consumables and auto-renewable subscriptions; v2 for any purchase but a family member's.
            if information.version == 1, ![.consumable, .autoRenewable].contains(stored.transaction.kind) {
                throw EmulatorError.api(
                    .invalidTransactionTypeNotSupported,
                    "Invalid request. The transaction id is not a consumable or an auto-renewable subscription.")
            }
            if information.version == 2, stored.transaction.ownership == .familyShared {
                throw EmulatorError.api(.familyTransactionNotSupported, "Family-shared transactions are not supported.")
            }
            if information.hasPercentage, stored.transaction.kind == .autoRenewable {
                throw EmulatorError.api(
                    .consumptionPercentageAutoRenewableSubscription,
                    "Invalid request. The consumption percentage field is not supported for auto-renewable subscription transactions."
                )
            }
            try store.save(ConsumptionRecord(transactionID: stored.id, version: information.version, body: text))
        }
    }

    /// Set App Account Token: on the purchase and every transaction of it (renewals carry it on).
    func apiSetAppAccountToken(originalTransactionID id: String, token: UUID, scope: APIScope) async throws {
        try await self.appStore.catchUp()
        try await self.appStore.storage.write { store in
            let (stored, _) = try self.apiTransaction(
                id, scope: scope, in: store, invalid: .invalidOriginalTransactionId,
                notFound: .originalTransactionIdNotFound)
            guard stored.transaction.originalID == stored.id else {
                throw EmulatorError.api(
                    .transactionIdNotOriginalTransactionId, "The transaction id is not an original transaction id.")
            }
            guard stored.transaction.ownership != .familyShared else {
                throw EmulatorError.api(.familyTransactionNotSupported, "Family-shared transactions are not supported.")
            }
            for var row in try store.transactions(original: stored.id) {
                row.transaction.appAccountToken = token.uuidString.lowercased()
                try store.update(row)
            }
        }
    }

    /// Get App Transaction Info: the customer's app transaction, from their earliest install of the app.
    func apiAppTransaction(_ id: String, scope: APIScope) async throws -> String {
        let app = try apiApp(scope)
        let (account, install, appTransactionID) = try await self.appStore.storage.read {
            store -> (Account, Install?, TransactionID?) in
            let (account, bundle) = try self.apiCustomer(id, scope: scope, in: store)
            return (
                account, try store.installs(account: account.id, bundle: bundle).first,
                try store.appTransactionID(account: account.id, bundle: bundle)
            )
        }
        guard let install else {
            throw EmulatorError.api(.appTransactionDoesNotExist, "No app transaction exists for the customer.")
        }
        var payload = AppTransaction(
            app: app, install: install, environment: account.environment, created: self.appStore.now,
            deviceVerification: "",
            nonce: UUID(bytes: self.appStore.randomBytes(16)))
        // No device asked: nothing to verify it against.
        payload.json["deviceVerification"] = nil
        payload.json["deviceVerificationNonce"] = nil
        if let appTransactionID { payload.json["appTransactionId"] = .string(appTransactionID.rawValue) }
        return try self.appStore.sign(payload.json)
    }

    // MARK: - Keys

    /// Mints an API key for an app as App Store Connect does: a new P-256 key whose private half is
    /// returned once (PKCS#8 PEM) and never kept.
    public func mintAPIKey(bundleID: String) async throws -> (keyID: String, issuerID: String, privateKey: String) {
        _ = try self.appStore.app(bundleID)
        let key = try PrivateKey.generateP256()
        let publicDER = try key.publicKey.derEncoded
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        let keyID = String(self.appStore.randomBytes(10).map { alphabet[Int($0) % alphabet.count] })
        let fresh = self.appStore.newUUID().lowercased()
        let issuerID = try await self.appStore.storage.write { store -> String in
            let issuer = try store.setting(AppStore.Setting.apiIssuerID) ?? fresh
            try store.setSetting(AppStore.Setting.apiIssuerID, issuer)
            try store.insert(MintedAPIKey(keyID: keyID, issuerID: issuer, bundleID: bundleID, publicKey: publicDER))
            return issuer
        }
        let publicKey = try key.publicKey
        state.keyRing.keys.withLock {
            $0[keyID] = APIKey(keyID: keyID, issuerID: issuerID, publicKey: publicKey, bundleIDs: [bundleID])
        }
        return (keyID, issuerID, try key.pemPKCS8())
    }

    /// The keys registered for an app (ids and issuers; public halves only).
    public func apiKeys(bundleID: String) throws -> [(keyID: String, issuerID: String)] {
        _ = try self.appStore.app(bundleID)
        return state.keyRing.keys.withLock { keys in
            keys.values.filter { $0.bundleIDs.contains(bundleID) }.map { ($0.keyID, $0.issuerID) }.sorted {
                $0.keyID < $1.keyID
            }
        }
    }
}
