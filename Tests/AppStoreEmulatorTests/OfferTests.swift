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
import Testing

@Suite("Offers in the emulator: introductory, promotional (V1 and V2 signatures), offer codes, win-back")
struct OfferTests {
    static let catalogText = """
        {"identifier":"O","version":{"major":4,"minor":0},"settings":{"_timeRate":13},"products":[],
         "subscriptionGroups":[{"id":"G1","name":"Plans","localizations":[],"subscriptions":[
          {"productID":"monthly","type":"RecurringSubscription","displayPrice":"2.99","familyShareable":false,
           "internalID":"4","referenceName":"Monthly","subscriptionGroupID":"G1","groupNumber":2,
           "recurringSubscriptionPeriod":"P1M",
           "introductoryOffer":{"internalID":"i1","paymentMode":"payAsYouGo","subscriptionPeriod":"P1M",
             "numberOfPeriods":2,"displayPrice":"0.99"},
           "adHocOffers":[{"offerID":"COMEBACK","referenceName":"Come back","internalID":"a1","paymentMode":"payUpFront",
             "subscriptionPeriod":"P3M","displayPrice":"4.99"}],
           "codeOffers":[{"internalID":"c1","referenceName":"NEWCOMER","paymentMode":"free","subscriptionPeriod":"P1W",
             "numberOfPeriods":1,"eligibility":["new"],"isStackable":false},
            {"internalID":"c2","referenceName":"LOYAL","paymentMode":"payAsYouGo","subscriptionPeriod":"P1M",
             "numberOfPeriods":3,"displayPrice":"1.99","eligibility":["existing","expired"],"isStackable":true}],
           "winbackOffers":[{"offerID":"MISSYOU","referenceName":"Miss you","internalID":"w1","paymentMode":"free",
             "subscriptionPeriod":"P1M","numberOfPeriods":1}],
           "localizations":[]}]}]}
        """

    struct Fixture {
        let harness: AppStoreTests.Harness
        let key: PrivateKey
        let sink: NotificationSink
    }

    static func fixture() async throws -> Fixture {
        let key = try PrivateKey.generateP256()
        let directory = try ExternalTool.temporaryDirectory()
        let catalog = try StoreKitConfiguration(data: Array(catalogText.utf8))
        var app = AppConfiguration(bundleID: AppStoreTests.bundleID)
        app.offerKeys = ["KEY1": try key.pemPKCS8()]
        let store = try await AppStore(
            catalog: [catalog], apps: [app], dataDirectory: directory, rate: .monthlyRenewalEveryFiveMinutes,
            realNow: { Date() })
        store.startScheduler(granularity: .milliseconds(10))
        let harness = AppStoreTests.Harness(
            store: store, responder: EmulatorRoutes(store).responder(), directory: directory)
        let sink = try NotificationSink()
        try await NotificationTests.configure(harness, ["sandboxURL": .string(sink.url)])
        return Fixture(harness: harness, key: key, sink: sink)
    }

    static func buy(_ harness: AppStoreTests.Harness, _ app: String, _ extra: JSONObject = [:]) async throws -> (
        Int, JSONValue, JSONObject
    ) {
        var body: JSONObject = ["productId": .string("monthly")]
        for (key, value) in extra.members { body[key] = value }
        let (status, answer) = try await harness.call("POST", app + "/payments", body)
        let payload = try answer["jwsRepresentation"]?.stringValue.map { try CompactJWS($0).payload } ?? [:]
        return (status, answer, payload)
    }

    static func v1Offer(_ key: PrivateKey, nonce: UUID = UUID(), offerID: String = "COMEBACK", keyID: String = "KEY1")
        throws -> JSONValue
    {
        let timestamp = Int64(Date().timeIntervalSince1970 * 1000)
        let signature = try OfferSignature.promotionalOfferV1(
            bundleID: AppStoreTests.bundleID, keyID: keyID, productID: "monthly", offerID: offerID,
            appAccountToken: "", nonce: nonce, timestamp: timestamp, key: key)
        return .object([
            "offerId": .string(offerID), "keyId": .string(keyID), "nonce": .string(nonce.uuidString.lowercased()),
            "timestamp": .integer(timestamp), "signature": .string(signature),
        ])
    }

    @Test("The introductory offer goes to new subscribers only; pay as you go lasts its periods at its price")
    func introductory() async throws {
        let fixture = try await Self.fixture()
        let harness = fixture.harness
        let app = try await harness.device()
        let (status, bought, first) = try await Self.buy(harness, app)
        #expect(status == 201, "\(bought)")
        #expect(first["offerType"] == .integer(1))
        #expect(first["offerDiscountType"] == .string("PAY_AS_YOU_GO"))
        #expect(first["price"] == .integer(990))
        #expect(first["offerPeriod"] == .string("P2M"), "Apple's offerPeriod is the whole offer: two months")
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let receipt = Data(try await harness.receipt(app)).base64EncodedString()
        let (_, verified) = try await harness.call(
            "POST", "/sandbox/verifyReceipt", ["receipt-data": .string(receipt), "password": .string("x")])
        let periods = (verified["latest_receipt_info"]?.arrayValue ?? []).reversed()
        #expect(
            periods.map { $0["is_in_intro_offer_period"]?.stringValue } == ["true", "true", "false"], "\(verified)")
        // Ended and bought again: no second introductory offer.
        let id = try #require(first["transactionId"]?.stringValue)
        _ = try await harness.call("POST", "/_emulator/v1/transactions/\(id)/expire")
        let (_, _, again) = try await Self.buy(harness, app)
        #expect(again["offerType"] == nil)
        #expect(again["price"] == .integer(2_990))
    }

    @Test("Promotional offers: V1 signatures and V2 JWS checked against the app's key, nonce used once")
    func promotional() async throws {
        let fixture = try await Self.fixture()
        let harness = fixture.harness
        let app = try await harness.device()
        _ = try await Self.buy(harness, app)
        let nonce = UUID()
        let (status, answer, _) = try await Self.buy(
            harness, app, ["offer": try Self.v1Offer(fixture.key, nonce: nonce)])
        #expect(status == 201, "\(answer)")
        // A subscriber's offer for the same product applies from the next renewal.
        let state = try await harness.store.subscriptionState(
            originalTransactionID: try #require(answer["transaction"]?["transactionIdentifier"]?.stringValue))
        #expect(state?.offer?.identifier == "COMEBACK" && state?.offerPeriodsLeft == 1)
        let reused = try await Self.buy(harness, app, ["offer": try Self.v1Offer(fixture.key, nonce: nonce)])
        #expect(reused.0 == 400 && reused.1["error"]?["code"] == .string("invalidSignature"), "\(reused.1)")
        let other = try PrivateKey.generateP256()
        let forged = try await Self.buy(harness, app, ["offer": try Self.v1Offer(other)])
        #expect(forged.1["error"]?["code"] == .string("invalidSignature"))
        let unknownKey = try await Self.buy(harness, app, ["offer": try Self.v1Offer(fixture.key, keyID: "NOPE")])
        #expect(unknownKey.1["error"]?["code"] == .string("invalidSignature"))
        let unknownOffer = try await Self.buy(harness, app, ["offer": try Self.v1Offer(fixture.key, offerID: "NOPE")])
        #expect(unknownOffer.1["error"]?["code"] == .string("invalidOfferIdentifier"))
        let missing = try await Self.buy(harness, app, ["offer": .object(["offerId": .string("COMEBACK")])])
        #expect(missing.1["error"]?["code"] == .string("missingOfferParams"))

        // V2: a new subscriber with a JWS made as Apple's PromotionalOfferV2SignatureCreator makes it.
        let second = try await harness.device(deviceID: "10111213-1415-4617-9819-1A1B1C1D1E77")
        let jws = try OfferSignature.promotionalOfferV2(
            keyID: "KEY1", issuerID: "issuer", bundleID: AppStoreTests.bundleID, productID: "monthly",
            offerID: "COMEBACK", transactionID: nil, nonce: UUID(), issuedAt: Date(), key: fixture.key)
        let (v2Status, v2Answer, v2) = try await Self.buy(harness, second, ["offer": .object(["jws": .string(jws)])])
        #expect(v2Status == 201, "\(v2Answer)")
        #expect(v2["offerType"] == .integer(2) && v2["offerIdentifier"] == .string("COMEBACK"))
        #expect(v2["offerDiscountType"] == .string("PAY_UP_FRONT") && v2["price"] == .integer(4_990))
        let twice = try await Self.buy(harness, second, ["offer": .object(["jws": .string(jws)])])
        #expect(twice.1["error"]?["code"] == .string("invalidSignature"), "the nonce was used")
        // The renewal info of the first subscriber names the offer its next renewal is made with.
        let payloads = try await fixture.sink.payloads(atLeast: 3)
        let redeemed = try payloads.map { try NotificationTests.decode($0, harness) }.first {
            $0["notificationType"] == .string("OFFER_REDEEMED")
        }
        #expect(redeemed?["data"]?["renewalInfo"]?["offerIdentifier"] == .string("COMEBACK"))
        #expect(redeemed?["data"]?["renewalInfo"]?["renewalPrice"] == .integer(4_990))
    }

    @Test("Offer codes follow their eligibility; win-back offers are for lapsed subscribers only")
    func codesAndWinBack() async throws {
        let fixture = try await Self.fixture()
        let harness = fixture.harness
        let app = try await harness.device()
        let (_, _, code) = try await Self.buy(harness, app, ["offerCode": .string("newcomer")])
        #expect(code["offerType"] == .integer(3) && code["offerIdentifier"] == .string("NEWCOMER"))
        #expect(code["offerDiscountType"] == .string("FREE_TRIAL") && code["price"] == .integer(0))
        let notNew = try await Self.buy(harness, app, ["offerCode": .string("NEWCOMER")])
        #expect(notNew.1["error"]?["code"] == .string("ineligibleForOffer"), "\(notNew.1)")
        let active = try await Self.buy(harness, app, ["winBackOfferId": .string("MISSYOU")])
        #expect(active.1["error"]?["code"] == .string("ineligibleForOffer"))
        let both = try await Self.buy(harness, app, ["offerCode": .string("LOYAL"), "winBackOfferId": .string("X")])
        #expect(both.0 == 400)
        let loyal = try await Self.buy(harness, app, ["offerCode": .string("LOYAL")])
        #expect(loyal.0 == 201, "an existing subscriber may redeem LOYAL: \(loyal.1)")
        // verifyReceipt names the code redeemed for the period, and the one the next renewal is made with.
        let receipt = Data(try await harness.receipt(app)).base64EncodedString()
        let (_, verified) = try await harness.call(
            "POST", "/sandbox/verifyReceipt", ["receipt-data": .string(receipt), "password": .string("any")])
        let redeemed = verified["latest_receipt_info"]?.arrayValue?.first {
            $0["transaction_id"] == code["transactionId"]
        }
        #expect(redeemed?["offer_code_ref_name"] == .string("NEWCOMER"), "\(verified)")
        #expect(verified["pending_renewal_info"]?.arrayValue?.first?["offer_code_ref_name"] == .string("LOYAL"))

        let id = try #require(code["transactionId"]?.stringValue)
        _ = try await harness.call("POST", "/_emulator/v1/transactions/\(id)/expire")
        let (status, answer, back) = try await Self.buy(harness, app, ["winBackOfferId": .string("MISSYOU")])
        #expect(status == 201, "\(answer)")
        #expect(back["offerType"] == .integer(4) && back["offerIdentifier"] == .string("MISSYOU"))
        let payloads = try await NotificationTests.ordered(try await fixture.sink.payloads(atLeast: 4), harness)
        #expect(
            try NotificationTests.names(payloads, harness) == [
                "SUBSCRIBED/INITIAL_BUY", "OFFER_REDEEMED", "EXPIRED/VOLUNTARY", "SUBSCRIBED/RESUBSCRIBE",
            ])
        // Renewal info names the win-back offers an ended subscription may redeem, and none while it is live.
        let expired = try NotificationTests.decode(payloads[2], harness)
        #expect(expired["data"]?["renewalInfo"]?["eligibleWinBackOfferIds"] == .array([.string("MISSYOU")]))
        let live = try NotificationTests.decode(payloads[0], harness)
        #expect(live["data"]?["renewalInfo"]?.objectValue?["eligibleWinBackOfferIds"] == nil)
    }
}
