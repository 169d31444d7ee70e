import AppStoreEmulator
import AppStoreSignedData
import Foundation
import PurchaseServer
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperPostgres
import StorekeeperSQL
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `storekeeper bench serve-cluster`: real `serve` processes on one PostgreSQL.
extension BenchCommands {
    static let clusterSpec = Arguments.Spec(
        command: "storekeeper bench serve-cluster",
        abstract: "Measure purchase servers on PostgreSQL: ingestion with 1, 2 and 4 processes, and reads.",
        options: [
            .init(
                name: "database", valueName: "url",
                help:
                    "A PostgreSQL server URL whose user may create databases (default: $STOREKEEPER_TEST_POSTGRES_URL, "
                    + "which scripts/test-postgres start prints)."),
            .init(name: "processes", valueName: "list", help: "Server process counts to measure (default: 1,2,4)."),
            .init(name: "notifications", valueName: "n", help: "Notifications per count (default: 20000)."),
            .init(name: "subscribers", valueName: "n", help: "Subscribers stored before the reads (default: 100000)."),
            .init(name: "clients", valueName: "n", help: "Concurrent HTTP clients (default: 64)."),
            .init(name: "seconds", valueName: "s", help: "Seconds of wrk for the reads (default: 5)."),
            .init(
                name: "read-rounds", valueName: "n",
                help: "Interleaved read rounds, SQLite then PostgreSQL (default: 3; medians reported)."),
            .init(
                name: "ingest-rounds", valueName: "n",
                help: "Interleaved ingestion rounds, each phase posting a share of the notifications (default: 3)."),
        ],
        discussion: """
            Baseline, same run and path: one process on SQLite. For each process count, a scratch database is created on the server and that many `storekeeper serve \
            --database` processes are started on loopback; --notifications distinct V2 notifications (DID_RENEW, \
            three ES256 signatures each) are posted round-robin by --clients concurrent HTTP clients, each answered \
            only once committed; then the stored inputs are counted. Every phase's servers run from the start and \
            the phases take turns in --ingest-rounds interleaved rounds, each posting its share: rates are over all \
            rounds, the ratios between phases the rounds' medians. Baseline, same run: verifying the same \
            notifications alone on both cores. Under each rate, the CPU a notification cost (from /proc) the server \
            processes, PostgreSQL's processes (when it runs here and its postmaster.pid can be read) and the \
            clients (this process). Then, with the largest count, --subscribers users each post a \
            transaction (POST /v1/transactions), and wrk reads random subscribers from every process at once \
            (GET /v1/subscribers/{id}); baseline, same run: one process on SQLite holding the same users, read by \
            the same script, the rounds interleaved. The scratch databases are dropped at the end. PostgreSQL runs on the same \
            cores as the servers and the clients.
            """)

    static func cluster(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard
            let url = arguments.value("database")
                ?? ProcessInfo.processInfo.environment["STOREKEEPER_TEST_POSTGRES_URL"]
        else { throw CommandError.usage("--database is needed (eval \"$(scripts/test-postgres start)\" gives one)") }
        let counts = (arguments.value("processes") ?? "1,2,4").split(separator: ",").compactMap { Int($0) }
        let count = Int(arguments.value("notifications") ?? "20000") ?? 0
        let subscriberCount = Int(arguments.value("subscribers") ?? "100000") ?? 0
        let clients = Int(arguments.value("clients") ?? "64") ?? 0
        let seconds = Int(arguments.value("seconds") ?? "5") ?? 0
        let rounds = Int(arguments.value("read-rounds") ?? "3") ?? 0
        let ingestRounds = Int(arguments.value("ingest-rounds") ?? "3") ?? 0
        guard (1...99).contains(rounds) else { throw CommandError.usage("--read-rounds must be 1 to 99") }
        guard (1...99).contains(ingestRounds) else { throw CommandError.usage("--ingest-rounds must be 1 to 99") }
        guard !counts.isEmpty, counts.allSatisfy({ (1...16).contains($0) }), count > 0, subscriberCount > 0,
            (1...1024).contains(clients), seconds > 0
        else { throw CommandError.usage("--processes is 1 to 16 each; the other numbers are positive") }
        let binary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        let root = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: root) }
        let pki = try EmulatorPKI.loadOrCreate(in: root.appendingPathComponent("pki"))
        let bundleID = "com.example.bench"
        try Data(pki.signedData.root.pemEncoded.utf8).write(to: root.appendingPathComponent("jws.pem"))
        try Data(pki.receipts.root.pemEncoded.utf8).write(to: root.appendingPathComponent("receipts.pem"))
        let config = root.appendingPathComponent("server.json")
        try Data(
            """
            {"secretKey": "sk_bench_secret_0123", "apps": [{"bundleId": "\(bundleID)", "publicKey": "pk_bench_key",
              "receiptRoots": ["receipts.pem"], "jwsRoots": ["jws.pem"], "entitlements": {"plus": ["monthly"]}}]}
            """.utf8
        ).write(to: config)
        let admin: PostgresConnection
        do { admin = try PostgresConnection(url: url) } catch {
            throw CommandError.runtime("cannot reach \(PostgresDatabase.redacted(url)): \(error)")
        }
        var scratch: [String] = []
        defer { for name in scratch { try? admin.executeScript("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") } }
        func freshDatabase() throws -> String {
            let name = "sk_bench_\(UInt32.random(in: 0...UInt32.max))"
            try admin.executeScript("CREATE DATABASE \(name)")
            scratch.append(name)
            guard let slash = url.lastIndex(of: "/") else { return url }
            return String(url[..<slash]) + "/" + name
        }

        // PostgreSQL's processes, when it runs on this machine and its postmaster.pid can be read: their CPU is
        // counted with the servers'.
        let postmaster = (try? admin.execute("SHOW data_directory").first?["data_directory"].string).flatMap {
            directory in
            (try? String(contentsOfFile: directory + "/postmaster.pid", encoding: .utf8))?
                .split(separator: "\n").first.flatMap { Int32($0) }
        }
        progress(console, "signing \(count) notifications and \(subscriberCount) transactions…")
        let signer = try JWSChainSigner(
            key: pki.signedData.leafKey, chain: [pki.signedData.leaf, pki.signedData.intermediate, pki.signedData.root])
        let start = now.addingTimeInterval(-3_600)
        let bodies = try (0..<count).map { try benchNotification($0, signer: signer, bundleID: bundleID, start: start) }
        let verifyRate = try notificationVerification(bodies, root: pki.signedData.root, bundleID: bundleID, now: now)
            .rate

        // Baseline, same run and path: one process on SQLite (its group commit), over HTTP. Every phase's servers
        // run from the start, and the phases take turns in interleaved rounds, each posting its share of the
        // notifications: the VM's speed moves within a run, and one long phase a count measured that as well.
        var lines: [String] = []
        do {
            var phases: [IngestPhase] = [
                IngestPhase(
                    name: "1 process, SQLite", database: nil,
                    servers: [
                        try startServer(
                            binary, config: config, database: nil, data: root.appendingPathComponent("sqlite"))
                    ])
            ]
            defer { for phase in phases { stopServers(phase.servers) } }
            for processes in counts {
                let database = try freshDatabase()
                phases.append(
                    IngestPhase(
                        name: "\(processes) process\(processes == 1 ? "  " : "es")", database: database,
                        servers: try (0..<processes).map { _ in
                            try startServer(binary, config: config, database: database, data: root)
                        }))
            }
            // Each round's rate of every phase, in order (``Rates``: ratios between phases by round).
            var rates = Rates(rounds: [])
            for round in 0..<ingestRounds {
                let (low, high) = (count * round / ingestRounds, count * (round + 1) / ingestRounds)
                guard high > low else { continue }
                var roundRates: [Double] = []
                for index in phases.indices {
                    progress(
                        console,
                        "round \(round + 1) of \(ingestRounds): \(phases[index].name.trimmingCharacters(in: .whitespaces)) ingesting \(high - low) notifications…"
                    )
                    let targets = phases[index].servers.map { $0.base + "/v1/notifications/apple/\(bundleID)" }
                    // PostgreSQL's processes counted only where the phase uses them.
                    let master = phases[index].database == nil ? nil : postmaster
                    // The scrape first: its own CPU falls outside the window, as the one after it does.
                    let totals = try await StorageTotals(phases[index].servers)
                    let before = CPUTime(servers: phases[index].servers, postmaster: master)
                    let rate = try await concurrentRate(high - low, clients: clients) { offset in
                        let item = low + offset
                        try await postAcknowledged(targets[item % targets.count], body: bodies[item])
                    }
                    phases[index].cpu.add(from: before, to: CPUTime(servers: phases[index].servers, postmaster: master))
                    phases[index].totals.add(from: totals, to: try await StorageTotals(phases[index].servers))
                    phases[index].seconds += Double(high - low) / rate
                    roundRates.append(rate)
                }
                rates.rounds.append(roundRates)
            }
            for phase in phases {
                guard let database = phase.database else { continue }
                let stored = try await PostgresServerStorage(url: database, poolSize: 1).read { try $0.inputCount() }
                guard stored == count else {
                    throw CommandError.runtime("stored \(stored) notifications, expected \(count)")
                }
            }
            let sqlite = phases[0]
            lines.append(
                "  \(phases.count - 1) counts and SQLite take turns in \(rates.rounds.count) interleaved rounds, each posting a share; rates over all rounds, ratios the rounds' medians"
            )
            lines.append(
                "  \(sqlite.name)   \(rate(Double(count) / sqlite.seconds)) /s   ratio \(format(Double(count) / sqlite.seconds / verifyRate)) of verification alone"
            )
            lines.append(sqlite.cpu.line(items: count))
            lines.append(sqlite.totals.line(items: count))
            for (index, phase) in phases.enumerated().dropFirst() {
                let ofFirst = rates.rounds.map { $0[index] / $0[1] }
                lines.append(
                    "  \(phase.name)  \(rate(Double(count) / phase.seconds)) /s   ×\(format(rates.medianRatio(index, to: 1))) of 1 process (each round: \(ofFirst.map(format).joined(separator: ", ")))   ratio \(format(Double(count) / phase.seconds / verifyRate)) of verification alone, \(format(rates.medianRatio(index, to: 0))) of SQLite"
                )
                lines.append(phase.cpu.line(items: count))
                lines.append(phase.totals.line(items: count))
            }
        }

        // Reads, with the largest count, over 100,000 stored subscribers; baseline, same run: one process on
        // SQLite with the same subscribers, read by the same wrk script, the rounds interleaved.
        let processes = counts.max() ?? 1
        let database = try freshDatabase()
        let servers = try (0..<processes).map { _ in
            try startServer(binary, config: config, database: database, data: root)
        }
        defer { stopServers(servers) }
        let sqlite = try startServer(binary, config: config, database: nil, data: root.appendingPathComponent("reads"))
        defer { stopServers([sqlite]) }
        let posts: [[UInt8]] = try (0..<subscriberCount).map { index in
            let ms = EpochMilliseconds.milliseconds(start) + Int64(index)
            let id = String(5_000_000_000_000_000 + index)
            let transaction = try signer.sign([
                "transactionId": .string(id), "originalTransactionId": .string(id), "bundleId": .string(bundleID),
                "productId": .string("monthly"), "purchaseDate": .integer(ms),
                "expiresDate": .integer(ms + 2_592_000_000),
                "type": .string("Auto-Renewable Subscription"), "signedDate": .integer(ms),
                "environment": .string("Sandbox"), "transactionReason": .string("PURCHASE"),
            ])
            return JSONWriter.bytes(
                .object([
                    "bundleId": .string(bundleID), "appUserId": .string("user-\(index)"),
                    "signedTransaction": .string(transaction),
                ]))
        }
        progress(console, "\(processes) processes: storing \(subscriberCount) subscribers…")
        let postRate = try await concurrentRate(subscriberCount, clients: clients) { index in
            try await postAcknowledged(
                servers[index % servers.count].base + "/v1/transactions", body: posts[index],
                authorization: "Bearer pk_bench_key")
        }
        progress(console, "1 process on SQLite: storing the same subscribers…")
        _ = try await concurrentRate(subscriberCount, clients: clients) { index in
            try await postAcknowledged(
                sqlite.base + "/v1/transactions", body: posts[index], authorization: "Bearer pk_bench_key")
        }
        // Every process reads each user once first (as the SQLite bench does), so the rounds measure reads
        // of kept answers, each checked against the user's version.
        progress(console, "every process reads each user once…")
        let everyServer = servers + [sqlite]
        let warmRate = try await concurrentRate(subscriberCount * everyServer.count, clients: clients) { index in
            let server = everyServer[index % everyServer.count]
            let user = index / everyServer.count
            let response = try await HTTPClient(timeout: .seconds(30)).send(
                "GET", server.base + "/v1/subscribers/user-\(user)",
                headers: [("Authorization", "Bearer sk_bench_secret_0123")], body: [])
            guard response.status == 200 else { throw CommandError.runtime("user-\(user): HTTP \(response.status)") }
        }
        var readLines = ["  GET /v1/subscribers/{id}: wrk not found (scripts/bootstrap installs it)"]
        if let wrk = findExecutable("wrk") {
            let script = try randomUserScript(
                at: root.appendingPathComponent("random-subscriber.lua"), route: "subscribers",
                key: "sk_bench_secret_0123", users: subscriberCount)
            var sqliteRounds: [(rate: Double, p99: Double?)] = []
            var postgresRounds: [(rate: Double, p99: Double?, non2xx: Int)] = []
            for round in 1...rounds {
                progress(console, "reads, round \(round) of \(rounds): SQLite, then every PostgreSQL process at once…")
                let alone = try runWrk(
                    wrk, url: sqlite.base + "/", seconds: seconds, connections: 64, script: script, threads: 2)
                sqliteRounds.append((alone.requestsPerSecond, alone.p99Milliseconds))
                let results = try runWrkEverywhere(
                    wrk, bases: servers.map(\.base), script: script, seconds: seconds,
                    connections: max(1, 64 / servers.count))
                postgresRounds.append(
                    (
                        results.reduce(0) { $0 + $1.requestsPerSecond }, results.compactMap(\.p99Milliseconds).max(),
                        results.reduce(0) { $0 + $1.non2xx }
                    ))
            }
            let sqliteRate = median(sqliteRounds.map(\.rate)) ?? 0
            let postgresRate = median(postgresRounds.map(\.rate)) ?? 0
            let non2xx = postgresRounds.reduce(0) { $0 + $1.non2xx }
            readLines = [
                "  each user read once from every process first (\(rate(warmRate)) reads/s over loopback)",
                "  GET /v1/subscribers/{random of \(subscriberCount)}, 64 connections, \(rounds) interleaved rounds of \(seconds) s (medians)",
                "    1 process, SQLite (wrk -t2)                      \(rate(sqliteRate)) req/s, p99 \(latency(median(sqliteRounds.compactMap(\.p99))))",
                "    \(processes) processes, PostgreSQL (\(processes) wrk -t1 at once)   \(rate(postgresRate)) req/s, p99 \(latency(median(postgresRounds.compactMap(\.p99))))   ratio \(format(postgresRate / sqliteRate)) of SQLite (each round: \(zip(postgresRounds, sqliteRounds).map { format($0.rate / $1.rate) }.joined(separator: ", ")))   (target ≥ 0.8, p99 < 10 ms)\(non2xx > 0 ? "  (\(non2xx) non-2xx!)" : "")",
            ]
        }
        console.write(
            """
            Purchase servers on one PostgreSQL (\(PostgresDatabase.redacted(url))), \(clients) concurrent HTTP clients, same 2 cores
              V2 notifications, each committed before it is acknowledged (\(count) per count, three ES256 signatures each)
              verification alone, 2 cores   \(rate(verifyRate)) /s
            \(lines.joined(separator: "\n"))
              POST /v1/transactions of \(subscriberCount) users over \(processes) processes   \(rate(postRate)) /s
            \(readLines.joined(separator: "\n"))

            """)
        return 0
    }

    struct RunningServer {
        let process: Process
        let base: String
    }

    /// The servers' write transactions, the writes they held and their askings of the others' changes, summed
    /// from each one's `/metrics` at one moment.
    struct StorageTotals {
        var transactions = 0.0
        var writes = 0.0
        /// Nil where no server reports askings (SQLite).
        var askings: Double?

        init() {}

        init(_ servers: [RunningServer]) async throws {
            for server in servers {
                let response = try await HTTPClient().send("GET", server.base + "/metrics")
                guard response.status == 200 else {
                    throw CommandError.runtime("GET /metrics answered \(response.status)")
                }
                for line in String(decoding: response.body, as: UTF8.self).split(separator: "\n") {
                    let parts = line.split(separator: " ")
                    guard parts.count == 2, let value = Double(parts[1]) else { continue }
                    switch parts[0] {
                    case "storekeeper_storage_write_transactions_total": transactions += value
                    case "storekeeper_storage_writes_total": writes += value
                    case "storekeeper_cache_askings_total": askings = (askings ?? 0) + value
                    default: break
                    }
                }
            }
        }

        /// Adds what the servers counted between two scrapes.
        mutating func add(from start: StorageTotals, to end: StorageTotals) {
            transactions += end.transactions - start.transactions
            writes += end.writes - start.writes
            if let now = end.askings, let was = start.askings { askings = (askings ?? 0) + now - was }
        }

        /// What was added, per item, as a report line.
        func line(items: Int) -> String {
            var line =
                "      write transactions \(Int(transactions)) (\(BenchCommands.format(writes / max(1, transactions))) writes each on average)"
            if let askings {
                line +=
                    ", the change follower's round trips \(BenchCommands.format(askings / Double(max(1, items)))) a notification"
            }
            return line
        }
    }

    /// One phase of the ingestion rounds: its servers, and what its rounds measured together.
    struct IngestPhase {
        let name: String
        /// The scratch database on PostgreSQL; nil for SQLite.
        let database: String?
        let servers: [RunningServer]
        var seconds = 0.0
        var cpu: CPUSpent
        var totals = StorageTotals()

        init(name: String, database: String?, servers: [RunningServer]) {
            self.name = name
            self.database = database
            self.servers = servers
            cpu = CPUSpent(processes: servers.count)
        }
    }

    /// CPU time spent between readings of ``CPUTime``, summed over the phases added.
    struct CPUSpent {
        var processes = 1
        var servers = 0.0
        var postgres: Double?
        var clients = 0.0
        /// Context switches on the whole machine (nil where `/proc/stat` cannot be read).
        var switches: Double?

        mutating func add(from start: CPUTime, to end: CPUTime) {
            servers += end.servers - start.servers
            clients += end.clients - start.clients
            if let now = end.switches, let was = start.switches { switches = (switches ?? 0) + now - was }
            if let now = end.postgres, let was = start.postgres { postgres = (postgres ?? 0) + now - was }
        }

        /// What each process group used per item, in microseconds, as a report line.
        func line(items: Int) -> String {
            func each(_ seconds: Double) -> String { BenchCommands.microseconds(seconds, each: items) }
            var parts = ["the server\(processes == 1 ? "" : "s") \(each(servers))"]
            if let postgres { parts.append("PostgreSQL \(each(postgres))") }
            parts.append("the clients \(each(clients))")
            let switched = switches.map {
                "; context switches a notification (the whole machine) \(BenchCommands.format($0 / Double(max(1, items))))"
            }
            return "      CPU a notification: " + parts.joined(separator: ", ") + (switched ?? "")
        }
    }

    /// CPU time (user and system, from `/proc`) of the server processes, of PostgreSQL's (the postmaster, the
    /// backends it has reaped and those running) and of this process (the HTTP clients), at one moment.
    struct CPUTime {
        var servers = 0.0
        var postgres: Double?
        var clients = 0.0
        var switches: Double?
        let processes: Int

        init(servers running: [RunningServer], postmaster: Int32?) {
            processes = running.count
            switches = Self.contextSwitches()
            servers = running.compactMap { Self.seconds($0.process.processIdentifier) }.reduce(0, +)
            clients = Self.seconds(getpid()) ?? 0
            guard let postmaster, let own = Self.seconds(postmaster, children: true) else { return }
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            postgres =
                own
                + entries.compactMap(Int32.init).filter { Self.parent($0) == postmaster }
                .compactMap { Self.seconds($0) }.reduce(0, +)
        }

        /// The fields of `/proc/<pid>/stat` after the command's name (the state first); nil when unreadable.
        private static func fields(_ pid: Int32) -> [Substring]? {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let end = stat.lastIndex(of: ")")
            else { return nil }
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            return fields.count > 14 ? fields : nil
        }

        /// The machine's context switches since boot (`/proc/stat`'s `ctxt` line); nil when unreadable.
        static func contextSwitches() -> Double? {
            guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
            return stat.split(separator: "\n").first { $0.hasPrefix("ctxt ") }.flatMap { Double($0.dropFirst(5)) }
        }

        private static func parent(_ pid: Int32) -> Int32? { fields(pid).flatMap { Int32($0[1]) } }

        /// User and system seconds; with `children`, those of the children it has reaped too.
        static func seconds(_ pid: Int32, children: Bool = false) -> Double? {
            guard let fields = fields(pid) else { return nil }
            let ticks = fields[11...(children ? 14 : 12)].compactMap { Double($0) }.reduce(0, +)
            return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
        }
    }

    static func startServer(_ binary: String, config: URL, database: String?, data: URL) throws -> RunningServer {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments =
            ["serve", "--config", config.path, "--port", "0", "--data", data.path, "--log-level", "error"]
            + (database.map { ["--database", $0] } ?? [])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var bytes: [UInt8] = []
        while !bytes.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            bytes += chunk
        }
        let line = String(decoding: bytes, as: UTF8.self)
        guard let range = line.range(of: "http://[^ \n]+:[0-9]+", options: .regularExpression) else {
            process.terminate()
            throw CommandError.runtime("storekeeper serve did not start: \(line)")
        }
        return RunningServer(process: process, base: String(line[range]))
    }

    static func stopServers(_ servers: [RunningServer]) {
        for server in servers where server.process.isRunning { kill(server.process.processIdentifier, SIGTERM) }
        for server in servers { server.process.waitUntilExit() }
    }

    /// Posts until the server acknowledges (a 200), retrying a refused or failed post a few times.
    static func postAcknowledged(_ url: String, body: [UInt8], authorization: String? = nil) async throws {
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json")]
        if let authorization { headers.append(("Authorization", authorization)) }
        var last = "no answer"
        for _ in 0..<5 {
            do {
                let response = try await HTTPClient(timeout: .seconds(30)).send(
                    "POST", url, headers: headers, body: body)
                if response.status == 200 { return }
                last = "HTTP \(response.status): \(String(decoding: response.body.prefix(200), as: UTF8.self))"
            } catch { last = "\(error)" }
        }
        throw CommandError.runtime("\(url): \(last)")
    }

    /// One wrk (one thread) against each base at the same time.
    static func runWrkEverywhere(_ wrk: String, bases: [String], script: URL, seconds: Int, connections: Int) throws
        -> [WrkResult]
    {
        let results = Mutex<[Int: WrkResult]>([:])
        let failure = Mutex<String?>(nil)
        DispatchQueue.concurrentPerform(iterations: bases.count) { index in
            do {
                let result = try runWrk(
                    wrk, url: bases[index] + "/", seconds: seconds, connections: connections, script: script,
                    threads: 1)
                results.withLock { $0[index] = result }
            } catch { failure.withLock { $0 = "\(error)" } }
        }
        if let failure = failure.withLock({ $0 }) { throw CommandError.runtime(failure) }
        let collected = results.withLock { $0 }
        return collected.keys.sorted().compactMap { collected[$0] }
    }
}
