import AppStoreReceipts
import AppStoreServerAPI
import AppStoreSignedData
public import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
public import StorekeeperLogging
import StorekeeperSQL
import Synchronization

/// The purchase server: verified receipts, transactions and Apple's notifications in; subscription state,
/// a consumable ledger, entitlements and webhooks out.
///
/// Every input is verified, then stored raw and applied in one write (the engine decides, ``PurchaseEngine``)
/// before it is acknowledged; events and their webhook deliveries are written in the same transaction, and
/// a delivery task sends them with retries.
public final class PurchaseServer: Sendable {
    public let configuration: ServerConfiguration
    let apps: [String: AppRuntime]
    /// Whether any app has webhook receivers: without any, a write's events wake no delivery (what earlier
    /// configurations left pending is sent on the delivery task's timer).
    let hasWebhooks: Bool
    package let storage: any ServerStorage
    /// The clock of purchase state (renewal dates, events): the emulator's in tests.
    let now: @Sendable () -> Date
    /// Real time, for what happens in the world whatever the state's clock says: webhook schedules and
    /// leases, their signatures' timestamps, and Apple's rate limits.
    let wallClock: @Sendable () -> Date
    let logger: Logger
    let metrics = Metrics()
    /// `/metrics`' gauges as last counted, and when (``gauges()``).
    let gaugesCounted = Mutex<(at: ContinuousClock.Instant, values: [(name: String, help: String, value: Double)])?>(
        nil)
    let notificationLog = NotificationLog()
    let cache: SubscriberCache
    /// On storage other processes write: keeps `cache` clear of what they changed.
    let follower: ChangeFollower?
    /// Users whose answers writes have changed (``changed(_:_:in:)``), counted: a write during which it did
    /// not move changed none, and other processes have nothing of it to drop.
    let userChanges = Atomic<Int>(0)
    let worker = Mutex<Task<Void, Never>?>(nil)
    /// The polling task (``startReconciliation(every:)``).
    let reconciler = Mutex<Task<Void, Never>?>(nil)
    /// Wakes the delivery task when a write adds deliveries.
    let wake = Mutex<CheckedContinuation<Void, Never>?>(nil)

    /// An app's settings with its verifiers and API clients, made once.
    struct AppRuntime: Sendable {
        let settings: AppSettings
        let signedData: SignedDataVerifier
        let receipts: ReceiptVerifier
        let api: [Environment: AppStoreServerAPIClient]
        /// The same API for an app's post, which waits for it: one try, ``inlineRefreshTimeout`` at most.
        var inlineAPI: [Environment: AppStoreServerAPIClient] = [:]
        /// Xcode's StoreKit Testing, when the app names its certificates: signed data verified against
        /// them alone, in the environment `Xcode` only; receipts signed by one of them.
        var xcode: (signedData: SignedDataVerifier, receipts: ReceiptVerifier)? = nil

        /// `signed` verified by Apple's roots (the app's), or else by the Xcode certificates when there
        /// are some; the result says which environment it is from.
        func verify(_ signed: String, as type: SignedDataType, now: Date) -> SignedDataResult {
            let result = signedData.verify(signed, as: type, now: now)
            guard !result.isOK, let xcode else { return result }
            let fromXcode = xcode.signedData.verify(signed, as: type, now: now)
            return fromXcode.isOK ? fromXcode : result
        }

        /// A receipt verified by Apple's roots, or else by the Xcode certificates (then only a receipt of
        /// type `Xcode`), with the environment it is from.
        func verify(_ receipt: [UInt8], expecting expectations: ReceiptExpectations, now: Date) -> (
            ReceiptVerificationResult, Environment?
        ) {
            let result = receipts.verify(receipt, expecting: expectations, now: now)
            if result.isValid, let parsed = result.receipt {
                return (result, Environment(name: parsed.environment, among: Environment.customerEnvironments))
            }
            guard let xcode else { return (result, nil) }
            let fromXcode = xcode.receipts.verify(receipt, expecting: expectations, now: now)
            guard fromXcode.isValid, fromXcode.receipt?.environment == Environment.xcode.rawValue else {
                return (result, nil)
            }
            return (fromXcode, .xcode)
        }
    }

    public init(
        configuration: ServerConfiguration, storage: any ServerStorage, logger: Logger = .disabled,
        now: @escaping @Sendable () -> Date = { Date() }, wallClock: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        self.configuration = configuration
        self.wallClock = wallClock
        self.storage = storage
        self.logger = logger
        self.now = now
        try ServerConfiguration.checkCachedUsers(Double(configuration.cachedUsers))
        let cache = SubscriberCache(shared: storage.isShared, capacity: configuration.cachedUsers)
        if storage.afterCommit({ cache.committed() }) { cache.trackCommits() }
        self.cache = cache
        follower =
            storage.isShared
            ? ChangeFollower(cache: cache, reader: UUID().uuidString) { watermark, report in
                guard let changes = try await storage.subscriberChanges(since: watermark, reporting: report) else {
                    throw PurchaseServerError.unavailable("the shared storage cannot say which users changed")
                }
                return changes
            } : nil
        var apps: [String: AppRuntime] = [:]
        for app in configuration.apps {
            guard apps[app.bundleID] == nil else {
                throw PurchaseServerError.configuration("\(app.bundleID) is configured twice (one entry an app)")
            }
            let verifier: SignedDataVerifier
            do {
                verifier = try SignedDataVerifier(
                    SignedDataVerifier.Configuration(
                        trustedRoots: app.jwsRoots, bundleID: app.bundleID, appAppleID: app.appAppleID))
            } catch { throw PurchaseServerError.configuration("\(app.bundleID): \(error)") }
            var clients: [Environment: AppStoreServerAPIClient] = [:]
            var inlineClients: [Environment: AppStoreServerAPIClient] = [:]
            if let api = app.serverAPI {
                let production = api.productionURL.map(AppStoreServerAPIClient.Environment.custom) ?? .production
                let sandbox = api.sandboxURL.map(AppStoreServerAPIClient.Environment.custom) ?? .sandbox
                for (environment, target) in [(Environment.production, production), (.sandbox, sandbox)] {
                    let budget = APIRequestBudget(
                        storage: storage, bundleID: app.bundleID, environment: environment,
                        perHour: configuration.maxAPIRequestsPerHour, wallClock: wallClock)
                    clients[environment] = AppStoreServerAPIClient(
                        key: api.privateKey, keyID: api.keyID, issuerID: api.issuerID, bundleID: app.bundleID,
                        environment: target, retry: .init(maxAttempts: 3, maxRetryAfter: .seconds(5)),
                        // Tokens carry real time, whatever clock the server's state runs on.
                        verifier: verifier,
                        // A retry is a request too: it takes from the endpoint's budget, or is not made.
                        beforeRetry: { path in await budget.take(APIRequestBudget.endpoint(of: path)) })
                    inlineClients[environment] = AppStoreServerAPIClient(
                        key: api.privateKey, keyID: api.keyID, issuerID: api.issuerID, bundleID: app.bundleID,
                        environment: target, retry: .none, verifier: verifier,
                        http: HTTPClient(
                            timeout: Self.inlineRefreshTimeout, connectTimeout: Self.inlineRefreshTimeout,
                            maxResponseBytes: 1 << 20))
                }
            }
            var runtime = AppRuntime(
                settings: app, signedData: verifier, receipts: ReceiptVerifier(trustedRoots: app.receiptRoots),
                api: clients, inlineAPI: inlineClients)
            if !app.xcodeCertificates.isEmpty {
                do {
                    runtime.xcode = (
                        try SignedDataVerifier(
                            SignedDataVerifier.Configuration(
                                trustedRoots: app.xcodeCertificates, bundleID: app.bundleID,
                                environment: Environment.xcode.rawValue)),
                        ReceiptVerifier(trustedRoots: app.xcodeCertificates)
                    )
                } catch { throw PurchaseServerError.configuration("\(app.bundleID): xcode: \(error)") }
            }
            apps[app.bundleID] = runtime
        }
        self.apps = apps
        hasWebhooks = apps.values.contains { !$0.settings.webhooks.isEmpty }
    }

    deinit {
        worker.withLock { $0?.cancel() }
        reconciler.withLock { $0?.cancel() }
    }

    func app(_ bundleID: String) throws -> AppRuntime {
        guard let app = apps[bundleID] else {
            throw PurchaseServerError.notFound("no app \(RequestBody.printable(bundleID)) is configured")
        }
        return app
    }

    // MARK: - Ingestion

    /// What an input did.
    public struct Ingested: Sendable {
        /// The input was seen before: nothing changed.
        public var duplicate: Bool
        public var events: [ServerEvent]
    }

    /// The events a write recorded, in order. Whether one added with ``ServerStore/appendLater(_:)`` was new
    /// (not recorded before) may be known only once the write has committed: read ``events`` after it.
    struct RecordedEvents: Sendable, ExpressibleByArrayLiteral {
        private var entries: [(event: ServerEvent, inserted: DeferredCount?)] = []

        init(arrayLiteral events: ServerEvent...) { entries = events.map { ($0, nil) } }

        init(joining parts: [RecordedEvents]) { entries = parts.flatMap(\.entries) }

        /// An event known to be new.
        mutating func append(_ event: ServerEvent) { entries.append((event, nil)) }

        /// An event stored with ``ServerStore/appendLater(_:)``: recorded if its insert added a row.
        mutating func append(_ event: ServerEvent, inserted: DeferredCount) { entries.append((event, inserted)) }

        /// Those that were new; once the write has committed (a count still unknown then is a broken store).
        var events: [ServerEvent] {
            entries.compactMap { entry in
                guard let inserted = entry.inserted else { return entry.event }
                precondition(inserted.value != nil, "an event's insert was read before its write committed")
                return inserted.value == 0 ? nil : entry.event
            }
        }
    }

    /// An App Store Server Notification (V2 `{"signedPayload"}`, or V1 with the app's `password`), verified,
    /// stored and applied; answers once it is durable.
    public func ingestNotification(bundleID: String, body: [UInt8]) async throws -> Ingested {
        let app = try app(bundleID)
        let signed: String
        if let exact = StoredInput.signedPayload(of: body) {
            signed = exact
        } else {
            guard let object = (try? JSONParser.parse(body))?.objectValue else {
                throw PurchaseServerError.invalid("the body is not a JSON object")
            }
            if let v1 = V1Notification(object) { return try await ingestV1(v1, object: object, body: body, app: app) }
            guard let payload = object["signedPayload"]?.stringValue else {
                throw PurchaseServerError.invalid("the body has no signedPayload")
            }
            signed = payload
        }
        let result = app.signedData.verify(signed, as: .notification, now: now())
        metrics.count(
            key: result.status == .ok
                ? Self.notificationCounters.verified
                : Metrics.key(
                    "storekeeper_verifications_total", ["kind": "notification", "outcome": result.status.rawValue]))
        guard let verified = result.notification else {
            throw PurchaseServerError.verification(
                "the notification did not verify: \(result.status.rawValue) (\(result.reason ?? ""))")
        }
        // A nested token that did not verify is refused with the notification, not left out of it: taken
        // without its transaction, the notification would be acknowledged and its news lost.
        if let (field, failed) = result.nested.first(where: { !$0.value.isOK }) {
            throw PurchaseServerError.verification(
                "the notification's \(field) did not verify: \(failed.status.rawValue) (\(failed.reason ?? ""))")
        }
        let notification = verified.payload
        let payload = notification.json
        guard let uuid = notification.notificationUUID, let type = notification.notificationType else {
            throw PurchaseServerError.invalid("the notification has no notificationUUID or notificationType")
        }
        let data = payload["data"]?.objectValue ?? [:]
        // Where Apple's payload says the environment: `data`, else `summary`, else `appData`; an external
        // purchase token has none, and its id begins with SANDBOX in the sandbox.
        let named = (data["environment"] ?? payload["summary"]?["environment"] ?? payload["appData"]?["environment"])?
            .stringValue.flatMap(Environment.init(rawValue:))
        let token = payload["externalPurchaseToken"]?["externalPurchaseId"]?.stringValue.map {
            $0.hasPrefix("SANDBOX") ? Environment.sandbox : .production
        }
        if let environment = named ?? token, !app.settings.environments.contains(environment) {
            throw PurchaseServerError.invalid(
                "notifications from \(environment.rawValue) are not accepted for \(bundleID)")
        }
        // A type this build does not know is counted as "other": a label per string sent would grow without end.
        metrics.count(key: Self.notificationCounters.types[type] ?? Self.notificationCounters.other)
        let signedDate = notification.signedDate ?? now()
        var parsed = PurchaseUpdate(
            source: .notification, notice: .v2(type, notification.subtype),
            requestReason: type == .consumptionRequest ? data["consumptionRequestReason"]?.stringValue : nil)
        if let transaction = verified.transaction { parsed.transaction = Self.purchase(transaction) }
        if let renewal = verified.renewalInfo {
            parsed.renewal = Self.renewal(renewal, status: data["status"]?.int64Value, signedDate: signedDate)
        }
        let current = now()
        let update = parsed
        let testEvent =
            type == .test
            ? ServerEvent(
                id: "\(ServerEventType.test):\(uuid)", type: .test, bundleID: BundleID(bundleID), appUserID: nil,
                date: signedDate, source: .notification, appleNotificationType: type.rawValue) : nil
        let raw = RawInput(
            key: RawInput.notificationKey(signedDate: payload["signedDate"]?.int64Value, uuid: uuid), body: body,
            token: signed, payload: result.payloadBytes)
        return try await write(raw: raw, ahead: WriteAhead(update, bundleID: bundleID), viewFollows: false) { store in
            var events = try self.apply(update, bundleID: bundleID, claimant: nil, in: store, now: current)
            if let testEvent, try store.append(testEvent) {
                try self.enqueueWebhooks(for: testEvent, in: store)
                events.append(testEvent)
            }
            return events
        }
    }

    /// Asks the App Store Server API for the subscription's status (when a key is configured and the
    /// endpoint's budget allows) and applies what it says; answers the events it made, or nil when it did
    /// not ask. A failure is logged, not fatal (the notification or the next poll will tell). `polled`
    /// records the ask on the subscription (the reconciler's).
    /// Records that the reconciler asked about the subscription at `date`, under its lock (whether or not the
    /// answer held it: one that did not decode, or an error).
    static func markPolled(_ original: TransactionID, at date: Date, in store: any ServerStore) throws {
        try store.lock(original: original)
        if var subscription = try store.subscription(original) {
            subscription.lastPolled = date
            try store.save(subscription)
        }
    }

    /// How long an app's post waits for Apple's answer about its subscription (one try): the app's client
    /// gives up after 30 s, and a post answered late is posted again.
    static let inlineRefreshTimeout: Duration = .seconds(5)

    @discardableResult
    func refreshFromAPI(
        app: AppRuntime, originalTransactionID: TransactionID, environment: Environment, polled: Bool = false
    )
        async -> Int?
    {
        // The reconciler's asks retry; an app's post, which waits for this, asks once and briefly.
        guard let client = polled ? app.api[environment] : app.inlineAPI[environment],
            await takeAPIRequest("subscriptionStatuses", app: app, environment: environment)
        else { return nil }
        do {
            let statuses: StatusResponse
            do { statuses = try await client.subscriptionStatuses(originalTransactionID.rawValue) } catch {
                await noteRateLimit(error, "subscriptionStatuses", app: app, environment: environment)
                throw error
            }
            var found: [PurchaseUpdate] = []
            for group in statuses.groups {
                for item in group.lastTransactions {
                    guard let signed = item.signedTransactionInfo,
                        let payload = AppStoreServerAPIClient.decodedPayload(signed),
                        let transaction = Self.purchase(JWSTransaction(json: payload))
                    else { continue }
                    var update = PurchaseUpdate(source: .api, transaction: transaction)
                    if let renewal = item.signedRenewalInfo.flatMap(AppStoreServerAPIClient.decodedPayload) {
                        let info = JWSRenewalInfo(json: renewal)
                        update.renewal = Self.renewal(info, status: item.status, signedDate: info.signedDate ?? now())
                    }
                    found.append(update)
                }
            }
            let updates = found
            let current = now()
            let bundleID = app.settings.bundleID
            let result = try await write(input: nil) { store in
                // The polled subscription's lock with the answer's, before any other (its own may be missing
                // from the answer, and markPolled below takes it).
                if polled {
                    try self.lockSubscriptions(
                        of: updates.compactMap(\.originalTransactionID) + [originalTransactionID], in: store)
                }
                let events = try self.apply(updates, bundleID: bundleID, claimant: nil, in: store, now: current)
                if polled { try Self.markPolled(originalTransactionID, at: current, in: store) }
                return events
            }
            return result.events.count
        } catch {
            logger.warning("server-api.refresh-failed", ["error": String(describing: error)])
            // Asked without an answer (not found, a network failure): asked again after the usual pause, not at
            // every pass, so that subscriptions Apple keeps refusing do not hold the head of the overdue list.
            // A rate limit is not the subscription's doing: it stays due.
            if polled, (error as? AppStoreServerAPIError)?.status != 429 {
                let current = now()
                _ = try? await write(input: nil) { store in
                    try Self.markPolled(originalTransactionID, at: current, in: store)
                    return []
                }
            }
            return 0
        }
    }

    /// Stores the input (when given) and runs `body` in one write; a duplicate input runs nothing.
    func write(
        input: (key: String, kind: String, body: [UInt8])?, viewFollows: Bool = true,
        _ body: @escaping @Sendable (any ServerStore) throws -> RecordedEvents
    )
        async throws -> Ingested
    {
        // A V2 notification's compact form is made here, beside the caller's other work, not in the write.
        try await write(
            raw: input.map { RawInput(key: $0.key, kind: $0.kind, body: $0.body) }, viewFollows: viewFollows, body)
    }

    /// Stores `raw` (when given) and runs `body` in one write; a duplicate input runs nothing. `ahead`: what
    /// `body` applies first; its lock is taken and its reads go with the input's insert (on PostgreSQL one
    /// round trip for both, which `body`'s own then need not make). `viewFollows`: whether the caller then
    /// answers with what this process keeps (an app's post answers its user's view; Apple's notifications
    /// are answered with nothing).
    func write(
        raw: RawInput?, ahead: WriteAhead? = nil, viewFollows: Bool = true,
        _ body: @escaping @Sendable (any ServerStore) throws -> RecordedEvents
    )
        async throws -> Ingested
    {
        let received = now()
        let changesBefore = userChanges.load(ordering: .sequentiallyConsistent)
        let written: RecordedEvents?
        if let ahead {
            written = try await storage.write(ahead: ahead.recording(raw, received: received), body)
        } else {
            written = try await storage.write { store -> RecordedEvents? in
                if let raw, !(try store.recordInput(raw, received: received)) { return nil }
                return try body(store)
            }
        }
        let result = Ingested(duplicate: written == nil, events: written?.events ?? [])
        // Counted once the write is committed: a body run again (PostgreSQL retries a write that lost a race)
        // counts nothing twice.
        for event in result.events {
            metrics.count(
                key: Self.eventCounters[event.type]
                    ?? Metrics.key("storekeeper_events_total", ["type": event.type.rawValue]))
        }
        if hasWebhooks, !result.events.isEmpty { wakeDelivery() }
        // Answered once every other process answering reads from memory has dropped what the write changed,
        // and this one what others committed before it (a write may have waited for one: a duplicate input,
        // an alias another process made). With no view to answer, at once when it changed no user's answers:
        // nobody has anything of it to drop. Another write that changed some while this one ran makes this
        // one wait too (the count is the process's, not the write's).
        if let follower, viewFollows || userChanges.load(ordering: .sequentiallyConsistent) != changesBefore {
            try await follower.acknowledge()
        }
        return result
    }

    static func checkUserID(_ id: String) throws {
        guard (1...256).contains(id.utf8.count), !id.contains(where: { $0.isNewline || $0 == "\u{0}" }) else {
            throw PurchaseServerError.invalid("appUserId must be 1 to 256 characters")
        }
        // A user is read at /v1/subscribers/{id}, where an encoded slash is refused: one could be stored, never
        // read back.
        guard !id.contains("/") else { throw PurchaseServerError.invalid("appUserId must not contain '/'") }
    }
}
