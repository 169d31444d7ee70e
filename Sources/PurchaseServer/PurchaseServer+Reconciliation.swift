import AppStoreServerAPI
public import Foundation
import StoreModel
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

/// Reconciliation by polling, for the notifications that never arrive: Apple's notification history
/// (`onlyFailures`) since the last checkpoint is fed through the same verified, deduplicated path as a
/// notification; and every active subscription whose renewal date passed without news is asked for with Get
/// All Subscription Statuses. Needs the app's App Store Server API key.
extension PurchaseServer {
    /// What one pass found.
    public struct ReconciliationReport: Sendable, Hashable {
        /// Notifications from the history that the server had not received.
        public var notificationsRecovered = 0
        /// Subscriptions asked for because their renewal date passed without news.
        public var subscriptionsRefreshed = 0
        public var failures: [String] = []
    }

    /// How long after a renewal date a subscription without news is asked for.
    public static let overdueMargin: TimeInterval = 60
    /// How far back the first pass reads the history (Apple keeps 180 days).
    public static let firstHistoryWindow: TimeInterval = 86_400

    /// One pass over every app with an API key.
    public func reconcile() async -> ReconciliationReport {
        var report = ReconciliationReport()
        for app in apps.values.sorted(by: { $0.settings.bundleID < $1.settings.bundleID }) where !app.api.isEmpty {
            let bundleID = app.settings.bundleID
            for environment in app.settings.environments.sorted(by: { $0.rawValue < $1.rawValue }) {
                guard let client = app.api[environment] else { continue }
                let key = "notification-history:\(bundleID):\(environment.rawValue)"
                let current = now()
                do {
                    let stored = try await storage.read { try $0.checkpoint(key) }
                    var start =
                        stored.flatMap(Double.init).map(Date.init(timeIntervalSince1970:))
                        ?? current.addingTimeInterval(-Self.firstHistoryWindow)
                    start = max(start, current.addingTimeInterval(-179 * 86_400))
                    let pages = try await client.allNotificationHistory(
                        NotificationHistoryRequest(
                            startDate: start, endDate: current.addingTimeInterval(1), onlyFailures: true),
                        maxPages: 500)
                    for item in pages.flatMap(\.notificationHistory) {
                        guard let signed = item.signedPayload else { continue }
                        let body = JSONWriter.bytes(.object(["signedPayload": .string(signed)]))
                        if try await !ingestNotification(bundleID: bundleID, body: body).duplicate {
                            report.notificationsRecovered += 1
                        }
                    }
                    // The next pass starts a little before this one ended: an attempt failing late is seen.
                    let next = String(current.addingTimeInterval(-300).timeIntervalSince1970)
                    _ = try await storage.write { store in
                        try store.setCheckpoint(key, next)
                        return 0
                    }
                } catch {
                    report.failures.append("\(bundleID) \(environment.rawValue) history: \(error)")
                }
            }
            do {
                let overdue = try await storage.read {
                    try $0.overdueSubscriptions(
                        bundle: bundleID, before: self.now().addingTimeInterval(-Self.overdueMargin), limit: 200)
                }
                for subscription in overdue {
                    await refreshFromAPI(
                        app: app, originalTransactionID: subscription.originalTransactionID,
                        environment: subscription.environment)
                    report.subscriptionsRefreshed += 1
                }
            } catch {
                report.failures.append("\(bundleID) overdue: \(error)")
            }
        }
        metrics.count("storekeeper_reconciled_notifications_total", by: Double(report.notificationsRecovered))
        metrics.count("storekeeper_reconciled_subscriptions_total", by: Double(report.subscriptionsRefreshed))
        for failure in report.failures { logger.warning("reconcile.failed", ["reason": failure]) }
        return report
    }

    /// Starts polling every `interval` (idempotent; stopped with ``stopDelivery()``).
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
