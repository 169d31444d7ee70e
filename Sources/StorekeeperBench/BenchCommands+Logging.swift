import AppStoreEmulator
import Foundation
import StoreKitCatalog
import StoreTime
import StorekeeperCommandLine
import StorekeeperHTTP
import StorekeeperLogging

extension BenchCommands {
    static let loggingSpec = Arguments.Spec(
        command: "storekeeper bench logging",
        abstract: "Measure what logging costs: a line on its own, and the emulator's clock route at info and warning.",
        options: [
            .init(name: "lines", valueName: "n", help: "Lines for the per-line cost (default: 200000)."),
            .init(name: "seconds", valueName: "s", help: "Length of each wrk run (default: 3)."),
            .init(name: "rounds", valueName: "n", help: "Interleaved rounds of bare, info and warning (default: 3)."),
        ],
        discussion: """
            (1) --lines access-log lines (the emulator's metadata) through the text handler to /dev/null on one \
            thread: buffered as it runs, and with a flush after each line (a write per line, as before the \
            buffer). (2) With wrk (2 threads, 16 connections, on the same 2 cores): GET /_emulator/v1/clock of an \
            emulator logging at info (its default; one access line per request, to /dev/null) and at warning, \
            against bare libmicrohttpd answering the same bytes, in interleaved rounds.
            """)

    static func logging(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let lines = Int(arguments.value("lines") ?? "200000") ?? 0
        let seconds = Int(arguments.value("seconds") ?? "3") ?? 0
        let rounds = Int(arguments.value("rounds") ?? "3") ?? 0
        guard lines > 0, seconds > 0, rounds > 0 else {
            throw CommandError.usage("--lines, --seconds and --rounds must be positive")
        }
        guard let devNull = FileHandle(forWritingAtPath: "/dev/null") else {
            throw CommandError.runtime("cannot open /dev/null")
        }
        // 1. A line on its own.
        let metadata: LogFields = [
            "request.id": "k3x9a-1f", "request.method": "GET", "request.path": "/_emulator/v1/clock",
            "response.status": "200", "response.bytes": "96", "duration.ms": "0.04",
        ]
        func microseconds(flushEach: Bool) -> Double {
            let handler = StreamLogHandler(output: devNull)
            let logger = Logger(label: "appstore", handler: handler)
            let clock = ContinuousClock()
            let start = clock.now
            for _ in 0..<lines {
                logger.info("request answered", metadata)
                if flushEach { handler.flush() }
            }
            handler.flush()
            return (clock.now - start).seconds * 1e6 / Double(lines)
        }
        progress(console, "\(lines) lines, buffered and a write each…")
        let buffered = microseconds(flushEach: false)
        let unbuffered = microseconds(flushEach: true)

        // 2. The clock route.
        guard let wrk = findExecutable("wrk") else {
            throw CommandError.runtime("bench logging needs wrk: apt-get install wrk")
        }
        let directory = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await AppStore(
            catalog: [try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))],
            apps: [AppConfiguration(bundleID: DefaultCatalog.bundleID)],
            dataDirectory: directory.appendingPathComponent("emulator"), rate: .realTime)
        defer { store.close() }
        let handler = StreamLogHandler(output: devNull)
        func server(_ level: Logger.Level) throws -> HTTPServer {
            let logger = Logger(label: "appstore", level: level, handler: handler)
            return try HTTPServer(port: 0, responder: EmulatorRoutes(store).responder(logger: logger), logger: logger)
        }
        let info = try server(.info)
        defer { info.stop() }
        let warning = try server(.warning)
        defer { warning.stop() }
        let sample = try await HTTPClient().send("GET", "http://127.0.0.1:\(info.port)/_emulator/v1/clock")
        let bare = try BareBaseline(
            response: HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: sample.body))
        var rates: (bare: [Double], info: [Double], warning: [Double]) = ([], [], [])
        for round in 0..<rounds {
            progress(console, "clock route: bare, info, warning, round \(round + 1) of \(rounds)…")
            rates.bare.append(
                try runWrk(wrk, url: "http://127.0.0.1:\(bare.port)/_emulator/v1/clock", seconds: seconds)
                    .requestsPerSecond)
            rates.info.append(
                try runWrk(wrk, url: "http://127.0.0.1:\(info.port)/_emulator/v1/clock", seconds: seconds)
                    .requestsPerSecond)
            rates.warning.append(
                try runWrk(wrk, url: "http://127.0.0.1:\(warning.port)/_emulator/v1/clock", seconds: seconds)
                    .requestsPerSecond)
        }
        let toBare = zip(rates.info, rates.bare).map { $0 / $1 }
        let infoCost = zip(rates.info, rates.warning).map { 1 - $0 / $1 }
        console.write(
            """
            Logging (text lines to /dev/null, this process)
              a line, buffered (written by the handler's thread)   \(format(buffered)) µs
              a line and a write of it (as before the buffer)      \(format(unbuffered)) µs
            GET /_emulator/v1/clock, wrk -t2 -c16, \(rounds) interleaved rounds of \(seconds) s (medians)
              bare libmicrohttpd, the same bytes                   \(rate(median(rates.bare) ?? 0)) req/s
              the emulator, logging at info (its default)          \(rate(median(rates.info) ?? 0)) req/s   ratio to bare \(format(median(toBare) ?? 0)) (each round: \(toBare.map(format).joined(separator: ", ")))   (target ≥ 0.5)
              the emulator, logging at warning                     \(rate(median(rates.warning) ?? 0)) req/s   info costs \(format(100 * (median(infoCost) ?? 0)))% (each round: \(infoCost.map { format(100 * $0) }.joined(separator: ", ")))   (target ≤ 15%)

            """)
        return 0
    }
}
