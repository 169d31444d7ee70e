import AppStoreReceipts
import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperLogging
import SubscriptionLifecycle
import Synchronization

/// The App Store Server API's notification endpoints: notifications about the app itself (TEST,
/// RENEWAL_EXTENSION/SUMMARY) into the outbox, Request a Test Notification and its status, Get Notification
/// History.
extension ServerAPIService {
    /// Writes a notification about the app rather than a transaction (TEST, RENEWAL_EXTENSION/SUMMARY) into
    /// the outbox, one per configured URL; nil when no URL is configured for the environment, or its
    /// notifications are version 1 (which has neither type: shared/spec/notifications.md §2.3).
    func enqueueAppNotification(
        _ notice: Notice, scope: APIScope, container: String, content: JSONObject, in store: any EmulatorStore,
        now: Date
    ) throws -> String? {
        guard
            let settings = self.appStore.notificationSettings(
                bundleID: scope.bundleID, environment: scope.environment, now: now),
            settings.version == 2, !settings.urls.isEmpty
        else { return nil }
        var first: String?
        for url in settings.urls {
            let uuid = self.appStore.newNotificationUUID(at: now)
            var payload: JSONObject = ["notificationType": .string(notice.type.rawValue)]
            if let subtype = notice.subtype { payload["subtype"] = .string(subtype.rawValue) }
            payload["notificationUUID"] = .string(uuid)
            payload[container] = .object(content)
            payload["version"] = .string("2.0")
            payload["signedDate"] = AppStore.milliseconds(now)
            let signed = try self.appStore.sign(payload)
            try store.insert(
                OutboundNotification(
                    id: uuid, bundleID: BundleID(scope.bundleID), environment: scope.environment, version: 2, url: url,
                    body: OutboundNotification.v2Body(signedPayload: signed, signed: true), signedPayload: signed,
                    notice: notice, originalTransactionID: nil, created: now, retryDelays: settings.retryDelays,
                    retryClientErrors: settings.retryClientErrors, timeoutMilliseconds: settings.timeoutMilliseconds))
            try self.appStore.schedule(DueEvent(kind: .notificationAttempt, key: uuid, due: now), in: store)
            first = first ?? uuid
        }
        return first
    }

    /// Sends what the outbox has due now (after a write outside a request).
    func deliverDue() {
        jobs.start { [appStore] in _ = try? await appStore.runDue(maxEvents: appStore.maxEventsPerRequest) }
    }

    /// Request a Test Notification: a TEST notification to the environment's URL; its token.
    func apiRequestTestNotification(scope: APIScope) async throws -> String {
        let app = try apiApp(scope)
        let current = self.appStore.now
        var data: JSONObject = [
            "bundleId": .string(scope.bundleID), "environment": .string(scope.environment.rawValue),
        ]
        if scope.environment == .production { data["appAppleId"] = .integer(app.appAppleID) }
        let content = data
        let id = try await self.appStore.storage.write { store in
            try self.enqueueAppNotification(
                Notice(.test), scope: scope, container: "data", content: content, in: store, now: current)
        }
        guard let id else {
            let version = self.appStore.notificationSettings(
                bundleID: scope.bundleID, environment: scope.environment, now: current)?
                .version
            throw EmulatorError.api(
                .serverNotificationUrlNotFound,
                version == 1
                    ? "This environment's notifications are version 1, which has no test notification."
                    : "No server notification URL is configured for this environment.")
        }
        try await self.appStore.runDue(maxEvents: self.appStore.maxEventsPerRequest)
        return "\(id)_\(ReceiptDate.milliseconds(current))"
    }

    /// Get Test Notification Status.
    func apiTestNotificationStatus(_ token: String, scope: APIScope) async throws -> OutboundNotification {
        let parts = token.split(separator: "_", maxSplits: 1)
        guard parts.count == 2, UUID(uuidString: String(parts[0])) != nil, Int64(parts[1]) != nil else {
            throw EmulatorError.api(.invalidTestNotificationToken, "Invalid test notification token.")
        }
        let found = try await self.appStore.storage.read { try $0.notification(String(parts[0]).lowercased()) }
        guard let found, found.notice.type == .test, found.bundleID.rawValue == scope.bundleID,
            found.environment == scope.environment
        else { throw EmulatorError.api(.testNotificationNotFound, "Test notification not found.") }
        return found
    }

    /// A page of the app's V2 notifications in the scope's environment, oldest first.
    func apiNotificationHistory(_ query: NotificationHistoryQuery, paginationToken: String?, scope: APIScope)
        async throws -> (notifications: [OutboundNotification], token: String, hasMore: Bool)
    {
        let start = try Self.position(
            of: paginationToken, prefix: "p", invalid: .invalidPaginationToken, "Invalid pagination token.")
        try await self.appStore.catchUp()
        return try await self.appStore.storage.read { store in
            // `transactionId` names a customer (any transaction of theirs, Apple's "limit the notification history
            // request to this one customer"): the notifications of every purchase the account made in the app.
            var originals: Set<TransactionID>?
            if let id = query.transactionID {
                guard let stored = try store.transaction(TransactionID(id)),
                    stored.transaction.bundleID.rawValue == scope.bundleID
                else { return ([], "p\(start ?? 0)", false) }
                originals = try store.originalIDs(account: stored.accountID, bundle: stored.transaction.bundleID)
            }
            let scan = try Self.scanPage(from: start) { position, limit in
                try store.notifications(
                    bundle: BundleID(scope.bundleID), environment: scope.environment, from: query.start,
                    to: query.end, after: position, limit: limit
                ).map { ($0.position, $0.notification) }
            } accepts: { notification in
                notification.version == 2 && notification.signedPayload != nil
                    && (query.type == nil || notification.notice.type == query.type)
                    && (query.subtype == nil || notification.notice.subtype == query.subtype)
                    && Self.isOf(notification, customer: originals)
                    && (!query.onlyFailures || notification.state != .delivered)
            }
            return (scan.rows, "p\(scan.position ?? 0)", scan.hasMore)
        }
    }

    /// Whether `notification` is about one of the customer's purchases (their original transactions; nil:
    /// any notification).
    static func isOf(_ notification: OutboundNotification, customer originals: Set<TransactionID>?) -> Bool {
        guard let originals else { return true }
        return notification.originalTransactionID.map(originals.contains) ?? false
    }
}
