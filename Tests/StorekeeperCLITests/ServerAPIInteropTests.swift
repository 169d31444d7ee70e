import Foundation
import StorekeeperCLITestSupport
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Apple's own Python client (`AppStoreServerAPIClient`, `SignedDataVerifier` given the emulator's JWS root)
/// against the emulated App Store Server API: every endpoint succeeds where it should and receives Apple's
/// errors where it should (Tests/Interop/apple_api_client.py prints one line per step).
@Suite("App Store Server API: Apple's Python client against the emulator")
struct ServerAPIInteropTests {
    static let enabled = ExecutableTests.binary != nil && PythonInterop.python != nil

    static func run(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async -> String {
        let result = await CapturedConsole.run(arguments)
        #expect(result.status == 0, "\(arguments): \(result.stderr)", sourceLocation: sourceLocation)
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(
        "Every endpoint, in the sandbox and in production, through Apple's client and verifier",
        .enabled(if: enabled, "needs the storekeeper binary and Apple's Python library (scripts/python-env)"),
        arguments: ["Sandbox", "Production"])
    func appleClient(environment: String) async throws {
        let binary = try #require(ExecutableTests.binary)
        let python = try #require(PythonInterop.python)
        let directory = try ExternalTool.temporaryDirectory()
        // Retention's realtime requests wait longer than Apple's 700 ms: a loaded test machine answers slower.
        let (emulator, base, _) = try AppStoreServeTests.start(
            binary: binary, data: directory.appendingPathComponent("data"), extra: ["--realtime-timeout-ms", "5000"])
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        // A receiver for the test notification.
        var router = Router()
        // Inline: answered on the server's thread, while this test's thread waits for the script.
        router.add("POST", "/notifications", inline: { _, _ in HTTPResponse(status: 200) })
        let receiver = try HTTPServer(port: 0, responder: router.freeze())
        defer { receiver.stop() }
        let receiverURL = "http://127.0.0.1:\(receiver.port)/notifications"
        _ = await Self.run([
            "appstore", "notifications", "set", "--url", base, "--production-url", receiverURL, "--sandbox-url",
            receiverURL,
        ])
        let keyFile = directory.appendingPathComponent("key.p8").path
        let minted = try await JSONParser.parse(
            Array(Self.run(["appstore", "api-key", "--url", base, "--out", keyFile]).utf8))
        var info = stat()
        #expect(stat(keyFile, &info) == 0 && info.st_mode & 0o777 == 0o600, "the .p8 is readable by its owner only")

        let account = await Self.run([
            "appstore", "account", "--url", base, "--environment", environment, "--field", "accountId",
        ])
        let device = await Self.run(["appstore", "device", "--url", base, "--account", account, "--field", "deviceId"])
        _ = await Self.run(["appstore", "install", "--url", base, "--device", device])
        func buy(_ product: String) async -> String {
            await Self.run([
                "appstore", "buy", "--url", base, "--device", device, "--product", "com.example.storekeeper.\(product)",
                "--field", "transaction.transactionIdentifier",
            ])
        }
        let subscription = await buy("monthly")
        // A second customer on the yearly product's monthly plan (commitment billing, API 1.21).
        let committedAccount = await Self.run([
            "appstore", "account", "--url", base, "--environment", environment, "--field", "accountId",
        ])
        let committedDevice = await Self.run([
            "appstore", "device", "--url", base, "--account", committedAccount, "--field", "deviceId",
        ])
        _ = await Self.run(["appstore", "install", "--url", base, "--device", committedDevice])
        let commitment = await Self.run([
            "appstore", "buy", "--url", base, "--device", committedDevice, "--product",
            "com.example.storekeeper.yearly", "--billing-plan", "MONTHLY", "--field",
            "transaction.transactionIdentifier",
        ])
        let consumable = await buy("coins")
        let refunded = await buy("pro")
        _ = await Self.run(["appstore", "refund", "--url", base, "--transaction", refunded])
        let order = await Self.run([
            "appstore", "transactions", "--url", base, "--device", device, "--field", "transactions.0.orderId",
        ])
        // The Retention Messaging performance test runs in the sandbox, with a sandbox customer's subscription.
        var sandboxSubscription = subscription
        if environment != "Sandbox" {
            let sandboxAccount = await Self.run([
                "appstore", "account", "--url", base, "--environment", "Sandbox", "--field", "accountId",
            ])
            let sandboxDevice = await Self.run([
                "appstore", "device", "--url", base, "--account", sandboxAccount, "--field", "deviceId",
            ])
            _ = await Self.run(["appstore", "install", "--url", base, "--device", sandboxDevice])
            sandboxSubscription = await Self.run([
                "appstore", "buy", "--url", base, "--device", sandboxDevice, "--product",
                "com.example.storekeeper.monthly", "--field", "transaction.transactionIdentifier",
            ])
        }
        let root = try #require(
            try JSONParser.parse(try await HTTPClient().send("GET", base + "/_emulator/v1/certificates").body)[
                "jwsRoot"]?.stringValue)

        let script = URL(fileURLWithPath: PythonInterop.verifierScript).deletingLastPathComponent()
            .appendingPathComponent("apple_api_client.py").path
        let result = try ExternalTool.run(
            python,
            [
                script, "--base", environment == "Sandbox" ? base + "/sandbox" : base, "--key-file", keyFile,
                "--key-id", try #require(minted["keyId"]?.stringValue), "--issuer-id",
                try #require(minted["issuerId"]?.stringValue), "--bundle-id", "com.example.storekeeper", "--root", root,
                "--environment", environment, "--app-apple-id", "1234567890", "--subscription", subscription,
                "--consumable", consumable, "--order", order, "--refunded", refunded, "--sandbox-subscription",
                sandboxSubscription, "--commitment", commitment,
            ])
        let lines = result.stdoutText.split(separator: "\n").compactMap { try? JSONParser.parse(Array($0.utf8)) }
        let steps = lines.compactMap { $0["step"]?.stringValue }
        for expected in [
            "transaction_info", "history_v2", "history_filtered", "history_revoked", "statuses", "statuses_filtered",
            "refund_history", "order", "order_invalid", "extend", "extend_too_many_days", "extend_again_same_id",
            "mass_extend", "test_notification", "notification_history", "notification_history_only_failures",
            "consumption_v2", "consumption_v2_no_consent", "consumption_v1", "app_account_token", "app_transaction",
            "finish_transaction", "any_transaction_id", "app_transaction_id_info", "app_transaction_id_finish",
            "not_found", "invalid_id", "bad_revision", "wrong_key", "wrong_bundle", "fault_429", "fault_retryable",
            "retention_upload_images", "retention_image_exists", "retention_image_invalid", "retention_upload_message",
            "retention_message_exists", "retention_delete_message", "retention_message_not_found",
            "retention_image_in_use", "retention_default_message", "retention_invalid_locale",
            "retention_performance_test", "retention_test_not_found", "retention_realtime_url",
            "retention_realtime_request", "retention_requests_verified", "retention_delete_image",
            "commitment_transaction", "commitment_renewal_info",
        ]
            + (environment == "Sandbox"
                ? [] : ["retention_default_not_approved", "retention_review", "retention_realtime_url_needs_test"])
        {
            #expect(steps.contains(expected), "step \(expected) ran (stderr: \(result.stderrText.suffix(2_000)))")
        }
        for line in lines where line["ok"] != .bool(true) {
            Issue.record("step failed: \(JSONWriter.string(line))")
        }
    }
}

/// `storekeeper api <endpoint>` against a running emulator, with a key from `storekeeper appstore api-key`.
@Suite("storekeeper api: the App Store Server API from the shell")
struct APICommandTests {
    @Test(
        "Endpoints print Apple's JSON with signed fields decoded; Apple's errors and usage mistakes exit non-zero",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func commands() async throws {
        let binary = try #require(ExecutableTests.binary)
        let directory = try ExternalTool.temporaryDirectory()
        let (emulator, base, _) = try AppStoreServeTests.start(
            binary: binary, data: directory.appendingPathComponent("data"))
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        let keyFile = directory.appendingPathComponent("key.p8").path
        let keyID = await ServerAPIInteropTests.run([
            "appstore", "api-key", "--url", base, "--out", keyFile, "--field", "keyId",
        ])
        let listed = await ServerAPIInteropTests.run([
            "appstore", "api-key", "--url", base, "--out", directory.appendingPathComponent("second.p8").path,
            "--field", "issuerId",
        ])
        let (_, device) = await cliCustomer(base)
        let bought = await ServerAPIInteropTests.run([
            "appstore", "buy", "--url", base, "--device", device, "--product", "com.example.storekeeper.monthly",
            "--field", "transaction.transactionIdentifier",
        ])
        let common = [
            "--url", base + "/sandbox", "--key", keyFile, "--key-id", keyID, "--issuer-id", listed, "--bundle-id",
            "com.example.storekeeper",
        ]
        await #expect(
            ServerAPIInteropTests.run(
                ["api", "transaction", bought] + common + ["--field", "transactionInfo.transactionId"])
                == bought)
        let root = directory.appendingPathComponent("roots")
        _ = await ServerAPIInteropTests.run(["appstore", "certs", "--url", base, "--out", root.path])
        let verified = await ServerAPIInteropTests.run(
            ["api", "history", bought, "--all", "--verify-root", root.appendingPathComponent("jws-root.cer").path]
                + common + ["--field", "pages.0.transactions.0.productId"])
        #expect(verified == "com.example.storekeeper.monthly")
        // A misspelt --environment is refused beside --url too, not passed over.
        let misspelt = await CapturedConsole.run(["api", "history", bought] + common + ["--environment", "nope"])
        #expect(misspelt.status == 64 && misspelt.stderr.contains("--environment must be production or sandbox"))
        let statuses = await ServerAPIInteropTests.run(
            ["api", "statuses", bought] + common + ["--field", "data.0.lastTransactions.0.renewalInfo.autoRenewStatus"])
        #expect(statuses == "1")

        // Retention Messaging from the shell: a message, the default for a product, the realtime URL.
        let message = UUID().uuidString.lowercased()
        #expect(
            await ServerAPIInteropTests.run(
                ["api", "upload-message", message, "--header", "Stay", "--body", "Please stay"] + common
                    + ["--field", "messageIdentifier"]) == message)
        #expect(
            await ServerAPIInteropTests.run(
                ["api", "messages"] + common + ["--field", "messageIdentifiers.0.messageState"])
                == "APPROVED")
        #expect(
            await ServerAPIInteropTests.run(
                ["api", "default-message", "com.example.storekeeper.monthly", "--locale", "en-US", "--set", message]
                    + common + ["--field", "messageIdentifier"]) == message)
        #expect(
            await ServerAPIInteropTests.run(
                ["api", "realtime-url", "--set", "https://example.com/retention"] + common + ["--field", "realtimeURL"])
                == "https://example.com/retention")
        let tooLong = await CapturedConsole.run(
            ["api", "upload-message", UUID().uuidString, "--header", String(repeating: "h", count: 67), "--body", "b"]
                + common)
        #expect(tooLong.status == 1 && tooLong.stderr.contains("4000162"), "\(tooLong.stderr)")

        let missing = await CapturedConsole.run(["api", "transaction", "9999999999"] + common)
        #expect(missing.status == 1 && missing.stderr.contains("4040010"), "\(missing.stderr)")
        let noKey = await CapturedConsole.run(["api", "transaction", bought, "--url", base])
        #expect(noKey.status == 64, "\(noKey.stderr)")
        let production = await CapturedConsole.run(
            ["api", "transaction", bought] + common.map { $0 == base + "/sandbox" ? base : $0 })
        #expect(production.status == 1 && production.stderr.contains("404"), "sandbox purchases are not production's")
    }
}
