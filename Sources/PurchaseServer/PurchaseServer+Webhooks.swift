public import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

/// Outbound webhooks: one delivery per event and receiver, written with the change; sent by a task that
/// sleeps until the next one is due, signed, retried on the configured schedule (RevenueCat's by default),
/// at least once (receivers dedupe on the event id).
extension PurchaseServer {
    /// Deliveries sent at once.
    static let webhookConcurrency = 8
    /// How long a claimed delivery is this process's: longer than a send may take, after which another
    /// process sends it if this one died. A claim takes only as many as are sent at once, so that each is sent
    /// (and its result recorded) within its lease: with more, the later ones waited their turn past it and
    /// another process sent them too.
    var deliveryLease: TimeInterval { configuration.webhookTimeoutSeconds * 2 + 10 }

    /// Events recorded for the subscriber's history but never sent as webhooks (docs/webhooks.md).
    static let eventsWithoutWebhooks: Set<ServerEventType> = [.retentionRequest, .appTransaction]

    func enqueueWebhooks(for event: ServerEvent, in store: any ServerStore) throws {
        guard !Self.eventsWithoutWebhooks.contains(event.type), let app = apps[event.bundleID.rawValue],
            !app.settings.webhooks.isEmpty
        else { return }
        let body = JSONWriter.string(
            .object(["api_version": .string("1.0"), "event": .object(webhookEvent(event, app: app.settings))]))
        for target in app.settings.webhooks {
            let suffix = Digest.hex(Digest.sha256(Array(target.url.utf8)).prefix(6))
            _ = try store.insert(
                WebhookDelivery(
                    id: "\(event.id)@\(suffix)", eventID: event.id, eventType: event.type.rawValue,
                    bundleID: event.bundleID.rawValue,
                    url: target.url, body: body, created: wallClock()))
        }
    }

    /// A webhook's `event`, in RevenueCat's field names, with the Apple notification beside.
    func webhookEvent(_ event: ServerEvent, app: AppSettings) -> JSONObject {
        func ms(_ date: Date?) -> JSONValue {
            date.map { .integer(EpochMilliseconds.milliseconds($0)) } ?? .null
        }
        var object: JSONObject = [
            "id": .string(event.id), "type": .string(event.type.rawValue), "app_id": .string(event.bundleID.rawValue),
            "event_timestamp_ms": ms(event.date), "app_user_id": event.appUserID.map(JSONValue.string) ?? .null,
            "store": .string("APP_STORE"),
        ]
        if let environment = event.environment { object["environment"] = .string(environment.rawValue.uppercased()) }
        if let product = event.productID {
            object["product_id"] = .string(product.rawValue)
            object["entitlement_ids"] = .array(
                app.entitlements.filter { $0.value.contains(product.rawValue) }.map(\.key).sorted().map(
                    JSONValue.string))
        }
        if let id = event.transactionID { object["transaction_id"] = .string(id.rawValue) }
        if let id = event.originalTransactionID { object["original_transaction_id"] = .string(id.rawValue) }
        if event.expiresDate != nil { object["expiration_at_ms"] = ms(event.expiresDate) }
        if let period = event.details["periodType"] { object["period_type"] = .string(period.uppercased()) }
        switch event.type {
        case .cancellation: object["cancel_reason"] = event.details["reason"].map(JSONValue.string) ?? .null
        case .expiration: object["expiration_reason"] = event.details["reason"].map(JSONValue.string) ?? .null
        case .productChange: object["new_product_id"] = event.details["newProductId"].map(JSONValue.string) ?? .null
        case .transfer:
            object["transferred_from"] = .array([event.details["transferredFrom"].map(JSONValue.string) ?? .null])
            object["transferred_to"] = .array([event.details["transferredTo"].map(JSONValue.string) ?? .null])
        case .billingIssue:
            object["grace_period_expiration_at_ms"] =
                event.details["gracePeriodExpiresDate"].flatMap { Int64($0) }.map(JSONValue.integer) ?? .null
        default: break
        }
        if let type = event.appleNotificationType { object["apple_notification_type"] = .string(type) }
        if let subtype = event.appleSubtype { object["apple_notification_subtype"] = .string(subtype) }
        object["source"] = .string(event.source.rawValue)
        return object
    }

    /// `Storekeeper-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
    public static func signature(body: String, secret: String, at date: Date) -> String {
        let stamp = String(Int64(date.timeIntervalSince1970.rounded(.down)))
        let mac = HMAC.sha256(key: Array(secret.utf8), message: Array((stamp + "." + body).utf8))
        return "t=\(stamp),v1=" + Digest.hex(mac)
    }

    /// Starts the task that sends due deliveries (idempotent).
    public func startDelivery(granularity: Duration = .seconds(1)) {
        worker.withLock { task in
            guard task == nil else { return }
            task = Task { [weak self] in
                while !Task.isCancelled {
                    guard let self else { return }
                    let sent = await self.deliverDue()
                    if sent == 0 { await self.sleepUntilWoken(atMost: granularity) }
                }
            }
        }
    }

    /// On storage other processes share: stops following their writes and gives back this process's lease,
    /// so that their writes no longer wait for it. Reads still work afterwards, asking the storage each time.
    /// Returns after `limit` at most (a stuck connection must not keep a process from stopping; its lease
    /// then ends by itself).
    public func leave(waitingUpTo limit: Duration = .seconds(5)) async {
        guard let follower else { return }
        final class Once: Sendable {
            let continuation = Mutex<CheckedContinuation<Void, Never>?>(nil)
            func finish() { continuation.withLock { $0.take() }?.resume() }
        }
        let once = Once()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            once.continuation.withLock { $0 = continuation }
            Task {
                await follower.leave()
                once.finish()
            }
            Task {
                try? await Task.sleep(for: limit)
                once.finish()
            }
        }
    }

    /// Stops the delivery and reconciliation tasks.
    public func stopDelivery() {
        worker.withLock { task in
            task?.cancel()
            task = nil
        }
        reconciler.withLock { task in
            task?.cancel()
            task = nil
        }
        wakeDelivery()
    }

    func wakeDelivery() {
        let waiting = wake.withLock { continuation -> CheckedContinuation<Void, Never>? in
            defer { continuation = nil }
            return continuation
        }
        waiting?.resume()
    }

    func sleepUntilWoken(atMost duration: Duration) async {
        let deadline = Task { [weak self] in
            try? await Task.sleep(for: duration)
            self?.wakeDelivery()
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let previous = wake.withLock { current -> CheckedContinuation<Void, Never>? in
                defer { current = continuation }
                return current
            }
            previous?.resume()
        }
        deadline.cancel()
    }

    /// Sends what is due now; answers how many were attempted.
    @discardableResult
    func deliverDue() async -> Int {
        let current = wallClock()
        let lease = current.addingTimeInterval(deliveryLease)
        let fresh: [WebhookDelivery]
        do {
            // A cheap look first; then a claim, so that no other process (or pass) sends the same ones.
            guard try await !storage.read({ try $0.dueDeliveries(until: current, limit: 1) }).isEmpty else { return 0 }
            fresh = try await storage.claimDueDeliveries(until: current, lease: lease, limit: Self.webhookConcurrency)
        } catch {
            logger.error("webhooks.claim-failed", ["error": String(describing: error)])
            return 0
        }
        guard !fresh.isEmpty else { return 0 }
        // A receiver reads the user back on a webhook: not before every process answering from memory has
        // dropped what the write behind it changed (the write's own acknowledgement may still be waiting).
        // Unacknowledged, the claimed ones wait for their lease to end and are sent then.
        if let follower {
            do { try await follower.acknowledge() } catch {
                logger.warning("webhooks.not-acknowledged", ["error": String(describing: error)])
                return 0
            }
        }
        var results: [(WebhookDelivery, Int?, String?)] = []
        await withTaskGroup(of: (WebhookDelivery, Int?, String?).self) { group in
            var next = 0
            func start() {
                guard next < fresh.count else { return }
                let delivery = fresh[next]
                next += 1
                group.addTask { await self.send(delivery) }
            }
            for _ in 0..<Self.webhookConcurrency { start() }
            while let result = await group.next() {
                results.append(result)
                start()
            }
        }
        let schedule = configuration.webhookRetrySchedule
        let recorded = wallClock()
        let attempted = results
        do {
            let lost = try await storage.write { store -> Int in
                var lost = 0
                for (delivery, status, error) in attempted {
                    var updated = delivery
                    updated.attempts.append(.init(date: recorded, status: status, error: error))
                    // Any 2xx is an acknowledgement (201, 202, 204 as well as 200); redirects are not followed.
                    if let status, (200..<300).contains(status) {
                        updated.state = .delivered
                        updated.nextAttempt = nil
                    } else if updated.attempts.count - 1 < schedule.count {
                        updated.nextAttempt = recorded.addingTimeInterval(schedule[updated.attempts.count - 1])
                    } else {
                        updated.state = .failed
                        updated.nextAttempt = nil
                    }
                    // Only while the claim is still this one's: past its lease another process may have sent it
                    // and recorded that (its record is kept).
                    if try !store.recordAttempt(updated, claimedUntil: lease) { lost += 1 }
                }
                return lost
            }
            if lost > 0 { logger.warning("webhooks.lease-lost", ["deliveries": String(lost)]) }
        } catch {
            logger.error("webhooks.record-failed", ["error": String(describing: error)])
        }
        for (delivery, status, _) in results where !(200..<300).contains(status ?? 0) {
            metrics.count("storekeeper_webhook_failures_total", ["type": delivery.eventType])
        }
        return results.count
    }

    func send(_ delivery: WebhookDelivery) async -> (WebhookDelivery, Int?, String?) {
        guard let target = apps[delivery.bundleID]?.settings.webhooks.first(where: { $0.url == delivery.url }) else {
            return (delivery, nil, "the receiver is no longer configured")
        }
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "application/json"),
            ("Storekeeper-Signature", Self.signature(body: delivery.body, secret: target.secret, at: wallClock())),
            ("Storekeeper-Event-Id", delivery.eventID),
        ]
        do {
            let timeout = Duration.milliseconds(Int64(configuration.webhookTimeoutSeconds * 1000))
            // Only the status counts: a receiver's long answer is cut, not held (nor a reason to fail).
            let client = HTTPClient(timeout: timeout, maxResponseBytes: 64 << 10, truncatesResponse: true)
            let response = try await client.send(
                "POST", delivery.url, headers: headers, body: Array(delivery.body.utf8))
            return (delivery, response.status, nil)
        } catch {
            return (delivery, nil, error.code.description)
        }
    }

    /// Every delivery after `position`, oldest first (`GET /v1/webhooks/deliveries`).
    public func deliveries(after position: Int64?, limit: Int) async throws -> [(
        position: Int64, delivery: WebhookDelivery
    )] {
        try await storage.read { try $0.deliveries(after: position, limit: limit) }
    }
}
