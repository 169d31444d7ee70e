import Synchronization

/// Keeps a shared ``SubscriberCache`` current on storage other processes write: before a read uses what
/// this process keeps, the storage is asked which users changed since the last asking
/// (``ServerStorage/subscriberChanges(since:)``, one round trip), and those are dropped.
///
/// One asking serves every read that arrived before it was sent: a read waits for the first asking that
/// starts after it arrived (so a write any process acknowledged before the read arrived is in that asking's
/// answer or an earlier one), and readers arriving meanwhile share the next one. Under load a round trip is
/// spent per batch of reads, not per read.
final class ChangeFollower: Sendable {
    private typealias Waiter = CheckedContinuation<Void, any Error>

    private struct State {
        var running = false
        var waiting: [Waiter] = []
        var watermark: SubscriberChanges.Watermark?
        var askings = 0
    }

    private let state = Mutex(State())
    private let cache: SubscriberCache
    private let ask: @Sendable (SubscriberChanges.Watermark?) async throws -> SubscriberChanges

    init(
        cache: SubscriberCache,
        ask: @escaping @Sendable (SubscriberChanges.Watermark?) async throws -> SubscriberChanges
    ) {
        self.cache = cache
        self.ask = ask
    }

    /// Reads waiting for the next asking.
    var waiting: Int { state.withLock { $0.waiting.count } }

    /// Round trips made so far.
    var askings: Int { state.withLock { $0.askings } }

    /// Whether an asking has answered (from then on what is kept can be vouched for).
    var started: Bool { state.withLock { $0.watermark != nil } }

    /// Returns once an asking sent after this call has been applied to the cache; throws its error.
    func catchUp() async throws {
        try await withCheckedThrowingContinuation { (waiter: Waiter) in
            let start = state.withLock { state -> Bool in
                state.waiting.append(waiter)
                guard !state.running else { return false }
                state.running = true
                return true
            }
            if start { Task { await self.run() } }
        }
    }

    /// Asks while reads wait: each asking takes every reader waiting when it is sent.
    private func run() async {
        while true {
            let (batch, watermark) = state.withLock { state -> ([Waiter], SubscriberChanges.Watermark?) in
                defer { state.waiting.removeAll(keepingCapacity: true) }
                if state.waiting.isEmpty { state.running = false }
                return (state.waiting, state.watermark)
            }
            guard !batch.isEmpty else { return }
            do {
                let changes = try await ask(watermark)
                if watermark == nil || !changes.complete {
                    cache.removeAll()  // nothing kept can be vouched for: the first asking, or too many changes
                } else {
                    for pair in changes.users { cache.invalidate(pair.bundleID, pair.appUserID) }
                }
                state.withLock {
                    $0.watermark = changes.watermark
                    $0.askings += 1
                }
                for waiter in batch { waiter.resume() }
            } catch {
                for waiter in batch { waiter.resume(throwing: error) }
            }
        }
    }
}
