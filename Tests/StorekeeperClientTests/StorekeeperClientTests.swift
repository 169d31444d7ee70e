import AppStoreEmulator
import Foundation
import PurchaseServer
import StoreModel
import StorekeeperRehearsal
import StorekeeperTestSupport
import Synchronization
import Testing

@testable import StorekeeperClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The app's client against a live purchase server fed by the emulator (`storekeeper dev`'s wiring, in
/// process): purchases made in the emulator, their signed transactions synced through the client, the
/// entitlements read back with the app's public key.
@Suite("StorekeeperClient: an app's client of the purchase server")
struct StorekeeperClientTests {
    static let monthly = "com.example.storekeeper.monthly"

    /// Counts what reaches the network, and can answer in its place first (`failures`, in order).
    final class CountingTransport: StorekeeperClient.Transport {
        let real = URLSessionTransport(timeout: 10)
        let state = Mutex<(sent: [String], failures: [(Int, [String: String])])>(([], []))

        init(failures: [(Int, [String: String])] = []) { state.withLock { $0.failures = failures } }

        var sent: [String] { state.withLock { $0.sent } }

        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            let failure = state.withLock { state -> (Int, [String: String])? in
                state.sent.append((request.httpMethod ?? "GET") + " " + (request.url?.path ?? ""))
                return state.failures.isEmpty ? nil : state.failures.removeFirst()
            }
            if let (status, headers) = failure {
                let body = Data(#"{"error":{"code":"unavailable","message":"try later"}}"#.utf8)
                return (
                    body,
                    HTTPURLResponse(url: request.url!, statusCode: status, httpVersion: nil, headerFields: headers)!
                )
            }
            return try await real.send(request)
        }
    }

    /// A clock the test moves, and the waits the client asked for.
    final class FakeTime: Sendable {
        let state = Mutex<(now: Date, waits: [TimeInterval])>((Date(timeIntervalSince1970: 1_800_000_000), []))
        var now: Date { state.withLock { $0.now } }
        var waits: [TimeInterval] { state.withLock { $0.waits } }
        func move(by seconds: TimeInterval) { state.withLock { $0.now += seconds } }
        func wait(_ seconds: TimeInterval) { state.withLock { $0.waits.append(seconds) } }
    }

    static func start() async throws -> Rehearsal {
        var options = Rehearsal.Options(dataDirectory: try ExternalTool.temporaryDirectory())
        options.emulatorPort = 0
        options.serverPort = 0
        options.reconcileEvery = 0
        options.granularity = .milliseconds(20)
        return try await Rehearsal.start(options)
    }

    static func client(
        _ rehearsal: Rehearsal, key: String? = nil, transport: CountingTransport? = nil, time: FakeTime? = nil
    ) -> StorekeeperClient {
        var configuration = StorekeeperClient.Configuration(
            serverURL: URL(string: rehearsal.serverURL)!, publicKey: key ?? rehearsal.configuration.apps[0].publicKey)
        configuration.maxAttempts = 3
        return StorekeeperClient(
            configuration: configuration, transport: transport,
            now: { time?.now ?? Date() }, sleep: { seconds in time?.wait(seconds) })
    }

    /// A device with the app installed, and what it bought: the signed transaction.
    static func buy(_ rehearsal: Rehearsal, product: String = monthly) async throws -> (device: String, jws: String) {
        let store = rehearsal.store
        let bundle = rehearsal.configuration.apps[0].bundleID
        let account = try await store.createAccount(environment: .sandbox)
        let device = try await store.createDevice(accountID: account.id, deviceID: nil).id.rawValue
        _ = try await store.install(deviceID: device, bundleID: bundle, version: "1")
        let outcome = try await store.pay(
            deviceID: device, bundleID: bundle, productID: product, quantity: 1, applicationUsername: nil,
            appAccountToken: nil)
        guard case .purchased(_, let jws) = outcome else {
            throw StorekeeperClientError(kind: .invalidAnswer, message: "pending")
        }
        return (device, jws)
    }

    static func entitlementName(_ rehearsal: Rehearsal, for product: String = monthly) -> String {
        rehearsal.configuration.apps[0].entitlements.first { $0.value.contains(product) }!.key
    }

    @Test("a synced purchase gives its entitlement, read back with the app's key; the app transaction is recorded")
    func syncAndRead() async throws {
        let rehearsal = try await Self.start()
        defer { Task { await rehearsal.stop() } }
        let name = Self.entitlementName(rehearsal)
        let (device, jws) = try await Self.buy(rehearsal)
        let client = Self.client(rehearsal)
        let user = "user with spaces & ünïcode?#%"  // percent-encoded in the path, decoded once by the server

        #expect(await client.cachedEntitlements(appUserID: user) == nil)
        let synced = try await client.syncTransaction(jws, appUserID: user)
        #expect(synced.entitlements.appUserID == user)
        #expect(synced.entitlements.isActive(name))
        #expect(synced.entitlements[name]?.productID == Self.monthly)
        #expect(synced.entitlements[name]?.willRenew == true)
        #expect(synced.purchases.map(\.productID) == [Self.monthly])
        #expect(synced.purchases.first?.type == "Auto-Renewable Subscription")
        #expect(synced.entitlements.serverDate != nil)

        let read = try await client.entitlements(appUserID: user, maxAge: 0)
        #expect(read.isActive(name))
        #expect(read.active.map(\.name) == [name])
        #expect(read.serverDate != nil)
        #expect(read[name]!.expiresDate! > read.serverDate!)
        #expect(!read.isActive("no-such-entitlement"))

        let appTransaction = try await rehearsal.store.appTransaction(
            deviceID: device, bundleID: rehearsal.configuration.apps[0].bundleID)
        let app = try await client.syncAppTransaction(appTransaction, appUserID: user)
        #expect(app.appTransaction?.environment == "Sandbox")
        #expect(app.appTransaction?.originalApplicationVersion == "1")
        #expect(app.appTransaction?.appTransactionID?.isEmpty == false)
        #expect(app.entitlements.isActive(name))
        // Recorded once per user, however often the app posts it.
        _ = try await client.syncAppTransaction(appTransaction, appUserID: user)
        let events = try await rehearsal.server.events(
            bundleID: rehearsal.configuration.apps[0].bundleID, appUserID: user, after: nil, limit: 50)
        #expect(events.filter { $0.event.type == .appTransaction }.count == 1)

        // A user with nothing has no entitlements, and is no error.
        let nobody = try await client.entitlements(appUserID: "nobody-\(UUID())")
        #expect(nobody.all.isEmpty)

        // An alias reads its user's entitlements under the id the app asked for, and is cached under it.
        _ = try await rehearsal.server.alias(
            bundleID: rehearsal.configuration.apps[0].bundleID, appUserID: user, alias: "alias-of-user")
        let aliased = try await client.entitlements(appUserID: "alias-of-user", maxAge: 0)
        #expect(aliased.appUserID == "alias-of-user")
        #expect(aliased.isActive(name))
        #expect(await client.cachedEntitlements(appUserID: "alias-of-user")?.isActive(name) == true)
    }

    @Test("a first launch: the app transaction of a user the server has not seen makes the user known")
    func appTransactionFirst() async throws {
        let rehearsal = try await Self.start()
        defer { Task { await rehearsal.stop() } }
        let store = rehearsal.store
        let bundle = rehearsal.configuration.apps[0].bundleID
        let account = try await store.createAccount(environment: .sandbox)
        let device = try await store.createDevice(accountID: account.id, deviceID: nil).id.rawValue
        _ = try await store.install(deviceID: device, bundleID: bundle, version: "3")
        let signed = try await store.appTransaction(deviceID: device, bundleID: bundle)
        let client = Self.client(rehearsal)
        let first = try await client.syncAppTransaction(signed, appUserID: "first-launch")
        #expect(first.entitlements.all.isEmpty)
        #expect(first.appTransaction?.originalApplicationVersion == "3")
        #expect(first.entitlements.appUserID == "first-launch" && first.entitlements.serverDate != nil)
        let events = try await rehearsal.server.events(
            bundleID: bundle, appUserID: "first-launch", after: nil, limit: 10)
        #expect(events.map(\.event.type) == [.appTransaction])
    }

    @Test("errors are values with the server's code; a refusal is not retried")
    func errors() async throws {
        let rehearsal = try await Self.start()
        defer { Task { await rehearsal.stop() } }
        let (_, jws) = try await Self.buy(rehearsal)

        let wrongKey = CountingTransport()
        let time = FakeTime()
        do {
            _ = try await Self.client(rehearsal, key: "pk_wrong", transport: wrongKey, time: time).entitlements(
                appUserID: "u1")
            Issue.record("a wrong key was accepted")
        } catch {
            #expect(error.kind == .server)
            #expect(error.status == 401)
            #expect(error.code == "unauthorized")
            #expect(!error.isRetryable)
        }
        #expect(wrongKey.sent.count == 1)
        #expect(time.waits.isEmpty)

        let client = Self.client(rehearsal)
        do {
            _ = try await client.syncTransaction(String(jws.dropLast(4)) + "AAAA", appUserID: "u1")
            Issue.record("a forged transaction was accepted")
        } catch {
            #expect(error.status == 422)
            #expect(error.code == "verification_failed")
        }
        for user in ["", "a/b", "a\\b", ".", "..", String(repeating: "x", count: 257)] {
            do {
                _ = try await client.syncTransaction(jws, appUserID: user)
                Issue.record("the user id '\(user)' was sent")
            } catch {
                #expect(error.kind == .invalidArgument)
            }
        }
    }

    @Test("unavailable answers are retried with back-off (Retry-After first); an unreachable server gives up")
    func retries() async throws {
        let rehearsal = try await Self.start()
        defer { Task { await rehearsal.stop() } }
        let (_, jws) = try await Self.buy(rehearsal)
        let transport = CountingTransport(failures: [(503, [:]), (429, ["Retry-After": "3"])])
        let time = FakeTime()
        let synced = try await Self.client(rehearsal, transport: transport, time: time).syncTransaction(
            jws, appUserID: "retried")
        #expect(synced.entitlements.isActive(Self.entitlementName(rehearsal)))
        #expect(transport.sent == ["POST /v1/transactions", "POST /v1/transactions", "POST /v1/transactions"])
        #expect(time.waits == [0.5, 3])

        // Nothing answers: three tries, then a transport error.
        struct Unreachable: StorekeeperClient.Transport {
            func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
                throw URLError(.cannotConnectToHost)
            }
        }
        let down = FakeTime()
        var configuration = StorekeeperClient.Configuration(
            serverURL: URL(string: rehearsal.serverURL)!, publicKey: "pk")
        configuration.maxAttempts = 3
        let unreachable = StorekeeperClient(
            configuration: configuration, transport: Unreachable(), now: { down.now }, sleep: { down.wait($0) })
        do {
            _ = try await unreachable.entitlements(appUserID: "u1")
            Issue.record("an unreachable server answered")
        } catch {
            #expect(error.kind == .transport)
            #expect(error.isRetryable)
        }
        #expect(down.waits == [0.5, 1])
    }

    @Test("entitlements are reused while younger than their lifetime, kept with their age")
    func cache() async throws {
        let rehearsal = try await Self.start()
        defer { Task { await rehearsal.stop() } }
        let (_, jws) = try await Self.buy(rehearsal)
        let transport = CountingTransport()
        let time = FakeTime()
        let client = Self.client(rehearsal, transport: transport, time: time)
        _ = try await client.syncTransaction(jws, appUserID: "cached")
        time.move(by: 60)
        let first = try await client.entitlements(appUserID: "cached")
        #expect(transport.sent.count == 1)  // the sync's answer, 60 s old, under the 300 s lifetime
        #expect(first.age(at: time.now) == 60)
        time.move(by: 300)
        _ = try await client.entitlements(appUserID: "cached")
        #expect(transport.sent == ["POST /v1/transactions", "GET /v1/entitlements/cached"])
        #expect(await client.cachedEntitlements(appUserID: "cached")?.age(at: time.now) == 0)
        _ = try await client.entitlements(appUserID: "cached", maxAge: 0)
        #expect(transport.sent.count == 3)
        await client.invalidate(appUserID: "cached")
        #expect(await client.cachedEntitlements(appUserID: "cached") == nil)
    }

    @Test("the backoff doubles from its start and stops at its cap")
    func backoff() async {
        var configuration = StorekeeperClient.Configuration(
            serverURL: URL(string: "http://127.0.0.1:1")!, publicKey: "pk")
        configuration.initialBackoff = 0.5
        configuration.maxBackoff = 8
        let client = StorekeeperClient(configuration: configuration)
        let waits = await (1...7).asyncMap { await client.backoff(attempt: $0, retryAfter: nil) }
        #expect(waits == [0.5, 1, 2, 4, 8, 8, 8])
        #expect(await client.backoff(attempt: 1, retryAfter: 120) == 8)
    }
}

extension Sequence {
    fileprivate func asyncMap<T>(_ transform: (Element) async -> T) async -> [T] {
        var result: [T] = []
        for element in self { result.append(await transform(element)) }
        return result
    }
}
