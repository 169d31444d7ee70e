import Foundation
import StoreTime
import StorekeeperLogging
import Synchronization

/// Request ids: a client's `X-Request-ID` is kept when it is short and plain; otherwise one is made.
public enum RequestIDs {
    private static let counter = Atomic<UInt64>(0)
    private static let prefix = String(UInt32.random(in: 0...UInt32.max), radix: 36)

    /// A process-unique id such as `k3x9a-1f`.
    @Sendable public static func next() -> String {
        let value = counter.add(1, ordering: .relaxed).newValue
        // The counter's base-36 digits written by hand (String(_:radix:) cost more than the rest of the id).
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 14) { digits in
            var rest = value
            var start = digits.count
            repeat {
                start -= 1
                digits[start] = base36[Int(rest % 36)]
                rest /= 36
            } while rest > 0
            return prefix + "-" + String(decoding: UnsafeBufferPointer(rebasing: digits[start...]), as: UTF8.self)
        }
    }

    private static let base36 = Array("0123456789abcdefghijklmnopqrstuvwxyz".utf8)

    /// A client-supplied id, when it is 1–64 characters of letters, digits, `-`, `_` or `.`.
    public static func accept(_ value: String) -> String? {
        guard (1...64).contains(value.utf8.count),
            value.utf8.allSatisfy({ byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a)
                    || byte == 0x2d || byte == 0x5f || byte == 0x2e
            })
        else { return nil }
        return value
    }
}

/// One access-log record per request: method, path (never the query, which may carry tokens), status,
/// bytes and duration, at `info`.
public struct AccessLogMiddleware: InlineMiddleware {
    public init() {}

    public func handleInline(
        _ request: HTTPRequest, context: RequestContext,
        next: (HTTPRequest, RequestContext) throws -> HTTPResponse?
    ) throws -> HTTPResponse? {
        let started = ContinuousClock.now
        let response: HTTPResponse?
        do { response = try next(request, context) } catch {
            // Answered by the responder once this returns, in our error format (Apple's under its paths is of
            // a like size): its bytes as that body's.
            if let error = error as? any HTTPErrorConvertible {
                let refusal = error.httpError
                log(request, context, refusal.status, refusal.response.body.count, started)
            }
            throw error
        }
        if let response { log(request, context, response.status, response.body.count, started) }
        return response
    }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
        let started = ContinuousClock.now
        let response: HTTPResponse
        do { response = try await next(request, context) } catch {
            // Answered by the responder once this returns, in our error format (Apple's under its paths is of
            // a like size): its bytes as that body's.
            if let error = error as? any HTTPErrorConvertible {
                let refusal = error.httpError
                log(request, context, refusal.status, refusal.response.body.count, started)
            }
            throw error
        }
        log(request, context, response.status, response.body.count, started)
        return response
    }

    /// `12.34` for 12.3449 (String(format:) costs more than the rest of the line).
    static func hundredths(_ value: Double) -> String {
        let scaled = Int64((max(0, min(value, 1e12)) * 100).rounded())
        let fraction = scaled % 100
        return "\(scaled / 100)." + (fraction < 10 ? "0" : "") + String(fraction)
    }

    private func log(
        _ request: HTTPRequest, _ context: RequestContext, _ status: Int, _ bytes: Int,
        _ started: ContinuousClock.Instant
    ) {
        guard context.baseLogger.level <= .info else { return }
        let elapsed = ContinuousClock.now - started
        let milliseconds = elapsed.milliseconds
        context.baseLogger.info(
            "request answered",
            [
                "request.id": context.requestID, "request.method": request.method, "request.path": request.path,
                "response.status": String(status), "response.bytes": String(bytes),
                "duration.ms": Self.hundredths(milliseconds),
            ])
    }
}

/// Authentication hook: `authenticate` names the caller (put in the context) or throws an ``HTTPError``
/// (401/403). Requests whose path does not start with one of `prefixes` pass untouched.
public struct AuthenticationMiddleware: HTTPMiddleware {
    let prefixes: [String]
    let authenticate: @Sendable (HTTPRequest) async throws -> String

    public init(prefixes: [String], authenticate: @escaping @Sendable (HTTPRequest) async throws -> String) {
        self.prefixes = prefixes
        self.authenticate = authenticate
    }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
        guard prefixes.contains(where: { request.path.hasPrefix($0) }) else { return try await next(request, context) }
        var context = context
        context.caller = try await authenticate(request)
        return try await next(request, context)
    }
}

/// Injected faults, to rehearse a client's resilience: requests whose path matches a rule's glob (`*`
/// matches any run of characters) are answered with the rule's status (and `Retry-After`), optionally
/// after a delay, for the rule's remaining count (nil: until removed).
public final class FaultInjectionMiddleware: HTTPMiddleware {
    public struct Rule: Sendable, Hashable {
        public var id: String
        public var pathGlob: String
        public var status: Int
        public var errorCode: String
        public var message: String
        public var retryAfterSeconds: Int?
        public var delayMilliseconds: Int
        public var remaining: Int?

        public init(
            id: String, pathGlob: String, status: Int, errorCode: String = "injected_fault",
            message: String = "injected fault", retryAfterSeconds: Int? = nil, delayMilliseconds: Int = 0,
            remaining: Int? = nil
        ) {
            self.id = id
            self.pathGlob = pathGlob
            self.status = status
            self.errorCode = errorCode
            self.message = message
            self.retryAfterSeconds = retryAfterSeconds
            self.delayMilliseconds = delayMilliseconds
            self.remaining = remaining
        }
    }

    private let rules = Mutex<[Rule]>([])

    public init() {}

    public func add(_ rule: Rule) { rules.withLock { $0.append(rule) } }
    public func removeAll() { rules.withLock { $0.removeAll() } }
    public var current: [Rule] { rules.withLock { $0 } }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
        let matched = rules.withLock { rules -> Rule? in
            guard let index = rules.firstIndex(where: { Self.glob($0.pathGlob, matches: request.path) }) else {
                return nil
            }
            let rule = rules[index]
            if let remaining = rule.remaining {
                if remaining <= 1 { rules.remove(at: index) } else { rules[index].remaining = remaining - 1 }
            }
            return rule
        }
        guard let rule = matched else { return try await next(request, context) }
        if rule.delayMilliseconds > 0 { try await Task.sleep(for: .milliseconds(rule.delayMilliseconds)) }
        guard rule.status >= 400 else { return try await next(request, context) }
        var headers: [String: String] = [:]
        if let retry = rule.retryAfterSeconds { headers["Retry-After"] = String(retry) }
        throw HTTPError(status: rule.status, code: rule.errorCode, message: rule.message, headers: headers)
    }

    /// `*` matches any run of characters (including `/`); everything else literally.
    public static func glob(_ pattern: String, matches text: String) -> Bool {
        let parts = pattern.split(separator: "*", omittingEmptySubsequences: false)
        guard parts.count > 1 else { return pattern == text }
        var rest = Substring(text)
        guard rest.hasPrefix(parts[0]) else { return false }
        rest = rest.dropFirst(parts[0].count)
        for part in parts.dropFirst().dropLast() {
            guard let range = rest.range(of: part) else { return false }
            rest = rest[range.upperBound...]
        }
        return rest.hasSuffix(parts.last!)
    }
}
