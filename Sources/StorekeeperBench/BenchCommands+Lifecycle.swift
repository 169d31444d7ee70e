import AppStoreEmulator
import AppStoreSignedData
import Dispatch
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import SubscriptionLifecycle
import Synchronization

/// `storekeeper bench lifecycle`: subscriber-years of monthly subscriptions through the emulator's lifecycle
/// engine, scheduler and notification outbox, with every notification delivered to a local receiver.
extension BenchCommands {
    static let lifecycleSpec = Arguments.Spec(
        command: "storekeeper bench lifecycle",
        abstract: "Simulate subscriber-years of monthly subscriptions with notifications delivered locally.",
        options: [
            .init(name: "subscribers", valueName: "n", help: "Subscribers (default: 1000)."),
            .init(name: "years", valueName: "n", help: "Years of store time (default: 10; at most 20)."),
            .init(
                name: "receiver-pause", valueName: "seconds",
                help: "The receiver holds every request this long after the start, then answers (default: 0)."),
            .init(
                name: "notification-retention-days", valueName: "n",
                help: "Delete done notifications n days (at the time rate) after they were made (default: keep all)."),
        ],
        flags: [
            ("no-notifications", "Configure no receiver: the lifecycle, scheduler and storage alone."),
            ("stuck-receiver", "Also send every notification to a second receiver that never answers in time."),
        ],
        discussion: """
            Production accounts (no sandbox renewal cap) with monthly subscriptions: of every 20 subscribers, \
            one fails billing at its first renewal and expires after billing retry, one upgrades to the yearly \
            plan at once, one is refunded at once; the rest renew every month. Store time advances a month per \
            step; every change writes V2 notifications (three ES256 signatures each) to the outbox, which sends \
            them to a receiver on 127.0.0.1. Reports subscriber-years per second (from the first subscription, once \
            the store's keys and tables are made, until the last notification was received) and peak resident memory, and, as a baseline measured first in the \
            same run, bare ES256 signatures per second on every core: the ceiling those signatures alone put \
            on subscriber-years per second with this run's notifications; and, after the run, two floors from one of \
            its own notifications made again as the emulator makes it (JSON and three signatures, nothing read or \
            stored): signed alone, and signed and posted to the same receiver. It also gives the process's CPU \
            time a notification (user and system, every thread) in the run and in each floor, and the cores busy \
            on average in the run and while signing and sending: the rates mix CPU with idle cores, these figures \
            separate them; and the share of the run the store's one writer spent in write transactions (near 1, \
            the writer sets the rate). With --receiver-pause the receiver \
            answers nothing for that long (the sends' time limit is longer): the emulator holds at most its \
            in-flight limit of notifications and queues the rest in the outbox, and the report says how many \
            waited when advancing ended. With --stuck-receiver every notification also goes to a second \
            receiver, which holds each request past the sends' time limit (10 s): it may hold three quarters \
            of the in-flight slots and 16 of the 20 delivery lanes, and the report is of the first receiver \
            (four signatures for its notification and the stuck one's). The report gives the database's size on \
            disk at the end; with --notification-retention-days the emulator deletes what is done and older \
            (after each month's advance), so that size stops growing with the years.
            """)

    static func lifecycle(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let subscribers = Int(arguments.value("subscribers") ?? "1000") ?? 0
        let years = Int(arguments.value("years") ?? "10") ?? 0
        let pause = Double(arguments.value("receiver-pause") ?? "0") ?? -1
        let stuck = arguments.flag("stuck-receiver")
        let retention = try arguments.notificationRetention()
        guard subscribers > 0, (1...20).contains(years), (0...3_600).contains(pause) else {
            throw CommandError.usage("--subscribers must be positive, --years 1 to 20 and --receiver-pause 0 to 3600")
        }
        let signaturesPerSecond = arguments.flag("no-notifications") ? 0 : try bareSignaturesPerSecond()
        let received = Atomic<Int>(0)
        // One notification as received, kept for the floor measured after the run.
        let sampleWanted = Atomic<Bool>(true)
        let sample = Mutex<[UInt8]?>(nil)
        let clock = ContinuousClock()
        let start = clock.now
        let answerFrom = start + .milliseconds(Int64(pause * 1000))
        var router = Router()
        // Answered on the server's thread (no task a request) unless the receiver is still paused.
        router.add(
            "POST", "/notifications",
            inline: { request, _ in
                guard clock.now >= answerFrom else { return nil }
                if sampleWanted.load(ordering: .relaxed), sampleWanted.exchange(false, ordering: .relaxed) {
                    sample.withLock { $0 = request.body }
                }
                received.add(1, ordering: .relaxed)
                return HTTPResponse(status: 200)
            },
            otherwise: { _, _ in
                try await Task.sleep(until: answerFrom, clock: clock)
                received.add(1, ordering: .relaxed)
                return HTTPResponse(status: 200)
            })
        // A held request is neither answered 503 nor dropped as idle before the pause ends.
        var limits = HTTPLimits()
        limits.requestTimeout = .seconds(pause + 30)
        limits.idleTimeout = Int(pause) + 30
        let sink = try HTTPServer(port: 0, limits: limits, responder: router.freeze())
        defer { sink.stop() }
        // The stuck receiver answers each request after the sends' time limit (and when the run ends).
        let stuckAttempts = Atomic<Int>(0)
        let finished = Atomic<Bool>(false)
        var stuckRouter = Router()
        stuckRouter.post("/notifications") { _, _ in
            stuckAttempts.add(1, ordering: .relaxed)
            let until = clock.now + .seconds(15 + pause)
            while clock.now < until, !finished.load(ordering: .relaxed) { try await Task.sleep(for: .milliseconds(50)) }
            return HTTPResponse(status: 200)
        }
        var stuckLimits = limits
        stuckLimits.requestTimeout = .seconds(pause + 60)
        let stuckSink = stuck ? try HTTPServer(port: 0, limits: stuckLimits, responder: stuckRouter.freeze()) : nil
        defer {
            finished.store(true, ordering: .relaxed)
            stuckSink?.stop()
        }
        let directory = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: directory) }
        let bundleID = DefaultCatalog.bundleID
        let catalog = try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: bundleID)], dataDirectory: directory,
            rate: .monthlyRenewalEveryFiveMinutes, maxEventsPerRequest: .max, notificationRetention: retention)
        defer { store.close() }
        if !arguments.flag("no-notifications") {
            try await store.setNotifications(
                bundleID: bundleID,
                AppNotifications(
                    productionURLs: ["http://127.0.0.1:\(sink.port)/notifications"]
                        + (stuckSink.map { ["http://127.0.0.1:\($0.port)/notifications"] } ?? []),
                    timeoutSeconds: 10 + pause))
        }
        // The store's keys and tables are made once, before the simulation: not part of its rate.
        let ready = clock.now
        let cpuAtReady = processCPUSeconds()
        let writerAtReady = store.storeWriterBusy
        progress(console, "subscribing \(subscribers) customers…")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for slice in 0..<Self.subscribingClients {
                group.addTask {
                    for index in stride(from: slice, to: subscribers, by: Self.subscribingClients) {
                        try await subscribe(store, index: index, bundleID: bundleID)
                    }
                }
            }
            try await group.waitForAll()
        }
        let subscribed = clock.now
        var renewals = 0
        var expirations = 0
        for month in 0..<(years * 12) {
            if month % 12 == 0 { progress(console, "year \(month / 12 + 1) of \(years)…") }
            let change = try await store.setClock(advance: .oneMonth, rate: nil)
            renewals += change.ran.renewals
            expirations += change.ran.expirations
        }
        let advanced = clock.now
        let queued = pause > 0 ? try await store.deliveryQueueDepth() : 0
        // Wait for the outbox to drain: the receiver answers, then nothing new arrives for a second.
        progress(console, "waiting for the last notifications…")
        var last = -1
        var lastChange = clock.now
        // The process's CPU time when the last notification arrived: the run's, over the same span as its rate.
        var cpuAtLastChange = processCPUSeconds()
        var writerAtLastChange = store.storeWriterBusy
        while clock.now - max(lastChange, answerFrom) < .seconds(1) {
            let count = received.load(ordering: .relaxed)
            if count != last {
                last = count
                lastChange = clock.now
                cpuAtLastChange = processCPUSeconds()
                writerAtLastChange = store.storeWriterBusy
            }
            try await store.catchUp()
            try await Task.sleep(for: .milliseconds(50))
        }
        let elapsed = (lastChange - ready).seconds
        let runCPU = cpuAtLastChange - cpuAtReady
        let writerShare = writerAtReady.flatMap { start in writerAtLastChange.map { ($0 - start).seconds / elapsed } }
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let peakKilobytes = peakResidentKilobytes()
        // Measured after the run, against the same receiver, with one of the run's own notifications (not
        // with the stuck receiver, whose notifications cost a fourth signature and a send).
        let floor = try (stuck ? nil : sample.withLock { $0 }).map { body in
            try signAndSendPerSecond(like: body, url: "http://127.0.0.1:\(sink.port)/notifications")
        }
        _ = try await store.pruneNotifications()
        let databaseBytes = ["store.sqlite", "store.sqlite-wal"].reduce(0) { total, name in
            let path = directory.appendingPathComponent(name).path
            return total + ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0)
        }
        let subscriberYears = Double(subscribers * years)
        console.write(
            """
            Subscription lifecycle, SQLite (WAL, synchronous=FULL), \(arguments.flag("no-notifications") ? "no notifications" : "V2 notifications to a local receiver")
              \(subscribers) subscribers × \(years) years = \(Int(subscriberYears)) subscriber-years
              \(renewals) renewals, \(expirations) expirations, \(last) notifications received
              \(format(elapsed)) s: \(rate(subscriberYears / elapsed)) subscriber-years/s, \(rate(Double(last) / elapsed)) notifications/s
              setting up \(format((ready - start).seconds)) s (keys and tables; not counted), subscribing \(format((subscribed - ready).seconds)) s, advancing \(format((advanced - subscribed).seconds)) s, draining \(format((lastChange - advanced).seconds)) s
              peak resident memory \(peakKilobytes / 1024) MiB
              database on disk \(databaseBytes / 1_048_576) MiB (\(retention.map { "done notifications kept \($0.days) days" } ?? "every notification kept"))
              CPU a notification (user and system, every thread) \(last > 0 ? microseconds(runCPU, each: last) : "—"), \
            \(format(runCPU / elapsed)) of \(cores) cores busy on average
              the store's writer in write transactions \(writerShare.map(format) ?? "—") of the run (near 1: the one writer sets the rate)

            """)
        if pause > 0 {
            console.write(
                """
                  receiver paused for the first \(format(pause)) s: \(queued) notifications waited in the outbox's \
                delivery queue when advancing ended (at most \(store.maxNotificationsInFlight) in flight, \
                \(store.maxNotificationsInFlightPerReceiver) to one receiver)

                """)
        }
        if stuck {
            let waiting = try await store.deliveryQueueDepth()
            console.write(
                """
                  stuck receiver: \(stuckAttempts.load(ordering: .relaxed)) attempts reached it (each held past the \
                10 s limit); \(waiting) of its notifications waited in the delivery queue at the end

                """)
        }
        if signaturesPerSecond > 0, last > 0 {
            // Three signatures a notification (four with the stuck receiver's): the most notifications per second signing alone allows, and
            // the subscriber-years per second that makes with this run's notifications per subscriber-year.
            let ceiling = signaturesPerSecond / (stuck ? 4 : 3) / (Double(last) / subscriberYears)
            let share = format(subscriberYears / elapsed / ceiling)
            console.write(
                """
                  baseline, same run: bare ES256 on \(cores) cores, \
                \(rate(signaturesPerSecond)) signatures/s: at most \(rate(ceiling)) subscriber-years/s \
                if signing were all the work; this run \(share)× that

                """)
        }
        if let floor, last > 0 {
            let perSubscriberYear = Double(last) / subscriberYears
            let signing = floor.signing / perSubscriberYear
            let sending = floor.signingAndSending / perSubscriberYear
            let share = format(subscriberYears / elapsed / sending)
            console.write(
                """
                  floors, same run, one of the run's notifications made again as the emulator makes it (its JSON and \
                three signatures), nothing rendered from state, stored or recorded: signed alone on \
                \(cores) threads \(rate(floor.signing)) notifications/s, \
                at most \(rate(signing)) subscriber-years/s; signed and sent to the same receiver on \(floor.threads) \
                threads \(rate(floor.signingAndSending)) notifications/s, at most \(rate(sending)) subscriber-years/s; \
                this run \(share)× that; the floors' CPU a notification \(microseconds(floor.signingCPU)) signed alone, \
                \(microseconds(floor.signingAndSendingCPU)) signed and sent (\(format(floor.sendingCoresBusy)) \
                cores busy)

                """)
        }
        return 0
    }

    /// Customers subscribing at once (the emulator's group commit joins their writes).
    static let subscribingClients = 32

    /// One subscriber: a production account, a device, the app, a monthly subscription and its story.
    static func subscribe(_ store: AppStore, index: Int, bundleID: String) async throws {
        let account = try await store.createAccount(environment: .production, storefront: "USA")
        if index % 20 == 1 {
            _ = try await store.configureBilling(account.id.rawValue, retryOnRenewal: true, gracePeriod: true)
        }
        let device = try await store.createDevice(accountID: account.id, deviceID: nil)
        _ = try await store.install(deviceID: device.id.rawValue, bundleID: bundleID, version: "1")
        let outcome = try await store.pay(
            deviceID: device.id.rawValue, bundleID: bundleID, productID: "com.example.storekeeper.monthly",
            quantity: 1, applicationUsername: nil, appAccountToken: nil)
        guard case .purchased(let stored, _) = outcome else { return }
        switch index % 20 {
        case 2:
            _ = try await store.pay(
                deviceID: device.id.rawValue, bundleID: bundleID, productID: "com.example.storekeeper.yearly",
                quantity: 1, applicationUsername: nil, appAccountToken: nil)
        case 3:
            _ = try await store.refund(transactionID: stored.id.rawValue, reason: .other)
        default: break
        }
    }

    /// ES256 signatures per second on every core over a notification-sized message, for a second: the
    /// primitive alone (OpenSSL through ``PrivateKey``), no JSON, no encoding.
    static func bareSignaturesPerSecond() throws -> Double {
        let key = try PrivateKey.generateP256()
        let message = [UInt8](repeating: 0x61, count: 2_048)
        let lanes = ProcessInfo.processInfo.activeProcessorCount
        let rates = Mutex([Double](repeating: 0, count: lanes))
        DispatchQueue.concurrentPerform(iterations: lanes) { lane in
            let perSecond = measure(seconds: 1) { count in
                for _ in 0..<count { _ = try? key.signRawECDSA(message, digest: .sha256) }
            }
            rates.withLock { $0[lane] = perSecond }
        }
        return rates.withLock { $0.reduce(0, +) }
    }

    /// Apple's format alone, on this machine: `body` (a V2 notification as received) signed again as the
    /// emulator signs one (its transaction and renewal info, then the payload around them, with the same
    /// x5c header), for a second on a thread a core; then signed and posted to `url`, on 1, 2 and 4 threads
    /// a core for a second each, nothing else done. The most notifications a second of that shape the
    /// machine can sign, and sign and deliver, whatever the store does.
    static func signAndSendPerSecond(like body: [UInt8], url: String) throws -> Floor {
        guard let token = try JSONParser.parse(body)["signedPayload"]?.stringValue,
            case let outer = try CompactJWS(token), var data = outer.payload["data"]?.objectValue,
            let transaction = try data["signedTransactionInfo"]?.stringValue.map({ try CompactJWS($0).payload }),
            let x5c = outer.header["x5c"]?.arrayValue
        else { throw CommandError.runtime("the receiver's notification has no signed payload with a transaction") }
        let renewal = try data["signedRenewalInfo"]?.stringValue.map { try CompactJWS($0).payload }
        let chain = try x5c.map { value in
            guard let text = value.stringValue, let der = Data(base64Encoded: text) else {
                throw CommandError.runtime("the notification's x5c header is not base64")
            }
            return try Certificate(derEncoded: der)
        }
        // A key of its own (no receiver verifies here): the header, and so every size, is the emulator's.
        let signer = try JWSChainSigner(key: try PrivateKey.generateP256(), chain: chain)
        data["signedTransactionInfo"] = nil
        data["signedRenewalInfo"] = nil
        let rest = data
        let start = outer.payload
        let signedDate = start["signedDate"] ?? .null
        let client = HTTPClient()
        /// One notification signed as the emulator signs it, then posted (unless `send` is false); whether
        /// it was made and, if posted, answered 200.
        @Sendable func one(send: Bool) -> Bool {
            guard
                let filled = try? V2NotificationSigning.data(
                    rest, transaction: transaction, renewalInfo: renewal, signer: signer),
                let signed = try? signer.sign(
                    payloadBytes: V2NotificationSigning.payloadBytes(start, data: filled, signedDate: signedDate))
            else { return false }
            let body = OutboundNotification.v2Body(signedPayload: signed, signed: true)
            guard send else { return !body.isEmpty }
            guard
                case .success(let response) = client.sendBlocking(
                    "POST", url, headers: [("Content-Type", "application/json")], body: body)
            else { return false }
            return response.status == 200
        }
        /// Notifications a second on `threads` threads of their own (Dispatch's concurrentPerform would run
        /// no more at once than there are cores) for a second.
        func measured(threads: Int, send: Bool) throws -> Measured {
            let made = Atomic<Int>(0)
            let failed = Atomic<Bool>(false)
            let clock = ContinuousClock()
            let began = clock.now
            let cpu = processCPUSeconds()
            let group = DispatchGroup()
            for _ in 0..<threads {
                group.enter()
                Thread {
                    while clock.now - began < .seconds(1), !failed.load(ordering: .relaxed) {
                        guard one(send: send) else {
                            failed.store(true, ordering: .relaxed)
                            break
                        }
                        made.add(1, ordering: .relaxed)
                    }
                    group.leave()
                }.start()
            }
            group.wait()
            let seconds = (clock.now - began).seconds
            let count = Double(made.load(ordering: .relaxed))
            let cpuSeconds = processCPUSeconds() - cpu
            guard !failed.load(ordering: .relaxed) else {
                throw CommandError.runtime(
                    send
                        ? "the receiver did not answer 200 to a notification signed again"
                        : "signing the run's notification again failed")
            }
            guard count > 0 else { throw CommandError.runtime("no notification was made again within a second") }
            return Measured(perSecond: count / seconds, cpu: cpuSeconds / count, coresBusy: cpuSeconds / seconds)
        }
        let cores = ProcessInfo.processInfo.activeProcessorCount
        // Signing is all CPU: a thread a core. Sending waits on the receiver: the best of more threads.
        let signing = try measured(threads: cores, send: false)
        var best = (measured: try measured(threads: cores, send: true), threads: cores)
        for threads in [2 * cores, 4 * cores] {
            let sending = try measured(threads: threads, send: true)
            if sending.perSecond > best.measured.perSecond { best = (sending, threads) }
        }
        return Floor(
            signing: signing.perSecond, signingAndSending: best.measured.perSecond, threads: best.threads,
            signingCPU: signing.cpu, signingAndSendingCPU: best.measured.cpu, sendingCoresBusy: best.measured.coresBusy)
    }

    /// One floor's measurement: notifications a second, CPU seconds a notification (every thread of the
    /// process), and the cores busy on average.
    struct Measured {
        var perSecond: Double
        var cpu: Double
        var coresBusy: Double
    }

    /// What ``signAndSendPerSecond(like:url:)`` measured: notifications a second, and CPU seconds a
    /// notification.
    struct Floor {
        var signing: Double
        var signingAndSending: Double
        /// The threads the best sending rate was measured on.
        var threads: Int
        var signingCPU: Double
        var signingAndSendingCPU: Double
        /// The cores busy on average while the best sending rate was measured.
        var sendingCoresBusy: Double
    }

    /// The process's peak resident set (VmHWM), in KiB.
    static func peakResidentKilobytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
        }
        return 0
    }
}
