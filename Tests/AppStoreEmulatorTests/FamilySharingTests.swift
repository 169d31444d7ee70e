import AppStoreEmulator
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

@Suite("Family Sharing in the emulator")
struct FamilySharingTests {
    static let catalogText = """
        {"identifier":"F","version":{"major":2,"minor":0},"settings":{"_timeRate":13},
         "products":[{"productID":"pro","type":"NonConsumable","displayPrice":"4.99","familyShareable":true,
           "internalID":"1","referenceName":"Pro","localizations":[]},
          {"productID":"solo","type":"NonConsumable","displayPrice":"1.99","familyShareable":false,
           "internalID":"2","referenceName":"Solo","localizations":[]}],
         "subscriptionGroups":[{"id":"G1","name":"Plans","localizations":[],"subscriptions":[
          {"productID":"family","type":"RecurringSubscription","displayPrice":"9.99","familyShareable":true,
           "internalID":"4","referenceName":"Family","subscriptionGroupID":"G1","groupNumber":1,
           "recurringSubscriptionPeriod":"P1M","introductoryOffer":null,"adHocOffers":[],"codeOffers":[],"localizations":[]}]}]}
        """

    static func harness() async throws -> AppStoreTests.Harness {
        let directory = try ExternalTool.temporaryDirectory()
        let catalog = try StoreKitConfiguration(data: Array(catalogText.utf8))
        let time = AppStoreTests.FakeTime()
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: AppStoreTests.bundleID)], dataDirectory: directory,
            rate: .monthlyRenewalEveryFiveMinutes, realNow: { time.now })
        store.startScheduler(granularity: .milliseconds(10))
        return AppStoreTests.Harness(store: store, responder: EmulatorRoutes(store).responder(), directory: directory)
    }

    /// The decoded transactions a device is entitled to, by product.
    static func entitlements(_ harness: AppStoreTests.Harness, _ app: String) async throws -> [String: JSONObject] {
        let (_, answer) = try await harness.call("GET", app + "/entitlements")
        var result: [String: JSONObject] = [:]
        for signed in answer["signedTransactions"]?.arrayValue ?? [] {
            let payload = try CompactJWS(try #require(signed.stringValue)).payload
            result[payload["productId"]?.stringValue ?? "?"] = payload
        }
        return result
    }

    @Test("Members get their own FAMILY_SHARED transactions that follow the purchaser's; leaving revokes them")
    func story() async throws {
        let harness = try await Self.harness()
        let sink = try NotificationSink()
        try await NotificationTests.configure(harness, ["sandboxURL": .string(sink.url)])
        let organizerApp = try await harness.device(deviceID: "10111213-1415-4617-9819-1A1B1C1D1E01")
        let memberApp = try await harness.device(deviceID: "10111213-1415-4617-9819-1A1B1C1D1E02")
        let outsiderApp = try await harness.device(deviceID: "10111213-1415-4617-9819-1A1B1C1D1E03")
        let organizer = try #require(try await harness.accountOf(organizerApp))
        let member = try #require(try await harness.accountOf(memberApp))
        let outsider = try #require(try await harness.accountOf(outsiderApp))
        let (_, bought) = try await harness.call("POST", organizerApp + "/payments", ["productId": .string("family")])
        let original = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        #expect(try await Self.entitlements(harness, memberApp).isEmpty)

        // Joining a family shares what the members already have.
        let (created, family) = try await harness.call(
            "POST", "/_emulator/v1/families", ["organizer": .string(organizer), "members": .array([.string(member)])])
        #expect(created == 201, "\(family)")
        let familyID = try #require(family["familyId"]?.stringValue)
        #expect(family["members"] == .array([.string(organizer), .string(member)]))
        let twice = try await harness.call(
            "POST", "/_emulator/v1/families",
            ["organizer": .string(outsider), "members": .array([.string(member)])])
        #expect(twice.0 == 409, "an account is in one family at most: \(twice.1)")
        let (readStatus, read) = try await harness.call("GET", "/_emulator/v1/families/\(familyID)")
        #expect(readStatus == 200 && read == family)

        let shared = try #require(try await Self.entitlements(harness, memberApp)["family"])
        #expect(shared["inAppOwnershipType"] == .string("FAMILY_SHARED"))
        let memberOriginal = try #require(shared["originalTransactionId"]?.stringValue)
        #expect(memberOriginal != original, "a member's access has transaction ids of its own")
        // A member cannot act on the purchaser's subscription.
        let refused = try await harness.call("POST", "/_emulator/v1/transactions/\(memberOriginal)/expire")
        #expect(refused.0 == 400 && "\(refused.1)".contains("FAMILY_SHARED"), "\(refused.1)")

        _ = try await harness.call("POST", organizerApp + "/payments", ["productId": .string("pro")])
        _ = try await harness.call("POST", organizerApp + "/payments", ["productId": .string("solo")])
        let memberHas = try await Self.entitlements(harness, memberApp)
        #expect(memberHas["pro"]?["inAppOwnershipType"] == .string("FAMILY_SHARED"))
        #expect(memberHas["solo"] == nil, "not family-shareable")

        // A price increase asks the purchaser alone (a member cannot consent): one subscription told, not two.
        #expect(try await harness.store.announcePriceIncrease(productID: "family", requiresConsent: false) == 1)

        // A renewal of the purchaser's subscription is a renewal of the member's access.
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let renewed = try #require(try await Self.entitlements(harness, memberApp)["family"])
        #expect(renewed["originalTransactionId"] == .string(memberOriginal))
        #expect(renewed["transactionId"] != shared["transactionId"])
        #expect(renewed["transactionReason"] == .string("RENEWAL"))

        // verifyReceipt shows the member's access with its ownership type.
        let receipt = Data(try await harness.receipt(memberApp)).base64EncodedString()
        let (_, verified) = try await harness.call(
            "POST", "/sandbox/verifyReceipt", ["receipt-data": .string(receipt), "password": .string("any")])
        let latest = verified["latest_receipt_info"]?.arrayValue ?? []
        #expect(!latest.isEmpty && latest.allSatisfy { $0["in_app_ownership_type"] == .string("FAMILY_SHARED") })

        let organizerOnly = try await harness.call(
            "DELETE", "/_emulator/v1/families/\(familyID)/members/\(organizer)")
        #expect(organizerOnly.0 == 400)
        let (removed, after) = try await harness.call("DELETE", "/_emulator/v1/families/\(familyID)/members/\(member)")
        #expect(removed == 200, "\(after)")
        #expect(after["members"] == .array([.string(organizer)]))
        #expect(try await Self.entitlements(harness, memberApp).isEmpty, "leaving ends the member's access")
        #expect(Set(try await Self.entitlements(harness, organizerApp).keys) == ["family", "pro", "solo"])

        // Each notification is for its account's own transaction; the member's end with REVOKE.
        let payloads = try await NotificationTests.ordered(try await sink.payloads(atLeast: 9), harness)
        var byOwnership: [String: [String]] = [:]
        for signed in payloads {
            let payload = try NotificationTests.decode(signed, harness)
            let info = try CompactJWS(try #require(payload["data"]?["signedTransactionInfo"]?.stringValue)).payload
            let type = payload["notificationType"]?.stringValue ?? "?"
            let name = payload["subtype"]?.stringValue.map { "\(type)/\($0)" } ?? type
            byOwnership[info["inAppOwnershipType"]?.stringValue ?? "?", default: []].append(name)
            if type == "REVOKE" {
                #expect(info["revocationDate"] != nil && info["revocationType"] == .string("FAMILY_REVOKE"))
                #expect(info["revocationPercentage"] == nil, "not a refund")
            }
        }
        #expect(
            byOwnership["PURCHASED"] == [
                "SUBSCRIBED/INITIAL_BUY", "ONE_TIME_CHARGE", "ONE_TIME_CHARGE", "PRICE_INCREASE/ACCEPTED", "DID_RENEW",
            ])
        #expect(
            byOwnership["FAMILY_SHARED"] == [
                "SUBSCRIBED/INITIAL_BUY", "ONE_TIME_CHARGE", "DID_RENEW", "REVOKE", "REVOKE",
            ], "no PRICE_INCREASE for a member")
        let state = try await harness.store.subscriptionState(originalTransactionID: memberOriginal)
        #expect(state?.status == .revoked)
    }

    @Test("A refund of the purchase revokes every member's access; bad family requests are refused")
    func refundRevokes() async throws {
        let harness = try await Self.harness()
        let organizerApp = try await harness.device(deviceID: "10111213-1415-4617-9819-1A1B1C1D1E11")
        let memberApp = try await harness.device(deviceID: "10111213-1415-4617-9819-1A1B1C1D1E12")
        let organizer = try #require(try await harness.accountOf(organizerApp))
        let member = try #require(try await harness.accountOf(memberApp))
        for bad: JSONObject in [
            ["members": .array([.string(member)])], ["organizer": .string(organizer), "members": .string(member)],
            ["organizer": .string("nobody")],
            ["organizer": .string(organizer), "members": .array((0..<7).map { .string("A\($0)") })],
        ] {
            let (status, answer) = try await harness.call("POST", "/_emulator/v1/families", bad)
            #expect(status == 400 || status == 404, "\(bad): \(answer)")
        }
        _ = try await harness.call(
            "POST", "/_emulator/v1/families", ["organizer": .string(organizer), "members": .array([.string(member)])])
        let (_, bought) = try await harness.call("POST", organizerApp + "/payments", ["productId": .string("family")])
        let (_, pro) = try await harness.call("POST", organizerApp + "/payments", ["productId": .string("pro")])
        #expect(Set(try await Self.entitlements(harness, memberApp).keys) == ["family", "pro"])
        for transaction in [bought, pro] {
            let id = try #require(transaction["transaction"]?["transactionIdentifier"]?.stringValue)
            let (status, answer) = try await harness.call("POST", "/_emulator/v1/transactions/\(id)/refund")
            #expect(status == 200, "\(answer)")
        }
        #expect(try await Self.entitlements(harness, memberApp).isEmpty)
        #expect(try await Self.entitlements(harness, organizerApp).isEmpty)
    }
}
