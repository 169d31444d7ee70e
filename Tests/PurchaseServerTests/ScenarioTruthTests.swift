import AppStoreEmulator
import Foundation
import PurchaseServer
import StoreModel
import StorekeeperHTTP
import StorekeeperTestSupport
import Testing

/// Every lifecycle scenario (examples/scenarios) run against an emulator whose notifications go to a
/// purchase server: at the end, every subscription the server knows agrees with the emulator's truth.
@Suite("Purchase server: every lifecycle scenario ends as the emulator's truth")
struct ScenarioTruthTests {
    static let scenarios: [String] = {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("examples/scenarios")
        return ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter {
            $0.hasSuffix(".json")
        }.sorted().map { folder.appendingPathComponent($0).path }
    }()

    @Test("The scenario's subscriptions on the server match the emulator", arguments: scenarios)
    func scenario(path: String) async throws {
        let storage = InMemoryServerStorage()
        let harness = try await ServerHarness.make(storage: storage, withAPI: false)
        defer { harness.stop() }
        let base = "http://127.0.0.1:\(harness.emulator.port)"
        let run = CapturedConsole.run(["appstore", "scenario", "run", "--url", base, path])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        try await harness.settleNotifications()
        var originals: Set<String> = []
        for environment in [Environment.sandbox, .production] {
            let history = try await harness.store.notificationHistory(
                bundleID: ServerHarness.bundleID, environment: environment, from: .distantPast, to: .distantFuture,
                after: nil, limit: 10_000)
            #expect(history.allSatisfy { $0.notification.state == .delivered }, "every notification reached the server")
            for entry in history {
                if let id = entry.notification.originalTransactionID { originals.insert(id.rawValue) }
            }
        }
        var compared = 0
        for original in originals.sorted() {
            guard let truth = try await harness.store.subscriptionState(originalTransactionID: original) else {
                continue
            }
            let record = try await storage.read { try $0.subscription(original) }
            let server = try #require(record, "the server knows subscription \(original)")
            #expect(server.status == truth.status.rawValue, "\(original): status")
            #expect(server.autoRenewStatus == truth.autoRenew, "\(original): auto-renew")
            #expect(server.productID == truth.productID.rawValue, "\(original): product")
            #expect(server.autoRenewProductID == truth.autoRenewProductID.rawValue, "\(original): renewal product")
            #expect(
                server.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) }
                    == truth.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) },
                "\(original): renewal date")
            compared += 1
        }
        let oneTime = path.hasSuffix("one-time-charge.json")
        #expect(compared > 0 || oneTime, "the scenario had subscriptions to compare")
    }
}
