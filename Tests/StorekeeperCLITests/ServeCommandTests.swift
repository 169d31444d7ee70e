import AppStoreEmulator
import AppStoreSignedData
import Foundation
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `storekeeper serve` as a real process: its configuration, and `kill -9` while notifications pour in.
@Suite("storekeeper serve")
struct ServeCommandTests {
    /// A configuration trusting a chain made for the test, and notifications signed by it.
    struct Setup {
        let directory: URL
        let config: URL
        let signer: JWSChainSigner

        init() throws {
            directory = try ExternalTool.temporaryDirectory()
            let pki = try EmulatorPKI.loadOrCreate(in: directory.appendingPathComponent("pki"))
            try Data(pki.signedData.root.pemEncoded.utf8).write(to: directory.appendingPathComponent("jws-root.pem"))
            try Data(pki.receipts.root.pemEncoded.utf8).write(to: directory.appendingPathComponent("receipt-root.pem"))
            signer = try JWSChainSigner(
                key: pki.signedData.leafKey,
                chain: [pki.signedData.leaf, pki.signedData.intermediate, pki.signedData.root])
            config = directory.appendingPathComponent("server.json")
            try Data(
                """
                {"secretKey": "${TEST_SECRET_KEY}", "apps": [{"bundleId": "com.example.app", "publicKey": "pk_test_app1",
                  "receiptRoots": ["receipt-root.pem"], "jwsRoots": ["jws-root.pem"],
                  "entitlements": {"plus": ["monthly"]}}]}
                """.utf8
            ).write(to: config)
        }

        func notification(_ index: Int) throws -> [UInt8] {
            let ms = Int64(Date().timeIntervalSince1970 * 1000) - 60_000 + Int64(index)
            let id = String(5_000_000_000_000_000 + index)
            let transaction = try signer.sign([
                "transactionId": .string(id), "originalTransactionId": .string(id),
                "bundleId": .string("com.example.app"),
                "productId": .string("monthly"), "purchaseDate": .integer(ms), "expiresDate": .integer(ms + 3_600_000),
                "type": .string("Auto-Renewable Subscription"), "signedDate": .integer(ms),
                "environment": .string("Sandbox"), "transactionReason": .string("PURCHASE"),
            ])
            let payload: JSONObject = [
                "notificationType": .string("SUBSCRIBED"), "subtype": .string("INITIAL_BUY"),
                "notificationUUID": .string(String(format: "6a1c2a4e-0000-4000-8000-%012d", index)),
                "data": .object([
                    "bundleId": .string("com.example.app"), "environment": .string("Sandbox"),
                    "signedTransactionInfo": .string(transaction), "status": .integer(1),
                ]),
                "version": .string("2.0"), "signedDate": .integer(ms),
            ]
            return JSONWriter.bytes(.object(["signedPayload": .string(try signer.sign(payload))]))
        }
    }

    static func start(_ binary: String, _ setup: Setup) throws -> (Process, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [
            "serve", "--config", setup.config.path, "--port", "0", "--data",
            setup.directory.appendingPathComponent("data").path,
        ]
        process.environment = ProcessInfo.processInfo.environment.merging(["TEST_SECRET_KEY": "sk_test_secret_0123456"])
        { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = output.firstLine()
        guard let range = line.range(of: "http://[^ \n]+:[0-9]+", options: .regularExpression) else {
            process.terminate()
            throw StartFailure(output: line)
        }
        return (process, String(line[range]))
    }

    @Test(
        "Every notification acknowledged before kill -9 is stored after the restart",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func killUnderLoad() async throws {
        let binary = try #require(ExecutableTests.binary)
        let setup = try Setup()
        let bodies = try (0..<300).map(setup.notification)
        var (server, base) = try Self.start(binary, setup)
        final class Acknowledged: Sendable { let indexes = Mutex<[Int]>([]) }
        let box = Acknowledged()
        let url = base + "/v1/notifications/apple/com.example.app"
        let senders = Task {
            await withTaskGroup(of: Void.self) { group in
                for client in 0..<8 {
                    group.addTask {
                        for index in stride(from: client, to: bodies.count, by: 8) {
                            guard
                                let response = try? await HTTPClient(timeout: .seconds(10)).send(
                                    "POST", url, headers: [("Content-Type", "application/json")], body: bodies[index])
                            else { continue }
                            if response.status == 200 { box.indexes.withLock { $0.append(index) } }
                        }
                    }
                }
            }
        }
        // Kill once a good part is acknowledged, while the rest is in flight.
        for _ in 0..<3_000 where box.indexes.withLock({ $0.count }) < 60 {
            try await Task.sleep(for: .milliseconds(10))
        }
        kill(server.processIdentifier, SIGKILL)
        server.waitUntilExit()
        await senders.value
        let before = box.indexes.withLock { $0 }
        #expect(before.count >= 60 && before.count < bodies.count, "killed mid-way (\(before.count) acknowledged)")
        (server, base) = try Self.start(binary, setup)
        defer {
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        // Posting an acknowledged notification again finds it stored: a duplicate.
        for index in before {
            let response = try await HTTPClient().send(
                "POST", base + "/v1/notifications/apple/com.example.app",
                headers: [("Content-Type", "application/json")],
                body: bodies[index])
            let answer = try JSONParser.parse(response.body)
            #expect(response.status == 200 && answer["duplicate"] == .bool(true), "notification \(index) was lost")
        }
        let metrics = try await HTTPClient().send("GET", base + "/healthz")
        #expect(metrics.status == 200)
    }

    @Test(
        "A configuration naming an unset environment variable is refused with a clear error",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func configurationErrors() throws {
        let binary = try #require(ExecutableTests.binary)
        let setup = try Setup()
        var environment = ProcessInfo.processInfo.environment
        environment["TEST_SECRET_KEY"] = nil
        let process = try ExternalTool.run(
            binary, ["serve", "--config", setup.config.path, "--port", "0"], environment: ["TEST_SECRET_KEY": ""])
        #expect(process.status != 0)
        #expect(
            process.stderrText.contains("secretKey") || process.stderrText.contains("TEST_SECRET_KEY"),
            "\(process.stderrText)")
    }
}
