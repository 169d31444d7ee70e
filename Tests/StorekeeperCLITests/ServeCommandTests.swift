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

    /// `storekeeper serve` on `setup`'s configuration and port 0, its data in `data` under the setup's
    /// directory: the running process and its standard output.
    static func launch(_ binary: String, _ setup: Setup, extra: [String] = [], data: String = "data") throws
        -> (ChildProcess, Pipe)
    {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments =
            [
                "serve", "--config", setup.config.path, "--port", "0", "--data",
                setup.directory.appendingPathComponent(data).path,
            ] + extra
        process.environment = ProcessInfo.processInfo.environment.merging(["TEST_SECRET_KEY": "sk_test_secret_0123456"])
        { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        return (process, output)
    }

    static func start(_ binary: String, _ setup: Setup, extra: [String] = [], scheme: String = "http") throws
        -> (ChildProcess, String)
    {
        let (process, output) = try launch(binary, setup, extra: extra)
        let line = output.firstLine()
        guard let range = line.range(of: scheme + "://[^ \n]+:[0-9]+", options: .regularExpression) else {
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

    @Test(
        "Plain HTTP on an address other than loopback is started with a warning; on loopback without one",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func plainHTTPWarning() throws {
        let binary = try #require(ExecutableTests.binary)
        let setup = try Setup()
        /// What the server prints at start on `host`, read (without blocking) until `marker` or 10 s.
        func started(on host: String, until marker: String) throws -> String {
            let (process, output) = try Self.launch(binary, setup, extra: ["--host", host], data: "data-\(host)")
            defer { process.terminate() }
            let descriptor = output.fileHandleForReading.fileDescriptor
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4_096)
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline, !String(decoding: bytes, as: UTF8.self).contains(marker) {
                let count = read(descriptor, &buffer, buffer.count)
                if count > 0 { bytes += buffer[0..<count] } else { usleep(20_000) }
            }
            // Whatever else the start printed right after.
            usleep(200_000)
            let count = read(descriptor, &buffer, buffer.count)
            if count > 0 { bytes += buffer[0..<count] }
            return String(decoding: bytes, as: UTF8.self)
        }
        let open = try started(on: "0.0.0.0", until: "WARNING")
        #expect(open.contains("WARNING: plain HTTP on 0.0.0.0"), "\(open)")
        let local = try started(on: "127.0.0.1", until: "data:")
        #expect(local.contains("listening on http://127.0.0.1") && !local.contains("WARNING"), "\(local)")
    }

    @Test(
        "A password in --database is warned about (other users can read a command line), never printed",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func passwordOnCommandLine() throws {
        let binary = try #require(ExecutableTests.binary)
        let setup = try Setup()
        // Nothing listens on port 1: the start fails after the warning.
        let process = try ExternalTool.run(
            binary,
            [
                "serve", "--config", setup.config.path, "--port", "0", "--database",
                "postgres://app:hunter2@127.0.0.1:1/db",
            ],
            environment: ["TEST_SECRET_KEY": "sk_test_secret_0123456"])
        #expect(process.status != 0)
        #expect(process.stderrText.contains("warning: --database carries a password"), "\(process.stderrText)")
        #expect(!process.stderrText.contains("hunter2") && !process.stdoutText.contains("hunter2"))
    }

    /// The app's post of one user's subscription purchase, signed by the test chain.
    static func transactionPost(_ setup: Setup, _ index: Int) throws -> [UInt8] {
        let ms = Int64(Date().timeIntervalSince1970 * 1000) - 60_000 + Int64(index)
        let id = String(6_000_000_000_000_000 + index)
        let transaction = try setup.signer.sign([
            "transactionId": .string(id), "originalTransactionId": .string(id), "bundleId": .string("com.example.app"),
            "productId": .string("monthly"), "purchaseDate": .integer(ms), "expiresDate": .integer(ms + 3_600_000),
            "type": .string("Auto-Renewable Subscription"), "signedDate": .integer(ms),
            "environment": .string("Sandbox"), "transactionReason": .string("PURCHASE"),
        ])
        return JSONWriter.bytes(
            .object([
                "bundleId": .string("com.example.app"), "appUserId": .string("user-\(index)"),
                "signedTransaction": .string(transaction),
            ]))
    }

    @Test(
        "Three servers on one PostgreSQL, one killed -9 under load: nothing acknowledged is lost; webhooks go once",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"),
        .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage))
    func killOneOfThree() async throws {
        let binary = try #require(ExecutableTests.binary)
        let setup = try Setup()
        // Webhooks to a receiver that counts every event id; a short timeout so that what the killed
        // server had claimed is sent by another within seconds.
        final class Received: Sendable { let ids = Mutex<[String]>([]) }
        let received = Received()
        var router = Router()
        router.add(
            "POST", "/hooks",
            inline: { request, _ in
                if let id = (try? JSONParser.parse(request.body))?["event"]?["id"]?.stringValue {
                    received.ids.withLock { $0.append(id) }
                }
                return HTTPResponse(status: 200)
            })
        let sink = try HTTPServer(port: 0, responder: router.freeze())
        defer { sink.stop() }
        try Data(
            """
            {"secretKey": "${TEST_SECRET_KEY}", "webhookTimeoutSeconds": 2,
             "apps": [{"bundleId": "com.example.app", "publicKey": "pk_test_app1",
              "receiptRoots": ["receipt-root.pem"], "jwsRoots": ["jws-root.pem"], "entitlements": {"plus": ["monthly"]},
              "webhooks": [{"url": "http://127.0.0.1:\(sink.port)/hooks", "secret": "whsec_multi_0001"}]}]}
            """.utf8
        ).write(to: setup.config)
        let database = try PostgresTesting.freshDatabase()
        var servers: [(ChildProcess, String)] = []
        for _ in 0..<3 { servers.append(try Self.start(binary, setup, extra: ["--database", database])) }
        defer {
            for (process, _) in servers where process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
        let bodies = try (0..<240).map { try Self.transactionPost(setup, $0) }
        final class Acknowledged: Sendable { let indexes = Mutex<[Int]>([]) }
        let acknowledged = Acknowledged()
        let bases = servers.map(\.1)
        let senders = Task {
            await withTaskGroup(of: Void.self) { group in
                for client in 0..<6 {
                    group.addTask {
                        for index in stride(from: client, to: bodies.count, by: 6) {
                            // A server that does not answer is replaced by the next, as a load balancer does.
                            for attempt in 0..<3 {
                                let base = bases[(index + attempt) % bases.count]
                                guard
                                    let response = try? await HTTPClient(timeout: .seconds(20)).send(
                                        "POST", base + "/v1/transactions",
                                        headers: [
                                            ("Content-Type", "application/json"),
                                            ("Authorization", "Bearer pk_test_app1"),
                                        ], body: bodies[index])
                                else { continue }
                                if response.status == 200 {
                                    acknowledged.indexes.withLock { $0.append(index) }
                                    break
                                }
                            }
                        }
                    }
                }
            }
        }
        for _ in 0..<3_000 where acknowledged.indexes.withLock({ $0.count }) < 60 {
            try await Task.sleep(for: .milliseconds(10))
        }
        kill(servers[0].0.processIdentifier, SIGKILL)
        servers[0].0.waitUntilExit()
        await senders.value
        let indexes = acknowledged.indexes.withLock { $0 }
        #expect(Set(indexes).count == bodies.count, "every post was acknowledged by some server")
        // Every acknowledged purchase is stored: the survivors answer for each user.
        for index in indexes.sorted() {
            let response = try await HTTPClient().send(
                "GET", bases[1 + index % 2] + "/v1/subscribers/user-\(index)",
                headers: [("Authorization", "Bearer sk_test_secret_0123456")])
            let view = try JSONParser.parse(response.body)
            #expect(
                view["subscriptions"]?[String(6_000_000_000_000_000 + index)] != nil,
                "user-\(index)'s acknowledged purchase was lost")
        }
        // Each purchase's webhook arrives; a second copy only for one the killed server was sending.
        var ids: [String] = []
        for _ in 0..<600 {
            ids = received.ids.withLock { $0 }
            if Set(ids).count >= bodies.count { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        try await Task.sleep(for: .seconds(1))
        ids = received.ids.withLock { $0 }
        #expect(Set(ids).count == bodies.count, "every event's webhook arrived")
        let twice = ids.count - Set(ids).count
        #expect(twice <= 8, "\(twice) webhooks sent twice: more than the killed server could have had in flight")
    }

    @Test(
        "serve --tls-cert --tls-key answers over HTTPS to a real TLS client",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"),
        .enabled(if: ExternalTool.find("openssl") != nil && ExternalTool.find("curl") != nil, "openssl and curl"))
    func tls() throws {
        let binary = try #require(ExecutableTests.binary)
        let setup = try Setup()
        let certificate = setup.directory.appendingPathComponent("tls.pem").path
        let key = setup.directory.appendingPathComponent("tls.key").path
        let made = try ExternalTool.run(
            ExternalTool.find("openssl")!,
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key,
                "-out", certificate,
            ])
        #expect(made.status == 0, "\(made.stderrText)")
        let (server, base) = try Self.start(
            binary, setup, extra: ["--tls-cert", certificate, "--tls-key", key], scheme: "https")
        defer {
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        #expect(base.hasPrefix("https://"))
        let curl = ExternalTool.find("curl")!
        let verified = try ExternalTool.run(curl, ["-sS", "--cacert", certificate, base + "/healthz"])
        #expect(verified.status == 0, "\(verified.stderrText)")
        #expect(String(decoding: verified.stdout, as: UTF8.self).contains("ok"))
        // Every answer carries HSTS.
        let headers = try ExternalTool.run(
            curl, ["-sS", "-D", "-", "-o", "/dev/null", "--cacert", certificate, base + "/healthz"])
        #expect(String(decoding: headers.stdout, as: UTF8.self).contains("Strict-Transport-Security: max-age="))
        // TLS 1.2 and 1.3 with AEAD suites only: TLS 1.0, 1.1 and a CBC suite get no session.
        let openssl = ExternalTool.find("openssl")!
        let hostPort = String(base.dropFirst("https://".count))
        func handshake(_ options: [String]) throws -> String {
            let run = try ExternalTool.run(openssl, ["s_client", "-connect", hostPort] + options)
            return String(decoding: run.stdout, as: UTF8.self)
        }
        for old in [
            ["-tls1", "-cipher", "DEFAULT@SECLEVEL=0"], ["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"],
            ["-tls1_2", "-cipher", "AES128-SHA"],
        ] {
            let text = try handshake(old)
            #expect(text.contains("Cipher is (NONE)"), "\(old): \(text.prefix(300))")
        }
        let modern = try handshake(["-tls1_2"])
        #expect(modern.contains("Cipher is ECDHE-ECDSA-AES") || modern.contains("Cipher is ECDHE-ECDSA-CHACHA20"))
        // A client that does not trust the certificate is refused; plain HTTP gets no answer.
        let untrusted = try ExternalTool.run(curl, ["-sS", base + "/healthz"])
        #expect(untrusted.status != 0)
        let plain = try ExternalTool.run(
            curl, ["-sS", "--max-time", "5", base.replacingOccurrences(of: "https://", with: "http://") + "/healthz"])
        #expect(plain.status != 0)
        // A key that is not the certificate's is refused at start, naming no secret.
        let refused = try ExternalTool.run(
            binary,
            [
                "serve", "--config", setup.config.path, "--port", "0", "--tls-cert", certificate, "--tls-key",
                certificate,
            ],
            environment: ["TEST_SECRET_KEY": "sk_test_secret_0123456"])
        #expect(refused.status != 0)
    }
}
