import AppStoreEmulator
import AppStoreReceipts
import AppStoreSignedData
import Foundation
import PurchaseServer
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperSQL

extension BenchCommands {
    static let serveSpec = Arguments.Spec(
        command: "storekeeper bench serve",
        abstract: "Measure the purchase server: notification ingestion, receipts, and subscriber reads under load.",
        options: [
            .init(name: "notifications", valueName: "n", help: "Notifications to ingest (default: 20000)."),
            .init(name: "receipts", valueName: "n", help: "Receipts to post (default: 2000)."),
            .init(
                name: "receipt-periods", valueName: "n",
                help:
                    "Monthly periods of an auto-renewable subscription each receipt also holds, its history (default: 0)."
            ),
            .init(
                name: "app-transactions", valueName: "n",
                help: "App transactions to post for distinct users (default: 20000)."),
            .init(name: "clients", valueName: "n", help: "Concurrent in-process clients (default: 64)."),
            .init(name: "seconds", valueName: "s", help: "Seconds of wrk per read measurement (default: 5)."),
            .init(name: "connections", valueName: "n", help: "wrk connections for the reads (default: 64)."),
            .init(
                name: "read-rounds", valueName: "n", help: "Interleaved rounds of bare and server reads (default: 3)."),
            .init(
                name: "ingest-rounds", valueName: "n",
                help:
                    "Interleaved rounds of verification alone and ingestion, each of a share of the notifications (default: 3)."
            ),
        ],
        flags: [
            (
                "statements",
                "Also count what each SQL statement on the writer's connection costs while ingesting notifications and while posting receipts (two reads of the thread's CPU clock a statement) and list the costliest."
            )
        ],
        discussion: """
            A purchase server on SQLite (WAL, synchronous=FULL, group commit) in a scratch directory, trusting a \
            chain made for the run. (1) --notifications distinct V2 notifications (DID_RENEW of distinct \
            subscribers, three ES256 signatures each), ingested by --clients concurrent callers, each acknowledged \
            only once stored; baseline: verifying the same notifications alone, on both cores; in --ingest-rounds \
            interleaved rounds (each verifies its share of the notifications alone, then ingests them), the ratio \
            the median of the rounds'; also the process's CPU time a notification and the cores busy in each, \
            and the write transactions the group commits took. (2) --receipts \
            receipts of three purchases each (and --receipt-periods monthly periods of a subscription) posted for \
            distinct users; baseline: bare receipt verification on both cores. (3) --app-transactions app \
            transactions (one ES256 signature each) posted through POST /v1/app-transactions by --clients \
            concurrent callers, each for a user the server has not seen; baseline: verifying them alone, on both cores. (4) GET /v1/subscribers/{id} (secret key) and GET \
            /v1/entitlements/{id} (the app's key) of the receipts' users at random, over HTTP with wrk (2 threads, \
            --connections), against bare libmicrohttpd answering one user's answer, in --read-rounds interleaved \
            rounds: req/s, p99 and the ratio (targets: ingestion ≥ 0.7 of verification alone, reads ≥ 0.35 of \
            bare with p99 < 5 ms).
            """)

    static func serve(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let count = Int(arguments.value("notifications") ?? "20000") ?? 0
        let receiptCount = Int(arguments.value("receipts") ?? "2000") ?? 0
        let receiptPeriods = Int(arguments.value("receipt-periods") ?? "0") ?? -1
        guard (0...1_000).contains(receiptPeriods) else {
            throw CommandError.usage("--receipt-periods must be 0 to 1000")
        }
        let appTransactionCount = Int(arguments.value("app-transactions") ?? "20000") ?? 0
        let clients = Int(arguments.value("clients") ?? "64") ?? 0
        let seconds = Int(arguments.value("seconds") ?? "5") ?? 0
        let connections = Int(arguments.value("connections") ?? "64") ?? 0
        let readRounds = Int(arguments.value("read-rounds") ?? "3") ?? 0
        let ingestRounds = Int(arguments.value("ingest-rounds") ?? "3") ?? 0
        guard (1...99).contains(readRounds) else { throw CommandError.usage("--read-rounds must be 1 to 99") }
        guard (1...99).contains(ingestRounds) else { throw CommandError.usage("--ingest-rounds must be 1 to 99") }
        guard (1...10_000).contains(connections) else { throw CommandError.usage("--connections must be 1 to 10000") }
        guard count > 0, receiptCount > 0, appTransactionCount > 0, (1...1024).contains(clients), seconds > 0 else {
            throw CommandError.usage(
                "--notifications, --receipts, --app-transactions, --clients and --seconds must be positive")
        }
        let root = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: root) }
        let pki = try EmulatorPKI.loadOrCreate(in: root.appendingPathComponent("pki"))
        let bundleID = "com.example.bench"
        let app = AppSettings(
            bundleID: bundleID, appAppleID: 1_234_567_890, publicKey: "pk_bench_key", receiptRoots: [pki.receipts.root],
            jwsRoots: [pki.signedData.root], entitlements: ["plus": ["monthly"], "pro": ["pro"]])
        let storage = try await SQLiteServerStorage(path: root.appendingPathComponent("server.sqlite").path)
        let server = try PurchaseServer(
            configuration: ServerConfiguration(secretKey: "sk_bench_secret_0123", apps: [app]), storage: storage)

        // 1. Notifications.
        progress(console, "signing \(count) notifications…")
        let signer = try JWSChainSigner(
            key: pki.signedData.leafKey, chain: [pki.signedData.leaf, pki.signedData.intermediate, pki.signedData.root])
        let start = now.addingTimeInterval(-3_600)
        let bodies: [[UInt8]] = try (0..<count).map {
            try benchNotification($0, signer: signer, bundleID: bundleID, start: start)
        }
        // In interleaved rounds, each its share of the notifications verified alone, then ingested: the VM's
        // speed moves by a fifth within a run, so one pair of long phases measured that as much as the server.
        // CPU time a notification as well as rates: what ingestion adds to verification, apart from any time
        // the cores were idle.
        // Each round's rates: verification alone, then ingestion (``Rates``).
        var rounds = Rates(rounds: [])
        var elapsed = (verify: 0.0, ingest: 0.0)
        var cpu = (verify: 0.0, ingest: 0.0, writer: 0.0)
        // What each statement on the writer cost in the rounds' ingestion (--statements).
        let countStatements = arguments.flag("statements")
        if countStatements { await storage.countWriterStatements(true) }
        var groups = WriteCounts(transactions: 0, writes: 0)
        for round in 0..<ingestRounds {
            progress(console, "round \(round + 1) of \(ingestRounds): verifying a share alone, then ingesting it…")
            let share = Array(bodies[(count * round / ingestRounds)..<(count * (round + 1) / ingestRounds)])
            guard !share.isEmpty else { continue }
            let verified = try notificationVerification(
                share, root: pki.signedData.root, bundleID: bundleID, now: now)
            let (ingestCPU, countsBefore, writerBefore) = (processCPUSeconds(), storage.writeCounts, storage.writerCPU)
            let ingestRate = try await concurrentRate(share.count, clients: clients) { index in
                _ = try await server.ingestNotification(bundleID: bundleID, body: share[index])
            }
            cpu.verify += verified.cpuSeconds
            cpu.ingest += processCPUSeconds() - ingestCPU
            cpu.writer += (storage.writerCPU - writerBefore).seconds
            if let after = storage.writeCounts, let countsBefore {
                let counted = after.since(countsBefore)
                groups.transactions += counted.transactions
                groups.writes += counted.writes
            }
            elapsed.verify += Double(share.count) / verified.rate
            elapsed.ingest += Double(share.count) / ingestRate
            rounds.rounds.append([verified.rate, ingestRate])
        }
        let (verifyRate, ingestRate) = (Double(count) / elapsed.verify, Double(count) / elapsed.ingest)
        let ingestRatios = rounds.rounds.map { $0[1] / $0[0] }
        let statementList =
            if countStatements {
                "\n"
                    + statementLines(
                        await storage.writerStatementCosts(), each: count, of: "notification", while: "while ingesting"
                    ).dropLast()
            } else {
                ""
            }
        await storage.countWriterStatements(false)
        let verifyClock = ContinuousClock()
        let stored = try await storage.read { try $0.inputCount() }
        guard stored == count else { throw CommandError.runtime("stored \(stored) inputs, expected \(count)") }

        // 2. Receipts.
        progress(console, "signing \(receiptCount) receipts…")
        let receipts: [[UInt8]] = try (0..<receiptCount).map { index in
            let base = 4_000_000_000_000_000 + index * 3
            let receipt = Receipt(
                receiptType: "ProductionSandbox", bundleID: bundleID, appVersion: "1", opaqueValue: [1, 2, 3, 4],
                sha1Hash: Array(repeating: 0, count: 20), creationDate: now, originalPurchaseDate: start,
                originalAppVersion: "1",
                inAppPurchases: [
                    InAppPurchase(
                        productID: "pro", transactionID: String(base), purchaseDate: start, productTypeRaw: 0),
                    InAppPurchase(
                        productID: "coins", transactionID: String(base + 1), purchaseDate: start, productTypeRaw: 1),
                    InAppPurchase(
                        productID: "coins", transactionID: String(base + 2), purchaseDate: start, productTypeRaw: 1),
                ]
                    + (0..<receiptPeriods).map { month in
                        // Monthly periods ending now, the last one current.
                        let begins = now.addingTimeInterval(Double(month + 1 - receiptPeriods) * 2_592_000 - 3_600)
                        let first = 5_000_000_000_000_000 + index * receiptPeriods
                        return InAppPurchase(
                            productID: "monthly", transactionID: String(first + month), purchaseDate: begins,
                            originalTransactionID: String(first),
                            originalPurchaseDate: now.addingTimeInterval(Double(-receiptPeriods) * 2_592_000),
                            productTypeRaw: 3, expiresDate: begins.addingTimeInterval(2_592_000),
                            webOrderLineItemID: Int64(first + month))
                    })
            return try receipt.signed(
                by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
        }
        let receiptVerifier = ReceiptVerifier(trustedRoots: [pki.receipts.root])
        let bareStart = verifyClock.now
        DispatchQueue.concurrentPerform(iterations: 2) { half in
            for index in stride(from: half, to: receipts.count, by: 2) {
                _ = receiptVerifier.verify(
                    receipts[index], expecting: ReceiptExpectations(bundleID: bundleID), now: now)
            }
        }
        let bareReceiptRate = Double(receiptCount) / (verifyClock.now - bareStart).seconds
        if countStatements { await storage.countWriterStatements(true) }
        let (receiptCPU, receiptWriterCPU) = (processCPUSeconds(), storage.writerCPU)
        let receiptRate = try await concurrentRate(receiptCount, clients: clients) { index in
            _ = try await server.ingestReceipt(
                bundleID: bundleID, appUserID: "user-\(index)", receipt: receipts[index], deviceID: nil)
        }
        let receiptCPUs = (
            all: processCPUSeconds() - receiptCPU, writer: (storage.writerCPU - receiptWriterCPU).seconds
        )
        let receiptStatements =
            countStatements
            ? "\n"
                + statementLines(
                    await storage.writerStatementCosts(), each: receiptCount, of: "receipt",
                    while: "while posting receipts"
                ).dropLast() : ""
        await storage.countWriterStatements(false)

        // 3. App transactions, each for a user the server has not seen (a first launch), through the route.
        progress(console, "signing \(appTransactionCount) app transactions…")
        let appTransactions: [String] = try (0..<appTransactionCount).map {
            try benchAppTransaction($0, signer: signer, bundleID: bundleID, start: start)
        }
        let appTransactionVerifyRate = try verification(
            appTransactions, as: .appTransaction, root: pki.signedData.root, bundleID: bundleID, now: now
        ).rate
        let responder = server.responder()
        let appTransactionRate = try await concurrentRate(appTransactionCount, clients: clients) { index in
            let body = JSONWriter.bytes(
                .object([
                    "bundleId": .string(bundleID), "appUserId": .string("first-launch-\(index)"),
                    "signedAppTransaction": .string(appTransactions[index]),
                ]))
            let response = await responder.respond(
                to: HTTPRequest(
                    method: "POST", path: "/v1/app-transactions",
                    headers: [
                        ("Host", "127.0.0.1"), ("Content-Type", "application/json"),
                        ("Authorization", "Bearer pk_bench_key"),
                    ],
                    body: body))
            guard response.status == 200 else {
                throw CommandError.runtime(
                    "POST /v1/app-transactions answered \(response.status): \(String(decoding: response.body.prefix(300), as: UTF8.self))"
                )
            }
        }

        // 4. Reads over HTTP: every user of the receipts phase (three purchases each) at random, against bare
        // libmicrohttpd answering one user's answer, in interleaved rounds.
        var readLines = ["  GET /v1/subscribers/{id}: wrk not found (scripts/bootstrap installs it)"]
        if let wrk = findExecutable("wrk") {
            let http = try HTTPServer(port: 0, responder: responder)
            defer { http.stop() }
            readLines = []
            // Every user read once (from SQLite, on the reading connections), so that what wrk measures is
            // the steady state of a server whose users have each been seen.
            // What the writes left dirty in the page cache written out now, not while wrk measures.
            sync()
            progress(console, "reading each of the \(receiptCount) users once…")
            let residentBefore = residentKilobytes()
            let warmRate = try await concurrentRate(receiptCount, clients: clients) { index in
                for (route, key) in [("subscribers", "sk_bench_secret_0123"), ("entitlements", "pk_bench_key")] {
                    let response = await responder.respond(
                        to: HTTPRequest(
                            method: "GET", path: "/v1/\(route)/user-\(index)",
                            headers: [("Host", "127.0.0.1"), ("Authorization", "Bearer \(key)")]))
                    guard response.status == 200 else {
                        throw CommandError.runtime("GET /v1/\(route)/user-\(index) answered \(response.status)")
                    }
                }
            }
            readLines.append(
                "  each of the \(receiptCount) users' two answers read once, in process (\(clients) clients; from the database unless kept since their posts, then rendered and kept)   \(rate(warmRate)) users/s; resident memory \(residentBefore / 1024) → \(residentKilobytes() / 1024) MiB"
            )
            for (route, key) in [("subscribers", "sk_bench_secret_0123"), ("entitlements", "pk_bench_key")] {
                let sample = try await HTTPClient().send(
                    "GET", "http://127.0.0.1:\(http.port)/v1/\(route)/user-7",
                    headers: [("Authorization", "Bearer \(key)")])
                guard sample.status == 200 else {
                    throw CommandError.runtime("GET /v1/\(route)/user-7 answered \(sample.status)")
                }
                let bare = try BareBaseline(
                    response: HTTPResponse(
                        status: 200, headers: [("Content-Type", "application/json")], body: sample.body))
                let script = try randomUserScript(
                    at: root.appendingPathComponent("random-\(route).lua"), route: route, key: key, users: receiptCount)
                var pairs: [(bare: WrkResult, server: WrkResult)] = []
                let cacheBefore = server.subscriberCacheCounts
                for round in 0..<readRounds {
                    progress(console, "wrk against GET /v1/\(route), round \(round + 1) of \(readRounds)…")
                    let bareResult = try runWrk(
                        wrk, url: "http://127.0.0.1:\(bare.port)/", seconds: seconds, connections: connections,
                        script: script)
                    let result = try runWrk(
                        wrk, url: "http://127.0.0.1:\(http.port)/", seconds: seconds, connections: connections,
                        script: script)
                    pairs.append((bareResult, result))
                }
                let cacheAfter = server.subscriberCacheCounts
                let (hits, misses) = (cacheAfter.hits - cacheBefore.hits, cacheAfter.misses - cacheBefore.misses)
                let ratios = pairs.map { $0.server.requestsPerSecond / $0.bare.requestsPerSecond }
                let p99s = pairs.compactMap(\.server.p99Milliseconds)
                let bareP99s = pairs.compactMap(\.bare.p99Milliseconds)
                let name = "GET /v1/\(route)/{random of \(receiptCount)}"
                readLines.append(
                    """
                      \(name), wrk -t2 -c\(connections) (same 2 cores), \(readRounds) interleaved rounds of \(seconds) s (medians)
                        bare libmicrohttpd, one answer's bytes (the same random paths)  \(rate(median(pairs.map(\.bare.requestsPerSecond)) ?? 0)) req/s, p99 \(latency(median(bareP99s)))
                        the server                              \(rate(median(pairs.map(\.server.requestsPerSecond)) ?? 0)) req/s, p99 \(latency(median(p99s)))   ratio to bare \(format(median(ratios) ?? 0)) (each round: \(ratios.map(format).joined(separator: ", ")))   (target ≥ 0.35, p99 < 5 ms)\(pairs.map { errors($0.server) }.first { !$0.isEmpty } ?? "")
                        reads answered from the users kept in memory \(percent(hits, hits + misses)) (\(misses) read from SQLite); \(cacheAfter.users) users kept, at most \(cacheAfter.capacity)
                    """)
            }
        }
        console.write(
            """
            Purchase server, SQLite (WAL, synchronous=FULL, group commit), \(clients) concurrent in-process clients
              V2 notifications, each stored durably before it is acknowledged (\(count), three ES256 signatures each)
              \(ingestRatios.count) interleaved rounds, each of a share verified alone, then ingested; rates over all rounds
              verification alone, 2 cores       \(rate(verifyRate)) /s
              ingestion (verify, store, apply)  \(rate(ingestRate)) /s   ratio \(format(rounds.medianRatio(1, to: 0))) of verification alone, the rounds' median (each round: \(ingestRatios.map(format).joined(separator: ", ")))   (target ≥ 0.7)
              CPU a notification (user and system, every thread)   verification alone \(microseconds(cpu.verify, each: count, decimals: 1)), ingestion \(microseconds(cpu.ingest, each: count, decimals: 1)) (+\(microseconds(cpu.ingest - cpu.verify, each: count, decimals: 1)): parsing, storing, applying); cores busy: verification alone \(format(cpu.verify / elapsed.verify)), ingestion \(format(cpu.ingest / elapsed.ingest)) of \(ProcessInfo.processInfo.activeProcessorCount)
              group commits while ingesting   \(groups.transactions) transactions, \(format(Double(groups.writes) / Double(max(1, groups.transactions)))) writes each on average; the writer's CPU in them \(microseconds(cpu.writer, each: count, decimals: 1)) a notification\(countStatements ? " (its statements counted, two clock reads each)" : "")\(statementList)
              receipts of three purchases\(receiptPeriods > 0 ? " and \(receiptPeriods) monthly periods" : "") (POST /v1/receipts' work, in process; \(receiptCount) users)
              bare receipt verification, 2 cores \(rate(bareReceiptRate)) /s
              ingestion                          \(rate(receiptRate)) /s   ratio \(format(receiptRate / bareReceiptRate)) of bare; CPU a receipt \(microseconds(receiptCPUs.all, each: receiptCount, decimals: 1)), the writer's in its transactions \(microseconds(receiptCPUs.writer, each: receiptCount, decimals: 1))\(receiptStatements)
              app transactions (POST /v1/app-transactions in process, each a new user: \(appTransactionCount))
              verification alone, 2 cores        \(rate(appTransactionVerifyRate)) /s
              posted (verify, store user and event) \(rate(appTransactionRate)) /s   ratio \(format(appTransactionRate / appTransactionVerifyRate)) of verification alone
            \(readLines.joined(separator: "\n"))

            """)
        return 0
    }

    /// Items per second with `clients` concurrent workers taking indexes 0..<count.
    static func concurrentRate(_ count: Int, clients: Int, _ work: @escaping @Sendable (Int) async throws -> Void)
        async throws -> Double
    {
        let clock = ContinuousClock()
        let start = clock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for client in 0..<clients {
                group.addTask {
                    for index in stride(from: client, to: count, by: clients) { try await work(index) }
                }
            }
            try await group.waitForAll()
        }
        return Double(count) / (clock.now - start).seconds
    }

    /// A DID_RENEW V2 notification of subscriber `index` (three ES256 signatures), as Apple posts it.
    static func benchNotification(_ index: Int, signer: JWSChainSigner, bundleID: String, start: Date) throws
        -> [UInt8]
    {
        let ms = EpochMilliseconds.milliseconds(start) + Int64(index)
        let id = String(3_000_000_000_000_000 + index)
        let transaction: JSONObject = [
            "transactionId": .string(id), "originalTransactionId": .string(id), "bundleId": .string(bundleID),
            "productId": .string("monthly"), "purchaseDate": .integer(ms), "originalPurchaseDate": .integer(ms),
            "expiresDate": .integer(ms + 2_592_000_000), "quantity": .integer(1),
            "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
            "signedDate": .integer(ms), "environment": .string("Sandbox"), "transactionReason": .string("RENEWAL"),
            "appAccountToken": .string(
                UUID(uuidString: String(format: "00000000-0000-4000-8000-%012d", index))!.uuidString.lowercased()),
        ]
        let renewal: JSONObject = [
            "originalTransactionId": .string(id), "autoRenewProductId": .string("monthly"),
            "productId": .string("monthly"), "autoRenewStatus": .integer(1), "signedDate": .integer(ms),
            "environment": .string("Sandbox"),
        ]
        let payload: JSONObject = [
            "notificationType": .string("DID_RENEW"), "notificationUUID": .string(UUID().uuidString.lowercased()),
            "data": .object([
                "bundleId": .string(bundleID), "environment": .string("Sandbox"),
                "signedTransactionInfo": .string(try signer.sign(transaction)),
                "signedRenewalInfo": .string(try signer.sign(renewal)), "status": .integer(1),
            ]),
            "version": .string("2.0"), "signedDate": .integer(ms),
        ]
        return JSONWriter.bytes(.object(["signedPayload": .string(try signer.sign(payload))]))
    }

    /// Notifications verified on both cores, alone (the baseline of ingestion): per second, and the process's
    /// CPU seconds while verifying (the bodies' JSON parsed before).
    static func notificationVerification(_ bodies: [[UInt8]], root: Certificate, bundleID: String, now: Date)
        throws -> (rate: Double, cpuSeconds: Double)
    {
        try verification(
            bodies.map { (try? JSONParser.parse($0))?["signedPayload"]?.stringValue ?? "" }, as: .notification,
            root: root, bundleID: bundleID, now: now)
    }

    /// Signed payloads of one type verified on both cores, alone: per second, and the process's CPU seconds
    /// over exactly that.
    static func verification(
        _ payloads: [String], as type: SignedDataType, root: Certificate, bundleID: String, now: Date
    ) throws -> (rate: Double, cpuSeconds: Double) {
        let verifier = try SignedDataVerifier(
            SignedDataVerifier.Configuration(trustedRoots: [root], bundleID: bundleID))
        let clock = ContinuousClock()
        let (start, cpu) = (clock.now, processCPUSeconds())
        DispatchQueue.concurrentPerform(iterations: 2) { half in
            for index in stride(from: half, to: payloads.count, by: 2) {
                _ = verifier.verify(payloads[index], as: type, now: now)
            }
        }
        let cpuSeconds = processCPUSeconds() - cpu
        return (Double(payloads.count) / (clock.now - start).seconds, cpuSeconds)
    }

    /// StoreKit 2's `AppTransaction` of download `index` (one ES256 signature), as an app reads it.
    static func benchAppTransaction(_ index: Int, signer: JWSChainSigner, bundleID: String, start: Date) throws
        -> String
    {
        let ms = EpochMilliseconds.milliseconds(start) + Int64(index)
        return try signer.sign([
            "receiptType": .string("Sandbox"), "appAppleId": .integer(1_234_567_890), "bundleId": .string(bundleID),
            "applicationVersion": .string("2"), "originalApplicationVersion": .string("1"),
            "originalPurchaseDate": .integer(ms), "receiptCreationDate": .integer(ms), "signedDate": .integer(ms),
            "appTransactionId": .string(String(7_000_000_000_000_000 + index)), "originalPlatform": .string("iOS"),
        ])
    }
}
