internal import CStorekeeperCurl
import Dispatch
import Foundation
import StoreTime
import StorekeeperLogging

/// A failed outbound request: no HTTP answer arrived (an HTTP error status is a ``HTTPClient/Response``).
public struct HTTPClientError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case timedOut = "timed out", connectFailed = "connection failed", resolveFailed = "host not found"
            case tlsFailed = "TLS failed", responseTooLarge = "response too large", invalidURL = "invalid URL"
            case other = "failed"
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        public static let timedOut = Code(.timedOut)
        public static let connectFailed = Code(.connectFailed)
        public static let resolveFailed = Code(.resolveFailed)
        public static let tlsFailed = Code(.tlsFailed)
        public static let responseTooLarge = Code(.responseTooLarge)
        public static let invalidURL = Code(.invalidURL)
        public static let other = Code(.other)

        public var description: String { value.rawValue }
    }

    public let code: Code
    /// libcurl's message (never the request's headers or body).
    public let reason: String
    /// The URL without its query (which may carry secrets).
    public let url: String

    public var description: String { "\(code) for \(url): \(reason)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
}

/// A small HTTP(S) client over libcurl for outbound calls (notifications, webhooks, the App Store Server
/// API): deadlines, a response-size limit, no redirects, http and https only. Each request runs on a
/// dispatch queue of its own (an overcommitting thread), never on Swift's cooperative pool.
public struct HTTPClient: Sendable {
    public struct Response: Sendable {
        public var status: Int
        public var headers: [(name: String, value: String)]
        public var body: [UInt8]

        public func header(_ name: String) -> String? {
            headers.first { HTTPHeaderName.equal($0.name, name) }?.value
        }
    }

    /// `url` as an error names it: without its query (tokens travel there) or credentials (`user:pass@`).
    package static func printable(_ url: String) -> String {
        var printable = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
        if let scheme = printable.range(of: "://"),
            let at = printable[scheme.upperBound...].prefix(while: { $0 != "/" }).lastIndex(of: "@")
        {
            printable = String(printable[..<scheme.upperBound]) + String(printable[printable.index(after: at)...])
        }
        return printable
    }

    public var timeout: Duration
    public var connectTimeout: Duration
    public var maxResponseBytes: Int
    /// Past ``maxResponseBytes``, keep the body's first bytes and stop reading (the answer is not an error):
    /// for a caller that wants the status, such as a delivery, whatever a receiver answers with.
    public var truncatesResponse = false
    /// Skip TLS peer verification (tests against self-signed servers only).
    public var insecure: Bool
    /// A PEM file of roots to trust instead of the system's.
    public var caFile: String?
    /// The address to connect from (`127.0.0.2`, say, so one machine can be several clients); nil: any.
    public var localAddress: String?

    private static let initialised: Void = sk_fetch_global_init()

    public init(
        timeout: Duration = .seconds(10), connectTimeout: Duration = .seconds(5), maxResponseBytes: Int = 8 << 20,
        truncatesResponse: Bool = false, insecure: Bool = false, caFile: String? = nil
    ) {
        self.truncatesResponse = truncatesResponse
        self.timeout = timeout
        self.connectTimeout = connectTimeout
        self.maxResponseBytes = maxResponseBytes
        self.insecure = insecure
        self.caFile = caFile
    }

    /// Sends one request and returns the answer, whatever its status.
    public func send(
        _ method: String, _ url: String, headers: [(name: String, value: String)] = [], body: [UInt8] = []
    ) async throws(HTTPClientError) -> Response {
        let result: Result<Response, HTTPClientError> = await withCheckedContinuation { continuation in
            // A serial queue of its own: libdispatch backs serial queues with overcommitting threads, so a
            // blocking transfer never takes one of the few threads that concurrent queues and Swift's
            // cooperative pool share (as many as there are cores).
            DispatchQueue(label: "storekeeper.http.client.request").async {
                continuation.resume(returning: perform(method, url, headers, body))
            }
        }
        return try result.get()
    }

    /// Sends one request on the calling thread, blocking it until the answer (or the deadline): for callers
    /// that run many requests one after another on a thread of their own. Never call it from a Swift task
    /// on the cooperative pool; use ``send(_:_:headers:body:)`` there.
    public func sendBlocking(
        _ method: String, _ url: String, headers: [(name: String, value: String)] = [], body: [UInt8] = []
    ) -> Result<Response, HTTPClientError> {
        perform(method, url, headers, body)
    }

    private func perform(_ method: String, _ url: String, _ headers: [(name: String, value: String)], _ body: [UInt8])
        -> Result<Response, HTTPClientError>
    {
        _ = Self.initialised
        // Within 1 ms and a day: libcurl reads 0 as no limit at all, which no caller means.
        func milliseconds(_ duration: Duration) -> Int {
            Int(min(max(duration, .milliseconds(1)), .seconds(86_400)).wholeMilliseconds)
        }
        let names = headers.map { strdup($0.name) }
        let values = headers.map { strdup($0.value) }
        let ca = caFile.flatMap { strdup($0) }
        let local = localAddress.flatMap { strdup($0) }
        defer {
            (names + values).forEach { free($0) }
            ca.map { free($0) }
            local.map { free($0) }
        }
        var cHeaders = zip(names, values).map { sk_fetch_header(name: $0, value: $1) }
        var result = sk_fetch_result()
        defer { sk_fetch_result_free(&result) }
        method.withCString { methodPointer in
            url.withCString { urlPointer in
                body.withUnsafeBufferPointer { bodyBuffer in
                    cHeaders.withUnsafeMutableBufferPointer { headerBuffer in
                        var request = sk_fetch_request(
                            method: methodPointer, url: urlPointer, headers: headerBuffer.baseAddress,
                            header_count: headerBuffer.count, body: bodyBuffer.baseAddress,
                            body_length: bodyBuffer.count, connect_timeout_ms: milliseconds(connectTimeout),
                            timeout_ms: milliseconds(timeout), max_response_bytes: maxResponseBytes,
                            truncate_response: truncatesResponse ? 1 : 0, insecure: insecure ? 1 : 0,
                            ca_file: ca.map { UnsafePointer($0) } ?? nil,
                            local_address: local.map { UnsafePointer($0) } ?? nil)
                        sk_fetch(&request, &result)
                    }
                }
            }
        }
        guard result.outcome == Int32(SK_FETCH_OK) else {
            let code: HTTPClientError.Code =
                switch Int(result.outcome) {
                case Int(SK_FETCH_TIMED_OUT): .timedOut
                case Int(SK_FETCH_CONNECT_FAILED): .connectFailed
                case Int(SK_FETCH_RESOLVE_FAILED): .resolveFailed
                case Int(SK_FETCH_TLS_FAILED): .tlsFailed
                case Int(SK_FETCH_TOO_LARGE): .responseTooLarge
                case Int(SK_FETCH_INVALID_URL): .invalidURL
                default: .other
                }
            let reason = withUnsafeBytes(of: result.error) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            return .failure(HTTPClientError(code: code, reason: reason, url: Self.printable(url)))
        }
        var responseHeaders: [(name: String, value: String)] = []
        for index in 0..<result.header_count {
            responseHeaders.append(
                (String(cString: result.headers[index].name), String(cString: result.headers[index].value)))
        }
        let responseBody =
            result.body_length > 0 && result.body != nil
            ? Array(UnsafeBufferPointer(start: result.body, count: result.body_length)) : []
        return .success(Response(status: Int(result.status), headers: responseHeaders, body: responseBody))
    }
}
