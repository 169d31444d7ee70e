import Foundation
import Synchronization

/// What a subscriber view is computed from, kept in memory so that reads answer without the database (and
/// inline, on the HTTP server's thread). Every write that touches a user invalidates the user's entry
/// inside the write; a read stores what it read only if no invalidation came since it started, so the
/// cache never keeps a state older than the last commit.
final class SubscriberCache: Sendable {
    struct Entry: Sendable {
        var subscriber: Subscriber
        var subscriptions: [SubscriptionRecord]
        var purchases: [PurchaseRecord]
        var balances: [String: Int]
        var grants: [Grant]
    }

    private struct State {
        var entries: [String: Entry] = [:]
        /// The invalidation count at each user's last invalidation.
        var generations: [String: UInt64] = [:]
        var counter: UInt64 = 0
    }

    private let state = Mutex(State())
    /// Off when other processes write the same storage: their commits would not invalidate this memory.
    let enabled: Bool

    init(enabled: Bool = true) { self.enabled = enabled }
    /// Users kept at most; when full, the cache starts afresh.
    static let capacity = 100_000

    static func key(_ bundleID: String, _ user: String) -> String { bundleID + "\u{1F}" + user }

    func entry(_ bundleID: String, _ user: String) -> Entry? {
        guard enabled else { return nil }
        return state.withLock { $0.entries[Self.key(bundleID, user)] }
    }

    /// The generation to hand back to ``store(_:_:_:since:)``.
    func generation(_ bundleID: String, _ user: String) -> UInt64 {
        state.withLock { $0.generations[Self.key(bundleID, user)] ?? 0 }
    }

    func store(_ entry: Entry, _ bundleID: String, _ user: String, since generation: UInt64) {
        guard enabled else { return }
        let key = Self.key(bundleID, user)
        state.withLock { state in
            guard (state.generations[key] ?? 0) == generation else { return }
            if state.entries.count >= Self.capacity { state.entries.removeAll(keepingCapacity: true) }
            state.entries[key] = entry
        }
    }

    func invalidate(_ bundleID: String, _ user: String) {
        let key = Self.key(bundleID, user)
        state.withLock { state in
            state.counter += 1
            state.generations[key] = state.counter
            state.entries[key] = nil
        }
    }
}
