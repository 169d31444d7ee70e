import Synchronization

/// Keeps a shared ``SubscriberCache`` current on storage other processes write, by asking the storage which
/// users changed since the last asking (``ServerStorage/subscriberChanges(since:reporting:)``, one round
/// trip) and dropping them.
///
/// **Reads that wait.** A read may wait for the first asking sent after it arrived (``catchUp()``): a write
/// any process acknowledged before the read arrived is in that asking's answer or an earlier one. One asking
/// serves every read waiting when it is sent.
///
/// **Reads that never wait (leases).** Where the storage keeps leases (PostgreSQL), each asking also renews
/// this process's lease and reports the last asking it applied. A write is acknowledged only once every
/// other process holding a live lease has applied an asking that began after the write committed
/// (``acknowledge()``), so while this process's own lease is live it answers from memory without asking
/// (``vouches``). Its lease ends here ``Timing/margin`` before the storage lets it go (it is counted from
/// when the asking was sent, the storage's from when it ran the asking), and an answer vouches for what is
/// kept only when it arrived while the previous lease still ran: from the storage's side this process was a
/// live reader throughout, so no write since that asking's snapshot was acknowledged without it. A process
/// that dies or stalls holds writers back at most for ``Timing/lease``, one that gives its lease back
/// (``leave()``) not at all. An asking renews the lease only if this process applied the asking that ran
/// before it, so one whose answers are lost on the way back is not waited for once its lease ends.
final class ChangeFollower: Sendable {
    private typealias Waiter = CheckedContinuation<Void, any Error>

    /// How long leases run and how often the follower asks.
    struct Timing: Sendable {
        /// How long the storage keeps an asking's lease (a dead process holds writers back at most this).
        var lease: Duration = .seconds(2)
        /// Taken off the lease on this side.
        var margin: Duration = .milliseconds(500)
        /// Between askings while writes wait or users changed at the last one.
        var busy: Duration = .milliseconds(1)
        /// Between askings otherwise, while a lease is held.
        var idle: Duration = .milliseconds(20)
    }

    private struct Acknowledgement {
        /// The askings sent before the write asked (the first sent after it names its time).
        var sentBefore: Int
        /// When the first asking sent after the write began (storage's clock); nil until it answers.
        var since: Int64?
        var waiter: Waiter
    }

    private struct State {
        var running = false
        /// After ``leave()``: no lease, nothing answered from memory; askings only while someone waits.
        var withdrawn = false
        var waiting: [Waiter] = []
        var acknowledging: [Acknowledgement] = []
        var watermark: SubscriberChanges.Watermark?
        var askings = 0
        var sent = 0
        /// The storage's time of the last answer applied (reported at the next asking).
        var applied: Int64?
        /// Whether the storage keeps leases (its last answer said when it was asked).
        var leased = false
        /// Where this process's lease ends, on the monotonic clock (conservatively early).
        var leaseEnd: Duration?
        /// Whether what is kept can be answered from without asking (while the lease runs).
        var vouched = false
        var sleeping: (token: Int, continuation: CheckedContinuation<Void, Never>)?
        var sleeps = 0
        /// The users the last answer named, each with the change that named it.
        var marks: [String: String] = [:]
        /// Waiting for the loop to end (``leave()``).
        var ended: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())
    private let cache: SubscriberCache
    private let reader: String
    private let timing: Timing
    private let clock: @Sendable () -> Duration
    private let ask: @Sendable (SubscriberChanges.Watermark?, CacheReaderReport) async throws -> SubscriberChanges

    /// `reader`: this process among those sharing the storage; `clock`: monotonic time.
    init(
        cache: SubscriberCache, reader: String, timing: Timing = Timing(),
        clock: @escaping @Sendable () -> Duration = ChangeFollower.monotonic,
        ask: @escaping @Sendable (SubscriberChanges.Watermark?, CacheReaderReport) async throws -> SubscriberChanges
    ) {
        self.cache = cache
        self.reader = reader
        self.timing = timing
        self.clock = clock
        self.ask = ask
    }

    private static let origin = ContinuousClock.now
    static let monotonic: @Sendable () -> Duration = { ContinuousClock.now - origin }

    /// Reads waiting for the next asking.
    var waiting: Int { state.withLock { $0.waiting.count } }

    /// Writes waiting to be acknowledged.
    var acknowledging: Int { state.withLock { $0.acknowledging.count } }

    /// Round trips made so far.
    var askings: Int { state.withLock { $0.askings } }

    /// Whether an asking has answered (from then on what is kept can be vouched for).
    var started: Bool { state.withLock { $0.watermark != nil } }

    /// Whether what is kept may be answered from now, without asking: this process's lease runs, and it
    /// has applied an answer that arrived while its previous lease ran.
    var vouches: Bool {
        let now = clock()
        return state.withLock { $0.vouched && $0.leaseEnd.map { now < $0 } ?? false }
    }

    /// Returns once an asking sent after this call has been applied to the cache; throws its error.
    func catchUp() async throws {
        try await withCheckedThrowingContinuation { (waiter: Waiter) in
            let wake = state.withLock { state in
                state.waiting.append(waiter)
                return self.wake(&state)
            }
            wake()
        }
    }

    /// After a write committed: returns once every other process holding a lease has applied an asking
    /// that began after this call (at once where the storage keeps no leases, after one asking here).
    func acknowledge() async throws {
        try await withCheckedThrowingContinuation { (waiter: Waiter) in
            let wake = state.withLock { state in
                state.acknowledging.append(Acknowledgement(sentBefore: state.sent, since: nil, waiter: waiter))
                return self.wake(&state)
            }
            wake()
        }
    }

    /// Gives the lease back (writers of other processes stop waiting for this one) and answers nothing
    /// from memory any more; reads and writes still wait for askings as they need them.
    func leave() async {
        let wake = state.withLock { state in
            state.withdrawn = true
            state.vouched = false
            let sleeping = state.sleeping?.continuation
            state.sleeping = nil
            return sleeping
        }
        wake?.resume()
        // Once no asking sent with a lease is under way, one that gives it back.
        await withCheckedContinuation { (ended: CheckedContinuation<Void, Never>) in
            let running = state.withLock { state in
                if state.running { state.ended.append(ended) }
                return state.running
            }
            if !running { ended.resume() }
        }
        let (watermark, applied, leased) = state.withLock { ($0.watermark, $0.applied, $0.leased) }
        guard leased else { return }
        _ = try? await ask(watermark, CacheReaderReport(reader: reader, applied: applied, lease: .zero))
    }

    /// Starts the loop, or ends its pause; called under the lock, the returned work run outside it.
    private func wake(_ state: inout State) -> () -> Void {
        if !state.running {
            state.running = true
            return { Task { [weak self] in while let follower = self, await follower.step() {} } }
        }
        if let sleeping = state.sleeping {
            state.sleeping = nil
            return { sleeping.continuation.resume() }
        }
        return {}
    }

    /// One asking and the pause after it; false when the loop ends (nobody waits, and no lease is kept).
    private func step() async -> Bool {
        let now = clock()
        let taken = state.withLock {
            state -> (
                batch: [Waiter], number: Int, watermark: SubscriberChanges.Watermark?, report: CacheReaderReport
            )? in
            if state.waiting.isEmpty && state.acknowledging.isEmpty && (!state.leased || state.withdrawn) {
                state.running = false
                for waiter in state.ended { waiter.resume() }
                state.ended.removeAll()
                return nil
            }
            defer { state.waiting.removeAll(keepingCapacity: true) }
            state.sent += 1
            let report = CacheReaderReport(
                reader: reader, applied: state.applied, lease: state.withdrawn ? .zero : timing.lease)
            return (state.waiting, state.sent, state.watermark, report)
        }
        guard let taken else { return false }
        let sent = now
        var pause = timing.idle
        do {
            let changes = try await ask(taken.watermark, taken.report)
            let received = clock()
            // Users named by a change applied already are not dropped again (a transaction left open holds
            // the mark back, and every answer names them while it does; what a read kept since the drop
            // includes the change).
            let seen = state.withLock { $0.marks }
            var news = false
            var named: [String: String] = [:]
            if taken.watermark == nil || !changes.complete {
                cache.removeAll()  // nothing kept can be vouched for: the first asking, or too many changes
                news = !changes.complete
            } else {
                let known = changes.marks.count == changes.users.count
                for (index, pair) in changes.users.enumerated() {
                    guard known else {
                        cache.invalidate(pair.bundleID, pair.appUserID)
                        news = true
                        continue
                    }
                    let key = SubscriberCache.key(pair.bundleID, pair.appUserID)
                    let mark = changes.marks[index]
                    named[key] = mark
                    if seen[key] != mark {
                        cache.invalidate(pair.bundleID, pair.appUserID)
                        news = true
                    }
                }
            }
            let released = state.withLock { state -> [Waiter] in
                state.watermark = changes.watermark
                state.askings += 1
                var released: [Waiter] = []
                if let asked = changes.askedAt {
                    state.vouched =
                        !state.withdrawn && taken.report.lease > .zero && taken.watermark != nil
                        && state.leaseEnd.map { received < $0 } ?? false
                    // A renewal refused (an answer was lost before) leaves the lease where it was.
                    if changes.leaseRenewed { state.leaseEnd = sent + timing.lease - timing.margin }
                    state.applied = asked
                    state.leased = true
                    // A write is in every other live reader's memory once each applied an asking that began
                    // after the first asking sent after the write (which began after it committed).
                    for index in state.acknowledging.indices
                    where state.acknowledging[index].since == nil
                        && state.acknowledging[index].sentBefore < taken.number
                    {
                        state.acknowledging[index].since = asked
                    }
                    state.acknowledging.removeAll { acknowledgement in
                        guard let since = acknowledgement.since, changes.othersApplied.map({ $0 >= since }) ?? true
                        else { return false }
                        released.append(acknowledgement.waiter)
                        return true
                    }
                } else {
                    // No leases: nothing is answered from memory without asking, so a commit is enough.
                    state.vouched = false
                    state.leased = false
                    state.acknowledging.removeAll { acknowledgement in
                        guard acknowledgement.sentBefore < taken.number else { return false }
                        released.append(acknowledgement.waiter)
                        return true
                    }
                }
                // Quickly again while writes wait, or while others write (their writes wait for this
                // process's next report); not for an answer that only repeats the last (a transaction left
                // open holds the mark back, and every answer names the same users again).
                state.marks = named
                if !state.waiting.isEmpty {
                    pause = .zero
                } else if !state.acknowledging.isEmpty || news {
                    pause = timing.busy
                }
                return released
            }
            for waiter in taken.batch { waiter.resume() }
            for waiter in released { waiter.resume() }
        } catch {
            for waiter in taken.batch { waiter.resume(throwing: error) }
            // The writes that were waiting for this asking's time fail (committed, but not known to be in
            // every other process's memory: the client asks again, and finds the input stored); those with a
            // time already wait on for the next answers.
            let failed = state.withLock { state -> [Waiter] in
                var failed: [Waiter] = []
                state.acknowledging.removeAll { acknowledgement in
                    guard acknowledgement.since == nil, acknowledgement.sentBefore < taken.number else { return false }
                    failed.append(acknowledgement.waiter)
                    return true
                }
                if !state.waiting.isEmpty || !state.acknowledging.isEmpty { pause = timing.busy }
                return failed
            }
            for waiter in failed { waiter.resume(throwing: error) }
        }
        await self.pause(pause)
        return true
    }

    /// Sleeps `duration`, or less when a read or write wakes the loop.
    private func pause(_ duration: Duration) async {
        guard duration > .zero else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let token = state.withLock { state -> Int? in
                // A read, or a write not yet covered by an asking, that arrived since the last one: no pause.
                guard state.waiting.isEmpty, !state.acknowledging.contains(where: { $0.sentBefore == state.sent })
                else { return nil }
                state.sleeps += 1
                state.sleeping = (state.sleeps, continuation)
                return state.sleeps
            }
            guard let token else { return continuation.resume() }
            Task { [weak self] in
                try? await Task.sleep(for: duration)
                guard let self else { return }
                let sleeping = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                    guard let sleeping = state.sleeping, sleeping.token == token else { return nil }
                    state.sleeping = nil
                    return sleeping.continuation
                }
                sleeping?.resume()
            }
        }
    }
}
