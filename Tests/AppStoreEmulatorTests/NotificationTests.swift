import AppStoreEmulator
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

/// A local receiver of App Store Server Notifications: records every body and answers with the statuses
/// it is told to (then 200).
final class NotificationSink: Sendable {
    final class Recorder: Sendable {
        let received = Mutex<[[UInt8]]>([])
        let statuses: Mutex<[Int]>
        init(_ statuses: [Int]) { self.statuses = Mutex(statuses) }
    }

    let server: HTTPServer
    let recorder: Recorder

    init(failFirst statuses: [Int] = []) throws {
        let recorder = Recorder(statuses)
        self.recorder = recorder
        var router = Router()
        router.post("/notifications") { request, _ in
            recorder.received.withLock { $0.append(request.body) }
            let status = recorder.statuses.withLock { $0.isEmpty ? 200 : $0.removeFirst() }
            return HTTPResponse(status: status, headers: [], body: [])
        }
        server = try HTTPServer(port: 0, responder: router.freeze())
    }

    var url: String { "http://127.0.0.1:\(server.port)/notifications" }
    var count: Int { recorder.received.withLock { $0.count } }

    /// The signed payloads received, once at least `count` arrived (or after ten seconds).
    func payloads(atLeast count: Int) async throws -> [String] {
        for _ in 0..<1_000 where self.count < count { try await Task.sleep(for: .milliseconds(10)) }
        return try recorder.received.withLock { $0 }.map { body in
            try #require(try JSONParser.parse(body)["signedPayload"]?.stringValue)
        }
    }

    /// The bodies received, once at least `count` arrived (or after ten seconds).
    func bodies(atLeast count: Int) async throws -> [JSONValue] {
        for _ in 0..<1_000 where self.count < count { try await Task.sleep(for: .milliseconds(10)) }
        return try recorder.received.withLock { $0 }.map { try JSONParser.parse($0) }
    }

    deinit { server.stop() }
}

/// A receiver that holds the first `hold` requests unanswered until ``release()`` (or until it stops),
/// answering the rest at once, and counts how many it holds at a time.
final class GatedSink: Sendable {
    struct State {
        var holdLeft: Int
        var open = false
        var inside = 0
        var mostInside = 0
        var received: [String] = []
    }

    final class Box: Sendable {
        let state: Mutex<State>
        init(_ state: State) { self.state = Mutex(state) }
    }

    let box: Box
    let server: HTTPServer

    init(hold: Int) throws {
        let box = Box(State(holdLeft: hold))
        self.box = box
        var router = Router()
        router.post("/notifications") { request, _ in
            let payload = try JSONParser.parse(request.body)["signedPayload"]?.stringValue ?? ""
            let held = box.state.withLock { state in
                state.received.append(payload)
                state.inside += 1
                state.mostInside = max(state.mostInside, state.inside)
                guard !state.open, state.holdLeft > 0 else { return false }
                state.holdLeft -= 1
                return true
            }
            while held, !box.state.withLock({ $0.open }) { try await Task.sleep(for: .milliseconds(5)) }
            box.state.withLock { $0.inside -= 1 }
            return HTTPResponse(status: 200)
        }
        // A receiver that does not answer must not answer: the server's own deadline (503 after 30 s by default)
        // would, on a machine slow enough for a test to pass it, free the held send's slot for another.
        var limits = HTTPLimits()
        limits.requestTimeout = .seconds(600)
        server = try HTTPServer(port: 0, limits: limits, responder: router.freeze())
    }

    var url: String { "http://127.0.0.1:\(server.port)/notifications" }
    var received: [String] { box.state.withLock { $0.received } }
    var mostInside: Int { box.state.withLock { $0.mostInside } }
    func release() { box.state.withLock { $0.open = true } }

    /// Waits (at most ten seconds) until `condition` holds of the state.
    func wait(until condition: (State) -> Bool) async throws {
        for _ in 0..<1_000 where !box.state.withLock({ condition($0) }) { try await Task.sleep(for: .milliseconds(10)) }
    }

    deinit {
        release()
        server.stop()
    }
}

@Suite("App Store Server Notifications V2 from the emulator")
struct NotificationTests {
    static let catalogText = """
        {"identifier":"N","version":{"major":2,"minor":0},"settings":{"_timeRate":13},
         "products":[{"productID":"coins","type":"Consumable","displayPrice":"0.99","familyShareable":false,
           "internalID":"1","referenceName":"Coins","localizations":[]}],
         "subscriptionGroups":[{"id":"G1","name":"Plans","localizations":[],"subscriptions":[
          {"productID":"monthly","type":"RecurringSubscription","displayPrice":"2.99","familyShareable":false,
           "internalID":"4","referenceName":"Monthly","subscriptionGroupID":"G1","groupNumber":2,
           "recurringSubscriptionPeriod":"P1M","introductoryOffer":null,"adHocOffers":[],"codeOffers":[],"localizations":[]},
          {"productID":"premium","type":"RecurringSubscription","displayPrice":"5.99","familyShareable":false,
           "internalID":"5","referenceName":"Premium","subscriptionGroupID":"G1","groupNumber":1,
           "recurringSubscriptionPeriod":"P1M","introductoryOffer":null,"adHocOffers":[],"codeOffers":[],"localizations":[]}]}]}
        """

    static func harness(
        secret: String? = nil, directory: URL? = nil,
        maxNotificationsInFlight: Int = AppStore.defaultMaxNotificationsInFlight,
        rate: TimeRate = .monthlyRenewalEveryFiveMinutes, notificationRetention: StorePeriod? = nil,
        time: AppStoreTests.FakeTime = AppStoreTests.FakeTime()
    ) async throws -> AppStoreTests.Harness {
        let directory = try directory ?? ExternalTool.temporaryDirectory()
        let catalog = try StoreKitConfiguration(data: Array(catalogText.utf8))
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: AppStoreTests.bundleID, sharedSecret: secret)],
            dataDirectory: directory, rate: rate, maxNotificationsInFlight: maxNotificationsInFlight,
            notificationRetention: notificationRetention, realNow: { time.now })
        store.startScheduler(granularity: .milliseconds(10))
        return AppStoreTests.Harness(store: store, responder: EmulatorRoutes(store).responder(), directory: directory)
    }

    /// Verifies a notification as a receiver would, against the emulator's JWS root.
    static func decode(_ signed: String, _ harness: AppStoreTests.Harness) throws -> JSONObject {
        let verifier = try SignedDataVerifier(
            SignedDataVerifier.Configuration(
                trustedRoots: [harness.store.pki.signedData.root], bundleID: AppStoreTests.bundleID,
                appAppleID: 1_234_567_890))
        let result = verifier.verify(signed, as: .notification, now: harness.store.now)
        #expect(result.status == .ok, "\(result.status)")
        return try #require(result.decodedPayload)
    }

    /// The payloads in the order the emulator wrote them (deliveries of separate batches may overtake).
    static func ordered(_ payloads: [String], _ harness: AppStoreTests.Harness) async throws -> [String] {
        let (_, history) = try await harness.call(
            "GET", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications/history")
        let order = (history["notificationHistory"]?.arrayValue ?? []).compactMap { $0["signedPayload"]?.stringValue }
        return payloads.sorted { (order.firstIndex(of: $0) ?? .max) < (order.firstIndex(of: $1) ?? .max) }
    }

    static func names(_ payloads: [String], _ harness: AppStoreTests.Harness) throws -> [String] {
        try payloads.map { signed in
            let payload = try decode(signed, harness)
            let type = payload["notificationType"]?.stringValue ?? "?"
            return payload["subtype"]?.stringValue.map { "\(type)/\($0)" } ?? type
        }
    }

    /// The history once every notification in it has at least one recorded attempt (or after ten seconds).
    static func settledHistory(_ harness: AppStoreTests.Harness, environment: String = "Sandbox") async throws
        -> [JSONValue]
    {
        var entries: [JSONValue] = []
        for _ in 0..<1_000 {
            let (_, history) = try await harness.call(
                "GET", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications/history?environment=\(environment)")
            entries = history["notificationHistory"]?.arrayValue ?? []
            if entries.allSatisfy({ $0["sendAttempts"]?.arrayValue?.isEmpty == false }) { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        return entries
    }

    static func configure(_ harness: AppStoreTests.Harness, _ settings: JSONObject) async throws {
        let (status, answer) = try await harness.call(
            "PUT", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications", settings)
        #expect(status == 200, "\(answer)")
    }

    @Test("A subscription's story arrives in order, signed, with the transaction, renewal info and status of its time")
    func story() async throws {
        let harness = try await Self.harness()
        let sink = try NotificationSink()
        try await Self.configure(harness, ["sandboxURL": .string(sink.url)])
        let app = try await harness.device()
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        let transactionID = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        _ = try await sink.payloads(atLeast: 1)
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        _ = try await sink.payloads(atLeast: 2)
        let (status, answer) = try await harness.call(
            "POST", "/_emulator/v1/transactions/\(transactionID)/auto-renew", ["enabled": .bool(false)])
        #expect(status == 200)
        #expect(answer["subscription"]?["autoRenew"] == .bool(false))
        _ = try await sink.payloads(atLeast: 3)
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("coins")])
        let payloads = try await Self.ordered(try await sink.payloads(atLeast: 5), harness)
        #expect(
            try Self.names(payloads, harness) == [
                "SUBSCRIBED/INITIAL_BUY", "DID_RENEW", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED",
                "EXPIRED/VOLUNTARY", "ONE_TIME_CHARGE",
            ])
        let renewal = try Self.decode(payloads[1], harness)
        #expect(renewal["version"] == .string("2.0"))
        #expect(renewal["data"]?["status"] == .integer(1))
        #expect(renewal["data"]?["environment"] == .string("Sandbox"))
        #expect(renewal["data"]?["transactionInfo"]?["transactionReason"] == .string("RENEWAL"))
        #expect(renewal["data"]?["transactionInfo"]?["originalTransactionId"] == .string(transactionID))
        #expect(renewal["data"]?["renewalInfo"]?["autoRenewStatus"] == .integer(1))
        let expired = try Self.decode(payloads[3], harness)
        #expect(expired["data"]?["status"] == .integer(2))
        #expect(expired["data"]?["renewalInfo"]?["expirationIntent"] == .integer(1))
        let uuids = try payloads.map { try Self.decode($0, harness)["notificationUUID"]?.stringValue }
        #expect(Set(uuids).count == 5, "one notificationUUID each")
        // Time-ordered (version 7): the first 48 bits are the milliseconds of the store time it was made at,
        // which is also its signedDate, so later notifications sort after earlier ones.
        for payload in payloads {
            let decoded = try Self.decode(payload, harness)
            let uuid = try #require(decoded["notificationUUID"]?.stringValue)
            let signedDate = try #require(decoded["signedDate"]?.int64Value)
            let hex = uuid.replacingOccurrences(of: "-", with: "")
            #expect(uuid == uuid.lowercased() && UUID(uuidString: uuid) != nil)
            #expect(Int64(hex.prefix(12), radix: 16) == signedDate, "\(uuid) carries its signedDate \(signedDate)")
            #expect(Array(hex)[12] == "7" && "89ab".contains(Array(hex)[16]), "\(uuid) is a version 7 UUID")
        }
        let times = uuids.compactMap { $0?.prefix(13) }
        #expect(times.count == 5 && times == times.sorted(), "in outbox order, their times do not go back")
        // The history records each one with its attempt.
        // A receiver can have the body before the emulator records the attempt: wait until it is recorded.
        let entries = try await Self.settledHistory(harness)
        #expect(entries.count == 5)
        #expect(
            entries.allSatisfy { $0["sendAttempts"]?.arrayValue?.first?["sendAttemptResult"] == .string("SUCCESS") })
    }

    @Test("Billing failure with grace, its end, and recovery; refunds and their reversal; upgrades; price increases")
    func verbs() async throws {
        let harness = try await Self.harness()
        let sink = try NotificationSink()
        try await Self.configure(harness, ["sandboxURL": .string(sink.url)])
        let app = try await harness.device()
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        let id = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        let accountID = try #require(try await harness.accountOf(app))
        let (settingsStatus, settings) = try await harness.call(
            "POST", "/_emulator/v1/accounts/\(accountID)/settings",
            ["billingRetryOnRenewal": .bool(true), "billingGracePeriod": .bool(true)])
        #expect(settingsStatus == 200 && settings["billingGracePeriod"] == .bool(true))
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        // verifyReceipt says the same as the notification: in billing retry, with the grace period's end.
        let receipt = Data(try await harness.receipt(app)).base64EncodedString()
        let (_, verified) = try await harness.call(
            "POST", "/sandbox/verifyReceipt", ["receipt-data": .string(receipt), "password": .string("any")])
        let pending = verified["pending_renewal_info"]?.arrayValue?.first
        #expect(pending?["is_in_billing_retry_period"] == .string("1"), "\(verified)")
        #expect(pending?["grace_period_expires_date_ms"]?.stringValue != nil)
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P15D")])
        let (recovered, answer) = try await harness.call("POST", "/_emulator/v1/transactions/\(id)/resolve-issue")
        #expect(recovered == 200, "\(answer)")
        #expect(answer["subscription"]?["status"] == .integer(1))
        let recoveredPeriod = try #require(answer["transaction"]?["transactionIdentifier"]?.stringValue)
        _ = try await harness.call(
            "POST", "/_emulator/v1/accounts/\(accountID)/settings", ["billingRetryOnRenewal": .bool(false)])
        let upgraded = try await harness.call("POST", app + "/payments", ["productId": .string("premium")])
        #expect(upgraded.0 == 201, "\(upgraded.1)")
        // The period the upgrade ended is refunded its unused share: nearly all of it, just begun.
        let (_, superseded) = try await harness.call("GET", "/_emulator/v1/transactions/\(recoveredPeriod)")
        let ended = try CompactJWS(try #require(superseded["jwsRepresentation"]?.stringValue)).payload
        #expect(ended["isUpgraded"] == .bool(true) && ended["revocationType"] == .string("REFUND_PRORATED"))
        #expect((99_000...100_000).contains(ended["revocationPercentage"]?.int64Value ?? -1), "\(ended)")
        _ = try await harness.call(
            "POST", "/_emulator/v1/products/premium/price-increase", ["requiresConsent": .bool(true)])
        _ = try await harness.call("POST", "/_emulator/v1/transactions/\(id)/price-consent", ["consent": .bool(false)])
        // The current period (the upgrade's) refunded revokes the subscription; a past period's refund leaves
        // it as it is (versionOneLifecycle).
        let current = try #require(upgraded.1["transaction"]?["transactionIdentifier"]?.stringValue)
        _ = try await harness.call(
            "POST", "/_emulator/v1/transactions/\(current)/refund", ["reason": .string("APP_ISSUE")])
        _ = try await harness.call("POST", "/_emulator/v1/transactions/\(current)/refund-reversal")
        let twice = try await harness.call("POST", "/_emulator/v1/transactions/\(current)/refund-reversal")
        #expect(twice.0 == 400, "a verb that does not apply is a 400: \(twice.1)")
        let payloads = try await Self.ordered(try await sink.payloads(atLeast: 9), harness)
        #expect(
            try Self.names(payloads, harness) == [
                "SUBSCRIBED/INITIAL_BUY", "DID_FAIL_TO_RENEW/GRACE_PERIOD", "GRACE_PERIOD_EXPIRED",
                "DID_RENEW/BILLING_RECOVERY", "DID_CHANGE_RENEWAL_PREF/UPGRADE", "PRICE_INCREASE/PENDING",
                "DID_CHANGE_RENEWAL_STATUS", "REFUND", "REFUND_REVERSED",
            ])
        let grace = try Self.decode(payloads[1], harness)
        #expect(grace["data"]?["status"] == .integer(4))
        #expect(grace["data"]?["renewalInfo"]?["isInBillingRetryPeriod"] == .bool(true))
        #expect(grace["data"]?["renewalInfo"]?["gracePeriodExpiresDate"]?.int64Value != nil)
        let afterRecovery = try Self.decode(payloads[3], harness)
        #expect(
            afterRecovery["data"]?["renewalInfo"]?.objectValue?["isInBillingRetryPeriod"] == nil, "absent, as Apple's")
        let refund = try Self.decode(payloads[7], harness)
        #expect(refund["data"]?["status"] == .integer(5))
        #expect(refund["data"]?["transactionInfo"]?["revocationReason"] == .integer(1))
    }

    @Test("A receiver that fails is retried on the store clock's schedule; every attempt is in the history")
    func retries() async throws {
        let harness = try await Self.harness()
        let sink = try NotificationSink(failFirst: [500, 503])
        try await Self.configure(
            harness, ["productionURL": .string(sink.url), "retrySchedule": .array([.integer(1), .integer(2)])])
        let app = try await harness.device(environment: "Production")
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        /// Waits until the first notification has `count` attempts recorded (its next one is then scheduled).
        func recorded(_ count: Int) async throws {
            for _ in 0..<1_000 {
                let (_, history) = try await harness.call(
                    "GET", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications/history?environment=Production")
                let attempts = history["notificationHistory"]?.arrayValue?.first?["sendAttempts"]?.arrayValue
                if (attempts?.count ?? 0) >= count { return }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        try await recorded(1)
        #expect(sink.count == 1, "the retry waits for its time")
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("PT1H")])
        try await recorded(2)
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("PT2H")])
        try await recorded(3)
        let payloads = try await sink.payloads(atLeast: 3)
        #expect(Set(payloads).count == 1, "the same notification each time")
        let (_, history) = try await harness.call(
            "GET", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications/history?environment=Production")
        let attempts = history["notificationHistory"]?.arrayValue?.first?["sendAttempts"]?.arrayValue?.compactMap {
            $0["sendAttemptResult"]?.stringValue
        }
        #expect(attempts == ["UNSUCCESSFUL_HTTP_RESPONSE_CODE", "UNSUCCESSFUL_HTTP_RESPONSE_CODE", "SUCCESS"])
        #expect(history["notificationHistory"]?.arrayValue?.first?["state"] == .string("delivered"))
    }

    @Test(
        "With a retention, done notifications older than it leave the outbox and its history; one still owed an attempt stays until it is done"
    )
    func retention() async throws {
        // Real-time months: days pass without renewals. Done notifications are kept two days.
        let harness = try await Self.harness(rate: .realTime, notificationRetention: StorePeriod(days: 2))
        // The second notification is answered 500 and retried 72 hours later.
        let sink = try NotificationSink(failFirst: [200, 500])
        try await Self.configure(
            harness, ["productionURL": .string(sink.url), "retrySchedule": .array([.integer(72 * 3_600)])])
        func history() async throws -> [JSONValue] { try await Self.settledHistory(harness, environment: "Production") }
        func advance(_ period: String) async throws {
            let (status, answer) = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string(period)])
            #expect(status == 200, "\(answer)")
        }
        try await Self.subscribe(harness, count: 1)
        _ = try await sink.payloads(atLeast: 1)
        try await Self.subscribe(harness, count: 1)
        _ = try await sink.payloads(atLeast: 2)
        let first = try await history()
        #expect(first.map { $0["state"]?.stringValue } == ["delivered", "pending"])
        let (delivered, owed) = (first[0]["notificationUUID"], first[1]["notificationUUID"])
        // 60 hours on: the delivered one is past the retention, the pending one too but still owed its retry.
        try await advance("PT60H")
        try await Self.subscribe(harness, count: 1)
        _ = try await sink.payloads(atLeast: 3)
        let later = try await history()
        #expect(later.map { $0["notificationUUID"] } == [owed, later.last?["notificationUUID"]])
        #expect(later.count == 2 && !later.contains { $0["notificationUUID"] == delivered })
        // Its retry falls due and is delivered; the next prune takes it, and keeps the recent one.
        try await advance("PT13H")
        for _ in 0..<1_000 {
            let entries = try await history()
            if entries.first?["state"] == .string("delivered") { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        try await advance("PT1M")
        let last = try await history()
        #expect(last.count == 1)
        #expect(last.first?["notificationUUID"] == later.last?["notificationUUID"])
        #expect(last.first?["state"] == .string("delivered"))
        #expect(sink.count == 4, "three notifications, one of them twice")
    }

    @Test("With a retention, the scheduler prunes as time passes, with no clock change asked for")
    func retentionByTheScheduler() async throws {
        let time = AppStoreTests.FakeTime()
        let harness = try await Self.harness(rate: .realTime, notificationRetention: StorePeriod(days: 2), time: time)
        let sink = try NotificationSink()
        try await Self.configure(harness, ["productionURL": .string(sink.url)])
        try await Self.subscribe(harness, count: 1)
        _ = try await sink.payloads(atLeast: 1)
        #expect(try await Self.settledHistory(harness, environment: "Production").count == 1)
        // Three days pass on the real clock (store time follows it at this rate).
        time.value.withLock { $0 = $0.addingTimeInterval(3 * 86_400) }
        var left = 1
        for _ in 0..<500 where left > 0 {
            try await Task.sleep(for: .milliseconds(10))
            left = try await Self.settledHistory(harness, environment: "Production").count
        }
        #expect(left == 0, "pruned within five seconds (the scheduler prunes at most once a second)")
    }

    @Test("A retention is measured at the time rate, as the advances and Apple's retry schedule are")
    func retentionAtTheTimeRate() async throws {
        // A month renews every five minutes: ten days of retention are well under two minutes of store time.
        let harness = try await Self.harness(notificationRetention: StorePeriod(days: 10))
        let sink = try NotificationSink()
        try await Self.configure(harness, ["productionURL": .string(sink.url)])
        try await Self.subscribe(harness, count: 1)
        _ = try await sink.payloads(atLeast: 1)
        #expect(try await Self.settledHistory(harness, environment: "Production").count == 1)
        let start = harness.store.now
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P8D")])
        #expect(try await Self.settledHistory(harness, environment: "Production").count == 1, "eight days on")
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P3D")])
        #expect(harness.store.now.timeIntervalSince(start) < 300, "eleven scaled days, no renewal")
        #expect(try await Self.settledHistory(harness, environment: "Production").isEmpty, "eleven days on")
    }

    /// Buys the monthly plan on `count` new production devices (one subscription and notification each).
    static func subscribe(_ harness: AppStoreTests.Harness, count: Int) async throws {
        for _ in 0..<count {
            let app = try await harness.device(environment: "Production", deviceID: UUID().uuidString)
            let (status, _) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
            #expect(status == 200 || status == 201)
        }
    }

    /// Waits (up to ten seconds) until the outbox's delivery queue holds `depth` notifications, then checks it.
    static func waitForQueue(_ harness: AppStoreTests.Harness, depth: Int) async throws {
        var queued = try await harness.store.deliveryQueueDepth()
        for _ in 0..<1_000 where queued != depth {
            try await Task.sleep(for: .milliseconds(10))
            queued = try await harness.store.deliveryQueueDepth()
        }
        #expect(queued == depth, "notifications in the delivery queue")
    }

    @Test(
        "A receiver that does not answer holds at most its share of the in-flight limit; the rest wait in the queue, none lost"
    )
    func boundedInFlight() async throws {
        let harness = try await Self.harness(maxNotificationsInFlight: 3)
        #expect(harness.store.maxNotificationsInFlightPerReceiver == 2, "all but one below four")
        let sink = try GatedSink(hold: .max)
        // A time limit no held send reaches, however slow the machine (one that timed out would free its
        // slot while the receiver still holds it).
        try await Self.configure(harness, ["productionURL": .string(sink.url), "timeoutSeconds": .integer(60)])
        try await Self.subscribe(harness, count: 8)
        try await sink.wait { $0.received.count >= 2 }
        // The other six wait in the outbox's delivery queue: nothing more can be sent until a slot is free.
        try await Self.waitForQueue(harness, depth: 6)
        #expect(sink.received.count == 2)
        #expect(sink.mostInside == 2)
        sink.release()
        try await sink.wait { $0.received.count >= 8 }
        #expect(Set(sink.received).count == 8, "each of the eight, once")
        #expect(sink.mostInside <= 2)
        let history = try await Self.settledHistory(harness, environment: "Production")
        #expect(history.count == 8)
        #expect(history.allSatisfy { $0["state"] == .string("delivered") })
        #expect(history.allSatisfy { $0["sendAttempts"]?.arrayValue?.count == 1 }, "none sent twice")
    }

    @Test(
        "A receiver that does not answer holds at most its share of the delivery slots and lanes; another receiver gets everything meanwhile",
        arguments: [(4, 6, 3), (AppStore.defaultMaxNotificationsInFlight, 30, 16)])
    func receiversShare(inFlight: Int, subscribers: Int, held: Int) async throws {
        let harness = try await Self.harness(maxNotificationsInFlight: inFlight)
        let stuck = try GatedSink(hold: .max)
        let answering = try GatedSink(hold: 0)
        try await Self.configure(
            harness,
            ["productionURL": .array([.string(stuck.url), .string(answering.url)]), "timeoutSeconds": .integer(60)])
        try await Self.subscribe(harness, count: subscribers)
        try await answering.wait { $0.received.count >= subscribers }
        #expect(answering.received.count == subscribers, "none waits behind the receiver that does not answer")
        try await stuck.wait { $0.received.count >= held }
        if inFlight < subscribers {
            // The rest of its share of the slots used, its others wait in the outbox's delivery queue.
            try await Self.waitForQueue(harness, depth: subscribers - held)
        } else {
            // Slots to spare: its others wait for one of its 16 lanes, in memory. Time for any send beyond
            // them to arrive (none may).
            try await Task.sleep(for: .milliseconds(300))
        }
        #expect(stuck.received.count == held)
        #expect(stuck.mostInside == held)
        stuck.release()
        try await stuck.wait { $0.received.count >= subscribers }
        #expect(Set(stuck.received).count == subscribers, "each once")
        let history = try await Self.settledHistory(harness, environment: "Production")
        #expect(history.count == 2 * subscribers)
        #expect(history.allSatisfy { $0["state"] == .string("delivered") })
        #expect(history.allSatisfy { $0["sendAttempts"]?.arrayValue?.count == 1 }, "none sent twice")
    }

    @Test(
        "Receivers that hang leave the last slot to one that holds none: a receiver that answers still gets everything")
    func hangingReceiversLeaveTheReserve() async throws {
        let harness = try await Self.harness(maxNotificationsInFlight: 8)
        // Six slots at most to one receiver; the eighth only to a receiver holding none.
        #expect(harness.store.maxNotificationsInFlightPerReceiver == 6)
        let stuck = [try GatedSink(hold: .max), try GatedSink(hold: .max)]
        let answering = try GatedSink(hold: 0)
        try await Self.configure(
            harness,
            [
                "productionURL": .array([.string(stuck[0].url), .string(stuck[1].url), .string(answering.url)]),
                "timeoutSeconds": .integer(60),
            ])
        try await Self.subscribe(harness, count: 6)
        try await answering.wait { $0.received.count >= 6 }
        #expect(answering.received.count == 6, "none waits behind the receivers that do not answer")
        for _ in 0..<1_000 where stuck[0].received.count + stuck[1].received.count < 7 {
            try await Task.sleep(for: .milliseconds(10))
        }
        // Twelve for the two that hang, seven of them sent: five wait in the delivery queue.
        try await Self.waitForQueue(harness, depth: 5)
        #expect(stuck[0].received.count + stuck[1].received.count == 7, "seven of the eight slots, no more")
        for sink in stuck { sink.release() }
        for sink in stuck { try await sink.wait { $0.received.count >= 6 } }
        #expect(stuck.allSatisfy { Set($0.received).count == 6 }, "each once")
        let history = try await Self.settledHistory(harness, environment: "Production")
        #expect(history.count == 18)
        #expect(history.allSatisfy { $0["state"] == .string("delivered") })
        #expect(history.allSatisfy { $0["sendAttempts"]?.arrayValue?.count == 1 }, "none sent twice")
    }

    /// Storage whose next write runs its body and then fails, as a failed COMMIT does (the body's changes
    /// are rolled back).
    final class FailingStorage: EmulatorStorage {
        let inner = InMemoryEmulatorStorage()
        let failNext = Atomic<Bool>(false)
        struct Failed: Error {}

        func read<T: Sendable>(_ body: @Sendable (any EmulatorStore) throws -> T) async throws -> T {
            try await inner.read(body)
        }

        func write<T: Sendable>(_ body: @escaping @Sendable (any EmulatorStore) throws -> T) async throws -> T {
            let fail = failNext.exchange(false, ordering: .sequentiallyConsistent)
            return try await inner.write { store in
                let result = try body(store)
                if fail { throw Failed() }
                return result
            }
        }
    }

    @Test("A write that claimed a send and did not commit gives its slot back: the send is made by the next one")
    func failedClaimReleasesSlot() async throws {
        let storage = FailingStorage()
        let catalog = try StoreKitConfiguration(data: Array(Self.catalogText.utf8))
        let time = AppStoreTests.FakeTime()
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: AppStoreTests.bundleID)],
            dataDirectory: try ExternalTool.temporaryDirectory(), rate: .monthlyRenewalEveryFiveMinutes,
            storage: storage, maxNotificationsInFlight: 1, realNow: { time.now })
        defer { store.close() }
        let harness = AppStoreTests.Harness(
            store: store, responder: EmulatorRoutes(store).responder(), directory: URL(fileURLWithPath: "/"))
        let sink = try GatedSink(hold: 0)
        try await Self.configure(harness, ["productionURL": .string(sink.url)])
        // Each purchase writes its notification with an attempt due now, which the next catch-up claims.
        for round in 1...2 {
            let app = try await harness.device(environment: "Production", deviceID: UUID().uuidString)
            _ = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
            storage.failNext.store(true, ordering: .sequentiallyConsistent)
            await #expect(throws: FailingStorage.Failed.self) { try await store.catchUp() }
            try await store.catchUp()
            try await sink.wait { $0.received.count >= round }
            #expect(sink.received.count == round, "the one slot was given back, then freed by the result")
            // Its result recorded (the slot free again) before the next round.
            let history = try await Self.settledHistory(harness, environment: "Production")
            #expect(history.count == round)
            #expect(history.allSatisfy { $0["state"] == .string("delivered") })
        }
    }

    @Test("Notifications waiting for a delivery slot when the emulator stops are sent when it starts again")
    func queueSurvivesRestart() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        let first = try await Self.harness(directory: directory, maxNotificationsInFlight: 1)
        // The first send is never answered (the receiver holds it past the test): the stopped emulator's.
        let sink = try GatedSink(hold: 1)
        try await Self.configure(first, ["productionURL": .string(sink.url), "timeoutSeconds": .integer(60)])
        try await Self.subscribe(first, count: 3)
        try await sink.wait { $0.received.count >= 1 }
        try await Self.waitForQueue(first, depth: 2)
        #expect(sink.received.count == 1, "two wait in the queue")
        first.store.close()
        let second = try await Self.harness(directory: directory)
        defer { second.store.close() }
        // The claimed one again (at least once) and the two queued.
        try await sink.wait { $0.received.count >= 4 }
        #expect(sink.received.count == 4)
        #expect(Set(sink.received.dropFirst()).count == 3, "each notification after the restart")
        let history = try await Self.settledHistory(second, environment: "Production")
        #expect(history.count == 3)
        #expect(history.allSatisfy { $0["state"] == .string("delivered") })
    }

    @Test("The sandbox makes one attempt; an unreachable receiver is a SOCKET_ISSUE and the notification fails")
    func sandboxOneAttempt() async throws {
        let harness = try await Self.harness()
        try await Self.configure(harness, ["sandboxURL": .string("http://127.0.0.1:1/nobody")])
        let app = try await harness.device()
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        var entry: JSONValue?
        for _ in 0..<500 {
            let (_, history) = try await harness.call(
                "GET", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications/history")
            entry = history["notificationHistory"]?.arrayValue?.first
            if entry?["state"] != .string("pending") { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(entry?["state"] == .string("failed"))
        #expect(entry?["sendAttempts"]?.arrayValue?.count == 1)
        #expect(entry?["sendAttempts"]?.arrayValue?.first?["sendAttemptResult"] == .string("SOCKET_ISSUE"))
    }

    @Test("V1: the unified receipt's latest_receipt_info holds the latest 100 purchases, newest first")
    func versionOneLatestHundred() async throws {
        let harness = try await Self.harness(secret: "s3cret")
        let sink = try NotificationSink()
        try await Self.configure(harness, ["sandboxURL": .string(sink.url), "version": .integer(1)])
        let app = try await harness.device()
        var ids: [String] = []
        for _ in 0..<102 {
            let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("coins")])
            ids.append(try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue))
            _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("PT1M")])
        }
        _ = try await harness.call("POST", "/_emulator/v1/transactions/\(ids[0])/refund")
        let bodies = try await sink.bodies(atLeast: 1)
        let refund = try #require(bodies.first { $0["notification_type"] == .string("REFUND") })
        let infos = refund["unified_receipt"]?["latest_receipt_info"]?.arrayValue ?? []
        #expect(infos.count == 100)
        #expect(infos.first?["transaction_id"] == .string(ids[101]), "the newest first")
    }

    @Test("V1: Apple's unsigned body with the shared secret and the unified receipt; events V1 lacks send nothing")
    func versionOne() async throws {
        let harness = try await Self.harness(secret: "s3cret")
        let sink = try NotificationSink()
        try await Self.configure(harness, ["sandboxURL": .string(sink.url), "version": .integer(1)])
        let app = try await harness.device()
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        let id = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        _ = try await sink.bodies(atLeast: 1)
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        _ = try await sink.bodies(atLeast: 2)
        _ = try await harness.call("POST", "/_emulator/v1/transactions/\(id)/auto-renew", ["enabled": .bool(false)])
        _ = try await sink.bodies(atLeast: 3)
        // Expiry and a one-time charge have no V1 type: nothing is sent for them.
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let (_, coins) = try await harness.call("POST", app + "/payments", ["productId": .string("coins")])
        let coinsID = try #require(coins["transaction"]?["transactionIdentifier"]?.stringValue)
        _ = try await harness.call("POST", "/_emulator/v1/transactions/\(coinsID)/refund")
        _ = try await harness.call("POST", "/_emulator/v1/transactions/\(id)/refund")
        let bodies = try await sink.bodies(atLeast: 5)
        let (_, history) = try await harness.call(
            "GET", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications/history")
        let items = history["notificationHistory"]?.arrayValue ?? []
        #expect(
            items.compactMap { $0["v1NotificationType"]?.stringValue } == [
                "INITIAL_BUY", "DID_RENEW", "DID_CHANGE_RENEWAL_STATUS", "REFUND", "CANCEL",
            ])
        #expect(items.allSatisfy { $0["version"] == .integer(1) && $0["payload"]?["password"] == nil })
        #expect(bodies.count == 5)
        #expect(
            Set(bodies.compactMap { $0["notification_type"]?.stringValue }) == [
                "INITIAL_BUY", "DID_RENEW", "DID_CHANGE_RENEWAL_STATUS", "REFUND", "CANCEL",
            ])
        for body in bodies {
            #expect(body["password"] == .string("s3cret"))
            #expect(body["environment"] == .string("Sandbox"))
            #expect(body["bid"] == .string(AppStoreTests.bundleID))
            #expect(body["signedPayload"] == nil)
            let unified = try #require(body["unified_receipt"])
            #expect(unified["status"] == .integer(0) && unified["environment"] == .string("Sandbox"))
            // The receipt inside verifies at verifyReceipt and holds what the notification is about.
            let latest = try #require(unified["latest_receipt"]?.stringValue)
            let (_, verified) = try await harness.call(
                "POST", "/sandbox/verifyReceipt", ["receipt-data": .string(latest), "password": .string("s3cret")])
            #expect(verified["status"] == .integer(0), "\(verified)")
            // The app's original version is the account's first install's, as the device's own receipt says.
            #expect(verified["receipt"]?["original_application_version"] == .string("1"), "\(verified)")
            let original = try #require(body["original_transaction_id"]?.stringValue)
            #expect(
                unified["latest_receipt_info"]?.arrayValue?.contains {
                    $0["original_transaction_id"] == .string(original)
                }
                    == true)
        }
        let change = try #require(bodies.first { $0["notification_type"] == .string("DID_CHANGE_RENEWAL_STATUS") })
        #expect(change["auto_renew_status"] == .string("false"))
        #expect(change["auto_renew_product_id"] == .string("monthly"))
        #expect(change["auto_renew_status_change_date_ms"]?.stringValue != nil)
        #expect(
            change["unified_receipt"]?["pending_renewal_info"]?.arrayValue?.first?["auto_renew_status"] == .string("0"))
        let cancel = try #require(bodies.first { $0["notification_type"] == .string("CANCEL") })
        // The refunded period carries its cancellation date in the receipt the notification brings.
        let refunded = cancel["unified_receipt"]?["latest_receipt_info"]?.arrayValue?.filter {
            $0["original_transaction_id"] == .string(id) && $0["cancellation_date_ms"] != nil
        }
        #expect(refunded?.count == 1, "\(cancel)")
        let (_, settings) = try await harness.call(
            "GET", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications")
        #expect(settings["version"] == .integer(1))
    }

    @Test(
        "V1 through the lifecycle: a past period refunded alone, V1 has CONSUMPTION_REQUEST for consumables only, upgrades and billing retry as verifyReceipt shows them"
    )
    func versionOneLifecycle() async throws {
        let harness = try await Self.harness(secret: "s3cret")
        let sink = try NotificationSink()
        try await Self.configure(harness, ["sandboxURL": .string(sink.url), "version": .integer(1)])
        let (accountID, app) = try await harness.accountAndApp()
        let base = "/_emulator/v1/transactions/"
        func verify() async throws -> JSONValue {
            let receipt = Data(try await harness.receipt(app)).base64EncodedString()
            let (status, answer) = try await harness.call(
                "POST", "/sandbox/verifyReceipt", ["receipt-data": .string(receipt), "password": .string("s3cret")])
            #expect(status == 200 && answer["status"] == .integer(0), "\(answer)")
            return answer
        }
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        let first = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        _ = try await sink.bodies(atLeast: 2)

        // A past period refunded: that transaction alone; the subscription renewed since stays active.
        let (refundStatus, refunded) = try await harness.call(
            "POST", base + first + "/refund", ["reason": .string("APP_ISSUE")])
        #expect(refundStatus == 200, "\(refunded)")
        #expect(refunded["transaction"]?["transactionIdentifier"] == .string(first))
        #expect(
            refunded["subscription"]?["status"] == .integer(1) && refunded["subscription"]?["autoRenew"] == .bool(true))
        let cancel = try #require(
            try await sink.bodies(atLeast: 3).first { $0["notification_type"] == .string("CANCEL") })
        let infos = cancel["unified_receipt"]?["latest_receipt_info"]?.arrayValue ?? []
        #expect(infos.count == 2)
        let past = infos.first { $0["transaction_id"] == .string(first) }
        #expect(past?["cancellation_date_ms"] != nil && past?["cancellation_reason"] == .string("1"), "\(infos)")
        #expect(infos.filter { $0["cancellation_date_ms"] != nil }.count == 1, "the current period is not refunded")
        let afterRefund = try await verify()
        let inApp = afterRefund["receipt"]?["in_app"]?.arrayValue?.first { $0["transaction_id"] == .string(first) }
        #expect(
            inApp?["cancellation_date_ms"] != nil && inApp?["cancellation_reason"] == .string("1"), "\(afterRefund)")
        // Without a password (no latest_receipt_info), the receipt's refunded purchase still has its reason.
        let receipt = Data(try await harness.receipt(app)).base64EncodedString()
        let (_, bare) = try await harness.call("POST", "/sandbox/verifyReceipt", ["receipt-data": .string(receipt)])
        #expect(bare["latest_receipt_info"] == nil)
        let bareInApp = bare["receipt"]?["in_app"]?.arrayValue?.first { $0["transaction_id"] == .string(first) }
        #expect(bareInApp?["cancellation_reason"] == .string("1"), "\(bare)")
        let twice = try await harness.call("POST", base + first + "/refund")
        #expect(twice.0 == 400, "already refunded")
        let (reversedStatus, reversed) = try await harness.call("POST", base + first + "/refund-reversal")
        #expect(reversedStatus == 200, "\(reversed)")
        let whole = try await verify()
        #expect(whole["latest_receipt_info"]?.arrayValue?.allSatisfy { $0["cancellation_date_ms"] == nil } == true)

        // A refund request: V1's CONSUMPTION_REQUEST is for the consumable, not the subscription.
        let renewal = whole["latest_receipt_info"]?.arrayValue?.first { $0["transaction_id"] != .string(first) }
        let current = try #require(renewal?["transaction_id"]?.stringValue)
        _ = try await harness.call("POST", base + current + "/refund-request")
        _ = try await harness.call("POST", base + current + "/refund-decision", ["approved": .bool(false)])
        let (_, coins) = try await harness.call("POST", app + "/payments", ["productId": .string("coins")])
        let coinsID = try #require(coins["transaction"]?["transactionIdentifier"]?.stringValue)
        _ = try await harness.call("POST", base + coinsID + "/refund-request")
        _ = try await harness.call("POST", base + current + "/auto-renew", ["enabled": .bool(true)])

        // An upgrade: the superseded period is `is_upgraded` in latest_receipt_info.
        let (upgraded, _) = try await harness.call("POST", app + "/payments", ["productId": .string("premium")])
        #expect(upgraded == 201)
        let interactive = try #require(
            try await sink.bodies(atLeast: 7).first { $0["notification_type"] == .string("INTERACTIVE_RENEWAL") })
        let superseded = interactive["unified_receipt"]?["latest_receipt_info"]?.arrayValue?.filter {
            $0["is_upgraded"] == .string("true")
        }
        #expect(superseded?.map { $0["transaction_id"] } == [.string(current)], "\(interactive)")

        // Billing retry: the period has expired for a billing error while Apple retries.
        _ = try await harness.call(
            "POST", "/_emulator/v1/accounts/\(accountID)/settings", ["billingRetryOnRenewal": .bool(true)])
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let failed = try #require(
            try await sink.bodies(atLeast: 8).first { $0["notification_type"] == .string("DID_FAIL_TO_RENEW") })
        #expect(failed["expiration_intent"] == .string("2"))
        let pending = failed["unified_receipt"]?["pending_renewal_info"]?.arrayValue?.first
        #expect(pending?["expiration_intent"] == .string("2") && pending?["is_in_billing_retry_period"] == .string("1"))
        #expect(pending?["auto_renew_status"] == .string("1") && failed["auto_renew_status"] == .string("true"))
        let retrying = try await verify()["pending_renewal_info"]?.arrayValue?.first
        #expect(
            retrying?["expiration_intent"] == .string("2") && retrying?["is_in_billing_retry_period"] == .string("1"))

        let (_, history) = try await harness.call(
            "GET", "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications/history")
        #expect(
            (history["notificationHistory"]?.arrayValue ?? []).compactMap { $0["v1NotificationType"]?.stringValue } == [
                "INITIAL_BUY", "DID_RENEW", "CANCEL", "DID_CHANGE_RENEWAL_STATUS", "CONSUMPTION_REQUEST",
                "DID_CHANGE_RENEWAL_STATUS", "INTERACTIVE_RENEWAL", "DID_FAIL_TO_RENEW",
            ])
    }

    @Test("Refund requests: CONSUMPTION_REQUEST with its reason, auto-renew off, then REFUND or REFUND_DECLINED")
    func refundRequests() async throws {
        let harness = try await Self.harness()
        let sink = try NotificationSink()
        try await Self.configure(harness, ["sandboxURL": .string(sink.url)])
        let app = try await harness.device()
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        let id = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        let (_, coins) = try await harness.call("POST", app + "/payments", ["productId": .string("coins")])
        let coinsID = try #require(coins["transaction"]?["transactionIdentifier"]?.stringValue)
        _ = try await sink.payloads(atLeast: 2)
        let base = "/_emulator/v1/transactions/"
        // A decision needs a request; a bad reason is refused by name.
        let early = try await harness.call("POST", base + id + "/refund-decision", ["approved": .bool(true)])
        #expect(early.0 == 400, "\(early.1)")
        let badReason = try await harness.call("POST", base + id + "/refund-request", ["reason": .string("BORED")])
        #expect(badReason.0 == 400)
        let (requested, answer) = try await harness.call(
            "POST", base + id + "/refund-request", ["reason": .string("UNSATISFIED_WITH_PURCHASE")])
        #expect(requested == 200, "\(answer)")
        #expect(answer["subscription"]?["autoRenew"] == .bool(false), "the App Store turns auto-renew off")
        let twice = try await harness.call("POST", base + id + "/refund-request")
        #expect(twice.0 == 409, "\(twice.1)")
        _ = try await sink.payloads(atLeast: 4)
        let (declined, declinedAnswer) = try await harness.call(
            "POST", base + id + "/refund-decision", ["approved": .bool(false)])
        #expect(declined == 200, "\(declinedAnswer)")
        #expect(declinedAnswer["subscription"]?["status"] == .integer(1), "declined: still active")
        _ = try await harness.call("POST", base + coinsID + "/refund-request", ["reason": .string("FULFILLMENT_ISSUE")])
        _ = try await sink.payloads(atLeast: 6)
        let (approved, approvedAnswer) = try await harness.call(
            "POST", base + coinsID + "/refund-decision", ["approved": .bool(true), "reason": .string("APP_ISSUE")])
        #expect(approved == 200, "\(approvedAnswer)")
        #expect(approvedAnswer["transaction"] != nil)
        let again = try await harness.call("POST", base + coinsID + "/refund-decision", ["approved": .bool(true)])
        #expect(again.0 == 400, "the request was decided")
        let (reversed, _) = try await harness.call("POST", base + coinsID + "/refund-reversal")
        #expect(reversed == 200)
        let payloads = try await Self.ordered(try await sink.payloads(atLeast: 8), harness)
        #expect(
            try Self.names(payloads, harness) == [
                "SUBSCRIBED/INITIAL_BUY", "ONE_TIME_CHARGE", "CONSUMPTION_REQUEST",
                "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED", "REFUND_DECLINED", "CONSUMPTION_REQUEST", "REFUND",
                "REFUND_REVERSED",
            ])
        let request = try Self.decode(payloads[2], harness)
        #expect(request["data"]?["consumptionRequestReason"] == .string("UNSATISFIED_WITH_PURCHASE"))
        #expect(request["data"]?["status"] == .integer(1))
        let coinsRequest = try Self.decode(payloads[5], harness)
        #expect(coinsRequest["data"]?["consumptionRequestReason"] == .string("FULFILLMENT_ISSUE"))
        #expect(coinsRequest["data"]?["signedRenewalInfo"] == nil)
        let refund = try Self.decode(payloads[6], harness)
        #expect(refund["data"]?["transactionInfo"]?["revocationReason"] == .integer(1))
        let reversal = try Self.decode(payloads[7], harness)
        #expect(reversal["data"]?["transactionInfo"]?["revocationDate"] == nil)
    }

    @Test(
        "The outbox keeps a V2 payload at a fraction of its size and gives back exactly the bytes delivered",
        .enabled(if: ExternalTool.find("sqlite3") != nil, "needs the sqlite3 command"))
    func compactPayloads() async throws {
        let harness = try await Self.harness()
        let sink = try NotificationSink()
        try await Self.configure(harness, ["sandboxURL": .string(sink.url)])
        let app = try await harness.device()
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        _ = try await sink.payloads(atLeast: 1)
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let delivered = try await sink.payloads(atLeast: 2)
        let history = try await Self.settledHistory(harness).compactMap { $0["signedPayload"]?.stringValue }
        #expect(delivered.count == 2)
        #expect(Set(history) == Set(delivered), "the history answers the delivered bytes")
        let path = harness.directory.appendingPathComponent("store.sqlite").path
        let sqlite = try #require(ExternalTool.find("sqlite3"))
        let stored = try ExternalTool.run(
            sqlite, [path, "SELECT substr(payload, 1, 1), length(payload) FROM notification_payloads"])
        let rows = stored.stdoutText.split(separator: "\n").map { $0.split(separator: "|") }
        #expect(rows.count == 2, "\(stored.stdoutText) \(stored.stderrText)")
        let smallest = delivered.map(\.utf8.count).min() ?? 0
        for row in rows {
            #expect(row.first == "~", "kept short: \(row)")
            #expect((Int(row.last ?? "") ?? .max) * 3 < smallest, "under a third of \(smallest) bytes: \(row)")
        }

        // Payloads it cannot keep short are kept whole: one holding the marker, one signed under another header.
        harness.store.close()
        let pki = harness.store.pki.signedData
        let ours = try JWSChainSigner(key: pki.leafKey, chain: [pki.leaf, pki.intermediate, pki.root])
        let other = try JWSChainSigner(key: pki.leafKey, chain: [pki.leaf, pki.intermediate])
        let nested = try ours.sign(["a": .string("b")])
        let marked = try ours.sign(["inner": .string(nested), "note": .string("\"~.\(nested)")])
        let foreign = try other.sign(["inner": .string(try other.sign(["a": .string("b")]))])
        let plain = try ours.sign(["inner": .string(nested), "n": .integer(1)])
        let storage = try await SQLiteEmulatorStorage(path: path)
        let notifications = [marked, foreign, plain].enumerated().map { index, signed in
            OutboundNotification(
                id: "extra-\(index)", bundleID: BundleID(AppStoreTests.bundleID), environment: .sandbox, version: 2,
                url: sink.url, body: OutboundNotification.v2Body(signedPayload: signed), signedPayload: signed,
                notice: Notice(.test, nil, v1: nil), originalTransactionID: TransactionID("extra-\(index)"),
                created: Date(timeIntervalSince1970: 1_704_067_200),
                retryDelays: [], retryClientErrors: true, timeoutMilliseconds: 1_000)
        }
        // The emulator's payloads again, through the storage alone: the form stored from the signed bytes
        // (on the signing thread) is the one stored from decoding the JWS.
        let copies = delivered.enumerated().map { index, signed in
            var copy = notifications[2]
            (copy.id, copy.signedPayload) = ("again-\(index)", signed)
            copy.body = OutboundNotification.v2Body(signedPayload: signed)
            return copy
        }
        try await storage.write { store in
            for notification in notifications + copies { try store.insert(notification) }
        }
        for notification in notifications + copies {
            #expect(try await storage.read { try $0.notification(notification.id) } == notification)
        }
        let distinct = try ExternalTool.run(
            sqlite,
            [
                path,
                """
                SELECT count(*), count(DISTINCT p.payload), min(substr(p.payload, 1, 1)) FROM notification_payloads p
                JOIN notifications n USING (position) WHERE n.id NOT LIKE 'extra-%'
                """,
            ])
        #expect(
            distinct.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) == "4|2|~", "\(distinct.stdoutText)")
        let kinds = try ExternalTool.run(
            sqlite,
            [
                path,
                """
                SELECT substr(p.payload, 1, 1) FROM notification_payloads p JOIN notifications n USING (position)
                WHERE n.id LIKE 'extra-%' ORDER BY n.id
                """,
            ])
        #expect(kinds.stdoutText.split(separator: "\n") == ["e", "e", "~"], "\(kinds.stdoutText)")

        // A short payload whose header the database no longer holds is an error, not a wrong payload.
        let removed = try ExternalTool.run(sqlite, [path, "DELETE FROM settings WHERE key LIKE 'jwsHeader.%'"])
        #expect(removed.status == 0)
        let reopened = try await SQLiteEmulatorStorage(path: path)
        await #expect(throws: EmulatorStorageError.self) {
            try await reopened.read { try $0.notification("extra-2") }
        }
        #expect(try await reopened.read { try $0.notification("extra-0") } == notifications[0])
    }

    @Test("A V2 body is {\"signedPayload\": …} exactly as the JSON writer writes it, for a JWS and for anything else")
    func v2Body() throws {
        for payload in ["eyJhbGciOiJFUzI1NiJ9.eyJhIjoxfQ.c2ln-_0", "", "not \"a\" JWS\n\u{2028}é"] {
            let body = OutboundNotification.v2Body(signedPayload: payload)
            #expect(body == JSONWriter.bytes(.object(["signedPayload": .string(payload)])), "\(payload)")
            #expect(try JSONParser.parse(body)["signedPayload"] == .string(payload))
        }
    }

    @Test("Notification settings are checked member by member")
    func settings() async throws {
        let harness = try await Self.harness()
        let path = "/_emulator/v1/apps/\(AppStoreTests.bundleID)/notifications"
        for bad: JSONObject in [
            ["sandboxURL": .string("ftp://x")], ["version": .integer(3)], ["bogus": .bool(true)],
            ["timeoutSeconds": .integer(0)], ["retrySchedule": .array([.integer(-1)])],
        ] {
            let (status, answer) = try await harness.call("PUT", path, bad)
            #expect(status == 400, "\(bad): \(answer)")
        }
        let (_, unknown) = try await harness.call("PUT", "/_emulator/v1/apps/com.other/notifications", [:])
        #expect(unknown["error"] != nil)
        let (ok, stored) = try await harness.call(
            "PUT", path, ["sandboxURL": .array([.string("http://a.example/n"), .string("http://b.example/n")])])
        #expect(ok == 200)
        #expect(stored["sandboxURL"]?.arrayValue?.count == 2)
        let (_, read) = try await harness.call("GET", path)
        #expect(read == stored)
    }
}

extension AppStoreTests.Harness {
    /// The account id behind an app path of ``device(environment:deviceID:version:)``.
    func accountOf(_ app: String) async throws -> String? {
        let deviceID = app.split(separator: "/")[3]
        return try await store.accountID(ofDevice: String(deviceID))
    }
}

@Suite("Notifications checked by Apple's own library")
struct NotificationInteropTests {
    @Test(
        "Apple's SignedDataVerifier accepts the emulator's notifications and the renewal info inside them",
        .enabled(if: PythonInterop.python != nil, Comment(rawValue: PythonInterop.missingMessage)))
    func appleAccepts() async throws {
        let harness = try await NotificationTests.harness()
        let sink = try NotificationSink()
        try await NotificationTests.configure(harness, ["sandboxURL": .string(sink.url)])
        let app = try await harness.device()
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let payloads = try await sink.payloads(atLeast: 2)
        #expect(payloads.count == 2)
        let root = Data(harness.store.pki.signedData.root.derEncoded).base64EncodedString()
        var input = ""
        for payload in payloads {
            let decoded = try NotificationTests.decode(payload, harness)
            let renewal = try #require(decoded["data"]?["signedRenewalInfo"]?.stringValue)
            for (token, type) in [(payload, "notification"), (renewal, "renewal-info")] {
                let line: JSONObject = [
                    "token": .string(token), "roots": .array([.string(root)]), "environment": .string("Sandbox"),
                    "bundleId": .string(AppStoreTests.bundleID), "appAppleId": .integer(1_234_567_890),
                    "type": .string(type), "strict": .bool(true),
                ]
                input += JSONWriter.string(.object(line)) + "\n"
            }
        }
        let run = try ExternalTool.run(
            try #require(PythonInterop.python), [PythonInterop.verifierScript], stdin: Array(input.utf8))
        #expect(run.status == 0, "\(run.stderrText)")
        #expect(
            run.stdoutText.split(separator: "\n").map(String.init) == Array(repeating: #"{"status": "OK"}"#, count: 4))
    }
}
