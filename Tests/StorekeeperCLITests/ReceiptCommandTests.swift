import AppStoreReceipts
import Foundation
import StorekeeperCLITestSupport
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

/// `storekeeper receipt verify | decode`, run in-process against files written to a temporary directory.
@Suite("storekeeper receipt")
struct ReceiptCommandTests {
    /// Files for one test: the shared test root, a signed fixture receipt, and a foreign root.
    struct Files {
        let directory: URL
        var root: String { directory.appendingPathComponent("root.pem").path }
        var otherRoot: String { directory.appendingPathComponent("other.der").path }
        var receipt: String { directory.appendingPathComponent("receipt.der").path }
        var base64: String { directory.appendingPathComponent("receipt.b64").path }

        init(receipt: Receipt = ReceiptFixtures.receipt()) throws {
            directory = try ExternalTool.temporaryDirectory()
            try Data(TestPKI.shared.root.pemEncoded.utf8).write(to: URL(fileURLWithPath: root))
            try Data(try TestPKI().root.derEncoded).write(to: URL(fileURLWithPath: otherRoot))
            let signed = try ReceiptFixtures.signed(receipt)
            try Data(signed).write(to: URL(fileURLWithPath: self.receipt))
            let wrapped = Data(signed).base64EncodedString(options: [.lineLength76Characters])
            try Data(("\n  " + wrapped + "\n").utf8).write(to: URL(fileURLWithPath: base64))
        }
    }

    static let now = TestPKI.referenceDate
    static let device = "10111213-1415-1617-1819-1a1b1c1d1e1f"

    static func json(_ text: String) throws -> JSONValue { try JSONParser.parse(text) }

    @Test("A valid receipt prints valid:true, the environment and the verifyReceipt-shaped receipt; exit 0")
    func valid() async throws {
        let files = try Files()
        let run = await CapturedConsole.run(
            [
                "receipt", "verify", files.receipt, "--root", files.root, "--bundle-id", ReceiptFixtures.bundleID,
                "--bundle-version", ReceiptFixtures.appVersion, "--device-id", Self.device,
            ], now: Self.now)
        #expect(run.status == 0, "\(run.stderr)")
        let output = try Self.json(run.stdout)
        #expect(output["valid"] == .bool(true))
        #expect(output["error"] == nil)
        #expect(output["environment"] == .string("Production"))
        let receipt = try #require(output["receipt"])
        #expect(receipt["bundle_id"] == .string(ReceiptFixtures.bundleID))
        #expect(receipt["adam_id"] == .integer(690_661_663))
        #expect(receipt["receipt_creation_date"] == .string("2024-01-01 00:00:00 Etc/GMT"))
        #expect(receipt["request_date_ms"] == .string("1704067200000"))
        #expect(receipt["in_app"]?.arrayValue?.count == 4)
        #expect(receipt["raw"]?["sha1_hash"]?.stringValue != nil)
        #expect(output.objectValue?.keys == ["valid", "checks", "environment", "receipt"])
        let checks = try #require(output["checks"])
        let results = try #require(checks.objectValue)
        for check in ["format", "signature", "chain", "bundleId", "bundleVersion", "deviceHash"] {
            #expect(results[check] == .string("passed"), "\(check): \(checks)")
        }
        #expect(results["expiry"]?.stringValue?.hasPrefix("skipped: ") == true)
    }

    @Test("Base64 text with line breaks on standard input is accepted")
    func base64Stdin() async throws {
        let files = try Files()
        let text = Array(try Data(contentsOf: URL(fileURLWithPath: files.base64)))
        let run = await CapturedConsole.run(
            ["receipt", "verify", "-", "--root", files.root], stdin: text, now: Self.now)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Self.json(run.stdout)["valid"] == .bool(true))
        let implicit = await CapturedConsole.run(
            ["receipt", "verify", "--root", files.root], stdin: text, now: Self.now)
        #expect(implicit.status == 0)
    }

    @Test(
        "Each reason code comes out as error.code with exit status 1",
        arguments: [
            (["--bundle-id", "com.example.other"], "bundle_id_mismatch"),
            (["--bundle-version", "41"], "bundle_version_mismatch"),
            (["--device-id", "00000000-0000-0000-0000-000000000000"], "device_hash_mismatch"),
            (["--device-id", "f8:ff:c2:1e:91:82"], "device_hash_mismatch"),
        ])
    func reasons(extra: [String], code: String) async throws {
        let files = try Files()
        let run = await CapturedConsole.run(
            ["receipt", "verify", files.receipt, "--root", files.root] + extra, now: Self.now)
        #expect(run.status == 1)
        let output = try Self.json(run.stdout)
        #expect(output["valid"] == .bool(false))
        #expect(output["error"]?["code"] == .string(code))
        #expect(output["error"]?["message"]?.stringValue?.isEmpty == false)
        #expect(output["receipt"]?["bundle_id"] == .string(ReceiptFixtures.bundleID))
    }

    @Test("untrusted_chain against another root; certificate_not_valid_at_date and receipt_expired by date")
    func chainAndDates() async throws {
        let files = try Files()
        let untrusted = await CapturedConsole.run(
            ["receipt", "verify", files.receipt, "--root", files.otherRoot], now: Self.now)
        #expect(try Self.json(untrusted.stdout)["error"]?["code"] == .string("untrusted_chain"))

        let late = try Files(receipt: ReceiptFixtures.receipt(creationDate: Date(timeIntervalSince1970: 1_798_761_600)))
        let notValid = await CapturedConsole.run(
            ["receipt", "verify", late.receipt, "--root", late.root], now: Self.now)
        #expect(try Self.json(notValid.stdout)["error"]?["code"] == .string("certificate_not_valid_at_date"))

        let vpp = try Files(receipt: ReceiptFixtures.receipt(expirationDate: Self.now.addingTimeInterval(86_400)))
        let before = await CapturedConsole.run(
            ["receipt", "verify", vpp.receipt, "--root", vpp.root, "--now", "2024-01-01T12:00:00Z"])
        #expect(before.status == 0)
        let after = await CapturedConsole.run(
            ["receipt", "verify", vpp.receipt, "--root", vpp.root, "--now", "2024-01-03T00:00:00+01:00"])
        #expect(after.status == 1)
        #expect(try Self.json(after.stdout)["error"]?["code"] == .string("receipt_expired"))
        #expect(try Self.json(after.stdout)["receipt"]?["expiration_date"] == .string("2024-01-02 00:00:00 Etc/GMT"))
    }

    @Test("Input that is not a receipt is malformed: valid:false, no receipt, exit 1")
    func malformed() async throws {
        let files = try Files()
        for input in [Array("not base64 at all!".utf8), [], [0x30, 0x03, 0x02, 0x01], Array("AAAA".utf8)] {
            let run = await CapturedConsole.run(
                ["receipt", "verify", "--root", files.root], stdin: input, now: Self.now)
            #expect(run.status == 1)
            let output = try Self.json(run.stdout)
            #expect(output["error"]?["code"] == .string("malformed"))
            #expect(output["receipt"] == nil)
            #expect(output["environment"] == nil)
        }
    }

    @Test("decode prints the same object without valid and error, and fails with exit 1 on garbage")
    func decode() async throws {
        let files = try Files()
        let run = await CapturedConsole.run(["receipt", "decode", files.receipt], now: Self.now)
        #expect(run.status == 0)
        let output = try Self.json(run.stdout)
        #expect(output.objectValue?.keys == ["environment", "receipt"])
        #expect(output["receipt"]?["in_app"]?.arrayValue?.count == 4)
        let garbage = await CapturedConsole.run(["receipt", "decode", "-"], stdin: Array("garbage".utf8))
        #expect(garbage.status == 1)
        #expect(garbage.stderr.hasPrefix("Error: "))
        #expect(garbage.stdout.isEmpty)
    }

    @Test("--format text prints a verdict line and the purchases")
    func text() async throws {
        let files = try Files()
        let valid = await CapturedConsole.run(
            ["receipt", "verify", files.receipt, "--root", files.root, "--format", "text"], now: Self.now)
        #expect(valid.stdout.hasPrefix("VALID\n"))
        #expect(valid.stdout.contains("com.example.storekeeper.coins ×3"))
        let invalid = await CapturedConsole.run(
            ["receipt", "verify", files.receipt, "--root", files.otherRoot, "--format", "text"], now: Self.now)
        #expect(invalid.stdout.hasPrefix("INVALID: untrusted_chain"))
    }

    @Test(
        "Usage errors go to stderr with the usage line and exit 64",
        arguments: [
            ["receipt", "verify", "x.der"],
            ["receipt", "verify", "--root"],
            ["receipt", "verify", "--root", "r", "--device-id", "xyz"],
            // Full-width digits are hex digits to Swift's `Character`, not to `UInt8(_:radix:)`.
            ["receipt", "verify", "--root", "r", "--device-id", "\u{FF10}\u{FF11}"],
            ["receipt", "verify", "--root", "r", "--now", "yesterday"],
            ["receipt", "verify", "--root", "r", "--format", "yaml"],
            ["receipt", "verify", "--bogus"],
            ["receipt", "verify", "a", "b", "--root", "r"],
            ["receipt", "frobnicate"],
            ["frobnicate"],
        ])
    func usageErrors(arguments: [String]) async {
        let run = await CapturedConsole.run(arguments)
        #expect(run.status == 64)
        #expect(run.stderr.hasPrefix("Error: "))
        #expect(run.stdout.isEmpty)
    }

    @Test("--help prints OVERVIEW, USAGE and OPTIONS to stdout with exit 0")
    func help() async {
        for arguments in [
            ["--help"], ["receipt", "verify", "--help"], ["receipt", "decode", "-h"], ["bench", "receipt", "--help"],
        ] {
            let run = await CapturedConsole.run(arguments)
            #expect(run.status == 0)
            #expect(run.stdout.contains("OVERVIEW:"))
            #expect(run.stdout.contains("USAGE:"))
            #expect(run.stderr.isEmpty)
        }
    }

    @Test("A file that cannot be read is exit 2")
    func missingFile() async throws {
        let files = try Files()
        let run = await CapturedConsole.run(["receipt", "verify", "/nonexistent/receipt.der", "--root", files.root])
        #expect(run.status == 2)
        #expect(run.stderr.contains("cannot read"))
    }

    @Test(
        "Real receipts verify through the CLI against Apple's root",
        .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
    func vectors() async throws {
        let directory = try #require(Vectors.directory)
        let root = directory.appendingPathComponent("certs/roots/apple-inc-root_2006-04-25_2035-02-09.cer").path
        let receipt = directory.appendingPathComponent("receipts/tpinappreceipt/receipt-sandbox-g5.b64").path
        let run = await CapturedConsole.run(
            [
                "receipt", "verify", receipt, "--root", root, "--bundle-id", "dev.bonzer.weeka.app", "--device-id",
                "956328D9-CC6A-47F4-BE40-6953FB0AB6C7",
            ])
        #expect(run.status == 0, "\(run.stdout)")
        let output = try Self.json(run.stdout)
        #expect(output["environment"] == .string("Sandbox"))
        #expect(
            output["receipt"]?["in_app"]?.arrayValue?.first?["web_order_line_item_id"] == .string("2000000123357229"))
        let mac = directory.appendingPathComponent("receipts/appreceiptvalidator/mindnode_mac_sha256_receipt.der").path
        let macRun = await CapturedConsole.run([
            "receipt", "verify", mac, "--root", root, "--device-id", "f8:ff:c2:1e:91:82",
        ])
        #expect(macRun.status == 0, "\(macRun.stdout)")
    }
}

/// The built executable, run as a user would.
@Suite("storekeeper executable")
struct ExecutableTests {
    static let binary: String? = {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let candidate = directory.appendingPathComponent("storekeeper").path
        return FileManager.default.isExecutableFile(atPath: candidate) ? candidate : nil
    }()

    @Test(
        "Exit statuses and streams follow the conventions", .enabled(if: binary != nil, "storekeeper binary not built"))
    func statuses() throws {
        let binary = try #require(Self.binary)
        let help = try ExternalTool.run(binary, ["--help"])
        #expect(help.status == 0)
        #expect(help.stdoutText.contains("receipt verify"))
        let usage = try ExternalTool.run(binary, ["receipt", "verify"])
        #expect(usage.status == 64)
        #expect(usage.stderrText.contains("--root"))
        let directory = try ExternalTool.temporaryDirectory()
        let sample = try ExternalTool.run(binary, ["receipt", "sample", "--out", directory.path])
        #expect(sample.status == 0)
        let device = try String(contentsOf: directory.appendingPathComponent("device-id.txt"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let verify = try ExternalTool.run(
            binary,
            [
                "receipt", "verify", directory.appendingPathComponent("receipt.b64").path, "--root",
                directory.appendingPathComponent("root.pem").path, "--bundle-id", "com.example.storekeeper",
                "--device-id", device,
            ])
        #expect(verify.status == 0, "\(verify.stdoutText)")
        let garbage = try ExternalTool.run(
            binary, ["receipt", "verify", "--root", directory.appendingPathComponent("root.pem").path],
            stdin: Array("%%%".utf8))
        #expect(garbage.status == 1)
    }
}

struct StartFailure: Error {
    let output: String
}

/// `storekeeper appstore serve` as a real process: purchases over HTTP, `kill -9`, restart on the same data.
@Suite("storekeeper appstore serve")
struct AppStoreServeTests {
    /// Starts the emulator and returns the process and its base URL (read from its first output line).
    static func start(binary: String, data: URL, extra: [String] = []) throws -> (ChildProcess, String, Pipe) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["appstore", "serve", "--port", "0", "--data", data.path] + extra
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var line: [UInt8] = []
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += chunk
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let range = text.range(of: "http://[^ \n]+:[0-9]+", options: .regularExpression) else {
            process.terminate()
            throw StartFailure(output: text)
        }
        return (process, String(text[range]), output)
    }

    static func call(_ url: String, _ method: String = "GET", _ body: String? = nil) throws -> JSONValue {
        var arguments = ["-s", "-X", method, url]
        if let body { arguments += ["-H", "Content-Type: application/json", "-d", body] }
        let run = try ExternalTool.run(ExternalTool.find("curl")!, arguments)
        return run.stdout.isEmpty ? .null : try JSONParser.parse(run.stdout)
    }

    @Test(
        "After kill -9 and a restart on the same data directory, acknowledged purchases are still there",
        .enabled(
            if: ExecutableTests.binary != nil && ExternalTool.find("curl") != nil, "storekeeper binary or curl missing")
    )
    func killAndRestart() throws {
        let binary = try #require(ExecutableTests.binary)
        let data = try ExternalTool.temporaryDirectory()
        var (process, base, _) = try Self.start(binary: binary, data: data)
        let account = try Self.call(
            base + "/_emulator/v1/accounts", "POST", #"{"environment":"Sandbox","storefront":"USA"}"#)
        let device = try Self.call(
            base + "/_emulator/v1/devices", "POST", #"{"accountId":"\#(account["accountId"]!.stringValue!)"}"#)
        let app = base + "/_emulator/v1/devices/\(device["deviceId"]!.stringValue!)/apps/com.example.storekeeper"
        _ = try Self.call(app + "/install", "POST", #"{"version":"1"}"#)
        let bought = try Self.call(app + "/payments", "POST", #"{"productId":"com.example.storekeeper.pro"}"#)
        let transactionID = try #require(bought["transaction"]?["transactionIdentifier"]?.stringValue)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        (process, base, _) = try Self.start(binary: binary, data: data)
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        let queue = try Self.call(
            base + "/_emulator/v1/devices/\(device["deviceId"]!.stringValue!)/apps/com.example.storekeeper/transactions"
        )
        #expect(queue["transactions"]?.arrayValue?.first?["transactionIdentifier"] == .string(transactionID))
        #expect(process.isRunning)
    }
}

/// `kill -9` while many clients are buying: every purchase the emulator acknowledged is there after a restart.
@Suite("storekeeper appstore serve under concurrent load")
struct AppStoreServeLoadTests {
    @Test(
        "kill -9 under concurrent purchases loses no acknowledged transaction",
        .enabled(
            if: ExecutableTests.binary != nil && ExternalTool.find("curl") != nil, "storekeeper binary or curl missing")
    )
    func killUnderLoad() async throws {
        let binary = try #require(ExecutableTests.binary)
        let data = try ExternalTool.temporaryDirectory()
        var (process, base, _) = try AppStoreServeTests.start(binary: binary, data: data)
        let account = try AppStoreServeTests.call(
            base + "/_emulator/v1/accounts", "POST", #"{"environment":"Sandbox","storefront":"USA"}"#)
        let device = try AppStoreServeTests.call(
            base + "/_emulator/v1/devices", "POST", #"{"accountId":"\#(account["accountId"]!.stringValue!)"}"#)
        let app = "/_emulator/v1/devices/\(device["deviceId"]!.stringValue!)/apps/com.example.storekeeper"
        _ = try AppStoreServeTests.call(base + app + "/install", "POST", #"{"version":"1"}"#)
        final class Acknowledged: Sendable {
            let ids = Mutex<[String]>([])
        }
        let acknowledged = Acknowledged()
        let client = HTTPClient(timeout: .seconds(5))
        let url = base + app + "/payments"
        let buyers = Task {
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<8 {
                    group.addTask {
                        for round in 0..<400 {
                            let product = (index + round) % 2 == 0 ? "coins" : "pro"
                            guard
                                let answer = try? await client.send(
                                    "POST", url, headers: [("Content-Type", "application/json")],
                                    body: Array(#"{"productId":"com.example.storekeeper.\#(product)"}"#.utf8)),
                                answer.status == 201,
                                let id = try? JSONParser.parse(answer.body)["transaction"]?["transactionIdentifier"]?
                                    .stringValue
                            else { return }
                            acknowledged.ids.withLock { $0.append(id) }
                        }
                    }
                }
            }
        }
        // Kill once purchases are flowing, while requests are in flight.
        // (Up to a minute: on a loaded machine the buyers' task may start late.)
        for _ in 0..<6_000 {
            if acknowledged.ids.withLock({ $0.count }) >= 50 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        await buyers.value
        let acknowledgedIDs = Set(acknowledged.ids.withLock { $0 })
        #expect(acknowledgedIDs.count >= 50)
        (process, base, _) = try AppStoreServeTests.start(binary: binary, data: data)
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        let queue = try AppStoreServeTests.call(base + app + "/transactions")
        let stored = Set(
            (queue["transactions"]?.arrayValue ?? []).compactMap { $0["transactionIdentifier"]?.stringValue })
        #expect(acknowledgedIDs.isSubset(of: stored), "lost: \(acknowledgedIDs.subtracting(stored).sorted().prefix(5))")
    }
}

@Suite("storekeeper appstore serve: exposure")
struct AppStoreServeExposureTests {
    @Test(
        "A non-loopback --host without --token is refused before anything binds or is created",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func refusesOpenControlPlane() throws {
        let binary = try #require(ExecutableTests.binary)
        let data = try ExternalTool.temporaryDirectory().appendingPathComponent("data")
        let open = try ExternalTool.run(
            binary, ["appstore", "serve", "--host", "0.0.0.0", "--port", "0", "--data", data.path])
        #expect(open.status == 64)
        #expect(open.stderrText.contains("--token"))
        #expect(open.stderrText.contains("--insecure"))
        let short = try ExternalTool.run(
            binary, ["appstore", "serve", "--host", "0.0.0.0", "--port", "0", "--token", "short", "--data", data.path])
        #expect(short.status == 64)
        #expect(!FileManager.default.fileExists(atPath: data.path))
    }

    @Test(
        "A port in use is a clear error and leaves no data directory; localhost and ::1 are addresses that work",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func startFailures() throws {
        let binary = try #require(ExecutableTests.binary)
        let first = try ExternalTool.temporaryDirectory()
        let (process, base, _) = try AppStoreServeTests.start(binary: binary, data: first)
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        let port = try #require(base.split(separator: ":").last.map(String.init))
        let data = try ExternalTool.temporaryDirectory().appendingPathComponent("second")
        let taken = try ExternalTool.run(binary, ["appstore", "serve", "--port", port, "--data", data.path])
        #expect(taken.status == 1)
        #expect(taken.stderrText.contains(port), "\(taken.stderrText)")
        #expect(!taken.stderrText.contains("listen_failed"), "a sentence, not a code")
        #expect(taken.stderrText.contains("another process listens there"), "\(taken.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: data.path), "a failed start creates no data directory")

        for host in ["localhost", "::1"] {
            let directory = try ExternalTool.temporaryDirectory()
            guard
                let (server, url, _) = try? AppStoreServeTests.start(
                    binary: binary, data: directory, extra: ["--host", host])
            else {
                #expect(host == "::1", "only IPv6 may be missing on a machine")
                continue
            }
            #expect(
                url.hasPrefix(host == "::1" ? "http://[::1]:" : "http://localhost:")
                    || url.hasPrefix("http://127.0.0.1:"), "\(url)")
            server.terminate()
            server.waitUntilExit()
        }
    }
}
