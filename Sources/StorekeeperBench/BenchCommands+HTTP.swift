import AppStoreEmulator
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperHTTP
import StorekeeperJSON

#if canImport(Glibc)
    import Glibc
#endif

extension BenchCommands {
    static let httpSpec = Arguments.Spec(
        command: "storekeeper bench http",
        abstract:
            "Measure the HTTP layer against bare libmicrohttpd, verifyReceipt over HTTP, and service under idle and slow clients.",
        options: [
            .init(name: "seconds", valueName: "s", help: "Length of each wrk run (default: 5)."),
            .init(name: "rounds", valueName: "n", help: "Interleaved bare/route rounds of 3 s (default: 5)."),
            .init(name: "idle", valueName: "n", help: "Idle keep-alive connections to hold (default: 10000)."),
            .init(name: "trickle", valueName: "n", help: "Slow-trickling clients (default: 1000)."),
            .init(name: "soak", valueName: "s", help: "Length of the memory soak (default: 60)."),
        ],
        discussion: """
            Needs wrk (Debian package wrk). The server runs in this process; wrk runs beside it on the same \
            2 cores, with 2 threads and 16 keep-alive connections. Bare libmicrohttpd (same daemon flags and \
            pool) answers the same bytes as the measured route, in alternating rounds. Idle and trickling \
            clients are held by a child process (`storekeeper bench hold-connections`) while another client's \
            latency is measured.
            """)

    static let holdSpec = Arguments.Spec(
        command: "storekeeper bench hold-connections",
        abstract:
            "Open connections to a local port and hold them idle, trickling or stalled in a body; for bench http and bench slow-clients.",
        options: [
            .init(name: "port", valueName: "n", help: "Port on 127.0.0.1."),
            .init(name: "connections", valueName: "n", help: "How many (default: 100)."),
            .init(name: "seconds", valueName: "s", help: "How long to hold them (default: 30)."),
            .init(
                name: "stall-body", valueName: "bytes",
                help: "Announce a POST body of this many bytes, send 64 KiB of it, then stall."),
        ],
        flags: [
            ("trickle", "Send one byte of a request line a second on each."),
            ("reconnect", "With --trickle: open a new connection in place of each one the server closes."),
        ])

    struct WrkResult {
        var requestsPerSecond: Double
        var p99Milliseconds: Double?
        var non2xx: Int
    }

    static func http(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let seconds = Int(arguments.value("seconds") ?? "5") ?? 0
        let rounds = Int(arguments.value("rounds") ?? "5") ?? 0
        let idleCount = Int(arguments.value("idle") ?? "10000") ?? -1
        let trickleCount = Int(arguments.value("trickle") ?? "1000") ?? -1
        let soak = Int(arguments.value("soak") ?? "60") ?? -1
        guard seconds > 0, rounds > 0, idleCount >= 0, trickleCount >= 0, soak >= 0 else {
            throw CommandError.usage(
                "--seconds and --rounds must be positive; --idle, --trickle and --soak not negative")
        }
        guard let wrk = findExecutable("wrk") else {
            throw CommandError.runtime("bench http needs wrk: apt-get install wrk")
        }
        let directory = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: directory) }

        // 1. The HTTP layer: a route answering fixed bytes through the emulator's middleware, against bare
        //    libmicrohttpd answering the same bytes.
        let fixed = HTTPResponse.json(.object(["now": .integer(1_764_547_200_000), "rate": .string("realTime")]))
        var router = Router()
        router.use(AccessLogMiddleware())
        router.add("GET", "/empty", inline: { _, _ in fixed })
        let routeServer = try HTTPServer(port: 0, responder: router.freeze())
        defer { routeServer.stop() }
        let bare = try BareBaseline(response: fixed)
        var bareRates: [Double] = []
        var routeRates: [Double] = []
        for round in 0..<rounds {
            progress(console, "empty route against bare libmicrohttpd, round \(round + 1) of \(rounds)…")
            bareRates.append(
                try runWrk(wrk, url: "http://127.0.0.1:\(bare.port)/empty", seconds: seconds).requestsPerSecond)
            routeRates.append(
                try runWrk(wrk, url: "http://127.0.0.1:\(routeServer.port)/empty", seconds: seconds).requestsPerSecond)
        }
        let ratios = zip(routeRates, bareRates).map { $0 / $1 }.sorted()

        // 2. verifyReceipt through the emulator.
        progress(console, "starting an emulator with two receipts…")
        let catalog = try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: DefaultCatalog.bundleID, sharedSecret: "secret")],
            dataDirectory: directory.appendingPathComponent("emulator"), rate: .realTime)
        // The held connections all come from 127.0.0.1: the per-address cap is off so that all are held.
        var limits = HTTPLimits()
        limits.perAddressLimit = 0
        let server = try HTTPServer(port: 0, limits: limits, responder: EmulatorRoutes(store).responder())
        defer { server.stop() }
        var receipts: [String] = []
        for product in ["com.example.storekeeper.pro", "com.example.storekeeper.monthly"] {
            let account = try await store.createAccount(environment: .sandbox, storefront: "USA")
            let device = try await store.createDevice(accountID: account.id, deviceID: nil).id.rawValue
            _ = try await store.install(deviceID: device, bundleID: DefaultCatalog.bundleID, version: "1")
            _ = try await store.pay(
                deviceID: device, bundleID: DefaultCatalog.bundleID, productID: product, quantity: 1,
                applicationUsername: nil, appAccountToken: nil)
            receipts.append(
                Data(try await store.receipt(deviceID: device, bundleID: DefaultCatalog.bundleID))
                    .base64EncodedString())
        }
        let verifyURL = "http://127.0.0.1:\(server.port)/sandbox/verifyReceipt"
        let plainBody = directory.appendingPathComponent("plain.json")
        try Data(JSONWriter.bytes(.object(["receipt-data": .string(receipts[0])]))).write(to: plainBody)
        let subscriptionBody = directory.appendingPathComponent("subscription.json")
        try Data(
            JSONWriter.bytes(.object(["receipt-data": .string(receipts[1]), "password": .string("secret")]))
        ).write(to: subscriptionBody)
        progress(console, "verifyReceipt without password…")
        let plain = try runWrk(wrk, url: verifyURL, seconds: seconds, body: plainBody)
        progress(console, "verifyReceipt with password (subscription receipt, latest_receipt re-signed)…")
        let subscription = try runWrk(wrk, url: verifyURL, seconds: seconds, body: subscriptionBody)

        // 3. Idle and trickling clients held by a child process while another client is measured.
        let clockURL = "http://127.0.0.1:\(server.port)/_emulator/v1/clock"
        var idleResult: WrkResult?
        var trickleResult: WrkResult?
        var held = (idle: 0, trickle: 0)
        var idleMemory = 0
        let baseMemory = residentKilobytes()
        if idleCount > 0 {
            progress(console, "holding \(idleCount) idle connections…")
            let child = try holdConnections(port: server.port, count: idleCount, trickle: false, seconds: seconds + 30)
            held.idle = waitForConnections(server, atLeast: idleCount)
            try await Task.sleep(for: .seconds(1))
            idleMemory = residentKilobytes()
            idleResult = try runWrk(wrk, url: clockURL, seconds: seconds, connections: 4)
            child.terminate()
            child.waitUntilExit()
            // Let the server see them all closed before the next measurement.
            for _ in 0..<300 where server.openConnections > 0 { try await Task.sleep(for: .milliseconds(100)) }
        }
        if trickleCount > 0 {
            progress(console, "holding \(trickleCount) trickling clients…")
            let child = try holdConnections(
                port: server.port, count: trickleCount, trickle: true, seconds: seconds + 30)
            held.trickle = waitForConnections(server, atLeast: trickleCount)
            trickleResult = try runWrk(wrk, url: clockURL, seconds: seconds, connections: 4)
            child.terminate()
            child.waitUntilExit()
        }

        // 4. Memory after a soak.
        var memory: (before: Int, after: Int)?
        if soak > 0 {
            progress(console, "memory soak: \(soak) s of verifyReceipt load…")
            let before = residentKilobytes()
            _ = try runWrk(wrk, url: verifyURL, seconds: soak, body: plainBody)
            try await Task.sleep(for: .seconds(2))
            memory = (before, residentKilobytes())
        }

        let medianRatio = ratios[ratios.count / 2]
        var report = """
            HTTP, loopback, wrk -t2 -c16 keep-alive on the same 2 cores (\(seconds) s runs)
              bare libmicrohttpd, same bytes and connection memory  \(rate(bareRates.max() ?? 0)) req/s
              empty route through the router                        \(rate(routeRates.max() ?? 0)) req/s   ratio \(format(medianRatio)) of bare, median of \(rounds) (target ≥ 0.70)
              verifyReceipt, no password          \(rate(plain.requestsPerSecond)) req/s   p99 \(latency(plain.p99Milliseconds))  (target ≥ 5,000)\(errors(plain))
              verifyReceipt, password, subscription \(rate(subscription.requestsPerSecond)) req/s   p99 \(latency(subscription.p99Milliseconds))  (target ≥ 1,500)\(errors(subscription))

            """
        if let idleResult {
            report +=
                "  \(held.idle) idle keep-alive connections (one request each, then silent): another client \(rate(idleResult.requestsPerSecond)) req/s, p99 \(latency(idleResult.p99Milliseconds)) (target < 100 ms)\(errors(idleResult))\n"
            report +=
                "    resident memory while they are held: \(idleMemory / 1024) MiB (\(baseMemory / 1024) MiB before)\n"
        }
        if let trickleResult {
            report +=
                "  \(held.trickle) trickling clients held: another client \(rate(trickleResult.requestsPerSecond)) req/s, p99 \(latency(trickleResult.p99Milliseconds))\(errors(trickleResult))\n"
        }
        if let memory {
            let growth = Double(memory.after - memory.before) / Double(max(memory.before, 1))
            report +=
                "  resident memory: \(memory.before / 1024) MiB before, \(memory.after / 1024) MiB 2 s after \(soak) s of load (\(String(format: "%+.1f", growth * 100))%, target within ±20%)\n"
        }
        console.write(report + "\n")
        return 0
    }

    /// `storekeeper bench hold-connections`: the child process that holds idle, trickling or stalled clients.
    static func hold(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard let port = Int(arguments.value("port") ?? ""), (1...65_535).contains(port) else {
            throw CommandError.usage("--port is required")
        }
        let count = Int(arguments.value("connections") ?? "100") ?? 0
        let seconds = Int(arguments.value("seconds") ?? "30") ?? 0
        let stall = try arguments.value("stall-body").map { text -> Int in
            guard let bytes = Int(text), (1...(1 << 30)).contains(bytes) else {
                throw CommandError.usage("--stall-body must be 1 to 1073741824")
            }
            return bytes
        }
        guard (1...60_000).contains(count), (1...3600).contains(seconds) else {
            throw CommandError.usage("--connections must be 1 to 60000 and --seconds 1 to 3600")
        }
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        limit.rlim_cur = limit.rlim_max
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        func open() -> Int32? {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard descriptor >= 0 else { return nil }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else {
                close(descriptor)
                return nil
            }
            return descriptor
        }
        var sockets: [Int32] = []
        for _ in 0..<count {
            guard let descriptor = open() else { break }
            sockets.append(descriptor)
        }
        let request = Array("GET /_emulator/v1/clock HTTP/1.1\r\nHost: x\r\n".utf8)
        let trickle = arguments.flag("trickle")
        if let stall {
            // A body announced whole, 64 KiB of it sent, then nothing.
            let head = Array("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: \(stall)\r\n\r\n".utf8)
            let part = [UInt8](repeating: 0x61, count: min(stall, 64 << 10))
            for descriptor in sockets {
                _ = send(descriptor, head, head.count, Int32(MSG_NOSIGNAL))
                _ = send(descriptor, part, part.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
        } else if !trickle {
            // Keep-alive connections: each makes one request, reads the answer, then stays idle.
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            var buffer = [UInt8](repeating: 0, count: 4096)
            let complete = request + Array("\r\n".utf8)
            for descriptor in sockets {
                setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                _ = send(descriptor, complete, complete.count, Int32(MSG_NOSIGNAL))
                _ = recv(descriptor, &buffer, buffer.count, 0)
            }
        }
        console.write("holding \(sockets.count)\n")
        let reconnect = arguments.flag("reconnect")
        var reopened = 0
        for second in 0..<seconds {
            if trickle {
                let byte = [request[second % request.count]]
                for index in sockets.indices {
                    var probe: UInt8 = 0
                    let gone =
                        recv(sockets[index], &probe, 1, Int32(MSG_DONTWAIT)) == 0
                        || send(sockets[index], byte, 1, Int32(MSG_NOSIGNAL)) < 0
                    if gone, reconnect {
                        close(sockets[index])
                        if let fresh = open() {
                            sockets[index] = fresh
                            _ = send(fresh, [request[0]], 1, Int32(MSG_NOSIGNAL))
                            reopened += 1
                        }
                    }
                }
            }
            sleep(1)
        }
        sockets.forEach { close($0) }
        if reconnect { console.write("reconnected \(reopened)\n") }
        return 0
    }

    static func holdConnections(
        port: Int, count: Int, trickle: Bool, seconds: Int, extra: [String] = []
    ) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        if !FileManager.default.isExecutableFile(atPath: process.executableURL!.path),
            let found = findExecutable("storekeeper")
        {
            process.executableURL = URL(fileURLWithPath: found)
        }
        process.arguments =
            [
                "bench", "hold-connections", "--port", String(port), "--connections", String(count), "--seconds",
                String(seconds),
            ] + (trickle ? ["--trickle"] : []) + extra
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Waits (up to 30 s) until the server has at least `count` connections open; returns how many it saw.
    static func waitForConnections(_ server: HTTPServer, atLeast count: Int) -> Int {
        var seen = 0
        for _ in 0..<300 {
            seen = max(seen, server.openConnections)
            if seen >= count { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return seen
    }

    /// A wrk script asking `GET /v1/{route}/user-{random of users}` with the key.
    static func randomUserScript(at url: URL, route: String, key: String, users: Int) throws -> URL {
        try """
        wrk.headers["Authorization"] = "Bearer \(key)"
        request = function()
          return wrk.format("GET", "/v1/\(route)/user-" .. math.random(0, \(users - 1)))
        end
        """.write(to: url, atomically: true, encoding: .utf8)
        return url
    }

    static func runWrk(
        _ wrk: String, url: String, seconds: Int, connections: Int = 16, body: URL? = nil, headers: [String] = [],
        script: URL? = nil, threads: Int = 2
    ) throws -> WrkResult {
        var arguments = ["-t\(threads)", "-c\(max(connections, threads))", "-d\(seconds)s", "--latency"]
        if let script { arguments += ["-s", script.path] }
        for header in headers { arguments += ["-H", header] }
        if let body {
            let script = body.deletingPathExtension().appendingPathExtension("lua")
            try """
            local file = io.open("\(body.path)", "rb")
            wrk.method = "POST"
            wrk.body = file:read("*a")
            file:close()
            wrk.headers["Content-Type"] = "application/json"
            """.write(to: script, atomically: true, encoding: .utf8)
            arguments += ["-s", script.path]
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: wrk)
        process.arguments = arguments + [url]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Requests/sec:") }),
            let value = Double(line.split(separator: " ").last ?? "")
        else { throw CommandError.runtime("wrk printed no rate:\n\(text)") }
        var p99: Double?
        if let line = text.split(separator: "\n").first(where: {
            $0.trimmingCharacters(in: .whitespaces).hasPrefix("99%")
        }) {
            p99 = milliseconds(String(line.split(separator: " ").last ?? ""))
        }
        var non2xx = 0
        if let line = text.split(separator: "\n").first(where: { $0.contains("Non-2xx") }) {
            non2xx = Int(line.split(separator: " ").last ?? "") ?? 0
        }
        return WrkResult(requestsPerSecond: value, p99Milliseconds: p99, non2xx: non2xx)
    }

    static func milliseconds(_ text: String) -> Double? {
        for (suffix, scale) in [("us", 0.001), ("ms", 1.0), ("s", 1000.0), ("m", 60_000.0)] where text.hasSuffix(suffix)
        {
            return Double(text.dropLast(suffix.count)).map { $0 * scale }
        }
        return nil
    }

    /// The middle value; of an even count, the mean of the two middle ones; nil for none.
    static func median(_ values: [Double]) -> Double? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    static func latency(_ value: Double?) -> String { value.map { String(format: "%.2f ms", $0) } ?? "?" }
    static func errors(_ result: WrkResult) -> String { result.non2xx > 0 ? "  (\(result.non2xx) non-2xx!)" : "" }

    static func residentKilobytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// This process's CPU time so far, user and system, every thread's, in seconds (``CPUTime``'s reading).
    static func processCPUSeconds() -> Double { CPUTime.seconds(getpid()) ?? 0 }

    /// Seconds (of CPU) for `items` as microseconds each, for a report: "12 µs", or "12.3 µs" with one decimal.
    static func microseconds(_ seconds: Double, each items: Int = 1, decimals: Int = 0) -> String {
        String(format: "%.\(decimals)f µs", seconds / Double(max(1, items)) * 1e6)
    }

    static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }
}
