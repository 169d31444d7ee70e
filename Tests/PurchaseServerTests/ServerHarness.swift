import AppStoreEmulator
import Foundation
import PurchaseServer
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import StorekeeperWebhooks
import Synchronization
import Testing

/// Receives the purchase server's webhooks: records each body with its signature check, answers 200 (or
/// the statuses it is told to first).
final class WebhookSink: Sendable {
    struct Received: Sendable {
        var event: JSONObject
        var signatureValid: Bool
    }

    final class State: Sendable {
        let received = Mutex<[Received]>([])
        let failFirst: Mutex<[Int]>
        init(_ failFirst: [Int]) { self.failFirst = Mutex(failFirst) }
    }

    let state: State
    let server: HTTPServer

    init(secret: String, failFirst: [Int] = []) throws {
        let state = State(failFirst)
        self.state = state
        var router = Router()
        router.add(
            "POST", "/hooks",
            inline: { request, _ in
                // As a Swift backend checks it: StorekeeperWebhooks, the signature and the event id header.
                let valid =
                    (try? WebhookVerifier(secret: secret).verify(
                        body: request.body, signature: request.header("Storekeeper-Signature"),
                        eventID: request.header("Storekeeper-Event-Id"))) != nil
                let status = state.failFirst.withLock { $0.isEmpty ? 200 : $0.removeFirst() }
                if status == 200, let event = (try? JSONParser.parse(request.body))?["event"]?.objectValue {
                    state.received.withLock { $0.append(Received(event: event, signatureValid: valid)) }
                }
                return HTTPResponse(status: status)
            })
        server = try HTTPServer(port: 0, responder: router.freeze())
    }

    var url: String { "http://127.0.0.1:\(server.port)/hooks" }

    /// Event types received, once `until` holds (or after about ten seconds).
    func types(until done: @Sendable ([String]) -> Bool = { _ in true }) async throws -> [String] {
        var types: [String] = []
        for _ in 0..<6_000 {
            types = state.received.withLock { $0.map { $0.event["type"]?.stringValue ?? "?" } }
            if done(types) { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        return types
    }

    /// Every event id received, once nothing new has arrived for a second (or after about a minute).
    func settledEventIDs() async throws -> [String] {
        var ids = state.received.withLock { $0.map { $0.event["id"]?.stringValue ?? "?" } }
        var quiet = 0
        for _ in 0..<600 where quiet < 10 {
            try await Task.sleep(for: .milliseconds(100))
            let now = state.received.withLock { $0.map { $0.event["id"]?.stringValue ?? "?" } }
            quiet = now.count == ids.count ? quiet + 1 : 0
            ids = now
        }
        return ids
    }

    deinit { server.stop() }
}

/// An App Store emulator and a purchase server on loopback, the emulator's notifications pointed at the
/// server, the server's webhooks at a sink; the test plays the app (buys, posts transactions).
struct ServerHarness {
    static let bundleID = DefaultCatalog.bundleID
    static let secret = "sk_test_0123456789abcdef"
    static let publicKey = "pk_test_abcdefgh"
    static let webhookSecret = "whsec_0123456789"

    let store: AppStore
    let emulator: HTTPServer
    /// The first server instance (the only one unless the harness runs several).
    let server: PurchaseServer
    /// What clients reach: the server's HTTP server, or the balancer in front of several instances.
    let http: HTTPServer
    let sink: WebhookSink
    let directory: URL
    /// Every instance with its own HTTP server (several share one PostgreSQL database).
    var instances: [(server: PurchaseServer, http: HTTPServer)] = []
    var balancer: Balancer?
    /// The single instance's routes, which ``call(_:_:_:key:)`` answers through without a socket; nil when a
    /// balancer fronts several instances (requests then go over loopback, as clients' would).
    var responder: Responder?

    /// An emulator and a purchase server: by default one instance on SQLite; with `postgres`, `instances`
    /// server instances on that database (each its own pool, cache, webhook sender and leader election,
    /// as separate processes would have) behind a round-robin ``Balancer`` that injects `faults` into
    /// Apple's notifications; with `reconcileEvery`, each instance polls as `serve` does; `deliveryGranularity`:
    /// how long the webhook sender sleeps when nothing wakes it.
    static func make(
        storage: (any ServerStorage)? = nil, transferPolicy: TransferPolicy = .transfer, withAPI: Bool = true,
        failFirstWebhooks: [Int] = [], notificationsTo deadEnd: String? = nil, postgres: String? = nil,
        instances count: Int = 1, faults: NotificationFaults = .none, reconcileEvery: Duration? = nil,
        maxAPIRequestsPerHour: Double? = nil, retention: [RetentionSettings.Rule]? = nil,
        deliveryGranularity: Duration = .milliseconds(20), environments: Set<Environment> = [.production, .sandbox]
    ) async throws -> ServerHarness {
        let directory = try ExternalTool.temporaryDirectory()
        let catalog = try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))
        // With retention rules, an In-App Purchase key signs their promotional offers, known to both sides.
        let offerKey = try PrivateKey.generateP256()
        var emulatorApp = AppConfiguration(bundleID: bundleID, sharedSecret: "s3cret")
        if retention != nil { emulatorApp.offerKeys = ["RETENTIONKEY": try offerKey.pemPKCS8()] }
        let store = try await AppStore(
            catalog: [catalog], apps: [emulatorApp],
            dataDirectory: directory.appendingPathComponent("emulator"), rate: .monthlyRenewalEveryFiveMinutes,
            realtimeTimeout: .seconds(5))
        store.startScheduler(granularity: .milliseconds(20))
        let emulator = try HTTPServer(port: 0, responder: EmulatorRoutes(store).responder())
        let sink = try WebhookSink(secret: webhookSecret, failFirst: failFirstWebhooks)
        var api: ServerAPISettings?
        if withAPI {
            let minted = try await store.serverAPI.mintAPIKey(bundleID: bundleID)
            api = ServerAPISettings(
                keyID: minted.keyID, issuerID: minted.issuerID, privateKey: try PrivateKey(pem: minted.privateKey),
                productionURL: "http://127.0.0.1:\(emulator.port)",
                sandboxURL: "http://127.0.0.1:\(emulator.port)/sandbox")
        }
        var app = AppSettings(
            bundleID: bundleID, appAppleID: 1_234_567_890, environments: environments, publicKey: publicKey,
            sharedSecret: "s3cret",
            receiptRoots: [store.pki.receipts.root], jwsRoots: [store.pki.signedData.root], serverAPI: api,
            entitlements: [
                "plus": ["com.example.storekeeper.monthly", "com.example.storekeeper.yearly"],
                "pro": ["com.example.storekeeper.pro"],
            ],
            webhooks: [WebhookTarget(url: sink.url, secret: webhookSecret)])
        if let retention {
            app.retention = RetentionSettings(
                rules: retention,
                offerKey: RetentionSettings.OfferKey(keyID: "RETENTIONKEY", issuerID: "issuer", key: offerKey))
        }
        var configuration = ServerConfiguration(
            secretKey: secret, apps: [app], transferPolicy: transferPolicy, webhookRetrySchedule: [0.05, 0.05, 0.05])
        configuration.maxAPIRequestsPerHour = maxAPIRequestsPerHour
        var instances: [(server: PurchaseServer, http: HTTPServer)] = []
        var responders: [Responder] = []
        for _ in 0..<max(1, count) {
            let chosen: any ServerStorage
            if let postgres {
                chosen = try await PostgresServerStorage(url: postgres, poolSize: 4)
            } else if let storage {
                chosen = storage
            } else {
                chosen = try await SQLiteServerStorage(path: directory.appendingPathComponent("server.sqlite").path)
            }
            // The server's clock is the store's, so that renewal dates compare as the emulator sees them.
            let server = try PurchaseServer(configuration: configuration, storage: chosen, now: { store.now })
            server.startDelivery(granularity: deliveryGranularity)
            if let reconcileEvery { server.startReconciliation(every: reconcileEvery) }
            let responder = server.responder()
            responders.append(responder)
            instances.append((server, try HTTPServer(port: 0, responder: responder)))
        }
        var balancer: Balancer?
        if instances.count > 1 || faults != .none {
            balancer = try Balancer(ports: instances.map(\.http.port), faults: faults)
        }
        let front = balancer?.server ?? instances[0].http
        let notificationsURL = deadEnd ?? "http://127.0.0.1:\(front.port)/v1/notifications/apple/\(bundleID)"
        try await store.setNotifications(
            bundleID: bundleID,
            AppNotifications(
                productionURLs: [notificationsURL], sandboxURLs: [notificationsURL], retrySchedule: [0.1, 0.1, 0.1]))
        var harness = ServerHarness(
            store: store, emulator: emulator, server: instances[0].server, http: front, sink: sink,
            directory: directory)
        harness.instances = instances
        harness.balancer = balancer
        harness.responder = balancer == nil ? responders[0] : nil
        return harness
    }

    func stop() {
        for instance in instances {
            instance.server.stopDelivery()
            instance.http.stop()
        }
        balancer?.server.stop()
        store.stopScheduler()
        emulator.stop()
    }

    var base: String { "http://127.0.0.1:\(http.port)" }

    /// A customer with the app installed: the device id.
    func customer(environment: Environment = .sandbox) async throws -> (account: AccountID, device: String) {
        let account = try await store.createAccount(environment: environment, storefront: "USA")
        let device = try await store.createDevice(accountID: account.id, deviceID: nil).id.rawValue
        _ = try await store.install(deviceID: device, bundleID: Self.bundleID, version: "1")
        return (account.id, device)
    }

    /// Buys on the emulator (with the user's app account token): the transaction id and its JWS.
    func buy(_ product: String, device: String, token: UUID? = nil) async throws -> (id: String, jws: String) {
        let outcome = try await store.pay(
            deviceID: device, bundleID: Self.bundleID, productID: "com.example.storekeeper.\(product)", quantity: 1,
            applicationUsername: nil, appAccountToken: token?.uuidString)
        guard case .purchased(let stored, let jws) = outcome else {
            throw HarnessError("the payment did not go through")
        }
        return (stored.id.rawValue, jws)
    }

    struct HarnessError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// A request to the server; answers the status and the JSON body.
    func call(_ method: String, _ path: String, _ body: JSONObject? = nil, key: String? = ServerHarness.secret)
        async throws -> (Int, JSONValue)
    {
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json")]
        if let key { headers.append(("Authorization", "Bearer " + key)) }
        let bytes = body.map { JSONWriter.bytes(.object($0)) } ?? []
        if let responder {
            var request = HTTPRequest(method: method, target: path, headers: headers, body: bytes)
            request.remoteAddress = "127.0.0.1"
            let response = await responder.respond(to: request)
            return (response.status, response.body.isEmpty ? .null : try JSONParser.parse(response.body))
        }
        let response = try await HTTPClient().send(method, base + path, headers: headers, body: bytes)
        return (response.status, response.body.isEmpty ? .null : try JSONParser.parse(response.body))
    }

    /// The app posts its user's transaction.
    func post(_ jws: String, user: String) async throws -> (Int, JSONValue) {
        try await call(
            "POST", "/v1/transactions",
            ["bundleId": .string(Self.bundleID), "appUserId": .string(user), "signedTransaction": .string(jws)],
            key: Self.publicKey)
    }

    func subscriber(_ user: String) async throws -> JSONValue {
        let (status, body) = try await call("GET", "/v1/subscribers/\(user)")
        #expect(status == 200, "\(body)")
        return body
    }

    /// The subscriber once `done` holds (or after about ten seconds).
    func subscriber(_ user: String, until done: (JSONValue) -> Bool) async throws -> JSONValue {
        var body: JSONValue = .null
        for _ in 0..<3_000 {
            body = try await subscriber(user)
            if done(body) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        return body
    }

    /// Every notification the emulator has delivered (or failed) so far, once none is pending (and the
    /// balancer has passed on every one it delayed).
    func settleNotifications() async throws {
        for _ in 0..<3_000 {
            if try await allSent(), (balancer?.delayedInFlight ?? 0) == 0 { return }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    private func allSent() async throws -> Bool {
        for _ in 0..<3_000 {
            let history = try await store.notificationHistory(
                bundleID: Self.bundleID, environment: .sandbox, from: .distantPast, to: .distantFuture, after: nil,
                limit: 1_000)
            if history.allSatisfy({ $0.notification.state != .pending }) { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}
