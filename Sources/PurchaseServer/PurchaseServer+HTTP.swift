import Foundation
import StoreModel
import StorekeeperCrypto
public import StorekeeperHTTP
import StorekeeperJSON
public import StorekeeperLogging

/// The purchase server's HTTP API: the app's inputs (public key), Apple's notifications (verified by
/// signature), the developer's queries and grants (secret key), health and metrics. Errors are
/// `{"error": {"code", "message"}}`.
extension PurchaseServer {
    public func responder(logger: Logger? = nil) -> Responder {
        var router = Router()
        router.use(AccessLogMiddleware())
        let server = self
        func handle(_ body: @escaping @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse) -> Handler {
            { request, context in
                do {
                    server.metrics.count("storekeeper_http_requests_total", ["route": Self.routeName(request.path)])
                    return try await body(request, context)
                } catch let error as PurchaseServerError {
                    throw HTTPError(status: error.status, code: error.code.rawValue, message: error.message)
                }
            }
        }
        router.add("GET", "/healthz", inline: { _, _ in .json(.object(["status": .string("ok")])) })
        router.get("/metrics") { _, _ in
            let text = server.metrics.render(gauges: await server.gauges())
            return HTTPResponse(
                status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")], body: Array(text.utf8))
        }
        router.post(
            "/v1/notifications/apple/{bundle}",
            handle { request, context in
                let bundleID = try context.parameter("bundle")
                let ingested: Ingested
                do {
                    ingested = try await server.ingestNotification(bundleID: bundleID, body: request.body)
                } catch let error as PurchaseServerError {
                    server.notificationLog.record(
                        NotificationLogEntry(
                            received: server.wallClock(), bundleID: bundleID, outcome: "rejected", type: nil, events: 0,
                            error: error.message))
                    throw error
                }
                let type = ingested.events.lazy.compactMap { event in
                    event.appleNotificationType.map { type in event.appleSubtype.map { "\(type) / \($0)" } ?? type }
                }.first
                server.notificationLog.record(
                    NotificationLogEntry(
                        received: server.wallClock(), bundleID: bundleID,
                        outcome: ingested.duplicate ? "duplicate" : "stored", type: type, events: ingested.events.count,
                        error: nil))
                return .json(
                    .object([
                        "received": .bool(true), "duplicate": .bool(ingested.duplicate),
                        "events": .integer(Int64(ingested.events.count)),
                    ]))
            })
        router.post(
            "/v1/transactions",
            handle { request, _ in
                let body = try Self.object(request)
                let bundleID = try server.bundleID(body["bundleId"]?.stringValue)
                try server.authorizeApp(request, bundleID: bundleID)
                guard let user = body["appUserId"]?.stringValue, let signed = body["signedTransaction"]?.stringValue
                else { throw PurchaseServerError.invalid("appUserId and signedTransaction are required") }
                return .json(
                    .object(
                        Self.render(
                            try await server.ingestTransaction(
                                bundleID: bundleID, appUserID: user, signedTransaction: signed)
                        )))
            })
        router.post(
            "/v1/receipts",
            handle { request, _ in
                let body = try Self.object(request)
                let bundleID = try server.bundleID(body["bundleId"]?.stringValue)
                try server.authorizeApp(request, bundleID: bundleID)
                guard let user = body["appUserId"]?.stringValue,
                    let receipt = body["receipt"]?.stringValue.flatMap({ Data(base64Encoded: $0) })
                else { throw PurchaseServerError.invalid("appUserId and receipt (base64) are required") }
                return .json(
                    .object(
                        Self.render(
                            try await server.ingestReceipt(
                                bundleID: bundleID, appUserID: user, receipt: Array(receipt),
                                deviceID: body["deviceId"]?.stringValue))))
            })
        router.add(
            "GET", "/v1/subscribers/{user}",
            inline: { request, context in
                // From memory when the user's records are cached: answered on the server's thread.
                do {
                    try server.authorizeSecret(request)
                    guard
                        let view = try server.cachedSubscriber(
                            bundleID: try server.bundleID(request.query["bundleId"]),
                            appUserID: try context.parameter("user"))
                    else { return nil }
                    server.metrics.count("storekeeper_http_requests_total", ["route": "subscribers"])
                    return .json(.object(Self.render(view)))
                } catch let error as PurchaseServerError {
                    throw HTTPError(status: error.status, code: error.code.rawValue, message: error.message)
                }
            },
            otherwise: handle { request, context in
                try server.authorizeSecret(request)
                return .json(
                    .object(
                        Self.render(
                            try await server.subscriber(
                                bundleID: try server.bundleID(request.query["bundleId"]),
                                appUserID: try context.parameter("user")))))
            })
        router.get(
            "/v1/subscribers/{user}/events",
            handle { request, context in
                try server.authorizeSecret(request)
                let limit = min(max(Int(request.query["limit"] ?? "") ?? 50, 1), 500)
                let after = request.query["cursor"].flatMap { Int64($0) }
                let events = try await server.events(
                    bundleID: try server.bundleID(request.query["bundleId"]), appUserID: try context.parameter("user"),
                    after: after, limit: limit)
                var object: JSONObject = ["events": .array(events.map { .object(Self.render($0.event)) })]
                object["nextCursor"] = events.count == limit ? .string(String(events.last!.position)) : .null
                return .json(.object(object))
            })
        router.post(
            "/v1/subscribers/{user}/aliases",
            handle { request, context in
                try server.authorizeSecret(request)
                let body = try Self.object(request)
                guard let alias = body["alias"]?.stringValue else {
                    throw PurchaseServerError.invalid("alias is required (the other id of this user)")
                }
                return .json(
                    .object(
                        Self.render(
                            try await server.alias(
                                bundleID: try server.bundleID(
                                    body["bundleId"]?.stringValue ?? request.query["bundleId"]),
                                appUserID: try context.parameter("user"), alias: alias))))
            })
        for action in ["grant", "revoke"] {
            router.post(
                "/v1/subscribers/{user}/entitlements/{name}/" + action,
                handle { request, context in
                    try server.authorizeSecret(request)
                    let body = request.body.isEmpty ? JSONObject() : try Self.object(request)
                    let bundleID = try server.bundleID(body["bundleId"]?.stringValue ?? request.query["bundleId"])
                    let user = try context.parameter("user")
                    let name = try context.parameter("name")
                    if action == "revoke" {
                        return .json(
                            .object(
                                Self.render(
                                    try await server.revokeGrant(bundleID: bundleID, appUserID: user, entitlement: name)
                                )))
                    }
                    var expires: Date?
                    if let days = body["durationDays"]?.int64Value {
                        guard (1...36_500).contains(days) else {
                            throw PurchaseServerError.invalid("durationDays must be 1 to 36500")
                        }
                        expires = server.now().addingTimeInterval(Double(days) * 86_400)
                    } else if let ms = body["expiresDate"]?.doubleValue {
                        expires = Date(timeIntervalSince1970: ms / 1000)
                    }
                    return .json(
                        .object(
                            Self.render(
                                try await server.grant(
                                    bundleID: bundleID, appUserID: user, entitlement: name, expiresDate: expires))))
                })
        }
        router.get(
            "/v1/webhooks/deliveries",
            handle { request, _ in
                try server.authorizeSecret(request)
                let limit = min(max(Int(request.query["limit"] ?? "") ?? 50, 1), 500)
                let list = try await server.deliveries(
                    after: request.query["cursor"].flatMap { Int64($0) }, limit: limit)
                var object: JSONObject = [
                    "deliveries": .array(
                        list.map { item in
                            let delivery = item.delivery
                            return .object([
                                "id": .string(delivery.id), "eventId": .string(delivery.eventID),
                                "type": .string(delivery.eventType), "url": .string(delivery.url),
                                "state": .string(delivery.state.rawValue),
                                "attempts": .array(
                                    delivery.attempts.map { attempt in
                                        var entry: JSONObject = ["date": Self.ms(attempt.date)]
                                        entry["status"] = attempt.status.map { .integer(Int64($0)) } ?? .null
                                        if let error = attempt.error { entry["error"] = .string(error) }
                                        return .object(entry)
                                    }),
                                "nextAttempt": delivery.nextAttempt.map(Self.ms) ?? .null,
                            ])
                        })
                ]
                object["nextCursor"] = list.count == limit ? .string(String(list.last!.position)) : .null
                return .json(.object(object))
            })
        router.get(
            "/v1/metrics",
            handle { request, _ in
                try server.authorizeSecret(request)
                return .json(
                    .object([
                        "charts": .array(SubscriptionCharts.Chart.allCases.map { .string($0.rawValue) }),
                        "resolutions": .array(SubscriptionCharts.Resolution.allCases.map { .string($0.rawValue) }),
                    ]))
            })
        router.get(
            "/v1/metrics/{chart}",
            handle { request, context in
                try server.authorizeSecret(request)
                let name = try context.parameter("chart")
                guard let chart = SubscriptionCharts.Chart(rawValue: name) else {
                    throw PurchaseServerError.notFound(
                        "no chart \(name) (charts: \(SubscriptionCharts.Chart.allCases.map(\.rawValue).joined(separator: ", ")))"
                    )
                }
                let query = try server.chartQuery { request.query[$0] }
                let result = try await server.charts([chart], query)[0]
                return .json(.object(Self.render(result, query: query)))
            })
        addDashboardRoutes(to: &router)
        return router.freeze(logger: logger ?? self.logger)
    }

    static func routeName(_ path: String) -> String {
        if path.hasPrefix("/v1/notifications/") { return "notifications" }
        if path.hasPrefix("/v1/subscribers/") { return path.contains("/entitlements/") ? "grants" : "subscribers" }
        if path.hasPrefix("/dashboard") { return "dashboard" }
        return path.split(separator: "/").prefix(2).joined(separator: "/")
    }

    static func object(_ request: HTTPRequest) throws -> JSONObject {
        guard let object = (try? JSONParser.parse(request.body))?.objectValue else {
            throw PurchaseServerError.invalid("the body is not a JSON object")
        }
        return object
    }

    /// The app a request names; with one app configured, that one by default.
    func bundleID(_ given: String?) throws -> String {
        if let given { return given }
        guard configuration.apps.count == 1, let only = configuration.apps.first else {
            throw PurchaseServerError.invalid("bundleId is required")
        }
        return only.bundleID
    }

    func bearer(_ request: HTTPRequest) -> [UInt8]? {
        guard let header = request.header("Authorization"), header.hasPrefix("Bearer ") else { return nil }
        return Array(header.utf8.dropFirst(7))
    }

    func authorizeSecret(_ request: HTTPRequest) throws {
        guard let token = bearer(request), ConstantTime.equals(token, Array(configuration.secretKey.utf8)) else {
            throw PurchaseServerError.unauthorized("this route needs Authorization: Bearer <secret key>")
        }
    }

    /// The app's public key (or the secret key).
    func authorizeApp(_ request: HTTPRequest, bundleID: String) throws {
        let app = try app(bundleID)
        guard let token = bearer(request),
            ConstantTime.equals(token, Array(app.settings.publicKey.utf8))
                || ConstantTime.equals(token, Array(configuration.secretKey.utf8))
        else { throw PurchaseServerError.unauthorized("this route needs Authorization: Bearer <the app's public key>") }
    }

    static func ms(_ date: Date) -> JSONValue { .integer(Int64((date.timeIntervalSince1970 * 1000).rounded(.down))) }
    static func ms(_ date: Date?) -> JSONValue { date.map(ms) ?? .null }

    static func render(_ view: SubscriberView) -> JSONObject {
        var entitlements = JSONObject()
        for (name, entitlement) in view.entitlements.sorted(by: { $0.key < $1.key }) {
            entitlements[name] = .object([
                "active": .bool(entitlement.active), "productId": entitlement.productID.map(JSONValue.string) ?? .null,
                "expiresDate": ms(entitlement.expiresDate), "willRenew": .bool(entitlement.willRenew),
                "periodType": .string(entitlement.periodType), "inGracePeriod": .bool(entitlement.inGracePeriod),
                "inBillingRetry": .bool(entitlement.inBillingRetry), "source": .string(entitlement.source),
            ])
        }
        var subscriptions = JSONObject()
        for subscription in view.subscriptions {
            subscriptions[subscription.originalTransactionID] = .object([
                "productId": .string(subscription.productID), "status": .integer(subscription.status),
                "expiresDate": ms(subscription.expiresDate), "autoRenewStatus": .bool(subscription.autoRenewStatus),
                "autoRenewProductId": subscription.autoRenewProductID.map(JSONValue.string) ?? .null,
                "gracePeriodExpiresDate": ms(subscription.gracePeriodExpiresDate),
                "expirationIntent": subscription.expirationIntent.map(JSONValue.integer) ?? .null,
                "environment": .string(subscription.environment.rawValue),
                "ownershipType": .string(subscription.ownership.rawValue),
                "revocationDate": ms(subscription.revocationDate),
                "revocationReason": subscription.revocationReason.map(JSONValue.integer) ?? .null,
            ])
        }
        var balances = JSONObject()
        for (product, balance) in view.balances.sorted(by: { $0.key < $1.key }) {
            balances[product] = .integer(Int64(balance))
        }
        return [
            "appUserId": .string(view.appUserID), "aliases": .array(view.aliases.map(JSONValue.string)),
            "bundleId": .string(view.bundleID),
            "entitlements": .object(entitlements),
            "subscriptions": .object(subscriptions),
            "purchases": .array(
                view.purchases.map { purchase in
                    .object([
                        "transactionId": .string(purchase.transactionID), "productId": .string(purchase.productID),
                        "type": .string(purchase.kind.rawValue), "purchaseDate": ms(purchase.purchaseDate),
                        "quantity": .integer(Int64(purchase.quantity)),
                        "revoked": .bool(purchase.revocationDate != nil),
                        "expiresDate": ms(purchase.expiresDate), "revocationDate": ms(purchase.revocationDate),
                        "originalTransactionId": .string(purchase.originalTransactionID),
                    ])
                }),
            "balances": .object(balances), "flags": .array(view.flags.map(JSONValue.string)),
        ]
    }

    static func render(_ event: ServerEvent) -> JSONObject {
        var object: JSONObject = [
            "id": .string(event.id), "type": .string(event.type), "date": ms(event.date),
            "source": .string(event.source),
        ]
        if let product = event.productID { object["productId"] = .string(product) }
        if let id = event.transactionID { object["transactionId"] = .string(id) }
        if let id = event.originalTransactionID { object["originalTransactionId"] = .string(id) }
        if let environment = event.environment { object["environment"] = .string(environment.rawValue) }
        if let type = event.appleNotificationType { object["appleNotificationType"] = .string(type) }
        if let subtype = event.appleSubtype { object["appleSubtype"] = .string(subtype) }
        if !event.details.isEmpty {
            var details = JSONObject()
            for (key, value) in event.details.sorted(by: { $0.key < $1.key }) { details[key] = .string(value) }
            object["details"] = .object(details)
        }
        return object
    }
}
