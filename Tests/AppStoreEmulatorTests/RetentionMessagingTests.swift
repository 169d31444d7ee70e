import AppStoreEmulator
import AppStoreServerAPI
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

/// Retention Messaging on the emulator: the API through our client, App Review's states, the realtime
/// request a customer on the cancellation page causes (signed, answered within Apple's limit, applied), and
/// the performance test.
@Suite("Retention Messaging on the emulator")
struct RetentionMessagingTests {
    static let catalogText = """
        {"identifier":"R","version":{"major":4,"minor":0},"settings":{"_timeRate":13},"products":[],
         "subscriptionGroups":[{"id":"G1","name":"Plans","localizations":[],"subscriptions":[
          {"productID":"monthly","type":"RecurringSubscription","displayPrice":"2.99","familyShareable":false,
           "internalID":"4","referenceName":"Monthly","subscriptionGroupID":"G1","groupNumber":2,
           "recurringSubscriptionPeriod":"P1M","introductoryOffer":null,
           "adHocOffers":[{"offerID":"STAY","referenceName":"Stay","internalID":"a1","paymentMode":"payAsYouGo",
             "subscriptionPeriod":"P1M","numberOfPeriods":2,"displayPrice":"0.99"}],
           "codeOffers":[],"localizations":[]},
          {"productID":"premium","type":"RecurringSubscription","displayPrice":"5.99","familyShareable":false,
           "internalID":"5","referenceName":"Premium","subscriptionGroupID":"G1","groupNumber":1,
           "recurringSubscriptionPeriod":"P1M","introductoryOffer":null,"adHocOffers":[],"codeOffers":[],
           "localizations":[]},
          {"productID":"lite","type":"RecurringSubscription","displayPrice":"0.99","familyShareable":false,
           "internalID":"6","referenceName":"Lite","subscriptionGroupID":"G1","groupNumber":3,
           "recurringSubscriptionPeriod":"P1M","introductoryOffer":null,"adHocOffers":[],"codeOffers":[],
           "localizations":[]},
          {"productID":"annual","type":"RecurringSubscription","displayPrice":"29.99","familyShareable":false,
           "internalID":"7","referenceName":"Annual","subscriptionGroupID":"G1","groupNumber":2,
           "recurringSubscriptionPeriod":"P1Y","introductoryOffer":null,"adHocOffers":[],"codeOffers":[],
           "billingPlans":[{"billingPlanType":"BILLED_UPFRONT","displayPrice":"29.99","isEnabled":true},
             {"billingPlanType":"MONTHLY","displayPrice":"2.99","commitmentDisplayPrice":"35.88","isEnabled":true}],
           "localizations":[]}]}]}
        """

    /// What the in-test realtime URL answers, and the requests it verified.
    final class Receiver: Sendable {
        final class State: Sendable {
            let answer = Mutex<JSONObject>([:])
            let delay = Mutex<Duration>(.zero)
            let verified = Mutex<[RealtimeRequest]>([])
            let failures = Mutex<[String]>([])
        }

        let state = State()
        let server: HTTPServer

        init(root: Certificate) throws {
            let verifier = try SignedDataVerifier(
                SignedDataVerifier.Configuration(trustedRoots: [root], environment: "Sandbox"))
            let production = try SignedDataVerifier(
                SignedDataVerifier.Configuration(
                    trustedRoots: [root], appAppleID: 1_234_567_890, environment: "Production"))
            let state = self.state
            var router = Router()
            router.add(
                "POST", "/retention/{environment}",
                inline: { request, context in
                    let which = (try? context.parameter("environment")) == "production" ? production : verifier
                    guard let token = (try? JSONParser.parse(request.body))?["signedPayload"]?.stringValue else {
                        state.failures.withLock { $0.append("no signedPayload") }
                        return HTTPResponse(status: 400)
                    }
                    let result = which.verify(token, as: .realtimeRequest, now: Date())
                    guard result.isOK, let payload = result.payload else {
                        state.failures.withLock { $0.append("\(result.status): \(result.reason ?? "")") }
                        return HTTPResponse(status: 400)
                    }
                    state.verified.withLock { $0.append(RealtimeRequest(json: payload)) }
                    let wait = state.delay.withLock { $0 }
                    if wait > .zero { Thread.sleep(forTimeInterval: Double(wait.components.seconds) + 0.2) }
                    return .json(.object(state.answer.withLock { $0 }))
                })
            server = try HTTPServer(port: 0, responder: router.freeze())
        }

        func url(_ environment: String = "sandbox") -> String {
            "http://127.0.0.1:\(server.port)/retention/\(environment)"
        }
    }

    struct Fixture {
        let harness: AppStoreTests.Harness
        let api: HTTPServer
        let key: PrivateKey
        let minted: (keyID: String, issuerID: String, privateKey: String)
        let receiver: Receiver
        let offerKey: PrivateKey

        func client(production: Bool = false) throws -> AppStoreServerAPIClient {
            AppStoreServerAPIClient(
                key: key, keyID: minted.keyID, issuerID: minted.issuerID, bundleID: AppStoreTests.bundleID,
                environment: .custom("http://127.0.0.1:\(api.port)" + (production ? "" : "/sandbox")))
        }

        func stop() {
            api.stop()
            receiver.server.stop()
        }
    }

    static func fixture() async throws -> Fixture {
        let offerKey = try PrivateKey.generateP256()
        let directory = try ExternalTool.temporaryDirectory()
        var app = AppConfiguration(bundleID: AppStoreTests.bundleID)
        app.offerKeys = ["KEY1": try offerKey.pemPKCS8()]
        let store = try await AppStore(
            catalog: [try StoreKitConfiguration(data: Array(catalogText.utf8))], apps: [app],
            dataDirectory: directory, rate: .monthlyRenewalEveryFiveMinutes,
            // Generous: a loaded test machine answers slower than Apple's 700 ms; the slow receiver waits longer.
            realtimeTimeout: .seconds(3), realNow: { Date() })
        let harness = AppStoreTests.Harness(
            store: store, responder: EmulatorRoutes(store).responder(), directory: directory)
        let api = try HTTPServer(port: 0, responder: harness.responder)
        let minted = try await store.serverAPI.mintAPIKey(bundleID: AppStoreTests.bundleID)
        return Fixture(
            harness: harness, api: api, key: try PrivateKey(pem: minted.privateKey), minted: minted,
            receiver: try Receiver(root: store.pki.signedData.root), offerKey: offerKey)
    }

    /// A PNG's chunk layout (signature, IHDR, IDAT, IEND) for an image of this size; colour type 2 is opaque
    /// RGB, 6 has alpha. The emulator reads the layout, not the pixels.
    static func png(_ width: Int, _ height: Int, colorType: UInt8 = 2) -> [UInt8] {
        func be(_ value: Int) -> [UInt8] { [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: value >> $0) } }
        func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
            be(data.count) + Array(type.utf8) + data + [0, 0, 0, 0]
        }
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
            + chunk("IHDR", be(width) + be(height) + [8, colorType, 0, 0, 0]) + chunk("IDAT", [0x78, 0x9C, 0, 0])
            + chunk("IEND", [])
    }

    static func code(_ body: () async throws -> Void) async -> Int64? {
        do {
            try await body()
            return nil
        } catch let error as AppStoreServerAPIError {
            return error.code?.rawValue ?? Int64(error.status ?? 0)
        } catch {
            return -1
        }
    }

    @Test("Images and messages follow Apple's limits; production uploads wait for App Review, sandbox ones do not")
    func contentRules() async throws {
        let fixture = try await Self.fixture()
        defer { fixture.stop() }
        let client = try fixture.client(production: true)
        let (full, bullet, message) = (UUID(), UUID(), UUID())
        try await client.uploadImage(full, png: Self.png(3840, 400))
        try await client.uploadImage(bullet, png: Self.png(1024, 1024), size: "BULLET_POINT")
        #expect(await Self.code { try await client.uploadImage(full, png: Self.png(3840, 400)) } == 4_090_000)
        #expect(await Self.code { try await client.uploadImage(UUID(), png: Array("GIF89a".utf8)) } == 4_000_161)
        #expect(
            await Self.code { try await client.uploadImage(UUID(), png: Self.png(3840, 400, colorType: 6)) }
                == 4_000_161)
        #expect(await Self.code { try await client.uploadImage(UUID(), png: Self.png(1000, 400)) } == 4_000_161)
        let images = try await client.imageList().images
        #expect(images.map(\.state) == ["PENDING", "PENDING"])
        #expect(Set(images.compactMap(\.size)) == ["FULL_SIZE", "BULLET_POINT"])

        typealias Request = RetentionMessageRequest
        let image = Request.Image(imageIdentifier: full, altText: "A calm lake")
        let point = Request.BulletPoint(text: "All your notes", image: .init(imageIdentifier: bullet, altText: "Notes"))
        let cases: [(Request, Int64)] = [
            (Request(header: String(repeating: "h", count: 67), body: "b"), 4_000_162),
            (Request(header: "h", body: String(repeating: "b", count: 145)), 4_000_163),
            (Request(header: "h", body: "b", headerPosition: "ABOVE_IMAGE"), 4_000_224),
            (Request(header: "h", body: "b", bulletPoints: Array(repeating: point, count: 6)), 4_000_218),
            (
                Request(
                    header: "h", body: "b",
                    bulletPoints: [.init(text: String(repeating: "t", count: 67), image: point.image)]), 4_000_219
            ),
            (
                Request(
                    header: "h", body: "b",
                    image: .init(imageIdentifier: full, altText: String(repeating: "a", count: 151))), 4_000_175
            ),
            (Request(header: "h", body: "b", image: .init(imageIdentifier: bullet, altText: "wrong size")), 4_000_216),
            (Request(header: "h", body: "b", image: .init(imageIdentifier: UUID(), altText: "missing")), 4_040_014),
        ]
        for (request, expected) in cases {
            #expect(await Self.code { try await client.uploadMessage(UUID(), request) } == expected, "\(request)")
        }
        try await client.uploadMessage(
            message,
            Request(header: "Before you go", body: "Half price for two months", image: image, bulletPoints: [point]))
        #expect(
            await Self.code { try await client.uploadMessage(message, Request(header: "h", body: "b")) } == 4_090_001)
        #expect(try await client.messageList().messages.map(\.state) == ["PENDING"])
        // Not approved yet: it cannot be a default; App Review approves it (and its images).
        #expect(
            await Self.code {
                try await client.configureDefaultMessage(
                    productID: "monthly", locale: "en-US", messageIdentifier: message)
            } == 4_030_017)
        let review = "/_emulator/v1/apps/\(AppStoreTests.bundleID)/retention"
        for (kind, id) in [("messages", message), ("images", full), ("images", bullet)] {
            let (status, answer) = try await fixture.harness.call(
                "POST", "\(review)/\(kind)/\(id.uuidString)/review", ["approved": .bool(true)])
            #expect(status == 200 && answer["state"] == .string("APPROVED"), "\(answer)")
        }
        try await client.configureDefaultMessage(productID: "monthly", locale: "en-US", messageIdentifier: message)
        #expect(
            try await client.defaultMessage(productID: "monthly", locale: "en-US") == message.uuidString.lowercased())
        #expect(
            await Self.code { _ = try await client.defaultMessage(productID: "monthly", locale: "fr-FR") } == 4_040_020)
        // Deleting a default that is not there is no error (Apple's is idempotent).
        try await client.deleteDefaultMessage(productID: "monthly", locale: "fr-FR")
        #expect(
            await Self.code { try await client.deleteDefaultMessage(productID: "no.such.product", locale: "fr-FR") }
                == 4_000_023)
        #expect(
            await Self.code { _ = try await client.defaultMessage(productID: "no.such.product", locale: "en-US") }
                == 4_000_023)
        #expect(await Self.code { _ = try await client.defaultMessage(productID: "monthly", locale: "x") } == 4_000_164)
        #expect(await Self.code { try await client.deleteImage(bullet) } == 4_030_019)
        #expect(await Self.code { try await client.deleteMessage(UUID()) } == 4_040_015)
        // Production takes a realtime URL only after a passing performance test; any https URL, or http on loopback.
        #expect(
            await Self.code { try await client.configureRealtimeURL(fixture.receiver.url("production")) } == 4_030_026)
        #expect(await Self.code { try await client.configureRealtimeURL("http://example.com/retention") } == 4_000_215)
        #expect(await Self.code { _ = try await client.realtimeURL() } == 4_040_021)
        // The sandbox has its own content, approved at once.
        let sandbox = try fixture.client()
        try await sandbox.uploadMessage(UUID(), Request(header: "Sandbox", body: "Approved at once"))
        #expect(try await sandbox.messageList().messages.map(\.state) == ["APPROVED"])
        try await client.deleteMessage(message)
        try await client.deleteImage(bullet)
        #expect(try await client.imageList().images.count == 1)
    }

    /// A sandbox customer who bought `monthly`: the original transaction id.
    static func subscriber(_ fixture: Fixture) async throws -> String {
        let app = try await fixture.harness.device(deviceID: UUID().uuidString)
        let (status, answer) = try await fixture.harness.call(
            "POST", app + "/payments", ["productId": .string("monthly")])
        #expect(status == 201)
        return try #require(answer["transaction"]?["transactionIdentifier"]?.stringValue)
    }

    @Test(
        "A customer on the cancellation page: Apple's signed request, the answer applied, the default message otherwise"
    )
    func realtimeRequests() async throws {
        let fixture = try await Self.fixture()
        defer { fixture.stop() }
        let client = try fixture.client()
        let (shown, fallback) = (UUID(), UUID())
        try await client.uploadMessage(shown, .init(header: "Stay", body: "Here is a better deal"))
        try await client.uploadMessage(fallback, .init(header: "Sorry to see you go", body: "Come back any time"))
        try await client.configureDefaultMessage(productID: "monthly", locale: "en-US", messageIdentifier: fallback)
        try await client.configureRealtimeURL(fixture.receiver.url())
        let original = try await Self.subscriber(fixture)
        func request(_ body: JSONObject = [:]) async throws -> JSONValue {
            let (status, answer) = try await fixture.harness.call(
                "POST", "/_emulator/v1/transactions/\(original)/retention-request", body)
            #expect(status == 200, "\(answer)")
            return answer
        }
        let id = shown.uuidString.lowercased()

        // A message: shown, nothing else changes; the request verified as Apple's, within the limit.
        fixture.receiver.state.answer.withLock { $0 = ["message": .object(["messageIdentifier": .string(id)])] }
        let first = try await request(["locale": .string("en-US")])
        #expect(first["outcome"] == .string("message") && first["shown"]?["messageIdentifier"] == .string(id))
        #expect(first["result"] == .string("SUCCESS") && first["withinLimit"] == .bool(true))
        let sent = try #require(fixture.receiver.state.verified.withLock { $0.last })
        #expect(sent.originalTransactionID == original && sent.productID == "monthly" && sent.userLocale == "en-US")
        #expect(sent.appAppleID == 1_234_567_890 && sent.environment?.known == .sandbox)
        #expect(sent.requestIdentifier?.uuidString.lowercased() == first["requestIdentifier"]?.stringValue)

        // An answer naming a message that does not exist, a slow answer, or none: the default message.
        fixture.receiver.state.answer.withLock {
            $0 = ["message": .object(["messageIdentifier": .string(UUID().uuidString)])]
        }
        let unknown = try await request()
        #expect(unknown["outcome"] == .string("defaultMessage"), "\(unknown)")
        #expect(unknown["shown"]?["messageIdentifier"] == .string(fallback.uuidString.lowercased()))
        fixture.receiver.state.answer.withLock {
            $0 = [
                "message": .object(["messageIdentifier": .string(id)]),
                "alternateProduct": .object(["messageIdentifier": .string(id), "productId": .string("lite")]),
            ]
        }
        #expect(try await request()["outcome"] == .string("defaultMessage"), "two options are not an answer")
        fixture.receiver.state.answer.withLock { $0 = ["message": .object(["messageIdentifier": .string(id)])] }
        fixture.receiver.state.delay.withLock { $0 = .seconds(4) }
        let slow = try await request()
        #expect(slow["result"] == .string("TIMED_OUT") && slow["outcome"] == .string("defaultMessage"), "\(slow)")
        fixture.receiver.state.delay.withLock { $0 = .zero }
        let french = try await request(["locale": .string("fr-FR")])
        #expect(french["outcome"] == .string("message"))

        // Apple's requirements of a promotional offer answer: V2's JWS names the original transaction; V1's
        // object names its product and is signed with its own app account token (empty when it has none).
        func answer(_ offer: JSONObject) {
            fixture.receiver.state.answer.withLock {
                var object = offer
                object["messageIdentifier"] = .string(id)
                $0 = ["promotionalOffer": .object(object)]
            }
        }
        let unnamed = try OfferSignature.promotionalOfferV2(
            keyID: "KEY1", issuerID: "issuer", bundleID: AppStoreTests.bundleID, productID: "monthly",
            offerID: "STAY", transactionID: nil, nonce: UUID(), issuedAt: Date(), key: fixture.offerKey)
        answer(["promotionalOfferSignatureV2": .string(unnamed)])
        let noTransaction = try await request(["accept": .bool(false)])
        #expect(noTransaction["outcome"] == .string("defaultMessage"), "\(noTransaction)")
        let token = UUID().uuidString.lowercased()
        func v1(productID: String?, token: String?) throws -> JSONObject {
            let nonce = UUID()
            let timestamp = Int64(Date().timeIntervalSince1970 * 1_000)
            var object: JSONObject = [
                "encodedSignature": .string(
                    try OfferSignature.promotionalOfferV1(
                        bundleID: AppStoreTests.bundleID, keyID: "KEY1", productID: "monthly", offerID: "STAY",
                        appAccountToken: token ?? "", nonce: nonce, timestamp: timestamp, key: fixture.offerKey)),
                "keyId": .string("KEY1"), "nonce": .string(nonce.uuidString.lowercased()),
                "timestamp": .integer(timestamp), "offerIdentifier": .string("STAY"),
            ]
            if let productID { object["productId"] = .string(productID) }
            if let token { object["appAccountToken"] = .string(token) }
            return ["promotionalOfferSignatureV1": .object(object)]
        }
        answer(try v1(productID: nil, token: nil))
        let noProduct = try await request(["accept": .bool(false)])
        #expect(noProduct["outcome"] == .string("defaultMessage"), "\(noProduct)")
        answer(try v1(productID: "monthly", token: token))
        let withToken = try await request(["accept": .bool(false)])
        #expect(withToken["outcome"] == .string("promotionalOffer"), "\(withToken)")
        // A null appAccountToken is as none (signed with an empty one).
        var nulled = try v1(productID: "monthly", token: nil)
        var inner = try #require(nulled["promotionalOfferSignatureV1"]?.objectValue)
        inner["appAccountToken"] = .null
        nulled["promotionalOfferSignatureV1"] = .object(inner)
        answer(nulled)
        let nullToken = try await request(["accept": .bool(false)])
        #expect(nullToken["outcome"] == .string("promotionalOffer"), "\(nullToken)")

        // A promotional offer (V2 signature): redeemed as a retention offer (offerType 5) from the next renewal.
        let offer = try OfferSignature.promotionalOfferV2(
            keyID: "KEY1", issuerID: "issuer", bundleID: AppStoreTests.bundleID, productID: "monthly",
            offerID: "STAY", transactionID: original, nonce: UUID(), issuedAt: Date(), key: fixture.offerKey)
        fixture.receiver.state.answer.withLock {
            $0 = [
                "promotionalOffer": .object([
                    "messageIdentifier": .string(id), "promotionalOfferSignatureV2": .string(offer),
                ])
            ]
        }
        let redeemed = try await request()
        #expect(
            redeemed["outcome"] == .string("promotionalOffer") && redeemed["accepted"] == .bool(true), "\(redeemed)")
        #expect(redeemed["shown"]?["offerIdentifier"] == .string("STAY"))
        _ = try await fixture.harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let (_, state) = try await fixture.harness.call("GET", "/_emulator/v1/transactions/\(original)")
        let latest = try #require(state["subscription"]?["latestTransactionId"]?.stringValue)
        let renewal = try await client.transactionInfo(latest)
        let payload = try #require(renewal.signedTransactionInfo.flatMap(AppStoreServerAPIClient.decodedPayload))
        #expect(payload["offerType"] == .integer(5) && payload["offerIdentifier"] == .string("STAY"), "\(payload)")
        #expect(payload["price"] == .integer(990))

        // An alternate product, accepted: the customer switches (premium is a higher level: at once).
        fixture.receiver.state.answer.withLock {
            $0 = ["alternateProduct": .object(["messageIdentifier": .string(id), "productId": .string("premium")])]
        }
        let switched = try await request()
        #expect(switched["outcome"] == .string("alternateProduct"))
        #expect(switched["subscription"]?["productId"] == .string("premium"), "\(switched)")
        // Shown but not taken: nothing changes.
        fixture.receiver.state.answer.withLock {
            $0 = ["alternateProduct": .object(["messageIdentifier": .string(id), "productId": .string("lite")])]
        }
        let declined = try await request(["accept": .bool(false)])
        #expect(
            declined["accepted"] == .bool(false)
                && declined["subscription"]?["autoRenewProductId"] == .string("premium"))

        let (_, history) = try await fixture.harness.call(
            "GET", "/_emulator/v1/transactions/\(original)/retention-requests")
        let outcomes = history["requests"]?.arrayValue?.compactMap { $0["outcome"]?.stringValue }
        #expect(
            outcomes == [
                "message", "defaultMessage", "defaultMessage", "defaultMessage", "message", "defaultMessage",
                "defaultMessage", "promotionalOffer", "promotionalOffer", "promotionalOffer", "alternateProduct",
                "alternateProduct",
            ])
        #expect(fixture.receiver.state.failures.withLock { $0 }.isEmpty)
    }

    @Test("A switch-plan answer (the same product, billingPlanType MONTHLY) starts a commitment at the next renewal")
    func switchPlan() async throws {
        let fixture = try await Self.fixture()
        defer { fixture.stop() }
        let client = try fixture.client()
        let message = UUID()
        try await client.uploadMessage(message, .init(header: "Pay monthly", body: "Keep your year, pay each month"))
        try await client.configureRealtimeURL(fixture.receiver.url())
        let app = try await fixture.harness.device(deviceID: UUID().uuidString)
        let (status, bought) = try await fixture.harness.call(
            "POST", app + "/payments", ["productId": .string("annual")])
        #expect(status == 201)
        let original = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        fixture.receiver.state.answer.withLock {
            $0 = [
                "alternateProduct": .object([
                    "messageIdentifier": .string(message.uuidString.lowercased()), "productId": .string("annual"),
                    "billingPlanType": .string("MONTHLY"),
                ])
            ]
        }
        let (_, answer) = try await fixture.harness.call(
            "POST", "/_emulator/v1/transactions/\(original)/retention-request", [:])
        #expect(answer["outcome"] == .string("alternateProduct") && answer["accepted"] == .bool(true), "\(answer)")
        #expect(answer["subscription"]?["renewalBillingPlanType"] == .string("MONTHLY"))
        _ = try await fixture.harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1Y")])
        let (_, state) = try await fixture.harness.call("GET", "/_emulator/v1/transactions/\(original)")
        #expect(state["subscription"]?["billingPlanType"] == .string("MONTHLY"), "\(state)")
        #expect(state["subscription"]?["commitment"]?["billingPeriodNumber"] != nil)
        // MONTHLY for a product without the plan is not an answer: nothing is taken.
        fixture.receiver.state.answer.withLock {
            $0 = [
                "alternateProduct": .object([
                    "messageIdentifier": .string(message.uuidString.lowercased()), "productId": .string("monthly"),
                    "billingPlanType": .string("MONTHLY"),
                ])
            ]
        }
        let (_, refused) = try await fixture.harness.call(
            "POST", "/_emulator/v1/transactions/\(original)/retention-request", [:])
        #expect(refused["accepted"] == .bool(false) && refused["outcome"] != .string("alternateProduct"), "\(refused)")
    }

    @Test("Apple's limit is the default: the realtime request waits 700 ms, the performance test's threshold")
    func appleLimit() async throws {
        let store = try await AppStore(
            catalog: [try StoreKitConfiguration(data: Array(Self.catalogText.utf8))],
            apps: [AppConfiguration(bundleID: AppStoreTests.bundleID)],
            dataDirectory: try ExternalTool.temporaryDirectory())
        #expect(store.realtimeTimeout == .milliseconds(700))
    }

    @Test("The performance test calls the sandbox URL and passes a fast receiver; then production takes its URL")
    func performanceTest() async throws {
        let fixture = try await Self.fixture()
        defer { fixture.stop() }
        let sandbox = try fixture.client()
        let production = try fixture.client(production: true)
        let message = UUID()
        try await sandbox.uploadMessage(message, .init(header: "Stay", body: "Please"))
        fixture.receiver.state.answer.withLock {
            $0 = ["message": .object(["messageIdentifier": .string(message.uuidString.lowercased())])]
        }
        let original = try await Self.subscriber(fixture)
        #expect(
            await Self.code { _ = try await sandbox.initiatePerformanceTest(originalTransactionID: original) }
                == 4_040_021, "no realtime URL yet")
        try await sandbox.configureRealtimeURL(fixture.receiver.url())
        #expect(
            await Self.code { _ = try await sandbox.initiatePerformanceTest(originalTransactionID: "123") } == 4_000_211
        )
        let started = try await sandbox.initiatePerformanceTest(originalTransactionID: original)
        let requestID = try #require(started.requestID)
        #expect(started.config["responseTimeThreshold"] == .integer(3_000), "the store's realtime timeout")
        var result = try await sandbox.performanceTestResult(requestID)
        let deadline = ContinuousClock.now + .seconds(60)
        while result.result == "PENDING", ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            result = try await sandbox.performanceTestResult(requestID)
        }
        #expect(result.result == "PASS" && result.successRate == 100, "\(result.json)")
        let count = fixture.receiver.state.verified.withLock { $0.count }
        #expect(count == Int(started.config["totalRequests"]?.int64Value ?? 0))
        #expect(await Self.code { _ = try await sandbox.performanceTestResult("not-a-uuid") } == 4_000_212)
        #expect(await Self.code { _ = try await sandbox.performanceTestResult(UUID().uuidString) } == 4_040_018)
        try await production.configureRealtimeURL(fixture.receiver.url("production"))
        #expect(try await production.realtimeURL() == fixture.receiver.url("production"))
        try await production.deleteRealtimeURL()
        #expect(await Self.code { try await production.deleteRealtimeURL() } == 4_040_021)
    }
}
