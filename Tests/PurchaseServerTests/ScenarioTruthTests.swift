import AppStoreEmulator
import Foundation
import PurchaseServer
import StoreModel
import StorekeeperCLITestSupport
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
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
        try await Self.check(path, harness: harness, storage: storage, allDelivered: true)
    }

    /// Runs the scenario on the harness's emulator, then compares what `storage` holds with the emulator's
    /// truth (waiting up to `repairWithin` for reconciliation to repair what never arrived), then syncs
    /// the app's purchases and checks the views and webhooks.
    static func check(
        _ path: String, harness: ServerHarness, storage: any ServerStorage, allDelivered: Bool,
        repairWithin: Duration = .zero
    ) async throws {
        let base = "http://127.0.0.1:\(harness.emulator.port)"
        let run = await CapturedConsole.run(["appstore", "scenario", "run", "--url", base, path])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        try await harness.settleNotifications()
        var originals: Set<String> = []
        for environment in [Environment.sandbox, .production] {
            let history = try await harness.store.notificationHistory(
                bundleID: ServerHarness.bundleID, environment: environment, from: .distantPast, to: .distantFuture,
                after: nil, limit: 10_000)
            if allDelivered {
                #expect(
                    history.allSatisfy { $0.notification.state == .delivered }, "every notification reached the server")
            }
            for entry in history {
                if let id = entry.notification.originalTransactionID { originals.insert(id.rawValue) }
            }
        }
        var compared = 0
        for original in originals.sorted() {
            guard let truth = try await harness.store.subscriptionState(originalTransactionID: original) else {
                continue
            }
            let expires = truth.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) }
            func matches(_ record: SubscriptionRecord?) -> Bool {
                record?.status == truth.status.rawValue && record?.autoRenewStatus == truth.autoRenew
                    && record?.productID == truth.productID
                    && record.map { $0.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) } }
                        == expires
            }
            var record = try await storage.read { try $0.subscription(TransactionID(original)) }
            let deadline = ContinuousClock.now + repairWithin
            while !matches(record), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                record = try await storage.read { try $0.subscription(TransactionID(original)) }
            }
            let server = try #require(record, "the server knows subscription \(original)")
            #expect(server.status == truth.status.rawValue, "\(original): status")
            #expect(server.autoRenewStatus == truth.autoRenew, "\(original): auto-renew")
            #expect(server.productID == truth.productID, "\(original): product")
            #expect(server.autoRenewProductID == truth.autoRenewProductID, "\(original): renewal product")
            #expect(
                server.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) } == expires,
                "\(original): renewal date")
            compared += 1
        }
        let oneTime = path.hasSuffix("one-time-charge.json")
        #expect(compared > 0 || oneTime, "the scenario had subscriptions to compare")

        // The app then syncs each purchase for its user (as at launch): the subscriber view says what the
        // emulator says, and the events the server kept go out as signed webhooks for that user.
        var users: Set<String> = []
        for original in originals.sorted() {
            let (stored, truth) = try await harness.store.transactionAndSubscription(original)
            guard let truth else { continue }
            let user = "user-" + stored.accountID.rawValue
            users.insert(user)
            let jws = try await harness.store.signedTransaction(stored)
            let (status, view) = try await harness.post(jws, user: user)
            #expect(status == 200, "\(view)")
            let subscription = view["subscriptions"]?[original]
            #expect(subscription?["status"]?.int64Value == truth.status.rawValue, "\(original): the view's status")
            #expect(subscription?["autoRenewStatus"] == .bool(truth.autoRenew), "\(original): the view's auto-renew")
            let entitled =
                [.active, .billingGracePeriod].contains(truth.status)
                && (truth.expiresDate ?? .distantFuture) > Date()
                || (truth.status == .billingGracePeriod && (truth.gracePeriodExpiresDate ?? .distantPast) > Date())
            if ["com.example.storekeeper.monthly", "com.example.storekeeper.yearly"].contains(truth.productID.rawValue)
            {
                #expect(view["entitlements"]?["plus"]?["active"] == .bool(entitled), "\(original): entitled")
            }
        }
        if !users.isEmpty {
            let received = try await harness.sink.types { !$0.isEmpty }
            #expect(!received.isEmpty, "webhooks went out")
            let events = harness.sink.state.received.withLock { $0 }
            #expect(events.allSatisfy { $0.signatureValid })
            #expect(events.allSatisfy { users.contains($0.event["app_user_id"]?.stringValue ?? "") })
        }
    }
}
