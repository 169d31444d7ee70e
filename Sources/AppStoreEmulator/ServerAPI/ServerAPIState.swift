import AppStoreServerAPI
import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The keys the App Store Server API accepts: from `--config` and minted at run time.
final class APIKeyRing: Sendable {
    let keys: Mutex<[String: APIKey]>
    init(_ keys: [String: APIKey]) { self.keys = Mutex(keys) }
    func key(_ id: String) -> APIKey? { keys.withLock { $0[id] } }
}

/// Everything the emulated App Store Server API keeps besides the store: keys and the token check, the
/// faults to inject and the rate limits.
final class ServerAPIState: Sendable {
    let keyRing: APIKeyRing
    let verifier: APITokenVerifier
    let faults = FaultInjector()
    let rateLimits = RateLimiter()

    init(apps: [AppConfiguration], minted: [MintedAPIKey]) throws {
        var keys: [String: APIKey] = [:]
        func register(keyID: String, issuerID: String, publicKey: PublicKey, bundleID: String) {
            if var existing = keys[keyID], existing.issuerID == issuerID {
                existing.bundleIDs.insert(bundleID)
                keys[keyID] = existing
            } else {
                keys[keyID] = APIKey(keyID: keyID, issuerID: issuerID, publicKey: publicKey, bundleIDs: [bundleID])
            }
        }
        for app in apps {
            for configured in app.apiKeys {
                let key = try AppStore.publicKey(configured.publicKey, name: "API key \(configured.keyID)")
                register(
                    keyID: configured.keyID, issuerID: configured.issuerID, publicKey: key, bundleID: app.bundleID)
            }
        }
        for item in minted {
            // A stored key that no longer reads (a damaged row) signs nothing.
            guard let key = try? PublicKey(derEncoded: item.publicKey) else { continue }
            register(keyID: item.keyID, issuerID: item.issuerID, publicKey: key, bundleID: item.bundleID)
        }
        let ring = APIKeyRing(keys)
        keyRing = ring
        verifier = APITokenVerifier { ring.key($0) }
    }
}

/// A fault to inject into Apple's endpoints (`POST /_emulator/v1/faults`): requests whose path matches
/// `path` (a glob: `*` any run of characters, `?` one) are answered with `status` and Apple's error body,
/// after `delayMs`, for the next `count` requests (nil: until cleared). Without a status, the request is
/// only slowed down.
struct Fault: Sendable, Hashable {
    var id: String
    var path: String
    var method: String?
    var status: Int?
    var errorCode: Int64?
    var retryAfter: Int?
    var delayMilliseconds: Int
    var remaining: Int?
    /// For `verifyReceipt`: the `status` to answer (HTTP 200, as Apple answers every processed request),
    /// with `is-retryable` for 21100–21199.
    var verifyReceiptStatus: Int64? = nil
    var retryable: Bool? = nil

    var json: JSONObject {
        var object: JSONObject = ["id": .string(id), "path": .string(path)]
        if let method { object["method"] = .string(method) }
        if let status { object["status"] = .integer(Int64(status)) }
        if let errorCode { object["errorCode"] = .integer(errorCode) }
        if let retryAfter { object["retryAfter"] = .integer(Int64(retryAfter)) }
        if delayMilliseconds > 0 { object["delayMs"] = .integer(Int64(delayMilliseconds)) }
        if let verifyReceiptStatus { object["verifyReceiptStatus"] = .integer(verifyReceiptStatus) }
        if let retryable { object["retryable"] = .bool(retryable) }
        object["count"] = remaining.map { .integer(Int64($0)) } ?? .null
        return object
    }

    func matches(_ request: HTTPRequest) -> Bool {
        if let method, method != request.method { return false }
        return fnmatch(path, request.path, 0) == 0
    }

    /// Apple's answer for this fault: status, `{"errorCode", "errorMessage"}` (none for a bare 503) and
    /// for a 429 `Retry-After` as a UNIX time in milliseconds.
    func response(now: Date, request: HTTPRequest) -> HTTPResponse? {
        if let verifyReceiptStatus {
            // The environment as verifyReceipt tells it: the sandbox's path, or its host name.
            let sandbox =
                request.path.hasPrefix("/sandbox/")
                || request.header("Host")?.lowercased().hasPrefix("sandbox.") == true
            var body: JSONObject = [
                "status": .integer(verifyReceiptStatus), "environment": .string(sandbox ? "Sandbox" : "Production"),
            ]
            if (21_100...21_199).contains(verifyReceiptStatus) { body["is-retryable"] = .bool(retryable ?? true) }
            return .json(.object(body))
        }
        guard let status else { return nil }
        let code: Int64? =
            errorCode
            ?? (status == 429
                ? APIErrorCode.rateLimitExceeded.rawValue
                : status == 500 ? APIErrorCode.generalInternal.rawValue : nil)
        var response =
            code.map {
                HTTPResponse.json(
                    .object(["errorCode": .integer($0), "errorMessage": .string(Self.message(for: $0))]),
                    status: status)
            } ?? HTTPResponse(status: status)
        if status == 429 || retryAfter != nil {
            let at = now.addingTimeInterval(TimeInterval(retryAfter ?? 1))
            response.headers.append(("Retry-After", String(EpochMilliseconds.milliseconds(at, roundingUp: true))))
        }
        return response
    }

    static func message(for code: Int64) -> String {
        switch APIErrorCode(code) {
        case .rateLimitExceeded: "Rate limit exceeded."
        case .generalInternalRetryable: "An unknown error occurred. Please try again."
        case .generalInternal: "An unknown error occurred."
        case .accountNotFoundRetryable: "Account not found. Please try again."
        case .appNotFoundRetryable: "App not found. Please try again."
        case .originalTransactionIdNotFoundRetryable: "Original transaction id not found. Please try again."
        default: "Injected fault."
        }
    }
}

/// Injects configured faults into Apple's endpoints (never into `/_emulator`). Inline when no fault
/// matches or the matching one needs no delay; a delay is waited for on the asynchronous path.
final class FaultInjector: InlineMiddleware {
    private let faults = Mutex<[Fault]>([])
    private let anyConfigured = Atomic<Bool>(false)
    private let counter = Atomic<Int>(0)

    /// Faults configured at once, at most (each request to Apple's endpoints looks through them all).
    static let limit = 1_000

    /// The fault with its id; nil when ``limit`` are configured already.
    func add(_ fault: Fault) -> Fault? {
        var fault = fault
        fault.id = "fault-\(counter.wrappingAdd(1, ordering: .relaxed).newValue)"
        let added = faults.withLock { list in
            guard list.count < Self.limit else { return false }
            list.append(fault)
            return true
        }
        guard added else { return nil }
        anyConfigured.store(true, ordering: .releasing)
        return fault
    }

    var all: [Fault] { faults.withLock { $0 } }

    /// Removes one fault, or all with nil; whether anything was removed.
    @discardableResult
    func remove(_ id: String?) -> Bool {
        faults.withLock { list in
            let before = list.count
            list.removeAll { id == nil || $0.id == id }
            if list.isEmpty { anyConfigured.store(false, ordering: .releasing) }
            return list.count != before
        }
    }

    /// The first fault matching the request: with `consume`, one use of it is taken.
    private func match(_ request: HTTPRequest, consume: Bool) -> Fault? {
        guard anyConfigured.load(ordering: .acquiring), !request.path.hasPrefix("/_emulator/") else { return nil }
        return faults.withLock { list in
            guard let index = list.firstIndex(where: { $0.matches(request) }) else { return nil }
            let fault = list[index]
            if consume, let remaining = fault.remaining {
                if remaining <= 1 { list.remove(at: index) } else { list[index].remaining = remaining - 1 }
                if list.isEmpty { anyConfigured.store(false, ordering: .releasing) }
            }
            return fault
        }
    }

    func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
        guard let fault = match(request, consume: true) else { return try await next(request, context) }
        if fault.delayMilliseconds > 0 { try? await Task.sleep(for: .milliseconds(fault.delayMilliseconds)) }
        return try await respond(fault, request, context, next: next)
    }

    private func respond(_ fault: Fault, _ request: HTTPRequest, _ context: RequestContext, next: Handler)
        async throws -> HTTPResponse
    {
        if let response = fault.response(now: Date(), request: request) { return response }
        return try await next(request, context)
    }

    func handleInline(
        _ request: HTTPRequest, context: RequestContext, next: (HTTPRequest, RequestContext) throws -> HTTPResponse?
    ) throws -> HTTPResponse? {
        guard let fault = match(request, consume: false) else { return try next(request, context) }
        // A delay, or a slowed request that still reaches its route: the asynchronous path does it.
        guard fault.delayMilliseconds == 0, fault.status != nil || fault.verifyReceiptStatus != nil,
            match(request, consume: true) == fault
        else { return nil }
        return fault.response(now: Date(), request: request)
    }
}

/// Apple's published per-app rate limits (requests per second, enforced over an hour; the sandbox a
/// tenth), as token buckets per app, environment and endpoint class. Off until switched on.
final class RateLimiter: Sendable {
    struct Settings: Sendable, Hashable {
        var enabled = false
        /// The bucket holds `rate × window` requests: Apple's hour, or less to rehearse quickly.
        var windowSeconds: Double = 3600
    }

    private struct Bucket {
        var tokens: Double
        var updated: Date
    }

    private let state = Mutex<(settings: Settings, buckets: [String: Bucket])>((Settings(), [:]))

    var settings: Settings {
        state.withLock { $0.settings }
    }

    func configure(_ settings: Settings) {
        state.withLock { $0 = (settings, [:]) }
    }

    /// Takes one request from the bucket of `route` (its method and path: Apple limits each endpoint, each
    /// version of one its own); nil when allowed, else when the next one will be.
    func take(
        bundleID: String, environment: Environment, endpoint: APIEndpointClass, route: String, now: Date
    ) -> Date? {
        state.withLock { state -> Date? in
            guard state.settings.enabled else { return nil }
            let rate = endpoint.requestsPerSecond * (environment == .production ? 1 : 0.1)
            let capacity = max(1, rate * state.settings.windowSeconds)
            let key = "\(bundleID)|\(environment.rawValue)|\(route)"
            var bucket = state.buckets[key] ?? Bucket(tokens: capacity, updated: now)
            bucket.tokens = min(capacity, bucket.tokens + max(0, now.timeIntervalSince(bucket.updated)) * rate)
            bucket.updated = now
            defer { state.buckets[key] = bucket }
            guard bucket.tokens >= 1 else { return now.addingTimeInterval((1 - bucket.tokens) / rate) }
            bucket.tokens -= 1
            return nil
        }
    }
}

/// The endpoint classes Apple's rate limits are published for (each endpoint of a class has its own bucket).
/// Retention Messaging: Configure Default Message 10 a second, every other endpoint 1.
enum APIEndpointClass: String, Sendable, CaseIterable {
    case transactionInfo, transactionHistory, subscriptionStatuses, notificationHistory, consumption, appTransaction
    case extend, appAccountToken, orderLookup, refundHistory, massExtend, testNotification, testNotificationStatus
    case massExtendStatus, finishTransaction, retentionMessaging, retentionDefaultMessage

    /// Requests per second in production.
    var requestsPerSecond: Double {
        switch self {
        case .transactionInfo, .transactionHistory, .subscriptionStatuses, .notificationHistory, .consumption,
            .appTransaction, .massExtendStatus, .finishTransaction:
            50
        case .extend, .appAccountToken: 20
        case .orderLookup, .refundHistory, .retentionDefaultMessage: 10
        case .massExtend, .testNotification, .testNotificationStatus, .retentionMessaging: 1
        }
    }
}
