import AppStoreEmulator
import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON

extension BenchCommands {
    static let serverAPISpec = Arguments.Spec(
        command: "storekeeper bench server-api",
        abstract: "Page through Get Transaction History over loopback; measure the bearer-token check.",
        options: [
            .init(name: "seconds", valueName: "s", help: "Time per measurement round (default: 2)."),
            .init(name: "rounds", valueName: "n", help: "Interleaved measurement rounds (default: 3)."),
            .init(name: "subscribers", valueName: "n", help: "Customers in the store (default: 100)."),
            .init(name: "transactions", valueName: "n", help: "Transactions per customer (default: 1000)."),
            .init(name: "clients", valueName: "n", help: "Concurrent API clients (default: 4)."),
        ],
        discussion: """
            An emulator on SQLite is seeded with --subscribers customers of --transactions transactions each \
            (100,000 rows by default). Our App Store Server API client (libcurl, a fresh ES256 token per request) \
            walks whole histories, 20 signed transactions a page, by revision: one client, then --clients at \
            once on different customers. The baseline, measured in the same run, is bare OpenSSL ES256 signing \
            of 20 payloads (the signatures a page needs). Then the bearer-token check: bare ECDSA P-256 verify, \
            the full check of a new token, and a token seen before (cached until it expires).
            """)

    static func serverAPI(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let seconds = Double(arguments.value("seconds") ?? "2") ?? 0
        let rounds = Int(arguments.value("rounds") ?? "3") ?? 0
        let subscribers = Int(arguments.value("subscribers") ?? "100") ?? 0
        let perCustomer = Int(arguments.value("transactions") ?? "1000") ?? 0
        let clients = Int(arguments.value("clients") ?? "4") ?? 0
        guard seconds > 0, rounds > 0, subscribers > 0, perCustomer > 0, (1...64).contains(clients) else {
            throw CommandError.usage(
                "--seconds, --rounds, --subscribers, --transactions and --clients must be positive")
        }
        let catalog = try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))
        let root = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: root) }
        progress(console, "seeding \(subscribers) customers × \(perCustomer) transactions…")
        let (store, firstIDs) = try await historyStore(
            subscribers: subscribers, perCustomer: perCustomer, directory: root, catalog: catalog, now: now)
        defer { store.close() }
        let server = try HTTPServer(port: 0, responder: EmulatorRoutes(store).responder())
        defer { server.stop() }
        let minted = try await store.serverAPI.mintAPIKey(bundleID: DefaultCatalog.bundleID)
        let key = try PrivateKey(pem: minted.privateKey)
        let client = AppStoreServerAPIClient(
            key: key, keyID: minted.keyID, issuerID: minted.issuerID, bundleID: DefaultCatalog.bundleID,
            environment: .custom("http://127.0.0.1:\(server.port)/sandbox"), retry: .none)
        let expectedPages = (perCustomer + 19) / 20
        // Check once that a walk returns every transaction.
        let pages = try await client.allTransactionHistory(firstIDs[0])
        let walked = pages.reduce(0) { $0 + $1.signedTransactions.count }
        guard walked == perCustomer else {
            throw CommandError.runtime("the history walk returned \(walked) transactions, expected \(perCustomer)")
        }

        // Pages per second: one client, then several on different customers; baseline: 20 bare ES256 signs.
        let signingKey = try PrivateKey.generateP256()
        let payload = Array(String(repeating: "x", count: 900).utf8)
        var rows: [[Double]] = []
        for round in 0..<rounds {
            progress(console, "round \(round + 1) of \(rounds)…")
            let bare = measure(seconds: seconds) { count in
                for _ in 0..<(count * 20) { _ = try? signingKey.signRawECDSA(payload) }
            }
            let single = try await pageRate(
                client: client, customers: [firstIDs[round % firstIDs.count]], seconds: seconds)
            let many = try await pageRate(
                client: client,
                customers: (0..<clients).map { firstIDs[($0 * 7 + round) % firstIDs.count] }, seconds: seconds)
            rows.append([bare, single, many])
        }
        let pageRates = Rates(rounds: rows)

        // The bearer-token check.
        let apiKey = APIKey(
            keyID: "BENCHKEY01", issuerID: "issuer", publicKey: try signingKey.publicKey, bundleIDs: ["com.example"])
        let verifier = APITokenVerifier { $0 == apiKey.keyID ? apiKey : nil }
        let tokens = try (0..<256).map { index in
            try APIToken.make(
                keyID: apiKey.keyID, issuerID: "issuer", bundleID: "com.example", key: signingKey,
                now: now.addingTimeInterval(Double(index)))
        }
        let jws = try CompactJWS(tokens[0])
        let publicKey = try signingKey.publicKey
        let checkTime = Date()
        let bareVerify: (Int) -> Void = { count in
            for _ in 0..<count {
                _ = publicKey.verify(rawECDSASignature: jws.signature, message: jws.signingInput, digest: .sha256)
            }
        }
        let fullCheck: (Int) -> Void = { count in
            for index in 0..<count {
                verifier.forgetTokens()
                _ = verifier.verify(token: tokens[index % tokens.count], now: checkTime)
            }
        }
        let cachedCheck: (Int) -> Void = { count in
            for index in 0..<count { _ = verifier.verify(token: tokens[index % 16], now: checkTime) }
        }
        let checks = interleaved(seconds: seconds / 2, rounds: rounds, [bareVerify, fullCheck, cachedCheck])
        console.write(
            """
            App Store Server API, emulator on SQLite, \(subscribers) customers × \(perCustomer) transactions (\(subscribers * perCustomer) stored), loopback (\(rounds) rounds of \(format(seconds)) s; best rates, median ratios)
              Get Transaction History v2, \(expectedPages) pages of 20 per customer, a fresh ES256 token per request
              bare ES256 signing of 20 payloads    \(rate(pageRates.best[0])) pages/s (the signatures a page needs, one core)
              1 client                             \(rate(pageRates.best[1])) pages/s   ratio \(format(pageRates.medianRatio(1, to: 0))) of bare
              \(clients) clients at once                   \(rate(pageRates.best[2])) pages/s   ratio \(format(pageRates.medianRatio(2, to: 0))) of bare
              bearer-token check (ES256 JWT: header, claims, signature)
              bare OpenSSL ECDSA P-256 verify      \(rate(checks.best[0])) /s
              a new token, checked in full         \(rate(checks.best[1])) /s   ratio \(format(checks.medianRatio(1, to: 0))) of bare
              a token seen before (cached)         \(rate(checks.best[2])) /s   ratio \(format(checks.medianRatio(2, to: 0))) of bare

            """)
        return 0
    }

    /// Pages per second while each client walks its customer's whole history again and again.
    static func pageRate(client: AppStoreServerAPIClient, customers: [String], seconds: Double) async throws -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = start + .milliseconds(Int(seconds * 1000))
        let pages = try await withThrowingTaskGroup(of: Int.self) { group in
            for customer in customers {
                group.addTask {
                    var pages = 0
                    var revision: String?
                    while clock.now < deadline {
                        let page = try await client.transactionHistory(customer, revision: revision)
                        pages += 1
                        revision = page.hasMore ? page.revision : nil
                    }
                    return pages
                }
            }
            return try await group.reduce(0, +)
        }
        return Double(pages) / (clock.now - start).seconds
    }

    /// Operations per second of `work(count)` over about `seconds`.
    static func measure(seconds: Double, _ work: (Int) -> Void) -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        var operations = 0
        while (clock.now - start).seconds < seconds {
            work(4)
            operations += 4
        }
        return Double(operations) / (clock.now - start).seconds
    }

    /// An emulator whose customers each have `perCustomer` transactions (consumables, non-consumables and
    /// subscription periods), seeded through the storage API; answers the store and each customer's first
    /// transaction id.
    static func historyStore(
        subscribers: Int, perCustomer: Int, directory: URL, catalog: StoreKitConfiguration, now: Date
    ) async throws -> (AppStore, [String]) {
        let storage = try await SQLiteEmulatorStorage(path: directory.appendingPathComponent("store.sqlite").path)
        let bundle = BundleID(DefaultCatalog.bundleID)
        var firstIDs: [String] = []
        for batch in stride(from: 0, to: subscribers, by: 10) {
            let range = batch..<min(subscribers, batch + 10)
            firstIDs += try await storage.write { store -> [String] in
                var first: [String] = []
                for index in range {
                    let (account, _) = try seedCustomer(index, bundle: bundle, now: now, in: store)
                    for offset in 0..<perCustomer {
                        let id = TransactionID(String(1_000_000_000_000_000 + index * perCustomer + offset))
                        if offset == 0 { first.append(id.rawValue) }
                        let subscription = offset % 3 == 0
                        let original = TransactionID(String(1_000_000_000_000_000 + index * perCustomer))
                        let transaction = Transaction(
                            id: id, originalID: subscription ? original : id,
                            bundleID: bundle,
                            productID: ProductID(
                                subscription ? "com.example.storekeeper.monthly" : "com.example.storekeeper.coins"),
                            kind: subscription ? .autoRenewable : .consumable,
                            purchaseDate: now.addingTimeInterval(-Double(perCustomer - offset) * 3600),
                            expiresDate: subscription
                                ? now.addingTimeInterval(-Double(perCustomer - offset - 1) * 3600) : nil,
                            webOrderLineItemID: subscription ? Int64(offset) : nil,
                            subscriptionGroupID: subscription ? "storekeeper.subscriptions" : nil,
                            price: Money(milliunits: 990, currency: "USD"))
                        try store.insert(
                            StoredTransaction(
                                transaction: transaction, accountID: account, renewalNumber: offset / 3,
                                finished: true, orderID: "ORD\(index * perCustomer + offset)"))
                    }
                }
                return first
            }
        }
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: DefaultCatalog.bundleID)], dataDirectory: directory,
            rate: .realTime, storage: storage)
        return (store, firstIDs)
    }
}
