import AppStoreEmulator
import Foundation
import StoreTime
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

/// The hardening issue's reproductions: each is now a clear 4xx naming what is wrong, and the emulator keeps
/// answering.
@Suite("Emulator hostile input")
struct HostileInputTests {
    typealias Harness = AppStoreTests.Harness

    static func expectRefused(
        _ harness: Harness, _ method: String, _ path: String, _ body: String, mentioning member: String,
        status: Int = 400, sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        let response = await harness.responder.respond(
            to: HTTPRequest(
                method: method, path: path, headers: [("Host", "localhost"), ("Content-Type", "application/json")],
                body: Array(body.utf8)))
        #expect(response.status == status, "\(path) \(body)", sourceLocation: sourceLocation)
        let message = (try? JSONParser.parse(response.body))?["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains(member), "\(message)", sourceLocation: sourceLocation)
    }

    @Test("Wrong types, out-of-range numbers and unknown members are 400s naming the member")
    func strictTypes() async throws {
        let harness = try await Harness.make()
        let (accountID, app) = try await harness.accountAndApp()
        let payments = app + "/payments"
        for quantity in ["9223372036854775807", "1.5", "\"3\"", "true", "0", "11", "-1"] {
            await Self.expectRefused(
                harness, "POST", payments, #"{"productId": "coins", "quantity": \#(quantity)}"#, mentioning: "quantity")
        }
        await Self.expectRefused(harness, "POST", payments, #"{"productId": 7}"#, mentioning: "productId")
        await Self.expectRefused(harness, "POST", payments, #"{"product": "coins"}"#, mentioning: "product")
        await Self.expectRefused(
            harness, "POST", payments, #"{"productId": "coins", "appAccountToken": "nope"}"#,
            mentioning: "appAccountToken")
        await Self.expectRefused(
            harness, "POST", "/_emulator/v1/accounts", #"{"environment": 5}"#, mentioning: "environment")
        await Self.expectRefused(
            harness, "POST", "/_emulator/v1/accounts", #"{"environment": "Xcode"}"#, mentioning: "Sandbox, Production")
        await Self.expectRefused(
            harness, "POST", "/_emulator/v1/accounts", #"{"storefront": "ÄÖÜ"}"#, mentioning: "storefront")
        await Self.expectRefused(
            harness, "POST", "/_emulator/v1/accounts", #"{"storefront": "XXX"}"#, mentioning: "storefront")
        await Self.expectRefused(harness, "POST", "/_emulator/v1/clock", #"{"advance": 5}"#, mentioning: "advance")
        await Self.expectRefused(harness, "POST", "/_emulator/v1/clock", #"{"rate": "bogus"}"#, mentioning: "realTime")
        await Self.expectRefused(harness, "POST", app + "/install", #"{"version": 7}"#, mentioning: "version")
        await Self.expectRefused(harness, "POST", app + "/install", #"{"version": "1 2"}"#, mentioning: "version")
        await Self.expectRefused(
            harness, "POST", "/_emulator/v1/accounts/\(accountID)/settings", #"{"askToBuy": "yes"}"#,
            mentioning: "askToBuy")
        await Self.expectRefused(
            harness, "POST", "/_emulator/v1/accounts/\(accountID)/settings", #"{"purchaseFailure": "sometimes"}"#,
            mentioning: "failed, interrupted")
        await Self.expectRefused(harness, "POST", app + "/restore", #"{"all": true}"#, mentioning: "no body")
        await Self.expectRefused(
            harness, "POST", "/_emulator/v1/devices", #"{"accountId": "x"}"#, mentioning: "accountId")
        // The store is unchanged and still answers.
        let (status, queue) = try await harness.call("GET", app + "/transactions")
        #expect(status == 200)
        #expect(queue["transactions"]?.arrayValue?.isEmpty == true)
    }

    @Test("Oversized strings are refused before they are stored")
    func lengths() async throws {
        let harness = try await Harness.make()
        let (_, app) = try await harness.accountAndApp()
        let huge = String(repeating: "a", count: 1 << 20)
        await Self.expectRefused(
            harness, "POST", app + "/payments", #"{"productId": "coins", "applicationUsername": "\#(huge)"}"#,
            mentioning: "applicationUsername")
        await Self.expectRefused(
            harness, "POST", app + "/payments", #"{"productId": "\#(huge.prefix(300))"}"#, mentioning: "productId")
        let (status, _) = try await harness.call(
            "POST", app + "/payments",
            ["productId": .string("coins"), "applicationUsername": .string(String(repeating: "u", count: 1024))])
        #expect(status == 201)
    }

    @Test("Products of an unknown device or app are 404s")
    func productsOfUnknown() async throws {
        let harness = try await Harness.make()
        let (_, app) = try await harness.accountAndApp()
        let (known, _) = try await harness.call("GET", app + "/products?ids=coins")
        #expect(known == 200)
        let (device, _) = try await harness.call(
            "GET",
            "/_emulator/v1/devices/00000000-0000-4000-8000-000000000000/apps/\(AppStoreTests.bundleID)/products?ids=coins"
        )
        #expect(device == 404)
        let (unknownApp, _) = try await harness.call(
            "GET", app.replacingOccurrences(of: AppStoreTests.bundleID, with: "com.unknown") + "/products?ids=coins")
        #expect(unknownApp == 404)
    }

    @Test("Clock advances are bounded: at most P10Y a request, never past the horizon; the work is bounded too")
    func boundedClock() async throws {
        let harness = try await Harness.make(rate: .realTime)
        await Self.expectRefused(
            harness, "POST", "/_emulator/v1/clock", #"{"advance": "P999999Y"}"#, mentioning: "P10Y")
        await Self.expectRefused(harness, "POST", "/_emulator/v1/clock", #"{"advance": "P10Y1M"}"#, mentioning: "P10Y")
        for _ in 0..<2 {  // 2024 → 2034 → 2044
            let (ok, _) = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P10Y")])
            #expect(ok == 200)
        }
        await Self.expectRefused(harness, "POST", "/_emulator/v1/clock", #"{"advance": "P10Y"}"#, mentioning: "2049")
        // A production monthly subscription at the catalogue's fast rate renews 120 times in P10Y: one request
        // runs at most its share (50 here) and says so; the next requests (or the scheduler) run the rest.
        let production = try await Harness.make(maxEventsPerRequest: 50)
        let app = try await production.device(environment: "Production")
        _ = try await production.call("POST", app + "/payments", ["productId": .string("monthly")])
        let (status, clock) = try await production.call("POST", "/_emulator/v1/clock", ["advance": .string("P10Y")])
        #expect(status == 200)
        #expect(clock["caughtUp"] == .bool(false))
        #expect(try await production.store.transactionCount() == 51)
        _ = try await production.call("GET", "/_emulator/v1/clock")
        for _ in 0..<3 { _ = try await production.call("GET", app + "/transactions") }
        #expect(try await production.store.transactionCount() == 121)
    }

    @Test("Renewals that would end past the horizon are refused: the subscription expires instead")
    func horizon() async throws {
        let time = AppStoreTests.FakeTime()
        time.value.withLock { $0 = AppStore.horizon.addingTimeInterval(-40 * 86_400) }
        let harness = try await Harness.make(time: time, rate: .realTime)
        let app = try await harness.device(environment: "Production")
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        // The renewal falls due 10 days before the horizon and would end 20 days after it.
        time.value.withLock { $0 = AppStore.horizon.addingTimeInterval(-5 * 86_400) }
        let (_, entitlements) = try await harness.call("GET", app + "/entitlements")
        #expect(entitlements["signedTransactions"]?.arrayValue?.isEmpty == true)
        #expect(try await harness.store.transactionCount() == 1)
        let (status, receipt) = try await harness.call("GET", app + "/receipt")
        #expect(status == 200)
        #expect(receipt["receipt"]?.stringValue != nil)
    }
}
