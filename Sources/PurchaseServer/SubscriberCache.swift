import Foundation
import Synchronization

/// What a subscriber view is computed from, kept in memory so that reads answer without the database (and
/// inline, on the HTTP server's thread). Every write that touches a user invalidates the user's entry
/// inside the write; a read stores what it read only if no invalidation came since it started, so the
/// cache never keeps a state older than the last commit.
///
/// On storage other processes write too (``shared``), their writes cannot reach this memory: an entry is
/// used only after a ``ChangeFollower`` asked the storage which users changed since it last asked and
/// dropped them (one round trip on PostgreSQL, shared by every read waiting), and never inline.
final class SubscriberCache: Sendable {
    struct Entry: Sendable {
        /// The user's records as read, with the storage's count of changes to the user then.
        var records: SubscriberRecords
        var version: Int64 { records.version }
        /// Answers already rendered from these records, by route, each with the span of time it holds for.
        var rendered: [Answer: Rendered] = [:]
        /// The user's generation when the records were read (set by ``SubscriberCache/store(_:_:_:since:)``).
        var generation: UInt64 = 0
    }

    /// The answers kept rendered.
    enum Answer: Sendable, Hashable { case subscriber, entitlements }

    /// An answer's bytes and the times they are right for: `from ≤ now < until` (the answer depends on the
    /// time only through which expiry dates have passed).
    struct Rendered: Sendable {
        var bytes: [UInt8]
        var from: Date
        var until: Date

        func holds(at now: Date) -> Bool { from <= now && now < until }
    }

    private struct State {
        var entries: [String: Entry] = [:]
        /// The invalidation count at each user's last invalidation.
        var generations: [String: UInt64] = [:]
        var counter: UInt64 = 0
        /// The invalidation count when everything was dropped (``removeAll()``): every user's generation is
        /// at least this.
        var floor: UInt64 = 0
        /// Users invalidated by writes that have not committed yet (tracked when the storage says when
        /// writes commit).
        var uncommitted: Set<String> = []
        /// Look-ups that found the user kept (``entry(_:_:)``), and reads that asked the storage instead
        /// (``missed()``).
        var hits = 0
        var misses = 0
    }

    private let state = Mutex(State())
    /// Whether other processes write the same storage: entries are used only once a ``ChangeFollower`` caught
    /// up after the read arrived.
    let shared: Bool

    /// Whether ``committed()`` is called after each write transaction (storage whose reads run beside its
    /// writes).
    private let tracksCommits = Atomic<Bool>(false)

    /// Users kept at most; when full, an eighth of them go. 0 keeps none (every read asks the storage). With
    /// both answers rendered a user takes about 1.2 KB (121 MiB measured for 100,000 users of three purchases).
    let capacity: Int

    init(shared: Bool = false, capacity: Int = ServerConfiguration.defaultCachedUsers) {
        self.shared = shared
        self.capacity = max(0, capacity)
    }

    /// From now on, ``committed()`` follows every write transaction.
    func trackCommits() { tracksCommits.store(true, ordering: .releasing) }

    static func key(_ bundleID: String, _ user: String) -> String { bundleID + "\u{1F}" + user }

    /// The user's entry. When ``shared``, current only once the ``ChangeFollower`` caught up after the read
    /// arrived.
    func entry(_ bundleID: String, _ user: String) -> Entry? {
        let key = Self.key(bundleID, user)
        return state.withLock { state in
            let entry = state.entries[key]
            if entry != nil { state.hits += 1 }
            return entry
        }
    }

    /// Counts a read that found nothing current kept and asks the storage.
    func missed() { state.withLock { $0.misses += 1 } }

    /// Users whose last invalidation is remembered (at most twice ``capacity``).
    var generationsRemembered: Int { state.withLock { $0.generations.count } }

    /// Users kept now and at most, the look-ups so far that found their user kept, and the reads that asked
    /// the storage (for `/metrics`).
    var counts: PurchaseServer.SubscriberCacheCounts {
        state.withLock {
            PurchaseServer.SubscriberCacheCounts(
                users: $0.entries.count, capacity: capacity, hits: $0.hits, misses: $0.misses)
        }
    }

    /// Whether anything is kept of the user (current or not).
    func holds(_ bundleID: String, _ user: String) -> Bool {
        state.withLock { $0.entries[Self.key(bundleID, user)] != nil }
    }

    /// The generation to hand back to ``store(_:_:_:since:)``.
    func generation(_ bundleID: String, _ user: String) -> UInt64 {
        state.withLock { max($0.generations[Self.key(bundleID, user)] ?? 0, $0.floor) }
    }

    func store(_ entry: Entry, _ bundleID: String, _ user: String, since generation: UInt64) {
        let key = Self.key(bundleID, user)
        state.withLock { state in
            guard capacity > 0, max(state.generations[key] ?? 0, state.floor) == generation else { return }
            if state.entries.count >= capacity {
                // An eighth goes, in the table's own (hash) order: about as good as random, and no reader of
                // the rest starts cold.
                for key in Array(state.entries.keys.prefix(max(1, capacity / 8))) { state.entries[key] = nil }
            }
            var entry = entry
            entry.generation = generation
            state.entries[key] = entry
        }
    }

    /// Keeps an answer rendered from `entry` when the cache still holds those records (no write since).
    func store(_ rendered: Rendered, as answer: Answer, for entry: Entry, _ bundleID: String, _ user: String) {
        let key = Self.key(bundleID, user)
        state.withLock { state in
            // Any invalidation since the records were read removed them (and a newer read's carry its own
            // generation); an entry read since may have replaced these records under the same generation
            // (after a floor moved), so the version must match too.
            guard let kept = state.entries[key], kept.generation == entry.generation, kept.version == entry.version
            else { return }
            state.entries[key]?.rendered[answer] = rendered
        }
    }

    /// Called inside a write that changes the user: what was read before is dropped, and a read already
    /// under way does not keep what it read.
    func invalidate(_ bundleID: String, _ user: String) {
        let key = Self.key(bundleID, user)
        let tracks = tracksCommits.load(ordering: .acquiring)
        state.withLock { state in
            state.counter += 1
            if state.generations.count >= 2 * max(capacity, 1) {
                // Bounded like the entries: the floor stands for every generation forgotten (reads under way
                // then keep nothing; what is kept stays).
                state.floor = state.counter
                state.generations.removeAll()
            }
            state.generations[key] = state.counter
            state.entries[key] = nil
            if tracks { state.uncommitted.insert(key) }
        }
    }

    /// Drops every user, and keeps no read already under way.
    func removeAll() {
        state.withLock { state in
            state.counter += 1
            state.floor = state.counter
            state.entries.removeAll()
            state.generations.removeAll()
        }
    }

    /// After a write transaction ended: the users it invalidated are invalidated again, so that a read
    /// that began between the invalidation and the commit (seeing the state before the write) does not keep
    /// what it read, and what such a read kept is dropped.
    func committed() {
        state.withLock { state in
            guard !state.uncommitted.isEmpty else { return }
            for key in state.uncommitted {
                state.counter += 1
                state.generations[key] = state.counter
                state.entries[key] = nil
            }
            state.uncommitted.removeAll(keepingCapacity: true)
        }
    }
}
