import AppStoreEmulator
import AppStoreReceipts
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

/// The emulator driven through its HTTP responder (no sockets), with a fake real-time clock.
@Suite("App Store emulator")
struct AppStoreTests {
    static let bundleID = "com.example.storekeeper"
    static let catalogText = """
        {"identifier":"TEST","version":{"major":2,"minor":0},"settings":{"_timeRate":13},
         "products":[
          {"productID":"coins","type":"Consumable","displayPrice":"0.99","familyShareable":false,"internalID":"1","referenceName":"Coins",
           "localizations":[{"locale":"en_US","displayName":"Coins","description":"A pile of coins"}]},
          {"productID":"pro","type":"NonConsumable","displayPrice":"4.99","familyShareable":true,"internalID":"2","referenceName":"Pro",
           "localizations":[{"locale":"en_US","displayName":"Pro","description":"Everything"}]}],
         "nonRenewingSubscriptions":[
          {"productID":"season","type":"NonRenewingSubscription","displayPrice":"9.99","familyShareable":false,"internalID":"3","referenceName":"Season","localizations":[]}],
         "subscriptionGroups":[{"id":"6F3A93AB","name":"Plans","localizations":[],"subscriptions":[
          {"productID":"monthly","type":"RecurringSubscription","displayPrice":"2.99","familyShareable":false,"internalID":"4",
           "referenceName":"Monthly","subscriptionGroupID":"6F3A93AB","groupNumber":1,"recurringSubscriptionPeriod":"P1M",
           "introductoryOffer":null,"adHocOffers":[],"codeOffers":[],"localizations":[]}]}]}
        """

    /// A fake real clock the tests move by hand.
    final class FakeTime: Sendable {
        let value = Mutex(Date(timeIntervalSince1970: 1_704_067_200))
        var now: Date { value.withLock { $0 } }
    }

    struct Harness {
        let store: AppStore
        let responder: Responder
        let directory: URL

        static func make(
            directory: URL? = nil, time: FakeTime = FakeTime(), secret: String? = "s3cret", rate: TimeRate? = nil,
            maxEventsPerRequest: Int = AppStore.defaultMaxEventsPerRequest, otherApps: [String] = []
        ) async throws -> Harness {
            let directory = try directory ?? ExternalTool.temporaryDirectory()
            let catalog = try StoreKitConfiguration(data: Array(AppStoreTests.catalogText.utf8))
            let store = try await AppStore(
                catalog: [catalog],
                apps: [AppConfiguration(bundleID: AppStoreTests.bundleID, sharedSecret: secret)]
                    + otherApps.map { AppConfiguration(bundleID: $0, sharedSecret: secret) },
                dataDirectory: directory, rate: rate ?? catalog.settings.timeRate,
                maxEventsPerRequest: maxEventsPerRequest, realNow: { time.now })
            return Harness(store: store, responder: EmulatorRoutes(store).responder(), directory: directory)
        }

        func call(_ method: String, _ path: String, _ body: JSONObject? = nil, headers: [(String, String)] = [])
            async throws
            -> (Int, JSONValue)
        {
            // As a local client sends them: the Host it connected to, and JSON for anything that changes state.
            var all = headers
            if !headers.contains(where: { $0.0.lowercased() == "host" }) { all.append(("Host", "127.0.0.1:8080")) }
            if method != "GET", !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                all.append(("Content-Type", "application/json"))
            }
            let response = await responder.respond(
                to: HTTPRequest(
                    method: method, target: path, headers: all.map { (name: $0.0, value: $0.1) },
                    body: body.map { JSONWriter.bytes(.object($0)) } ?? []))
            return (response.status, response.body.isEmpty ? .null : try JSONParser.parse(response.body))
        }

        /// An account and a device with the app installed; returns the app's path prefix.
        func device(
            environment: String = "Sandbox", deviceID: String = "10111213-1415-4617-9819-1A1B1C1D1E1F",
            version: String = "1"
        )
            async throws -> String
        {
            let (_, account) = try await call(
                "POST", "/_emulator/v1/accounts", ["environment": .string(environment), "storefront": .string("USA")])
            let (status, device) = try await call(
                "POST", "/_emulator/v1/devices", ["accountId": account["accountId"]!, "deviceId": .string(deviceID)])
            #expect(status == 201)
            let prefix = "/_emulator/v1/devices/\(device["deviceId"]!.stringValue!)/apps/\(AppStoreTests.bundleID)"
            _ = try await call("POST", prefix + "/install", ["version": .string(version)])
            return prefix
        }

        /// A sandbox account with one device that has the app installed: the account id and the app's path.
        func accountAndApp() async throws -> (String, String) {
            let (_, account) = try await call("POST", "/_emulator/v1/accounts", ["environment": .string("Sandbox")])
            let accountID = account["accountId"]!.stringValue!
            let (_, device) = try await call("POST", "/_emulator/v1/devices", ["accountId": .string(accountID)])
            let app = "/_emulator/v1/devices/\(device["deviceId"]!.stringValue!)/apps/\(AppStoreTests.bundleID)"
            _ = try await call("POST", app + "/install", [:])
            return (accountID, app)
        }

        func receipt(_ prefix: String) async throws -> [UInt8] {
            let (_, body) = try await call("GET", prefix + "/receipt")
            return Array(Data(base64Encoded: body["receipt"]!.stringValue!)!)
        }
    }

    static let deviceBytes: [UInt8] = [
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x46, 0x17, 0x98, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    ]

    @Test(
        "A new account starts with the catalogue's Ask to Buy, failing purchases, renewal billing issues and grace period"
    )
    func catalogueAccountDefaults() async throws {
        let text = AppStoreTests.catalogText.replacingOccurrences(
            of: #""settings":{"#,
            with:
                #""settings":{"_askToBuyEnabled":true,"_failTransactionsEnabled":true,"_renewalBillingIssuesEnabled":true,"_billingGracePeriodEnabled":true,"#
        )
        let catalog = try StoreKitConfiguration(data: Array(text.utf8))
        #expect(catalog.settings.askToBuyEnabled, "the test's catalogue has a settings object to add to")
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: AppStoreTests.bundleID)],
            dataDirectory: try ExternalTool.temporaryDirectory())
        let account = try await store.createAccount(environment: .sandbox)
        #expect(account.askToBuy && account.purchaseFailure == .failed)
        #expect(account.billingRetryOnRenewal && account.billingGracePeriod)
        let plain = try await Harness.make()
        let usual = try await plain.store.createAccount(environment: .sandbox)
        #expect(!usual.askToBuy && usual.purchaseFailure == nil && !usual.billingRetryOnRenewal)
        // Xcode 15 and later write the purchase failure in _storeKitErrors (_failTransactionsEnabled stays false).
        let modern = AppStoreTests.catalogText.replacingOccurrences(
            of: #""settings":{"#,
            with:
                #""settings":{"_failTransactionsEnabled":false,"_storeKitErrors":[{"current":{"index":1,"type":"purchase"},"enabled":true,"name":"Purchase"},{"current":null,"enabled":false,"name":"Load Products"}],"#
        )
        let failing = try await AppStore(
            catalog: [try StoreKitConfiguration(data: Array(modern.utf8))],
            apps: [AppConfiguration(bundleID: AppStoreTests.bundleID)],
            dataDirectory: try ExternalTool.temporaryDirectory())
        #expect(try await failing.createAccount(environment: .sandbox).purchaseFailure == .failed)
    }

    @Test(
        "Product names: the _locale's localization, else the first that is not blank; groups without an id stay apart")
    func catalogueNamesAndGroups() throws {
        let text = #"""
            {"identifier":"N","version":{"major":4,"minor":0},"settings":{"_locale":"de_DE"},"products":[
              {"productID":"a","type":"NonConsumable","displayPrice":"1.99","familyShareable":false,"internalID":"1",
               "referenceName":"A","localizations":[{"locale":"en_US","displayName":"Lifetime"},{"locale":"de_DE","displayName":"Lebenslang"}]},
              {"productID":"b","type":"Consumable","displayPrice":"0.99","familyShareable":false,"internalID":"2",
               "referenceName":"B","localizations":[{"locale":"en_US","displayName":""},{"locale":"fr_FR","displayName":"Pièces"}]}],
             "subscriptionGroups":[
              {"name":"One","subscriptions":[{"productID":"s1","type":"RecurringSubscription","displayPrice":"2.99",
                "familyShareable":false,"internalID":"3","referenceName":"S1","groupNumber":1,"recurringSubscriptionPeriod":"P1M"}]},
              {"name":"Two","subscriptions":[{"productID":"s2","type":"RecurringSubscription","displayPrice":"2.99",
                "familyShareable":false,"internalID":"4","referenceName":"S2","groupNumber":1,"recurringSubscriptionPeriod":"P1M"}]}]}
            """#
        let configuration = try StoreKitConfiguration(data: Array(text.utf8))
        let names = configuration.products.map {
            Localization.displayName($0.localizations, locale: configuration.settings.locale)
        }
        #expect(names == ["Lebenslang", "Pièces"])
        let groups = configuration.subscriptions.map(\.groupID)
        #expect(groups.count == 2 && Set(groups).count == 2, "\(groups)")
    }

    @Test("Account and order ids are time-ordered on the store clock; an order id keeps Apple's ten A-Z0-9 characters")
    func timeOrderedIdentifiers() async throws {
        let time = FakeTime()
        let harness = try await Harness.make(time: time)
        let digits = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        var accounts: [String] = []
        var orders: [String] = []
        for _ in 0..<3 {
            let storeNow = harness.store.now
            let (account, app) = try await harness.accountAndApp()
            #expect(try await harness.call("POST", app + "/payments", ["productId": .string("coins")]).0 == 201)
            let (_, queue) = try await harness.call("GET", app + "/transactions")
            let order = try #require(queue["transactions"]?.arrayValue?.last?["orderId"]?.stringValue)
            // Version 7: the first 48 bits are the store time's milliseconds.
            let hex = account.replacingOccurrences(of: "-", with: "")
            #expect(UUID(uuidString: account) != nil && Array(hex)[12] == "7", "\(account) is a version 7 UUID")
            let milliseconds = try #require(Int64(hex.prefix(12), radix: 16))
            #expect(abs(Double(milliseconds) / 1000 - storeNow.timeIntervalSince1970) < 60, "\(account)")
            // Four base-36 digits of the store hour, then six random characters.
            #expect(order.count == 10 && order.allSatisfy { digits.contains($0) }, "\(order)")
            let hour = order.prefix(4).reduce(0) { $0 * 36 + (digits.firstIndex(of: $1) ?? 0) }
            #expect(abs(Double(hour * 3_600) - storeNow.timeIntervalSince1970) <= 3_600 * 2, "\(order)")
            accounts.append(account)
            orders.append(order)
            time.value.withLock { $0 = $0.addingTimeInterval(3_600) }  // an hour of real time: more of store time
        }
        #expect(accounts == accounts.sorted() && Set(accounts).count == 3, "\(accounts)")
        #expect(orders.map { $0.prefix(4) } == orders.map { $0.prefix(4) }.sorted(), "\(orders)")
        #expect(Set(orders.map { $0.prefix(4) }).count == 3, "\(orders)")
    }

    @Test("Products report invalid identifiers; each product kind can be bought; the queue keeps unfinished ones")
    func purchases() async throws {
        let harness = try await Harness.make()
        let app = try await harness.device()
        let (_, products) = try await harness.call("GET", app + "/products?ids=coins,monthly,nope")
        #expect(products["products"]?.arrayValue?.count == 2)
        #expect(products["invalidProductIdentifiers"] == .array([.string("nope")]))
        var ids: [String] = []
        for product in ["coins", "pro", "season", "monthly"] {
            let (status, body) = try await harness.call("POST", app + "/payments", ["productId": .string(product)])
            #expect(status == 201)
            #expect(body["transaction"]?["state"] == .string("purchased"))
            #expect(body["jwsRepresentation"]?.stringValue?.split(separator: ".").count == 3)
            ids.append(body["transaction"]!["transactionIdentifier"]!.stringValue!)
        }
        let (_, queue) = try await harness.call("GET", app + "/transactions")
        #expect(queue["transactions"]?.arrayValue?.compactMap { $0["transactionIdentifier"]?.stringValue } == ids)
        // Still there on every fetch until finished.
        #expect(try await harness.call("GET", app + "/transactions").1["transactions"]?.arrayValue?.count == 4)
        #expect(try await harness.call("POST", app + "/transactions/\(ids[0])/finish").0 == 204)
        #expect(try await harness.call("GET", app + "/transactions").1["transactions"]?.arrayValue?.count == 3)
        #expect(try await harness.call("POST", app + "/transactions/999/finish").0 == 404)
        let (_, restored) = try await harness.call("POST", app + "/restore")
        #expect(restored["transactions"]?.arrayValue?.allSatisfy { $0["state"] == .string("restored") } == true)
        #expect(restored["transactions"]?.arrayValue?.count == 3)
        // Caller mistakes are 4xx JSON errors.
        #expect(try await harness.call("POST", app + "/payments", ["productId": .string("nope")]).0 == 404)
        #expect(
            try await harness.call("POST", app + "/payments", ["productId": .string("pro"), "quantity": .integer(2)]).0
                == 400)
        #expect(
            try await harness.call("POST", "/_emulator/v1/devices/x/apps/y/payments", ["productId": .string("pro")]).0
                == 404)
        #expect(try await harness.call("POST", "/_emulator/v1/accounts", ["environment": .string("Moon")]).0 == 400)
    }

    @Test(
        "The receipt verifies against the exported root, with the device hash, and holds what Apple's rules put there")
    func receipt() async throws {
        let harness = try await Harness.make()
        let app = try await harness.device()
        var coins = ""
        for product in ["coins", "pro", "monthly"] {
            let (_, body) = try await harness.call("POST", app + "/payments", ["productId": .string(product)])
            if product == "coins" { coins = body["transaction"]!["transactionIdentifier"]!.stringValue! }
        }
        let (_, certificates) = try await harness.call("GET", "/_emulator/v1/certificates")
        let root = try Certificate(derEncoded: Data(base64Encoded: certificates["receiptRoot"]!.stringValue!)!)
        let verifier = ReceiptVerifier(trustedRoots: [root])
        let expectations = ReceiptExpectations(
            bundleID: Self.bundleID, bundleVersion: "1", deviceIdentifier: Self.deviceBytes)
        let now = harness.store.now
        let first = verifier.verify(try await harness.receipt(app), expecting: expectations, now: now)
        #expect(first.isValid, "\(String(describing: first.failure))")
        #expect(Set(first.receipt?.inAppPurchases.map(\.productID) ?? []) == ["coins", "pro", "monthly"])
        #expect(first.receipt?.receiptType == "ProductionSandbox")
        #expect(first.receipt?.originalAppVersion == "1")
        // A finished consumable leaves the receipt; the rest stay.
        _ = try await harness.call("POST", app + "/transactions/\(coins)/finish")
        let second = verifier.verify(try await harness.receipt(app), expecting: expectations, now: now)
        #expect(Set(second.receipt?.inAppPurchases.map(\.productID) ?? []) == ["pro", "monthly"])
        // An update keeps the original version (paid-to-free checks rely on it).
        let (_, install) = try await harness.call("POST", app + "/install", ["version": .string("2")])
        #expect(
            install.objectValue?.keys.sorted() == [
                "applicationVersion", "bundleId", "originalApplicationVersion", "originalPurchaseDate", "receiptType",
            ])
        #expect(install["applicationVersion"] == .string("2"))
        #expect(install["originalApplicationVersion"] == .string("1"))
        #expect(install["originalPurchaseDate"]?.int64Value != nil, "epoch milliseconds like every emulator date")
        let updated = try #require(
            verifier.verify(try await harness.receipt(app), expecting: .init(), now: now).receipt)
        #expect(updated.appVersion == "2")
        #expect(updated.originalAppVersion == "1")
    }

    @Test(
        "A later device of the account: its install, receipt and app transaction carry the account's original date and version"
    )
    func originalOfAccount() async throws {
        let harness = try await Harness.make()
        let (_, account) = try await harness.call(
            "POST", "/_emulator/v1/accounts", ["environment": .string("Sandbox"), "storefront": .string("USA")])
        func install(_ version: String) async throws -> (app: String, answer: JSONValue) {
            let deviceID = UUID().uuidString
            let (status, _) = try await harness.call(
                "POST", "/_emulator/v1/devices", ["accountId": account["accountId"]!, "deviceId": .string(deviceID)])
            #expect(status == 201)
            let app = "/_emulator/v1/devices/\(deviceID)/apps/\(Self.bundleID)"
            return (app, try await harness.call("POST", app + "/install", ["version": .string(version)]).1)
        }
        let first = try await install("1")
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let later = try await install("3")
        #expect(later.answer["applicationVersion"] == .string("3"))
        #expect(later.answer["originalApplicationVersion"] == .string("1"))
        let original = try #require(first.answer["originalPurchaseDate"]?.int64Value)
        #expect(later.answer["originalPurchaseDate"]?.int64Value == original)
        let (_, appTransaction) = try await harness.call("GET", later.app + "/app-transaction")
        let payload = try CompactJWS(try #require(appTransaction["signedAppTransaction"]?.stringValue)).payload
        #expect(payload["originalApplicationVersion"] == .string("1"))
        #expect(payload["originalPurchaseDate"]?.int64Value == original)
        #expect(payload["applicationVersion"] == .string("3"))
        let receipt = try #require(
            ReceiptVerifier(trustedRoots: [harness.store.pki.receipts.root]).verify(
                try await harness.receipt(later.app), expecting: .init(), now: harness.store.now
            ).receipt)
        #expect(receipt.originalAppVersion == "1" && receipt.appVersion == "3")
    }

    @Test("Signed transactions, entitlements and the app transaction verify against the exported JWS root")
    func signedData() async throws {
        let harness = try await Harness.make()
        let app = try await harness.device()
        let (_, bought) = try await harness.call(
            "POST", app + "/payments",
            ["productId": .string("monthly"), "appAccountToken": .string("7E3B1C1A-0000-4000-8000-000000000001")])
        let (_, certificates) = try await harness.call("GET", "/_emulator/v1/certificates")
        let root = try Certificate(derEncoded: Data(base64Encoded: certificates["jwsRoot"]!.stringValue!)!)
        let verifier = try SignedDataVerifier(
            .init(trustedRoots: [root], bundleID: Self.bundleID, environment: "Sandbox"))
        let now = harness.store.now
        let transaction = verifier.verify(bought["jwsRepresentation"]!.stringValue!, now: now)
        #expect(transaction.status == .ok, "\(transaction.reason ?? "")")
        #expect(transaction.payload?["appAccountToken"] == .string("7e3b1c1a-0000-4000-8000-000000000001"))
        #expect(transaction.payload?["subscriptionGroupIdentifier"] == .string("6F3A93AB"))
        #expect(transaction.payload?["price"] == .integer(2990))
        let (_, entitlements) = try await harness.call("GET", app + "/entitlements")
        let signed = try #require(entitlements["signedTransactions"]?.arrayValue)
        #expect(signed.count == 1)
        #expect(signed.allSatisfy { verifier.verify($0.stringValue!, now: now).status == .ok })
        let (_, appTransaction) = try await harness.call("GET", app + "/app-transaction")
        let decoded = verifier.verify(
            appTransaction["signedAppTransaction"]!.stringValue!, as: .appTransaction, now: now)
        #expect(decoded.status == .ok)
        #expect(decoded.payload?["originalApplicationVersion"] == .string("1"))
    }

    @Test("Advancing the clock a month renews; renewals stop after twelve in the sandbox")
    func renewals() async throws {
        let harness = try await Harness.make()
        let app = try await harness.device()
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        let (_, clock) = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        #expect(clock["rate"] == .string("monthlyRenewalEveryFiveMinutes"))
        #expect(clock["ran"] == .object(["renewals": .integer(1), "expirations": .integer(0)]))
        let verifier = ReceiptVerifier(trustedRoots: [harness.store.pki.receipts.root])
        func monthly() async throws -> [InAppPurchase] {
            let receipt = try #require(
                verifier.verify(try await harness.receipt(app), expecting: .init(), now: harness.store.now)
                    .receipt)
            return receipt.inAppPurchases.filter { $0.productID == "monthly" }.sorted {
                $0.purchaseDate < $1.purchaseDate
            }
        }
        let afterOne = try await monthly()
        #expect(afterOne.count == 2)
        #expect(Set(afterOne.map(\.originalTransactionID)).count == 1)
        #expect(afterOne[1].purchaseDate == afterOne[0].expiresDate)
        #expect(afterOne[1].expiresDate!.timeIntervalSince(afterOne[1].purchaseDate) == 300)
        var renewed: Int64 = 0
        var expired: Int64 = 0
        for _ in 0..<14 {
            let (_, later) = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
            renewed += later["ran"]?["renewals"]?.int64Value ?? 0
            expired += later["ran"]?["expirations"]?.int64Value ?? 0
        }
        #expect(renewed == 11 && expired == 1, "the rest of the sandbox's twelve renewals, then one expiry")
        #expect(try await monthly().count == 13)  // the purchase and twelve renewals
        let (_, entitlements) = try await harness.call("GET", app + "/entitlements")
        #expect(entitlements["signedTransactions"]?.arrayValue?.isEmpty == true)
        #expect(try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("one month")]).0 == 400)
        #expect(try await harness.call("POST", "/_emulator/v1/clock", ["rate": .string("warp")]).0 == 400)
        #expect(
            try await harness.call("POST", "/_emulator/v1/clock", ["rate": .string("realTime")]).1["rate"]
                == .string("realTime"))
    }

    @Test("Real time passing at the store's rate renews without an explicit advance")
    func realTimeRenewal() async throws {
        let time = FakeTime()
        let harness = try await Harness.make(time: time)
        let app = try await harness.device()
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        time.value.withLock { $0 = $0.addingTimeInterval(11 * 60) }  // two scaled months at monthly/5 min
        let receipt = try #require(
            ReceiptVerifier(trustedRoots: [harness.store.pki.receipts.root]).verify(
                try await harness.receipt(app), expecting: .init(), now: harness.store.now
            ).receipt)
        #expect(receipt.inAppPurchases.filter { $0.productID == "monthly" }.count == 3)
    }

    @Test("verifyReceipt answers 0, 21000, 21002, 21003, 21004, 21007, 21008 and 21010 where they apply")
    func verifyReceipt() async throws {
        let harness = try await Harness.make()
        let sandbox = try await harness.device()
        _ = try await harness.call("POST", sandbox + "/payments", ["productId": .string("monthly")])
        _ = try await harness.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        let production = try await harness.device(
            environment: "Production", deviceID: "20111213-1415-4617-9819-1A1B1C1D1E1F")
        let sandboxReceipt = Data(try await harness.receipt(sandbox)).base64EncodedString()
        let productionReceipt = Data(try await harness.receipt(production)).base64EncodedString()
        func status(_ path: String, _ body: JSONObject?, raw: [UInt8]? = nil, headers: [(String, String)] = [])
            async throws -> JSONValue
        {
            if let raw {
                let response = await harness.responder.respond(to: HTTPRequest(method: "POST", path: path, body: raw))
                return try JSONParser.parse(response.body)
            }
            return try await harness.call("POST", path, body, headers: headers).1
        }
        let ok = try await status("/sandbox/verifyReceipt", ["receipt-data": .string(sandboxReceipt)])
        #expect(ok["status"] == .integer(0))
        #expect(ok["environment"] == .string("Sandbox"))
        #expect(ok["receipt"]?["bundle_id"] == .string(Self.bundleID))
        #expect(ok["receipt"]?["raw"] == nil)
        #expect(ok["latest_receipt_info"] == nil)
        #expect(
            try await status("/verifyReceipt", ["receipt-data": .string(sandboxReceipt)])["status"] == .integer(21007))
        #expect(
            try await status("/sandbox/verifyReceipt", ["receipt-data": .string(productionReceipt)])["status"]
                == .integer(21008))
        #expect(
            try await status("/verifyReceipt", ["receipt-data": .string(productionReceipt)])["status"] == .integer(0))
        #expect(
            try await status(
                "/verifyReceipt", ["receipt-data": .string(sandboxReceipt)],
                headers: [("Host", "sandbox.itunes.apple.com")])[
                    "status"] == .integer(0))
        #expect(try await status("/verifyReceipt", nil, raw: Array("not json".utf8))["status"] == .integer(21000))
        #expect(try await status("/verifyReceipt", ["receipt-data": .string("AAAA")])["status"] == .integer(21002))
        #expect(try await status("/verifyReceipt", ["password": .string("x")])["status"] == .integer(21002))
        let forged = Data(try ReceiptFixtures.signed(ReceiptFixtures.receipt(receiptType: "ProductionSandbox")))
            .base64EncodedString()
        #expect(
            try await status("/sandbox/verifyReceipt", ["receipt-data": .string(forged)])["status"] == .integer(21003))
        #expect(
            try await status(
                "/sandbox/verifyReceipt", ["receipt-data": .string(sandboxReceipt), "password": .string("wrong")])[
                    "status"]
                == .integer(21004))
        let pki = harness.store.pki
        let stranger = try Receipt.example(
            bundleID: "com.example.unknown", creationDate: harness.store.now, deviceIdentifier: Self.deviceBytes,
            receiptType: "ProductionSandbox"
        ).signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
        #expect(
            try await status("/sandbox/verifyReceipt", ["receipt-data": .string(Data(stranger).base64EncodedString())])[
                "status"]
                == .integer(21010))
        // With the shared secret: latest_receipt_info (all renewals, or the newest only) and pending_renewal_info.
        let full = try await status(
            "/sandbox/verifyReceipt", ["receipt-data": .string(sandboxReceipt), "password": .string("s3cret")])
        #expect(full["latest_receipt_info"]?.arrayValue?.count == 2)
        #expect(full["latest_receipt_info"]?.arrayValue?.first?["subscription_group_identifier"] == .string("6F3A93AB"))
        #expect(full["pending_renewal_info"]?.arrayValue?.first?["auto_renew_status"] == .string("1"))
        #expect(full["latest_receipt"]?.stringValue != nil)
        let newest = try await status(
            "/sandbox/verifyReceipt",
            [
                "receipt-data": .string(sandboxReceipt), "password": .string("s3cret"),
                "exclude-old-transactions": .bool(true),
            ])
        #expect(newest["latest_receipt_info"]?.arrayValue?.count == 1)
        #expect(try await harness.call("GET", "/verifyReceipt").1["status"] == .integer(21000))
    }

    @Test("A restart on the same data directory finds every account, device, transaction and certificate")
    func persistence() async throws {
        let time = FakeTime()
        let first = try await Harness.make(time: time)
        let app = try await first.device()
        _ = try await first.call("POST", app + "/payments", ["productId": .string("pro")])
        _ = try await first.call("POST", "/_emulator/v1/clock", ["advance": .string("P1W")])
        let root = first.store.pki.receipts.root
        let clock = first.store.now
        // A second emulator on a directory in use is refused, with the reason.
        await #expect(throws: EmulatorError.self) { _ = try await Harness.make(directory: first.directory, time: time) }
        first.store.close()
        let second = try await Harness.make(directory: first.directory, time: time)
        #expect(second.store.pki.receipts.root == root)
        #expect(second.store.now == clock)
        let (_, queue) = try await second.call("GET", app + "/transactions")
        #expect(queue["transactions"]?.arrayValue?.first?["productIdentifier"] == .string("pro"))
        let receipt = ReceiptVerifier(trustedRoots: [root]).verify(
            try await second.receipt(app), expecting: .init(), now: clock)
        #expect(receipt.isValid)
    }

    @Test("Identifiers a run of renewals gave are not given again after a restart (its counters are stored)")
    func countersAfterRenewals() async throws {
        let time = FakeTime()
        let first = try await Harness.make(time: time)
        let app = try await first.device()
        #expect(try await first.call("POST", app + "/payments", ["productId": .string("monthly")]).0 == 201)
        // Three renewals, in the scheduler's run of due events (its counters stored once, before it commits).
        _ = try await first.call("POST", "/_emulator/v1/clock", ["advance": .string("P3M")])
        #expect(try await first.store.transactionCount() == 4)
        first.store.close()
        let second = try await Harness.make(directory: first.directory, time: time)
        // A purchase and a renewal after the restart: each a new transaction id (a repeated one is refused as a
        // duplicate row) and a new web order line item id.
        #expect(try await second.call("POST", app + "/payments", ["productId": .string("coins")]).0 == 201)
        _ = try await second.call("POST", "/_emulator/v1/clock", ["advance": .string("P1M")])
        #expect(try await second.store.transactionCount() == 6)
        let (_, unfinished) = try await second.call("GET", app + "/transactions")
        let ids = (unfinished["transactions"]?.arrayValue ?? []).compactMap { $0["transactionIdentifier"]?.stringValue }
        #expect(ids.count == 6 && Set(ids).count == 6)
        var lineItems: [Int64] = []
        for id in ids {
            if let item = try await second.store.transactionAndSubscription(id).transaction.transaction
                .webOrderLineItemID
            {
                lineItems.append(item)
            }
        }
        #expect(lineItems.count == 5 && Set(lineItems).count == 5)
    }

    @Test("Products taken off sale and put back at once: what is stored is what the store uses, every time")
    func availabilityAtOnce() async throws {
        let harness = try await Harness.make()
        let products = ["coins", "monthly", "pro", "season"]
        let path = harness.directory.appendingPathComponent("store.sqlite").path
        for round in 0..<20 {
            let forSale = round % 2 == 1
            try await withThrowingTaskGroup(of: Void.self) { group in
                for product in products {
                    group.addTask { try await harness.store.setAvailability(productID: product, forSale: forSale) }
                }
                try await group.waitForAll()
            }
            let stored = try await SQLiteEmulatorStorage(path: path).read { try $0.setting("productsNotForSale") }
            #expect(stored == (forSale ? "" : products.sorted().joined(separator: ",")), "round \(round)")
        }
    }

    @Test("A mass extension a stopped emulator left incomplete goes on at the next start, from where it got to")
    func massExtensionResumed() async throws {
        let first = try await Harness.make()
        for _ in 0..<3 {
            let (_, app) = try await first.accountAndApp()
            #expect(try await first.call("POST", app + "/payments", ["productId": .string("monthly")]).0 == 201)
        }
        first.store.close()
        let path = first.directory.appendingPathComponent("store.sqlite").path
        let ids = try await SQLiteEmulatorStorage(path: path).read { try $0.subscriptionIDs(renewingTo: "monthly") }
        try #require(ids.count == 3)
        // As a process stopped after its first batch leaves it: one subscription gone through and counted.
        let left = MassExtension(
            requestIdentifier: "outage", productID: "monthly", environment: .sandbox, storefronts: nil, succeeded: 1,
            resume: MassExtension.Resume(bundleID: AppStoreTests.bundleID, days: 3, reason: 1, after: ids[0].rawValue))
        try await SQLiteEmulatorStorage(path: path).write { try $0.save(left) }
        let second = try await Harness.make(directory: first.directory)
        second.store.startScheduler(granularity: .milliseconds(20))
        var done: MassExtension?
        for _ in 0..<500 {
            done = try await SQLiteEmulatorStorage(path: path).read {
                try $0.massExtension(productID: "monthly", requestIdentifier: "outage")
            }
            if done?.complete == true { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(done?.complete == true && done?.succeeded == 3 && done?.failed == 0)
        let extended = try await SQLiteEmulatorStorage(path: path).read { store in
            try ids.map { try store.renewalExtensions(original: $0).count }
        }
        #expect(extended == [0, 1, 1], "the two it had not been through, each once")
        second.store.close()
    }

    @Test("A stored clock offset that is not one (not a number, infinite, past centuries) is refused at open")
    func storedClockOffset() async throws {
        let first = try await Harness.make()
        _ = try await first.call("POST", "/_emulator/v1/clock", ["advance": .string("P1D")])
        first.store.close()
        let path = first.directory.appendingPathComponent("store.sqlite").path
        for bad in ["nan", "inf", "-inf", "1e300", "10000000000", "x"] {
            do {
                let storage = try await SQLiteEmulatorStorage(path: path)
                try await storage.write { try $0.setSetting("clockOffset", bad) }
            }
            await #expect(throws: EmulatorStorageError.self, "\(bad)") {
                _ = try await Harness.make(directory: first.directory)
            }
        }
        // A real offset opens, the store's clock a day ahead of the wall clock.
        do {
            let storage = try await SQLiteEmulatorStorage(path: path)
            try await storage.write { try $0.setSetting("clockOffset", "86400.5") }
        }
        let reopened = try await Harness.make(directory: first.directory)
        #expect(abs(reopened.store.clockOffset - 86_400.5) < 0.001)
    }
}

/// The emulator's signed data through Apple's own Python library, trusting the exported root.
@Suite(
    "Emulator JWS in Apple's Python library",
    .enabled(if: PythonInterop.python != nil, Comment(rawValue: PythonInterop.missingMessage)))
struct EmulatorPythonInteropTests {
    @Test(
        "Apple's SignedDataVerifier accepts the emulator's transactions, renewal-free entitlements and app transaction")
    func accepted() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let app = try await harness.device()
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("monthly")])
        let (_, appTransaction) = try await harness.call("GET", app + "/app-transaction")
        let root = harness.store.pki.signedData.root
        var input = ""
        for (token, type) in [
            (bought["jwsRepresentation"]!.stringValue!, "transaction"),
            (appTransaction["signedAppTransaction"]!.stringValue!, "app-transaction"),
        ] {
            let line: JSONObject = [
                "token": .string(token), "roots": .array([.string(Data(root.derEncoded).base64EncodedString())]),
                "environment": .string("Sandbox"), "bundleId": .string(AppStoreTests.bundleID),
                "appAppleId": .integer(1_234_567_890),
                "type": .string(type), "strict": .bool(true),
            ]
            input += JSONWriter.string(.object(line)) + "\n"
        }
        let run = try ExternalTool.run(
            try #require(PythonInterop.python), [PythonInterop.verifierScript], stdin: Array(input.utf8))
        #expect(run.status == 0, "\(run.stderrText)")
        #expect(run.stdoutText.split(separator: "\n").map(String.init) == [#"{"status": "OK"}"#, #"{"status": "OK"}"#])
    }
}

@Suite("Emulator: Ask to Buy, failure injection and volume purchase")
struct AppStoreScenarioTests {
    typealias Harness = AppStoreTests.Harness

    @Test("Ask to Buy: deferred until approved (a purchase arrives) or declined (a failed transaction arrives)")
    func askToBuy() async throws {
        let harness = try await Harness.make()
        let (accountID, app) = try await harness.accountAndApp()
        let (_, settings) = try await harness.call(
            "POST", "/_emulator/v1/accounts/\(accountID)/settings", ["askToBuy": .bool(true)])
        #expect(settings["askToBuy"] == .bool(true))
        let (_, first) = try await harness.call("POST", app + "/payments", ["productId": .string("pro")])
        #expect(first["transaction"]?["state"] == .string("deferred"))
        #expect(first["jwsRepresentation"] == .null)
        let deferredID = first["transaction"]!["transactionIdentifier"]!.stringValue!
        #expect(try await harness.call("POST", app + "/transactions/\(deferredID)/finish").0 == 400)
        let (_, second) = try await harness.call("POST", app + "/payments", ["productId": .string("coins")])
        let declinedID = second["transaction"]!["transactionIdentifier"]!.stringValue!
        let (approvedStatus, approved) = try await harness.call(
            "POST", "/_emulator/v1/accounts/\(accountID)/requests/\(deferredID)/approve")
        #expect(approvedStatus == 200)
        #expect(approved["state"] == .string("purchased"))
        let (_, declined) = try await harness.call(
            "POST", "/_emulator/v1/accounts/\(accountID)/requests/\(declinedID)/decline")
        #expect(declined["state"] == .string("failed"))
        #expect(declined["error"]?["code"] == .string("declined"))
        let queue = try await harness.call("GET", app + "/transactions").1["transactions"]?.arrayValue ?? []
        #expect(Set(queue.compactMap { $0["state"]?.stringValue }) == ["purchased", "failed"])
        #expect(
            try await harness.call("POST", "/_emulator/v1/accounts/\(accountID)/requests/\(deferredID)/approve").0
                == 404)
        let receipt = try #require(
            ReceiptVerifier(trustedRoots: [harness.store.pki.receipts.root]).verify(
                try await harness.receipt(app), expecting: .init(), now: harness.store.now
            ).receipt)
        #expect(receipt.inAppPurchases.map(\.productID) == ["pro"])
    }

    @Test("Injected failures: failed payments stay out of the receipt; interrupted ones complete when resolved")
    func failures() async throws {
        let harness = try await Harness.make()
        let (accountID, app) = try await harness.accountAndApp()
        _ = try await harness.call(
            "POST", "/_emulator/v1/accounts/\(accountID)/settings", ["purchaseFailure": .string("failed")])
        let (_, failed) = try await harness.call("POST", app + "/payments", ["productId": .string("pro")])
        #expect(failed["transaction"]?["state"] == .string("failed"))
        _ = try await harness.call(
            "POST", "/_emulator/v1/accounts/\(accountID)/settings", ["purchaseFailure": .string("interrupted")])
        let (_, interrupted) = try await harness.call("POST", app + "/payments", ["productId": .string("season")])
        #expect(interrupted["transaction"]?["error"]?["code"] == .string("interrupted"))
        #expect(
            try await harness.call(
                "POST", "/_emulator/v1/accounts/\(accountID)/settings", ["purchaseFailure": .string("odd")]
            ).0 == 400)
        _ = try await harness.call("POST", "/_emulator/v1/accounts/\(accountID)/settings", ["purchaseFailure": .null])
        let (_, resolved) = try await harness.call("POST", "/_emulator/v1/accounts/\(accountID)/interruptions/resolve")
        #expect(resolved["transactions"]?.arrayValue?.first?["productIdentifier"] == .string("season"))
        #expect(
            try await harness.call("POST", "/_emulator/v1/accounts/\(accountID)/interruptions/resolve").1[
                "transactions"] == .array([]))
        let receipt = try #require(
            ReceiptVerifier(trustedRoots: [harness.store.pki.receipts.root]).verify(
                try await harness.receipt(app), expecting: .init(), now: harness.store.now
            ).receipt)
        #expect(receipt.inAppPurchases.map(\.productID) == ["season"])
    }

    @Test("Volume purchase: VPP receipt type; after a revocation the receipt expires 30 days later; refresh properties")
    func volumePurchase() async throws {
        let harness = try await Harness.make()
        let app = try await harness.device()
        #expect(try await harness.call("POST", app + "/vpp", ["action": .string("revoke")]).0 == 400)
        _ = try await harness.call("POST", app + "/vpp", ["action": .string("assign")])
        let root = harness.store.pki.receipts.root
        let verifier = ReceiptVerifier(trustedRoots: [root])
        let now = harness.store.now
        let assigned = verifier.verify(try await harness.receipt(app), expecting: .init(), now: now)
        #expect(assigned.receipt?.receiptType == "ProductionVPPSandbox")
        #expect(assigned.receipt?.expirationDate == nil)
        let (_, revoked) = try await harness.call("POST", app + "/vpp", ["action": .string("revoke")])
        #expect(revoked["expiresAt"] != nil)
        let afterRevocation = try await harness.receipt(app)
        #expect(verifier.verify(afterRevocation, expecting: .init(), now: now).isValid)
        #expect(
            verifier.verify(afterRevocation, expecting: .init(), now: now.addingTimeInterval(31 * 86_400)).failure?.code
                == .receiptExpired)
        let (_, expiredBody) = try await harness.call("GET", app + "/receipt?expired=1")
        let expired = Array(Data(base64Encoded: expiredBody["receipt"]!.stringValue!)!)
        #expect(
            verifier.verify(expired, expecting: .init(), now: now.addingTimeInterval(1)).failure?.code
                == .receiptExpired)
        // verifyReceipt reports the VPP type and the expiry.
        let (_, answer) = try await harness.call(
            "POST", "/sandbox/verifyReceipt", ["receipt-data": .string(Data(afterRevocation).base64EncodedString())])
        #expect(answer["status"] == .integer(0))
        #expect(answer["receipt"]?["receipt_type"] == .string("ProductionVPPSandbox"))
        #expect(answer["receipt"]?["expiration_date_ms"] != nil)
        // Past its expiry, too: status 0 and the date, which the client compares (not 21003, a forgery's).
        let (_, lapsed) = try await harness.call(
            "POST", "/sandbox/verifyReceipt", ["receipt-data": .string(Data(expired).base64EncodedString())])
        #expect(lapsed["status"] == .integer(0), "\(lapsed)")
        let lapsedAt = try #require(lapsed["receipt"]?["expiration_date_ms"]?.stringValue.flatMap { Int64($0) })
        #expect(lapsedAt <= EpochMilliseconds.milliseconds(harness.store.now))
    }
}

/// The emulator's receipts read by independent tools: `openssl cms -verify` and Python's asn1crypto.
@Suite("Emulator receipts in independent tools")
struct EmulatorReceiptInteropTests {
    @Test(
        "openssl cms -verify accepts the receipt against the exported root",
        .enabled(if: ExternalTool.find("openssl") != nil, "openssl not on PATH"))
    func openssl() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let app = try await harness.device()
        _ = try await harness.call("POST", app + "/payments", ["productId": .string("pro")])
        let directory = try ExternalTool.temporaryDirectory()
        let receipt = directory.appendingPathComponent("receipt.der")
        let root = directory.appendingPathComponent("root.pem")
        try Data(try await harness.receipt(app)).write(to: receipt)
        try Data(harness.store.pki.receipts.root.pemEncoded.utf8).write(to: root)
        let run = try ExternalTool.run(
            try #require(ExternalTool.find("openssl")),
            [
                "cms", "-verify", "-inform", "DER", "-binary", "-purpose", "any", "-CAfile", root.path, "-in",
                receipt.path, "-out", "/dev/null",
            ])
        #expect(run.status == 0, "\(run.stderrText)")
    }

    @Test(
        "asn1crypto reads the fields and reproduces the device hash",
        .enabled(if: PythonInterop.python != nil, Comment(rawValue: PythonInterop.missingMessage)))
    func asn1crypto() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let app = try await harness.device()
        let (_, bought) = try await harness.call("POST", app + "/payments", ["productId": .string("pro")])
        let file = try ExternalTool.temporaryDirectory().appendingPathComponent("receipt.der")
        try Data(try await harness.receipt(app)).write(to: file)
        let script = PythonInterop.verifierScript.replacingOccurrences(of: "apple_verify.py", with: "asn1_receipt.py")
        let run = try ExternalTool.run(
            try #require(PythonInterop.python), [script, file.path, "10111213-1415-4617-9819-1A1B1C1D1E1F"])
        #expect(run.status == 0, "\(run.stderrText)")
        let output = try JSONParser.parse(run.stdout)
        #expect(output["receipt_type"] == .string("ProductionSandbox"))
        #expect(output["bundle_id"] == .string(AppStoreTests.bundleID))
        #expect(output["version"] == .string("1"))
        #expect(output["device_hash_matches"] == .bool(true))
        #expect(output["purchases"]?.arrayValue?.first?["1703"] == bought["transaction"]?["transactionIdentifier"])
    }
}

@Suite(
    "Emulator with real .storekit files", .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
struct EmulatorVectorCatalogTests {
    @Test("Every product of Apple's sample catalogue can be bought and lands in the receipt")
    func appleSample() async throws {
        let catalog = try StoreKitConfiguration(
            data: Vectors.bytes("storekit/01-apple-sample-SKDemo-Products.v2_0.storekit"))
        let directory = try ExternalTool.temporaryDirectory()
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: "com.example.skdemo")], dataDirectory: directory,
            rate: catalog.settings.timeRate)
        let account = try await store.createAccount(environment: .sandbox, storefront: "USA")
        let device = try await store.createDevice(accountID: account.id, deviceID: nil).id.rawValue
        _ = try await store.install(deviceID: device, bundleID: "com.example.skdemo", version: "1")
        let identifiers = catalog.products.map(\.productID) + catalog.subscriptions.map(\.productID)
        #expect(store.products(identifiers).invalid.isEmpty)
        for identifier in identifiers {
            _ = try await store.pay(
                deviceID: device, bundleID: "com.example.skdemo", productID: identifier, quantity: 1,
                applicationUsername: nil,
                appAccountToken: nil)
        }
        let receipt = try #require(
            ReceiptVerifier(trustedRoots: [store.pki.receipts.root]).verify(
                try await store.receipt(deviceID: device, bundleID: "com.example.skdemo"), expecting: .init(),
                now: store.now
            ).receipt)
        #expect(Set(receipt.inAppPurchases.map(\.productID)) == Set(identifiers))
        #expect(Set(receipt.inAppPurchases.compactMap(\.productTypeRaw)) == [0, 1, 2, 3])
    }
}

extension EmulatorVectorCatalogTests {
    @Test(
        "A catalogue's storefront is new accounts' default; a transaction's storefront and currency follow the account")
    func storefronts() async throws {
        let path = "storekit/05-revenuecat-StoreKitUnitTests-UnitTestsConfiguration.v5_0.storekit"
        let original = try StoreKitConfiguration(data: Vectors.bytes(path))
        #expect(original.settings.storefront == "USA")
        // The same real catalogue, as Xcode saves it after its storefront is set to the United Kingdom.
        let text = String(decoding: try Vectors.bytes(path), as: UTF8.self)
        let british = try StoreKitConfiguration(
            data: Array(text.replacingOccurrences(of: #""_storefront" : "USA""#, with: #""_storefront" : "GBR""#).utf8))
        let product = try #require(british.products.first { $0.displayPrice != nil })
        let price = try #require(product.displayPrice.flatMap { Money(decimal: $0, currency: "GBP") })
        let store = try await AppStore(
            catalog: [british], apps: [AppConfiguration(bundleID: "com.example.app")],
            dataDirectory: try ExternalTool.temporaryDirectory(), rate: british.settings.timeRate)
        #expect(store.defaultStorefront.countryCode == "GBR")
        func buy(_ account: Account) async throws -> JSONObject {
            let device = try await store.createDevice(accountID: account.id, deviceID: nil).id.rawValue
            _ = try await store.install(deviceID: device, bundleID: "com.example.app", version: "1")
            let outcome = try await store.pay(
                deviceID: device, bundleID: "com.example.app", productID: product.productID, quantity: 1,
                applicationUsername: nil, appAccountToken: nil)
            guard case .purchased(_, let jws) = outcome else { throw CancellationError() }
            let segment = try #require(jws.split(separator: ".").dropFirst().first)
            let bytes = try #require(Base64URL.decode(Array(segment.utf8)))
            return try #require(try JSONParser.parse(bytes).objectValue)
        }
        let defaulted = try await store.createAccount(environment: .sandbox)
        #expect(defaulted.storefront == "GBR")
        let inBritain = try await buy(defaulted)
        #expect(inBritain["storefront"]?.stringValue == "GBR")
        #expect(inBritain["storefrontId"]?.stringValue == "143444")
        #expect(inBritain["currency"]?.stringValue == "GBP")
        #expect(inBritain["price"]?.int64Value == price.milliunits, "the catalogue's amount, not converted")
        let inGermany = try await buy(try await store.createAccount(environment: .sandbox, storefront: "deu"))
        #expect(inGermany["storefront"]?.stringValue == "DEU")
        #expect(inGermany["storefrontId"]?.stringValue == "143443")
        #expect(inGermany["currency"]?.stringValue == "EUR")
        let inJapan = try await buy(try await store.createAccount(environment: .sandbox, storefront: "JPN"))
        #expect(inJapan["currency"]?.stringValue == "JPY" && inJapan["storefrontId"]?.stringValue == "143462")
        await #expect(throws: EmulatorError.self) {
            try await store.createAccount(environment: .sandbox, storefront: "XYZ")
        }
    }
}

extension EmulatorVectorCatalogTests {
    @Test("Xcode 26.5's billingPlans: the monthly plan of a yearly subscription, at its prices, month by month")
    func billingPlans() async throws {
        let catalog = try StoreKitConfiguration(
            data: Vectors.bytes("storekit/05-revenuecat-StoreKitUnitTests-UnitTestsConfiguration.v5_0.storekit"))
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: "com.example.app")],
            dataDirectory: try ExternalTool.temporaryDirectory(), rate: .monthlyRenewalEveryFiveMinutes)
        let account = try await store.createAccount(environment: .sandbox, storefront: "USA")
        let device = try await store.createDevice(accountID: account.id, deviceID: nil).id.rawValue
        _ = try await store.install(deviceID: device, bundleID: "com.example.app", version: "1")
        let outcome = try await store.pay(
            deviceID: device, bundleID: "com.example.app", productID: "com.revenuecat.annual_with_commitment",
            quantity: 1, applicationUsername: nil, appAccountToken: nil, billingPlan: .monthly)
        guard case .purchased(_, let jws) = outcome else { throw CancellationError() }
        let payload = try CompactJWS(jws).payload
        // The plan's own prices: 0.50 a month, 6.00 for the commitment (commitmentDisplayPrice).
        #expect(payload["billingPlanType"] == .string("MONTHLY") && payload["price"] == .integer(500), "\(payload)")
        #expect(payload["commitmentInfo"]?["commitmentPrice"] == .integer(6_000))
        #expect(payload["commitmentInfo"]?["totalBillingPeriods"] == .integer(12))
        // Only BILLED_UPFRONT for the other yearly product: its monthly plan is refused.
        let other = try await store.createAccount(environment: .sandbox, storefront: "USA")
        let phone = try await store.createDevice(accountID: other.id, deviceID: nil).id.rawValue
        _ = try await store.install(deviceID: phone, bundleID: "com.example.app", version: "1")
        await #expect(throws: EmulatorError.self) {
            _ = try await store.pay(
                deviceID: phone, bundleID: "com.example.app", productID: "com.revenuecat.annual_39.99_no_trial",
                quantity: 1, applicationUsername: nil, appAccountToken: nil, billingPlan: .monthly)
        }
        // Bought up front, a product with plans says so.
        let upfront = try await store.pay(
            deviceID: phone, bundleID: "com.example.app", productID: "com.revenuecat.annual_39.99_no_trial",
            quantity: 1, applicationUsername: nil, appAccountToken: nil)
        guard case .purchased(_, let upfrontJWS) = upfront else { throw CancellationError() }
        #expect(try CompactJWS(upfrontJWS).payload["billingPlanType"] == .string("BILLED_UPFRONT"))

        // Offers are per plan: an introductory offer marked for the monthly plan is not given to a purchase
        // billed up front (the same catalogue with its two-week trial so marked).
        func firstPurchase(_ text: String) async throws -> JSONObject {
            let catalog = try StoreKitConfiguration(data: Array(text.utf8))
            let store = try await AppStore(
                catalog: [catalog], apps: [AppConfiguration(bundleID: "com.example.app")],
                dataDirectory: try ExternalTool.temporaryDirectory(), rate: .monthlyRenewalEveryFiveMinutes)
            let account = try await store.createAccount(environment: .sandbox, storefront: "USA")
            let device = try await store.createDevice(accountID: account.id, deviceID: nil).id.rawValue
            _ = try await store.install(deviceID: device, bundleID: "com.example.app", version: "1")
            guard
                case .purchased(_, let jws) = try await store.pay(
                    deviceID: device, bundleID: "com.example.app",
                    productID: "com.revenuecat.annual_39.99.2_week_intro", quantity: 1, applicationUsername: nil,
                    appAccountToken: nil)
            else { throw CancellationError() }
            return try CompactJWS(jws).payload
        }
        let text = String(
            decoding: try Vectors.bytes(
                "storekit/05-revenuecat-StoreKitUnitTests-UnitTestsConfiguration.v5_0.storekit"), as: UTF8.self)
        #expect(try await firstPurchase(text)["offerType"] == .integer(1), "the trial, billed up front")
        let marked = text.replacingOccurrences(
            of: #""billingPlanType" : "BILLED_UPFRONT",\s*"internalID" : "0539C216""#,
            with: #""billingPlanType" : "MONTHLY", "internalID" : "0539C216""#, options: .regularExpression)
        #expect(marked != text)
        #expect(try await firstPurchase(marked)["offerType"] == nil, "the trial is the monthly plan's")
    }
}

@Suite("Emulator API robustness")
struct EmulatorRobustnessTests {
    @Test("Malformed bodies, wrong types and unknown ids on every route give 4xx JSON errors, never a 500")
    func neverFiveHundred() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let (accountID, app) = try await harness.accountAndApp()
        let routes: [(String, String)] = [
            ("POST", "/_emulator/v1/clock"), ("POST", "/_emulator/v1/accounts"), ("POST", "/_emulator/v1/devices"),
            ("POST", app + "/install"), ("POST", app + "/payments"), ("POST", app + "/transactions/1/finish"),
            ("POST", app + "/restore"), ("POST", app + "/vpp"),
            ("POST", "/_emulator/v1/accounts/\(accountID)/settings"),
            ("POST", "/_emulator/v1/accounts/\(accountID)/requests/1/approve"),
            ("POST", "/_emulator/v1/accounts/nobody/settings"),
            ("GET", "/_emulator/v1/devices/nobody/apps/x/receipt"),
            ("GET", "/_emulator/v1/devices/nobody/apps/x/entitlements"),
            ("GET", app.replacingOccurrences(of: AppStoreTests.bundleID, with: "unknown.app") + "/app-transaction"),
            ("POST", "/verifyReceipt"), ("POST", "/sandbox/verifyReceipt"),
        ]
        let bodies: [[UInt8]] = [
            [], Array("{".utf8), Array("[]".utf8), Array("null".utf8),
            Array(#"{"productId": 5, "quantity": "x"}"#.utf8),
            Array(#"{"advance": 3, "rate": null, "environment": [], "accountId": {}, "action": true}"#.utf8),
            Array(#"{"productId": "pro", "quantity": 99999999999999999999}"#.utf8), [0xff, 0xfe, 0x00],
            Array(#"{"receipt-data": "////", "password": 1}"#.utf8),
            Array(#"{"askToBuy": "yes", "purchaseFailure": 3}"#.utf8),
        ]
        for (method, path) in routes {
            for body in bodies {
                let response = await harness.responder.respond(to: HTTPRequest(method: method, path: path, body: body))
                #expect(
                    response.status < 500,
                    "\(method) \(path) \(String(decoding: body, as: UTF8.self)) → \(response.status)")
                #expect((try? JSONParser.parse(response.body)) != nil || response.status == 204)
            }
        }
    }
}
