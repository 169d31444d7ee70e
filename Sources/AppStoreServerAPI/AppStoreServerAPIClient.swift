public import AppStoreSignedData
public import Foundation
import StoreModel
import StoreTime
public import StorekeeperCrypto
public import StorekeeperHTTP
public import StorekeeperJSON

/// A client of the App Store Server API (Apple's or the emulator's) over libcurl: a fresh ES256 bearer token
/// per request, every purchase-related endpoint with typed requests and answers, paging helpers, retries
/// with back-off that honour `Retry-After` and Apple's retryable codes, and — when given a verifier — every
/// signed field of an answer verified before it is returned.
public struct AppStoreServerAPIClient: Sendable {
    /// Where the API is.
    public enum Environment: Sendable, Hashable {
        case production, sandbox
        /// Another base URL, e.g. the emulator's `http://127.0.0.1:8080` (or `…/sandbox` for its sandbox).
        case custom(String)

        public var baseURL: String {
            switch self {
            case .production: "https://api.storekit.apple.com"
            case .sandbox: "https://api.storekit-sandbox.apple.com"
            case .custom(let url): url.hasSuffix("/") ? String(url.dropLast()) : url
            }
        }
    }

    /// When and how often to try again.
    public struct RetryPolicy: Sendable, Hashable {
        /// Attempts in all, the first included.
        public var maxAttempts: Int
        /// The wait before the first retry; doubled each time, up to `maxBackoff`.
        public var initialBackoff: Duration
        public var maxBackoff: Duration
        /// A `Retry-After` further away than this is not waited for: the 429 is returned.
        public var maxRetryAfter: Duration

        public init(
            maxAttempts: Int = 4, initialBackoff: Duration = .milliseconds(500), maxBackoff: Duration = .seconds(30),
            maxRetryAfter: Duration = .seconds(60)
        ) {
            self.maxAttempts = max(1, maxAttempts)
            self.initialBackoff = initialBackoff
            self.maxBackoff = maxBackoff
            self.maxRetryAfter = maxRetryAfter
        }

        public static let none = RetryPolicy(maxAttempts: 1)
    }

    public let environment: Environment
    public let bundleID: String
    public let retry: RetryPolicy
    private let keyID: String
    private let issuerID: String
    private let key: PrivateKey
    private let http: HTTPClient
    private let verifier: SignedDataVerifier?
    private let now: @Sendable () -> Date
    private let sleep: @Sendable (Duration) async -> Void
    private let beforeRetry: (@Sendable (_ path: String) async -> Bool)?

    /// `key` is the `.p8` (PKCS#8, P-256) of the key `keyID` from issuer `issuerID`. With `verifier`, every
    /// signed field of every answer is verified (chain, bundle, environment) before the answer is returned.
    /// `beforeRetry` is asked before each retry with the request's path (a caller's request budget): false
    /// throws the error instead.
    public init(
        key: PrivateKey, keyID: String, issuerID: String, bundleID: String, environment: Environment,
        retry: RetryPolicy = RetryPolicy(), verifier: SignedDataVerifier? = nil,
        http: HTTPClient = HTTPClient(timeout: .seconds(30), maxResponseBytes: 1 << 20),
        now: @escaping @Sendable () -> Date = { Date() },
        sleep: @escaping @Sendable (Duration) async -> Void = { try? await Task.sleep(for: $0) },
        beforeRetry: (@Sendable (_ path: String) async -> Bool)? = nil
    ) {
        self.beforeRetry = beforeRetry
        self.key = key
        self.keyID = keyID
        self.issuerID = issuerID
        self.bundleID = bundleID
        self.environment = environment
        self.retry = retry
        self.verifier = verifier
        self.http = http
        self.now = now
        self.sleep = sleep
    }

    // MARK: - Endpoints

    public func transactionInfo(_ transactionID: String) async throws(AppStoreServerAPIError)
        -> TransactionInfoResponse
    {
        try await call("GET", "/inApps/v1/transactions/\(segment(transactionID))")
    }

    /// One page of Get Transaction History (v2 by default; v1 leaves finished consumables out).
    public func transactionHistory(
        _ anyTransactionID: String, query: TransactionHistoryQuery = TransactionHistoryQuery(),
        revision: String? = nil, version: Int = 2
    ) async throws(AppStoreServerAPIError) -> HistoryResponse {
        var parameters = query.parameters
        if let revision { parameters.insert(("revision", revision), at: 0) }
        return try await call("GET", "/inApps/v\(version)/history/\(segment(anyTransactionID))", query: parameters)
    }

    /// Every page of the history, following `revision` while `hasMore`, at most `maxPages`.
    public func allTransactionHistory(
        _ anyTransactionID: String, query: TransactionHistoryQuery = TransactionHistoryQuery(), version: Int = 2,
        maxPages: Int = 10_000
    ) async throws(AppStoreServerAPIError) -> [HistoryResponse] {
        try await Self.pages(maxPages: maxPages) { (revision) throws(AppStoreServerAPIError) in
            let page = try await transactionHistory(
                anyTransactionID, query: query, revision: revision, version: version)
            return (page, page.hasMore ? page.revision : nil)
        }
    }

    /// Pages fetched one after another, each from the token the previous one gave, until one gives none or
    /// `maxPages` came. A page that gives back the token it was asked with is an invalid answer (following
    /// it would ask for the same page again until `maxPages`).
    static func pages<Page>(
        maxPages: Int, _ fetch: (String?) async throws(AppStoreServerAPIError) -> (Page, next: String?)
    ) async throws(AppStoreServerAPIError) -> [Page] {
        var pages: [Page] = []
        var token: String?
        repeat {
            let (page, next) = try await fetch(token)
            pages.append(page)
            guard let next else { break }
            guard next != token else {
                throw AppStoreServerAPIError(
                    kind: .invalidResponse, message: "a page gave back the token it was asked with: it does not move on"
                )
            }
            token = next
        } while pages.count < maxPages
        return pages
    }

    /// Get All Subscription Statuses, optionally only those with the given statuses (1–5).
    public func subscriptionStatuses(_ anyTransactionID: String, status: [Int] = [])
        async throws(AppStoreServerAPIError) -> StatusResponse
    {
        try await call(
            "GET", "/inApps/v1/subscriptions/\(segment(anyTransactionID))",
            query: status.map { ("status", String($0)) })
    }

    public func refundHistory(_ anyTransactionID: String, revision: String? = nil)
        async throws(AppStoreServerAPIError) -> RefundHistoryResponse
    {
        try await call(
            "GET", "/inApps/v2/refund/lookup/\(segment(anyTransactionID))",
            query: revision.map { [("revision", $0)] } ?? [])
    }

    /// Every page of the refund history.
    public func allRefundHistory(_ anyTransactionID: String, maxPages: Int = 10_000)
        async throws(AppStoreServerAPIError) -> [RefundHistoryResponse]
    {
        try await Self.pages(maxPages: maxPages) { (revision) throws(AppStoreServerAPIError) in
            let page = try await refundHistory(anyTransactionID, revision: revision)
            return (page, page.hasMore ? page.revision : nil)
        }
    }

    public func lookUpOrder(_ orderID: String) async throws(AppStoreServerAPIError) -> OrderLookupResponse {
        try await call("GET", "/inApps/v1/lookup/\(segment(orderID))")
    }

    public func extendRenewalDate(originalTransactionID: String, _ request: ExtendRenewalDateRequest)
        async throws(AppStoreServerAPIError) -> ExtendRenewalDateResponse
    {
        try await call(
            "PUT", "/inApps/v1/subscriptions/extend/\(segment(originalTransactionID))", body: request.json)
    }

    public func extendRenewalDatesForAllActiveSubscribers(_ request: MassExtendRenewalDateRequest)
        async throws(AppStoreServerAPIError) -> MassExtendRenewalDateResponse
    {
        try await call("POST", "/inApps/v1/subscriptions/extend/mass", body: request.json)
    }

    public func massExtensionStatus(productID: String, requestIdentifier: String)
        async throws(AppStoreServerAPIError) -> MassExtendRenewalDateStatusResponse
    {
        try await call(
            "GET", "/inApps/v1/subscriptions/extend/mass/\(segment(productID))/\(segment(requestIdentifier))")
    }

    public func requestTestNotification() async throws(AppStoreServerAPIError) -> SendTestNotificationResponse {
        try await call("POST", "/inApps/v1/notifications/test")
    }

    public func testNotificationStatus(_ token: String) async throws(AppStoreServerAPIError)
        -> CheckTestNotificationResponse
    {
        try await call("GET", "/inApps/v1/notifications/test/\(segment(token))")
    }

    public func notificationHistory(_ request: NotificationHistoryRequest, paginationToken: String? = nil)
        async throws(AppStoreServerAPIError) -> NotificationHistoryResponse
    {
        // A POST that only reads: sent again after a failure without an answer, as a GET would be.
        try await call(
            "POST", "/inApps/v1/notifications/history", query: paginationToken.map { [("paginationToken", $0)] } ?? [],
            rawBody: JSONWriter.bytes(.object(request.json)), contentType: "application/json", idempotent: true)
    }

    /// Every page of the notification history.
    public func allNotificationHistory(_ request: NotificationHistoryRequest, maxPages: Int = 10_000)
        async throws(AppStoreServerAPIError) -> [NotificationHistoryResponse]
    {
        try await Self.pages(maxPages: maxPages) { (token) throws(AppStoreServerAPIError) in
            let page = try await notificationHistory(request, paginationToken: token)
            return (page, page.hasMore ? page.paginationToken : nil)
        }
    }

    /// Send Consumption Information (v2).
    public func sendConsumptionInformation(transactionID: String, _ request: ConsumptionRequest)
        async throws(AppStoreServerAPIError)
    {
        let _: EmptyResponse = try await call(
            "PUT", "/inApps/v2/transactions/consumption/\(segment(transactionID))", body: request.json)
    }

    /// Send Consumption Information, v1 (deprecated): Apple's integer-coded body as given.
    public func sendConsumptionData(transactionID: String, _ body: JSONObject) async throws(AppStoreServerAPIError) {
        let _: EmptyResponse = try await call(
            "PUT", "/inApps/v1/transactions/consumption/\(segment(transactionID))", body: body)
    }

    public func setAppAccountToken(originalTransactionID: String, _ token: UUID) async throws(AppStoreServerAPIError) {
        let _: EmptyResponse = try await call(
            "PUT", "/inApps/v1/transactions/\(segment(originalTransactionID))/appAccountToken",
            body: ["appAccountToken": .string(token.uuidString.lowercased())])
    }

    /// Finish Transaction (API 1.20): tells the App Store the purchase was delivered, for a server that
    /// manages entitlements in place of the app's `finish()`.
    public func finishTransaction(_ transactionID: String) async throws(AppStoreServerAPIError) {
        let _: EmptyResponse = try await call("POST", "/inApps/v1/transactions/\(segment(transactionID))/finish")
    }

    public func appTransactionInfo(_ anyTransactionID: String) async throws(AppStoreServerAPIError)
        -> AppTransactionInfoResponse
    {
        try await call("GET", "/inApps/v1/transactions/appTransactions/\(segment(anyTransactionID))")
    }

    // MARK: - Requests

    /// Any request, answered as a JSON object (empty for an answer without a body), with the same token,
    /// retries and verification as the typed endpoints.
    public func call<Response: APIResponseBody>(
        _ method: String, _ path: String, query: [(String, String)] = [], body: JSONObject? = nil
    ) async throws(AppStoreServerAPIError) -> Response {
        try await call(
            method, path, query: query, rawBody: body.map { JSONWriter.bytes(.object($0)) } ?? [],
            contentType: "application/json")
    }

    /// A request with a body of any type (Upload Image's PNG).
    func call<Response: APIResponseBody>(
        _ method: String, _ path: String, query: [(String, String)] = [], rawBody bodyBytes: [UInt8],
        contentType: String, idempotent: Bool? = nil
    ) async throws(AppStoreServerAPIError) -> Response {
        // A request that may have landed is sent again only when sending it twice does no harm.
        let idempotent = idempotent ?? (method != "POST")
        var url = environment.baseURL + path
        if !query.isEmpty {
            url += "?" + query.map { "\(Self.encode($0.0))=\(Self.encode($0.1))" }.joined(separator: "&")
        }
        var attempt = 1
        var backoff = retry.initialBackoff
        while true {
            do {
                let json = try await once(method, url, body: bodyBytes, contentType: contentType)
                try await verify(json)
                return Response(json: json)
            } catch {
                guard attempt < retry.maxAttempts, error.isRetryable,
                    error.kind != .transport || idempotent
                else { throw error }
                var wait = backoff
                if let retryAfter = error.retryAfter {
                    let seconds = max(0, retryAfter.timeIntervalSince(now()))
                    guard seconds <= retry.maxRetryAfter.seconds else { throw error }
                    wait = .milliseconds(Int64(seconds * 1000))
                } else {
                    backoff = min(backoff * 2, retry.maxBackoff)
                }
                if let beforeRetry, !(await beforeRetry(path)) { throw error }
                await sleep(wait)
                attempt += 1
            }
        }
    }

    private func once(_ method: String, _ url: String, body: [UInt8], contentType: String)
        async throws(AppStoreServerAPIError)
        -> JSONObject
    {
        let token: String
        do {
            token = try APIToken.make(keyID: keyID, issuerID: issuerID, bundleID: bundleID, key: key, now: now())
        } catch {
            throw AppStoreServerAPIError(kind: .invalidRequest, message: "cannot sign the bearer token: \(error)")
        }
        var headers: [(name: String, value: String)] = [
            ("Authorization", "Bearer " + token), ("Accept", "application/json"),
            ("User-Agent", "storekeeper-app-store-server-api"),
        ]
        // As Apple's clients: a Content-Type only with a body (Request a Test Notification, Finish Transaction
        // have none).
        if !body.isEmpty { headers.append(("Content-Type", contentType)) }
        let response: HTTPClient.Response
        do {
            response = try await http.send(method, url, headers: headers, body: body)
        } catch {
            throw AppStoreServerAPIError(kind: .transport, message: error.description, transport: error)
        }
        let parsed = response.body.isEmpty ? nil : (try? JSONParser.parse(response.body))?.objectValue
        guard (200..<300).contains(response.status) else {
            let code = parsed?["errorCode"]?.int64Value.map(APIErrorCode.init(rawValue:))
            throw AppStoreServerAPIError(
                kind: .api, status: response.status, code: code,
                message: parsed?["errorMessage"]?.stringValue ?? "HTTP \(response.status)",
                retryAfter: Self.retryAfter(response.header("Retry-After"), now: now()))
        }
        if response.body.isEmpty { return [:] }
        guard let parsed else {
            throw AppStoreServerAPIError(kind: .invalidResponse, message: "the answer is not a JSON object")
        }
        return parsed
    }

    /// `Retry-After` as Apple documents it (UNIX milliseconds) or as seconds from now.
    public static func retryAfter(_ value: String?, now: Date) -> Date? {
        guard let value, let number = Double(value.trimmingCharacters(in: .whitespaces)), number >= 0 else {
            return nil
        }
        return number > 100_000_000_000
            ? (EpochMilliseconds.date(number) ?? now) : now.addingTimeInterval(number)
    }

    /// Verifies every signed field of an answer when a verifier was given (online, awaiting the OCSP
    /// responders, when it is configured for online checks).
    private func verify(_ json: JSONObject) async throws(AppStoreServerAPIError) {
        guard let verifier else { return }
        for token in Self.signedFields(of: .object(json)) {
            let result =
                verifier.configuration.onlineChecks
                ? await verifier.verifyOnline(token, now: now()) : verifier.verify(token, now: now())
            guard result.isOK else {
                throw AppStoreServerAPIError(
                    kind: .verificationFailed,
                    message: "a signed field failed verification: \(result.reason ?? result.status.rawValue)")
            }
        }
    }

    /// Every JWS in an answer: the values of members named `signed…`, in arrays too.
    public static func signedFields(of value: JSONValue) -> [String] {
        var found: [String] = []
        func walk(_ value: JSONValue, name: String?) {
            if let object = value.objectValue {
                for member in object.members { walk(member.value, name: member.key) }
            } else if let array = value.arrayValue {
                for item in array { walk(item, name: name) }
            } else if let text = value.stringValue, name?.hasPrefix("signed") == true, name != "signedDate" {
                found.append(text)
            }
        }
        walk(value, name: nil)
        return found
    }

    /// A JWS's payload, decoded without verification (for display).
    public static func decodedPayload(_ jws: String) -> JSONObject? { (try? CompactJWS(jws))?.payload }

    private func segment(_ text: String) -> String { Self.encode(text) }

    /// RFC 3986's unreserved characters kept, every other byte of the UTF-8 percent-encoded
    /// (`CharacterSet.alphanumerics` would keep any Unicode letter).
    static let unreserved = CharacterSet(
        charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    static func encode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? text
    }
}
