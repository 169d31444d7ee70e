import AppStoreServerAPI
public import Foundation
import StoreModel
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

/// Reconciliation by polling, for the notifications that never arrive: Apple's notification history
/// (`onlyFailures`) from a stored checkpoint is fed through the same verified, deduplicated path as a
/// notification; and every subscription whose expected news is overdue (``SubscriptionRecord/
/// reconciliationDue``) is asked for with Get All Subscription Statuses and applied through the same engine.
/// Needs the app's App Store Server API key. With several processes on one database, one leads the
/// passes (``ServerStorage/lead(_:)``); all share each endpoint's request budget.
extension PurchaseServer {
    /// What one pass found.
    public struct ReconciliationReport: Sendable, Hashable {
        /// Notifications from the history that the server had not received.
        public var notificationsRecovered = 0
        /// Subscriptions asked for because their expected news was overdue.
        public var subscriptionsRefreshed = 0
        /// Events the pass created: changes the notifications had not brought.
        public var repairs = 0
        /// The pass stopped early because an endpoint's request budget was spent (the rest waits).
        public var budgetExhausted = false
        /// Another process leads reconciliation: this one did nothing.
        public var notLeader = false
        public var failures: [String] = []
    }

    /// How long after a due date a subscription without news is asked for.
    public static let overdueMargin: TimeInterval = 60
    /// How far back the first pass reads the history (Apple keeps 180 days).
    public static let firstHistoryWindow: TimeInterval = 86_400

    /// How far back Apple keeps the notification history: 180 days in Production, 30 in the Sandbox.
    static func historyKept(_ environment: Environment) -> TimeInterval {
        environment == .production ? 180 * 86_400 : 30 * 86_400
    }
    /// Subscriptions asked for in one pass, at most.
    public static let overduePerPass = 500

    /// One pass over every app with an API key, when this process leads reconciliation.
    public func reconcile() async -> ReconciliationReport {
        var report = ReconciliationReport()
        guard await storage.lead("reconciliation") else {
            report.notLeader = true
            return report
        }
        for app in apps.values.sorted(by: { $0.settings.bundleID < $1.settings.bundleID }) where !app.api.isEmpty {
            for environment in app.settings.environments.sorted(by: { $0.rawValue < $1.rawValue }) {
                guard let client = app.api[environment], !report.notLeader else { continue }
                await recoverHistory(app: app, environment: environment, client: client, into: &report)
            }
            // Another process leads now: the rest of the pass is its.
            guard !report.notLeader else { break }
            await refreshOverdue(app: app, into: &report)
        }
        metrics.count("storekeeper_reconciled_notifications_total", by: Double(report.notificationsRecovered))
        metrics.count("storekeeper_reconciled_subscriptions_total", by: Double(report.subscriptionsRefreshed))
        metrics.count("storekeeper_reconciliation_repairs_total", by: Double(report.repairs))
        if report.budgetExhausted { metrics.count("storekeeper_reconciliation_budget_exhausted_total") }
        for failure in report.failures { logger.warning("reconcile.failed", ["reason": failure]) }
        return report
    }

    /// Where the history pass stands: the window it reads and the page it reached.
    struct HistoryCheckpoint: Hashable {
        var start: Date
        var end: Date?
        var paginationToken: String?

        init(start: Date, end: Date? = nil, paginationToken: String? = nil) {
            self.start = start
            self.end = end
            self.paginationToken = paginationToken
        }

        init?(_ text: String?) {
            guard let text else { return nil }
            if let seconds = Double(text) {  // the first format: the next start, in seconds
                self.init(start: Date(timeIntervalSince1970: seconds))
                return
            }
            guard let object = (try? JSONParser.parse(Array(text.utf8)))?.objectValue,
                let start = object["start"]?.doubleValue
            else { return nil }
            self.init(
                start: EpochMilliseconds.date(start) ?? .distantPast,
                end: object["end"]?.doubleValue.flatMap { EpochMilliseconds.date($0) },
                paginationToken: object["paginationToken"]?.stringValue)
        }

        var text: String {
            var object: JSONObject = ["start": .integer(EpochMilliseconds.milliseconds(start))]
            if let end { object["end"] = .integer(EpochMilliseconds.milliseconds(end)) }
            if let paginationToken { object["paginationToken"] = .string(paginationToken) }
            return JSONWriter.string(.object(object))
        }
    }

    /// Reads the history's failures page by page from the checkpoint, storing the page token after each
    /// page: a pass cut short (budget, crash) goes on from there, and the history is never read again from
    /// its start.
    func recoverHistory(
        app: AppRuntime, environment: Environment, client: AppStoreServerAPIClient,
        into report: inout ReconciliationReport
    ) async {
        let bundleID = app.settings.bundleID
        let key = "notification-history:\(bundleID):\(environment.rawValue)"
        let current = now()
        do {
            var checkpoint =
                HistoryCheckpoint(try await storage.read { try $0.checkpoint(key) })
                ?? HistoryCheckpoint(start: current.addingTimeInterval(-Self.firstHistoryWindow))
            // Apple keeps 180 days of history in Production and 30 in the Sandbox (an older start is 4000012):
            // a checkpoint older than that (a long interval, a server stopped for a month) restarts its window
            // at the oldest day Apple still has, a day inside the limit.
            let earliest = current.addingTimeInterval(-Self.historyKept(environment) + 86_400)
            if checkpoint.start < earliest {
                checkpoint = HistoryCheckpoint(start: earliest)
            }
            if checkpoint.end == nil || checkpoint.paginationToken == nil {
                checkpoint.end = current.addingTimeInterval(1)
                checkpoint.paginationToken = nil
            }
            var movedForward = false
            for page in 0..<500 {
                // Still the leader (the first page's was checked as the pass began): a lock connection lost
                // during a long pass lets another process lead, and two passes would ask and checkpoint twice.
                if page > 0, !(await storage.lead("reconciliation")) {
                    report.notLeader = true
                    return
                }
                guard await takeAPIRequest("notificationHistory", app: app, environment: environment) else {
                    report.budgetExhausted = true
                    return
                }
                let page: NotificationHistoryResponse
                do {
                    page = try await client.notificationHistory(
                        NotificationHistoryRequest(
                            startDate: checkpoint.start, endDate: checkpoint.end ?? current, onlyFailures: true),
                        paginationToken: checkpoint.paginationToken)
                } catch
                    where checkpoint.paginationToken != nil
                    && (error.code == .paginationTokenExpired || error.code == .invalidPaginationToken)
                {
                    // Apple no longer takes the stored page token (it expired while passes were cut short, or
                    // the checkpoint was damaged): asking with it again would fail every later pass at the same
                    // place. The window is read again from its start (what was taken is deduplicated).
                    report.failures.append(
                        "\(bundleID) \(environment.rawValue) history: the page token was refused (\(error.message)); "
                            + "the window is read again from its start")
                    checkpoint.paginationToken = nil
                    checkpoint.end = current.addingTimeInterval(1)
                    continue
                } catch  where error.code == .startDateTooFarInPast && !movedForward {
                    // Apple's clock is ahead of the one this start was taken from: start two days later, once
                    // (asking again with the same start would fail every later pass the same way).
                    report.failures.append(
                        "\(bundleID) \(environment.rawValue) history: the start was refused as too far in the past; "
                            + "reading from two days later")
                    movedForward = true
                    checkpoint = HistoryCheckpoint(start: checkpoint.start.addingTimeInterval(2 * 86_400))
                    checkpoint.end = current.addingTimeInterval(1)
                    continue
                } catch {
                    await noteRateLimit(error, "notificationHistory", app: app, environment: environment)
                    throw error
                }
                for item in page.notificationHistory {
                    guard let signed = item.signedPayload else { continue }
                    let body = JSONWriter.bytes(.object(["signedPayload": .string(signed)]))
                    do {
                        let ingested = try await ingestNotification(bundleID: bundleID, body: body)
                        if !ingested.duplicate {
                            report.notificationsRecovered += 1
                            report.repairs += ingested.events.count
                        }
                    } catch let refused as PurchaseServerError where refused.status < 500 {
                        // One this server refuses (its signature, its app or environment) is reported and passed
                        // over: stopping here would stop every later pass at the same page. A storage failure
                        // still stops the pass, the checkpoint where it was.
                        report.failures.append(
                            "\(bundleID) \(environment.rawValue) history: a notification refused: \(refused.message)")
                    }
                }
                if page.hasMore, let token = page.paginationToken {
                    checkpoint.paginationToken = token
                } else {
                    // The next pass starts a little before this one ended: an attempt failing late is seen.
                    checkpoint = HistoryCheckpoint(start: (checkpoint.end ?? current).addingTimeInterval(-300))
                }
                let saved = checkpoint.text
                // A leader that lost the lead while it waited for this page writes nothing over the new one's.
                guard await storage.lead("reconciliation") else {
                    report.notLeader = true
                    return
                }
                try await storage.write { store in try store.setCheckpoint(key, saved) }
                if checkpoint.paginationToken == nil { return }
            }
        } catch {
            report.failures.append("\(bundleID) \(environment.rawValue) history: \(error)")
        }
    }

    /// Asks for the subscriptions whose news is overdue, the longest overdue first, within the budget.
    func refreshOverdue(app: AppRuntime, into report: inout ReconciliationReport) async {
        let bundleID = app.settings.bundleID
        do {
            let overdue = try await storage.read {
                try $0.overdueSubscriptions(
                    bundle: bundleID, before: self.now().addingTimeInterval(-Self.overdueMargin),
                    limit: Self.overduePerPass)
            }
            for subscription in overdue where app.api[subscription.environment] != nil {
                guard await storage.lead("reconciliation") else {
                    report.notLeader = true
                    break
                }
                guard
                    let events = await refreshFromAPI(
                        app: app, originalTransactionID: subscription.originalTransactionID,
                        environment: subscription.environment, polled: true)
                else {
                    report.budgetExhausted = true
                    break
                }
                report.subscriptionsRefreshed += 1
                report.repairs += events
            }
        } catch {
            report.failures.append("\(bundleID) overdue: \(error)")
        }
    }

    /// Takes one request from the shared budget of `endpoint` for the app: Apple's published hourly limit
    /// (50 a second for the endpoints used here, a tenth in Sandbox) spread over the hour, unless the
    /// configuration sets `maxRequestsPerHour`.
    func takeAPIRequest(_ endpoint: String, app: AppRuntime, environment: Environment) async -> Bool {
        let budget = APIRequestBudget(
            storage: storage, bundleID: app.settings.bundleID, environment: environment,
            perHour: configuration.maxAPIRequestsPerHour, wallClock: wallClock)
        do {
            let taken = try await budget.takeOrThrow(endpoint)
            if !taken { metrics.count("storekeeper_api_budget_refusals_total", ["endpoint": endpoint]) }
            return taken
        } catch {
            logger.warning("server-api.budget-failed", ["error": String(describing: error)])
            return false
        }
    }

    /// A 429 that outlasted the client's retries empties the endpoint's budget until Apple's `Retry-After`,
    /// for every process.
    func noteRateLimit(_ error: any Error, _ endpoint: String, app: AppRuntime, environment: Environment) async {
        guard let error = error as? AppStoreServerAPIError, error.status == 429 else { return }
        let until = error.retryAfter ?? wallClock().addingTimeInterval(60)
        try? await storage.blockRequests(
            to: "\(app.settings.bundleID):\(environment.rawValue):\(endpoint)", until: until)
    }

    /// Starts polling every `interval` (idempotent; stopped with ``stopDelivery()``). Every process may
    /// run it: the one that leads does the passes, another takes over when it dies.
    public func startReconciliation(every interval: Duration) {
        reconciler.withLock { task in
            guard task == nil else { return }
            task = Task { [weak self] in
                while !Task.isCancelled {
                    guard let self else { return }
                    _ = await self.reconcile()
                    try? await Task.sleep(for: interval)
                }
            }
        }
    }
}

/// An app's shared budget of App Store Server API requests in one environment, per endpoint: Apple's
/// published hourly limit (50 a second for the endpoints used here, a tenth in Sandbox) spread over the hour,
/// unless the configuration sets `maxRequestsPerHour`; kept in the storage, so every process takes from it.
struct APIRequestBudget: Sendable {
    let storage: any ServerStorage
    let bundleID: String
    let environment: Environment
    let perHour: Double?
    let wallClock: @Sendable () -> Date

    /// One request of `endpoint` taken; false when the budget is spent or the storage cannot say.
    func take(_ endpoint: String) async -> Bool { (try? await takeOrThrow(endpoint)) ?? false }

    func takeOrThrow(_ endpoint: String) async throws -> Bool {
        let rate = (perHour ?? (environment == .sandbox ? 0.1 : 1) * 50 * 3_600) / 3_600
        // Apple counts in real time, whatever clock the server's state runs on (as API tokens do).
        return try await storage.takeRequest(
            from: "\(bundleID):\(environment.rawValue):\(endpoint)", rate: rate, burst: max(1, rate * 60),
            now: wallClock())
    }

    /// The budget a request's path takes from (the names the reconciler takes with).
    static func endpoint(of path: String) -> String {
        if path.hasSuffix("/notifications/history") { return "notificationHistory" }
        if path.hasPrefix("/inApps/v1/subscriptions/") { return "subscriptionStatuses" }
        return "other"
    }
}
