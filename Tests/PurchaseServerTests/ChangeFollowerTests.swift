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
        }
        let state = Mutex(State())

        func ask(_ watermark: SubscriberChanges.Watermark?) async throws -> SubscriberChanges {
            try await withCheckedThrowingContinuation { continuation in
                state.withLock {
                    $0.askings.append(continuation)
                    $0.started += 1
                }
            }
        }

        var started: Int { state.withLock { $0.started } }

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
        let follower = ChangeFollower(cache: cache, ask: storage.ask)
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

    @Test("Users another process changed are dropped; too many changes or the first asking drop everyone")
    func dropping() async throws {
        let cache = SubscriberCache(shared: true)
        let storage = FakeStorage()
        let follower = ChangeFollower(cache: cache, ask: storage.ask)
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
    }

    @Test("What the cache remembers of invalidated users is bounded; what it keeps stays, reads under way keep nothing")
    func boundedGenerations() {
        let cache = SubscriberCache(shared: true)
        cache.store(Self.entry("kept"), "app", "kept", since: cache.generation("app", "kept"))
        let underWay = cache.generation("app", "late")
        for user in 0..<(2 * SubscriberCache.capacity + 1) { cache.invalidate("app", "u\(user)") }
        #expect(cache.generationsRemembered <= 2 * SubscriberCache.capacity)
        #expect(cache.holds("app", "kept"))
        cache.store(Self.entry("late"), "app", "late", since: underWay)
        #expect(!cache.holds("app", "late"))
    }

    @Test("An asking that fails fails the reads waiting for it; the next one is asked again")
    func failing() async throws {
        let storage = FakeStorage()
        let follower = ChangeFollower(cache: SubscriberCache(shared: true), ask: storage.ask)
        let failed = Task { try await follower.catchUp() }
        await storage.answer(.failure(PurchaseServerError.unavailable("down")))
        await #expect(throws: PurchaseServerError.self) { try await failed.value }
        async let next: Void = follower.catchUp()
        await storage.answer(.success(Self.changes([])))
        try await next
        #expect(storage.started == 2)
    }
}
