import Foundation
import StorekeeperCLITestSupport
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

/// The lifecycle verbs and `appstore notifications …` from the shell, against a live emulator.
@Suite("storekeeper appstore lifecycle and notifications")
struct LifecycleCommandTests {
    @Test(
        "notifications listen prints the emulator's notifications verified; the verbs drive the story",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func listenAndVerbs() async throws {
        let binary = try #require(ExecutableTests.binary)
        let data = try ExternalTool.temporaryDirectory()
        let (emulator, base, _) = try AppStoreServeTests.start(binary: binary, data: data)
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        // The receiver: the emulator's root from --url, stops after four notifications.
        let listener = ChildProcess()
        listener.executableURL = URL(fileURLWithPath: binary)
        listener.arguments = ["appstore", "notifications", "listen", "--url", base, "--port", "0", "--count", "4"]
        let output = Pipe()
        listener.standardOutput = output
        let listenerErrors = Pipe()
        listener.standardError = listenerErrors
        try listener.run()
        defer { if listener.isRunning { listener.terminate() } }
        let url = try #require(
            output.firstLine().firstMatch(of: /http:\/\/127\.0\.0\.1:\d+\//).map { String($0.output) })

        let set = await CapturedConsole.run(["appstore", "notifications", "set", "--url", base, "--sandbox-url", url])
        #expect(set.status == 0, "\(set.stderr)")
        let (_, device) = await cliCustomer(base)
        let bought = await CapturedConsole.run(
            [
                "appstore", "buy", "--url", base, "--device", device, "--product", "com.example.storekeeper.monthly",
                "--field", "transaction.transactionIdentifier",
            ])
        let transaction = bought.stdout.trimmingCharacters(in: .newlines)
        #expect(bought.status == 0 && !transaction.isEmpty, "\(bought.stderr)")

        let off = await CapturedConsole.run(
            ["appstore", "auto-renew", "--url", base, "--transaction", transaction, "--enabled", "false"])
        #expect(off.status == 0, "\(off.stderr)")
        #expect(try JSONParser.parse(off.stdout)["subscription"]?["autoRenew"] == .bool(false))
        let bad = await CapturedConsole.run(
            ["appstore", "auto-renew", "--url", base, "--transaction", transaction, "--enabled", "maybe"])
        #expect(bad.status == 64 && bad.stderr.contains("true, false"))
        let expire = await CapturedConsole.run(["appstore", "expire", "--url", base, "--transaction", transaction])
        #expect(expire.status == 0, "\(expire.stderr)")
        let again = await CapturedConsole.run(["appstore", "expire", "--url", base, "--transaction", transaction])
        #expect(again.status == 1 && again.stderr.contains("already ended"), "\(again.stderr)")
        let refund = await CapturedConsole.run(
            ["appstore", "refund", "--url", base, "--transaction", transaction, "--reason", "APP_ISSUE"])
        #expect(refund.status == 0, "\(refund.stderr)")

        listener.waitUntilExit()
        let errors = String(decoding: listenerErrors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(listener.terminationStatus == 0, "\(errors)")
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let lines = printed.split(separator: "\n")
        #expect(lines.count == 4, "\(printed)")
        // Deliveries of separate changes may overtake one another, as Apple's do: compare as a set.
        #expect(
            Set(lines.map { $0.split(separator: " ")[1] }) == [
                "SUBSCRIBED/INITIAL_BUY", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED", "EXPIRED/VOLUNTARY",
                "REFUND",
            ], "\(printed)")
        #expect(lines.allSatisfy { $0.hasSuffix("verification=OK") }, "\(printed)")
        let history = await CapturedConsole.run(["appstore", "notifications", "history", "--url", base])
        #expect(history.status == 0)
        #expect(
            try JSONParser.parse(history.stdout)["notificationHistory"]?.arrayValue?.count == 4, "\(history.stdout)")
    }
}

@Suite("storekeeper appstore notifications listen: V1")
struct ListenVersionOneTests {
    @Test(
        "V1 notifications from a V1-configured emulator are printed with their password checked",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func versionOne() async throws {
        let binary = try #require(ExecutableTests.binary)
        let data = try ExternalTool.temporaryDirectory()
        let (emulator, base, _) = try AppStoreServeTests.start(binary: binary, data: data)
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        let listener = ChildProcess()
        listener.executableURL = URL(fileURLWithPath: binary)
        // The emulator's default app has no shared secret: its V1 bodies carry none, so a listener that
        // expects one (here from the environment, as --password's default) refuses them.
        listener.arguments = ["appstore", "notifications", "listen", "--url", base, "--port", "0", "--count", "2"]
        listener.environment = ProcessInfo.processInfo.environment.merging(["STOREKEEPER_SHARED_SECRET": "x"]) {
            $1
        }
        let output = Pipe()
        listener.standardOutput = output
        listener.standardError = Pipe()
        try listener.run()
        defer { if listener.isRunning { listener.terminate() } }
        let url = try #require(
            output.firstLine().firstMatch(of: /http:\/\/127\.0\.0\.1:\d+\//).map { String($0.output) })
        let set = await CapturedConsole.run(
            ["appstore", "notifications", "set", "--url", base, "--sandbox-url", url, "--notification-version", "1"])
        #expect(set.status == 0, "\(set.stderr)")
        #expect(try JSONParser.parse(set.stdout)["version"] == .integer(1), "\(set.stdout)")
        let wrong = await CapturedConsole.run(
            ["appstore", "notifications", "set", "--url", base, "--sandbox-url", url, "--notification-version", "3"])
        #expect(wrong.status == 64, "\(wrong.stderr)")
        let (_, device) = await cliCustomer(base)
        let bought = await CapturedConsole.run(
            [
                "appstore", "buy", "--url", base, "--device", device, "--product", "com.example.storekeeper.monthly",
                "--field", "transaction.transactionIdentifier",
            ])
        let transaction = bought.stdout.trimmingCharacters(in: .newlines)
        _ = await CapturedConsole.run(
            ["appstore", "auto-renew", "--url", base, "--transaction", transaction, "--enabled", "false"])
        listener.waitUntilExit()
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let lines = printed.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(printed)")
        #expect(Set(lines.map { $0.split(separator: " ")[1] }) == ["INITIAL_BUY", "DID_CHANGE_RENEWAL_STATUS"])
        #expect(lines.allSatisfy { $0.hasPrefix("V1 ") && $0.hasSuffix("password=mismatch") }, "\(printed)")
        #expect(lines.allSatisfy { $0.contains("original=\(transaction)") }, "\(printed)")
    }
}

/// A customer made with the CLI against the emulator at `base`: an account, a device, the app installed.
func cliCustomer(_ base: String, environment: String = "Sandbox") async -> (account: String, device: String) {
    let account = await CapturedConsole.run(
        ["appstore", "account", "--url", base, "--environment", environment, "--field", "accountId"]
    ).stdout.trimmingCharacters(in: .newlines)
    let device = await CapturedConsole.run([
        "appstore", "device", "--url", base, "--account", account, "--field", "deviceId",
    ])
    .stdout.trimmingCharacters(in: .newlines)
    _ = await CapturedConsole.run(["appstore", "install", "--url", base, "--device", device])
    return (account, device)
}

extension Pipe {
    /// What the other end writes up to its first newline (or until it closes).
    func firstLine() -> String {
        var bytes: [UInt8] = []
        while !bytes.contains(UInt8(ascii: "\n")) {
            let chunk = fileHandleForReading.availableData
            if chunk.isEmpty { break }
            bytes += chunk
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// The outbox across `kill -9`: a notification whose delivery is pending is sent after a restart.
@Suite("storekeeper appstore serve: the notification outbox survives kill -9")
struct OutboxDurabilityTests {
    final class Receiver: Sendable {
        let bodies = Mutex<[[UInt8]]>([])
        /// Answers 503 until this is cleared.
        let failing = Atomic<Bool>(true)
    }

    @Test(
        "A failed attempt's retry is kept across kill -9 and made after the restart, once",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func killAndRetry() async throws {
        let binary = try #require(ExecutableTests.binary)
        let receiver = Receiver()
        var router = Router()
        // Answered inline, on the server's own threads: the polling below blocks cooperative threads.
        router.add(
            "POST", "/n",
            inline: { request, _ in
                receiver.bodies.withLock { $0.append(request.body) }
                return HTTPResponse(status: receiver.failing.load(ordering: .relaxed) ? 503 : 200)
            })
        let sink = try HTTPServer(port: 0, responder: router.freeze())
        defer { sink.stop() }
        let data = try ExternalTool.temporaryDirectory()
        var (emulator, base, _) = try AppStoreServeTests.start(binary: binary, data: data)
        let set = await CapturedConsole.run(
            [
                "appstore", "notifications", "set", "--url", base, "--production-url",
                "http://127.0.0.1:\(sink.port)/n", "--retry-schedule",
                // Ten minutes between attempts: however late this test's own steps run on a loaded
                // machine, the retry is still pending at the kill; the clock is advanced past it.
                Array(repeating: "600", count: 10).joined(separator: ","),
            ])
        #expect(set.status == 0, "\(set.stderr)")
        let (_, device) = await cliCustomer(base, environment: "Production")
        let bought = await CapturedConsole.run(
            ["appstore", "buy", "--url", base, "--device", device, "--product", "com.example.storekeeper.monthly"])
        #expect(bought.status == 0, "\(bought.stderr)")
        // Wait for the first (failed) attempt to be recorded, then kill the emulator before its retry.
        func attempts(_ base: String) async throws -> [String] {
            let history = await CapturedConsole.run(
                ["appstore", "notifications", "history", "--url", base, "--environment", "Production"])
            let first = try JSONParser.parse(history.stdout)["notificationHistory"]?.arrayValue?.first
            return first?["sendAttempts"]?.arrayValue?.compactMap { $0["sendAttemptResult"]?.stringValue } ?? []
        }
        // (A `for … where` loop would not stop when the condition turns: each check is a request.)
        for _ in 0..<500 {
            if try await !attempts(base).isEmpty { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        await #expect(try attempts(base).first == "UNSUCCESSFUL_HTTP_RESPONSE_CODE")
        kill(emulator.processIdentifier, SIGKILL)
        emulator.waitUntilExit()

        (emulator, base, _) = try AppStoreServeTests.start(binary: binary, data: data)
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        let failedBefore = receiver.bodies.withLock { $0.count }
        receiver.failing.store(false, ordering: .relaxed)
        // P3M at this rate is 15 real minutes: past the pending retry (it also renews, three times).
        let advanced = await CapturedConsole.run(["appstore", "advance", "--url", base, "--by", "P3M"])
        #expect(advanced.status == 0, "\(advanced.stderr)")
        for _ in 0..<3_000 {
            if try await attempts(base).last == "SUCCESS" { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        let recorded = try await attempts(base)
        #expect(recorded.last == "SUCCESS", "delivered after the restart: \(recorded)")
        #expect(recorded.dropLast().allSatisfy { $0 == "UNSUCCESSFUL_HTTP_RESPONSE_CODE" })
        let bodies = receiver.bodies.withLock { $0 }
        // An attempt in flight at the kill reached the receiver but was never recorded: at least once.
        #expect(bodies.count > failedBefore)
        let first = try #require(bodies.first)
        #expect(
            bodies.filter { $0 == first }.count >= recorded.count, "the same notification, sent again byte for byte")
    }
}

/// `storekeeper appstore scenario run`: every shipped scenario passes; a wrong expectation fails readably.
@Suite("storekeeper appstore scenario run")
struct ScenarioTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("examples/scenarios")

    @Test("Every scenario in examples/scenarios passes (one per lifecycle row)")
    func shipped() async throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.examples.path).filter {
            $0.hasSuffix(".json")
        }.sorted().map { Self.examples.appendingPathComponent($0).path }
        #expect(files.count >= 14)
        let run = await CapturedConsole.run(["appstore", "scenario", "run", "--format", "json"] + files)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        let reports = try #require(try JSONParser.parse(run.stdout).arrayValue)
        #expect(reports.count == files.count)
        #expect(reports.allSatisfy { $0["passed"] == .bool(true) })
        // The retention story needs storekeeper dev's server: embedded, it is skipped with the reason, not run;
        // beside others that pass the run passes, alone it does not (nothing was run).
        let retention = Self.examples.deletingLastPathComponent().appendingPathComponent("retention.scenario.json")
        let beside = await CapturedConsole.run(["appstore", "scenario", "run", files[0], retention.path])
        #expect(
            beside.status == 0 && beside.stdout.contains("SKIP ") && beside.stdout.contains("--url"), "\(beside.stdout)"
        )
        let alone = await CapturedConsole.run(["appstore", "scenario", "run", "--format", "json", retention.path])
        #expect(alone.status == 1, "\(alone.stdout)")
        let report = try JSONParser.parse(alone.stdout).arrayValue?.first
        #expect(report?["passed"] == .null && report?["skipped"]?.stringValue != nil, "\(alone.stdout)")
    }

    @Test("A scenario sells from its own storekit, relative to it; one it cannot read is refused clearly")
    func ownCatalogue() async throws {
        let example = Self.examples.deletingLastPathComponent().appendingPathComponent("Products.scenario.json")
        let run = await CapturedConsole.run(["appstore", "scenario", "run", example.path])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(run.stdout.contains("PASS") && run.stdout.contains("buy com.example.app.monthly"))

        let directory = try ExternalTool.temporaryDirectory()
        let scenario = directory.appendingPathComponent("mine.json")
        let steps = #"[{"buy": "com.example.app.monthly"}]"#
        try Data(#"{"name": "mine", "storekit": "missing.storekit", "steps": \#(steps)}"#.utf8).write(to: scenario)
        let missing = await CapturedConsole.run(["appstore", "scenario", "run", scenario.path])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("cannot read its storekit 'missing.storekit'"), "\(missing.stderr)")
        #expect(missing.stderr.contains(directory.appendingPathComponent("missing.storekit").path))
        try Data("not json".utf8).write(to: directory.appendingPathComponent("broken.storekit"))
        try Data(#"{"name": "mine", "storekit": "broken.storekit", "steps": \#(steps)}"#.utf8).write(to: scenario)
        let broken = await CapturedConsole.run(["appstore", "scenario", "run", scenario.path])
        #expect(broken.status == 2)
        #expect(broken.stderr.contains("its storekit 'broken.storekit' is not a catalogue"), "\(broken.stderr)")
        // A real catalogue (Apple's SKDemo sample), by absolute path: its subscription bought and renewed.
        if let vectors = Vectors.directory {
            let sample = vectors.appendingPathComponent("storekit/01-apple-sample-SKDemo-Products.v2_0.storekit")
            try Data(
                #"""
                {"name": "SKDemo", "storekit": "\#(sample.path)", "steps": [
                  {"buy": "subscription.standard"},
                  {"expect": {"notifications": ["SUBSCRIBED/INITIAL_BUY"], "status": 1, "entitled": true}},
                  {"advance": "P1M"},
                  {"expect": {"notifications": ["DID_RENEW"], "status": 1, "productId": "subscription.standard"}}]}
                """#.utf8
            ).write(to: scenario)
            let real = await CapturedConsole.run(["appstore", "scenario", "run", scenario.path])
            #expect(real.status == 0, "\(real.stdout)\(real.stderr)")
        }
        // Without its own catalogue, the built-in one does not sell the product.
        try Data(#"{"name": "mine", "steps": \#(steps)}"#.utf8).write(to: scenario)
        #expect(await CapturedConsole.run(["appstore", "scenario", "run", scenario.path]).status == 1)
    }

    @Test(
        "--url runs scenarios against a running emulator: only the scenario's notifications count; unreachable is 69",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func remote() async throws {
        let binary = try #require(ExecutableTests.binary)
        let (emulator, base, _) = try AppStoreServeTests.start(
            binary: binary, data: try ExternalTool.temporaryDirectory())
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        let set = await CapturedConsole.run(
            ["appstore", "notifications", "set", "--url", base, "--sandbox-url", "http://127.0.0.1:9/nobody"])
        #expect(set.status == 0, "\(set.stderr)")
        // Two runs: the second shares the emulator with the first one's customers and notifications.
        let files = ["family-sharing.json", "refund-request-declined.json", "upgrade.json"].map {
            Self.examples.appendingPathComponent($0).path
        }
        for _ in 0..<2 {
            let run = await CapturedConsole.run(
                ["appstore", "scenario", "run", "--url", base, "--format", "json"] + files)
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            let reports = try #require(try JSONParser.parse(run.stdout).arrayValue)
            #expect(reports.count == 3 && reports.allSatisfy { $0["passed"] == .bool(true) }, "\(run.stdout)")
        }
        let unreachable = await CapturedConsole.run(
            ["appstore", "scenario", "run", "--url", "http://127.0.0.1:9"] + files)
        #expect(unreachable.status == 69, "\(unreachable.stderr)")
    }

    @Test("A wrong expectation, an unknown step and a refused verb fail with exit 1 and say why")
    func failures() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        let file = directory.appendingPathComponent("wrong.json")
        try Data(
            #"""
            {"name": "wrong", "steps": [
              {"buy": "com.example.storekeeper.monthly"},
              {"expect": {"notifications": ["DID_RENEW"], "status": 2}},
              {"expire": true}, {"expire": true}
            ]}
            """#.utf8
        ).write(to: file)
        let run = await CapturedConsole.run(["appstore", "scenario", "run", file.path])
        #expect(run.status == 1)
        #expect(run.stdout.hasPrefix("FAIL wrong"))
        #expect(run.stdout.contains(#"notifications ["SUBSCRIBED/INITIAL_BUY"], expected ["DID_RENEW"]"#))
        #expect(run.stdout.contains("status 1, expected 2"))
        #expect(run.stdout.contains("4. ✘ expire was refused: subscription"), "\(run.stdout)")

        let unknown = directory.appendingPathComponent("unknown.json")
        try Data(#"{"steps": [{"teleport": true}]}"#.utf8).write(to: unknown)
        let second = await CapturedConsole.run(["appstore", "scenario", "run", unknown.path])
        #expect(second.status == 1 && second.stdout.contains("1. ✘ unknown step 'teleport' (known: buy,"))

        let notJSON = directory.appendingPathComponent("bad.json")
        try Data("{".utf8).write(to: notJSON)
        let third = await CapturedConsole.run(["appstore", "scenario", "run", notJSON.path])
        #expect(third.status == 2 && third.stderr.contains("is not JSON"))
    }

    @Test("A run is bounded: past --max-events renewals and expirations (or --max-seconds) it stops, failed")
    func bounded() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("long.json")
        let steps =
            [#"{"buy": "com.example.storekeeper.monthly"}"#] + Array(repeating: #"{"advance": "P10Y"}"#, count: 50)
        try Data(
            (#"{"name": "long", "environment": "Production", "steps": ["# + steps.joined(separator: ",") + "]}").utf8
        ).write(to: file)
        let run = await CapturedConsole.run(["appstore", "scenario", "run", "--max-events", "200", file.path])
        #expect(run.status == 1)
        #expect(run.stdout.hasPrefix("FAIL long"))
        #expect(run.stdout.contains("✘ stopped: a scenario runs for at most 60 s and 200 renewals"), "\(run.stdout)")
        #expect(!run.stdout.contains("51. advance"))
        let usage = await CapturedConsole.run(["appstore", "scenario", "run", "--max-seconds", "0", file.path])
        #expect(usage.status == 64, "\(usage.stderr)")
    }
}

@Suite("storekeeper appstore buy with offers")
struct OfferCommandTests {
    @Test(
        "offer sign's output redeems a promotional offer on an emulator that has the key in --config; codes too",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func promotionalOffer() async throws {
        let binary = try #require(ExecutableTests.binary)
        let directory = try ExternalTool.temporaryDirectory()
        let keyPath = directory.appendingPathComponent("SubscriptionKey_KEY1.p8").path
        let openssl = try #require(ExternalTool.find("openssl"))
        let generated = try ExternalTool.run(
            openssl, ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyPath])
        #expect(generated.status == 0, "\(generated.stderrText)")
        let config = directory.appendingPathComponent("config.json")
        try Data(
            #"{"apps": [{"bundleId": "com.example.storekeeper", "offerKeys": {"KEY1": "SubscriptionKey_KEY1.p8"}}]}"#
                .utf8
        ).write(to: config)
        let (emulator, base, _) = try AppStoreServeTests.start(
            binary: binary, data: directory.appendingPathComponent("data"), extra: ["--config", config.path])
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        let (_, device) = await cliCustomer(base)
        let monthly = "com.example.storekeeper.monthly"
        let code = await CapturedConsole.run(
            ["appstore", "buy", "--url", base, "--device", device, "--product", monthly, "--offer-code", "welcome"])
        #expect(code.status == 0, "\(code.stderr)")
        for format in ["v1", "v2"] {
            let signed = await CapturedConsole.run(
                [
                    "offer", "sign", "--key", keyPath, "--key-id", "KEY1", "--bundle-id", "com.example.storekeeper",
                    "--product-id", monthly, "--offer-id", "com.example.storekeeper.comeback", "--format", format,
                ])
            #expect(signed.status == 0, "\(signed.stderr)")
            let bought = await CapturedConsole.run(
                [
                    "appstore", "buy", "--url", base, "--device", device, "--product", monthly, "--promotional-offer",
                    "com.example.storekeeper.comeback", "--offer-signature", signed.stdout,
                ])
            #expect(bought.status == 0, "\(format): \(bought.stderr)")
            let replayed = await CapturedConsole.run(
                [
                    "appstore", "buy", "--url", base, "--device", device, "--product", monthly, "--promotional-offer",
                    "com.example.storekeeper.comeback", "--offer-signature", signed.stdout,
                ])
            #expect(replayed.status == 1 && replayed.stderr.contains("nonce"), "\(format): \(replayed.stderr)")
        }
        let lonely = await CapturedConsole.run(
            ["appstore", "buy", "--url", base, "--device", device, "--product", monthly, "--promotional-offer", "x"])
        #expect(lonely.status == 64)
    }
}
