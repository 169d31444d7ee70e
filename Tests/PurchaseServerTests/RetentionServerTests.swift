import AppStoreEmulator
import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import PurchaseServer
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import SubscriptionLifecycle
import Synchronization
import Testing

/// Retention Messaging end to end: the emulator sends Apple's signed realtime request to the purchase
/// server, which answers from its rules within Apple's limit; the emulator applies the answer; the server
/// records each request as a subscriber event and counts save rates.
@Suite("Purchase server: Retention Messaging's realtime requests")
struct RetentionServerTests {
    static let (promo, plain, retry) = (UUID(), UUID(), UUID())

    static let rules: [RetentionSettings.Rule] = {
        var inRetry = RetentionSettings.Conditions()
        inRetry.billingRetry = true
        var firstTime = RetentionSettings.Conditions()
        firstTime.productIDs = ["com.example.storekeeper.monthly"]
        firstTime.maxPastOffers = 0
        return [
            .init(name: "billing trouble", conditions: inRetry, answer: .message(retry.uuidString.lowercased())),
            .init(
                name: "first offer", conditions: firstTime,
                answer: .promotionalOffer(
                    message: promo.uuidString.lowercased(), offerID: "com.example.storekeeper.comeback")),
            .init(name: "everyone else", answer: .message(plain.uuidString.lowercased())),
        ]
    }()

    /// Messages uploaded to the emulator's sandbox (approved at once) and the realtime URL set to the server.
    static func configure(_ harness: ServerHarness, url: String? = nil) async throws {
        let minted = try await harness.store.serverAPI.mintAPIKey(bundleID: ServerHarness.bundleID)
        let client = AppStoreServerAPIClient(
            key: try PrivateKey(pem: minted.privateKey), keyID: minted.keyID, issuerID: minted.issuerID,
            bundleID: ServerHarness.bundleID,
            environment: .custom("http://127.0.0.1:\(harness.emulator.port)/sandbox"))
        for (id, header) in [(promo, "A gift"), (plain, "Before you go"), (retry, "Fix your payment")] {
            try await client.uploadMessage(id, RetentionMessageRequest(header: header, body: "We would miss you"))
        }
        try await client.configureRealtimeURL(
            url ?? "http://127.0.0.1:\(harness.http.port)/v1/apple/retention/\(ServerHarness.bundleID)")
    }

    /// The emulator's control verb: a customer opens the cancellation page.
    static func cancellationPage(_ harness: ServerHarness, _ transaction: String) async throws -> JSONValue {
        let response = try await HTTPClient().send(
            "POST",
            "http://127.0.0.1:\(harness.emulator.port)/_emulator/v1/transactions/\(transaction)/retention-request",
            headers: [("Content-Type", "application/json")], body: Array(#"{"locale":"en-US"}"#.utf8))
        #expect(response.status == 200, "\(String(decoding: response.body, as: UTF8.self))")
        return try JSONParser.parse(response.body)
    }

    @Test("Rules answer from the subscriber's state; the offer is redeemed; events and save rates are recorded")
    func endToEnd() async throws {
        let harness = try await ServerHarness.make(retention: Self.rules)
        defer { harness.stop() }
        try await Self.configure(harness)
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device)
        #expect(try await harness.post(jws, user: "alice").0 == 200)

        // First time on the page: the promotional offer, signed by the server, verified and redeemed by the App
        // Store as a retention offer, within Apple's limit.
        let first = try await Self.cancellationPage(harness, id)
        #expect(first["outcome"] == .string("promotionalOffer"), "\(first)")
        #expect(first["result"] == .string("SUCCESS") && first["withinLimit"] == .bool(true))
        #expect(
            first["accepted"] == .bool(true)
                && first["shown"]?["offerIdentifier"] == .string("com.example.storekeeper.comeback"))
        // Again: an offer was given already, so the plain message.
        let second = try await Self.cancellationPage(harness, id)
        #expect(second["outcome"] == .string("message"))
        #expect(second["shown"]?["messageIdentifier"] == .string(Self.plain.uuidString.lowercased()))

        // Both requests are events of alice's, with the rule that answered.
        let (_, events) = try await harness.call("GET", "/v1/subscribers/alice/events")
        let retention = events["events"]?.arrayValue?.filter { $0["type"] == .string("RETENTION_REQUEST") } ?? []
        #expect(retention.count == 2, "\(events)")
        #expect(retention.first?["details"]?["rule"] == .string("first offer"))
        #expect(retention.last?["details"]?["answer"] == .string("message"))

        // The customer cancels anyway: the requests of the day before did not save the subscription.
        _ = try await harness.store.subscriptionVerb(.setAutoRenew(false), transactionID: id)
        try await harness.settleNotifications()
        let answers = try await harness.server.storage.read {
            try $0.retentionAnswers(original: TransactionID(id), limit: 10)
        }
        #expect(answers.count == 2 && answers.allSatisfy { $0.cancelled != nil }, "\(answers)")
        let now = EpochMilliseconds.milliseconds(harness.store.now)
        let (status, chart) = try await harness.call(
            "GET",
            "/v1/metrics/retention_save_rate?bundleId=\(ServerHarness.bundleID)&resolution=month&from=\(now - 86_400_000)&to=\(now + 1)"
        )
        #expect(status == 200 && chart["unit"] == .string("percent"), "\(chart)")
        #expect(chart["values"]?.arrayValue?.allSatisfy { $0["value"] == .double(0) } == true, "\(chart)")
    }

    @Test("A saved request counts; billing retry picks its rule; no rule answers 204 and the default shows")
    func saveRateAndRules() async throws {
        let harness = try await ServerHarness.make(retention: Array(Self.rules.prefix(1)))
        defer { harness.stop() }
        try await Self.configure(harness)
        let (account, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device)
        #expect(try await harness.post(jws, user: "bob").0 == 200)
        // No rule matches an active subscriber: 204, and the emulator shows no message (none is the default).
        let none = try await Self.cancellationPage(harness, id)
        #expect(none["status"] == .integer(204) && none["outcome"] == .string("none"), "\(none)")
        // In billing retry, the billing rule answers.
        _ = try await harness.store.configureBilling(account.rawValue, retryOnRenewal: true, gracePeriod: nil)
        _ = try await harness.store.subscriptionVerb(.forceRenewal, transactionID: id)
        try await harness.settleNotifications()
        let trouble = try await Self.cancellationPage(harness, id)
        #expect(trouble["outcome"] == .string("message"), "\(trouble)")
        #expect(trouble["shown"]?["messageIdentifier"] == .string(Self.retry.uuidString.lowercased()))
        let now = EpochMilliseconds.milliseconds(harness.store.now)
        let (_, chart) = try await harness.call(
            "GET",
            "/v1/metrics/retention_save_rate?bundleId=\(ServerHarness.bundleID)&resolution=month&from=\(now - 86_400_000)&to=\(now + 1)"
        )
        let values = chart["values"]?.arrayValue?.compactMap { $0["value"]?.doubleValue } ?? []
        #expect(values.contains(100), "nobody cancelled: every request saved (\(chart))")
    }

    @Test("A retention request made before the purchase's owner is known sends no webhook when the owner claims it")
    func noRetentionWebhook() async throws {
        let harness = try await ServerHarness.make(retention: Self.rules)
        defer { harness.stop() }
        try await Self.configure(harness)
        let (_, device) = try await harness.customer()
        // Apple's notification stores the purchase without an owner; the customer opens the cancellation page.
        let (id, jws) = try await harness.buy("monthly", device: device)
        try await harness.settleNotifications()
        _ = try await Self.cancellationPage(harness, id)
        #expect(try await harness.post(jws, user: "erin").0 == 200)
        let types = try await harness.sink.types { $0.contains("INITIAL_PURCHASE") }
        _ = try await harness.sink.settledEventIDs()
        let sent = harness.sink.state.received.withLock { $0.map { $0.event["type"]?.stringValue ?? "?" } }
        #expect(types.contains("INITIAL_PURCHASE") && !sent.contains("RETENTION_REQUEST"), "\(sent)")
        let events = try await harness.call("GET", "/v1/subscribers/erin/events").1
        let recorded = events["events"]?.arrayValue?.compactMap { $0["type"]?.stringValue } ?? []
        #expect(recorded.contains("RETENTION_REQUEST"), "recorded for the user all the same: \(recorded)")
    }

    @Test("A request answered after the cancellation that followed it is still not a save")
    func cancellationBeforeTheAnswer() async throws {
        // Apple's request is held back (as a request read before a cancellation and recorded after it would be):
        // the realtime URL captures it, the customer cancels, then the server gets it.
        let captured = Mutex<[UInt8]?>(nil)
        var router = Router()
        router.add(
            "POST", "/capture",
            inline: { request, _ in
                captured.withLock { $0 = request.body }
                return HTTPResponse(status: 204)
            })
        let capture = try HTTPServer(port: 0, responder: router.freeze())
        defer { capture.stop() }
        let harness = try await ServerHarness.make(retention: Self.rules)
        defer { harness.stop() }
        try await Self.configure(harness, url: "http://127.0.0.1:\(capture.port)/capture")
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device)
        #expect(try await harness.post(jws, user: "dave").0 == 200)
        _ = try await Self.cancellationPage(harness, id)
        let body = try #require(captured.withLock { $0 })
        _ = try await harness.store.subscriptionVerb(.setAutoRenew(false), transactionID: id)
        try await harness.settleNotifications()

        let reply = try await harness.server.answerRetention(bundleID: ServerHarness.bundleID, body: body)
        #expect(reply.answer.answer == "promotionalOffer")
        let answers = try await harness.server.storage.read {
            try $0.retentionAnswers(original: TransactionID(id), limit: 10)
        }
        #expect(answers.count == 1 && answers.first?.cancelled != nil, "\(answers)")
    }

    @Test("Requests that do not verify, or name another app, are refused")
    func refusals() async throws {
        let harness = try await ServerHarness.make(retention: Self.rules)
        defer { harness.stop() }
        let path = "/v1/apple/retention/\(ServerHarness.bundleID)"
        let (garbage, _) = try await harness.call("POST", path, ["signedPayload": .string("a.b.c")], key: nil)
        #expect(garbage == 422, "\(garbage)")
        let (missing, _) = try await harness.call("POST", path, ["other": .string("x")], key: nil)
        #expect(missing == 400)
        // Signed by a key the app does not trust.
        let key = try PrivateKey.generateP256()
        let forged = try JWSSigner.sign(
            payload: [
                "originalTransactionId": .string("1"), "appAppleId": .integer(1_234_567_890),
                "productId": .string("p"), "userLocale": .string("en-US"),
                "requestIdentifier": .string(UUID().uuidString), "signedDate": .integer(0),
                "environment": .string("Sandbox"),
            ], header: ["alg": .string("ES256")], key: key)
        let (refused, body) = try await harness.call("POST", path, ["signedPayload": .string(forged)], key: nil)
        #expect(refused == 422 && body["error"]?["code"] == .string("verification_failed"), "\(body)")
        let (unknown, _) = try await harness.call(
            "POST", "/v1/apple/retention/com.example.other", ["signedPayload": .string(forged)], key: nil)
        #expect(unknown == 404)
        // Signed by the App Store, in the sandbox, for another app (appAppleId): not answered (Apple's rule, in
        // every environment); one without an appAppleId is, as the sandbox may send it.
        let pki = harness.store.pki.signedData
        let apple = try JWSChainSigner(key: pki.leafKey, chain: [pki.leaf, pki.intermediate, pki.root])
        for (appAppleID, expected) in [(JSONValue.integer(987_654_321), 422), (nil, 200)] {
            var payload: JSONObject = [
                "originalTransactionId": .string("1"), "productId": .string("com.example.storekeeper.monthly"),
                "userLocale": .string("en-US"), "requestIdentifier": .string(UUID().uuidString),
                "signedDate": .integer(Int64(Date().timeIntervalSince1970 * 1_000)), "environment": .string("Sandbox"),
            ]
            payload["appAppleId"] = appAppleID
            let (status, answer) = try await harness.call(
                "POST", path, ["signedPayload": .string(try apple.sign(payload))], key: nil)
            #expect(status == expected, "\(String(describing: appAppleID)): \(answer)")
        }
    }
}

/// Monthly billing over a 12-month commitment, as the purchase server keeps it.
@Suite("Purchase server: commitment billing")
struct CommitmentServerTests {
    @Test("The plan and the commitment are stored and shown; cancelling the commitment is a CANCELLATION")
    func commitment() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let outcome = try await harness.store.pay(
            deviceID: device, bundleID: ServerHarness.bundleID, productID: "com.example.storekeeper.yearly",
            quantity: 1, applicationUsername: nil, appAccountToken: nil, billingPlan: .monthly)
        guard case .purchased(let stored, let jws) = outcome else {
            Issue.record("the payment did not go through")
            return
        }
        #expect(try await harness.post(jws, user: "carol").0 == 200)
        try await harness.settleNotifications()
        let view = try await harness.subscriber("carol")
        let subscription = view["subscriptions"]?[stored.id.rawValue]
        #expect(subscription?["billingPlanType"] == .string("MONTHLY"), "\(view)")
        #expect(subscription?["renewalBillingPlanType"] == .string("MONTHLY"))
        #expect(subscription?["commitment"]?["billingPeriodNumber"] == .integer(1))
        #expect(subscription?["commitment"]?["totalBillingPeriods"] == .integer(12))
        #expect(subscription?["commitment"]?["price"] == .integer(29_880))
        #expect(subscription?["commitment"]?["autoRenewStatus"] == .bool(true))
        // A month later: the second month, billed at the monthly price.
        _ = try await harness.store.setClock(advance: StorePeriod(months: 1), rate: nil)
        try await harness.settleNotifications()
        let renewed = try await harness.subscriber("carol")
        #expect(renewed["subscriptions"]?[stored.id.rawValue]?["commitment"]?["billingPeriodNumber"] == .integer(2))
        _ = try await harness.store.subscriptionVerb(.setAutoRenew(false), transactionID: stored.id.rawValue)
        try await harness.settleNotifications()
        let cancelled = try await harness.subscriber("carol")
        let after = cancelled["subscriptions"]?[stored.id.rawValue]
        #expect(after?["autoRenewStatus"] == .bool(true), "the months left are still billed")
        #expect(after?["commitment"]?["autoRenewStatus"] == .bool(false))
        let (_, events) = try await harness.call("GET", "/v1/subscribers/carol/events")
        let cancellation = events["events"]?.arrayValue?.first { $0["type"] == .string("CANCELLATION") }
        #expect(cancellation?["details"]?["commitment"] == .string("true"), "\(events)")
    }
}
