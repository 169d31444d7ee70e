import Foundation
import StoreModel
import Synchronization
import Testing

@testable import PurchaseServer

/// The shared cache's follower, against a fake storage whose answers the test holds back.
@Suite("Shared cache: one asking serves every read waiting, and drops what others changed")
struct ChangeFollowerTests {
    /// A storage that answers each asking when the test releases it.
    final class FakeStorage: Sendable {
        struct State {
            var askings: [CheckedContinuation<SubscriberChanges, any Error>] = []
            var started = 0
            var reports: [CacheReaderReport] = []
        }
        let state = Mutex(State())

        func ask(_ watermark: SubscriberChanges.Watermark?, _ report: CacheReaderReport) async throws
            -> SubscriberChanges
        {
            try await withCheckedThrowingContinuation { continuation in
                state.withLock {
                    $0.askings.append(continuation)
                    $0.started += 1
                    $0.reports.append(report)
                }
            }
        }

        var started: Int { state.withLock { $0.started } }
        var reports: [CacheReaderReport] { state.withLock { $0.reports } }

        /// Waits until `count` askings have been sent.
        func waitForAskings(_ count: Int) async throws {
            while started < count { try await Task.sleep(for: .milliseconds(1)) }
        }

        /// Answers the oldest asking waiting, once there is one.
        func answer(_ result: Result<SubscriberChanges, any Error>) async {
            while true {
                let next = state.withLock { $0.askings.isEmpty ? nil : $0.askings.removeFirst() }
                if let next {
                    next.resume(with: result)
                    return
                }
                try? await Task.sleep(for: .milliseconds(1))
            }
        }
    }

    final class Counter: Sendable {
        private let count = Mutex(0)
        func add() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    static func entry(_ user: String) -> SubscriberCache.Entry {
        SubscriberCache.Entry(
            records: SubscriberRecords(
                subscriber: Subscriber(bundleID: "app", appUserID: user, firstSeen: Date(timeIntervalSince1970: 0)),
                subscriptions: [], purchases: [], balances: [:], grants: [], version: 0))
    }

    static func changes(_ users: [String], complete: Bool = true, watermark: String = "1") -> SubscriberChanges {
        SubscriberChanges(
            watermark: .init(watermark), users: users.map { .init(bundleID: "app", appUserID: $0) },
            complete: complete)
    }

    @Test("Reads arriving during an asking wait for the next one, and share it")
    func batching() async throws {
        let cache = SubscriberCache(shared: true)
        let storage = FakeStorage()
        let follower = ChangeFollower(cache: cache, reader: "me", ask: storage.ask)
        let returned = Counter()
        // The first read starts an asking and waits for it.
        let first = Task {
            try await follower.catchUp()
            returned.add()
        }
        while storage.started < 1 { try await Task.sleep(for: .milliseconds(1)) }
        // Twenty reads arrive while it is under way: the asking sent before them cannot answer them.
        let later = (0..<20).map { _ in
            Task {
                try await follower.catchUp()
                returned.add()
            }
        }
        while follower.waiting < 20 { try await Task.sleep(for: .milliseconds(1)) }
        await storage.answer(.success(Self.changes([], watermark: "1")))
        try await first.value
        #expect(returned.value == 1)
        // One asking more, sent after they all arrived, answers the twenty.
        while storage.started < 2 { try await Task.sleep(for: .milliseconds(1)) }
        await storage.answer(.success(Self.changes([], watermark: "2")))
        for task in later { try await task.value }
        #expect(returned.value == 21)
        #expect(storage.started == 2)
        #expect(follower.askings == 2)
    }

    @Test(
        "Users another process changed are dropped (once a change); too many changes or the first asking drop everyone")
    func dropping() async throws {
        let cache = SubscriberCache(shared: true)
        let storage = FakeStorage()
        let follower = ChangeFollower(cache: cache, reader: "me", ask: storage.ask)
        func keep(_ users: [String]) {
            for user in users { cache.store(Self.entry(user), "app", user, since: cache.generation("app", user)) }
        }
        func catchUp(answering changes: SubscriberChanges) async throws {
            async let done: Void = follower.catchUp()
            await storage.answer(.success(changes))
            try await done
        }
        keep(["a", "b"])
        try await catchUp(answering: Self.changes([]))  // the first asking vouches for nothing kept before it
        #expect(!cache.holds("app", "a") && !cache.holds("app", "b"))
        keep(["a", "b", "c"])
        try await catchUp(answering: Self.changes(["b", "nobody"]))
        #expect(cache.holds("app", "a") && !cache.holds("app", "b") && cache.holds("app", "c"))
        // A read under way before a user was dropped does not keep what it read.
        let generation = cache.generation("app", "a")
        try await catchUp(answering: Self.changes(["a"]))
        cache.store(Self.entry("a"), "app", "a", since: generation)
        #expect(!cache.holds("app", "a"))
        try await catchUp(answering: Self.changes([], complete: false))
        #expect(!cache.holds("app", "c"))
        // Nor one under way before everything was dropped.
        let before = cache.generation("app", "d")
        try await catchUp(answering: Self.changes([], complete: false))
        cache.store(Self.entry("d"), "app", "d", since: before)
        #expect(!cache.holds("app", "d"))
        cache.store(Self.entry("d"), "app", "d", since: cache.generation("app", "d"))
        #expect(cache.holds("app", "d"))
        // A user named again for a change already applied is not dropped again; a new change drops it.
        func named(_ users: [String: String]) -> SubscriberChanges {
            var changes = Self.changes(Array(users.keys).sorted())
            changes.marks = changes.users.map { users[$0.appUserID]! }
            return changes
        }
        try await catchUp(answering: Self.changes([], complete: false))  // a fresh start
        keep(["a", "b"])
        try await catchUp(answering: named(["a": "7"]))
        #expect(!cache.holds("app", "a") && cache.holds("app", "b"))
        keep(["a"])  // read again after the drop: it includes change 7
        try await catchUp(answering: named(["a": "7", "b": "9"]))
        #expect(cache.holds("app", "a") && !cache.holds("app", "b"))
        keep(["b"])
        try await catchUp(answering: named(["a": "8", "b": "9"]))
        #expect(!cache.holds("app", "a") && cache.holds("app", "b"))
        // Once an answer no longer names a user, a later one naming it again (a new change) drops it.
        keep(["a"])
        try await catchUp(answering: named(["b": "9"]))
        try await catchUp(answering: named(["a": "8"]))
        #expect(!cache.holds("app", "a"))
    }

    @Test("What the cache remembers of invalidated users is bounded; what it keeps stays, reads under way keep nothing")
    func boundedGenerations() {
        let cache = SubscriberCache(shared: true, capacity: 1_000)
        cache.store(Self.entry("kept"), "app", "kept", since: cache.generation("app", "kept"))
        let underWay = cache.generation("app", "late")
        for user in 0..<(2 * cache.capacity + 1) { cache.invalidate("app", "u\(user)") }
        #expect(cache.generationsRemembered <= 2 * cache.capacity)
        #expect(cache.holds("app", "kept"))
        cache.store(Self.entry("late"), "app", "late", since: underWay)
        #expect(!cache.holds("app", "late"))
    }

    @Test("An asking that fails fails the reads waiting for it; the next one is asked again")
    func failing() async throws {
        let storage = FakeStorage()
        let follower = ChangeFollower(cache: SubscriberCache(shared: true), reader: "me", ask: storage.ask)
        let failed = Task { try await follower.catchUp() }
        await storage.answer(.failure(PurchaseServerError.unavailable("down")))
        await #expect(throws: PurchaseServerError.self) { try await failed.value }
        async let next: Void = follower.catchUp()
        await storage.answer(.success(Self.changes([])))
        try await next
        #expect(storage.started == 2)
    }

    /// A clock the test moves.
    final class ManualClock: Sendable {
        private let time = Mutex(Duration.zero)
        func advance(_ duration: Duration) { time.withLock { $0 += duration } }
        var now: Duration { time.withLock { $0 } }
    }

    static func leased(_ users: [String], asked: Int64, others: Int64?, watermark: String = "1") -> SubscriberChanges {
        var changes = Self.changes(users, watermark: watermark)
        changes.askedAt = asked
        changes.othersApplied = others
        return changes
    }

    static let timing = ChangeFollower.Timing(
        lease: .seconds(2), margin: .milliseconds(500), busy: .milliseconds(1), idle: .milliseconds(1))

    @Test(
        "With leases: what is kept is answered without asking only while the lease runs, and after an answer that came in time"
    )
    func leases() async throws {
        let cache = SubscriberCache(shared: true)
        let storage = FakeStorage()
        let clock = ManualClock()
        let follower = ChangeFollower(
            cache: cache, reader: "me", timing: Self.timing, clock: { clock.now }, ask: storage.ask)
        async let first: Void = follower.catchUp()
        await storage.answer(.success(Self.leased([], asked: 100, others: nil)))
        try await first
        // The first answer vouches for nothing (there was no lease before it); the loop goes on asking.
        #expect(!follower.vouches)
        try await storage.waitForAskings(2)
        #expect(storage.reports[0] == CacheReaderReport(reader: "me", applied: nil, lease: .seconds(2)))
        #expect(storage.reports[1] == CacheReaderReport(reader: "me", applied: 100, lease: .seconds(2)))
        await storage.answer(.success(Self.leased([], asked: 200, others: nil)))
        try await storage.waitForAskings(3)
        #expect(follower.vouches)
        // Its lease ends here half a second before the storage's (sent at 0: 1.5 s).
        clock.advance(.milliseconds(1_499))
        #expect(follower.vouches)
        clock.advance(.milliseconds(1))
        #expect(!follower.vouches)
        // An answer that came after the previous lease ended vouches for nothing, even with a new lease.
        await storage.answer(.success(Self.leased([], asked: 300, others: nil)))
        try await storage.waitForAskings(4)
        #expect(!follower.vouches)
        clock.advance(.milliseconds(100))
        await storage.answer(.success(Self.leased([], asked: 400, others: nil)))
        try await storage.waitForAskings(5)
        #expect(!follower.vouches)  // the lease it came under (sent at 0) had ended too
        await storage.answer(.success(Self.leased([], asked: 500, others: nil)))
        try await storage.waitForAskings(6)
        #expect(follower.vouches)  // sent at 1.5 s, lease to 3 s: this one came in time
        #expect(storage.reports[5].applied == 500)
        // Answers that did not renew the lease (the storage says so) leave its end where it was.
        clock.advance(.milliseconds(400))  // 2.0 s
        for asked in [600, 700] as [Int64] {
            var kept = Self.leased([], asked: asked, others: nil)
            kept.leaseRenewed = false
            await storage.answer(.success(kept))
            try await storage.waitForAskings(Int(asked / 100) + 1)
        }
        #expect(follower.vouches)
        clock.advance(.milliseconds(1_100))  // 3.1 s: the end of the lease the fifth asking renewed (sent at 1.6 s)
        #expect(!follower.vouches)
        // Leaving: the asking under way is answered, then the lease is given back.
        async let left: Void = follower.leave()
        await storage.answer(.success(Self.leased([], asked: 800, others: nil)))
        try await storage.waitForAskings(9)
        #expect(!follower.vouches)
        await storage.answer(.success(Self.leased([], asked: 900, others: nil)))
        await left
        #expect(storage.reports[8] == CacheReaderReport(reader: "me", applied: 800, lease: .zero))
    }

    @Test("With leases: a write is answered once every other live reader applied an asking begun after it")
    func acknowledgements() async throws {
        let cache = SubscriberCache(shared: true)
        let storage = FakeStorage()
        let follower = ChangeFollower(
            cache: cache, reader: "me", timing: Self.timing, clock: { ManualClock().now }, ask: storage.ask)
        async let first: Void = follower.catchUp()
        await storage.answer(.success(Self.leased([], asked: 100, others: nil)))
        try await first
        try await storage.waitForAskings(2)
        // A write asks while the second asking is under way: that asking began before it, and says nothing.
        let acknowledged = Task { try await follower.acknowledge() }
        while follower.acknowledging < 1 { try await Task.sleep(for: .milliseconds(1)) }
        await storage.answer(.success(Self.leased([], asked: 200, others: 1_000)))
        try await storage.waitForAskings(3)
        #expect(follower.acknowledging == 1)
        // The third began after it (at 300); the other reader has applied only an asking begun at 250.
        await storage.answer(.success(Self.leased(["u"], asked: 300, others: 250)))
        try await storage.waitForAskings(4)
        #expect(follower.acknowledging == 1)
        await storage.answer(.success(Self.leased([], asked: 400, others: 300)))
        try await acknowledged.value
        #expect(follower.acknowledging == 0)
        // With no other live reader, the first asking begun after the write answers it.
        try await storage.waitForAskings(5)
        let alone = Task { try await follower.acknowledge() }
        while follower.acknowledging < 1 { try await Task.sleep(for: .milliseconds(1)) }
        await storage.answer(.success(Self.leased([], asked: 500, others: nil)))
        try await storage.waitForAskings(6)
        await storage.answer(.success(Self.leased([], asked: 600, others: nil)))
        try await alone.value
        // A failed asking fails the writes waiting on it (they are stored; the client asks again).
        try await storage.waitForAskings(7)
        let failing = Task { try await follower.acknowledge() }
        while follower.acknowledging < 1 { try await Task.sleep(for: .milliseconds(1)) }
        await storage.answer(.success(Self.leased([], asked: 700, others: nil)))
        try await storage.waitForAskings(8)
        await storage.answer(.failure(PurchaseServerError.unavailable("down")))
        await #expect(throws: PurchaseServerError.self) { try await failing.value }
        // Leaving gives the lease back once the loop has stopped.
        try await storage.waitForAskings(9)
        async let left: Void = follower.leave()
        await storage.answer(.success(Self.leased([], asked: 900, others: nil)))
        try await storage.waitForAskings(10)
        await storage.answer(.success(Self.leased([], asked: 1_000, others: nil)))
        await left
        #expect(storage.reports.last == CacheReaderReport(reader: "me", applied: 900, lease: .zero))
        // Afterwards reads still wait for askings, which hold no lease.
        async let read: Void = follower.catchUp()
        await storage.answer(.success(Self.leased([], asked: 1_100, others: nil)))
        try await read
        #expect(storage.reports.last?.lease == .zero)
        #expect(!follower.vouches)
    }

    @Test("Without leases a write is answered after one asking, and the follower asks only while someone waits")
    func withoutLeases() async throws {
        let storage = FakeStorage()
        let follower = ChangeFollower(
            cache: SubscriberCache(shared: true), reader: "me", timing: Self.timing, ask: storage.ask)
        async let written: Void = follower.acknowledge()
        await storage.answer(.success(Self.changes([])))
        try await written
        #expect(!follower.vouches)
        try await Task.sleep(for: .milliseconds(20))
        #expect(storage.started == 1)
    }
}
