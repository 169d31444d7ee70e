import AppStoreServerAPI
import Foundation
import StoreModel
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

/// The App Store Server API at Apple's paths — production under `/inApps`, the sandbox under
/// `/sandbox/inApps` (or any path on a host whose name starts with `sandbox.` or has `storekit-sandbox`) —
/// with Apple's bearer tokens (401 without a body otherwise), rate limits when switched on, and errors as
/// `{"errorCode", "errorMessage"}`; and the control routes for keys, faults and rate limits.
extension ServerAPIService {
    typealias APIHandler = @Sendable (HTTPRequest, RequestContext, APIScope) async throws -> HTTPResponse

    func addServerAPIRoutes(
        to router: inout Router, base: String,
        guarded: (@escaping @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse) -> Handler
    ) {
        let store = self
        let routes = serverAPIRoutes() + retentionMessagingRoutes()
        for (prefix, sandboxPath) in [("/inApps", false), ("/sandbox/inApps", true)] {
            router.renderErrors(under: prefix, with: .apple)
            for (method, path, endpoint, handler) in routes {
                router.add(method, prefix + path) { request, context in
                    try await store.answerAPI(
                        request, context, sandboxPath: sandboxPath, endpoint: endpoint, route: method + " " + path,
                        handler: handler)
                }
            }
            // Apple's libraries of 2023 (the Python library's first releases among them) post mass extensions
            // with a trailing slash: that spelling is answered as the route's.
            router.alias(prefix + "/v1/subscriptions/extend/mass/", to: prefix + "/v1/subscriptions/extend/mass")
        }
        addServerAPIControlRoutes(to: &router, base: base, guarded: guarded)
    }

    /// Checks the token and the rate limit, runs the endpoint, and turns its errors into Apple's.
    func answerAPI(
        _ request: HTTPRequest, _ context: RequestContext, sandboxPath: Bool, endpoint: APIEndpointClass,
        route: String, handler: APIHandler
    ) async throws -> HTTPResponse {
        let host = request.header("Host")?.lowercased() ?? ""
        let environment: Environment =
            sandboxPath || host.hasPrefix("sandbox.") || host.contains("storekit-sandbox") ? .sandbox : .production
        let claims: APITokenClaims
        switch state.verifier.verify(authorization: request.header("Authorization"), now: appStore.realNow()) {
        case .success(let valid): claims = valid
        case .failure(let rejection):
            context.logger.info("server-api.unauthorized", ["reason": rejection.reason])
            return HTTPResponse(status: 401)
        }
        let scope = APIScope(bundleID: claims.bundleID, environment: environment)
        let real = appStore.realNow()
        if let next = state.rateLimits.take(
            bundleID: scope.bundleID, environment: environment, endpoint: endpoint, route: route, now: real)
        {
            throw HTTPError(
                status: 429, code: String(APIErrorCode.rateLimitExceeded.rawValue), message: "Rate limit exceeded.",
                headers: ["Retry-After": String(EpochMilliseconds.milliseconds(next, roundingUp: true))])
        }
        // Errors are rendered in Apple's shape under the prefix (HTTPErrorRenderer.apple: Apple's numeric code,
        // else the general one of the status).
        try await appStore.catchUp()
        return try await handler(request, context, scope)
    }

    /// A request's JSON object body (empty for none), or Apple's general error.
    static func jsonBody(_ request: HTTPRequest) throws -> JSONObject {
        guard !request.body.isEmpty else { return [:] }
        guard let object = (try? JSONParser.parse(request.body))?.objectValue else {
            throw EmulatorError.api(.generalBadRequest, "The request body is not a JSON object.")
        }
        return object
    }

    /// Every endpoint: method, path under the prefix, rate-limit class and handler.
    func serverAPIRoutes() -> [(String, String, APIEndpointClass, APIHandler)] {
        let store = self
        @Sendable func body(_ request: HTTPRequest) throws -> JSONObject { try Self.jsonBody(request) }
        @Sendable func appleID(_ scope: APIScope) -> JSONValue {
            .integer(store.appStore.apps[scope.bundleID]?.appAppleID ?? 0)
        }
        @Sendable func history(version: Int) -> APIHandler {
            { request, context, scope in
                var filter = try Self.historyFilter(request.query)
                filter.excludeFinishedConsumables = version == 1
                let descending = try Self.sortDescending(request.query)
                let page = try await store.apiHistory(
                    try context.parameter("id"), scope: scope, filter: filter, descending: descending,
                    revision: request.query["revision"])
                return .json(
                    .object([
                        "revision": .string(page.revision), "hasMore": .bool(page.hasMore),
                        "bundleId": .string(scope.bundleID), "appAppleId": appleID(scope),
                        "environment": .string(scope.environment.rawValue),
                        "signedTransactions": .array(page.signedTransactions.map(JSONValue.string)),
                    ]))
            }
        }
        return [
            (
                "GET", "/v1/transactions/{id}", .transactionInfo,
                { _, context, scope in
                    .json(
                        .object([
                            "signedTransactionInfo": .string(
                                try await store.apiTransactionInfo(try context.parameter("id"), scope: scope))
                        ]))
                }
            ),
            (
                "POST", "/v1/transactions/{id}/finish", .finishTransaction,
                { _, context, scope in
                    try await store.apiFinishTransaction(try context.parameter("id"), scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            ("GET", "/v1/history/{id}", .transactionHistory, history(version: 1)),
            ("GET", "/v2/history/{id}", .transactionHistory, history(version: 2)),
            (
                "GET", "/v1/subscriptions/{id}", .subscriptionStatuses,
                { request, context, scope in
                    var statuses: Set<Int64> = []
                    for value in request.query.values("status") {
                        guard let status = Int64(value), (1...5).contains(status) else {
                            throw EmulatorError.api(.invalidStatus, "Invalid status.")
                        }
                        statuses.insert(status)
                    }
                    let items = try await store.apiSubscriptionStatuses(
                        try context.parameter("id"), scope: scope, statuses: statuses)
                    var groups: [String: [JSONValue]] = [:]
                    var order: [String] = []
                    for item in items {
                        if groups[item.groupID] == nil { order.append(item.groupID) }
                        groups[item.groupID, default: []].append(
                            .object([
                                "status": .integer(item.status.rawValue),
                                "originalTransactionId": .string(item.originalTransactionID),
                                "signedTransactionInfo": .string(item.signedTransactionInfo),
                                "signedRenewalInfo": .string(item.signedRenewalInfo),
                            ]))
                    }
                    return .json(
                        .object([
                            "environment": .string(scope.environment.rawValue), "bundleId": .string(scope.bundleID),
                            "appAppleId": appleID(scope),
                            "data": .array(
                                order.map {
                                    .object([
                                        "subscriptionGroupIdentifier": .string($0),
                                        "lastTransactions": .array(groups[$0] ?? []),
                                    ])
                                }),
                        ]))
                }
            ),
            (
                "GET", "/v2/refund/lookup/{id}", .refundHistory,
                { request, context, scope in
                    var filter = HistoryFilter()
                    filter.refundsOnly = true
                    let page = try await store.apiHistory(
                        try context.parameter("id"), scope: scope, filter: filter, descending: false,
                        revision: request.query["revision"])
                    return .json(
                        .object([
                            "signedTransactions": .array(page.signedTransactions.map(JSONValue.string)),
                            "revision": .string(page.revision), "hasMore": .bool(page.hasMore),
                        ]))
                }
            ),
            (
                "GET", "/v1/refund/lookup/{id}", .refundHistory,
                { _, context, scope in
                    // Deprecated v1: the 50 refunded transactions refunded last, in one answer without paging.
                    var filter = HistoryFilter()
                    filter.refundsOnly = true
                    let id = try context.parameter("id")
                    var signed: [String] = []
                    var revision: String?
                    // Pages of at most the rest of the 50, so that none is signed only to be dropped; at most
                    // ``refundLookupScans`` pages (each looks at 5,000 rows at most), so that one request of a
                    // customer with a long history and few refunds does not read all of it.
                    for _ in 0..<ServerAPIService.refundLookupScans where signed.count < 50 {
                        let page = try await store.apiHistory(
                            id, scope: scope, filter: filter, descending: true, revision: revision,
                            size: min(50 - signed.count, ServerAPIService.historyPageSize))
                        signed += page.signedTransactions
                        guard page.hasMore else { break }
                        revision = page.revision
                    }
                    return .json(.object(["signedTransactions": .array(signed.map(JSONValue.string))]))
                }
            ),
            (
                "GET", "/v1/lookup/{order}", .orderLookup,
                { _, context, scope in
                    let (status, signed) = try await store.apiLookUpOrder(try context.parameter("order"), scope: scope)
                    // An invalid order (status 1) has no signedTransactions member, as Apple's answer has none.
                    var answer: JSONObject = ["status": .integer(Int64(status))]
                    if status == 0 { answer["signedTransactions"] = .array(signed.map(JSONValue.string)) }
                    return .json(.object(answer))
                }
            ),
            (
                "PUT", "/v1/subscriptions/extend/{id}", .extend,
                { request, context, scope in
                    let record = try await store.apiExtend(
                        originalTransactionID: try context.parameter("id"),
                        request: try ExtensionRequest(json: body(request)),
                        scope: scope)
                    return .json(
                        .object([
                            "originalTransactionId": .string(try context.parameter("id")),
                            "webOrderLineItemId": .string(record.webOrderLineItemID), "success": .bool(true),
                            "effectiveDate": AppStore.milliseconds(record.effectiveDate),
                        ]))
                }
            ),
            (
                "POST", "/v1/subscriptions/extend/mass", .massExtend,
                { request, _, scope in
                    .json(
                        .object([
                            "requestIdentifier": .string(
                                try await store.apiMassExtend(MassExtensionRequest(json: body(request)), scope: scope))
                        ]))
                }
            ),
            (
                "GET", "/v1/subscriptions/extend/mass/{product}/{request}", .massExtendStatus,
                { _, context, scope in
                    let progress = try await store.apiMassExtensionStatus(
                        productID: try context.parameter("product"),
                        requestIdentifier: try context.parameter("request"),
                        scope: scope)
                    var object: JSONObject = [
                        "requestIdentifier": .string(progress.requestIdentifier), "complete": .bool(progress.complete),
                        "succeededCount": .integer(progress.succeeded), "failedCount": .integer(progress.failed),
                    ]
                    if let date = progress.completeDate { object["completeDate"] = AppStore.milliseconds(date) }
                    return .json(.object(object))
                }
            ),
            (
                "POST", "/v1/notifications/test", .testNotification,
                { _, _, scope in
                    .json(
                        .object([
                            "testNotificationToken": .string(try await store.apiRequestTestNotification(scope: scope))
                        ]))
                }
            ),
            (
                "GET", "/v1/notifications/test/{token}", .testNotificationStatus,
                { _, context, scope in
                    let notification = try await store.apiTestNotificationStatus(
                        try context.parameter("token"), scope: scope)
                    return .json(.object(Self.renderHistoryItem(notification)))
                }
            ),
            (
                "POST", "/v1/notifications/history", .notificationHistory,
                { request, _, scope in
                    let query = try NotificationHistoryQuery(
                        json: body(request), now: store.appStore.now, environment: scope.environment)
                    let page = try await store.apiNotificationHistory(
                        query, paginationToken: request.query["paginationToken"], scope: scope)
                    return .json(
                        .object([
                            "paginationToken": .string(page.token), "hasMore": .bool(page.hasMore),
                            "notificationHistory": .array(
                                page.notifications.map { .object(Self.renderHistoryItem($0)) }),
                        ]))
                }
            ),
            (
                "PUT", "/v2/transactions/consumption/{id}", .consumption,
                { request, context, scope in
                    try await store.apiConsumption(
                        try context.parameter("id"), ConsumptionInformation(json: body(request), version: 2),
                        scope: scope)
                    return HTTPResponse(status: 202)
                }
            ),
            (
                "PUT", "/v1/transactions/consumption/{id}", .consumption,
                { request, context, scope in
                    try await store.apiConsumption(
                        try context.parameter("id"), ConsumptionInformation(json: body(request), version: 1),
                        scope: scope)
                    return HTTPResponse(status: 202)
                }
            ),
            (
                "PUT", "/v1/transactions/{id}/appAccountToken", .appAccountToken,
                { request, context, scope in
                    try await store.apiSetAppAccountToken(
                        originalTransactionID: try context.parameter("id"),
                        token: AppAccountTokenRequest.token(json: body(request)), scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "GET", "/v1/transactions/appTransactions/{id}", .appTransaction,
                { _, context, scope in
                    .json(
                        .object([
                            "signedAppTransactionInfo": .string(
                                try await store.apiAppTransaction(try context.parameter("id"), scope: scope))
                        ]))
                }
            ),
        ]
    }

    static func renderHistoryItem(_ notification: OutboundNotification) -> JSONObject {
        [
            "signedPayload": .string(notification.signedPayload ?? ""),
            "sendAttempts": .array(
                notification.attempts.map {
                    .object([
                        "attemptDate": AppStore.milliseconds($0.date),
                        "sendAttemptResult": .string($0.result.rawValue),
                    ])
                }),
        ]
    }

    /// Get Transaction History's query, checked with Apple's error codes.
    static func historyFilter(_ query: HTTPQuery) throws -> HistoryFilter {
        var filter = HistoryFilter()
        func milliseconds(_ name: String, _ code: APIErrorCode) throws -> Date? {
            guard let text = query[name] else { return nil }
            guard let value = Int64(text), value >= 0 else { throw EmulatorError.api(code, "Invalid \(name).") }
            guard let date = EpochMilliseconds.date(value) else { throw EmulatorError.api(code, "Invalid \(name).") }
            return date
        }
        filter.start = try milliseconds("startDate", .invalidStartDate)
        filter.end = try milliseconds("endDate", .invalidEndDate)
        // Apple's 4000013: an end not after the start (equal ones included).
        if let start = filter.start, let end = filter.end, start >= end {
            throw EmulatorError.api(.startDateAfterEndDate, "Start date after end date.")
        }
        for id in query.values("productId") {
            guard !id.isEmpty, id.utf8.count <= 512 else {
                throw EmulatorError.api(.invalidProductId, "Invalid product id.")
            }
            filter.productIDs.insert(id)
        }
        let kinds: [String: ProductKind] = [
            "AUTO_RENEWABLE": .autoRenewable, "NON_RENEWABLE": .nonRenewing, "CONSUMABLE": .consumable,
            "NON_CONSUMABLE": .nonConsumable,
        ]
        for type in query.values("productType") {
            guard let kind = kinds[type] else { throw EmulatorError.api(.invalidProductType, "Invalid product type.") }
            filter.kinds.insert(kind)
        }
        for group in query.values("subscriptionGroupIdentifier") {
            guard !group.isEmpty, group.utf8.count <= 512 else {
                throw EmulatorError.api(.invalidSubscriptionGroupIdentifier, "Invalid subscription group identifier.")
            }
            filter.groups.insert(group)
        }
        if let ownership = query["inAppOwnershipType"] {
            guard let parsed = OwnershipType(rawValue: ownership) else {
                throw EmulatorError.api(.invalidInAppOwnershipType, "Invalid in-app ownership type.")
            }
            filter.ownership = parsed
        }
        func flag(_ name: String, _ code: APIErrorCode) throws -> Bool? {
            guard let text = query[name] else { return nil }
            switch text.lowercased() {
            case "true": return true
            case "false": return false
            default: throw EmulatorError.api(code, "Invalid \(name).")
            }
        }
        filter.revoked = try flag("revoked", .invalidRevoked)
        if try flag("excludeRevoked", .invalidExcludeRevoked) == true { filter.revoked = false }
        return filter
    }

    static func sortDescending(_ query: HTTPQuery) throws -> Bool {
        switch query["sort"] {
        case nil, "ASCENDING": return false
        case "DESCENDING": return true
        default: throw EmulatorError.api(.invalidSort, "Invalid sort.")
        }
    }

    // MARK: - Control routes

    func addServerAPIControlRoutes(
        to router: inout Router, base: String,
        guarded: (@escaping @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse) -> Handler
    ) {
        let store = self
        router.post(
            base + "/apps/{bundle}/api-keys",
            guarded { request, context in
                _ = try RequestBody(request, allowed: [])
                let minted = try await store.mintAPIKey(bundleID: try context.parameter("bundle"))
                var answer = HTTPResponse.json(
                    .object([
                        "keyId": .string(minted.keyID), "issuerId": .string(minted.issuerID),
                        "privateKey": .string(minted.privateKey),
                    ]), status: 201)
                // A private key: kept by no cache between here and the caller.
                answer.headers.append(("Cache-Control", "no-store"))
                return answer
            })
        router.get(
            base + "/apps/{bundle}/api-keys",
            guarded { _, context in
                let keys = try store.apiKeys(bundleID: try context.parameter("bundle"))
                return .json(
                    .object([
                        "apiKeys": .array(
                            keys.map { .object(["keyId": .string($0.keyID), "issuerId": .string($0.issuerID)]) })
                    ]))
            })
        router.post(
            base + "/faults",
            guarded { request, _ in
                let body = try RequestBody(
                    request,
                    allowed: [
                        "path", "method", "status", "errorCode", "retryAfter", "delayMs", "count",
                        "verifyReceiptStatus",
                        "retryable",
                    ])
                guard let path = try body.string("path", maxBytes: 512), !path.isEmpty else {
                    throw EmulatorError.invalid("member 'path' is required (a glob such as /inApps/v1/transactions/*)")
                }
                let errorCode = try body.integer("errorCode", in: 4_000_000...5_999_999)
                var status = try body.integer("status", in: 400...599).map(Int.init)
                if status == nil, let errorCode { status = Int(errorCode / 10_000) }
                let receiptStatus = try body.integer("verifyReceiptStatus", in: 21_000...21_199)
                guard receiptStatus == nil || status == nil else {
                    throw EmulatorError.invalid("give 'verifyReceiptStatus' or 'status'/'errorCode', not both")
                }
                let delay = try body.integer("delayMs", in: 0...60_000) ?? 0
                guard status != nil || receiptStatus != nil || delay > 0 else {
                    throw EmulatorError.invalid(
                        "give 'status' (or 'errorCode'), 'verifyReceiptStatus', 'delayMs', or a status and a delay")
                }
                let added = store.state.faults.add(
                    Fault(
                        id: "", path: path, method: try body.string("method", maxBytes: 16)?.uppercased(),
                        status: status, errorCode: errorCode,
                        retryAfter: try body.integer("retryAfter", in: 0...86_400).map(Int.init),
                        delayMilliseconds: Int(delay),
                        remaining: try body.integer("count", in: 1...1_000_000).map(Int.init),
                        verifyReceiptStatus: receiptStatus, retryable: try body.bool("retryable")))
                guard let fault = added else {
                    throw EmulatorError.conflict("\(FaultInjector.limit) faults are configured: delete some first")
                }
                return .json(.object(fault.json), status: 201)
            })
        router.get(
            base + "/faults",
            guarded { _, _ in .json(.object(["faults": .array(store.state.faults.all.map { .object($0.json) })])) })
        router.delete(
            base + "/faults",
            guarded { _, _ in
                store.state.faults.remove(nil)
                return .noContent
            })
        router.delete(
            base + "/faults/{id}",
            guarded { _, context in
                guard store.state.faults.remove(try context.parameter("id")) else {
                    throw EmulatorError.notFound("no fault \(try context.parameter("id"))")
                }
                return .noContent
            })
        @Sendable func rateLimits() -> HTTPResponse {
            let settings = store.state.rateLimits.settings
            var perSecond = JSONObject()
            for endpoint in APIEndpointClass.allCases {
                perSecond[endpoint.rawValue] = .double(endpoint.requestsPerSecond)
            }
            return .json(
                .object([
                    "enabled": .bool(settings.enabled), "windowSeconds": .double(settings.windowSeconds),
                    "requestsPerSecond": .object(perSecond),
                ]))
        }
        router.get(base + "/rate-limits", guarded { _, _ in rateLimits() })
        router.put(
            base + "/rate-limits",
            guarded { request, _ in
                let body = try RequestBody(request, allowed: ["enabled", "windowSeconds"])
                var settings = RateLimiter.Settings()
                settings.enabled = try body.bool("enabled") ?? true
                if let window = try body.integer("windowSeconds", in: 1...86_400) {
                    settings.windowSeconds = Double(window)
                }
                store.state.rateLimits.configure(settings)
                return rateLimits()
            })
    }
}
