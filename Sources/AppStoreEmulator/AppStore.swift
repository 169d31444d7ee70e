import AppStoreReceipts
import AppStoreSignedData
public import Foundation
public import StoreKitCatalog
public import StoreModel
public import StoreTime
public import StorekeeperCrypto
public import StorekeeperHTTP
import StorekeeperJSON
public import StorekeeperLogging
import SubscriptionLifecycle
import Synchronization

/// A caller mistake or a missing resource, reported by the API as a 4xx JSON error.
public struct EmulatorError: Error, Sendable, Hashable, CustomStringConvertible, HTTPErrorConvertible {
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

    public var httpError: HTTPError { HTTPError(status: status, code: code, message: message) }
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
    /// The storefront of accounts made without one: the first catalogue's `_storefront`, else USA.
    public let defaultStorefront: Storefront
    /// What a new account starts with, from the first catalogue's settings as Xcode's StoreKit testing applies
    /// them: `_askToBuyEnabled`, `_failTransactionsEnabled` (purchases fail), `_renewalBillingIssuesEnabled`
    /// (renewals enter billing retry) and `_billingGracePeriodEnabled`. Each account's own settings change them.
    let accountDefaults: StoreKitCatalog.Settings?
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
    let clockState: Mutex<VirtualClock>
    /// The earliest due event's store time, kept in step with the due-events table by every write.
    let nextDue: Mutex<Date?>
    let directoryLock: DirectoryLock
    let scheduler = Mutex<Task<Void, Never>?>(nil)
    /// Clock changes in progress: the scheduler leaves what falls due to them, so that a change reports
    /// (and runs, in order) everything its advance made due.
    let clockChanges = Atomic<Int>(0)
    /// Products taken off sale (`POST …/products/{id}/availability`); renewals to them expire.
    let productsNotForSale: Mutex<Set<ProductID>>
    /// Prices raised since the catalogue was read (``announcePriceIncrease(productID:requiresConsent:displayPrice:)``),
    /// by product id: the display price and the amount.
    let raisedPrices: Mutex<[String: (displayPrice: String, price: Money)]>
    /// The outbox's delivery slots, lanes and queue bookkeeping.
    let delivery: NotificationDelivery
    /// Notifications sent at once at most; the rest wait in the outbox's delivery queue.
    public var maxNotificationsInFlight: Int { delivery.maxInFlight }
    /// The delivery slots one receiver (URL) may hold: three quarters of them (all but one below four), so
    /// that a receiver that does not answer leaves the rest to the others.
    public var maxNotificationsInFlightPerReceiver: Int { delivery.maxPerReceiver }
    /// The next identifiers to give, read from their settings at first use. Writes run one at a time, so
    /// the cache follows the stored counters; a write rolled back leaves it ahead of them (a gap, as
    /// Apple's identifiers have), never behind, since each identifier given stores its successor.
    let counters = Mutex<[String: Int64]>([:])
    /// Notification settings per app and environment, from `--config` and `PUT …/notifications`.
    let notificationSettings: Mutex<[String: AppNotifications]>
    /// The keys that sign each app's promotional offers, by key id.
    let offerKeys: [String: [String: PublicKey]]
    /// How long Retention Messaging's realtime request waits for the app's answer (Apple: 700 ms), and the
    /// performance test's response-time threshold.
    public let realtimeTimeout: Duration
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
    let pruning = Mutex<(last: ContinuousClock.Instant?, running: Bool)>((nil, false))

    enum Setting {
        static let nextTransactionID = "nextTransactionID"
        static let nextWebOrderLineItemID = "nextWebOrderLineItemID"
        static let clockOffset = "clockOffset"
        static let rate = "rate"
        static let productsNotForSale = "productsNotForSale"
        /// The raised prices, a JSON object of product id → display price.
        static let raisedPrices = "raisedPrices"
        static let familiesExist = "familiesExist"
        static let apiIssuerID = "apiIssuerID"
        static func notifications(_ bundleID: String) -> String { "notifications.\(bundleID)" }
        /// A JWS protected header the outbox's stored payloads name by fingerprint (``StoredJWS``).
        static func jwsHeader(_ fingerprint: String) -> String { "jwsHeader.\(fingerprint)" }
    }

    /// Opens the store kept in `dataDirectory` (certificates, a lock, and the state in SQLite unless
    /// `storage` is given), creating it on first start. A directory another emulator holds, or whose
    /// certificates exist but cannot be read, is an error.
    public init(
        catalog: [StoreKitConfiguration], apps: [AppConfiguration], dataDirectory: URL, rate: TimeRate? = nil,
        storage: (any EmulatorStorage)? = nil, logger: Logger = .disabled,
        maxEventsPerRequest: Int = AppStore.defaultMaxEventsPerRequest,
        maxNotificationsInFlight: Int = AppStore.defaultMaxNotificationsInFlight,
        notificationRetention: StorePeriod? = nil, realtimeTimeout: Duration = RetentionLimits.realtimeTimeout,
        realNow: @escaping @Sendable () -> Date = { Date() },
        randomBytes: @escaping @Sendable (Int) -> [UInt8] = {
            (try? SecureRandom.bytes($0)) ?? [UInt8](repeating: 0, count: $0)
        }
    ) async throws {
        directoryLock = try DirectoryLock(directory: dataDirectory)
        self.realtimeTimeout = realtimeTimeout
        self.catalog = try Catalog(catalog)
        self.defaultStorefront =
            catalog.lazy.compactMap { $0.settings.storefront.flatMap(Storefront.init(countryCode:)) }.first
            ?? .unitedStates
        self.accountDefaults = catalog.first?.settings
        if let code = catalog.first?.settings.storefront, Storefront(countryCode: code) == nil {
            // A storefront newer than this build's table (Xcode offers a few it lacks): the USA's, said aloud.
            logger.warning("catalogue.storefront-unknown", ["storefront": String(code.prefix(8)), "using": "USA"])
        }
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
        delivery = NotificationDelivery(maxInFlight: maxNotificationsInFlight)
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
        let (clock, due, notForSale, raised, notifications, families, mintedKeys) = try await opened.write { store in
            if let rate { try store.setSetting(Setting.rate, rate.name) }
            // Registered before any notification is written, so the outbox may keep its payloads short.
            let headerKey = Setting.jwsHeader(fingerprint)
            if try store.setting(headerKey) != header { try store.setSetting(headerKey, header) }
            let (clock, notForSale, raised) = try Self.cachedSettings(in: store)
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
            let started = clock.now(real: realNow())
            while case let leases = try store.events(kind: .notificationLease, limit: 1_000), !leases.isEmpty {
                for lease in leases {
                    try store.cancel(kind: .notificationLease, key: lease.key)
                    try store.schedule(DueEvent(kind: .notificationAttempt, key: lease.key, due: started))
                }
            }
            return (
                clock, try store.nextDue(), notForSale, raised, notifications,
                try store.setting(Setting.familiesExist) != nil,
                try store.mintedAPIKeys()
            )
        }
        serverAPIState = try ServerAPIState(apps: apps, minted: mintedKeys)
        clockState = Mutex(clock)
        nextDue = Mutex(due)
        productsNotForSale = Mutex(notForSale)
        raisedPrices = Mutex(raised)
        notificationSettings = Mutex(notifications)
        familiesExist = Mutex(families)
    }

    deinit { scheduler.withLock { $0?.cancel() } }

    /// What the store keeps in memory from its settings, as stored: the clock (its rate and offset), the
    /// products off sale and the raised prices. A stored offset that is not one is refused.
    static func cachedSettings(in store: any EmulatorStore) throws -> (
        clock: VirtualClock, notForSale: Set<ProductID>, raised: [String: (displayPrice: String, price: Money)]
    ) {
        let rate = try store.setting(Setting.rate).flatMap(TimeRate.init(name:)) ?? .monthlyRenewalEveryFiveMinutes
        var offset: TimeInterval = 0
        if let text = try store.setting(Setting.clockOffset) {
            // Written only as a clock's offset (the horizon bounds it); anything else is not one.
            guard let value = TimeInterval(text), value.isFinite, abs(value) < 10_000_000_000 else {
                throw EmulatorStorageError.invalid("the stored clock offset '\(text.prefix(40))' is not a clock offset")
            }
            offset = value
        }
        let notForSale = Set(
            (try store.setting(Setting.productsNotForSale) ?? "").split(separator: ",").map { ProductID(String($0)) })
        return (VirtualClock(rate: rate, offset: offset), notForSale, try raisedPrices(in: store))
    }

    /// The raised prices as stored.
    static func raisedPrices(in store: any EmulatorStore) throws -> [String: (displayPrice: String, price: Money)] {
        guard let text = try store.setting(Setting.raisedPrices) else { return [:] }
        var prices: [String: (displayPrice: String, price: Money)] = [:]
        for member in (try? JSONParser.parse(Array(text.utf8)))?.objectValue?.members ?? [] {
            guard let display = member.value.stringValue, let price = Money(decimal: display, currency: "USD") else {
                continue
            }
            prices[member.key] = (display, price)
        }
        return prices
    }

    /// A product's price now: raised, or the catalogue's.
    func listPrice(_ productID: String) -> Money? {
        raisedPrices.withLock { $0[productID]?.price } ?? catalog.entry(productID)?.price
    }

    /// A product's display price now: raised, or the catalogue's.
    func listDisplayPrice(_ entry: Catalog.Entry) -> String? {
        raisedPrices.withLock { $0[entry.productID]?.displayPrice } ?? entry.displayPrice
    }

    /// Stops the scheduler and gives up the data directory, so another emulator may open it. The store
    /// must not be used afterwards.
    public func close() {
        serverAPIService.withLock { $0 }?.close()
        stopScheduler()
        directoryLock.release()
    }

    // MARK: - Identifiers

    func newTransactionID(in store: any EmulatorStore) throws -> TransactionID {
        TransactionID(String(try next(Setting.nextTransactionID, from: 2_000_000_000_000_001, in: store)))
    }

    func newWebOrderLineItemID(in store: any EmulatorStore) throws -> Int64 {
        try next(Setting.nextWebOrderLineItemID, from: 2_000_000_100_000_001, in: store)
    }

    /// The counter's next value (within a write); its successor is stored, at once or, within a run of due
    /// events, once when its batch ends (``CounterWrites``).
    func next(_ setting: String, from first: Int64, in store: any EmulatorStore) throws -> Int64 {
        let cached = counters.withLock { $0[setting] }
        let next = try cached ?? store.setting(setting).flatMap(Int64.init) ?? first
        if let writes = CounterWrites.current {
            writes.moved(setting, to: next + 1)
        } else {
            try store.setSetting(setting, String(next + 1))
        }
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

/// The counters a batch of due events moved, stored once before it commits rather than with each identifier
/// (two statements a renewal, on the one writer). Rolled back with the batch like any other write of it, which
/// leaves the cache ahead of the stored counters, as ``AppStore/counters`` allows.
final class CounterWrites: Sendable {
    private let successors = Mutex<[String: Int64]>([:])

    /// Where the current run's batch keeps its counters (nil outside one: each is stored when it moves).
    @TaskLocal static var current: CounterWrites?

    func moved(_ setting: String, to successor: Int64) { successors.withLock { $0[setting] = successor } }

    /// Stores each moved counter once; to be called inside the batch's write, after its last identifier.
    func store(in store: any EmulatorStore) throws {
        let moved = successors.withLock { successors in
            defer { successors = [:] }
            return successors
        }
        for (setting, successor) in moved.sorted(by: { $0.key < $1.key }) {
            try store.setSetting(setting, String(successor))
        }
    }
}
