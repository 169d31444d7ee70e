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
import StorekeeperSQL
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
                name: "floor-rounds", valueName: "n",
                help: "Rounds the months are split into, the floors measured after each (default: 4; 1 to 12)."),
            .init(
                name: "notification-retention-days", valueName: "n",
                help: "Delete done notifications n days (at the time rate) after they were made (default: keep all)."),
        ],
        flags: [
            ("no-notifications", "Configure no receiver: the lifecycle, scheduler and storage alone."),
            ("stuck-receiver", "Also send every notification to a second receiver that never answers in time."),
            (
                "statements",
                "Also count what each SQL statement on the store's writer's connection costs after subscribing (two reads of the thread's CPU clock a statement) and list the costliest."
            ),
        ],
        discussion: """
            Production accounts (no sandbox renewal cap) with monthly subscriptions: of every 20 subscribers, \
            one fails billing at its first renewal and expires after billing retry, one upgrades to the yearly \
            plan at once, one is refunded at once; the rest renew every month. Store time advances a month per \
            step; every change writes V2 notifications (three ES256 signatures each) to the outbox, which sends \
            them to a receiver on 127.0.0.1. Reports subscriber-years per second (from the first subscription, once \
            the store's keys and tables are made, until the last notification was received) and peak resident memory, and, as a baseline measured first in the \
            same run, bare ES256 signatures per second on every core: the ceiling those signatures alone put \
            on subscriber-years per second with this run's notifications; and two floors from one of its own \
            notifications made again as the emulator makes it (JSON and three signatures, nothing read or stored): \
            signed alone, and signed and posted to the same receiver. The months run in --floor-rounds rounds: \
            after each, the outbox drains and the floors are measured (not counted in the run's time), and the \
            ratio to the floor is the median of the rounds' (each round's notifications a second over its own \
            floor), as the machine's speed moves over a long run. It also gives the process's CPU \
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
        let floorRounds = Int(arguments.value("floor-rounds") ?? "4") ?? 0
        guard subscribers > 0, (1...20).contains(years), (0...3_600).contains(pause), (1...12).contains(floorRounds)
        else {
            throw CommandError.usage(
                "--subscribers must be positive, --years 1 to 20, --receiver-pause 0 to 3600 and --floor-rounds 1 to 12"
            )
        }
        // Floors need the run's notifications, each one signed for one receiver; a paused receiver's run is one
        // round (what it measures is the outbox holding, not the rate).
        let floors = !arguments.flag("no-notifications") && !stuck
        let rounds = floors && pause == 0 ? floorRounds : 1
        let signaturesPerSecond = arguments.flag("no-notifications") ? 0 : try bareSignaturesPerSecond()
        let received = Atomic<Int>(0)
        // One notification as received, kept for the floors.
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
        progress(console, "subscribing \(subscribers) customers…")
        var segment = Segment.Start(at: ready, store: store, received: 0)
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
        let subscribing = clock.now - ready
        let countStatements = arguments.flag("statements")
        if countStatements { await store.countStoreWriterStatements(true) }
        // What arrives from here on is what the counted statements are divided by.
        let receivedBeforeCounting = received.load(ordering: .relaxed)
        var renewals = 0
        var expirations = 0
        var advancing = Duration.zero
        var draining = Duration.zero
        var queued = 0
        var segments: [Segment] = []
        // Each floor with the round it followed (a round before any notification arrived has none).
        var measured: [(round: Segment, floor: Floor)] = []
        let months = years * 12
        for round in 0..<rounds {
            let began = clock.now
            for month in (months * round / rounds)..<(months * (round + 1) / rounds) {
                if month % 12 == 0 { progress(console, "year \(month / 12 + 1) of \(years)…") }
                let change = try await store.setClock(advance: .oneMonth, rate: nil)
                renewals += change.ran.renewals
                expirations += change.ran.expirations
            }
            let advanced = clock.now
            advancing += advanced - began
            if pause > 0 { queued = try await store.deliveryQueueDepth() }
            // Wait for the outbox to drain: the receiver answers, then nothing new arrives for a second.
            progress(console, round == rounds - 1 ? "waiting for the last notifications…" : "draining the outbox…")
            var last = -1
            var end = segment.end(at: clock.now, store: store, received: received.load(ordering: .relaxed))
            while clock.now - max(end.lastChange, answerFrom) < .seconds(1) {
                let count = received.load(ordering: .relaxed)
                if count != last {
                    last = count
                    end = segment.end(at: clock.now, store: store, received: count)
                }
                try await store.catchUp()
                try await Task.sleep(for: .milliseconds(50))
            }
            draining += end.lastChange - advanced
            segments.append(end)
            // The floors, with the outbox idle: not part of the run's time, CPU or notifications.
            if floors, let body = sample.withLock({ $0 }) {
                progress(console, "measuring the floors (round \(round + 1) of \(rounds))…")
                measured.append(
                    (end, try signAndSendPerSecond(like: body, url: "http://127.0.0.1:\(sink.port)/notifications")))
            }
            segment = Segment.Start(at: clock.now, store: store, received: received.load(ordering: .relaxed))
        }
        let last = segments.reduce(0) { $0 + $1.received }
        let elapsed = segments.reduce(0) { $0 + $1.seconds }
        let runCPU = segments.reduce(0) { $0 + $1.cpu }
        let writerShare =
            segments.contains { $0.writer == nil } ? nil : segments.reduce(0) { $0 + $1.writer! } / elapsed
        let writerCPU = segments.contains { $0.writerCPU == nil } ? nil : segments.reduce(0) { $0 + $1.writerCPU! }
        // On a core for this share of its time in write transactions, and its CPU a notification.
        let writerOnCore = writerShare.flatMap { share in writerCPU.map { format($0 / (share * elapsed)) } } ?? "—"
        let writerEach = writerCPU.map { last > 0 ? microseconds($0, each: last) : "—" } ?? "—"
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let peakKilobytes = peakResidentKilobytes()
        // Read before the pruning below, which is not part of the run.
        let statementCosts = countStatements ? await store.storeWriterStatementCosts() : []
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
              setting up \(format((ready - start).seconds)) s (keys and tables; not counted), subscribing \(format(subscribing.seconds)) s, advancing \(format(advancing.seconds)) s, draining \(format(draining.seconds)) s\(rounds > 1 ? " in \(rounds) rounds (the floors measured after each, not counted)" : "")
              peak resident memory \(peakKilobytes / 1024) MiB
              database on disk \(databaseBytes / 1_048_576) MiB (\(retention.map { "done notifications kept \($0.days) days" } ?? "every notification kept"))
              CPU a notification (user and system, every thread) \(last > 0 ? microseconds(runCPU, each: last) : "—"), \
            \(format(runCPU / elapsed)) of \(cores) cores busy on average
              the store's writer in write transactions \(writerShare.map(format) ?? "—") of the run (near 1: the one writer sets the rate), on a core \(writerOnCore) of that time (\(writerEach) of CPU a notification)

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
        if !measured.isEmpty, last > 0 {
            let perSubscriberYear = Double(last) / subscriberYears
            let measuredFloors = measured.map(\.floor)
            // Each round's notifications a second over the floor measured right after it.
            let shares = measured.map { Double($0.round.received) / $0.round.seconds / $0.floor.signingAndSending }
            let signing = median(measuredFloors.map(\.signing)) ?? 0
            let sending = median(measuredFloors.map(\.signingAndSending)) ?? 0
            let several = measuredFloors.count > 1
            func list(_ values: [String]) -> String { values.map { $0.drop { $0 == " " } }.joined(separator: ", ") }
            /// " (each round: a, b, …)" after a median, when there are rounds.
            func eachRound(_ values: [String]) -> String { several ? " (each round: \(list(values)))" : "" }
            let threads = measuredFloors.map { String($0.threads) }.joined(separator: ", ")
            let runRates = measured.map { rate(Double($0.round.received) / $0.round.seconds) }
            console.write(
                """
                  floors, same run, one of the run's notifications made again as the emulator makes it (its JSON and \
                three signatures), nothing rendered from state, stored or recorded, \
                \(several ? "in each round with the outbox idle (the rounds' medians)" : "with the outbox idle"): \
                signed alone on \(cores) threads \(rate(signing)) notifications/s, at most \
                \(rate(signing / perSubscriberYear)) subscriber-years/s; signed and sent to the same receiver \
                \(rate(sending)) notifications/s\(eachRound(measuredFloors.map { rate($0.signingAndSending) })) on \
                \(threads) threads (the best of 1, 2 and 4 a core), at most \(rate(sending / perSubscriberYear)) \
                subscriber-years/s\(several ? "; the run's notifications/s each round \(list(runRates))" : ""); \
                this run \(format(median(shares) ?? 0))× that\(eachRound(shares.map(format))); the floors' CPU a \
                notification \(microseconds(median(measuredFloors.map(\.signingCPU)) ?? 0)) signed alone, \
                \(microseconds(median(measuredFloors.map(\.signingAndSendingCPU)) ?? 0)) signed and sent \
                (\(format(median(measuredFloors.map(\.sendingCoresBusy)) ?? 0)) cores busy)

                """)
        }
        if countStatements {
            // The run's own (the floors post to the same receiver, between rounds).
            let notifications = last - receivedBeforeCounting
            let (items, unit) =
                notifications > 0 ? (notifications, "notification") : (renewals + expirations, "renewal or expiry")
            console.write(statementLines(statementCosts, each: items, of: unit, while: "after subscribing"))
        }
        return 0
    }

    /// The costliest statements run on the store's writer's connection (its writes, and the reads that run
    /// there), each with its CPU and calls for each of `items` (`unit`: what they are; `span`: when counted).
    static func statementLines(_ costs: [StatementCost], each items: Int, of unit: String, while span: String)
        -> String
    {
        guard !costs.isEmpty, items > 0 else { return "  the writer's statements: none counted\n" }
        let total = costs.reduce(0) { $0 + $1.cpu.seconds }
        var lines = [
            "  statements on the store's writer's connection \(span) (its own CPU a \(unit) and calls a \(unit), over \(items); share of the \(microseconds(total, each: items)) a \(unit) they took in all):"
        ]
        for cost in costs.prefix(16) {
            let text = cost.sql.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            let each = cost.cpu.seconds / Double(items) * 1e6
            lines.append(
                "    \(String(format: "%5.1f µs  %4.2f×  %4.1f%%", each, Double(cost.calls) / Double(items), 100 * cost.cpu.seconds / max(total, 1e-9)))  \(text.prefix(100))"
            )
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// One round of the run: its time (to the last notification received), notifications, the process's CPU
    /// seconds and the store's writer's seconds in write transactions (and on a core in them) over that time.
    struct Segment {
        var seconds: Double
        var received: Int
        var cpu: Double
        var writer: Double?
        var writerCPU: Double?
        var lastChange: ContinuousClock.Instant

        /// Where a round began.
        struct Start {
            let at: ContinuousClock.Instant
            let cpu: Double
            let writer: Duration?
            let writerCPU: Duration?
            let received: Int

            init(at: ContinuousClock.Instant, store: AppStore, received: Int) {
                (self.at, cpu, writer, writerCPU, self.received) = (
                    at, processCPUSeconds(), store.storeWriterBusy, store.storeWriterCPU, received
                )
            }

            /// The round so far, with `received` notifications in all at `now`.
            func end(at now: ContinuousClock.Instant, store: AppStore, received: Int) -> Segment {
                Segment(
                    seconds: (now - at).seconds, received: received - self.received, cpu: processCPUSeconds() - cpu,
                    writer: writer.flatMap { start in store.storeWriterBusy.map { ($0 - start).seconds } },
                    writerCPU: writerCPU.flatMap { start in store.storeWriterCPU.map { ($0 - start).seconds } },
                    lastChange: now)
            }
        }
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
