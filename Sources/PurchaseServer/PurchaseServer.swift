import AppStoreReceipts
import AppStoreServerAPI
import AppStoreSignedData
public import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
public import StorekeeperLogging
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
    package let storage: any ServerStorage
    /// The clock of purchase state (renewal dates, events): the emulator's in tests.
    let now: @Sendable () -> Date
    /// Real time, for what happens in the world whatever the state's clock says: webhook schedules and
    /// leases, their signatures' timestamps, and Apple's rate limits.
    let wallClock: @Sendable () -> Date
    let logger: Logger
    let metrics = Metrics()
    let notificationLog = NotificationLog()
    let cache: SubscriberCache
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
        self.cache = SubscriberCache(enabled: !storage.isShared)
        var apps: [String: AppRuntime] = [:]
        for app in configuration.apps {
            let verifier: SignedDataVerifier
            do {
                verifier = try SignedDataVerifier(
                    SignedDataVerifier.Configuration(
                        trustedRoots: app.jwsRoots, bundleID: app.bundleID, appAppleID: app.appAppleID))
            } catch { throw PurchaseServerError.configuration("\(app.bundleID): \(error)") }
            var clients: [Environment: AppStoreServerAPIClient] = [:]
            if let api = app.serverAPI {
                let production = api.productionURL.map(AppStoreServerAPIClient.Environment.custom) ?? .production
                let sandbox = api.sandboxURL.map(AppStoreServerAPIClient.Environment.custom) ?? .sandbox
                for (environment, target) in [(Environment.production, production), (.sandbox, sandbox)] {
                    clients[environment] = AppStoreServerAPIClient(
                        key: api.privateKey, keyID: api.keyID, issuerID: api.issuerID, bundleID: app.bundleID,
                        environment: target, retry: .init(maxAttempts: 3, maxRetryAfter: .seconds(5)),
                        // Tokens carry real time, whatever clock the server's state runs on.
                        verifier: verifier)
                }
            }
            var runtime = AppRuntime(
                settings: app, signedData: verifier, receipts: ReceiptVerifier(trustedRoots: app.receiptRoots),
                api: clients)
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

    /// An App Store Server Notification (V2 `{"signedPayload"}`, or V1 with the app's `password`), verified,
    /// stored and applied; answers once it is durable.
    public func ingestNotification(bundleID: String, body: [UInt8]) async throws -> Ingested {
        let app = try app(bundleID)
        guard let object = (try? JSONParser.parse(body))?.objectValue else {
            throw PurchaseServerError.invalid("the body is not a JSON object")
        }
        if let v1 = V1Notification(object) { return try await ingestV1(v1, body: body, app: app) }
        guard let signed = object["signedPayload"]?.stringValue else {
            throw PurchaseServerError.invalid("the body has no signedPayload")
        }
        let result = app.signedData.verify(signed, as: .notification, now: now())
        metrics.count("storekeeper_verifications_total", ["kind": "notification", "outcome": result.status.rawValue])
        guard let verified = result.notification else {
            throw PurchaseServerError.verification(
                "the notification did not verify: \(result.status.rawValue) (\(result.reason ?? ""))")
        }
        let notification = verified.payload
        let payload = notification.json
        guard let uuid = notification.notificationUUID, let type = notification.notificationType else {
            throw PurchaseServerError.invalid("the notification has no notificationUUID or notificationType")
        }
        let data = payload["data"]?.objectValue ?? [:]
        if let environment = (data["environment"] ?? payload["summary"]?["environment"])?.stringValue
            .flatMap(Environment.init(rawValue:)), !app.settings.environments.contains(environment)
        {
            throw PurchaseServerError.invalid(
                "notifications from \(environment.rawValue) are not accepted for \(bundleID)")
        }
        metrics.count("storekeeper_notifications_total", ["type": type.rawValue])
        let signedDate = notification.signedDate ?? now()
        var parsed = PurchaseUpdate(
            source: .notification, notice: .v2(type, notification.subtype))
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
        return try await write(input: ("notification:\(uuid)", "notification-v2", body)) { store in
            var events = try self.apply(update, bundleID: bundleID, claimant: nil, in: store, now: current)
            if let testEvent, try store.append(testEvent) {
                try self.enqueueWebhooks(for: testEvent, in: store)
                events.append(testEvent)
            }
            return events
        }
    }

    /// V1: only with the app's shared secret, and only what the re-verified `latest_receipt` says.
    func ingestV1(_ notification: V1Notification, body: [UInt8], app: AppRuntime) async throws -> Ingested {
        guard let secret = app.settings.sharedSecret, let password = notification.password,
            ConstantTime.equals(Array(password.utf8), Array(secret.utf8))
        else {
            metrics.count("storekeeper_verifications_total", ["kind": "notification-v1", "outcome": "BAD_PASSWORD"])
            throw PurchaseServerError.unauthorized("the V1 notification's password is not the app's shared secret")
        }
        guard let latest = notification.latestReceipt, let receipt = Data(base64Encoded: latest)
        else { throw PurchaseServerError.invalid("the V1 notification has no unified_receipt.latest_receipt") }
        let verified = app.receipts.verify(
            Array(receipt), expecting: ReceiptExpectations(bundleID: app.settings.bundleID), now: now())
        metrics.count(
            "storekeeper_verifications_total",
            ["kind": "notification-v1", "outcome": verified.isValid ? "OK" : (verified.failure?.code.rawValue ?? "")])
        guard let parsed = verified.receipt, verified.isValid else {
            throw PurchaseServerError.verification("the V1 notification's receipt did not verify")
        }
        let type = notification.type
        metrics.count("storekeeper_notifications_total", ["type": "V1:" + type.rawValue])
        // Apple's receipts only (Xcode sends no notifications): Production, or else the sandbox.
        let environment = Environment(name: parsed.environment, among: Environment.customerEnvironments) ?? .sandbox
        var found = Self.purchases(of: parsed, environment: environment).map {
            PurchaseUpdate(source: .notification, transaction: $0, notice: .v1(type))
        }
        for renewal in notification.pendingRenewals {
            found.append(
                PurchaseUpdate(
                    source: .notification,
                    renewal: RenewalFacts(
                        originalTransactionID: TransactionID(renewal.originalTransactionID),
                        autoRenewStatus: renewal.autoRenewStatus,
                        autoRenewProductID: renewal.autoRenewProductID.map(ProductID.init),
                        expirationIntent: renewal.expirationIntent, signedDate: parsed.creationDate),
                    notice: .v1(type)))
        }
        let updates = found
        let key = "notification-v1:" + Digest.hex(Digest.sha256(body).prefix(16))
        let current = now()
        let bundleID = app.settings.bundleID
        return try await write(input: (key, "notification-v1", body)) { store in
            try updates.flatMap { try self.apply($0, bundleID: bundleID, claimant: nil, in: store, now: current) }
        }
    }

    /// What an app's post did: the user's view, and the purchases the post carried.
    struct Posted {
        var view: SubscriberView
        var transactionIDs: Set<TransactionID>
    }

    /// A StoreKit 2 transaction the app posts for its user.
    public func ingestTransaction(bundleID: String, appUserID: String, signedTransaction: String) async throws
        -> SubscriberView
    {
        try await postTransaction(bundleID: bundleID, appUserID: appUserID, signedTransaction: signedTransaction).view
    }

    func postTransaction(bundleID: String, appUserID: String, signedTransaction: String) async throws -> Posted {
        let app = try app(bundleID)
        try Self.checkUserID(appUserID)
        let result = app.verify(signedTransaction, as: .transaction, now: now())
        metrics.count("storekeeper_verifications_total", ["kind": "transaction", "outcome": result.status.rawValue])
        guard result.isOK, let payload = result.payload, let purchase = Self.purchase(JWSTransaction(json: payload))
        else {
            throw PurchaseServerError.verification(
                "the transaction did not verify: \(result.status.rawValue) (\(result.reason ?? ""))"
                    + Self.trustHint(result.status))
        }
        guard app.settings.environments.contains(purchase.environment) || purchase.environment == .xcode else {
            throw PurchaseServerError.invalid("transactions from \(purchase.environment.rawValue) are not accepted")
        }
        // Per user: the same transaction posted by another user is a claim of its own (transfer or keep).
        let key =
            "transaction:\(purchase.transactionID):\(PurchaseEngine.milliseconds(purchase.signedDate)):\(appUserID)"
        let current = now()
        _ = try await write(input: (key, "transaction", Array(signedTransaction.utf8))) { store in
            try self.apply(
                PurchaseUpdate(source: .app, transaction: purchase), bundleID: bundleID, claimant: appUserID,
                in: store,
                now: current)
        }
        if purchase.kind == .autoRenewable {
            await refreshFromAPI(
                app: app, originalTransactionID: purchase.originalTransactionID, environment: purchase.environment)
        }
        return Posted(
            view: try await subscriber(bundleID: bundleID, appUserID: appUserID),
            transactionIDs: [purchase.transactionID])
    }

    /// What an app's `AppTransaction` said: who bought or downloaded the app, when and which version first.
    struct PostedAppTransaction {
        var view: SubscriberView
        var appTransactionID: String?
        var originalApplicationVersion: String?
        var originalPurchaseDate: Date?
        var environment: Environment
    }

    /// StoreKit 2's `AppTransaction` the app posts for its user: verified as a transaction is (chain, bundle,
    /// environment), recorded once per user as an `APP_TRANSACTION` event.
    func postAppTransaction(bundleID: String, appUserID: String, signedAppTransaction: String) async throws
        -> PostedAppTransaction
    {
        let app = try app(bundleID)
        try Self.checkUserID(appUserID)
        let result = app.verify(signedAppTransaction, as: .appTransaction, now: now())
        metrics.count(
            "storekeeper_verifications_total", ["kind": "app-transaction", "outcome": result.status.rawValue])
        guard result.isOK, let payload = result.payload else {
            throw PurchaseServerError.verification(
                "the app transaction did not verify: \(result.status.rawValue) (\(result.reason ?? ""))"
                    + Self.trustHint(result.status))
        }
        let appTransaction = AppTransaction(json: payload)
        guard appTransaction.bundleID == bundleID else {
            throw PurchaseServerError.invalid(
                "the app transaction is for \(appTransaction.bundleID ?? "no app"), not \(bundleID)")
        }
        guard let environment = appTransaction.receiptType.flatMap({ Environment(name: $0.rawValue) }) else {
            throw PurchaseServerError.invalid("the app transaction names no environment this server knows")
        }
        guard app.settings.environments.contains(environment) || environment == .xcode else {
            throw PurchaseServerError.invalid("app transactions from \(environment.rawValue) are not accepted")
        }
        var details: [String: String] = [:]
        details["appTransactionId"] = appTransaction.appTransactionID
        details["originalApplicationVersion"] = appTransaction.originalApplicationVersion
        details["applicationVersion"] = appTransaction.applicationVersion
        details["originalPurchaseDate"] = appTransaction.originalPurchaseDate.map {
            String(EpochMilliseconds.milliseconds($0))
        }
        // Once per user and app download: `appTransactionId` (iOS 18.4 and later), else what stays the same
        // on every signing of it (the first purchase's date and version).
        let identity =
            appTransaction.appTransactionID
            ?? "\(details["originalPurchaseDate"] ?? "-"):\(appTransaction.originalApplicationVersion ?? "-")"
        let current = now()
        let facts = details
        let recorded = try await write(input: nil) { store -> [ServerEvent] in
            // An alias is its user; a user the server has not seen becomes known (a first launch, nothing bought).
            let user = try store.user(bundle: bundleID, alias: appUserID) ?? appUserID
            try store.lock(user: user, bundle: bundleID)
            if try store.subscriber(bundle: bundleID, appUserID: user) == nil {
                try store.save(Subscriber(bundleID: bundleID, appUserID: user, firstSeen: current))
            }
            let event = ServerEvent(
                id: "\(ServerEventType.appTransaction):\(identity):\(user)", type: .appTransaction,
                bundleID: BundleID(bundleID), appUserID: user, date: current, environment: environment,
                source: .app, details: facts)
            return try store.append(event) ? [event] : []
        }
        for event in recorded.events { cache.invalidate(bundleID, event.appUserID ?? appUserID) }
        cache.invalidate(bundleID, appUserID)
        return PostedAppTransaction(
            view: try await subscriber(bundleID: bundleID, appUserID: appUserID),
            appTransactionID: appTransaction.appTransactionID,
            originalApplicationVersion: appTransaction.originalApplicationVersion,
            originalPurchaseDate: appTransaction.originalPurchaseDate, environment: environment)
    }

    /// An app receipt the app posts for its user: verified locally (chain, bundle, and the device hash when
    /// `deviceID` is given); every purchase in it applied.
    public func ingestReceipt(bundleID: String, appUserID: String, receipt: [UInt8], deviceID: String?) async throws
        -> SubscriberView
    {
        try await postReceipt(bundleID: bundleID, appUserID: appUserID, receipt: receipt, deviceID: deviceID).view
    }

    func postReceipt(bundleID: String, appUserID: String, receipt: [UInt8], deviceID: String?) async throws -> Posted {
        let app = try app(bundleID)
        try Self.checkUserID(appUserID)
        var expectations = ReceiptExpectations(bundleID: bundleID)
        if let deviceID {
            guard let uuid = UUID(uuidString: deviceID) else {
                throw PurchaseServerError.invalid("deviceId must be the device's identifierForVendor (a UUID)")
            }
            expectations.deviceIdentifier = withUnsafeBytes(of: uuid.uuid) { Array($0) }
        }
        let (verified, verifiedEnvironment) = app.verify(receipt, expecting: expectations, now: now())
        metrics.count(
            "storekeeper_verifications_total",
            ["kind": "receipt", "outcome": verified.isValid ? "OK" : (verified.failure?.code.rawValue ?? "")])
        guard verified.isValid, let parsed = verified.receipt else {
            throw PurchaseServerError.verification(
                "the receipt did not verify: \(verified.failure.map { String(describing: $0.code) } ?? "invalid")"
                    + (verified.failure?.code == .untrustedChain ? Self.trustHint(.invalidChain) : ""))
        }
        let environment = verifiedEnvironment ?? .sandbox
        guard app.settings.environments.contains(environment) || environment == .xcode else {
            throw PurchaseServerError.invalid("receipts from \(environment.rawValue) are not accepted")
        }
        let purchases = Self.purchases(of: parsed, environment: environment)
        let key =
            "receipt:" + Digest.hex(Digest.sha256(receipt).prefix(16)) + ":\(appUserID)"
        let current = now()
        _ = try await write(input: (key, "receipt", receipt)) { store in
            // A receipt with no purchase in it still makes the user known (with nothing to show yet).
            if purchases.isEmpty, try store.subscriber(bundle: bundleID, appUserID: appUserID) == nil {
                try store.save(Subscriber(bundleID: bundleID, appUserID: appUserID, firstSeen: current))
            }
            return try purchases.flatMap {
                try self.apply(
                    PurchaseUpdate(source: .app, transaction: $0), bundleID: bundleID, claimant: appUserID, in: store,
                    now: current)
            }
        }
        for original in Set(purchases.filter { $0.kind == .autoRenewable }.map(\.originalTransactionID)).sorted() {
            await refreshFromAPI(app: app, originalTransactionID: original, environment: environment)
        }
        return Posted(
            view: try await subscriber(bundleID: bundleID, appUserID: appUserID),
            transactionIDs: Set(purchases.map(\.transactionID)))
    }

    /// Asks the App Store Server API for the subscription's status (when a key is configured and the
    /// endpoint's budget allows) and applies what it says; answers the events it made, or nil when it did
    /// not ask. A failure is logged, not fatal (the notification or the next poll will tell). `polled`
    /// records the ask on the subscription (the reconciler's).
    @discardableResult
    func refreshFromAPI(
        app: AppRuntime, originalTransactionID: TransactionID, environment: Environment, polled: Bool = false
    )
        async -> Int?
    {
        guard let client = app.api[environment],
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
                let events = try updates.flatMap {
                    try self.apply($0, bundleID: bundleID, claimant: nil, in: store, now: current)
                }
                if polled, var subscription = try store.subscription(originalTransactionID) {
                    subscription.lastPolled = current
                    try store.save(subscription)
                }
                return events
            }
            return result.events.count
        } catch {
            logger.warning("server-api.refresh-failed", ["error": String(describing: error)])
            return 0
        }
    }

    /// Stores the input (when given) and runs `body` in one write; a duplicate input runs nothing.
    func write(
        input: (key: String, kind: String, body: [UInt8])?,
        _ body: @escaping @Sendable (any ServerStore) throws -> [ServerEvent]
    )
        async throws -> Ingested
    {
        let received = now()
        let result = try await storage.write { store -> Ingested in
            if let input,
                !(try store.recordInput(key: input.key, kind: input.kind, body: input.body, received: received))
            {
                return Ingested(duplicate: true, events: [])
            }
            return Ingested(duplicate: false, events: try body(store))
        }
        // Counted once the write is committed: a body run again (PostgreSQL retries a write that lost a race)
        // counts nothing twice.
        for event in result.events { metrics.count("storekeeper_events_total", ["type": event.type.rawValue]) }
        if !result.events.isEmpty { wakeDelivery() }
        return result
    }

    /// Applies one update inside a write: ownership (the claimant and the transfer policy), the engine,
    /// the records, the ledger, events and their webhooks. Answers the events it recorded (not those already
    /// there).
    func apply(_ update: PurchaseUpdate, bundleID: String, claimant: String?, in store: any ServerStore, now: Date)
        throws
        -> [ServerEvent]
    {
        guard let originalID = update.transaction?.originalTransactionID ?? update.renewal?.originalTransactionID else {
            return []
        }
        // A user the app knows by another id (an alias) is that user.
        let claimant = try claimant.map { try store.user(bundle: bundleID, alias: $0) ?? $0 }
        // The subscription, then the user: what follows reads them as the last writer left them.
        try store.lock(original: originalID)
        if let claimant { try store.lock(user: claimant, bundle: bundleID) }
        if let transaction = update.transaction, transaction.bundleID.rawValue != bundleID {
            throw PurchaseServerError.invalid("the transaction is for \(transaction.bundleID), not \(bundleID)")
        }
        let storedPurchase = try update.transaction.flatMap { try store.purchase($0.transactionID) }
        let storedSubscription = try store.subscription(originalID)
        var owner = storedSubscription?.owner ?? storedPurchase?.owner
        if owner == nil { owner = try store.purchases(original: originalID).first?.owner }
        if owner == nil, let token = update.transaction?.appAccountToken {
            owner = try store.subscriber(bundle: bundleID, appAccountToken: token)?.appUserID
        }
        var events: [ServerEvent] = []
        var transferred = false
        if let claimant, let token = update.transaction?.appAccountToken?.lowercased() {
            try checkAccountToken(token, claimant: claimant, bundleID: bundleID, in: store)
        }
        if let claimant {
            var subscriber =
                try store.subscriber(bundle: bundleID, appUserID: claimant)
                ?? Subscriber(bundleID: bundleID, appUserID: claimant, firstSeen: now)
            if let token = update.transaction?.appAccountToken?.lowercased(),
                !subscriber.appAccountTokens.contains(token)
            {
                subscriber.appAccountTokens.append(token)
            }
            if let current = owner, current != claimant {
                switch configuration.transferPolicy {
                case .transfer:
                    owner = claimant
                    transferred = true
                    events.append(
                        ServerEvent(
                            id:
                                "\(ServerEventType.transfer):\(originalID):\(claimant):\(PurchaseEngine.milliseconds(update.transaction?.signedDate))",
                            type: .transfer, bundleID: BundleID(bundleID), appUserID: claimant, date: now,
                            environment: update.transaction?.environment, productID: update.transaction?.productID,
                            transactionID: update.transaction?.transactionID, originalTransactionID: originalID,
                            source: update.source, details: ["transferredFrom": current, "transferredTo": claimant]))
                case .keep:
                    if !subscriber.flags.contains("purchase_kept_by_other_user") {
                        subscriber.flags.append("purchase_kept_by_other_user")
                    }
                }
            } else {
                owner = claimant
            }
            try store.save(subscriber)
        }
        for user in Set([owner, claimant, storedSubscription?.owner, storedPurchase?.owner].compactMap { $0 }) {
            cache.invalidate(bundleID, user)
        }
        let outcome = PurchaseEngine.apply(
            update, purchase: storedPurchase, subscription: storedSubscription, owner: owner, now: now)
        // An owner known now holds even when the facts were stale (a receipt signed before the notification).
        if var purchase = outcome.purchase {
            if let owner { purchase.owner = owner }
            if purchase != storedPurchase { try store.save(purchase) }
        }
        if var subscription = outcome.subscription {
            if let owner { subscription.owner = owner }
            if subscription != storedSubscription { try store.save(subscription) }
        }
        if transferred, let owner {
            for var purchase in try store.purchases(original: originalID) where purchase.owner != owner {
                purchase.owner = owner
                try store.save(purchase)
            }
            if var subscription = try store.subscription(originalID), subscription.owner != owner {
                subscription.owner = owner
                try store.save(subscription)
            }
        }
        for entry in outcome.ledger { _ = try store.append(entry) }
        // Events of a purchase no user has claimed yet wait for one: their webhooks go out with the user.
        if let owner, claimant == owner {
            for event in try store.claimOwnerlessEvents(original: originalID, owner: owner) {
                try enqueueWebhooks(for: event, in: store)
            }
        }
        var recorded: [ServerEvent] = []
        for event in events + outcome.events where try store.append(event) {
            if event.appUserID != nil || event.originalTransactionID == nil {
                try enqueueWebhooks(for: event, in: store)
            }
            // A cancellation within a day of a retention answer means the answer did not save it.
            if event.type == .cancellation, let original = event.originalTransactionID {
                try store.markRetentionCancelled(
                    original: original, since: event.date.addingTimeInterval(-Self.retentionSaveWindow), at: event.date)
            }
            recorded.append(event)
        }
        if let claimant, let owner, owner == claimant, update.transaction?.kind == .autoRenewable {
            try flagSeveralAccounts(bundleID: bundleID, user: claimant, in: store)
        }
        return recorded
    }

    /// One Apple account has one original purchase per subscription group: several for one user means
    /// several Apple accounts feed it (a shared or resold account).
    func flagSeveralAccounts(bundleID: String, user: String, in store: any ServerStore) throws {
        let purchases = try store.purchases(bundle: bundleID, owner: user).filter {
            $0.kind == .autoRenewable && $0.ownership == .purchased
        }
        guard Set(purchases.map(\.originalTransactionID)).count > 1,
            var subscriber = try store.subscriber(bundle: bundleID, appUserID: user),
            !subscriber.flags.contains("multiple_apple_accounts")
        else { return }
        subscriber.flags.append("multiple_apple_accounts")
        try store.save(subscriber)
    }

    /// A signed `appAccountToken` binds a purchase to the user who made it: a claimant other than the user
    /// who already holds the token (by an earlier claim, or whose id is that UUID) is refused, whatever the
    /// transfer policy — holding another user's signed transaction is not enough to take it.
    func checkAccountToken(_ token: String, claimant: String, bundleID: String, in store: any ServerStore) throws {
        var holders: Set<String> = []
        if let holder = try store.subscriber(bundle: bundleID, appAccountToken: token)?.appUserID {
            holders.insert(holder)
        }
        for spelling in Set([token, token.uppercased()]) {
            let user = try store.user(bundle: bundleID, alias: spelling) ?? spelling
            if try store.subscriber(bundle: bundleID, appUserID: user) != nil { holders.insert(user) }
        }
        holders.remove(claimant)
        guard holders.isEmpty else {
            throw PurchaseServerError(
                code: .accountTokenMismatch, status: 409,
                message: "the transaction's appAccountToken belongs to another user of this app")
        }
    }

    static func checkUserID(_ id: String) throws {
        guard (1...256).contains(id.utf8.count), !id.contains(where: { $0.isNewline || $0 == "\u{0}" }) else {
            throw PurchaseServerError.invalid("appUserId must be 1 to 256 characters")
        }
    }

    // MARK: - From Apple's payloads

    static func purchase(_ transaction: JWSTransaction) -> PurchaseRecord? {
        guard let id = transaction.transactionID, let bundleID = transaction.bundleID,
            let productID = transaction.productID, let purchaseDate = transaction.purchaseDate,
            let kind = transaction.type?.known,
            let environment = transaction.environment?.known
        else { return nil }
        var record = PurchaseRecord(
            transactionID: TransactionID(id),
            originalTransactionID: TransactionID(transaction.originalTransactionID ?? id),
            bundleID: BundleID(bundleID), productID: ProductID(productID), kind: kind,
            quantity: Int(transaction.quantity ?? 1),
            purchaseDate: purchaseDate,
            expiresDate: transaction.expiresDate, webOrderLineItemID: transaction.webOrderLineItemID,
            environment: environment, ownership: transaction.inAppOwnershipType?.known ?? .purchased,
            revocationDate: transaction.revocationDate, revocationReason: transaction.revocationReason?.rawValue,
            offerType: transaction.offerType?.rawValue, offerDiscountType: transaction.string("offerDiscountType"),
            appAccountToken: transaction.appAccountToken?.uuidString.lowercased(), price: transaction.price,
            currency: transaction.currency, reason: transaction.transactionReason?.known,
            signedDate: transaction.signedDate ?? purchaseDate)
        record.billingPlanType = transaction.billingPlanType
        if let info = transaction.commitmentInfo {
            record.commitment = CommitmentFacts(
                billingPeriodNumber: info["billingPeriodNumber"]?.int64Value.map { Int(clamping: $0) },
                totalBillingPeriods: info["totalBillingPeriods"]?.int64Value.map { Int(clamping: $0) },
                expiresDate: info["commitmentExpiresDate"]?.doubleValue.flatMap { EpochMilliseconds.date($0) },
                price: info["commitmentPrice"]?.int64Value)
        }
        return record
    }

    static func renewal(_ info: JWSRenewalInfo, status: Int64?, signedDate: Date) -> RenewalFacts? {
        guard let original = info.originalTransactionID else { return nil }
        var facts = RenewalFacts(
            originalTransactionID: TransactionID(original), status: status,
            autoRenewStatus: info.autoRenewStatus.map { $0 == 1 },
            autoRenewProductID: info.autoRenewProductID.map(ProductID.init),
            expirationIntent: info.expirationIntent?.rawValue,
            gracePeriodExpiresDate: info.gracePeriodExpiresDate, isInBillingRetryPeriod: info.isInBillingRetryPeriod,
            priceIncreaseStatus: info.priceIncreaseStatus, renewalDate: info.renewalDate,
            signedDate: info.signedDate ?? signedDate)
        facts.renewalBillingPlanType = info.renewalBillingPlanType
        if let commitment = info.commitmentInfo {
            facts.commitmentAutoRenewStatus = commitment["commitmentAutoRenewStatus"]?.int64Value.map { $0 == 1 }
            facts.commitmentRenewalDate = commitment["commitmentRenewalDate"]?.doubleValue.flatMap {
                EpochMilliseconds.date($0)
            }
        }
        return facts
    }

    /// What to do when signed data does not chain to the app's roots: the usual cause is a rehearsal.
    static func trustHint(_ status: VerificationStatus) -> String {
        switch status {
        case .invalidChain, .verificationFailure, .invalidCertificate:
            "; if it comes from the Storekeeper emulator, add its roots (storekeeper appstore certs) to the app's "
                + "jwsRoots and receiptRoots beside \"apple\", or run storekeeper dev"
        case .invalidChainLength:
            "; Xcode's StoreKit Testing signs with one certificate of its own: name it in the app's "
                + "\"xcode\": {\"certificates\": [...]}"
        default: ""
        }
    }

    /// The purchases a receipt holds, as of its creation date, in the environment it was verified for.
    static func purchases(of receipt: Receipt, environment: Environment) -> [PurchaseRecord] {
        receipt.inAppPurchases.map { item in
            let kind =
                item.productKind
                ?? (item.expiresDate != nil || item.webOrderLineItemID != nil ? .autoRenewable : .nonConsumable)
            return PurchaseRecord(
                transactionID: TransactionID(item.transactionID),
                originalTransactionID: TransactionID(item.originalTransactionID ?? item.transactionID),
                bundleID: BundleID(receipt.bundleID), productID: ProductID(item.productID), kind: kind,
                quantity: Int(item.quantity),
                purchaseDate: item.purchaseDate, expiresDate: item.expiresDate,
                webOrderLineItemID: item.webOrderLineItemID.map { String($0) }, environment: environment,
                revocationDate: item.cancellationDate,
                offerType: item.isTrialPeriod == true || item.isInIntroOfferPeriod == true ? 1 : nil,
                offerDiscountType: item.isTrialPeriod == true ? "FREE_TRIAL" : nil, signedDate: receipt.creationDate)
        }
    }
}

/// An App Store Server Notification V1 as the server uses it: read from its JSON at the edge of ingestion.
/// Nothing in it is trusted but through the app's shared secret (`password`) and the receipt it carries,
/// which is verified again.
struct V1Notification: Sendable {
    var type: NotificationTypeV1
    var password: String?
    /// `unified_receipt.latest_receipt`, base64.
    var latestReceipt: String?
    /// `unified_receipt.pending_renewal_info`.
    var pendingRenewals: [PendingRenewal]

    struct PendingRenewal: Sendable {
        var originalTransactionID: String
        var autoRenewStatus: Bool?
        var autoRenewProductID: String?
        var expirationIntent: Int64?
    }

    /// Nil when `object` is not a V1 notification (no `notification_type`).
    init?(_ object: JSONObject) {
        guard let type = object["notification_type"] else { return nil }
        self.type = NotificationTypeV1(rawValue: type.stringValue ?? "UNKNOWN")
        password = object["password"]?.stringValue
        latestReceipt = object["unified_receipt"]?["latest_receipt"]?.stringValue
        pendingRenewals = (object["unified_receipt"]?["pending_renewal_info"]?.arrayValue ?? []).compactMap {
            renewal in
            guard let original = renewal["original_transaction_id"]?.stringValue else { return nil }
            return PendingRenewal(
                originalTransactionID: original,
                autoRenewStatus: renewal["auto_renew_status"]?.stringValue.map { $0 == "1" },
                autoRenewProductID: renewal["auto_renew_product_id"]?.stringValue,
                expirationIntent: renewal["expiration_intent"]?.stringValue.flatMap { Int64($0) })
        }
    }
}
