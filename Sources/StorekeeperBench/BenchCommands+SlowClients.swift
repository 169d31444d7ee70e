import Foundation
import StoreTime
import StorekeeperCommandLine
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging

extension BenchCommands {
    static let slowClientsSpec = Arguments.Spec(
        command: "storekeeper bench slow-clients",
        abstract:
            "Measure service while slow clients hold the connections and stalled bodies hold memory (the HTTP layer's protections).",
        options: [
            .init(name: "limit", valueName: "n", help: "The server's connection limit (default: 1000)."),
            .init(name: "requests", valueName: "n", help: "Requests from the other address (default: 400)."),
            .init(name: "bodies", valueName: "n", help: "Stalled bodies to hold (default: 1000)."),
            .init(name: "body-bytes", valueName: "n", help: "Each stalled body's announced size (default: 1048000)."),
        ],
        discussion: """
            1. Slow clients: twice the connection limit of clients from 127.0.0.1, each trickling a byte of its \
            request head a second and reconnecting whenever the server closes it, held by a child process; \
            meanwhile another client from 127.0.0.2 makes requests one after another, each on a new connection \
            (libcurl). Reported: the share answered and their p99 (targets ≥ 95%, < 100 ms), with the same \
            client's figures against the idle server in the same run as the baseline. 2. Stalled bodies: a \
            child process announces bodies of --body-bytes on a route that takes the server's whole 1 MiB, sends \
            64 KiB of each, then stalls; the server's resident memory before and while they are held (target: \
            < 64 MiB more). Both servers run in this process with the default limits (HTTPLimits).
            """)

    static func slowClients(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let limit = Int(arguments.value("limit") ?? "1000") ?? 0
        let requests = Int(arguments.value("requests") ?? "400") ?? 0
        let bodies = Int(arguments.value("bodies") ?? "1000") ?? -1
        let bodyBytes = Int(arguments.value("body-bytes") ?? "1048000") ?? 0
        guard (10...20_000).contains(limit), (10...100_000).contains(requests), (0...20_000).contains(bodies),
            (1...(1 << 20)).contains(bodyBytes)
        else {
            throw CommandError.usage(
                "--limit must be 10 to 20000, --requests 10 to 100000, --bodies 0 to 20000, --body-bytes 1 to 1048576")
        }
        let fixed = HTTPResponse.json(.object(["now": .integer(1_764_547_200_000), "rate": .string("realTime")]))
        var router = Router()
        router.add("GET", "/_emulator/v1/clock", inline: { _, _ in fixed })
        router.post("/upload") { request, _ in .json(.object(["bytes": .integer(Int64(request.body.count))])) }
        var limits = HTTPLimits()
        limits.maxConnections = limit
        let server = try HTTPServer(port: 0, limits: limits, responder: router.freeze())
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)/_emulator/v1/clock"

        progress(console, "baseline: \(requests) requests from 127.0.0.2 to the idle server…")
        let baseline = measure(url: url, count: requests)
        progress(console, "holding \(2 * limit) trickling clients from 127.0.0.1…")
        let child = try holdConnections(
            port: server.port, count: 2 * limit, trickle: true, seconds: 120, extra: ["--reconnect"])
        let held = waitForConnections(server, atLeast: limit - limits.reservedConnections)
        try await Task.sleep(for: .seconds(2))
        progress(console, "\(requests) requests from 127.0.0.2 while they are held…")
        let underLoad = measure(url: url, count: requests)
        let protection = server.protection
        child.terminate()
        child.waitUntilExit()
        for _ in 0..<300 where server.openConnections > 0 { try await Task.sleep(for: .milliseconds(100)) }

        var memory: (before: Int, during: Int, buffered: Int, open: Int)?
        if bodies > 0 {
            progress(console, "holding \(bodies) stalled bodies of \(bodyBytes) bytes…")
            try await Task.sleep(for: .seconds(1))
            let before = residentKilobytes()
            let stalled = try holdConnections(
                port: server.port, count: bodies, trickle: false, seconds: 60,
                extra: ["--stall-body", String(bodyBytes)])
            _ = waitForConnections(server, atLeast: min(bodies, limit) / 2)
            var peak = 0
            var buffered = 0
            var open = 0
            // Inside the head deadline's grace (10 s): the bodies are still held, nothing closed for slowness.
            for _ in 0..<30 {
                try await Task.sleep(for: .milliseconds(200))
                peak = max(peak, residentKilobytes())
                buffered = max(buffered, server.protection.bufferedBytes)
                open = max(open, server.openConnections)
            }
            stalled.terminate()
            stalled.waitUntilExit()
            memory = (before, peak, buffered, open)
        }

        var report = """
            Slow clients and stalled bodies, loopback, default limits (head deadline \(limits.headTimeout) s, \
            \(limits.perAddressLimit) connections an address, \(limits.reservedConnections) reserved, \
            \(limits.maxBufferedBytes >> 20) MiB of bodies buffered), connection limit \(limit)
              another address, idle server:  \(percent(baseline.answered, requests)) answered, p99 \(latency(baseline.p99))
              the same with \(2 * limit) trickling clients from one address (\(held) connections held at once,
                \(protection.refused) refused at accept, \(protection.slowClosed) closed at the head deadline):
                                             \(percent(underLoad.answered, requests)) answered, p99 \(latency(underLoad.p99))  (targets ≥ 95%, < 100 ms)

            """
        if let memory {
            report += """
                  \(bodies) stalled bodies of \(bodyBytes) bytes (\(memory.open) connections open, \(memory.buffered >> 20) MiB \
                reserved for bodies): resident \(memory.before / 1024) MiB before, \(memory.during / 1024) MiB while held \
                (+\((memory.during - memory.before) / 1024) MiB; target < 64 MiB)

                """
        }
        console.write(report)
        return 0
    }

    /// `count` requests one after another from 127.0.0.2, each on a new connection: how many were answered
    /// 200 within a second, and the p99 of their latencies (ms).
    static func measure(url: String, count: Int) -> (answered: Int, p99: Double?) {
        var client = HTTPClient(timeout: .seconds(1), connectTimeout: .seconds(1))
        client.localAddress = "127.0.0.2"
        var latencies: [Double] = []
        var answered = 0
        let clock = ContinuousClock()
        for _ in 0..<count {
            let started = clock.now
            let result = client.sendBlocking("GET", url)
            let elapsed = clock.now - started
            latencies.append(elapsed.milliseconds)
            if case .success(let response) = result, response.status == 200 { answered += 1 }
        }
        latencies.sort()
        return (answered, latencies.isEmpty ? nil : latencies[min(latencies.count - 1, latencies.count * 99 / 100)])
    }

    static func percent(_ part: Int, _ whole: Int) -> String {
        String(format: "%.1f%%", 100 * Double(part) / Double(max(whole, 1)))
    }
}
