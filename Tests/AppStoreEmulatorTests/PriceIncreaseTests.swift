import AppStoreEmulator
import AppStoreSignedData
import Foundation
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

@Suite("Price increases with a new price")
struct PriceIncreaseTests {
    /// The payload of a purchase or renewal answer's signed transaction.
    static func signed(_ answer: JSONValue) throws -> JSONObject {
        try CompactJWS(try #require(answer["jwsRepresentation"]?.stringValue)).payload
    }

    @Test("A raised price is the renewal price the subscriber is told, what the renewal charges, and new buyers pay")
    func raisedPrice() async throws {
        let harness = try await NotificationTests.harness()
        let sink = try NotificationSink()
        try await NotificationTests.configure(harness, ["sandboxURL": .string(sink.url)])
        let app = try await harness.device()
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        #expect(try Self.signed(bought)["price"] == .integer(2_990))
        let id = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)

        for refused in ["2.99", "1.00", "abc", "-5"] {
            let (status, _) = try await harness.call(
                "POST", "/_emulator/v1/products/monthly/price-increase", ["displayPrice": .string(refused)])
            #expect(status == 400, "\(refused)")
        }
        let (status, told) = try await harness.call(
            "POST", "/_emulator/v1/products/monthly/price-increase",
            ["requiresConsent": .bool(false), "displayPrice": .string("3.99")])
        #expect(status == 200 && told["subscriptions"] == .integer(1), "\(told)")

        // The PRICE_INCREASE's renewal info carries the new price.
        let payloads = try await sink.payloads(atLeast: 2)
        let increase = try payloads.map { try NotificationTests.decode($0, harness) }
            .first { $0["notificationType"] == .string("PRICE_INCREASE") }
        #expect(
            increase?["data"]?["renewalInfo"]?["renewalPrice"] == .integer(3_990), "\(String(describing: increase))")

        // A new buyer pays it at once; the products list shows it.
        let other = try await harness.device(deviceID: UUID().uuidString)
        let (_, second) = try await harness.call("POST", other + "/payments", ["productId": .string("monthly")])
        #expect(try Self.signed(second)["price"] == .integer(3_990))
        let (_, products) = try await harness.call("GET", other + "/products?ids=monthly")
        #expect(products["products"]?.arrayValue?.first?["displayPrice"] == .string("3.99"), "\(products)")

        // The subscriber's renewal charges it.
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let (_, state) = try await harness.call("GET", "/_emulator/v1/transactions/\(id)")
        let latest = try #require(state["subscription"]?["latestTransactionId"]?.stringValue, "\(state)")
        let (_, renewed) = try await harness.call("GET", "/_emulator/v1/transactions/\(latest)")
        #expect(try Self.signed(renewed)["price"] == .integer(3_990), "\(renewed)")
    }
}
