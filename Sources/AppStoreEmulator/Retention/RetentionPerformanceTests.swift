import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import SubscriptionLifecycle
import Synchronization

/// The performance test Apple runs against a sandbox realtime URL: its published configuration (the
/// response-time threshold is the store's realtime timeout, Apple's 700 ms by default).
struct PerformanceTestPlan {
    static let maxConcurrentRequests = 4
    static let totalRequests = 40
    /// Milliseconds the run may take at most.
    static let totalDuration = 30_000
    /// Percent of requests that must succeed in time.
    static let successRateThreshold = 95
    let responseTimeThreshold: Int

    init(timeout: Duration) {
        responseTimeThreshold = Int(timeout.wholeMilliseconds)
    }

    var config: JSONObject {
        [
            "maxConcurrentRequests": .integer(Int64(Self.maxConcurrentRequests)),
            "totalRequests": .integer(Int64(Self.totalRequests)), "totalDuration": .integer(Int64(Self.totalDuration)),
            "responseTimeThreshold": .integer(Int64(responseTimeThreshold)),
            "successRateThreshold": .integer(Int64(Self.successRateThreshold)),
        ]
    }
}

/// Retention Messaging's performance test: Apple's requests against a sandbox realtime URL, timed and scored.
extension ServerAPIService {
    /// Performance test runs kept per app (the oldest finished ones go first).
    static let performanceTestsKept = 100

    func apiInitiatePerformanceTest(body: JSONObject, scope: APIScope) async throws -> (JSONObject, String) {
        _ = try apiApp(scope)
        guard let original = body["originalTransactionId"]?.stringValue,
            body.members.allSatisfy({ $0.key == "originalTransactionId" }),
            (1...32).contains(original.utf8.count), original.utf8.allSatisfy({ (48...57).contains($0) })
        else { throw EmulatorError.api(.invalidPerformanceTestRequest, "Invalid performance test request.") }
        let requestID = appStore.newUUID().lowercased()
        let now = appStore.now
        let bundle = BundleID(scope.bundleID)
        // The test runs in the sandbox, with a sandbox customer's subscription.
        let written: (String, StoredSubscription)
        do {
            written = try await appStore.storage.write { store in
                guard let stored = try store.transaction(TransactionID(original)),
                    stored.transaction.bundleID == bundle,
                    let subscription = try store.subscription(stored.transaction.originalID),
                    try store.account(subscription.accountID)?.environment == .sandbox
                else {
                    throw EmulatorError.api(
                        .invalidPerformanceTestRequest,
                        "The original transaction is not a sandbox subscription of the app."
                    )
                }
                guard let url = try self.realtimeURL(bundle: bundle, environment: .sandbox, in: store) else {
                    throw EmulatorError.api(.realtimeUrlNotFound, "Realtime URL not found.")
                }
                // One run at a time per app, claimed inside the write (writes run one at a time).
                let tests = try store.retentionItems(
                    .performanceTest, bundle: bundle, environment: .sandbox, limit: Self.performanceTestsKept + 1)
                let claimed = self.performanceRuns.withLock { runs -> Bool in
                    guard !tests.contains(where: { $0.state == "PENDING" && runs.contains($0.id) }) else {
                        return false
                    }
                    runs.insert(requestID)
                    return true
                }
                guard claimed else {
                    throw EmulatorError.api(.existingPerformanceTestRun, "A performance test is already running.")
                }
                // The oldest finished runs go (the newest ones, a passed one among them, stay).
                for old in tests.dropLast(Self.performanceTestsKept - 1) where old.state != "PENDING" {
                    _ = try store.deleteRetentionItem(
                        .performanceTest, bundle: bundle, environment: .sandbox, id: old.id)
                }
                var item = RetentionItem(
                    kind: .performanceTest, bundleID: bundle, environment: .sandbox, id: requestID, state: "PENDING",
                    created: now)
                item.document = JSONWriter.string(
                    .object([
                        "config": .object(PerformanceTestPlan(timeout: self.appStore.realtimeTimeout).config),
                        "target": .string(url), "numPending": .integer(Int64(PerformanceTestPlan.totalRequests)),
                    ]))
                try store.save(item)
                return (url, subscription)
            }
        } catch {
            // A write that did not commit leaves no claim behind.
            performanceRuns.withLock { _ = $0.remove(requestID) }
            throw error
        }
        let (url, subscription) = written
        jobs.start { [self] in
            await self.runPerformanceTest(requestID, url: url, subscription: subscription)
            self.performanceRuns.withLock { _ = $0.remove(requestID) }
        }
        return (PerformanceTestPlan(timeout: appStore.realtimeTimeout).config, requestID)
    }

    /// Sends the plan's requests, a few at a time, and records the result.
    private func runPerformanceTest(_ requestID: String, url: String, subscription: StoredSubscription) async {
        let plan = PerformanceTestPlan(timeout: appStore.realtimeTimeout)
        let total = PerformanceTestPlan.totalRequests
        let deadline = ContinuousClock.now + .milliseconds(PerformanceTestPlan.totalDuration)
        var exchanges: [RealtimeExchange] = []
        await withTaskGroup(of: RealtimeExchange?.self) { group in
            var started = 0
            func startOne() {
                guard started < total, ContinuousClock.now < deadline, !Task.isCancelled else { return }
                started += 1
                let payload = realtimePayload(
                    original: subscription.originalTransactionID, productID: subscription.state.productID,
                    bundle: subscription.bundleID, environment: .sandbox, locale: "en-US",
                    requestIdentifier: appStore.newUUID().lowercased(), signedDate: appStore.now)
                group.addTask { await self.sendRealtime(payload, to: url) }
            }
            for _ in 0..<PerformanceTestPlan.maxConcurrentRequests { startOne() }
            while let exchange = await group.next() {
                if let exchange { exchanges.append(exchange) }
                startOne()
            }
        }
        guard !Task.isCancelled else { return }
        var failures: [String: Int] = [:]
        var succeeded = 0
        for exchange in exchanges {
            var result = exchange.result
            if result == .success, exchange.answer.map({ (try? RetentionAnswer.parse($0)) == nil }) ?? true {
                result = .invalidResponse
            }
            if result == .success, exchange.milliseconds > Double(plan.responseTimeThreshold) {
                result = .timedOut
            }
            if result == .success { succeeded += 1 } else { failures[result.rawValue, default: 0] += 1 }
        }
        let times = exchanges.map(\.milliseconds).sorted()
        func percentile(_ p: Double) -> JSONValue {
            guard !times.isEmpty else { return .integer(0) }
            let index = min(times.count - 1, Int((p * Double(times.count)).rounded(.up)) - 1)
            return .integer(Int64(times[max(0, index)].rounded()))
        }
        var failureCounts = JSONObject()
        for (name, count) in failures.sorted(by: { $0.key < $1.key }) { failureCounts[name] = .integer(Int64(count)) }
        let rate = total == 0 ? 0 : succeeded * 100 / total
        let result = rate >= PerformanceTestPlan.successRateThreshold ? "PASS" : "FAIL"
        let document: JSONObject = [
            "config": .object(plan.config), "target": .string(url), "result": .string(result),
            "successRate": .integer(Int64(rate)), "numPending": .integer(0),
            "responseTimes": .object([
                "average": .integer(times.isEmpty ? 0 : Int64((times.reduce(0, +) / Double(times.count)).rounded())),
                "p50": percentile(0.5), "p90": percentile(0.9), "p95": percentile(0.95), "p99": percentile(0.99),
            ]),
            "failures": .object(failureCounts),
        ]
        do {
            try await appStore.storage.write { store in
                guard
                    var item = try store.retentionItem(
                        .performanceTest, bundle: subscription.bundleID, environment: .sandbox, id: requestID)
                else { return }
                item.state = result
                item.document = JSONWriter.string(.object(document))
                try store.save(item)
            }
        } catch {
            // Not stored: the test stays pending and its result reads as a failure, said here too.
            appStore.logger.error(
                "retention.performance-test-not-stored", ["request": requestID, "error": String(describing: error)])
        }
    }

    func apiPerformanceTestResult(_ rawID: String, scope: APIScope) async throws -> JSONObject {
        _ = try apiApp(scope)
        let id = try RetentionID.parse(rawID, invalid: .invalidRequestId, what: "request id")
        let item = try await appStore.storage.read { store in
            try store.retentionItem(.performanceTest, bundle: BundleID(scope.bundleID), environment: .sandbox, id: id)
        }
        guard let item else { throw EmulatorError.api(.performanceTestRunNotFound, "Performance test not found.") }
        var document = item.object
        if item.state == "PENDING", !performanceRuns.withLock({ $0.contains(id) }) {
            // A run this process did not finish (it stopped meanwhile) failed.
            document["result"] = .string("FAIL")
        } else {
            document["result"] = .string(item.state)
        }
        return document
    }
}
