import Foundation
import Synchronization
import Testing

@testable import StorekeeperClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The client's cache and requests against a scripted server: answers that overlap, expire, carry flags, or
/// ask for a pause.
@Suite("StorekeeperClient: overlapping answers, expiry, flags and pauses")
struct ClientCacheTests {
    /// Answers each request with what `reply` says (status, headers, body).
    struct Scripted: StorekeeperClient.Transport {
        let reply: @Sendable (URLRequest) async -> (Int, [String: String], String)
        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            let (status, headers, body) = await reply(request)
            return (
                Data(body.utf8),
                HTTPURLResponse(url: request.url!, statusCode: status, httpVersion: nil, headerFields: headers)!
            )
        }
    }

    /// A user's entitlements answer: `plus` active or not, expiring at `expires`, as the server said at `date`.
    static func answer(active: Bool, date: Int64?, expires: Int64 = 1_900_000_000_000, extra: String = "") -> String {
        let requestDate = date.map { #","requestDate":\#($0)"# } ?? ""
        return #"""
            {"appUserId":"u1","bundleId":"com.example.app","entitlements":{"plus":{"active":\#(active),
            "productId":"monthly","expiresDate":\#(expires),"willRenew":true,"periodType":"normal",
            "inGracePeriod":false,"inBillingRetry":false,"source":"app_store"}}\#(requestDate)\#(extra)}
            """#
    }

    static func client(_ transport: Scripted, now: @escaping @Sendable () -> Date = { Date() }) -> StorekeeperClient {
        var configuration = StorekeeperClient.Configuration(
            serverURL: URL(string: "http://127.0.0.1:1")!, publicKey: "pk_test")
        configuration.maxAttempts = 3
        return StorekeeperClient(configuration: configuration, transport: transport, now: now, sleep: { _ in })
    }

    @Test(
        "A read answered from before a post's write, arriving first, does not replace the post's answer",
        arguments: [true, false])
    func postAfterStaleRead(serverDates: Bool) async throws {
        let readAnswered = Mutex(false)
        let transport = Scripted { request in
            if request.httpMethod == "POST" {
                // The post's write commits after the read was answered; its answer comes last.
                for _ in 0..<500 where !readAnswered.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(10)) }
                return (200, [:], Self.answer(active: true, date: serverDates ? 2_000 : nil, extra: #","flags":[]"#))
            }
            defer { readAnswered.withLock { $0 = true } }
            return (200, [:], Self.answer(active: false, date: serverDates ? 1_000 : nil))
        }
        let client = Self.client(transport)
        let post = Task { try await client.syncTransaction("a.b.c", appUserID: "u1") }
        for _ in 0..<500 where readAnswered.withLock({ !$0 }) {
            _ = try? await client.entitlements(appUserID: "u1", maxAge: 0)
            try await Task.sleep(for: .milliseconds(5))
        }
        let synced = try await post.value
        #expect(synced.entitlements.isActive("plus"), "the post's own answer")
        #expect(await client.cachedEntitlements(appUserID: "u1")?.isActive("plus") == true, "and the one kept")
    }

    @Test("A cached answer whose active entitlement has expired since is read again, however young")
    func expiredSinceCached() async throws {
        let now = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
        let reads = Atomic<Int>(0)
        let transport = Scripted { _ in
            reads.add(1, ordering: .relaxed)
            return (200, [:], Self.answer(active: true, date: 1_800_000_000_000, expires: 1_800_000_060_000))
        }
        let client = Self.client(transport, now: { now.withLock { $0 } })
        _ = try await client.entitlements(appUserID: "u1")
        now.withLock { $0 += 30 }
        _ = try await client.entitlements(appUserID: "u1")
        #expect(reads.load(ordering: .relaxed) == 1, "30 s on, still active: from the cache")
        now.withLock { $0 += 60 }
        _ = try await client.entitlements(appUserID: "u1")
        #expect(reads.load(ordering: .relaxed) == 2, "past its expiresDate (within the 300 s lifetime): asked again")
    }

    @Test("A post's flags reach the app; a control character in a user id is refused before sending")
    func flagsAndIDs() async throws {
        let sent = Atomic<Int>(0)
        let transport = Scripted { _ in
            sent.add(1, ordering: .relaxed)
            return (200, [:], Self.answer(active: false, date: 1, extra: #","flags":["purchase_kept_by_other_user"]"#))
        }
        let client = Self.client(transport)
        let synced = try await client.syncTransaction("a.b.c", appUserID: "u1")
        #expect(synced.flags == ["purchase_kept_by_other_user"])
        for id in ["a\tb", "a\u{7F}b", "a\u{85}b"] {
            await #expect(throws: StorekeeperClientError.self) {
                try await client.syncTransaction("a.b.c", appUserID: id)
            }
        }
        #expect(sent.load(ordering: .relaxed) == 1)
    }

    @Test("A Retry-After longer than the client's longest pause is not retried sooner: the failure is thrown")
    func longRetryAfter() async throws {
        let sent = Atomic<Int>(0)
        let transport = Scripted { _ in
            sent.add(1, ordering: .relaxed)
            return (503, ["Retry-After": "120"], #"{"error":{"code":"busy","message":"later"}}"#)
        }
        do {
            _ = try await Self.client(transport).entitlements(appUserID: "u1")
            Issue.record("answered")
        } catch {
            #expect(error.status == 503 && error.isRetryable)
        }
        #expect(sent.load(ordering: .relaxed) == 1)
    }

    @Test(
        "A Retry-After that is not delay-seconds is ignored, and no pause is longer than a day, whatever maxBackoff says"
    )
    func retryAfterBounded() async throws {
        let headers = Mutex(["1e300", "inf", "-5", "99999999999"])
        let transport = Scripted { _ in
            let next = headers.withLock { $0.isEmpty ? "99999999" : $0.removeFirst() }
            return (503, ["Retry-After": next], #"{"error":{"code":"busy","message":"later"}}"#)
        }
        var configuration = StorekeeperClient.Configuration(
            serverURL: URL(string: "http://127.0.0.1:1")!, publicKey: "pk_test")
        configuration.maxAttempts = 6
        configuration.maxBackoff = .infinity
        configuration.initialBackoff = 1
        let pauses = Mutex<[TimeInterval]>([])
        let client = StorekeeperClient(
            configuration: configuration, transport: transport,
            sleep: { seconds in pauses.withLock { $0.append(seconds) } })
        await #expect(throws: StorekeeperClientError.self) { _ = try await client.entitlements(appUserID: "u1") }
        // The four unreadable headers: the doubling back-off (1, 2, 4, 8 s); the last, 99,999,999 s: a day.
        #expect(pauses.withLock { $0 } == [1, 2, 4, 8, 86_400])
    }
}
