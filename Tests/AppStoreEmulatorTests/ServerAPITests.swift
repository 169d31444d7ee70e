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

/// The waits a client asked for (its sleep is injected: nothing really waits).
final class Sleeps: Sendable {
    let value = Mutex<[Duration]>([])
    func withLock<T>(_ body: (inout [Duration]) -> T) -> T { value.withLock { body(&$0) } }
}

/// The emulated App Store Server API, called over HTTP by our client (`AppStoreServerAPIClient`) with a key
/// minted like App Store Connect's; every signed answer verified against the emulator's root.
@Suite("App Store Server API on the emulator, through our client")
struct ServerAPITests {
    /// An emulator on loopback with a minted key and a client for its sandbox (or production) API.
    struct API {
        let harness: AppStoreTests.Harness
        let server: HTTPServer
        let time: AppStoreTests.FakeTime
        let key: PrivateKey
        let keyID: String
        let issuerID: String
        let sleeps = Sleeps()

        static func make(otherApps: [String] = []) async throws -> API {
            let time = AppStoreTests.FakeTime()
            let harness = try await AppStoreTests.Harness.make(
                time: time, rate: .monthlyRenewalEveryFiveMinutes, otherApps: otherApps)
            let server = try HTTPServer(port: 0, responder: harness.responder)
            let minted = try await harness.store.serverAPI.mintAPIKey(bundleID: AppStoreTests.bundleID)
            return API(
                harness: harness, server: server, time: time, key: try PrivateKey(pem: minted.privateKey),
                keyID: minted.keyID, issuerID: minted.issuerID)
        }

        var base: String { "http://127.0.0.1:\(server.port)" }

        func client(
            production: Bool = false, bundleID: String = AppStoreTests.bundleID, key: PrivateKey? = nil,
            keyID: String? = nil, retry: AppStoreServerAPIClient.RetryPolicy = .none, verify: Bool = true
        ) throws -> AppStoreServerAPIClient {
            let verifier = try SignedDataVerifier(
                SignedDataVerifier.Configuration(
                    trustedRoots: [harness.store.pki.signedData.root], bundleID: AppStoreTests.bundleID))
            let sleeps = self.sleeps
            let time = self.time
            return AppStoreServerAPIClient(
                key: key ?? self.key, keyID: keyID ?? self.keyID, issuerID: issuerID, bundleID: bundleID,
                environment: .custom(production ? base : base + "/sandbox"), retry: retry,
                verifier: verify ? verifier : nil, now: { time.now },
                sleep: { duration in sleeps.withLock { $0.append(duration) } })
        }

        /// Buys `product` for a new customer (or the one of `app`); the transaction id and the app path.
        func buy(_ product: String, app: String? = nil, environment: String = "Sandbox") async throws -> (
            String, String
        ) {
            let path: String
            if let app {
                path = app
            } else {
                path = try await harness.device(environment: environment, deviceID: UUID().uuidString)
            }
            let (status, answer) = try await harness.call("POST", path + "/payments", ["productId": .string(product)])
            #expect(status == 201, "\(answer)")
            return (try #require(answer["transaction"]?["transactionIdentifier"]?.stringValue), path)
        }

        func payload(_ jws: String) throws -> JSONObject { try #require(AppStoreServerAPIClient.decodedPayload(jws)) }

        func stop() { server.stop() }
    }

    static func apiError(_ body: () async throws -> Void) async -> AppStoreServerAPIError? {
        do {
            try await body()
            return nil
        } catch let error as AppStoreServerAPIError {
            return error
        } catch {
            Issue.record("unexpected \(error)")
            return nil
        }
    }

    @Test("Get Transaction Info answers the transaction signed; other apps' and environments' ids are 4040010")
    func transactionInfo() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let (id, _) = try await api.buy("monthly")
        let info = try await api.client().transactionInfo(id)
        let payload = try api.payload(try #require(info.signedTransactionInfo))
        #expect(payload["transactionId"]?.stringValue == id)
        #expect(payload["environment"]?.stringValue == "Sandbox")
        let wrongEnvironment = await Self.apiError { _ = try await api.client(production: true).transactionInfo(id) }
        #expect(wrongEnvironment?.code == .transactionIdNotFound && wrongEnvironment?.status == 404)
        let malformed = await Self.apiError { _ = try await api.client().transactionInfo("12ab") }
        #expect(malformed?.code == .invalidTransactionId && malformed?.status == 400)
    }

    @Test("Transaction history pages by 20 in the order transactions last changed; a changed one comes again")
    func historyPaging() async throws {
        let api = try await API.make()
        defer { api.stop() }
        var (first, app) = try await api.buy("coins")
        for _ in 0..<24 { _ = try await api.buy("coins", app: app) }
        let (pro, _) = try await api.buy("pro", app: app)
        first = first + ""
        let client = try api.client()
        let pages = try await client.allTransactionHistory(first)
        #expect(pages.map(\.signedTransactions.count) == [20, 6])
        #expect(pages.map(\.hasMore) == [true, false])
        let ids = try pages.flatMap(\.signedTransactions).map {
            try api.payload($0)["transactionId"]?.stringValue ?? ""
        }
        #expect(ids.count == 26 && Set(ids).count == 26 && ids.last == pro)
        #expect(pages[0].environment == "Sandbox" && pages[0].bundleID == AppStoreTests.bundleID)

        // Polling from the last revision: nothing new, until a refund changes an old transaction.
        let last = try #require(pages.last?.revision)
        #expect(try await client.transactionHistory(first, revision: last).signedTransactions.isEmpty)
        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(first)/refund", [:])
        let changed = try await client.transactionHistory(first, revision: last)
        let again = try changed.signedTransactions.map { try api.payload($0) }
        #expect(again.map { $0["transactionId"]?.stringValue } == [first])
        #expect(again.first?["revocationDate"] != nil)
        #expect(again.first?["revocationType"] == .string("REFUND_FULL"))
        #expect(again.first?["revocationPercentage"] == .integer(100_000), "a whole refund, in milliunits")

        // Filters, sort, and v1 leaving finished consumables out.
        var query = TransactionHistoryQuery()
        query.productTypes = ["NON_CONSUMABLE"]
        let nonConsumables = try await client.transactionHistory(first, query: query)
        #expect(nonConsumables.signedTransactions.count == 1)
        query = TransactionHistoryQuery()
        query.sort = .descending
        let newest = try await client.transactionHistory(first, query: query)
        #expect(try api.payload(newest.signedTransactions[0])["transactionId"]?.stringValue == first)
        query = TransactionHistoryQuery()
        query.revoked = true
        #expect(try await client.transactionHistory(first, query: query).signedTransactions.count == 1)
        _ = try await api.harness.call("POST", app + "/transactions/\(ids[1])/finish", [:])
        // A finished consumable that was refunded stays in v1 (Apple: "if the transaction is refunded or revoked").
        _ = try await api.harness.call("POST", app + "/transactions/\(first)/finish", [:])
        let v1 = try await client.allTransactionHistory(first, version: 1)
        let v1IDs = try v1.flatMap(\.signedTransactions).map { try api.payload($0)["transactionId"]?.stringValue }
        #expect(v1IDs.count == 25 && v1IDs.contains(first) && !v1IDs.contains(ids[1]), "\(v1IDs)")

        let badRevision = await Self.apiError { _ = try await client.transactionHistory(first, revision: "garbage") }
        #expect(badRevision?.code == .invalidRequestRevision)
        query = TransactionHistoryQuery()
        query.productTypes = ["SUBSCRIPTION"]
        let badType = await Self.apiError { _ = try await client.transactionHistory(first, query: query) }
        #expect(badType?.code == .invalidProductType)
        // An end not after the start is Apple's 4000013, equal dates included.
        for end in [0.0, -60] {
            query = TransactionHistoryQuery()
            query.startDate = Date(timeIntervalSince1970: 1_767_225_600)
            query.endDate = query.startDate?.addingTimeInterval(end)
            let reversed = await Self.apiError { _ = try await client.transactionHistory(first, query: query) }
            #expect(reversed?.code == .startDateAfterEndDate && reversed?.status == 400, "end \(end)")
        }
    }

    @Test("Renewal info is priced in the account's storefront currency and carries the purchase's appAccountToken")
    func renewalInfoCurrencyAndToken() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let harness = api.harness
        let (_, account) = try await harness.call(
            "POST", "/_emulator/v1/accounts", ["environment": .string("Sandbox"), "storefront": .string("DEU")])
        let (_, device) = try await harness.call(
            "POST", "/_emulator/v1/devices",
            ["accountId": account["accountId"]!, "deviceId": .string(UUID().uuidString)])
        let app = "/_emulator/v1/devices/\(device["deviceId"]!.stringValue!)/apps/\(AppStoreTests.bundleID)"
        _ = try await harness.call("POST", app + "/install", ["version": .string("1")])
        let token = UUID().uuidString.lowercased()
        let (status, bought) = try await harness.call(
            "POST", app + "/payments", ["productId": .string("monthly"), "appAccountToken": .string(token)])
        #expect(status == 201, "\(bought)")
        let id = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        let statuses = try await api.client().subscriptionStatuses(id)
        let item = try #require(statuses.groups.first?.lastTransactions.first)
        let transaction = try api.payload(try #require(item.signedTransactionInfo))
        let renewal = try api.payload(try #require(item.signedRenewalInfo))
        #expect(transaction["currency"] == .string("EUR"))
        #expect(renewal["currency"] == .string("EUR"), "the next charge in the customer's currency: \(renewal)")
        #expect(renewal["renewalPrice"] == transaction["price"])
        #expect(renewal["appAccountToken"] == .string(token))
    }

    @Test("recentSubscriptionStartDate: a resubscription after a lapse of 60 days or more starts a new run")
    func recentSubscriptionStart() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let (first, app) = try await api.buy("monthly")
        let client = try api.client()
        func runStart() async throws -> Int64? {
            let item = try await client.subscriptionStatuses(first).groups.first?.lastTransactions.first
            return try api.payload(try #require(item?.signedRenewalInfo))["recentSubscriptionStartDate"]?.int64Value
        }
        let original = try await runStart()
        // Expired and bought again soon after: the same run.
        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(first)/expire")
        let (soon, _) = try await api.buy("monthly", app: app)
        #expect(try await runStart() == original, "a short lapse continues the run")
        // Expired, and a year (at the store's rate, well past 60 days) before buying again: a new run from that
        // purchase.
        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(soon)/expire")
        _ = try await api.harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1Y")])
        let (later, _) = try await api.buy("monthly", app: app)
        let bought = try await client.transactionInfo(later).signedTransactionInfo
        let purchased = try api.payload(try #require(bought))["purchaseDate"]?.int64Value
        #expect(try await runStart() == purchased && purchased != original, "a new run")
        // Refunded at once, and 65 days later (at the store's rate) bought again: paid service ended at the refund,
        // 65 days before, though the refunded period would have expired within the 60 days.
        let third = try #require(later as String?)
        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(third)/refund", [:])
        _ = try await api.harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P65D")])
        let (again, _) = try await api.buy("monthly", app: app)
        let rebought = try await client.transactionInfo(again).signedTransactionInfo
        let restarted = try api.payload(try #require(rebought))["purchaseDate"]?.int64Value
        #expect(try await runStart() == restarted, "a lapse counted from the refund")
    }

    @Test("Subscription statuses, refund history and order look-up answer as Apple's do")
    func statusesRefundsOrders() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let (subscription, app) = try await api.buy("monthly")
        let (coins, _) = try await api.buy("coins", app: app)
        let client = try api.client()
        let statuses = try await client.subscriptionStatuses(coins)
        let group = try #require(statuses.groups.first)
        #expect(group.subscriptionGroupIdentifier == "6F3A93AB")
        #expect(group.lastTransactions.map(\.status) == [1])
        #expect(group.lastTransactions.first?.originalTransactionID == subscription)
        let renewal = try api.payload(try #require(group.lastTransactions.first?.signedRenewalInfo))
        #expect(renewal["autoRenewStatus"]?.int64Value == 1)
        #expect(try await client.subscriptionStatuses(coins, status: [2]).groups.isEmpty)
        let badStatus = await Self.apiError { _ = try await client.subscriptionStatuses(coins, status: [9]) }
        #expect(badStatus?.code == .invalidStatus)

        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(coins)/refund", [:])
        let refunds = try await client.allRefundHistory(subscription)
        #expect(
            try refunds.flatMap(\.signedTransactions).map { try api.payload($0)["transactionId"]?.stringValue }
                == [coins])
        // The deprecated v1 path: the refunded transactions in one answer, the one refunded last first, no
        // paging fields.
        let (later, _) = try await api.buy("coins", app: app)
        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(later)/refund", [:])
        let issued = Int64(api.time.now.timeIntervalSince1970)
        let token = try JWSSigner.sign(
            payload: [
                "iss": .string(api.issuerID), "iat": .integer(issued), "exp": .integer(issued + 300),
                "aud": .string("appstoreconnect-v1"), "bid": .string(AppStoreTests.bundleID),
            ], header: ["kid": .string(api.keyID), "typ": .string("JWT")], key: api.key)
        let v1 = try await HTTPClient().send(
            "GET", api.base + "/sandbox/inApps/v1/refund/lookup/\(subscription)",
            headers: [("Authorization", "Bearer " + token)])
        let v1Body = try JSONParser.parse(v1.body)
        #expect(v1.status == 200 && v1Body["revision"] == nil && v1Body["hasMore"] == nil, "\(v1Body)")
        #expect(
            try (v1Body["signedTransactions"]?.arrayValue ?? []).map {
                try api.payload($0.stringValue ?? "")["transactionId"]?.stringValue
            } == [later, coins])

        let (_, queue) = try await api.harness.call("GET", app + "/transactions")
        let order = try #require(queue["transactions"]?.arrayValue?.first?["orderId"]?.stringValue)
        let found = try await client.lookUpOrder(order)
        #expect(found.status == 0 && found.signedTransactions.count == 1)
        #expect(try await client.lookUpOrder("NOSUCHORDER").status == 1)
        let invalid = try await HTTPClient().send(
            "GET", api.base + "/sandbox/inApps/v1/lookup/NOSUCHORDER", headers: [("Authorization", "Bearer " + token)])
        let invalidBody = try JSONParser.parse(invalid.body)
        #expect(invalidBody["status"] == .integer(1) && invalidBody["signedTransactions"] == nil, "\(invalidBody)")
        #expect(try await api.client(production: true).lookUpOrder(order).status == 1)
    }

    @Test("A renewal-date extension moves the renewal, sends RENEWAL_EXTENDED, and follows Apple's rules")
    func extensions() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let sink = try NotificationSink()
        try await NotificationTests.configure(api.harness, ["sandboxURL": .string(sink.url)])
        let (id, app) = try await api.buy("monthly")
        let client = try api.client()
        let before = try api.payload(try #require(try await client.transactionInfo(id).signedTransactionInfo))
        let request = ExtendRenewalDateRequest(extendByDays: 30, extendReasonCode: 1, requestIdentifier: "first")
        let extended = try await client.extendRenewalDate(originalTransactionID: id, request)
        #expect(extended.success == true && extended.originalTransactionID == id)
        let effective = try #require(extended.effectiveDate)
        #expect(effective > (before["expiresDate"]?.doubleValue).map { Date(timeIntervalSince1970: $0 / 1000) }!)
        let after = try api.payload(try #require(try await client.transactionInfo(id).signedTransactionInfo))
        let expires = try #require(after["expiresDate"]?.doubleValue)
        #expect(abs(expires - effective.timeIntervalSince1970 * 1000) <= 1)
        // The same request identifier answers the same, without extending again.
        #expect(try await client.extendRenewalDate(originalTransactionID: id, request).effectiveDate == effective)
        let payloads = try await sink.payloads(atLeast: 2)
        #expect(try payloads.map { try api.payload($0)["notificationType"]?.stringValue }.contains("RENEWAL_EXTENDED"))

        let tooLong = await Self.apiError {
            _ = try await client.extendRenewalDate(
                originalTransactionID: id,
                ExtendRenewalDateRequest(extendByDays: 91, extendReasonCode: 1, requestIdentifier: "x"))
        }
        #expect(tooLong?.code == .invalidExtendByDays)
        _ = try await client.extendRenewalDate(
            originalTransactionID: id,
            ExtendRenewalDateRequest(extendByDays: 1, extendReasonCode: 0, requestIdentifier: "second"))
        let third = await Self.apiError {
            _ = try await client.extendRenewalDate(
                originalTransactionID: id,
                ExtendRenewalDateRequest(extendByDays: 1, extendReasonCode: 0, requestIdentifier: "third"))
        }
        #expect(third?.code == .subscriptionMaxExtension && third?.status == 403)
        let (coins, _) = try await api.buy("coins", app: app)
        let notSubscription = await Self.apiError {
            _ = try await client.extendRenewalDate(
                originalTransactionID: coins,
                ExtendRenewalDateRequest(extendByDays: 1, extendReasonCode: 0, requestIdentifier: "c"))
        }
        #expect(notSubscription?.code == .subscriptionExtensionIneligible)
        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(id)/expire", [:])
        let (other, _) = try await api.buy("monthly")
        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(other)/expire", [:])
        let expired = await Self.apiError {
            _ = try await client.extendRenewalDate(
                originalTransactionID: other,
                ExtendRenewalDateRequest(extendByDays: 1, extendReasonCode: 0, requestIdentifier: "e"))
        }
        #expect(expired?.code == .subscriptionExtensionIneligible)
    }

    @Test(
        "A mass extension runs in the background, reports its status, tells of each subscription it could not extend (FAILURE) and ends with SUMMARY"
    )
    func massExtension() async throws {
        let other = "com.example.other"
        let api = try await API.make(otherApps: [other])
        defer { api.stop() }
        let sink = try NotificationSink()
        try await NotificationTests.configure(api.harness, ["sandboxURL": .string(sink.url)])
        var bought: [String] = []
        for _ in 0..<3 { bought.append(try await api.buy("monthly").0) }
        let (expired, _) = try await api.buy("monthly")
        _ = try await api.harness.call("POST", "/_emulator/v1/transactions/\(expired)/expire", [:])
        let client = try api.client()
        // One subscription already extended twice this year: the mass extension cannot extend it again.
        for number in 1...2 {
            _ = try await client.extendRenewalDate(
                originalTransactionID: bought[0],
                ExtendRenewalDateRequest(extendByDays: 1, extendReasonCode: 1, requestIdentifier: "single-\(number)"))
        }
        let taken = try await client.extendRenewalDatesForAllActiveSubscribers(
            MassExtendRenewalDateRequest(
                extendByDays: 3, extendReasonCode: 3, requestIdentifier: "outage-1", productID: "monthly",
                storefrontCountryCodes: ["USA", "usa", "USA"]))
        #expect(taken.requestIdentifier == "outage-1")
        var status = try await client.massExtensionStatus(productID: "monthly", requestIdentifier: "outage-1")
        for _ in 0..<6_000 where status.complete != true {
            try await Task.sleep(for: .milliseconds(20))
            status = try await client.massExtensionStatus(productID: "monthly", requestIdentifier: "outage-1")
        }
        #expect(status.complete == true && status.succeededCount == 2 && status.failedCount == 1)
        #expect(status.completeDate != nil)
        let unknown = await Self.apiError {
            _ = try await client.massExtensionStatus(productID: "monthly", requestIdentifier: "nope")
        }
        #expect(unknown?.code == .statusRequestNotFound)
        // Another app's key does not see this app's request.
        let minted = try await api.harness.store.serverAPI.mintAPIKey(bundleID: other)
        let otherClient = try api.client(
            bundleID: other, key: try PrivateKey(pem: minted.privateKey), keyID: minted.keyID)
        let otherApp = await Self.apiError {
            _ = try await otherClient.massExtensionStatus(productID: "monthly", requestIdentifier: "outage-1")
        }
        #expect(otherApp?.code == .statusRequestNotFound && otherApp?.status == 404)
        // Nor can it take the same identifier for the same product: refused, not answered as if started.
        let reused = await Self.apiError {
            _ = try await otherClient.extendRenewalDatesForAllActiveSubscribers(
                MassExtendRenewalDateRequest(
                    extendByDays: 3, extendReasonCode: 3, requestIdentifier: "outage-1", productID: "monthly"))
        }
        #expect(reused?.code == .invalidRequestIdentifier && reused?.status == 400)
        // The trailing slash Apple's libraries of 2023 sent reaches the endpoint (its own error, not 4000000).
        let slashed = await Self.apiError {
            _ =
                try await client.call(
                    "POST", "/inApps/v1/subscriptions/extend/mass/",
                    body: [
                        "extendByDays": .integer(91), "extendReasonCode": .integer(3),
                        "requestIdentifier": .string("outage-2"), "productId": .string("monthly"),
                    ]) as EmptyResponse
        }
        #expect(slashed?.code == .invalidExtendByDays, "\(String(describing: slashed))")
        var decoded: [JSONObject] = []
        for _ in 0..<60 {
            decoded = try await sink.payloads(atLeast: 4 + 2 + 2 + 1 + 1).map { try api.payload($0) }
            if decoded.contains(where: { $0["subtype"]?.stringValue == "SUMMARY" }) { break }
        }
        let summary = try #require(decoded.first { $0["subtype"]?.stringValue == "SUMMARY" })
        #expect(summary["notificationType"]?.stringValue == "RENEWAL_EXTENSION")
        #expect(summary["summary"]?["succeededCount"]?.int64Value == 2)
        #expect(summary["summary"]?["failedCount"]?.int64Value == 1)
        #expect(summary["summary"]?["storefrontCountryCodes"] == .array([.string("USA")]), "each storefront once")
        #expect(decoded.filter { $0["notificationType"]?.stringValue == "RENEWAL_EXTENDED" }.count == 2 + 2)
        let failures = decoded.filter { $0["subtype"]?.stringValue == "FAILURE" }
        #expect(failures.count == 1 && failures.first?["notificationType"]?.stringValue == "RENEWAL_EXTENSION")
        let failed = try api.payload(try #require(failures.first?["data"]?["signedTransactionInfo"]?.stringValue))
        #expect(failed["originalTransactionId"]?.stringValue == bought[0], "the subscription not extended")
        let badProduct = await Self.apiError {
            _ = try await client.extendRenewalDatesForAllActiveSubscribers(
                MassExtendRenewalDateRequest(
                    extendByDays: 3, extendReasonCode: 3, requestIdentifier: "x", productID: "coins"))
        }
        #expect(badProduct?.code == .invalidProductId)
    }

    @Test("Test notifications and the notification history, with its filters and onlyFailures")
    func notifications() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let client = try api.client()
        let none = await Self.apiError { _ = try await client.requestTestNotification() }
        #expect(none?.code == .serverNotificationUrlNotFound)
        // Version 1 has no TEST notification: the same error, and nothing is sent.
        let versionOne = try NotificationSink()
        try await NotificationTests.configure(
            api.harness, ["sandboxURL": .string(versionOne.url), "version": .integer(1)])
        let unsent = await Self.apiError { _ = try await client.requestTestNotification() }
        #expect(unsent?.code == .serverNotificationUrlNotFound)
        #expect(versionOne.count == 0)
        let sink = try NotificationSink(failFirst: [500])
        try await NotificationTests.configure(api.harness, ["sandboxURL": .string(sink.url)])
        let token = try #require(try await client.requestTestNotification().testNotificationToken)
        var status = try await client.testNotificationStatus(token)
        for _ in 0..<6_000 where status.sendAttempts.isEmpty {
            try await Task.sleep(for: .milliseconds(10))
            status = try await client.testNotificationStatus(token)
        }
        #expect(status.sendAttempts.map(\.sendAttemptResult) == ["UNSUCCESSFUL_HTTP_RESPONSE_CODE"])
        #expect(try api.payload(try #require(status.signedPayload))["notificationType"]?.stringValue == "TEST")
        let badToken = await Self.apiError { _ = try await client.testNotificationStatus("nonsense") }
        #expect(badToken?.code == .invalidTestNotificationToken)

        // A customer's subscription and, in the same app, a consumable (ONE_TIME_CHARGE); another customer's
        // subscription.
        let (id, app) = try await api.buy("monthly")
        _ = try await api.buy("coins", app: app)
        _ = try await api.buy("monthly")
        _ = try await sink.payloads(atLeast: 4)
        let now = api.harness.store.now
        let window = NotificationHistoryRequest(
            startDate: now.addingTimeInterval(-3600), endDate: now.addingTimeInterval(60))
        var settled: [NotificationHistoryResponse.Item] = []
        for _ in 0..<6_000 {
            settled = try await client.allNotificationHistory(window).flatMap(\.notificationHistory)
            if settled.count == 4, settled.allSatisfy({ !$0.sendAttempts.isEmpty }) { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(settled.count == 4)
        var failures = window
        failures.onlyFailures = true
        let failed = try await client.notificationHistory(failures).notificationHistory
        #expect(try failed.map { try api.payload($0.signedPayload ?? "")["notificationType"]?.stringValue } == ["TEST"])
        // Any transaction of a customer names the customer: their subscription's and their consumable's
        // notifications, not the other customer's.
        var byTransaction = window
        byTransaction.transactionID = id
        let forTransaction = try await client.notificationHistory(byTransaction).notificationHistory
        #expect(
            try forTransaction.map { try api.payload($0.signedPayload ?? "")["notificationType"]?.stringValue } == [
                "SUBSCRIBED", "ONE_TIME_CHARGE",
            ])
        var both = byTransaction
        both.notificationType = "SUBSCRIBED"
        #expect(
            await Self.apiError { _ = try await client.notificationHistory(both) }?.code == .multipleFiltersSupplied)
        let old = NotificationHistoryRequest(startDate: now.addingTimeInterval(-400 * 86_400), endDate: now)
        #expect(await Self.apiError { _ = try await client.notificationHistory(old) }?.code == .startDateTooFarInPast)
        // The Sandbox keeps 30 days (Production 180): 31 days back is refused, 29 taken.
        let sandboxOld = NotificationHistoryRequest(startDate: now.addingTimeInterval(-31 * 86_400), endDate: now)
        #expect(
            await Self.apiError { _ = try await client.notificationHistory(sandboxOld) }?.code == .startDateTooFarInPast
        )
        _ = try await client.notificationHistory(
            NotificationHistoryRequest(startDate: now.addingTimeInterval(-29 * 86_400), endDate: now))
        let reversed = NotificationHistoryRequest(startDate: now, endDate: now.addingTimeInterval(-60))
        #expect(
            await Self.apiError { _ = try await client.notificationHistory(reversed) }?.code == .startDateAfterEndDate)
        // A subtype is taken only with a type Apple sends it with (4000018 otherwise).
        var paired = window
        paired.notificationType = "SUBSCRIBED"
        paired.notificationSubtype = "INITIAL_BUY"
        #expect(try await client.notificationHistory(paired).notificationHistory.count == 2)
        for (type, subtype) in [("TEST", "SUMMARY"), ("SUBSCRIBED", "VOLUNTARY"), ("DID_RENEW", "UPGRADE")] {
            var mismatched = window
            mismatched.notificationType = type
            mismatched.notificationSubtype = subtype
            let refused = await Self.apiError { _ = try await client.notificationHistory(mismatched) }
            #expect(refused?.code == .invalidNotificationType && refused?.status == 400, "\(type)/\(subtype)")
        }
    }

    @Test("Following pages stops with an error at a page that gives back the token it was asked with")
    func pagesThatDoNotMoveOn() async throws {
        let asked = Mutex(0)
        var router = Router()
        router.add(
            "GET", "/inApps/v2/history/{id}",
            inline: { _, _ in
                asked.withLock { $0 += 1 }
                return HTTPResponse(
                    status: 200, headers: [("Content-Type", "application/json")],
                    body: JSONWriter.bytes(
                        .object([
                            "signedTransactions": .array([]), "revision": .string("same"), "hasMore": .bool(true),
                            "bundleId": .string(AppStoreTests.bundleID), "environment": .string("Sandbox"),
                        ])))
            })
        let stub = try HTTPServer(port: 0, responder: router.freeze())
        defer { stub.stop() }
        let client = AppStoreServerAPIClient(
            key: try PrivateKey.generateP256(), keyID: "KEY1234567", issuerID: "issuer",
            bundleID: AppStoreTests.bundleID,
            environment: .custom("http://127.0.0.1:\(stub.port)"), retry: .none, verifier: nil)
        let error = await Self.apiError { _ = try await client.allTransactionHistory("1000000000000001") }
        #expect(error?.kind == .invalidResponse, "\(String(describing: error))")
        #expect(asked.withLock { $0 } == 2, "the first page, then the one that gave its own token back")
    }

    @Test("A 401 without a body says what was refused: the bearer token")
    func unauthorizedHint() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let client = try api.client(keyID: "WRONGKEY01")
        let error = await Self.apiError { _ = try await client.requestTestNotification() }
        #expect(error?.status == 401)
        #expect(error?.description.contains("the bearer token was refused") == true, "\(String(describing: error))")
    }

    @Test("Consumption information, app account tokens and app transactions")
    func consumptionTokensAppTransactions() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let (subscription, app) = try await api.buy("monthly")
        let (coins, _) = try await api.buy("coins", app: app)
        let client = try api.client()
        try await client.sendConsumptionInformation(
            transactionID: coins,
            ConsumptionRequest(
                customerConsented: true, consumptionPercentage: 25_000, deliveryStatus: "DELIVERED",
                refundPreference: "GRANT_PRORATED", sampleContentProvided: false))
        let noConsent = await Self.apiError {
            try await client.sendConsumptionInformation(
                transactionID: coins,
                ConsumptionRequest(customerConsented: false, deliveryStatus: "DELIVERED", sampleContentProvided: false))
        }
        #expect(noConsent?.code == .invalidCustomerConsented)
        // API 1.19's rules: a share only with DELIVERED (0 otherwise), in range, never for an auto-renewable
        // subscription; a refund preference Apple names.
        func refused(_ id: String, _ request: ConsumptionRequest) async -> AppStoreServerAPIError? {
            await Self.apiError { try await client.sendConsumptionInformation(transactionID: id, request) }
        }
        let refusals: [(id: String, share: Int?, delivery: String, preference: String?, code: APIErrorCode)] = [
            (coins, 50_000, "UNDELIVERED_OTHER", nil, .generalBadRequest),
            (coins, 100_001, "DELIVERED", nil, .generalBadRequest),
            (coins, nil, "DELIVERED", "MAYBE", .invalidRefundPreference),
            (subscription, 10_000, "DELIVERED", nil, .consumptionPercentageAutoRenewableSubscription),
        ]
        for refusal in refusals {
            let error = await refused(
                refusal.id,
                ConsumptionRequest(
                    customerConsented: true, consumptionPercentage: refusal.share, deliveryStatus: refusal.delivery,
                    refundPreference: refusal.preference, sampleContentProvided: false))
            #expect(error?.code == refusal.code && error?.status == 400, "\(refusal)")
        }
        // A share of 0 is what an undelivered purchase takes.
        try await client.sendConsumptionInformation(
            transactionID: coins,
            ConsumptionRequest(
                customerConsented: true, consumptionPercentage: 0, deliveryStatus: "UNDELIVERED_OTHER",
                sampleContentProvided: false))
        try await client.sendConsumptionInformation(
            transactionID: subscription,
            ConsumptionRequest(customerConsented: true, deliveryStatus: "DELIVERED", sampleContentProvided: false))
        let v1: JSONObject = [
            "customerConsented": .bool(true), "consumptionStatus": .integer(2), "platform": .integer(1),
            "sampleContentProvided": .bool(false), "deliveryStatus": .integer(0), "accountTenure": .integer(3),
            "playTime": .integer(2), "lifetimeDollarsRefunded": .integer(0), "lifetimeDollarsPurchased": .integer(1),
            "userStatus": .integer(1), "appAccountToken": .string(""),
        ]
        try await client.sendConsumptionData(transactionID: coins, v1)
        let badV1 = await Self.apiError {
            try await client.sendConsumptionData(
                transactionID: coins,
                ["customerConsented": .bool(true), "sampleContentProvided": .bool(true), "playTime": .integer(9)])
        }
        #expect(badV1?.code == .invalidPlayTime)
        var badPreference = v1
        badPreference["refundPreference"] = .integer(9)
        let v1Preference = await Self.apiError {
            try await client.sendConsumptionData(transactionID: coins, badPreference)
        }
        #expect(v1Preference?.code == .invalidRefundPreference)
        // v1 takes consumables and auto-renewable subscriptions only; v2 any purchase but a family member's.
        for product in ["pro", "season"] {
            let (other, _) = try await api.buy(product, app: app)
            let refused = await Self.apiError { try await client.sendConsumptionData(transactionID: other, v1) }
            #expect(refused?.code == .invalidTransactionTypeNotSupported && refused?.status == 400, "\(product)")
            try await client.sendConsumptionInformation(
                transactionID: other,
                ConsumptionRequest(customerConsented: true, deliveryStatus: "DELIVERED", sampleContentProvided: false))
        }
        let memberApp = try await api.harness.device(deviceID: UUID().uuidString)
        let (organizer, member) = (
            try #require(try await api.harness.accountOf(app)), try #require(try await api.harness.accountOf(memberApp))
        )
        let (created, _) = try await api.harness.call(
            "POST", "/_emulator/v1/families", ["organizer": .string(organizer), "members": .array([.string(member)])])
        #expect(created == 201)
        let (_, entitlements) = try await api.harness.call("GET", memberApp + "/entitlements")
        let shared = try (entitlements["signedTransactions"]?.arrayValue ?? []).compactMap {
            try CompactJWS(try #require($0.stringValue)).payload
        }.first { $0["inAppOwnershipType"] == .string("FAMILY_SHARED") }
        let sharedID = try #require(shared?["transactionId"]?.stringValue)
        let family = await Self.apiError {
            try await client.sendConsumptionInformation(
                transactionID: sharedID,
                ConsumptionRequest(customerConsented: true, deliveryStatus: "DELIVERED", sampleContentProvided: false))
        }
        #expect(
            family?.code == .familyTransactionNotSupported && family?.status == 400, "\(String(describing: family))")
        // Apple's V1 body requires every member but refundPreference: one left out (or null) is refused with its code.
        let missing: [(String, APIErrorCode)] = [
            ("accountTenure", .invalidAccountTenure), ("appAccountToken", .invalidAppAccountToken),
            ("userStatus", .invalidUserStatus), ("lifetimeDollarsPurchased", .invalidLifetimeDollarsPurchased),
        ]
        for (member, code) in missing {
            var body = v1
            body[member] = nil
            let refused = await Self.apiError { try await client.sendConsumptionData(transactionID: coins, body) }
            #expect(refused?.code == code, "\(member)")
            body[member] = .null
            let null = await Self.apiError { try await client.sendConsumptionData(transactionID: coins, body) }
            #expect(null?.code == code, "\(member) null")
        }

        let token = UUID()
        try await client.setAppAccountToken(originalTransactionID: subscription, token)
        let info = try api.payload(try #require(try await client.transactionInfo(subscription).signedTransactionInfo))
        #expect(info["appAccountToken"]?.stringValue == token.uuidString.lowercased())
        _ = try await api.harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let latest = try #require(
            try await client.subscriptionStatuses(subscription).groups.first?.lastTransactions.first?
                .signedTransactionInfo)
        let renewedInfo = try api.payload(latest)
        #expect(renewedInfo["transactionId"]?.stringValue != subscription, "renewed")
        #expect(renewedInfo["appAccountToken"]?.stringValue == token.uuidString.lowercased())
        let notUUID = await Self.apiError {
            _ =
                try await client.call(
                    "PUT", "/inApps/v1/transactions/\(subscription)/appAccountToken",
                    body: ["appAccountToken": .string("nope")]) as EmptyResponse
        }
        #expect(notUUID?.code == .invalidAppAccountTokenUUID)

        // Finish Transaction: the purchase leaves the device's queue as the app's own finish() takes it out.
        let (unfinished, devicePath) = try await api.buy("pro")
        func queued() async throws -> [String] {
            let answer = try await api.harness.call("GET", devicePath + "/transactions")
            return (answer.1["transactions"]?.arrayValue ?? []).compactMap {
                $0["transactionIdentifier"]?.stringValue
            }
        }
        #expect(try await queued().contains(unfinished))
        try await client.finishTransaction(unfinished)
        try await client.finishTransaction(unfinished)  // again: nothing changes
        #expect(try await !queued().contains(unfinished))
        let unknown = await Self.apiError { try await client.finishTransaction("9999999999999999") }
        #expect(unknown?.code == .transactionIdNotFound)

        let appTransaction = try api.payload(
            try #require(try await client.appTransactionInfo(coins).signedAppTransactionInfo))
        #expect(appTransaction["bundleId"]?.stringValue == AppStoreTests.bundleID)
        #expect(appTransaction["receiptType"]?.stringValue == "Sandbox")

        // appTransactionId (API 1.20): on every purchase and on the app transaction; the endpoints that take
        // any id of the customer take it; those about one purchase answer 4000048.
        let appTransactionID = try #require(appTransaction["appTransactionId"]?.stringValue)
        let coinsInfo = try api.payload(try #require(try await client.transactionInfo(coins).signedTransactionInfo))
        #expect(coinsInfo["appTransactionId"]?.stringValue == appTransactionID)
        #expect(appTransactionID.hasPrefix("6") && appTransactionID.count == 16)
        let renewal = try #require(
            try await client.subscriptionStatuses(appTransactionID).groups.first?.lastTransactions.first?
                .signedRenewalInfo)
        #expect(try api.payload(renewal)["appTransactionId"]?.stringValue == appTransactionID, "renewal info too")
        let byApp = try api.payload(
            try #require(try await client.appTransactionInfo(appTransactionID).signedAppTransactionInfo))
        #expect(byApp["appTransactionId"]?.stringValue == appTransactionID)
        let history = try await client.transactionHistory(appTransactionID)
        #expect(
            try history.signedTransactions.map { try api.payload($0)["transactionId"]?.stringValue }.contains(coins),
            "the customer's history by the app transaction")
        for refused in [
            await Self.apiError { _ = try await client.transactionInfo(appTransactionID) },
            await Self.apiError { try await client.finishTransaction(appTransactionID) },
        ] {
            #expect(refused?.code == .appTransactionIdNotSupported)
            #expect(refused?.status == 400)
            #expect(refused?.message == "Invalid request. App transactions aren't supported by this endpoint.")
        }
    }

    @Test("Tokens with a wrong aud, bid, kid, signature, issuer or lifetime are refused with a bare 401")
    func tokenRules() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let (id, _) = try await api.buy("coins")
        let url = api.base + "/sandbox/inApps/v1/transactions/\(id)"
        let now = api.time.now
        func status(_ token: String?) async throws -> (Int, [UInt8]) {
            let response = try await HTTPClient().send(
                "GET", url, headers: token.map { [("Authorization", "Bearer " + $0)] } ?? [])
            return (response.status, response.body)
        }
        func token(_ claims: JSONObject, kid: String? = nil, key: PrivateKey? = nil) throws -> String {
            try JWSSigner.sign(
                payload: claims, header: ["kid": .string(kid ?? api.keyID), "typ": .string("JWT")], key: key ?? api.key)
        }
        let issued = Int64(now.timeIntervalSince1970)
        let good: JSONObject = [
            "iss": .string(api.issuerID), "iat": .integer(issued), "exp": .integer(issued + 300),
            "aud": .string("appstoreconnect-v1"), "bid": .string(AppStoreTests.bundleID),
        ]
        #expect(try await status(try token(good)).0 == 200)
        var noIssuedAt = good
        noIssuedAt["iat"] = nil
        #expect(try await status(try token(noIssuedAt)).0 == 200, "Apple's Python client sends no iat")
        var cases: [(String, String)] = []
        var claims = good
        claims["aud"] = .string("appstoreconnect-v2")
        cases.append(("aud", try token(claims)))
        claims = good
        claims["bid"] = .string("com.example.other")
        cases.append(("bid", try token(claims)))
        claims = good
        claims["iss"] = .string(UUID().uuidString)
        cases.append(("iss", try token(claims)))
        claims = good
        claims["exp"] = .integer(issued + 3_601)
        cases.append(("lifetime", try token(claims)))
        claims = good
        claims["iat"] = .integer(issued - 900)
        claims["exp"] = .integer(issued - 60)
        cases.append(("expired", try token(claims)))
        cases.append(("kid", try token(good, kid: "UNKNOWN123")))
        cases.append(("signature", try token(good, key: try PrivateKey.generateP256())))
        cases.append(("not a JWT", "abc.def"))
        for (name, bad) in cases {
            let (code, body) = try await status(bad)
            #expect(code == 401 && body.isEmpty, "\(name)")
        }
        #expect(try await status(nil).0 == 401)
        // A token accepted once is refused after it expires (the cache keeps its expiry).
        let short = good.merging(["exp": .integer(issued + 2)])
        let remembered = try token(short)
        #expect(try await status(remembered).0 == 200)
        api.time.value.withLock { $0 = $0.addingTimeInterval(5) }
        #expect(try await status(remembered).0 == 401)
    }

    @Test("Injected faults are answered as Apple would, and our client retries them as Apple advises")
    func faultsAndRetries() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let (id, _) = try await api.buy("coins")
        func fault(_ body: JSONObject) async throws {
            let (status, answer) = try await api.harness.call("POST", "/_emulator/v1/faults", body)
            #expect(status == 201, "\(answer)")
        }
        let path: JSONValue = .string("/sandbox/inApps/v1/transactions/*")
        try await fault(["path": path, "status": .integer(429), "retryAfter": .integer(2), "count": .integer(1)])
        let retrying = try api.client(retry: AppStoreServerAPIClient.RetryPolicy(maxAttempts: 3))
        // The fault's Retry-After is real time; the client's clock is the fake one: both near enough to wait
        // what the header says once the fake clock is set to now.
        api.time.value.withLock { $0 = Date() }
        let answered = try await retrying.transactionInfo(id)
        #expect(answered.signedTransactionInfo != nil)
        let waited = try #require(api.sleeps.withLock { $0 }.first)
        #expect(waited > .milliseconds(1_000) && waited <= .milliseconds(2_100), "\(waited)")

        // A Retry-After longer than the policy allows is not waited for: the 429 comes through.
        api.sleeps.withLock { $0 = [] }
        try await fault(["path": path, "status": .integer(429), "retryAfter": .integer(2), "count": .integer(1)])
        api.time.value.withLock { $0 = Date() }
        let impatient = try api.client(
            retry: AppStoreServerAPIClient.RetryPolicy(maxAttempts: 3, maxRetryAfter: .milliseconds(1_500)))
        let tooLong = await Self.apiError { _ = try await impatient.transactionInfo(id) }
        #expect(tooLong?.status == 429 && api.sleeps.withLock { $0 }.isEmpty)

        // Without retries, Apple's body and header come through.
        try await fault(["path": path, "status": .integer(429), "retryAfter": .integer(1), "count": .integer(1)])
        let refused = await Self.apiError { _ = try await api.client().transactionInfo(id) }
        #expect(refused?.status == 429 && refused?.code == .rateLimitExceeded && refused?.retryAfter != nil)

        // Retryable codes are retried with doubling back-off; the others are not.
        api.sleeps.withLock { $0 = [] }
        try await fault(["path": path, "errorCode": .integer(4_040_002), "count": .integer(2)])
        _ = try await api.client(retry: AppStoreServerAPIClient.RetryPolicy(maxAttempts: 3)).transactionInfo(id)
        #expect(api.sleeps.withLock { $0 } == [.milliseconds(500), .seconds(1)])
        try await fault(["path": path, "errorCode": .integer(5_000_001), "count": .integer(1)])
        _ = try await api.client(retry: AppStoreServerAPIClient.RetryPolicy(maxAttempts: 2)).transactionInfo(id)
        api.sleeps.withLock { $0 = [] }
        try await fault(["path": path, "errorCode": .integer(4_040_010), "count": .integer(1)])
        let final = await Self.apiError {
            _ = try await api.client(retry: AppStoreServerAPIClient.RetryPolicy(maxAttempts: 3)).transactionInfo(id)
        }
        #expect(final?.code == .transactionIdNotFound && api.sleeps.withLock { $0 }.isEmpty)

        // Listed, used up, cleared; a slow answer is slow but correct.
        try await fault(["path": path, "status": .integer(503)])
        let (_, listed) = try await api.harness.call("GET", "/_emulator/v1/faults")
        #expect(listed["faults"]?.arrayValue?.count == 1)
        let unavailable = await Self.apiError { _ = try await api.client().transactionInfo(id) }
        #expect(unavailable?.status == 503 && unavailable?.code == nil)
        let (cleared, _) = try await api.harness.call("DELETE", "/_emulator/v1/faults")
        #expect(cleared == 204)
        try await fault(["path": path, "delayMs": .integer(300), "count": .integer(1)])
        let clock = ContinuousClock()
        let start = clock.now
        _ = try await api.client().transactionInfo(id)
        #expect(clock.now - start >= .milliseconds(300))
        let (invalid, _) = try await api.harness.call("POST", "/_emulator/v1/faults", ["path": path])
        #expect(invalid == 400)

        // At most 1,000 configured at once (each request to Apple's endpoints looks through them): then 409.
        let never: JSONObject = ["path": .string("/nowhere/*"), "status": .integer(500)]
        #expect(try await api.harness.call("DELETE", "/_emulator/v1/faults").0 == 204)
        for _ in 0..<1_000 { try await fault(never) }
        let (full, refusal) = try await api.harness.call("POST", "/_emulator/v1/faults", never)
        #expect(full == 409 && refusal["error"]?["message"]?.stringValue?.contains("1000 faults") == true)
        #expect(try await api.harness.call("GET", "/_emulator/v1/faults").1["faults"]?.arrayValue?.count == 1_000)
        #expect(try await api.harness.call("DELETE", "/_emulator/v1/faults").0 == 204)

        // verifyReceipt's own faults: HTTP 200 with the status, `is-retryable` for 21100-21199 only.
        let receipt: JSONObject = ["receipt-data": .string("AAAA")]
        try await fault(
            ["path": .string("/sandbox/verifyReceipt"), "verifyReceiptStatus": .integer(21_005), "count": .integer(1)])
        try await fault([
            "path": .string("*verifyReceipt"), "verifyReceiptStatus": .integer(21_150), "retryable": .bool(false),
            "count": .integer(1),
        ])
        try await fault([
            "path": .string("*verifyReceipt"), "verifyReceiptStatus": .integer(21_199), "count": .integer(1),
        ])
        let (busyStatus, busy) = try await api.harness.call("POST", "/sandbox/verifyReceipt", receipt)
        #expect(busyStatus == 200 && busy["status"] == .integer(21_005) && busy["environment"] == .string("Sandbox"))
        #expect(busy["is-retryable"] == nil)
        let (_, lasting) = try await api.harness.call("POST", "/verifyReceipt", receipt)
        #expect(lasting["status"] == .integer(21_150) && lasting["environment"] == .string("Production"))
        #expect(lasting["is-retryable"] == .bool(false))
        let (_, passing) = try await api.harness.call(
            "POST", "/verifyReceipt", receipt, headers: [("Host", "sandbox.itunes.apple.com")])
        #expect(passing["status"] == .integer(21_199) && passing["environment"] == .string("Sandbox"))
        #expect(passing["is-retryable"] == .bool(true))
        let (_, real) = try await api.harness.call("POST", "/sandbox/verifyReceipt", receipt)
        #expect(real["status"] == .integer(21_002), "the faults are used up: \(real)")
        for body: JSONObject in [
            ["path": path, "status": .integer(500), "verifyReceiptStatus": .integer(21_005)],
            ["path": path, "verifyReceiptStatus": .integer(0)],
        ] {
            let (refused, answer) = try await api.harness.call("POST", "/_emulator/v1/faults", body)
            #expect(refused == 400, "\(answer)")
        }
    }

    @Test("Rate limits, when switched on, answer 429 with Retry-After per app, environment and endpoint")
    func rateLimits() async throws {
        let api = try await API.make()
        defer { api.stop() }
        let (status, settings) = try await api.harness.call(
            "PUT", "/_emulator/v1/rate-limits", ["enabled": .bool(true), "windowSeconds": .integer(1)])
        #expect(status == 200 && settings["enabled"] == .bool(true))
        let sink = try NotificationSink()
        try await NotificationTests.configure(api.harness, ["sandboxURL": .string(sink.url)])
        let client = try api.client()
        // Sandbox: a tenth of one request a second; the bucket holds one.
        _ = try await client.requestTestNotification()
        let limited = await Self.apiError { _ = try await client.requestTestNotification() }
        #expect(limited?.status == 429 && limited?.code == .rateLimitExceeded)
        // Apple's header is a UNIX time in milliseconds: the next request in ten seconds (the emulator's clock).
        #expect((limited?.retryAfter).map { $0.timeIntervalSince(api.time.now) > 5 } == true)
        // Another endpoint has its own budget.
        let (id, _) = try await api.buy("coins")
        #expect(try await client.transactionInfo(id).signedTransactionInfo != nil)
        // Each version of an endpoint its own: v2 history's five (a tenth of 50), then v1's.
        for _ in 0..<5 { _ = try await client.transactionHistory(id) }
        let sixth = await Self.apiError { _ = try await client.transactionHistory(id) }
        #expect(sixth?.status == 429)
        #expect(try await client.transactionHistory(id, version: 1).signedTransactions.count == 1)
        _ = try await api.harness.call("PUT", "/_emulator/v1/rate-limits", ["enabled": .bool(false)])
        _ = try await client.requestTestNotification()
    }

    @Test(
        "Retention Messaging's limits are Apple's: Configure Default Message 10 a second, every other endpoint 1, each its own"
    )
    func retentionRateLimits() async throws {
        let api = try await API.make()
        defer { api.stop() }
        // Ten seconds of requests a bucket: in the sandbox (a tenth) one for most endpoints, ten for the default.
        _ = try await api.harness.call(
            "PUT", "/_emulator/v1/rate-limits", ["enabled": .bool(true), "windowSeconds": .integer(10)])
        let client = try api.client()
        _ = try await client.imageList()
        let again = await Self.apiError { _ = try await client.imageList() }
        #expect(again?.status == 429, "one Get Image List in ten seconds of the sandbox")
        _ = try await client.messageList()
        let limited = await Self.apiError { _ = try await client.messageList() }
        #expect(limited?.status == 429, "Get Message List has a bucket of its own")
        // Configure Default Message's bucket holds ten (its refill is not waited for: only that ten pass).
        var statuses: [Int] = []
        for _ in 0..<10 {
            let error = await Self.apiError {
                try await client.configureDefaultMessage(
                    productID: "monthly", locale: "en-US", messageIdentifier: UUID())
            }
            statuses.append(error?.status ?? 200)
        }
        #expect(!statuses.contains(429), "\(statuses)")
    }
}

extension JSONObject {
    func merging(_ other: JSONObject) -> JSONObject {
        var result = self
        for member in other.members { result[member.key] = member.value }
        return result
    }
}

@Suite("App Store Server API vocabulary")
struct ServerAPIVocabularyTests {
    @Test("Retry-After is read as Apple documents it (UNIX milliseconds) or as seconds from now")
    func retryAfter() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(AppStoreServerAPIClient.retryAfter("1800000002500", now: now) == now.addingTimeInterval(2.5))
        #expect(AppStoreServerAPIClient.retryAfter("3", now: now) == now.addingTimeInterval(3))
        #expect(AppStoreServerAPIClient.retryAfter("soon", now: now) == nil)
        #expect(AppStoreServerAPIClient.retryAfter("-1", now: now) == nil)
        #expect(AppStoreServerAPIClient.retryAfter(nil, now: now) == nil)
    }

    @Test("Error codes carry their HTTP status and Apple's advice on retrying")
    func errorCodes() {
        #expect(APIErrorCode.transactionIdNotFound.httpStatus == 404)
        #expect(APIErrorCode.subscriptionMaxExtension.httpStatus == 403)
        #expect(APIErrorCode.rateLimitExceeded.httpStatus == 429)
        let retryable: [APIErrorCode] = [
            .accountNotFoundRetryable, .appNotFoundRetryable, .originalTransactionIdNotFoundRetryable,
            .generalInternalRetryable, .rateLimitExceeded,
        ]
        #expect(retryable.allSatisfy { $0.isRetryable })
        #expect(
            ![APIErrorCode.transactionIdNotFound, .generalBadRequest, .generalInternal].contains { $0.isRetryable })
        #expect(APIErrorCode(4_999_999).httpStatus == 499, "an unknown code keeps its raw value")
    }

    @Test("Every signed field of an answer is found, in arrays and nested objects, signedDate aside")
    func signedFields() {
        let answer: JSONValue = .object([
            "signedTransactions": .array([.string("a"), .string("b")]), "signedDate": .integer(1),
            "data": .array([.object(["lastTransactions": .array([.object(["signedRenewalInfo": .string("c")])])])]),
        ])
        #expect(AppStoreServerAPIClient.signedFields(of: answer) == ["a", "b", "c"])
    }
}

/// Our client's requests as Apple's own clients make them, seen by a plain local server.
@Suite("App Store Server API client: requests as Apple's clients send them")
struct ServerAPIClientRequestTests {
    final class Seen: Sendable {
        let requests = Mutex<[(method: String, path: String, contentType: String?)]>([])
    }

    @Test(
        "No Content-Type without a body; path segments percent-encoded per RFC 3986; an oversized answer is not sent again; a token lives at most an hour"
    )
    func requests() async throws {
        let seen = Seen()
        var router = Router()
        let record: @Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse = { request, _ in
            seen.requests.withLock { $0.append((request.method, request.path, request.header("Content-Type"))) }
            return HTTPResponse(
                status: 200, headers: [("Content-Type", "application/json")],
                body: Array(#"{"testNotificationToken": "t", "note": "\#(String(repeating: "x", count: 200))"}"#.utf8))
        }
        router.add("POST", "/inApps/v1/notifications/test", inline: record)
        router.add("GET", "/inApps/v1/transactions/{id}", inline: record)
        let server = try HTTPServer(port: 0, responder: router.freeze())
        defer { server.stop() }
        let key = try PrivateKey.generateP256()
        let sleeps = Mutex<[Duration]>([])
        func client(http: HTTPClient = HTTPClient()) -> AppStoreServerAPIClient {
            AppStoreServerAPIClient(
                key: key, keyID: "K", issuerID: "I", bundleID: "com.example.app",
                environment: .custom("http://127.0.0.1:\(server.port)"),
                retry: AppStoreServerAPIClient.RetryPolicy(maxAttempts: 4), http: http,
                sleep: { duration in sleeps.withLock { $0.append(duration) } })
        }
        _ = try await client().requestTestNotification()
        _ = try await client().transactionInfo("é 1")
        let requests = seen.requests.withLock { $0 }
        #expect(requests.first?.contentType == nil, "\(requests)")
        #expect(requests.last?.path == "/inApps/v1/transactions/%C3%A9%201", "\(requests)")
        // An answer past the size limit fails the same way every time: once, no waits.
        let small = client(http: HTTPClient(maxResponseBytes: 64))
        let error = await ServerAPITests.apiError { _ = try await small.transactionInfo("2") }
        #expect(error?.transport?.code == .responseTooLarge)
        #expect(seen.requests.withLock { $0.count } == 3 && sleeps.withLock { $0 }.isEmpty)
        // A token asked to live two hours lives one, which Apple accepts.
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let token = try APIToken.make(
            keyID: "K", issuerID: "I", bundleID: "com.example.app", key: key, now: now, lifetime: 7_200)
        let claims = try #require(AppStoreServerAPIClient.decodedPayload(token))
        #expect(claims["exp"]?.int64Value == 1_800_003_600)
        // Get Notification History is a POST that only reads: no answer (nothing listens) is tried again, as a
        // GET's would be; Request a Test Notification (a POST that acts) is not.
        sleeps.withLock { $0 = [] }
        let nowhere = AppStoreServerAPIClient(
            key: key, keyID: "K", issuerID: "I", bundleID: "com.example.app",
            environment: .custom("http://127.0.0.1:1"),
            retry: AppStoreServerAPIClient.RetryPolicy(maxAttempts: 3),
            sleep: { duration in sleeps.withLock { $0.append(duration) } })
        let history = await ServerAPITests.apiError {
            _ = try await nowhere.notificationHistory(NotificationHistoryRequest(startDate: now, endDate: now))
        }
        #expect(history?.kind == .transport && sleeps.withLock { $0.count } == 2)
        sleeps.withLock { $0 = [] }
        _ = await ServerAPITests.apiError { _ = try await nowhere.requestTestNotification() }
        #expect(sleeps.withLock { $0 }.isEmpty)
    }

    @Test("The API key the control plane mints comes with Cache-Control: no-store")
    func mintedKeyNotCached() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let response = await harness.responder.respond(
            to: HTTPRequest(
                method: "POST", path: "/_emulator/v1/apps/\(AppStoreTests.bundleID)/api-keys",
                headers: [("Host", "127.0.0.1:8080"), ("Content-Type", "application/json")], body: Array("{}".utf8)))
        #expect(response.status == 201)
        #expect(response.header("Cache-Control") == "no-store")
        #expect(try JSONParser.parse(response.body)["privateKey"]?.stringValue?.contains("PRIVATE KEY") == true)
    }
}
