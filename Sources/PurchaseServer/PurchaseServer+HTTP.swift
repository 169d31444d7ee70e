import AppStoreReceipts
import AppStoreSignedData
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
    /// The routes; `secureCookies` when the server speaks HTTPS (the dashboard's cookie is then `Secure`).
    public func responder(logger: Logger? = nil, secureCookies: Bool = false) -> Responder {
        var router = Router()
        let login = makeDashboardLogin(secureCookies: secureCookies)
        router.use(AccessLogMiddleware())
        let server = self
        func handle(_ body: @escaping @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse) -> Handler {
            { request, context in
                server.metrics.count("storekeeper_http_requests_total", ["route": Self.routeName(request.path)])
                return try await body(request, context)
            }
        }
        // A browser opening the server's address finds the dashboard (which asks it to sign in).
        router.add(
            "GET", "/", inline: { _, _ in HTTPResponse(status: 303, headers: [("Location", "/dashboard")], body: []) })
        router.add("GET", "/healthz", inline: { _, _ in .json(.object(["status": .string("ok")])) })
        router.get("/metrics") { _, _ in
            let text = server.metrics.render(totals: server.totals(), gauges: await server.gauges())
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
                    // Shown for the apps this server has only: anyone can post here, and a path naming no app
                    // would otherwise put the poster's text (and crowd out real entries) on the dashboard.
                    if server.apps[bundleID] != nil {
                        server.notificationLog.record(
                            NotificationLogEntry(
                                received: server.wallClock(), bundleID: bundleID, outcome: "rejected", type: nil,
                                events: 0, error: error.message))
                    }
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
                return Self.answer(
                    .object([
                        "received": .bool(true), "duplicate": .bool(ingested.duplicate),
                        "events": .integer(Int64(ingested.events.count)),
                    ]))
            })
        // Retention Messaging's realtime request: signed by Apple like a notification, answered at once.
        router.post(
            "/v1/apple/retention/{bundle}",
            handle { request, context in
                let reply = try await server.answerRetention(
                    bundleID: try context.parameter("bundle"), body: request.body)
                guard let body = reply.body else { return HTTPResponse(status: 204) }
                return .json(.object(body))  // Apple's shape, as Apple reads it
            })
        router.limitBodies { _, path, _ in Self.bodyLimit(path) }
        router.use(ServerGuard(login: login))
        router.post(
            "/v1/transactions",
            handle { request, _ in
                let body = try RequestBody(request, allowed: ["bundleId", "appUserId", "signedTransaction"])
                let bundleID = try server.bundleID(try body.string("bundleId"))
                let caller = try server.authorizeApp(request, bundleID: bundleID)
                let user = try body.string("appUserId", required: true)!
                let signed = try body.string("signedTransaction", maxBytes: Self.appBodyLimit, required: true)!
                let posted = try await server.postTransaction(
                    bundleID: bundleID, appUserID: user, signedTransaction: signed)
                return Self.answer(.object(Self.render(posted, for: caller, asked: user, at: server.now())))
            })
        router.post(
            "/v1/receipts",
            handle { request, _ in
                let body = try RequestBody(request, allowed: ["bundleId", "appUserId", "receipt", "deviceId"])
                let bundleID = try server.bundleID(try body.string("bundleId"))
                let caller = try server.authorizeApp(request, bundleID: bundleID)
                let user = try body.string("appUserId", required: true)!
                guard
                    let receipt = try body.string("receipt", maxBytes: Self.receiptBodyLimit, required: true)
                        .flatMap({ Data(base64Encoded: $0) })
                else { throw PurchaseServerError.invalid("receipt must be base64") }
                let posted = try await server.postReceipt(
                    bundleID: bundleID, appUserID: user, receipt: Array(receipt),
                    deviceID: try body.string("deviceId", maxBytes: 36))
                return Self.answer(.object(Self.render(posted, for: caller, asked: user, at: server.now())))
            })
        router.post(
            "/v1/app-transactions",
            handle { request, _ in
                let body = try RequestBody(request, allowed: ["bundleId", "appUserId", "signedAppTransaction"])
                let bundleID = try server.bundleID(try body.string("bundleId"))
                _ = try server.authorizeApp(request, bundleID: bundleID)
                let user = try body.string("appUserId", required: true)!
                let signed = try body.string("signedAppTransaction", maxBytes: Self.appBodyLimit, required: true)!
                let posted = try await server.postAppTransaction(
                    bundleID: bundleID, appUserID: user, signedAppTransaction: signed)
                var object = Self.renderEntitlements(posted.view, asked: user, now: server.now())
                object["appTransaction"] = .object([
                    "appTransactionId": posted.appTransactionID.map(JSONValue.string) ?? .null,
                    "originalApplicationVersion": posted.originalApplicationVersion.map(JSONValue.string) ?? .null,
                    "originalPurchaseDate": Self.ms(posted.originalPurchaseDate),
                    "environment": .string(posted.environment.rawValue),
                ])
                return Self.answer(.object(object))
            })
        // The app's own read (its public key): the entitlements only, for the user it names.
        router.add(
            "GET", "/v1/entitlements/{user}",
            inline: { request, context in
                let bundleID = try server.bundleID(request.query["bundleId"])
                _ = try server.authorizeApp(request, bundleID: bundleID)
                guard
                    let body = try server.cachedAnswer(
                        .entitlements, bundleID: bundleID, appUserID: try context.parameter("user"))
                else { return nil }
                server.metrics.count(key: Self.requestCounters.entitlements)
                return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: body)
            },
            otherwise: handle { request, context in
                let bundleID = try server.bundleID(request.query["bundleId"])
                _ = try server.authorizeApp(request, bundleID: bundleID)
                let user = try context.parameter("user")
                do {
                    let body = try await server.answer(.entitlements, bundleID: bundleID, appUserID: user)
                    return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: body)
                } catch let error as PurchaseServerError where error.code == .notFound {
                    // A user the server has not heard of yet (a fresh install) has no entitlements: no error.
                    let view = SubscriberView(
                        appUserID: user, aliases: [], bundleID: bundleID, entitlements: [:], subscriptions: [],
                        purchases: [], balances: [:], flags: [])
                    return Self.answer(.object(Self.renderEntitlements(view, asked: user, now: server.now())))
                }
            })
        router.add(
            "GET", "/v1/subscribers/{user}",
            inline: { request, context in
                // From memory when the user's records are cached: answered on the server's thread.
                try server.authorizeSecret(request)
                guard
                    let body = try server.cachedAnswer(
                        .subscriber, bundleID: try server.bundleID(request.query["bundleId"]),
                        appUserID: try context.parameter("user"))
                else { return nil }
                server.metrics.count(key: Self.requestCounters.subscribers)
                return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: body)
            },
            otherwise: handle { request, context in
                try server.authorizeSecret(request)
                let bundleID = try server.bundleID(request.query["bundleId"])
                let body = try await server.answer(
                    .subscriber, bundleID: bundleID, appUserID: try context.parameter("user"))
                return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: body)
            })
        router.get(
            "/v1/subscribers/{user}/events",
            handle { request, context in
                try server.authorizeSecret(request)
                let (limit, after) = try Self.page(request)
                let events = try await server.events(
                    bundleID: try server.bundleID(request.query["bundleId"]), appUserID: try context.parameter("user"),
                    after: after, limit: limit)
                var object: JSONObject = ["events": .array(events.map { .object(Self.render($0.event)) })]
                object["nextCursor"] = events.count == limit ? .string(String(events.last!.position)) : .null
                return Self.answer(.object(object))
            })
        router.post(
            "/v1/subscribers/{user}/aliases",
            handle { request, context in
                try server.authorizeSecret(request)
                let body = try RequestBody(request, allowed: ["bundleId", "alias"])
                let alias = try body.string("alias", required: true)!
                return Self.answer(
                    .object(
                        Self.render(
                            try await server.alias(
                                bundleID: try server.bundleID(try body.string("bundleId") ?? request.query["bundleId"]),
                                appUserID: try context.parameter("user"), alias: alias))))
            })
        for action in ["grant", "revoke"] {
            router.post(
                "/v1/subscribers/{user}/entitlements/{name}/" + action,
                handle { request, context in
                    try server.authorizeSecret(request)
                    let body = try RequestBody(
                        request,
                        allowed: action == "revoke" ? ["bundleId"] : ["bundleId", "durationDays", "expiresDate"])
                    let bundleID = try server.bundleID(try body.string("bundleId") ?? request.query["bundleId"])
                    let user = try context.parameter("user")
                    let name = try context.parameter("name")
                    if action == "revoke" {
                        return Self.answer(
                            .object(
                                Self.render(
                                    try await server.revokeGrant(bundleID: bundleID, appUserID: user, entitlement: name)
                                )))
                    }
                    let days = try body.integer("durationDays", in: 1...36_500)
                    let until = try body.integer("expiresDate", in: EpochMilliseconds.range)
                    guard days == nil || until == nil else {
                        throw PurchaseServerError.invalid("give durationDays or expiresDate, not both")
                    }
                    var expires: Date?
                    if let days { expires = server.now().addingTimeInterval(Double(days) * 86_400) }
                    if let until { expires = EpochMilliseconds.date(until) }
                    return Self.answer(
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
                let (limit, after) = try Self.page(request)
                let list = try await server.deliveries(after: after, limit: limit)
                var object: JSONObject = [
                    "deliveries": .array(
                        list.map { item in
                            let delivery = item.delivery
                            return .object([
                                "id": .string(delivery.id), "eventId": .string(delivery.eventID),
                                "type": .string(delivery.eventType),
                                // Without credentials or a query: the receiver's URL may carry a token.
                                "url": .string(HTTPClient.printable(delivery.url)),
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
                return Self.answer(.object(object))
            })
        router.get(
            "/v1/metrics",
            handle { request, _ in
                try server.authorizeSecret(request)
                return Self.answer(
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
                return Self.answer(.object(Self.render(result, query: query)))
            })
        addDashboardRoutes(to: &router, login: login)
        return router.freeze(logger: logger ?? self.logger)
    }

    /// The request counters of the routes answered inline, their keys made once.
    static let requestCounters = (
        subscribers: Metrics.key("storekeeper_http_requests_total", ["route": "subscribers"]),
        entitlements: Metrics.key("storekeeper_http_requests_total", ["route": "entitlements"])
    )

    /// The counter keys a V2 notification counts, made once: a verified one, its type (a type this build does
    /// not know is counted as "other": a label per string sent would grow without end).
    static let notificationCounters = (
        verified: Metrics.key(
            "storekeeper_verifications_total", ["kind": "notification", "outcome": VerificationStatus.ok.rawValue]),
        types: Dictionary(
            NotificationType.known.map { ($0, Metrics.key("storekeeper_notifications_total", ["type": $0.rawValue])) },
            uniquingKeysWith: { first, _ in first }),
        other: Metrics.key("storekeeper_notifications_total", ["type": "other"])
    )

    /// The counter key of each event type this build knows, made once.
    static let eventCounters = Dictionary(
        ServerEventType.known.map { ($0, Metrics.key("storekeeper_events_total", ["type": $0.rawValue])) },
        uniquingKeysWith: { first, _ in first })

    static func routeName(_ path: String) -> String {
        if path.hasPrefix("/v1/notifications/") { return "notifications" }
        if path.hasPrefix("/v1/entitlements/") { return "entitlements" }
        if path.hasPrefix("/v1/subscribers/") {
            // Over the bytes: Foundation's `contains` on a String cost more than the rest of the request's metrics.
            return path.utf8.firstRange(of: "/entitlements/".utf8) != nil ? "grants" : "subscribers"
        }
        if path.hasPrefix("/dashboard") { return "dashboard" }
        return path.split(separator: "/").prefix(2).joined(separator: "/")
    }

    /// A V2 notification (~15 KB) and an app's signed transaction fit in 64 KiB; a receipt with a long
    /// purchase history in 256 KiB, and so a V1 notification, which carries the subscriber's receipt (on the
    /// same route as V2's); everything else the server takes (grants, aliases, the dashboard's forms) in 16 KiB.
    static let appBodyLimit = 64 << 10
    static let receiptBodyLimit = 256 << 10

    static func bodyLimit(_ path: String) -> Int {
        if path == "/v1/receipts" || path.hasPrefix("/v1/notifications/apple/") { return receiptBodyLimit }
        if path == "/v1/transactions" || path == "/v1/app-transactions" || path.hasPrefix("/v1/apple/retention/") {
            return appBodyLimit
        }
        return 16 << 10
    }

    /// The app a request names; with one app configured, that one by default.
    func bundleID(_ given: String?) throws -> String {
        if let given {
            guard given.utf8.count <= 255 else {
                throw PurchaseServerError.invalid("bundleId is longer than 255 bytes")
            }
            return given
        }
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

    /// Who called an app route: the app (its public key) or the developer's backend (the secret key).
    enum AppCaller { case app, backend }

    /// The app's public key (or the secret key).
    func authorizeApp(_ request: HTTPRequest, bundleID: String) throws -> AppCaller {
        guard let token = bearer(request) else {
            throw PurchaseServerError.unauthorized("this route needs Authorization: Bearer <the app's public key>")
        }
        if ConstantTime.equals(token, Array(configuration.secretKey.utf8)) {
            _ = try app(bundleID)
            return .backend
        }
        // Which apps this server serves is not told to a caller without one of their keys: an unknown bundle id
        // is a 401 like a wrong key, not a 404.
        guard let app = try? app(bundleID) else {
            throw PurchaseServerError.unauthorized("this route needs Authorization: Bearer <the app's public key>")
        }
        guard ConstantTime.equals(token, Array(app.settings.publicKey.utf8)) else {
            throw PurchaseServerError.unauthorized("this route needs Authorization: Bearer <the app's public key>")
        }
        return .app
    }
}
