import AppStoreReceipts
import AppStoreSignedData
public import Foundation
import StoreKitCatalog
import StoreModel
public import StoreTime
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperLogging
public import StorekeeperSQL
import SubscriptionLifecycle
import Synchronization

/// Store time: the virtual clock, advances and rates, and the scheduler that runs what falls due.
extension AppStore {
    // MARK: - Clock and the scheduler

    public var rate: TimeRate { clockState.withLock { $0.rate } }

    /// Every advance so far: store time minus real time, in seconds.
    public var clockOffset: TimeInterval { clockState.withLock { $0.offset } }

    /// Store time now: the real time plus every advance.
    public var now: Date {
        let clock = clockState.withLock { $0 }
        return clock.now(real: realNow())
    }

    /// Advances store time by `period` at the current rate (and switches rate first when asked), then runs
    /// everything that fell due, in order.
    public func setClock(advance period: StorePeriod?, rate newRate: TimeRate?) async throws -> ClockChange {
        let realNow = self.realNow
        clockChanges.add(1, ordering: .sequentiallyConsistent)
        defer { clockChanges.subtract(1, ordering: .sequentiallyConsistent) }
        try await writingCachedSettings { store in
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

    /// Runs `body` in a write that also changes the cached clock or products off sale (inside the write, so
    /// that the caches follow the stored order). When the write fails, its changes to them may not be stored
    /// (a failed commit rolls back a body that returned): both are read again from what is.
    func writingCachedSettings<T: Sendable>(_ body: @escaping @Sendable (any EmulatorStore) throws -> T)
        async throws -> T
    {
        do {
            return try await storage.write(body)
        } catch let refused as EmulatorError {
            // Refused before anything changed (the bodies check first).
            throw refused
        } catch {
            do {
                let (clock, notForSale, raised) = try await storage.read { try Self.cachedSettings(in: $0) }
                clockState.withLock { $0 = clock }
                productsNotForSale.withLock { $0 = notForSale }
                raisedPrices.withLock { $0 = raised }
            } catch {
                logger.error("settings.reload-failed", ["error": String(describing: error)])
            }
            throw error
        }
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
    func pruneIfDue() async {
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

    /// How long the store's one writer has spent in write transactions so far (nil where the storage does not
    /// measure it): every run of due events, recording of sends and request's change is one, so a share near the
    /// whole of a span means the writer set its rate (reports, not requests).
    public var storeWriterBusy: Duration? { storage.writerBusy }

    /// The CPU time the store's writer has spent in those write transactions (nil where not measured): with
    /// ``storeWriterBusy``, whether the writer's rate is its own work or its waits.
    public var storeWriterCPU: Duration? { storage.writerCPU }

    /// Counts what each statement costs the store's writer from now on, from zero (`on`), or stops counting.
    public func countStoreWriterStatements(_ on: Bool) async { await storage.countWriterStatements(on) }

    /// What each statement has cost the store's writer while counted, the costliest first (empty for a store
    /// that does not measure it).
    public func storeWriterStatementCosts() async -> [StatementCost] { await storage.writerStatementCosts() }

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
                    // The batch's V2 notifications are signed together, on every core, before it commits; its
                    // identifiers' counters are stored once, below.
                    let signing = V2Signing.Batch()
                    let counters = CounterWrites()
                    try CounterWrites.$current.withValue(counters) {
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
                    }
                    try counters.store(in: store)
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
                delivery.release(claims)
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
                // Mass extensions a stopped process left incomplete go on (their requests were answered).
                await self?.serverAPI.resumeMassExtensions()
                while !Task.isCancelled {
                    guard let self else { return }
                    // First, so a scheduler that always finds events due prunes too.
                    await self.pruneIfDue()
                    var wait = granularity
                    if let due = self.nextDue.withLock({ $0 }) {
                        let delay = due.timeIntervalSince(self.now)
                        if delay <= 0 {
                            // A clock change runs what its advance made due itself.
                            if self.clockChanges.load(ordering: .sequentiallyConsistent) > 0 {
                                try? await Task.sleep(for: .milliseconds(5))
                                continue
                            }
                            do { try await self.runDue(maxEvents: 1_024) } catch {
                                self.logger.error("scheduler.failed", ["error": String(describing: error)])
                            }
                            continue
                        }
                        // At most an hour (the wait is shorter still): a date far off, or not a number, never
                        // overflows the conversion.
                        wait = min(wait, .milliseconds(Int64((delay < 3_600 ? delay : 3_600) * 1000) + 1))
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
        HandledEvent.current?.noteScheduled(event)
        nextDue.withLock { $0 = min($0 ?? event.due, event.due) }
    }

    /// Applies one due event and says what it did.
    ///
    /// The event's row goes once it is handled, unless handling it scheduled it again (the next renewal, a
    /// lease renewed): then the row was moved in place, not deleted and inserted again.
    func handle(_ event: DueEvent, in store: any EmulatorStore, now: Date, claims: SlotClaims) throws
        -> DueWork.Outcome
    {
        let handled = HandledEvent(event)
        let outcome = try HandledEvent.$current.withValue(handled) {
            try handleScheduled(event, in: store, now: now, claims: claims)
        }
        if !handled.scheduledAgain { try store.cancel(kind: event.kind, key: event.key) }
        return outcome
    }

    private func handleScheduled(_ event: DueEvent, in store: any EmulatorStore, now: Date, claims: SlotClaims)
        throws -> DueWork.Outcome
    {
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
}

/// The due event being handled, while it is: whether handling it scheduled the same event again.
final class HandledEvent: Sendable {
    private let kind: DueEvent.Kind
    private let key: String
    private let again = Atomic<Bool>(false)

    @TaskLocal static var current: HandledEvent?

    init(_ event: DueEvent) { (kind, key) = (event.kind, event.key) }

    var scheduledAgain: Bool { again.load(ordering: .relaxed) }

    /// Notes `event` scheduled within the handling: the handled one again if its kind and key are the same.
    func noteScheduled(_ event: DueEvent) {
        if event.kind == kind, event.key == key { again.store(true, ordering: .relaxed) }
    }
}
