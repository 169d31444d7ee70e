import AppStoreReceipts
import AppStoreSignedData
public import Foundation
import StoreKitCatalog
public import StoreModel
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

/// App Store Server Notifications V2: rendered and signed when the change that causes them is written (so
/// they say what was true then), kept in the outbox in the same transaction, and sent by the scheduler
/// with Apple's success rule and retry schedule. At least once: an attempt claimed before a crash is made
/// again when its lease falls due.
extension AppStore {
    /// A claimed attempt's lease: if no result is recorded by then (the emulator stopped), it is made again.
    static let attemptLease: TimeInterval = 120

    func notificationSettings(bundleID: String, environment: Environment, now: Date) -> NotificationSettings? {
        notificationSettings.withLock { $0[bundleID] }?.settings(for: environment, rate: rate, now: now)
    }

    /// The app's notification settings (`GET`/`PUT /_emulator/v1/apps/{bundleId}/notifications`).
    public func notifications(bundleID: String) throws -> AppNotifications {
        _ = try app(bundleID)
        return notificationSettings.withLock { $0[bundleID] } ?? AppNotifications()
    }

    public func setNotifications(bundleID: String, _ settings: AppNotifications) async throws {
        _ = try app(bundleID)
        let text = JSONWriter.string(settings.json)
        try await storage.write { store in try store.setSetting(Setting.notifications(bundleID), text) }
        notificationSettings.withLock { $0[bundleID] = settings }
    }

    /// `latest` and `original`, when the caller has them as stored, spare reading them again.
    func enqueue(
        _ notice: Notice, subscription: StoredSubscription, account: Account, in store: any EmulatorStore, now: Date,
        extra: JSONObject = [:], latest known: StoredTransaction? = nil, original: StoredTransaction? = nil
    ) throws {
        guard
            notificationSettings(
                bundleID: subscription.bundleID.rawValue, environment: account.environment, now: now) != nil
        else { return }
        guard
            let latest = try known.flatMap({ $0.id == subscription.latestTransactionID ? $0 : nil })
                ?? store.transaction(subscription.latestTransactionID)
        else { return }
        // The subscription's start: its original transaction's purchase date, read alone when not at hand.
        let started =
            try original.flatMap({ $0.id == subscription.originalTransactionID ? $0.transaction.purchaseDate : nil })
            ?? (latest.id == subscription.originalTransactionID
                ? latest.transaction.purchaseDate : store.purchaseDate(of: subscription.originalTransactionID))
        try enqueue(
            notice, transaction: latest, renewal: (subscription.state, started), account: account, in: store,
            now: now, extra: extra)
    }

    /// A notification about one period of `subscription` (the one a refund request names, which may be a
    /// past one), with the subscription's renewal state now.
    func enqueue(
        _ notice: Notice, period: StoredTransaction, of subscription: StoredSubscription, account: Account,
        in store: any EmulatorStore, now: Date, extra: JSONObject = [:]
    ) throws {
        let started =
            period.id == subscription.originalTransactionID
            ? period.transaction.purchaseDate : try store.purchaseDate(of: subscription.originalTransactionID)
        try enqueue(
            notice, transaction: period, renewal: (subscription.state, started), account: account, in: store,
            now: now, extra: extra)
    }

    /// Writes one notification per configured URL into the outbox and schedules its first attempt now.
    func enqueue(
        _ notice: Notice, transaction: StoredTransaction, renewal: (SubscriptionState, Date?)?, account: Account,
        in store: any EmulatorStore, now: Date, extra: JSONObject = [:]
    ) throws {
        let bundleID = transaction.transaction.bundleID.rawValue
        guard let settings = notificationSettings(bundleID: bundleID, environment: account.environment, now: now)
        else { return }
        let app = apps[bundleID]
        if settings.version == 1 {
            // Events with no V1 equivalent send nothing on V1.
            guard let v1Type = notice.v1Type else { return }
            let body = try v1Body(
                v1Type, transaction: transaction, state: renewal?.0, account: account, app: app, in: store, now: now)
            for url in settings.urls {
                let id = newNotificationUUID(at: now)
                try store.insert(
                    OutboundNotification(
                        id: id, bundleID: BundleID(bundleID), environment: account.environment, version: 1,
                        url: url, body: body, signedPayload: nil, notice: notice,
                        originalTransactionID: transaction.transaction.originalID, created: now,
                        retryDelays: settings.retryDelays, retryClientErrors: settings.retryClientErrors,
                        timeoutMilliseconds: settings.timeoutMilliseconds))
                try schedule(DueEvent(kind: .notificationAttempt, key: id, due: now), in: store)
            }
            return
        }
        // Everything is read and rendered here; the three ES256 signatures are made by ``V2Signing`` (at once,
        // or with the rest of a batch of due events, on every core, before the batch commits).
        var data: JSONObject = [
            "bundleId": .string(bundleID), "bundleVersion": .string(app?.version ?? "1.0"),
            "environment": .string(account.environment.rawValue),
        ]
        if account.environment == .production { data["appAppleId"] = .integer(app?.appAppleID ?? 0) }
        for (key, value) in extra.members { data[key] = value }
        var info: JSONObject?
        if let (state, started) = renewal {
            info = renewalInfo(
                state, account: account, signedDate: now, started: started, latest: transaction.transaction)
            data["status"] = .integer(state.status.rawValue)
        }
        let work = V2Signing(
            signer: signer, transaction: transactionPayload(transaction, account: account), renewalInfo: info,
            data: data,
            notifications: settings.urls.map { url in
                let uuid = newNotificationUUID(at: now)
                var payload: JSONObject = ["notificationType": .string(notice.type.rawValue)]
                if let subtype = notice.subtype { payload["subtype"] = .string(subtype.rawValue) }
                payload["notificationUUID"] = .string(uuid)
                let unsigned = OutboundNotification(
                    id: uuid, bundleID: BundleID(bundleID), environment: account.environment, version: 2, url: url,
                    body: [], signedPayload: nil, notice: notice,
                    originalTransactionID: transaction.transaction.originalID, created: now,
                    retryDelays: settings.retryDelays, retryClientErrors: settings.retryClientErrors,
                    timeoutMilliseconds: settings.timeoutMilliseconds)
                return (unsigned, payload)
            }, signedDate: Self.milliseconds(now), header: signerHeader)
        if let batch = V2Signing.batch {
            batch.add(work)
        } else {
            try insert(try work.sign(), in: store)
        }
    }

    /// Writes signed notifications into the outbox, each with its first attempt due when it was made.
    func insert(_ notifications: [OutboundNotification], in store: any EmulatorStore) throws {
        for notification in notifications {
            try store.insert(notification)
            let attempt = DueEvent(kind: .notificationAttempt, key: notification.id, due: notification.created)
            try schedule(attempt, in: store)
        }
    }

    /// A V1 notification (`responseBodyV1`, shared/spec/notifications.md §3): unsigned JSON with the app's
    /// shared secret as `password` and the account's unified receipt as verifyReceipt would answer it now.
    func v1Body(
        _ type: NotificationTypeV1, transaction: StoredTransaction, state: SubscriptionState?, account: Account,
        app: AppConfiguration?, in store: any EmulatorStore, now: Date
    ) throws -> [UInt8] {
        let bundle = transaction.transaction.bundleID
        let production = account.environment == .production
        let purchases = try store.transactions(account: account.id, bundle: bundle).filter(\.isInReceipt)
        let subscriptions = try store.subscriptions(account: account.id, bundle: bundle)
        let current = Self.wholeSeconds(now)
        // The app's original purchase (date and version) is the account's first install's, as every receipt
        // of the account's devices says; without one, its first purchase's date and the app's version.
        let firstInstall = try store.installs(account: account.id, bundle: bundle).first
        let firstPurchase =
            firstInstall?.originalPurchaseDate ?? purchases.map(\.transaction.purchaseDate).min() ?? current
        var receipt = Receipt(
            receiptType: ReceiptType(environment: account.environment, volumePurchase: false).rawValue,
            appItemID: production ? app?.appAppleID ?? 0 : 0, bundleID: bundle.rawValue,
            appVersion: app?.version ?? "1.0", opaqueValue: randomBytes(16), sha1Hash: [], ageRating: "4+",
            developerID: 0, creationDate: current, downloadID: 0, versionExternalID: 0,
            originalPurchaseDate: Self.wholeSeconds(firstPurchase),
            originalAppVersion: firstInstall?.originalVersion ?? app?.version ?? "1.0",
            expirationDate: nil, inAppPurchases: purchases.map { InAppPurchase($0.transaction) })
        // No device: the hash is of a device no one has (a V1 receiver re-verifies the receipt without one).
        receipt.sha1Hash = randomBytes(20)
        let signed = try receipt.signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
        var result = VerifyReceiptResult(
            status: 0, environment: account.environment, requestDate: now, receipt: receipt,
            latest: VerifyReceiptResult.Latest(
                // Apple's unified_receipt holds the latest 100 (its latest_receipt has them all).
                transactions: Array(
                    purchases.sorted { $0.transaction.purchaseDate > $1.transaction.purchaseDate }.prefix(100)),
                receipt: signed,
                renewals: subscriptions.map { subscription in
                    VerifyReceiptResult.Renewal(
                        subscription: subscription, expired: (subscription.state.expiresDate ?? .distantFuture) <= now)
                }))
        result.revocationReasons = Self.revocationReasons(purchases)
        let rendered = Self.render(result)
        var unified: JSONObject = ["status": .integer(0), "environment": .string(account.environment.rawValue)]
        unified["latest_receipt"] = rendered["latest_receipt"]
        unified["latest_receipt_info"] = rendered["latest_receipt_info"]
        unified["pending_renewal_info"] = rendered["pending_renewal_info"]
        var body: JSONObject = [
            "notification_type": .string(type.rawValue), "environment": .string(production ? "PROD" : "Sandbox"),
            "bid": .string(bundle.rawValue), "bvrs": .string(app?.version ?? "1.0"),
            "original_transaction_id": .string(transaction.transaction.originalID.rawValue),
        ]
        if let secret = app?.sharedSecret { body["password"] = .string(secret) }
        if let state {
            body["auto_renew_status"] = .string(state.autoRenew ? "true" : "false")
            body["auto_renew_product_id"] = .string(state.autoRenewProductID.rawValue)
            if type == "DID_CHANGE_RENEWAL_STATUS" {
                for (key, value) in ReceiptDate.triplet("auto_renew_status_change_date", current) {
                    body[key] = .string(value)
                }
            }
            if let intent = state.expirationIntent { body["expiration_intent"] = .string(String(intent.rawValue)) }
        }
        body["unified_receipt"] = .object(unified)
        return JSONWriter.bytes(.object(body))
    }

    func sign(_ payload: JSONObject) throws -> String {
        try signer.sign(payload)
    }

    /// Claims an attempt inside a write: the lease is scheduled, and the notification is sent after the
    /// commit. With no delivery slot free for its receiver, or others for its receiver waiting for one, it
    /// joins the queue instead.
    func claimAttempt(_ id: String, in store: any EmulatorStore, now: Date, claims: SlotClaims) throws
        -> DueWork.Outcome
    {
        // Still being sent by this process (the clock moved past the lease meanwhile): only the lease renews,
        // and the notification (its payload is the largest row there is) is not read. Its result, recorded
        // when the send ends, cancels the lease.
        if delivery.isInFlight(id) {
            try scheduleLease(id, in: store, now: now)
            return .nothing
        }
        guard let notification = try store.notification(id), notification.state == .pending else { return .nothing }
        return try claimOrQueue(notification, in: store, now: now, claims: claims) ? .send(notification) : .nothing
    }

    /// Within a write: claims `notification` (a slot and its lease) to send after the commit, or, with no
    /// slot free (for its receiver, or at all) or others for its receiver waiting for one, puts it in the
    /// queue behind them. True when claimed.
    func claimOrQueue(
        _ notification: OutboundNotification, in store: any EmulatorStore, now: Date, claims: SlotClaims
    ) throws -> Bool {
        // Settled, every receiver with notifications queued has no slot free, so the claim below fails for
        // it: the queue need not be asked.
        let waiting = try delivery.queueMayMove && store.hasQueued(url: notification.url)
        guard !waiting, delivery.takeSlot(notification.id, url: notification.url, claims: claims) else {
            try store.queueForDelivery(notification.id)
            return false
        }
        try scheduleLease(notification.id, in: store, now: now)
        return true
    }

    /// A claimed send's lease: made again if no result is recorded by then.
    func scheduleLease(_ id: String, in store: any EmulatorStore, now: Date) throws {
        try schedule(
            DueEvent(kind: .notificationLease, key: id, due: now.addingTimeInterval(Self.attemptLease)), in: store)
    }

    /// Within a write: takes as many queued notifications as there are free slots (at most a batch), each
    /// claimed with its lease, to send after the commit. Each receiver's line is taken oldest first; the
    /// receivers with a slot free share the pass (what one leaves goes to the others), starting with a
    /// different one each time.
    func claimQueued(in store: any EmulatorStore, now: Date, claims: SlotClaims) throws -> [OutboundNotification] {
        let epoch = delivery.queueEpoch.load(ordering: .sequentiallyConsistent)
        guard delivery.queueSettled.load(ordering: .sequentiallyConsistent) != epoch else { return [] }
        let (free, held) = delivery.inFlight.withLock {
            (delivery.maxInFlight - $0.claims.count, $0.perReceiver)
        }
        var room = min(free, 256)
        var taken: [OutboundNotification] = []
        if room > 0 {
            var open = try store.queuedURLs().filter { held[$0, default: 0] < delivery.maxPerReceiver }
            if !open.isEmpty {
                let turn = Int(
                    UInt(bitPattern: delivery.queueTurn.add(1, ordering: .relaxed).newValue) % UInt(open.count))
                open = Array(open[turn...] + open[..<turn])
            }
            var takenFor: [String: Int] = [:]
            while room > 0, !open.isEmpty {
                let share = max(1, room / open.count)
                var more: [String] = []
                for url in open where room > 0 {
                    let left = delivery.maxPerReceiver - held[url, default: 0] - takenFor[url, default: 0]
                    let limit = min(share, room, left)
                    let line = try store.takeQueued(url: url, limit: limit)
                    room -= line.count
                    takenFor[url, default: 0] += line.count
                    taken += line
                    // Its line may hold more, and it may take more.
                    if line.count == limit, left > limit { more.append(url) }
                }
                open = more
            }
        }
        var claimed: [OutboundNotification] = []
        var moved = false
        for notification in taken {
            // One no longer pending (sent by another way) leaves the queue: the queue moved.
            guard notification.state == .pending else {
                moved = true
                continue
            }
            // Writes run one at a time and only they take slots, so the free ones counted above are still
            // free, though the last of them are kept for receivers that hold none. One that found no slot
            // goes back to its place in the queue (its outbox position); one still in flight (claimed by a
            // write whose failure has not yet given its slot back) is left to a lease, which sends it if
            // no result comes.
            guard delivery.takeSlot(notification.id, url: notification.url, claims: claims) else {
                if !delivery.isInFlight(notification.id) {
                    try store.queueForDelivery(notification.id)
                } else {
                    try scheduleLease(notification.id, in: store, now: now)
                }
                continue
            }
            try scheduleLease(notification.id, in: store, now: now)
            claimed.append(notification)
        }
        // Nothing could move: no write asks again until a slot is given back.
        if claimed.isEmpty, !moved { delivery.queueSettled.store(epoch, ordering: .sequentiallyConsistent) }
        return claimed
    }

    /// Claims and sends queued notifications while slots are free (after a restart, or when a recorded
    /// result did not find the queue's next).
    func sendQueued() async throws {
        guard delivery.queueCanMove else { return }
        let current = now
        let claims = SlotClaims()
        do {
            let sends = try await storage.write { store in
                try self.claimQueued(in: store, now: current, claims: claims)
            }
            deliver(sends)
        } catch {
            delivery.release(claims)
            throw error
        }
    }

    /// Notifications waiting in the outbox for a delivery slot now (counted: for reports, not requests).
    public func deliveryQueueDepth() async throws -> Int {
        try await storage.read { try $0.queuedCount() }
    }

    /// Notifications sent at once at most (each holds its payload in memory until its result is recorded);
    /// the rest wait in the outbox's delivery queue, in order.
    public static let defaultMaxNotificationsInFlight = 1_024

    /// Sends claimed notifications (their slots taken) in the background and records the results for each
    /// receiver (URL) in one write once its sends are done: a receiver that does not answer delays the
    /// recording of no other's. One subscription's notifications to a receiver go one after another, in the
    /// order they were written; different subscriptions' go side by side (Apple promises no order;
    /// receivers order by signedDate) on the shared delivery lanes, a whole chain per lane at a time.
    func deliver(_ notifications: [OutboundNotification]) {
        guard !notifications.isEmpty else { return }
        // Each receiver's notifications, receivers in the order they first appear.
        var receivers: [String] = []
        var toReceiver: [String: [OutboundNotification]] = [:]
        for notification in notifications {
            if toReceiver[notification.url] == nil { receivers.append(notification.url) }
            toReceiver[notification.url, default: []].append(notification)
        }
        // Each send's claim, so that recording it gives back that slot and no later claim's.
        let tokens = delivery.inFlight.withLock { inFlight in
            Dictionary(
                notifications.map { ($0.id, inFlight.claims[$0.id]?.token ?? 0) }, uniquingKeysWith: { a, _ in a })
        }
        for url in receivers {
            delivery.lanes.submit(
                Self.chains(toReceiver[url] ?? []), send: { [self] in sendBlocking($0, claim: tokens[$0.id] ?? 0) }
            ) { [self] attempted in
                Task.detached { [self] in await self.record(attempted) }
            }
        }
    }

    /// One receiver's notifications as chains: each subscription's in the order they were written.
    static func chains(_ notifications: [OutboundNotification]) -> [[OutboundNotification]] {
        var chains: [[OutboundNotification]] = []
        var chainOf: [String: Int] = [:]
        for notification in notifications {
            let key = notification.originalTransactionID?.rawValue ?? notification.id
            if let index = chainOf[key] {
                chains[index].append(notification)
            } else {
                chainOf[key] = chains.count
                chains.append([notification])
            }
        }
        return chains
    }

    /// One attempt's outcome, waiting to be recorded.
    struct Attempted: Sendable {
        var notification: OutboundNotification
        /// The claim the send was made under (its slot's token).
        var claim: UInt64
        var result: SendAttemptResult
        var status: Int?
        var at: Date
    }

    /// One attempt, on the calling thread (a delivery lane's).
    func sendBlocking(_ notification: OutboundNotification, claim: UInt64) -> Attempted {
        // Only the status counts: a receiver's long answer is cut, not held (nor a reason to retry).
        let client = HTTPClient(
            timeout: .milliseconds(Int64(notification.timeoutMilliseconds)), maxResponseBytes: 64 << 10,
            truncatesResponse: true)
        var status: Int?
        let result: SendAttemptResult
        switch client.sendBlocking(
            "POST", notification.url, headers: [("Content-Type", "application/json")], body: notification.body)
        {
        case .success(let response):
            status = response.status
            result = Outbox.isSuccess(status: response.status) ? .success : .unsuccessfulHTTPResponseCode
        case .failure(let error):
            result =
                switch error.code {
                case .timedOut: .timedOut
                case .connectFailed, .resolveFailed: .socketIssue
                case .tlsFailed: .tlsIssue
                case .responseTooLarge: .invalidResponse
                default: .other
                }
        }
        // Recording needs the notification's identity, attempts and schedule, not its payload: the largest
        // part of it is not kept while the result waits for the writer.
        var sent = notification
        sent.body = []
        sent.signedPayload = nil
        return Attempted(notification: sent, claim: claim, result: result, status: status, at: now)
    }

    /// Records attempts, each with its next step (delivered, retry at, failed), in one write, which also
    /// claims the queued notifications the freed slots make room for.
    func record(_ attempts: [Attempted]) async {
        guard !attempts.isEmpty else { return }
        let current = now
        let claims = SlotClaims()
        let recorded = attempts.map { (id: $0.notification.id, token: $0.claim) }
        do {
            let queued = try await storage.write { store in
                for attempt in attempts {
                    // The notification as claimed, with its state and attempts as stored now (its payload,
                    // written once, is not read again).
                    guard let delivery = try store.delivery(attempt.notification.id), delivery.state == .pending
                    else { continue }
                    var stored = attempt.notification
                    (stored.state, stored.attempts) = (delivery.state, delivery.attempts)
                    switch Outbox.record(attempt.result, status: attempt.status, at: attempt.at, in: &stored) {
                    case .delivered, .failed: break
                    case .retry(let date):
                        try self.schedule(DueEvent(kind: .notificationAttempt, key: stored.id, due: date), in: store)
                    }
                    try store.cancel(kind: .notificationLease, key: stored.id)
                    try store.update(stored)
                }
                // No longer in flight for any write after this one (a retry falling due at once must be
                // claimed, not taken for the send still in progress); given back here, whether or not the
                // write commits (if not, their leases send them again).
                self.delivery.release(recorded)
                return try self.claimQueued(in: store, now: current, claims: claims)
            }
            deliver(queued)
            for attempt in attempts {
                logger.info(
                    "notification.attempt",
                    [
                        "notification.id": attempt.notification.id,
                        "notification.type": attempt.notification.notice.description,
                        "result": attempt.result.rawValue,
                    ])
            }
        } catch {
            delivery.release(recorded)
            delivery.release(claims)
            logger.error("notification.record-failed", ["error": String(describing: error)])
        }
    }

    /// The app's notifications in `environment` created in `from..<to`, oldest first, a page at a time.
    public func notificationHistory(
        bundleID: String, environment: Environment, from: Date, to: Date, after: Int64?, limit: Int
    ) async throws -> [(position: Int64, notification: OutboundNotification)] {
        _ = try app(bundleID)
        return try await storage.read { store in
            try store.notifications(
                bundle: BundleID(bundleID), environment: environment, from: from, to: to, after: after, limit: limit)
        }
    }
}
