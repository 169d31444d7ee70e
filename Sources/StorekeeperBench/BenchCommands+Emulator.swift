import AppStoreEmulator
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCommandLine

extension BenchCommands {
    static let emulatorSpec = Arguments.Spec(
        command: "storekeeper bench emulator",
        abstract: "Measure the emulator's purchase cost with 100,000 transactions stored against 100 stored.",
        options: [
            .init(name: "seconds", valueName: "s", help: "Time per measurement round (default: 2)."),
            .init(name: "rounds", valueName: "n", help: "Interleaved measurement rounds (default: 5)."),
            .init(name: "large", valueName: "n", help: "Transactions in the large store (default: 100000)."),
            .init(name: "clients", valueName: "n", help: "Concurrent purchasing clients (default: 16)."),
        ],
        discussion: """
            Two emulators on SQLite (WAL, synchronous=FULL, each purchase durable before it is answered) are \
            seeded with 100 and with --large transactions (1 in 3 an auto-renewable subscription with its \
            subscription row and due event), spread over accounts of 100 transactions each. Then --clients \
            concurrent clients buy on both stores in alternating rounds; the ratio is large-store purchases/s \
            over small-store purchases/s per round, median (target ≥ 0.80: flat).
            """)

    static func emulator(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let seconds = Double(arguments.value("seconds") ?? "2") ?? 0
        let rounds = Int(arguments.value("rounds") ?? "5") ?? 0
        let large = Int(arguments.value("large") ?? "100000") ?? 0
        let clients = Int(arguments.value("clients") ?? "16") ?? 0
        guard seconds > 0, rounds > 0, large >= 100, (1...1024).contains(clients) else {
            throw CommandError.usage("--seconds, --rounds, --clients must be positive and --large at least 100")
        }
        let catalog = try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))
        let products = catalog.products.map(\.productID)
        let root = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: root) }
        progress(console, "seeding a store with 100 transactions and one with \(large)…")
        let stores = [
            try await seededStore(
                transactions: 100, directory: root.appendingPathComponent("small"), catalog: catalog, now: now),
            try await seededStore(
                transactions: large, directory: root.appendingPathComponent("large"), catalog: catalog, now: now),
        ]
        var rates: [[Double]] = []
        for round in 0..<rounds {
            progress(console, "round \(round + 1) of \(rounds)…")
            var row: [Double] = []
            for store in stores {
                row.append(
                    try await purchaseRate(store, products: products, clients: clients, seconds: seconds))
            }
            rates.append(row)
        }
        let counts = [try await stores[0].store.transactionCount(), try await stores[1].store.transactionCount()]
        let result = Rates(rounds: rates)
        console.write(
            """
            Emulator purchases, SQLite (WAL, synchronous=FULL), \(clients) concurrent clients (\(rounds) interleaved rounds of \(format(seconds)) s; best rates, median ratio)
              store seeded with \(pad(100)) transactions  \(rate(result.best[0])) purchases/s   (\(counts[0]) stored at the end)
              store seeded with \(pad(large)) transactions  \(rate(result.best[1])) purchases/s   (\(counts[1]) stored at the end)
              ratio large/small \(format(result.medianRatio(1, to: 0))) (target ≥ 0.80)

            """)
        return 0
    }

    struct SeededStore: Sendable {
        let store: AppStore
        /// Device ids to buy on, one per seeded account.
        let devices: [String]
    }

    /// An emulator whose SQLite store holds `transactions` rows, seeded through the storage API in a few
    /// large transactions (as fast as SQLite inserts), then opened as a normal emulator.
    static func seededStore(transactions: Int, directory: URL, catalog: StoreKitConfiguration, now: Date) async throws
        -> SeededStore
    {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let storage = try await SQLiteEmulatorStorage(path: directory.appendingPathComponent("store.sqlite").path)
        let bundle = BundleID(DefaultCatalog.bundleID)
        let perAccount = 100
        let accounts = (transactions + perAccount - 1) / perAccount
        var devices: [String] = []
        for batch in stride(from: 0, to: accounts, by: 100) {
            let range = batch..<min(accounts, batch + 100)
            let made = try await storage.write { store -> [String] in
                var devices: [String] = []
                for index in range {
                    let (account, device) = try seedCustomer(index, bundle: bundle, now: now, in: store)
                    devices.append(device.rawValue)
                    for offset in 0..<min(perAccount, transactions - index * perAccount) {
                        let id = TransactionID(String(1_000_000_000_000_000 + index * perAccount + offset))
                        let subscription = offset % 3 == 0
                        let transaction = Transaction(
                            id: id, bundleID: bundle,
                            productID: ProductID(
                                subscription ? "com.example.storekeeper.monthly" : "com.example.storekeeper.coins"),
                            kind: subscription ? .autoRenewable : .consumable,
                            purchaseDate: now.addingTimeInterval(-Double(offset) * 60),
                            expiresDate: subscription ? now.addingTimeInterval(365 * 86_400) : nil,
                            webOrderLineItemID: subscription ? Int64(offset) : nil,
                            price: Money(milliunits: 990, currency: "USD"))
                        try store.insert(
                            StoredTransaction(transaction: transaction, accountID: account, finished: true))
                        if subscription {
                            try store.save(
                                StoredSubscription(
                                    state: SubscriptionState(
                                        originalTransactionID: id, productID: transaction.productID,
                                        expiresDate: transaction.expiresDate),
                                    accountID: account, bundleID: bundle, latestTransactionID: id))
                            try store.schedule(
                                DueEvent(kind: .renewal, key: id.rawValue, due: transaction.expiresDate!))
                        }
                    }
                }
                return devices
            }
            devices += made
        }
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: DefaultCatalog.bundleID)], dataDirectory: directory,
            rate: .realTime, storage: storage)
        return SeededStore(store: store, devices: devices)
    }

    /// A sandbox account numbered `index`, with one device that has the app installed.
    static func seedCustomer(_ index: Int, bundle: BundleID, now: Date, in store: any EmulatorStore) throws -> (
        AccountID, DeviceID
    ) {
        let account = AccountID(String(format: "ACCOUNT-%08d", index))
        let device = DeviceID(String(format: "00000000-0000-4000-8000-%012d", index))
        try store.insert(Account(id: account, environment: .sandbox, storefront: "USA"))
        try store.insert(Device(id: device, accountID: account))
        try store.save(
            Install(deviceID: device, bundleID: bundle, version: "1", originalVersion: "1", originalPurchaseDate: now))
        return (account, device)
    }

    /// Purchases per second with `clients` concurrent buyers for about `seconds`.
    static func purchaseRate(_ seeded: SeededStore, products: [String], clients: Int, seconds: Double) async throws
        -> Double
    {
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = start + .milliseconds(Int(seconds * 1000))
        let done = try await withThrowingTaskGroup(of: Int.self) { group in
            for client in 0..<clients {
                group.addTask {
                    var index = client
                    var count = 0
                    while clock.now < deadline {
                        let device = seeded.devices[index % seeded.devices.count]
                        _ = try await seeded.store.pay(
                            deviceID: device, bundleID: DefaultCatalog.bundleID,
                            productID: products[index % products.count], quantity: 1, applicationUsername: nil,
                            appAccountToken: nil)
                        count += 1
                        index += clients
                    }
                    return count
                }
            }
            return try await group.reduce(0, +)
        }
        return Double(done) / (clock.now - start).seconds
    }

    static func pad(_ value: Int) -> String {
        let text = String(value)
        return String(repeating: " ", count: max(0, 7 - text.count)) + text
    }

    /// A progress line on standard error when it is a terminal.
    static func progress(_ console: Console, _ text: String) {
        if isatty(2) != 0 { console.writeError("… \(text)\n") }
    }
}
