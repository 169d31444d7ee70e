import Foundation
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// The lifecycle verbs and `appstore notifications …` from the shell, against a live emulator.
@Suite("storekeeper appstore lifecycle and notifications")
struct LifecycleCommandTests {
    @Test(
        "notifications listen prints the emulator's notifications verified; the verbs drive the story",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func listenAndVerbs() throws {
        let binary = try #require(ExecutableTests.binary)
        let data = try ExternalTool.temporaryDirectory()
        let (emulator, base, _) = try AppStoreServeTests.start(binary: binary, data: data)
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        // The receiver: the emulator's root from --url, stops after four notifications.
        let listener = Process()
        listener.executableURL = URL(fileURLWithPath: binary)
        listener.arguments = ["appstore", "notifications", "listen", "--url", base, "--port", "0", "--count", "4"]
        let output = Pipe()
        listener.standardOutput = output
        listener.standardError = FileHandle.nullDevice
        try listener.run()
        defer { if listener.isRunning { listener.terminate() } }
        var first: [UInt8] = []
        while !first.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            first += chunk
        }
        let line = String(decoding: first, as: UTF8.self)
        let url = try #require(line.firstMatch(of: /http:\/\/127\.0\.0\.1:\d+\//).map { String($0.output) })

        let set = CapturedConsole.run(["appstore", "notifications", "set", "--url", base, "--sandbox-url", url])
        #expect(set.status == 0, "\(set.stderr)")
        let account = CapturedConsole.run(["appstore", "account", "--url", base, "--field", "accountId"])
        let accountID = account.stdout.trimmingCharacters(in: .newlines)
        let device = CapturedConsole.run(
            ["appstore", "device", "--url", base, "--account", accountID, "--field", "deviceId"]
        ).stdout.trimmingCharacters(in: .newlines)
        _ = CapturedConsole.run(["appstore", "install", "--url", base, "--device", device])
        let bought = CapturedConsole.run(
            [
                "appstore", "buy", "--url", base, "--device", device, "--product", "com.example.storekeeper.monthly",
                "--field", "transaction.transactionIdentifier",
            ])
        let transaction = bought.stdout.trimmingCharacters(in: .newlines)
        #expect(bought.status == 0 && !transaction.isEmpty, "\(bought.stderr)")

        let off = CapturedConsole.run(
            ["appstore", "auto-renew", "--url", base, "--transaction", transaction, "--enabled", "false"])
        #expect(off.status == 0, "\(off.stderr)")
        #expect(try JSONParser.parse(off.stdout)["subscription"]?["autoRenew"] == .bool(false))
        let bad = CapturedConsole.run(
            ["appstore", "auto-renew", "--url", base, "--transaction", transaction, "--enabled", "maybe"])
        #expect(bad.status == 64 && bad.stderr.contains("true, false"))
        let expire = CapturedConsole.run(["appstore", "expire", "--url", base, "--transaction", transaction])
        #expect(expire.status == 0, "\(expire.stderr)")
        let again = CapturedConsole.run(["appstore", "expire", "--url", base, "--transaction", transaction])
        #expect(again.status == 1 && again.stderr.contains("already ended"), "\(again.stderr)")
        let refund = CapturedConsole.run(
            ["appstore", "refund", "--url", base, "--transaction", transaction, "--reason", "APP_ISSUE"])
        #expect(refund.status == 0, "\(refund.stderr)")

        listener.waitUntilExit()
        #expect(listener.terminationStatus == 0)
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
        let history = CapturedConsole.run(["appstore", "notifications", "history", "--url", base])
        #expect(history.status == 0)
        #expect(
            try JSONParser.parse(history.stdout)["notificationHistory"]?.arrayValue?.count == 4, "\(history.stdout)")
    }
}
