import AppStoreEmulator
import Foundation
import PurchaseServer
import StoreKitCatalog
import StoreModel
import StorekeeperCommandLine
import StorekeeperHTTP

extension BenchCommands {
    static let dashboardSpec = Arguments.Spec(
        command: "storekeeper bench dashboard",
        abstract: "Measure the dashboards' pages and the chart metrics on a small and a large store.",
        options: [
            .init(name: "records", valueName: "n", help: "Transactions in the large stores (default: 100000)."),
            .init(name: "clients", valueName: "n", help: "Concurrent in-process clients (default: 4)."),
            .init(name: "requests", valueName: "n", help: "Requests per page measured (default: 400)."),
        ],
        discussion: """
            Builds, in a scratch directory on SQLite, an emulator holding 1,000 and one holding --records \
            transactions (ten per account, subscription periods), and a purchase server holding 1,000 and \
            --records subscription periods (four monthly periods per subscriber, over the past year). Then \
            --clients concurrent in-process clients request each page --requests times (the charts a tenth as \
            often): pages should cost the same on both sizes (the large/small ratio near 1, the baseline being \
            the small store measured in the same run); charts read every transaction of their range, so their \
            cost grows with it.
            """)

    static func dashboard(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let records = Int(arguments.value("records") ?? "100000") ?? 0
        let clients = Int(arguments.value("clients") ?? "4") ?? 0
        let requests = Int(arguments.value("requests") ?? "400") ?? 0
        guard (1_000...5_000_000).contains(records), (1...256).contains(clients), requests >= 10 else {
            throw CommandError.usage("--records must be 1000 to 5000000, --clients 1 to 256, --requests at least 10")
        }
        let root = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: root) }

        var lines: [String] = []
        // 1. The emulator's dashboard.
        var emulatorRates: [String: [Double]] = [:]
        for size in [1_000, records] {
            progress(console, "an emulator with \(size) transactions…")
            let directory = root.appendingPathComponent("emulator-\(size)")
            let (store, account, transaction) = try await emulatorStore(size: size, directory: directory, now: now)
            let responder = EmulatorRoutes(store).responder()
            for (name, path, query) in [
                ("GET / (overview)", "/", HTTPQuery()),
                ("GET / filtered by product", "/", ["product": "com.example.storekeeper.monthly"] as HTTPQuery),
                ("GET …/accounts/{id}", "/dashboard/accounts/\(account)", HTTPQuery()),
                ("GET …/transactions/{id}", "/dashboard/transactions/\(transaction)", HTTPQuery()),
            ] {
                let rate = try await pageRate(responder, path, query: query, clients: clients, requests: requests)
                emulatorRates[name, default: []].append(rate)
            }
            store.close()
        }
        lines.append(
            "Emulator dashboard, SQLite, \(clients) concurrent clients (pages/s: 1,000 → \(records) transactions)")
        for name in emulatorRates.keys.sorted() {
            let pair = emulatorRates[name]!
            lines.append(
                "  \(name.padding(toLength: 30, withPad: " ", startingAt: 0))\(rate(pair[0])) → \(rate(pair[1]))   ratio \(format(pair[1] / pair[0]))"
            )
        }

        // 2. The server's dashboard and metrics.
        var serverRates: [String: [Double]] = [:]
        for size in [1_000, records] {
            progress(console, "a purchase server with \(size) subscription periods…")
            let (server, user) = try await serverStore(
                size: size, path: root.appendingPathComponent("server-\(size).sqlite").path, now: now)
            let responder = server.responder()
            let secret = [("Authorization", "Bearer sk_bench_secret_0123")]
            let day = 86_400_000.0
            let end = String(EpochMilliseconds.milliseconds(now))
            let monthAgo = String(EpochMilliseconds.milliseconds(now) - Int64(30 * day))
            let yearAgo = String(EpochMilliseconds.milliseconds(now) - Int64(365 * day))
            let pages: [(String, String, HTTPQuery, Int)] = [
                ("GET /v1/subscribers/{id} (JSON)", "/v1/subscribers/\(user)", HTTPQuery(), requests),
                ("GET /dashboard/subscribers", "/dashboard/subscribers", ["user": user], requests),
                ("GET /dashboard (overview)", "/dashboard", HTTPQuery(), requests),
                (
                    "GET /v1/metrics/mrr, 30 days", "/v1/metrics/mrr", ["from": monthAgo, "to": end],
                    max(2, requests / 10)
                ),
                (
                    "GET /v1/metrics/mrr, 12 months", "/v1/metrics/mrr",
                    ["from": yearAgo, "to": end, "resolution": "month"], max(2, requests / 10)
                ),
                ("GET /dashboard/charts (6 charts)", "/dashboard/charts", HTTPQuery(), max(2, requests / 10)),
            ]
            for (name, path, query, count) in pages {
                let rate = try await pageRate(
                    responder, path, query: query, headers: secret, clients: clients, requests: count)
                serverRates[name, default: []].append(rate)
            }
        }
        lines.append(
            "Purchase server dashboard and metrics, SQLite, \(clients) concurrent clients (per s: 1,000 → \(records) periods)"
        )
        for name in serverRates.keys.sorted() {
            let pair = serverRates[name]!
            lines.append(
                "  \(name.padding(toLength: 34, withPad: " ", startingAt: 0))\(rate(pair[0])) → \(rate(pair[1]))   ratio \(format(pair[1] / pair[0]))"
            )
        }
        lines.append("  peak resident memory \(peakResidentKilobytes() / 1024) MiB")
        console.write(lines.joined(separator: "\n") + "\n")
        return 0
    }

    /// Requests per second of `path` (each must answer 200), from `clients` concurrent callers.
    static func pageRate(
        _ responder: Responder, _ path: String, query: HTTPQuery, headers: [(String, String)] = [], clients: Int,
        requests: Int
    ) async throws -> Double {
        let request = HTTPRequest(
            method: "GET", path: path, query: query,
            headers: ([("Host", "127.0.0.1")] + headers).map { (name: $0.0, value: $0.1) })
        let first = await responder.respond(to: request)
        guard first.status == 200 else {
            throw CommandError.runtime(
                "\(path) answered \(first.status): \(String(decoding: first.body.prefix(300), as: UTF8.self))")
        }
        return try await concurrentRate(requests, clients: clients) { _ in
            let response = await responder.respond(to: request)
            guard response.status == 200 else { throw CommandError.runtime("\(path) answered \(response.status)") }
        }
    }

    /// An emulator whose SQLite storage holds `size` transactions: monthly periods, ten per account.
    static func emulatorStore(size: Int, directory: URL, now: Date) async throws -> (AppStore, String, String) {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let storage = try await SQLiteEmulatorStorage(path: directory.appendingPathComponent("store.sqlite").path)
        let bundle = BundleID(DefaultCatalog.bundleID)
        let start = now.addingTimeInterval(-365 * 86_400)
        for batch in stride(from: 0, to: size, by: 5_000) {
            try await storage.write { store in
                for index in batch..<min(size, batch + 5_000) {
                    let account = AccountID(String(format: "ACCOUNT-%08d", index / 10))
                    if index % 10 == 0 {
                        try store.insert(Account(id: account, environment: .sandbox, storefront: "USA"))
                        try store.insert(Device(id: DeviceID("DEVICE-\(index / 10)"), accountID: account))
                    }
                    let original = TransactionID(String(3_000_000_000_000_000 + index - index % 10))
                    let purchased = start.addingTimeInterval(Double(index % 10) * 30 * 86_400 + Double(index / 10))
                    try store.insert(
                        StoredTransaction(
                            transaction: Transaction(
                                id: TransactionID(String(3_000_000_000_000_000 + index)), originalID: original,
                                bundleID: bundle, productID: "com.example.storekeeper.monthly", kind: .autoRenewable,
                                purchaseDate: purchased, expiresDate: purchased.addingTimeInterval(30 * 86_400),
                                reason: index % 10 == 0 ? .purchase : .renewal,
                                price: Money(milliunits: 2_990, currency: "USD")),
                            accountID: account, renewalNumber: index % 10, finished: true))
                }
            }
        }
        let catalog = try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: DefaultCatalog.bundleID)], dataDirectory: directory,
            storage: storage)
        return (store, String(format: "ACCOUNT-%08d", size / 20), String(3_000_000_000_000_000 + size / 2))
    }

    /// A purchase server whose SQLite storage holds `size` subscription periods: four monthly periods per
    /// subscriber, started over the past year.
    static func serverStore(size: Int, path: String, now: Date) async throws -> (PurchaseServer, String) {
        let storage = try await SQLiteServerStorage(path: path)
        let bundle = "com.example.bench"
        let start = now.addingTimeInterval(-365 * 86_400)
        for batch in stride(from: 0, to: size, by: 5_000) {
            try await storage.write { store in
                for index in batch..<min(size, batch + 5_000) {
                    let subscriber = index / 4
                    let user = "user-\(subscriber)"
                    if index % 4 == 0 {
                        try store.save(Subscriber(bundleID: bundle, appUserID: user, firstSeen: start))
                    }
                    let first = start.addingTimeInterval(Double(subscriber % 300) * 86_400)
                    let purchased = first.addingTimeInterval(Double(index % 4) * 30 * 86_400)
                    try store.save(
                        PurchaseRecord(
                            transactionID: TransactionID(String(5_000_000_000 + index)),
                            originalTransactionID: TransactionID(String(5_000_000_000 + index - index % 4)),
                            bundleID: BundleID(bundle), productID: "monthly", kind: .autoRenewable,
                            purchaseDate: purchased,
                            expiresDate: purchased.addingTimeInterval(30 * 86_400), environment: .production,
                            price: 2_990,
                            currency: "USD", reason: index % 4 == 0 ? .purchase : .renewal, signedDate: purchased,
                            owner: user))
                }
            }
        }
        var app = AppSettings(
            bundleID: bundle, publicKey: "pk_bench_key", receiptRoots: [], jwsRoots: [],
            entitlements: ["plus": ["monthly"]])
        app.subscriptionPeriods = ["monthly": "P1M"]
        let server = try PurchaseServer(
            configuration: ServerConfiguration(secretKey: "sk_bench_secret_0123", apps: [app]), storage: storage)
        return (server, "user-\(size / 8)")
    }
}
