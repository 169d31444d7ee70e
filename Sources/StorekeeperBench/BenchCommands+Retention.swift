import AppStoreEmulator
import AppStoreSignedData
import Foundation
import PurchaseServer
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperJSON
import Synchronization

extension BenchCommands {
    static let retentionSpec = Arguments.Spec(
        command: "storekeeper bench retention",
        abstract: "Measure the purchase server's answer to Retention Messaging's realtime request as answers pile up.",
        options: [
            .init(name: "requests", valueName: "n", help: "Realtime requests per measurement (default: 5000)."),
            .init(
                name: "stored", valueName: "n", help: "Answers stored before the second measurement (default: 100000)."),
            .init(name: "subscribers", valueName: "n", help: "Subscriptions the requests are about (default: 2000)."),
            .init(name: "clients", valueName: "n", help: "Concurrent in-process clients (default: 64)."),
        ],
        discussion: """
            A purchase server on SQLite (WAL, synchronous=FULL, group commit) with retention rules, trusting a \
            chain made for the run. --subscribers subscriptions come in as notifications; then --requests \
            distinct signed realtime requests about them (one ES256 signature each) are answered by --clients \
            concurrent callers: verify, read the subscription, its purchases and earlier answers, pick a rule, \
            sign a promotional offer where the rule gives one, and store the answer and its event durably \
            before answering. Measured with about 1,000 answers stored, then again after --stored answers are \
            added (other subscribers' answers: the store grows, each subscriber keeps a few). Baseline: verifying \
            the same requests alone, on both cores. Apple waits 700 ms.
            """)

    static func retention(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let requests = Int(arguments.value("requests") ?? "5000") ?? 0
        let stored = Int(arguments.value("stored") ?? "100000") ?? -1
        let subscribers = Int(arguments.value("subscribers") ?? "2000") ?? 0
        let clients = Int(arguments.value("clients") ?? "64") ?? 0
        guard requests > 0, stored >= 0, subscribers > 0, (1...1024).contains(clients) else {
            throw CommandError.usage("--requests, --subscribers and --clients must be positive, --stored at least 0")
        }
        let root = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: root) }
        let pki = try EmulatorPKI.loadOrCreate(in: root.appendingPathComponent("pki"))
        let bundleID = "com.example.bench"
        var app = AppSettings(
            bundleID: bundleID, appAppleID: 1_234_567_890, publicKey: "pk_bench_key", receiptRoots: [pki.receipts.root],
            jwsRoots: [pki.signedData.root], entitlements: ["plus": ["monthly"]])
        var firstOffer = RetentionSettings.Conditions()
        firstOffer.maxPastOffers = 0
        app.retention = RetentionSettings(
            rules: [
                .init(
                    name: "first offer", conditions: firstOffer,
                    answer: .promotionalOffer(message: UUID().uuidString.lowercased(), offerID: "stay")),
                .init(name: "everyone", answer: .message(UUID().uuidString.lowercased())),
            ],
            offerKey: RetentionSettings.OfferKey(keyID: "KEY", issuerID: "issuer", key: try PrivateKey.generateP256()))
        let storage = try await SQLiteServerStorage(path: root.appendingPathComponent("server.sqlite").path)
        let server = try PurchaseServer(
            configuration: ServerConfiguration(secretKey: "sk_bench_secret_0123", apps: [app]), storage: storage)
        let signer = try JWSChainSigner(
            key: pki.signedData.leafKey, chain: [pki.signedData.leaf, pki.signedData.intermediate, pki.signedData.root])
        let start = now.addingTimeInterval(-3_600)
        progress(console, "\(subscribers) subscriptions…")
        let notifications = try (0..<subscribers).map {
            try benchNotification($0, signer: signer, bundleID: bundleID, start: start)
        }
        _ = try await concurrentRate(subscribers, clients: clients) { index in
            _ = try await server.ingestNotification(bundleID: bundleID, body: notifications[index])
        }

        /// `count` signed realtime requests about the subscriptions, round robin.
        func signedRequests(_ count: Int) throws -> [[UInt8]] {
            try (0..<count).map { index in
                let payload: JSONObject = [
                    "originalTransactionId": .string(String(3_000_000_000_000_000 + index % subscribers)),
                    "appAppleId": .integer(1_234_567_890), "productId": .string("monthly"),
                    "userLocale": .string("en-US"), "requestIdentifier": .string(UUID().uuidString.lowercased()),
                    "signedDate": .integer(EpochMilliseconds.milliseconds(now)), "environment": .string("Sandbox"),
                ]
                return JSONWriter.bytes(.object(["signedPayload": .string(try signer.sign(payload))]))
            }
        }
        /// Answers per second and the latencies (ms) of `bodies` answered by the clients.
        func measure(_ bodies: [[UInt8]]) async throws -> (rate: Double, p50: Double, p99: Double) {
            let latencies = LatencyLog()
            let rate = try await concurrentRate(bodies.count, clients: clients) { index in
                let clock = ContinuousClock()
                let began = clock.now
                _ = try await server.answerRetention(bundleID: bundleID, body: bodies[index])
                latencies.add((clock.now - began).seconds * 1000)
            }
            let sorted = latencies.values.sorted()
            func percentile(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int(p * Double(sorted.count)))] }
            return (rate, percentile(0.5), percentile(0.99))
        }

        progress(console, "signing \(2 * requests) realtime requests…")
        let warm = try signedRequests(requests)
        let later = try signedRequests(requests)
        let verifier = try SignedDataVerifier(
            SignedDataVerifier.Configuration(trustedRoots: [pki.signedData.root], environment: "Sandbox"))
        let payloads = warm.map { (try? JSONParser.parse($0))?["signedPayload"]?.stringValue ?? "" }
        let clock = ContinuousClock()
        let verifyStart = clock.now
        DispatchQueue.concurrentPerform(iterations: 2) { half in
            for index in stride(from: half, to: payloads.count, by: 2) {
                _ = verifier.verify(payloads[index], as: .realtimeRequest, now: now)
            }
        }
        let verifyRate = Double(payloads.count) / (clock.now - verifyStart).seconds
        // About a thousand answers stored, then the measurement.
        _ = try await measure(try signedRequests(min(1_000, requests)))
        progress(console, "answering \(requests) requests…")
        let small = try await measure(warm)
        progress(console, "storing \(stored) more answers…")
        let smallCount = try await storage.read {
            try $0.retentionAnswers(bundle: bundleID, from: .distantPast, to: .distantFuture, limit: 10_000_000).count
        }
        var added = 0
        while added < stored {
            let batch = min(5_000, stored - added)
            let offset = added
            try await storage.write { store in
                for index in 0..<batch {
                    _ = try store.insert(
                        RetentionAnswer(
                            requestIdentifier: "bench-\(offset + index)", bundleID: BundleID(bundleID),
                            // Other subscribers' (the store grows; those asked about keep their few).
                            originalTransactionID: TransactionID(String(5_000_000_000_000_000 + offset + index)),
                            environment: .sandbox, date: start.addingTimeInterval(Double(offset + index) / 1000),
                            answer: "message", rule: "everyone"))
                }
            }
            added += batch
        }
        progress(console, "answering \(requests) requests again…")
        let large = try await measure(later)
        let total = try await storage.read {
            try $0.retentionAnswers(bundle: bundleID, from: .distantPast, to: .distantFuture, limit: 10_000_000).count
        }
        console.write(
            """
            Retention Messaging's realtime request, purchase server on SQLite (WAL, synchronous=FULL, group commit), \
            \(clients) concurrent in-process clients, \(requests) requests per line, each answer and its event stored \
            before it is sent
              verifying the requests alone, 2 cores      \(rate(verifyRate)) /s
              answered, \(smallCount) answers stored      \(rate(small.rate)) /s   p50 \(latency(small.p50)), p99 \(latency(small.p99))   ratio \(format(small.rate / verifyRate)) of verification alone
              answered, \(total) answers stored     \(rate(large.rate)) /s   p50 \(latency(large.p50)), p99 \(latency(large.p99))   ratio \(format(large.rate / small.rate)) of the line above
              Apple waits 700 ms for an answer.

            """)
        return 0
    }
}

/// Latencies collected from concurrent clients.
final class LatencyLog: Sendable {
    private let stored = Mutex<[Double]>([])
    func add(_ value: Double) { stored.withLock { $0.append(value) } }
    var values: [Double] { stored.withLock { $0 } }
}
