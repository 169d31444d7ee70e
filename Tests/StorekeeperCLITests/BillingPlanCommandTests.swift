import Foundation
import StorekeeperCLITestSupport
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// `appstore serve --config` with `billingPlans`: a catalogue without a commitment plan gets one.
@Suite("storekeeper appstore serve: billing plans from --config")
struct BillingPlanCommandTests {
    static let products = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("examples/Products.storekit").path

    @Test(
        "A yearly product of a .storekit gets its monthly plan from --config; a wrong plan is refused by name",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func plans() async throws {
        let binary = try #require(ExecutableTests.binary)
        let directory = try ExternalTool.temporaryDirectory()
        let config = directory.appendingPathComponent("config.json")
        try Data(
            #"""
            {"apps": [{"bundleId": "com.example.app"}],
             "billingPlans": {"com.example.app.yearly": [{"billingPlanType": "MONTHLY", "displayPrice": "5.99"}]}}
            """#.utf8
        ).write(to: config)
        let (emulator, base, _) = try AppStoreServeTests.start(
            binary: binary, data: directory.appendingPathComponent("data"),
            extra: ["--storekit", Self.products, "--config", config.path])
        defer {
            emulator.terminate()
            emulator.waitUntilExit()
        }
        func run(_ arguments: [String]) async -> String {
            let result = await CapturedConsole.run(arguments + ["--url", base])
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let account = await run(["appstore", "account", "--field", "accountId"])
        let device = await run(["appstore", "device", "--account", account, "--field", "deviceId"])
        _ = await run(["appstore", "install", "--device", device, "--bundle-id", "com.example.app"])
        let bought = await run([
            "appstore", "buy", "--device", device, "--bundle-id", "com.example.app", "--product",
            "com.example.app.yearly", "--billing-plan", "MONTHLY", "--field", "transaction.transactionIdentifier",
        ])
        let state = try JSONParser.parse(
            try await HTTPClient().send("GET", base + "/_emulator/v1/transactions/\(bought)").body)
        #expect(state["subscription"]?["billingPlanType"] == .string("MONTHLY"), "\(state)")
        #expect(state["subscription"]?["commitment"]?["totalBillingPeriods"] == .integer(12))
        let monthly = await CapturedConsole.run([
            "appstore", "buy", "--device", device, "--bundle-id", "com.example.app", "--product",
            "com.example.app.monthly", "--billing-plan", "MONTHLY", "--url", base,
        ])
        #expect(monthly.status != 0 && monthly.stderr.contains("not sold with a monthly plan"), "\(monthly.stderr)")

        // A plan the emulator does not know is refused at start, naming the file, the product and the key.
        try Data(
            #"{"apps": [{"bundleId": "com.example.app"}], "billingPlans": {"com.example.app.yearly": [{"billingPlanType": "WEEKLY"}]}}"#
                .utf8
        ).write(to: config)
        let refused = await CapturedConsole.run([
            "appstore", "serve", "--port", "0", "--data", directory.appendingPathComponent("other").path,
            "--storekit", Self.products, "--config", config.path,
        ])
        #expect(refused.status != 0, "\(refused.stdout)")
        #expect(
            refused.stderr.contains("com.example.app.yearly") && refused.stderr.contains("WEEKLY")
                && refused.stderr.contains("billingPlans"), "\(refused.stderr)")
    }
}
