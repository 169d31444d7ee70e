import Foundation
import StorekeeperCLITestSupport
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A year of mixed subscription stories on a running emulator, delivered to a receiver written with Apple's
/// Python library that fails first attempts on purpose, across a `kill -9` of the emulator.
@Suite("Notifications: a year of stories to Apple's Python library, with failures, retries and kill -9")
struct NotificationStoryInteropTests {
    static let enabled = ExecutableTests.binary != nil && PythonInterop.python != nil

    /// Runs `storekeeper` in-process and returns stdout, failing the test on a non-zero exit.
    static func run(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async -> String {
        let result = await CapturedConsole.run(arguments)
        #expect(result.status == 0, "\(arguments): \(result.stderr)", sourceLocation: sourceLocation)
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func history(_ base: String, bundle: String) async throws -> [JSONValue] {
        let text = await run([
            "appstore", "notifications", "history", "--url", base, "--bundle-id", bundle, "--environment",
            "Production",
        ])
        return try JSONParser.parse(Array(text.utf8))["notificationHistory"]?.arrayValue ?? []
    }

    @Test(
        "Every V2 notification verifies with Apple's library and arrives, in order per subscription; V1 too",
        .enabled(if: enabled, "needs the storekeeper binary and Apple's Python library (scripts/python-env)"))
    func yearOfStories() async throws {
        let binary = try #require(ExecutableTests.binary)
        let python = try #require(PythonInterop.python)
        let directory = try ExternalTool.temporaryDirectory()
        let data = directory.appendingPathComponent("data")
        let config = directory.appendingPathComponent("config.json")
        try Data(
            #"{"apps": [{"bundleId": "com.example.storekeeper"}, {"bundleId": "com.example.v1", "sharedSecret": "s3cret"}]}"#
                .utf8
        ).write(to: config)
        var (emulator, base, _) = try AppStoreServeTests.start(
            binary: binary, data: data, extra: ["--config", config.path])
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        let certificates = try await HTTPClient().send("GET", base + "/_emulator/v1/certificates")
        let jwsRoot = try #require(try JSONParser.parse(certificates.body)["jwsRoot"]?.stringValue)

        // Apple's library as the receiver: it answers 503 to the first delivery of about a third of them.
        let received = directory.appendingPathComponent("received.jsonl")
        let receiver = ChildProcess()
        receiver.executableURL = URL(fileURLWithPath: python)
        receiver.arguments = [
            URL(fileURLWithPath: PythonInterop.verifierScript).deletingLastPathComponent()
                .appendingPathComponent("apple_receiver.py").path,
            "--out", received.path, "--root", jwsRoot, "--environment", "Production", "--bundle-id",
            "com.example.storekeeper", "--app-apple-id", "1234567890", "--password", "s3cret", "--fail-percent", "35",
        ]
        let receiverOutput = Pipe()
        receiver.standardOutput = receiverOutput
        receiver.standardError = FileHandle.nullDevice
        try receiver.run()
        defer {
            // SIGKILL: a child spawned from a dispatch thread inherits its blocked signals, SIGTERM included.
            kill(receiver.processIdentifier, SIGKILL)
            receiver.waitUntilExit()
        }
        let port = try #require(Int(receiverOutput.firstLine().trimmingCharacters(in: .whitespacesAndNewlines)))
        let url = "http://127.0.0.1:\(port)/notifications"
        for (bundle, version) in [("com.example.storekeeper", "2"), ("com.example.v1", "1")] {
            _ = await Self.run([
                "appstore", "notifications", "set", "--url", base, "--bundle-id", bundle, "--production-url", url,
                "--notification-version", version, "--retry-schedule", "1,1,1,1,1,1,1,1",
            ])
        }

        func customer(_ bundle: String) async -> (account: String, device: String) {
            let account = await Self.run([
                "appstore", "account", "--url", base, "--environment", "Production", "--field", "accountId",
            ])
            let device = await Self.run([
                "appstore", "device", "--url", base, "--account", account, "--field", "deviceId",
            ])
            _ = await Self.run(["appstore", "install", "--url", base, "--device", device, "--bundle-id", bundle])
            return (account, device)
        }
        func buy(_ who: (account: String, device: String), _ product: String, bundle: String) async -> String {
            await Self.run([
                "appstore", "buy", "--url", base, "--device", who.device, "--bundle-id", bundle, "--product",
                "com.example.storekeeper.\(product)", "--field", "transaction.transactionIdentifier",
            ])
        }
        let monthly = "monthly"
        let first = await customer("com.example.storekeeper")
        let second = await customer("com.example.storekeeper")
        let legacy = await customer("com.example.v1")
        let firstID = await buy(first, monthly, bundle: "com.example.storekeeper")
        let secondID = await buy(second, monthly, bundle: "com.example.storekeeper")
        let legacyID = await buy(legacy, monthly, bundle: "com.example.v1")
        _ = await Self.run(["appstore", "advance", "--url", base, "--by", "P2M"])
        _ = await Self.run([
            "appstore", "billing", "--url", base, "--account", first.account, "--retry-on-renewal", "true",
            "--grace-period", "true",
        ])
        _ = await Self.run(["appstore", "advance", "--url", base, "--by", "P1M"])

        // kill -9 with deliveries pending (first attempts refused, retries due within a second).
        kill(emulator.processIdentifier, SIGKILL)
        emulator.waitUntilExit()
        (emulator, base, _) = try AppStoreServeTests.start(
            binary: binary, data: data, extra: ["--config", config.path])

        _ = await Self.run(["appstore", "resolve-issue", "--url", base, "--transaction", firstID])
        _ = await Self.run([
            "appstore", "billing", "--url", base, "--account", first.account, "--retry-on-renewal", "false",
        ])
        _ = await Self.run(["appstore", "auto-renew", "--url", base, "--transaction", secondID, "--enabled", "false"])
        _ = await Self.run(["appstore", "advance", "--url", base, "--by", "P1M"])
        _ = await buy(first, "yearly", bundle: "com.example.storekeeper")
        _ = await Self.run(["appstore", "refund", "--url", base, "--transaction", legacyID])
        _ = await Self.run(["appstore", "advance", "--url", base, "--by", "P8M"])

        // Everything written is delivered in the end (at least once).
        var v2: [JSONValue] = []
        var v1: [JSONValue] = []
        for _ in 0..<600 {
            v2 = try await Self.history(base, bundle: "com.example.storekeeper")
            v1 = try await Self.history(base, bundle: "com.example.v1")
            if (v2 + v1).allSatisfy({ $0["state"] == .string("delivered") }) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect((v2 + v1).allSatisfy { $0["state"] == .string("delivered") }, "\(v2 + v1)")
        let lines = try String(contentsOf: received, encoding: .utf8).split(separator: "\n").map {
            try JSONParser.parse(Array($0.utf8))
        }
        #expect(lines.contains { $0["answered"] == .integer(503) }, "some first attempts were refused")
        let v2Lines = lines.filter { $0["version"] == .integer(2) }
        #expect(v2Lines.allSatisfy { $0["verification"] == .string("OK") }, "\(v2Lines)")
        let delivered = v2Lines.filter { $0["answered"] == .integer(200) }
        let expectedUUIDs = Set(v2.compactMap { $0["notificationUUID"]?.stringValue })
        #expect(Set(delivered.compactMap { $0["uuid"]?.stringValue }) == expectedUUIDs)
        // Per subscription, ordering by signedDate gives the order the emulator wrote them in.
        var byUUID: [String: JSONValue] = [:]
        for line in delivered { byUUID[line["uuid"]?.stringValue ?? ""] = line }
        for original in [firstID, secondID] {
            let written = v2.compactMap { $0["notificationUUID"]?.stringValue }.filter {
                byUUID[$0]?["originalTransactionId"]?.stringValue == original
            }
            let ordered = written.sorted {
                (byUUID[$0]?["signedDate"]?.int64Value ?? 0, written.firstIndex(of: $0)!)
                    < (byUUID[$1]?["signedDate"]?.int64Value ?? 0, written.firstIndex(of: $1)!)
            }
            #expect(ordered == written, "subscription \(original)")
            #expect(written.count >= 3, "subscription \(original) has its story")
        }
        let types = Set(
            delivered.compactMap { line in
                line["type"]?.stringValue.map { type in line["subtype"]?.stringValue.map { "\(type)/\($0)" } ?? type }
            })
        for expected in [
            "SUBSCRIBED/INITIAL_BUY", "DID_RENEW", "DID_FAIL_TO_RENEW/GRACE_PERIOD", "DID_RENEW/BILLING_RECOVERY",
            "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED", "EXPIRED/VOLUNTARY", "DID_CHANGE_RENEWAL_PREF/UPGRADE",
        ] {
            #expect(types.contains(expected), "\(expected) in \(types.sorted())")
        }
        // V1: the app's own stream, with its password; CANCEL for the refunded subscription.
        let v1Delivered = lines.filter { $0["version"] == .integer(1) && $0["answered"] == .integer(200) }
        #expect(v1Delivered.allSatisfy { $0["password"] == .string("ok") })
        let v1Types = Set(v1Delivered.compactMap { line -> String? in line["type"]?.stringValue })
        #expect(v1Types.isSuperset(of: ["INITIAL_BUY", "DID_RENEW", "CANCEL"]), "\(v1Types.sorted())")
        #expect(v1Delivered.count >= v1.count, "every V1 notification arrived")
    }
}
