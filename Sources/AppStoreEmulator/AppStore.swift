import AppStoreReceipts
import AppStoreSignedData
public import Foundation
public import StoreKitCatalog
public import StoreModel
public import StoreTime
public import StorekeeperCrypto
import StorekeeperJSON
public import StorekeeperLogging
import SubscriptionLifecycle
import Synchronization

/// A caller mistake or a missing resource, reported by the API as a 4xx JSON error.
public struct EmulatorError: Error, Sendable, Hashable, CustomStringConvertible {
    public let status: Int
    public let code: String
    public let message: String

    static func notFound(_ what: String) -> EmulatorError {
        EmulatorError(status: 404, code: "not_found", message: what)
    }
    static func invalid(_ what: String) -> EmulatorError {
        EmulatorError(status: 400, code: "invalid_request", message: what)
    }
    static func conflict(_ what: String) -> EmulatorError {
        EmulatorError(status: 409, code: "conflict", message: what)
    }
    static func configuration(_ what: String) -> EmulatorError {
        EmulatorError(status: 500, code: "configuration", message: what)
    }

    public var description: String { message }
}

/// The emulated App Store: catalogue, accounts, devices, installs, the payment queue, receipts and signed
/// data, a virtual clock with renewals.
///
/// An orchestrator: each operation runs its rules inside one storage transaction (``EmulatorStorage``),
/// which stores only the rows it touches and is durable when the call returns, and answers typed values;
/// wire JSON is the HTTP layer's business (`responder()`). Signing happens after the commit, outside the
/// writer. Work that falls due on the store clock (renewals) sits in the due-events table; the scheduler
/// (``startScheduler()``) runs it when it falls due, and every request runs what is already due first.
public final class AppStore: Sendable {
    let catalog: Catalog
    let apps: [String: AppConfiguration]
    public let pki: EmulatorPKI
    /// Signs StoreKit 2 data with the emulator's JWS chain (its header encoded once).
    let signer: JWSChainSigner
    /// The signer's header and its fingerprint (``StoredJWS``), made once.
    let signerHeader: StoredJWS.Header
    /// Verifies the emulator's own receipts; one instance, so certificate paths are validated once.
    let receiptVerifier: ReceiptVerifier
    let storage: any EmulatorStorage
    let realNow: @Sendable () -> Date
    let randomBytes: @Sendable (Int) -> [UInt8]
    let logger: Logger
    private let clockState: Mutex<VirtualClock>
    /// The earliest due event's store time, kept in step with the due-events table by every write.
    private let nextDue: Mutex<Date?>
    private let directoryLock: DirectoryLock
    private let scheduler = Mutex<Task<Void, Never>?>(nil)
    /// Products taken off sale (`POST …/products/{id}/availability`); renewals to them expire.
    let productsNotForSale: Mutex<Set<ProductID>>
    /// Notifications this process has claimed and not yet recorded a result for (each holds a delivery
    /// slot): a lease that falls due meanwhile does not send again.
    let notificationsInFlight = Mutex(InFlight())
    /// Notifications sent at once at most; the rest wait in the outbox's delivery queue.
    public let maxNotificationsInFlight: Int
    /// Bumped whenever a delivery slot is given back (only that lets a queued notification move); a claim
    /// that found nothing it could take notes the value it started with in `deliveryQueueSettled`, so that
    /// no write asks the queue again until the next bump.
    let deliveryQueueEpoch = Atomic<UInt64>(1)
    let deliveryQueueSettled = Atomic<UInt64>(0)
    /// Where the next claim from the queue starts among the receivers waiting (each pass, the next one).
    let deliveryQueueTurn = Atomic<Int>(0)
    let deliveryLanes = DeliveryLanes(
        lanes: AppStore.deliveryLanes, perReceiver: AppStore.deliveryLanesPerReceiver,
        reserve: AppStore.deliveryLanesReserve)
    /// The next identifiers to give, read from their settings at first use. Writes run one at a time, so
    /// the cache follows the stored counters; a write rolled back leaves it ahead of them (a gap, as
    /// Apple's identifiers have), never behind, since each identifier given stores its successor.
    private let counters = Mutex<[String: Int64]>([:])
    /// Notification settings per app and environment, from `--config` and `PUT …/notifications`.
    let notificationSettings: Mutex<[String: AppNotifications]>
    /// The keys that sign each app's promotional offers, by key id.
    let offerKeys: [String: [String: PublicKey]]
    /// Whether any family was ever made: until then no change needs the family tables.
    let familiesExist: Mutex<Bool>
    /// The App Store Server API's keys, faults and rate limits, read with the rest of the state at start.
    private let serverAPIState: ServerAPIState
    private let serverAPIService = Mutex<ServerAPIService?>(nil)

    /// The App Store Server API over this store (made on first use: it holds the store unowned).
    public var serverAPI: ServerAPIService {
        serverAPIService.withLock { service in
            if let service { return service }
            let made = ServerAPIService(appStore: self, state: serverAPIState)
            service = made
            return made
        }
    }

    /// Renewals stop after this many in the sandbox, as Apple's sandbox does.
    public static let sandboxRenewalCap = 12
    /// A revoked licence's receipt stops validating this long after the revocation.
    public static let vppGrace: TimeInterval = 30 * 86_400
    /// The store clock never passes this date (2049-01-01), a year before the emulator's certificates end;
    /// a renewal that would end after it is refused (the subscription expires instead).
    public static let horizon = Date(timeIntervalSince1970: 2_493_072_000)
    /// The longest advance one request may make: P10Y as written (at accelerated rates that is ten years
    /// of renewals, each a few seconds or minutes of store time).
    public static let maxAdvance = StorePeriod(years: 10)
    /// Due events one request runs by default at most; the scheduler runs the rest in the background.
    public static let defaultMaxEventsPerRequest = 10_000
    /// Due events one request runs at most.
    public let maxEventsPerRequest: Int
    /// How long a notification that is done, delivered or failed for good, stays in the outbox and its
    /// history, measured at the store's time rate like Apple's retry schedule (at an accelerated rate, 180
    /// days is the store time in which 180 days of renewals happen); nil keeps every one. Apple's
    /// notification history reaches 180 days back.
    public let notificationRetention: StorePeriod?
    /// Done notifications one prune deletes per transaction.
    static let pruneBatch = 1_000
    /// Real time between prunes of the scheduler (a prune that filled its batches goes on at once).
    static let pruneInterval: Duration = .seconds(1)
    /// When the scheduler last pruned (real time), and whether a prune is running.
    private let pruning = Mutex<(last: ContinuousClock.Instant?, running: Bool)>((nil, false))

    enum Setting {
        static let nextTransactionID = "nextTransactionID"
        static let nextWebOrderLineItemID = "nextWebOrderLineItemID"
        static let clockOffset = "clockOffset"
        static let rate = "rate"
        static let productsNotForSale = "productsNotForSale"
        static let familiesExist = "familiesExist"
        /// API keys minted at run time (`POST …/apps/{bundleId}/api-keys`), as a JSON array.
        static let apiKeys = "apiKeys"
        static let apiIssuerID = "apiIssuerID"
        /// A subscription's renewal-date extensions (App Store Server API), as a JSON array.
        static func extensions(_ originalID: TransactionID) -> String { "extensions.\(originalID.rawValue)" }
        /// A mass extension request's progress.
        static func massExtension(_ productID: String, _ requestID: String) -> String {
            "massExtension.\(productID).\(requestID)"
        }
        /// Consumption information sent for a transaction.
        static func consumption(_ transactionID: TransactionID) -> String { "consumption.\(transactionID.rawValue)" }
        static func notifications(_ bundleID: String) -> String { "notifications.\(bundleID)" }
        /// A JWS protected header the outbox's stored payloads name by fingerprint (``StoredJWS``).
        static func jwsHeader(_ fingerprint: String) -> String { "jwsHeader.\(fingerprint)" }
        /// A customer's refund request waiting for Apple's decision: its reason, or "" when there is none.
        static func refundRequest(_ transactionID: TransactionID) -> String {
            "refundRequest.\(transactionID.rawValue)"
        }
    }

    /// Opens the store kept in `dataDirectory` (certificates, a lock, and the state in SQLite unless
    /// `storage` is given), creating it on first start. A directory another emulator holds, or whose
    /// certificates exist but cannot be read, is an error.
    public init(
        catalog: [StoreKitConfiguration], apps: [AppConfiguration], dataDirectory: URL, rate: TimeRate? = nil,
        storage: (any EmulatorStorage)? = nil, logger: Logger = .disabled,
        maxEventsPerRequest: Int = AppStore.defaultMaxEventsPerRequest,
        maxNotificationsInFlight: Int = AppStore.defaultMaxNotificationsInFlight,
        notificationRetention: StorePeriod? = nil,
        realNow: @escaping @Sendable () -> Date = { Date() },
        randomBytes: @escaping @Sendable (Int) -> [UInt8] = {
            (try? SecureRandom.bytes($0)) ?? [UInt8](repeating: 0, count: $0)
        }
    ) async throws {
        directoryLock = try DirectoryLock(directory: dataDirectory)
        self.catalog = Catalog(catalog)
        self.offerKeys = try Self.loadOfferKeys(apps: apps, catalogs: catalog)
        self.apps = Dictionary(apps.map { ($0.bundleID, $0) }, uniquingKeysWith: { first, _ in first })
        self.pki = try EmulatorPKI.loadOrCreate(in: dataDirectory.appendingPathComponent("pki"))
        self.signer = try JWSChainSigner(
            key: pki.signedData.leafKey, chain: [pki.signedData.leaf, pki.signedData.intermediate, pki.signedData.root])
        self.signerHeader = StoredJWS.Header(Array(signer.encodedHeader.utf8))
        self.receiptVerifier = ReceiptVerifier(trustedRoots: [pki.receipts.root])
        self.realNow = realNow
        self.randomBytes = randomBytes
        self.logger = logger
        self.maxEventsPerRequest = max(1, maxEventsPerRequest)
        self.maxNotificationsInFlight = max(1, maxNotificationsInFlight)
        self.notificationRetention = notificationRetention
        let opened: any EmulatorStorage
        if let storage {
            opened = storage
        } else {
            opened = try await SQLiteEmulatorStorage(path: dataDirectory.appendingPathComponent("store.sqlite").path)
        }
        self.storage = opened
        let configured = apps
        let (header, fingerprint) = (signer.encodedHeader, self.signerHeader.fingerprint)
        let (clock, due, notForSale, notifications, families, mintedKeys) = try await opened.write { store in
            if let rate { try store.setSetting(Setting.rate, rate.name) }
            // Registered before any notification is written, so the outbox may keep its payloads short.
            let headerKey = Setting.jwsHeader(fingerprint)
            if try store.setting(headerKey) != header { try store.setSetting(headerKey, header) }
            let rate = try store.setting(Setting.rate).flatMap(TimeRate.init(name:)) ?? .monthlyRenewalEveryFiveMinutes
            let offset = try store.setting(Setting.clockOffset).flatMap(TimeInterval.init) ?? 0
            let notForSale = Set(
                (try store.setting(Setting.productsNotForSale) ?? "").split(separator: ",").map {
                    ProductID(String($0))
                })
            // Settings made at run time win over the configuration file's.
            var notifications: [String: AppNotifications] = [:]
            for app in configured {
                if let stored = try store.setting(Setting.notifications(app.bundleID)),
                    let parsed = try? AppNotifications(json: JSONParser.parse(Array(stored.utf8)))
                {
                    notifications[app.bundleID] = parsed
                } else if let fromConfiguration = app.notifications {
                    notifications[app.bundleID] = fromConfiguration
                }
            }
            // Sends a stopped process had claimed but not finished are made again now (at least once).
            let clock = VirtualClock(rate: rate, offset: offset)
            let started = clock.now(real: realNow())
            while case let leases = try store.events(kind: .notificationLease, limit: 1_000), !leases.isEmpty {
                for lease in leases {
                    try store.cancel(kind: .notificationLease, key: lease.key)
                    try store.schedule(DueEvent(kind: .notificationAttempt, key: lease.key, due: started))
                }
            }
            return (
                clock, try store.nextDue(), notForSale, notifications, try store.setting(Setting.familiesExist) != nil,
                try store.setting(Setting.apiKeys)
            )
        }
        serverAPIState = try ServerAPIState(apps: apps, minted: mintedKeys)
        clockState = Mutex(clock)
        nextDue = Mutex(due)
        productsNotForSale = Mutex(notForSale)
        notificationSettings = Mutex(notifications)
        familiesExist = Mutex(families)
    }

    deinit { scheduler.withLock { $0?.cancel() } }

    // MARK: - Clock and the scheduler

    public var rate: TimeRate { clockState.withLock { $0.rate } }

    /// Store time now: the real time plus every advance.
    public var now: Date {
        let clock = clockState.withLock { $0 }
        return clock.now(real: realNow())
    }

    /// Advances store time by `period` at the current rate (and switches rate first when asked), then runs
    /// everything that fell due, in order.
    public func setClock(advance period: StorePeriod?, rate newRate: TimeRate?) async throws -> ClockChange {
        let realNow = self.realNow
        try await storage.write { store in
            var clock = self.clockState.withLock { $0 }
            if let newRate { clock.rate = newRate }
            if let period {
                let real = realNow()
                let before = clock.now(real: real)
                guard
                    TimeRate.realTime.end(of: period, from: before)
                        <= TimeRate.realTime.end(of: Self.maxAdvance, from: before)
                else {
                    throw EmulatorError.invalid("member 'advance' must be at most P10Y per request")
                }
                clock.advance(by: period, real: real)
                let after = clock.now(real: real)
                guard after <= Self.horizon else {
                    throw EmulatorError.invalid(
                        "the store clock cannot pass 2049-01-01, a year before the emulator's certificates end")
                }
            }
            try store.setSetting(Setting.rate, clock.rate.name)
            try store.setSetting(Setting.clockOffset, String(clock.offset))
            // Writes are serialised, so the cached clock follows the order of the stored one.
            self.clockState.withLock { $0 = clock }
        }
        let ran = try await runDue(maxEvents: maxEventsPerRequest)
        // The change is made; a prune that fails is the scheduler's to retry, not this request's error.
        do { try await pruneNotifications() } catch {
            logger.error("notifications.prune-failed", ["error": String(describing: error)])
        }
        return ClockChange(now: now, rate: rate, ran: ran)
    }

    /// Deletes the notifications that are done and older than ``notificationRetention``, in
    /// transactions of ``pruneBatch``, at most `maxBatches` of them (the next prune goes on); returns how
    /// many it deleted. Nothing without a retention. Pending notifications, and so every one still owed an
    /// attempt, stay whatever their age.
    @discardableResult
    public func pruneNotifications(maxBatches: Int = 100) async throws -> Int {
        guard let retention = notificationRetention else { return 0 }
        let current = now
        let before = current.addingTimeInterval(-rate.end(of: retention, from: current).timeIntervalSince(current))
        var deleted = 0
        for _ in 0..<max(0, maxBatches) {
            let count = try await storage.write { store in
                try store.pruneNotifications(createdBefore: before, limit: Self.pruneBatch)
            }
            deleted += count
            if count < Self.pruneBatch { break }
        }
        if deleted > 0 { logger.info("notifications.pruned", ["count": String(deleted)]) }
        return deleted
    }

    /// The scheduler's prune: at most once per ``pruneInterval`` and one at a time.
    private func pruneIfDue() async {
        guard notificationRetention != nil else { return }
        let start = ContinuousClock.now
        let due = pruning.withLock { state in
            guard !state.running, state.last.map({ start - $0 >= Self.pruneInterval }) ?? true else { return false }
            state.running = true
            return true
        }
        guard due else { return }
        do { try await pruneNotifications() } catch {
            logger.error("scheduler.failed", ["error": String(describing: error)])
        }
        pruning.withLock { $0 = (ContinuousClock.now, false) }
    }

    /// Runs what already fell due, if anything did: every request calls this first, so a receipt fetched
    /// after a renewal date carries the renewal even between scheduler wake-ups.
    public func catchUp() async throws {
        guard let due = nextDue.withLock({ $0 }), due <= now else {
            try await sendQueued()
            return
        }
        try await runDue(maxEvents: maxEventsPerRequest)
    }

    /// Runs due events in store-time order, in transactions of at most `batch` events, until none is due or
    /// `maxEvents` ran; returns what ran and whether none is left due (the scheduler runs the rest).
    @discardableResult
    func runDue(batch: Int = 256, maxEvents: Int = .max) async throws -> DueWork {
        var work = DueWork()
        while true {
            guard work.events < maxEvents else {
                work.caughtUp = false
                return work
            }
            let limit = min(batch, maxEvents - work.events)
            let current = now
            // Slots this batch takes, given back if its write does not commit.
            let claims = SlotClaims()
            let batchWork: DueWork
            do {
                batchWork = try await storage.write { store -> DueWork in
                    var batchWork = DueWork()
                    // Notifications waiting for a slot go first (the queue keeps the outbox's order).
                    for notification in try self.claimQueued(in: store, now: current, claims: claims) {
                        batchWork.claimed(notification)
                    }
                    var earliestNew: Date?
                    // The batch's V2 notifications are signed together, on every core, before it commits.
                    let signing = V2Signing.Batch()
                    try V2Signing.$batch.withValue(signing) {
                        for event in try store.due(until: current, limit: limit) {
                            // An event scheduled by this batch may come before the rest of it: fetch again.
                            if let earliestNew, event.due > earliestNew { break }
                            let outcome = try self.handle(event, in: store, now: current, claims: claims)
                            if case .renewed(let scheduled) = outcome {
                                earliestNew = min(earliestNew ?? scheduled, scheduled)
                            }
                            batchWork.record(outcome)
                        }
                    }
                    // Their first attempts are due now: claimed in this same transaction (a lease, not an
                    // attempt to claim in the next one), sent once it has committed; with no slot free, or
                    // others waiting for one, queued behind them.
                    for var notification in try signing.sign() {
                        try store.insert(notification)
                        notification.compactPayload = nil
                        if try self.claimOrQueue(notification, in: store, now: current, claims: claims) {
                            batchWork.claimed(notification)
                        }
                    }
                    let next = try store.nextDue()
                    self.nextDue.withLock { $0 = next }
                    return batchWork
                }
            } catch {
                releaseDeliverySlots(claims)
                // The body may have moved the cached next due time past events its rollback kept: look again
                // at the next run.
                nextDue.withLock { $0 = min($0 ?? current, current) }
                throw error
            }
            deliver(batchWork.sends)
            if batchWork.events == 0 { return work }
            work.add(batchWork)
        }
    }

    /// Starts the task that sleeps until the next due event and runs it, so renewals happen while no
    /// request arrives. It re-reads the next due time at least every `granularity` seconds, as writes and
    /// clock changes move it.
    public func startScheduler(granularity: Duration = .milliseconds(250)) {
        scheduler.withLock { task in
            guard task == nil else { return }
            task = Task { [weak self] in
                while !Task.isCancelled {
                    guard let self else { return }
                    // First, so a scheduler that always finds events due prunes too.
                    await self.pruneIfDue()
                    var wait = granularity
                    if let due = self.nextDue.withLock({ $0 }) {
                        let delay = due.timeIntervalSince(self.now)
                        if delay <= 0 {
                            do { try await self.runDue(maxEvents: 1_024) } catch {
                                self.logger.error("scheduler.failed", ["error": String(describing: error)])
                            }
                            continue
                        }
                        wait = min(wait, .milliseconds(Int64(delay * 1000) + 1))
                    }
                    // Queued notifications move as results free slots; after a restart, this starts them.
                    do { try await self.sendQueued() } catch {
                        self.logger.error("scheduler.failed", ["error": String(describing: error)])
                    }
                    try? await Task.sleep(for: wait)
                }
            }
        }
    }

    /// Stops the scheduler and gives up the data directory, so another emulator may open it. The store
    /// must not be used afterwards.
    public func close() {
        serverAPIService.withLock { $0 }?.close()
        stopScheduler()
        directoryLock.release()
    }

    /// Stops the scheduler (idempotent).
    public func stopScheduler() {
        scheduler.withLock { task in
            task?.cancel()
            task = nil
        }
    }

    /// Schedules an event within a write and keeps the cached next due time in step.
    func schedule(_ event: DueEvent, in store: any EmulatorStore) throws {
        try store.schedule(event)
        nextDue.withLock { $0 = min($0 ?? event.due, event.due) }
    }

    /// Applies one due event and says what it did.
    private func handle(_ event: DueEvent, in store: any EmulatorStore, now: Date, claims: SlotClaims) throws
        -> DueWork.Outcome
    {
        try store.cancel(kind: event.kind, key: event.key)
        let originalID = TransactionID(event.key)
        switch event.kind {
        case .renewal:
            return try runLifecycle(.periodEnded, originalID: originalID, in: store, now: event.due) ?? .nothing
        case .gracePeriodEnd:
            return try runLifecycle(.gracePeriodEnded, originalID: originalID, in: store, now: event.due) ?? .nothing
        case .billingRetryEnd:
            return try runLifecycle(.billingRetryEnded, originalID: originalID, in: store, now: event.due) ?? .nothing
        case .notificationAttempt, .notificationLease:
            return try claimAttempt(event.key, in: store, now: now, claims: claims)
        default:
            logger.warning("scheduler.unknown-event", ["event.kind": event.kind.rawValue])
            return .nothing
        }
    }

    /// Transactions stored, for every account.
    public func transactionCount() async throws -> Int { try await storage.read { try $0.transactionCount() } }

    // MARK: - Identifiers

    func newTransactionID(in store: any EmulatorStore) throws -> TransactionID {
        TransactionID(String(try next(Setting.nextTransactionID, from: 2_000_000_000_000_001, in: store)))
    }

    func newWebOrderLineItemID(in store: any EmulatorStore) throws -> Int64 {
        try next(Setting.nextWebOrderLineItemID, from: 2_000_000_100_000_001, in: store)
    }

    /// The counter's next value (within a write); its successor is stored.
    private func next(_ setting: String, from first: Int64, in store: any EmulatorStore) throws -> Int64 {
        let cached = counters.withLock { $0[setting] }
        let next = try cached ?? store.setting(setting).flatMap(Int64.init) ?? first
        try store.setSetting(setting, String(next + 1))
        counters.withLock { $0[setting] = next + 1 }
        return next
    }

    func newUUID() -> String { UUID(bytes: randomBytes(16)).uuidString }

    /// A time-ordered (version 7) UUID on the store clock: rows keyed by it are appended to their indexes
    /// rather than written at random pages (at 10,000 subscribers, one 4 KiB page per row and index).
    func newTimeOrderedUUID(at now: Date) -> String {
        UUID(milliseconds: ReceiptDate.milliseconds(now), bytes: randomBytes(10)).uuidString
    }

    /// A notification's `notificationUUID`: time-ordered (the outbox's id index and the attempts' due events
    /// are keyed by it), lowercase as Apple sends it.
    func newNotificationUUID(at now: Date) -> String { newTimeOrderedUUID(at: now).lowercased() }

    /// An order id as on Apple's e-mailed invoices: ten characters of A–Z and 0–9. The first four are the
    /// store-clock hour since 1970 in base 36 (digits before letters, so ids sort in time order until 2161),
    /// the other six random: every period billed gets one, and random ids put each renewal's entry in the
    /// order index on a page of its own (the largest share of a renewal's WAL frames, by page, before).
    func newOrderID(at now: Date) -> String {
        let digits = Self.orderIDDigits
        var hours = Int(min(max(0, now.timeIntervalSince1970 / 3_600), 1_679_615))
        var prefix = [Character](repeating: "0", count: 4)
        for index in prefix.indices.reversed() {
            prefix[index] = digits[hours % 36]
            hours /= 36
        }
        return String(prefix + randomBytes(6).map { digits[Int($0) % digits.count] })
    }

    /// Base-36 digits in ASCII order (made once: every period billed takes an order id).
    private static let orderIDDigits = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")

    // MARK: - Accounts, devices, installs

    public func createAccount(environment: Environment, storefront: String) async throws -> Account {
        guard environment == .sandbox || environment == .production else {
            throw EmulatorError.invalid("environment must be Sandbox or Production")
        }
        guard let storefront = Storefront(countryCode: storefront) else {
            throw EmulatorError.invalid(
                "member 'storefront' must be an App Store storefront's ISO 3166-1 alpha-3 code such as USA")
        }
        let account = Account(
            id: AccountID(newTimeOrderedUUID(at: now)), environment: environment, storefront: storefront.countryCode)
        try await storage.write { try $0.insert(account) }
        return account
    }

    public func createDevice(accountID: AccountID, deviceID: UUID?) async throws -> Device {
        let device = Device(id: DeviceID((deviceID ?? UUID(bytes: randomBytes(16))).uuidString), accountID: accountID)
        try await catchUp()
        try await storage.write { store in
            guard try store.account(accountID) != nil else { throw EmulatorError.notFound("no account \(accountID)") }
            guard try store.device(device.id) == nil else { throw EmulatorError.invalid("device \(device.id) exists") }
            try store.insert(device)
        }
        return device
    }

    /// Installs (or updates) an app; the first install's version and date become the original ones.
    public func install(deviceID: String, bundleID: String, version: String?) async throws -> (
        install: Install, environment: Environment
    ) {
        let app = try self.app(bundleID)
        let version = version ?? app.version
        let current = now
        return try await storage.write { store in
            let (device, account) = try self.device(deviceID, in: store)
            var install =
                try store.install(device: device.id, bundle: BundleID(bundleID))
                ?? Install(
                    deviceID: device.id, bundleID: BundleID(bundleID), version: version, originalVersion: version,
                    originalPurchaseDate: current)
            install.version = version
            try store.save(install)
            return (install, account.environment)
        }
    }

    // MARK: - Catalogue

    /// The products a device's request names, and the identifiers the catalogue does not have; the device
    /// and the app must exist.
    public func products(_ identifiers: [String], deviceID: String, bundleID: String) async throws -> (
        products: [Catalog.Entry], invalid: [String]
    ) {
        _ = try app(bundleID)
        _ = try await storage.read { try self.device(deviceID, in: $0) }
        return products(identifiers)
    }

    /// The whole catalogue, by product id.
    public var catalogEntries: [Catalog.Entry] { catalog.all }

    /// The products named, and the identifiers the catalogue does not have.
    public func products(_ identifiers: [String]) -> (products: [Catalog.Entry], invalid: [String]) {
        var products: [Catalog.Entry] = []
        var invalid: [String] = []
        for identifier in identifiers {
            if let entry = catalog.entry(identifier) { products.append(entry) } else { invalid.append(identifier) }
        }
        return (products, invalid)
    }

    // MARK: - Payments and the queue

    /// What a payment became: a purchase (with its JWS), or a payment waiting (deferred) or failed.
    public enum PaymentOutcome: Sendable {
        case purchased(StoredTransaction, jws: String)
        case pending(PendingPayment)
    }

    /// An entry of the payment queue.
    public enum QueueEntry: Sendable {
        case transaction(StoredTransaction, state: String)
        case payment(PendingPayment)

        var sortKey: (Date, String) {
            switch self {
            case .transaction(let stored, _): (stored.transaction.purchaseDate, stored.id.rawValue)
            case .payment(let payment): (payment.date, payment.id.rawValue)
            }
        }
    }

    /// Buys `productID`: the transaction is purchased at once and stays in the queue until finished.
    /// An offer is checked (signature, eligibility) when the purchase is made: a deferred or failed payment
    /// gets none.
    public func pay(
        deviceID: String, bundleID: String, productID: String, quantity: Int, applicationUsername: String?,
        appAccountToken: String?, offer: OfferRequest? = nil
    ) async throws -> PaymentOutcome {
        _ = try app(bundleID)
        guard let entry = catalog.entry(productID) else { throw EmulatorError.notFound("no product \(productID)") }
        guard (1...10).contains(quantity), quantity == 1 || entry.kind == .consumable else {
            throw EmulatorError.invalid("quantity must be 1, or 1 to 10 for consumables")
        }
        if let token = appAccountToken, UUID(uuidString: token) == nil {
            throw EmulatorError.invalid("appAccountToken must be a UUID")
        }
        try await catchUp()
        let current = now
        let outcome = try await storage.write { store -> Written in
            let (device, account) = try self.device(deviceID, in: store)
            guard try store.install(device: device.id, bundle: BundleID(bundleID)) != nil else {
                throw EmulatorError.invalid("install \(bundleID) on device \(deviceID) first")
            }
            if account.askToBuy || account.purchaseFailure != nil {
                let payment = PendingPayment(
                    id: try self.newTransactionID(in: store), accountID: account.id, bundleID: BundleID(bundleID),
                    productID: ProductID(productID), quantity: quantity, date: current,
                    state: account.askToBuy ? .deferred : .failed,
                    reason: account.askToBuy ? nil : (account.purchaseFailure == .interrupted ? .interrupted : .failed),
                    appAccountToken: appAccountToken?.lowercased(), applicationUsername: applicationUsername,
                    resolvable: !account.askToBuy && account.purchaseFailure == .interrupted)
                try store.insert(payment)
                return .pending(payment)
            }
            return .purchased(
                try self.purchase(
                    account: account, bundleID: bundleID, entry: entry, quantity: quantity,
                    applicationUsername: applicationUsername, appAccountToken: appAccountToken, offer: offer,
                    now: current, in: store))
        }
        switch outcome {
        case .purchased(let stored): return .purchased(stored, jws: try await signedTransaction(stored))
        case .pending(let payment): return .pending(payment)
        }
    }

    private enum Written: Sendable {
        case purchased(StoredTransaction)
        case pending(PendingPayment)
    }

    /// Records a completed purchase inside a write.
    private func purchase(
        account: Account, bundleID: String, entry: Catalog.Entry, quantity: Int, applicationUsername: String?,
        appAccountToken: String?, offer request: OfferRequest? = nil, now current: Date, in store: any EmulatorStore
    ) throws -> StoredTransaction {
        var transaction = Transaction(
            id: try newTransactionID(in: store), bundleID: BundleID(bundleID), productID: ProductID(entry.productID),
            kind: entry.kind, quantity: quantity, purchaseDate: current,
            subscriptionGroupID: entry.subscription?.groupID, price: entry.price,
            appAccountToken: appAccountToken?.lowercased())
        guard let subscriptionEntry = entry.subscription, subscriptionEntry.period != nil else {
            _ = try offerTerms(
                request, entry: entry, standing: .new, bundleID: bundleID, appAccountToken: appAccountToken, in: store)
            let stored = StoredTransaction(
                transaction: transaction, accountID: account.id, applicationUsername: applicationUsername,
                orderID: newOrderID(at: current))
            try store.insert(stored)
            // Apple sends ONE_TIME_CHARGE for one-time purchases, so far in the sandbox only.
            if account.environment != .production {
                try enqueue(
                    Notice(.oneTimeCharge), transaction: stored, renewal: nil, account: account, in: store, now: current
                )
            }
            try shareOneTime(stored, account: account, in: store, now: current)
            return stored
        }
        let engine = lifecycle(for: account)
        let group = subscriptionEntry.groupID
        // The account's own subscription in the group (a family member's access to another's is not).
        let existing = try store.subscriptions(account: account.id, bundle: transaction.bundleID).first {
            catalog.entry($0.state.productID.rawValue)?.subscription?.groupID == group
                && (try? isPurchaser($0.originalTransactionID, in: store)) == true
        }
        let terms = try offerTerms(
            request, entry: entry, standing: GroupStanding(existing), bundleID: bundleID,
            appAccountToken: appAccountToken, in: store)
        if var subscription = existing, subscription.state.status == .active || subscription.state.isInBillingRetry {
            // Another product of the group while subscribed: an upgrade, downgrade or crossgrade; or an offer
            // redeemed by a subscriber.
            let productID = transaction.productID
            let event: LifecycleEvent = terms.map { .redeemOffer(productID, $0) } ?? .changeProduct(productID)
            let effects = try Self.refusing { () throws(LifecycleError) in
                try engine.handle(event, to: &subscription.state, at: current)
            }
            try apply(effects, to: &subscription, account: account, in: store, now: current)
            guard let latest = try store.transaction(subscription.latestTransactionID) else {
                throw EmulatorError.notFound("no transaction \(subscription.latestTransactionID)")
            }
            return latest
        }
        transaction.webOrderLineItemID = try newWebOrderLineItemID(in: store)
        if let terms {
            transaction.offer = terms.offer
            transaction.price = price(of: terms.offer, productID: transaction.productID)
        }
        if let previous = existing, let original = try store.transaction(previous.originalTransactionID) {
            // A resubscription keeps the group's original transaction.
            transaction.originalID = original.id
            transaction.originalPurchaseDate = original.transaction.originalPurchaseDate
        }
        let originalID = transaction.originalID
        let productID = transaction.productID
        let (state, effects) = try Self.refusing { () throws(LifecycleError) in
            try engine.subscribe(
                originalTransactionID: originalID, productID: productID, at: current, resubscribe: existing != nil,
                offer: terms)
        }
        transaction.expiresDate = state.expiresDate
        var stored = StoredTransaction(
            transaction: transaction, accountID: account.id, applicationUsername: applicationUsername,
            orderID: newOrderID(at: current))
        if let previous = existing, let latest = try store.transaction(previous.latestTransactionID) {
            stored.renewalNumber = latest.renewalNumber + 1
        }
        try store.insert(stored)
        var subscription = StoredSubscription(
            state: state, accountID: account.id, bundleID: transaction.bundleID, latestTransactionID: transaction.id)
        try apply(effects, to: &subscription, account: account, in: store, now: current)
        return stored
    }

    /// Unfinished transactions and payments of the device's account for the app, oldest first.
    public func unfinished(deviceID: String, bundleID: String) async throws -> [QueueEntry] {
        try await catchUp()
        return try await storage.read { store in
            let (_, account) = try self.device(deviceID, in: store)
            let purchased = try store.unfinishedTransactions(account: account.id, bundle: BundleID(bundleID)).map {
                QueueEntry.transaction($0, state: "purchased")
            }
            let pending = try store.unfinishedPayments(account: account.id, bundle: BundleID(bundleID)).map(
                QueueEntry.payment)
            return (purchased + pending).sorted { $0.sortKey < $1.sortKey }
        }
    }

    public func finish(deviceID: String, bundleID: String, transactionID: String) async throws {
        try await storage.write { store in
            let (_, account) = try self.device(deviceID, in: store)
            let id = TransactionID(transactionID)
            if var payment = try store.payment(id), payment.accountID == account.id,
                payment.bundleID.rawValue == bundleID, !payment.finished
            {
                guard payment.state != .deferred else {
                    throw EmulatorError.invalid(
                        "a deferred transaction ends with its approval or decline, not with finish")
                }
                payment.finished = true
                try store.update(payment)
                return
            }
            guard var stored = try store.transaction(id), stored.accountID == account.id,
                stored.transaction.bundleID.rawValue == bundleID
            else { throw EmulatorError.notFound("no transaction \(transactionID) for this device and app") }
            stored.finished = true
            try store.update(stored)
        }
    }

    /// Non-consumables and subscriptions of the account (state `restored`).
    public func restore(deviceID: String, bundleID: String) async throws -> [StoredTransaction] {
        try await catchUp()
        return try await storage.read { store in
            let (_, account) = try self.device(deviceID, in: store)
            return try store.transactions(account: account.id, bundle: BundleID(bundleID)).filter {
                $0.transaction.kind != .consumable
            }
        }
    }

    // MARK: - Ask to Buy, failure injection, volume purchase

    /// Sets the account's Ask to Buy switch and purchase-failure injection (`.some(nil)` clears it).
    public func configureAccount(_ accountID: String, askToBuy: Bool?, purchaseFailure: PurchaseFailure??)
        async throws -> Account
    {
        try await storage.write { store in
            guard var account = try store.account(AccountID(accountID)) else {
                throw EmulatorError.notFound("no account \(accountID)")
            }
            if let askToBuy { account.askToBuy = askToBuy }
            if let purchaseFailure { account.purchaseFailure = purchaseFailure }
            try store.update(account)
            return account
        }
    }

    /// Approves or declines a deferred (Ask to Buy) payment: approval delivers a purchase to the queue, a
    /// decline a failed transaction.
    public func decide(accountID: String, paymentID: String, approve: Bool) async throws -> QueueEntry {
        try await catchUp()
        let current = now
        let entry = try await storage.write { store -> QueueEntry in
            guard var payment = try store.payment(TransactionID(paymentID)), payment.accountID.rawValue == accountID,
                payment.state == .deferred, let account = try store.account(payment.accountID)
            else { throw EmulatorError.notFound("no deferred payment \(paymentID) for this account") }
            if approve {
                payment.state = .approved
                payment.finished = true
                try store.update(payment)
                guard let entry = self.catalog.entry(payment.productID.rawValue) else {
                    throw EmulatorError.notFound("no product \(payment.productID)")
                }
                return .transaction(
                    try self.purchase(
                        account: account, bundleID: payment.bundleID.rawValue, entry: entry, quantity: payment.quantity,
                        applicationUsername: payment.applicationUsername, appAccountToken: payment.appAccountToken,
                        now: current, in: store), state: "purchased")
            }
            payment.state = .failed
            payment.reason = .declined
            try store.update(payment)
            return .payment(payment)
        }
        return entry
    }

    /// Completes the account's interrupted payments (the customer fixed what interrupted them).
    public func resolveInterruptions(accountID: String) async throws -> [StoredTransaction] {
        try await catchUp()
        let current = now
        return try await storage.write { store in
            guard let account = try store.account(AccountID(accountID)) else {
                throw EmulatorError.notFound("no account \(accountID)")
            }
            var delivered: [StoredTransaction] = []
            for var payment in try store.resolvablePayments(account: account.id) {
                payment.resolvable = false
                try store.update(payment)
                guard let entry = self.catalog.entry(payment.productID.rawValue) else { continue }
                delivered.append(
                    try self.purchase(
                        account: account, bundleID: payment.bundleID.rawValue, entry: entry, quantity: payment.quantity,
                        applicationUsername: payment.applicationUsername, appAccountToken: payment.appAccountToken,
                        now: current, in: store))
            }
            return delivered
        }
    }

    public enum VolumePurchaseAction: String, Sendable, CaseIterable {
        case assign, revoke
    }

    /// Assigns or revokes a Volume Purchase Program licence for the app on a device.
    public func volumePurchase(deviceID: String, bundleID: String, action: VolumePurchaseAction) async throws
        -> Install
    {
        let current = now
        return try await storage.write { store in
            let (device, _) = try self.device(deviceID, in: store)
            guard var install = try store.install(device: device.id, bundle: BundleID(bundleID)) else {
                throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
            }
            switch action {
            case .assign:
                install.vppAssigned = true
                install.vppRevokedAt = nil
            case .revoke:
                guard install.vppAssigned else { throw EmulatorError.invalid("no licence is assigned") }
                install.vppRevokedAt = current
            }
            try store.save(install)
            return install
        }
    }

    // MARK: - Receipts

    /// Sandbox receipt-refresh properties (`SKReceiptRefreshRequest(receiptProperties:)`).
    public struct RefreshProperties: Sendable {
        public var volumePurchase = false
        public var expired = false
        public var revoked = false
        public init(volumePurchase: Bool = false, expired: Bool = false, revoked: Bool = false) {
            (self.volumePurchase, self.expired, self.revoked) = (volumePurchase, expired, revoked)
        }
    }

    /// The device's unified receipt for the app, signed now.
    public func receipt(deviceID: String, bundleID: String, refresh: RefreshProperties = RefreshProperties())
        async throws -> [UInt8]
    {
        let app = try self.app(bundleID)
        try await catchUp()
        let (device, account, install, purchases) = try await storage.read { store in
            let (device, account) = try self.device(deviceID, in: store)
            guard let install = try store.install(device: device.id, bundle: BundleID(bundleID)) else {
                throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
            }
            return (
                device, account, install,
                try store.transactions(account: account.id, bundle: BundleID(bundleID)).filter(\.isInReceipt)
            )
        }
        let production = account.environment == .production
        let current = Self.wholeSeconds(now)
        let volume = install.vppAssigned || refresh.volumePurchase || refresh.expired || refresh.revoked
        var expiration: Date?
        if let revoked = install.vppRevokedAt { expiration = revoked.addingTimeInterval(Self.vppGrace) }
        if refresh.revoked { expiration = current.addingTimeInterval(Self.vppGrace) }
        if refresh.expired { expiration = current.addingTimeInterval(-1) }
        let type = ReceiptType(environment: account.environment, volumePurchase: volume).rawValue
        var receipt = Receipt(
            receiptType: type, appItemID: production ? app.appAppleID : 0,
            bundleID: bundleID, appVersion: install.version, opaqueValue: randomBytes(16), sha1Hash: [],
            ageRating: "4+",
            developerID: 0, creationDate: current, downloadID: 0, versionExternalID: 0,
            originalPurchaseDate: Self.wholeSeconds(install.originalPurchaseDate),
            originalAppVersion: install.originalVersion, expirationDate: expiration.map(Self.wholeSeconds),
            inAppPurchases: purchases.map { InAppPurchase($0.transaction) }
        )
        receipt.sha1Hash = receipt.deviceHash(for: Self.uuidBytes(device.id.rawValue))
        return try receipt.signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
    }

    static func wholeSeconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }

    static func uuidBytes(_ text: String) -> [UInt8] {
        guard let uuid = UUID(uuidString: text) else { return Array(text.utf8) }
        return withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }

    // MARK: - Signed data

    /// The transaction's JWS, signed now by the emulator's chain.
    public func signedTransaction(_ stored: StoredTransaction) async throws -> String {
        let account = try await storage.read { try $0.account(stored.accountID) }
        return try signedTransaction(stored, account: account)
    }

    func signedTransaction(_ stored: StoredTransaction, account: Account?) throws -> String {
        try signer.sign(transactionPayload(stored, account: account))
    }

    /// `JWSTransactionDecodedPayload` of a transaction, signed now.
    func transactionPayload(_ stored: StoredTransaction, account: Account?) -> JSONObject {
        let storefront = account?.storefront ?? "USA"
        return JWSTransaction(
            stored.transaction, environment: account?.environment ?? .sandbox, signedDate: now,
            storefront: storefront, storefrontID: Self.storefrontID(storefront)
        ).json
    }

    /// The latest transaction of every product the account is entitled to now, signed.
    public func entitlements(deviceID: String, bundleID: String) async throws -> [String] {
        try await catchUp()
        let current = now
        let (account, owned) = try await storage.read { store in
            let (_, account) = try self.device(deviceID, in: store)
            let owned = try store.transactions(account: account.id, bundle: BundleID(bundleID)).filter {
                $0.isInReceipt && $0.transaction.isActive(at: current)
            }
            return (account, owned)
        }
        let latest = Dictionary(grouping: owned, by: \.transaction.originalID).compactMap {
            $0.value.max { $0.renewalNumber < $1.renewalNumber }
        }
        return try latest.sorted { $0.id < $1.id }.map { try signedTransaction($0, account: account) }
    }

    public func appTransaction(deviceID: String, bundleID: String) async throws -> String {
        let app = try self.app(bundleID)
        let (device, account, install) = try await storage.read { store in
            let (device, account) = try self.device(deviceID, in: store)
            guard let install = try store.install(device: device.id, bundle: BundleID(bundleID)) else {
                throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
            }
            return (device, account, install)
        }
        let production = account.environment == .production
        let nonce = UUID(bytes: randomBytes(16))
        let verification = Digest.hash(.sha384, Self.uuidBytes(nonce.uuidString) + Self.uuidBytes(device.id.rawValue))
        let payload = AppTransaction(
            app: app, install: install, environment: production ? .production : .sandbox, created: now,
            deviceVerification: Data(verification).base64EncodedString(), nonce: nonce)
        return try signer.sign(payload.json)
    }

    // MARK: - Look-ups

    /// The device (ids compare case-insensitively) and its account, inside a read or write.
    func device(_ id: String, in store: any EmulatorStore) throws -> (Device, Account) {
        guard let device = try store.device(DeviceID(id.uppercased())) else {
            throw EmulatorError.notFound("no device \(id)")
        }
        guard let account = try store.account(device.accountID) else {
            throw EmulatorError.notFound("no account \(device.accountID)")
        }
        return (device, account)
    }

    func app(_ bundleID: String) throws -> AppConfiguration {
        guard let app = apps[bundleID] else { throw EmulatorError.notFound("no app \(bundleID) is configured") }
        return app
    }

    static func storefrontID(_ storefront: String?) -> String {
        (storefront.flatMap(Storefront.init(countryCode:)) ?? .unitedStates).id
    }
}

extension AppTransaction {
    /// The app transaction of an install (`AppTransaction`, shared/spec/signed-data.md §7.8).
    init(
        app: AppConfiguration, install: Install, environment: Environment, created: Date, deviceVerification: String,
        nonce: UUID
    ) {
        func milliseconds(_ date: Date) -> JSONValue {
            .integer(EpochMilliseconds.milliseconds(date))
        }
        self.init(json: [
            "receiptType": .string(environment.rawValue), "appAppleId": .integer(app.appAppleID),
            "bundleId": .string(app.bundleID), "applicationVersion": .string(install.version),
            "versionExternalIdentifier": .integer(0), "receiptCreationDate": milliseconds(created),
            "originalPurchaseDate": milliseconds(install.originalPurchaseDate),
            "originalApplicationVersion": .string(install.originalVersion),
            "deviceVerification": .string(deviceVerification),
            "deviceVerificationNonce": .string(nonce.uuidString.lowercased()), "originalPlatform": .string("iOS"),
        ])
    }
}

extension UUID {
    /// A time-ordered (version 7, RFC 9562) UUID: `milliseconds` since 1970 (clamped to the 48 bits the
    /// layout has) then 74 bits from 10 injected random bytes.
    init(milliseconds: Int64, bytes: [UInt8]) {
        let time = UInt64(clamping: max(0, min(milliseconds, (1 << 48) - 1)))
        let prefix = (0..<6).map { UInt8(truncatingIfNeeded: time >> (8 * (5 - $0))) }
        self.init(version: 7, prefix + bytes.prefix(10))
    }

    /// A random (version 4) UUID from 16 injected random bytes.
    init(bytes: [UInt8]) { self.init(version: 4, bytes) }

    /// 16 bytes (zero-filled when fewer) with the version nibble and the RFC 9562 variant set.
    private init(version: UInt8, _ bytes: [UInt8]) {
        var value = Array(bytes.prefix(16)) + [UInt8](repeating: 0, count: max(0, 16 - bytes.count))
        value[6] = value[6] & 0x0f | version << 4
        value[8] = value[8] & 0x3f | 0x80
        self = UUID(
            uuid: (
                value[0], value[1], value[2], value[3], value[4], value[5], value[6], value[7], value[8], value[9],
                value[10], value[11], value[12], value[13], value[14], value[15]
            ))
    }
}
