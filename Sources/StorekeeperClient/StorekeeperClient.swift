public import Foundation

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// An app's client of the purchase server (`storekeeper serve`), with the app's public key: it sends StoreKit 2's
/// signed transactions and app transaction for a user, and reads that user's entitlements. Foundation only, so
/// the same code runs in an iOS or macOS app and on Linux.
///
/// ```swift
/// let client = StorekeeperClient(serverURL: URL(string: "https://purchases.example.com")!, publicKey: "pk_…")
/// let result = try await client.sync(verification, appUserID: userID)    // sends it, then finishes it
/// if try await client.entitlements(appUserID: userID).isActive("pro") { … }
/// ```
///
/// Calls the server could not answer (unreachable, 5xx, 429) are tried again with exponential back-off; errors
/// are ``StorekeeperClientError`` values carrying the server's code. The last entitlements read or synced for each
/// user are kept with their age: ``entitlements(appUserID:maxAge:)`` answers from them while they are younger
/// than `maxAge`, and ``cachedEntitlements(appUserID:)`` gives them whatever their age (for an offline start).
@available(macOS 12, iOS 15, tvOS 15, watchOS 8, visionOS 1, *)
public actor StorekeeperClient {
    public struct Configuration: Sendable {
        public var serverURL: URL
        /// The app's public key from the server's configuration (`apps[].publicKey`); it ships in the app.
        public var publicKey: String
        /// The app's bundle id; needed when the server serves more than one app.
        public var bundleID: String?
        /// Tries per call, the first included.
        public var maxAttempts = 4
        /// The first retry's wait, doubled for each one after, at most `maxBackoff` (seconds).
        public var initialBackoff: TimeInterval = 0.5
        public var maxBackoff: TimeInterval = 8
        /// How long a read is reused by ``entitlements(appUserID:maxAge:)`` unless the call says otherwise.
        public var cacheLifetime: TimeInterval = 300
        /// Seconds one try may take in all (URLSession's request and resource timeouts).
        public var timeout: TimeInterval = 30

        public init(serverURL: URL, publicKey: String, bundleID: String? = nil) {
            self.serverURL = serverURL
            self.publicKey = publicKey
            self.bundleID = bundleID
        }
    }

    /// Sends one request: URLSession by default; a test can answer in its place.
    public protocol Transport: Sendable {
        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse)
    }

    public let configuration: Configuration
    private let transport: any Transport
    private let now: @Sendable () -> Date
    private let sleep: @Sendable (TimeInterval) async -> Void
    /// An answer kept: what it said, when its request started and when it arrived (by ``tickets``), and
    /// whether it answered a post (whose answer follows its own write).
    struct Kept {
        var entitlements: Entitlements
        var started: Int
        var arrived: Int
        var isPost: Bool

        /// Whether this answer says more recent things than `other`: the server's clock first (a read answered
        /// before a post's write committed carries an earlier `requestDate` than the post's answer); without it,
        /// an answer to a request started after `other` arrived, or a post's over an overlapping read.
        func isNewer(than other: Kept) -> Bool {
            if let mine = entitlements.serverDate, let theirs = other.entitlements.serverDate, mine != theirs {
                return mine > theirs
            }
            if started > other.arrived { return true }
            if isPost != other.isPost { return isPost }
            return started > other.started
        }
    }
    private var cache: [String: Kept] = [:]
    /// Counts requests as they start and answers as they arrive (calls overlap).
    private var tickets = 0
    /// Users whose entitlements are kept; the oldest read goes first.
    static let cacheCapacity = 32
    /// The largest answer read (a user with a long history is well under it).
    static let maxAnswerBytes = 4 << 20

    public init(serverURL: URL, publicKey: String, bundleID: String? = nil) {
        self.init(configuration: Configuration(serverURL: serverURL, publicKey: publicKey, bundleID: bundleID))
    }

    public init(
        configuration: Configuration, transport: (any Transport)? = nil,
        now: @escaping @Sendable () -> Date = { Date() },
        sleep: @escaping @Sendable (TimeInterval) async -> Void = { seconds in
            let bounded = seconds.isFinite ? min(max(0, seconds), StorekeeperClient.longestPause) : 0
            try? await Task.sleep(nanoseconds: UInt64(bounded * 1_000_000_000))
        }
    ) {
        self.configuration = configuration
        self.transport = transport ?? URLSessionTransport(timeout: configuration.timeout)
        self.now = now
        self.sleep = sleep
    }

    // MARK: - Calls

    /// Sends a StoreKit 2 transaction (`VerificationResult<Transaction>.jwsRepresentation`) for `appUserID`
    /// (`POST /v1/transactions`). The server verifies it, records it, and answers the user's entitlements.
    /// Finish the StoreKit transaction after this returns, not before.
    public func syncTransaction(_ jws: String, appUserID: String) async throws(StorekeeperClientError) -> SyncResult {
        try Self.check(appUserID)
        var body: [String: String] = ["appUserId": appUserID, "signedTransaction": jws]
        body["bundleId"] = configuration.bundleID
        let ticket = nextTicket()
        let answer: PostAnswer = try await call("POST", path: ["v1", "transactions"], query: [:], body: body)
        return remember(answer, for: appUserID, started: ticket)
    }

    /// Sends StoreKit 2's `AppTransaction` (`AppTransaction.shared`'s `jwsRepresentation`) for `appUserID`
    /// (`POST /v1/app-transactions`): who bought or downloaded the app, when, and which version first.
    public func syncAppTransaction(_ jws: String, appUserID: String) async throws(StorekeeperClientError)
        -> SyncResult
    {
        try Self.check(appUserID)
        var body: [String: String] = ["appUserId": appUserID, "signedAppTransaction": jws]
        body["bundleId"] = configuration.bundleID
        let ticket = nextTicket()
        let answer: PostAnswer = try await call("POST", path: ["v1", "app-transactions"], query: [:], body: body)
        return remember(answer, for: appUserID, started: ticket)
    }

    /// The user's entitlements (`GET /v1/entitlements/{appUserID}`): from this client's cache when its last
    /// answer is younger than `maxAge` seconds (default: the configuration's `cacheLifetime`; 0 asks the server)
    /// and none of the entitlements it shows active has expired since.
    public func entitlements(appUserID: String, maxAge: TimeInterval? = nil) async throws(StorekeeperClientError)
        -> Entitlements
    {
        try Self.check(appUserID)
        // A clock set back makes an answer look younger than it is: such an answer is read again.
        if let cached = cache[appUserID]?.entitlements {
            let age = now().timeIntervalSince(cached.receivedDate)
            // The server's time now, as far as this client can tell: its answer's, plus the answer's age.
            let serverNow = (cached.serverDate ?? cached.receivedDate).addingTimeInterval(max(0, age))
            let expired = cached.active.contains { ($0.expiresDate ?? .distantFuture) <= serverNow }
            if age >= 0, age < (maxAge ?? configuration.cacheLifetime), !expired { return cached }
        }
        var query: [String: String] = [:]
        query["bundleId"] = configuration.bundleID
        let ticket = nextTicket()
        let answer: EntitlementsAnswer = try await call(
            "GET", path: ["v1", "entitlements", appUserID], query: query, body: nil)
        return store(answer.entitlements(received: now()), for: appUserID, started: ticket, isPost: false)
    }

    /// The last entitlements read or synced for the user, whatever their age (check ``Entitlements/age(at:)``).
    public func cachedEntitlements(appUserID: String) -> Entitlements? { cache[appUserID]?.entitlements }

    /// Forgets the cached entitlements (of one user, or of all).
    public func invalidate(appUserID: String? = nil) {
        if let appUserID { cache[appUserID] = nil } else { cache.removeAll() }
    }

    // MARK: - Requests

    private func nextTicket() -> Int {
        tickets += 1
        return tickets
    }

    /// The post's own answer (whatever a read answered meanwhile), kept unless a newer one is.
    private func remember(_ answer: PostAnswer, for appUserID: String, started: Int) -> SyncResult {
        let entitlements = answer.entitlementsAnswer.entitlements(received: now())
        store(entitlements, for: appUserID, started: started, isPost: true)
        return SyncResult(
            entitlements: entitlements, purchases: (answer.purchases ?? []).map(\.purchase),
            appTransaction: answer.appTransaction?.facts, flags: answer.flags ?? [])
    }

    /// Keeps an answer under the id the app asked for, unless the one kept is newer (``Kept/isNewer(than:)``);
    /// answers what is kept.
    @discardableResult
    private func store(_ entitlements: Entitlements, for appUserID: String, started: Int, isPost: Bool)
        -> Entitlements
    {
        let candidate = Kept(entitlements: entitlements, started: started, arrived: nextTicket(), isPost: isPost)
        if let cached = cache[appUserID], !candidate.isNewer(than: cached) { return cached.entitlements }
        cache[appUserID] = candidate
        while cache.count > Self.cacheCapacity,
            let oldest = cache.min(by: { $0.value.entitlements.receivedDate < $1.value.entitlements.receivedDate })
        {
            cache[oldest.key] = nil
        }
        return entitlements
    }

    static func check(_ appUserID: String) throws(StorekeeperClientError) {
        guard (1...256).contains(appUserID.utf8.count) else {
            throw StorekeeperClientError(kind: .invalidArgument, message: "appUserID must be 1 to 256 bytes")
        }
        // The server takes no encoded `/`, `\` or NUL in a path, nor a `.` or `..` segment, so such an id could be
        // synced but not read; nor a control character (U+0000–U+001F, U+007F–U+009F) in a body.
        let control = appUserID.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
        guard !control, !appUserID.contains(where: { $0 == "/" || $0 == "\\" || $0.isNewline }),
            appUserID != ".", appUserID != ".."
        else {
            throw StorekeeperClientError(
                kind: .invalidArgument,
                message: "appUserID must not contain '/', '\\' or a control character, nor be '.' or '..'")
        }
    }

    /// The request for `path` (segments, each percent-encoded) and `query` under the server's URL.
    func request(_ method: String, path: [String], query: [String: String], body: [String: String]?)
        throws(StorekeeperClientError) -> URLRequest
    {
        var segment = CharacterSet.urlPathAllowed
        segment.remove(charactersIn: "/;?#")
        var text = configuration.serverURL.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        for part in path {
            guard let encoded = part.addingPercentEncoding(withAllowedCharacters: segment) else {
                throw StorekeeperClientError(kind: .invalidArgument, message: "cannot encode '\(part)' in a URL")
            }
            text += "/" + encoded
        }
        guard var components = URLComponents(string: text) else {
            throw StorekeeperClientError(kind: .invalidArgument, message: "the server URL is not a URL")
        }
        if !query.isEmpty {
            components.queryItems = query.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        }
        guard let url = components.url else {
            throw StorekeeperClientError(kind: .invalidArgument, message: "the server URL is not a URL")
        }
        var request = URLRequest(url: url, timeoutInterval: configuration.timeout)
        request.httpMethod = method
        request.setValue("Bearer " + configuration.publicKey, forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        if let body {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            do { request.httpBody = try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]) } catch {
                throw StorekeeperClientError(kind: .invalidArgument, message: "cannot encode the request body")
            }
        }
        return request
    }

    /// Sends a request, trying again with back-off while the failure is retryable, and decodes the answer.
    private func call<Answer: Decodable>(
        _ method: String, path: [String], query: [String: String], body: [String: String]?
    ) async throws(StorekeeperClientError) -> Answer {
        let request = try request(method, path: path, query: query, body: body)
        var attempt = 1
        while true {
            let failure: StorekeeperClientError
            var retryAfter: TimeInterval?
            do {
                let (data, response) = try await transport.send(request)
                if (200...299).contains(response.statusCode) { return try Self.decode(data) }
                failure = Self.serverError(status: response.statusCode, data: data)
                retryAfter = Self.retryAfter(response.value(forHTTPHeaderField: "Retry-After"))
            } catch let error as StorekeeperClientError {
                failure = error
            } catch {
                failure = StorekeeperClientError(kind: .transport, message: error.localizedDescription)
            }
            // A server asking for a longer pause than this client waits is not asked again sooner.
            guard failure.isRetryable, attempt < max(1, configuration.maxAttempts), !Task.isCancelled,
                (retryAfter ?? 0) <= configuration.maxBackoff
            else {
                throw failure
            }
            await sleep(backoff(attempt: attempt, retryAfter: retryAfter))
            // Cancelled while waiting: no further request.
            if Task.isCancelled { throw failure }
            attempt += 1
        }
    }

    /// The wait before try `attempt + 1`: the server's `Retry-After` when it gave one, otherwise
    /// `initialBackoff` doubled per try; never more than `maxBackoff`.
    func backoff(attempt: Int, retryAfter: TimeInterval?) -> TimeInterval {
        let doubled = configuration.initialBackoff * pow(2, Double(min(attempt - 1, 30)))
        let wait = min(configuration.maxBackoff, max(0, retryAfter ?? doubled), Self.longestPause)
        return wait.isFinite ? wait : Self.longestPause
    }

    /// The longest pause between two tries, whatever the configuration or the server says: a day.
    public static let longestPause: TimeInterval = 86_400

    /// `Retry-After` in seconds (HTTP's delay-seconds: digits only); nil for anything else.
    static func retryAfter(_ header: String?) -> TimeInterval? {
        guard let text = header?.trimmingCharacters(in: .whitespaces), !text.isEmpty, text.utf8.count <= 9,
            text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let seconds = Int(text)
        else { return nil }
        return TimeInterval(seconds)
    }

    static func decode<Answer: Decodable>(_ data: Data) throws(StorekeeperClientError) -> Answer {
        guard data.count <= maxAnswerBytes else {
            throw StorekeeperClientError(kind: .invalidAnswer, message: "the answer is larger than 4 MiB")
        }
        do { return try JSONDecoder().decode(Answer.self, from: data) } catch {
            throw StorekeeperClientError(kind: .invalidAnswer, message: "the server's answer does not read: \(error)")
        }
    }

    static func serverError(status: Int, data: Data) -> StorekeeperClientError {
        struct Body: Decodable {
            struct Detail: Decodable {
                let code: String?
                let message: String?
            }
            let error: Detail
        }
        let detail = data.count <= maxAnswerBytes ? (try? JSONDecoder().decode(Body.self, from: data))?.error : nil
        return StorekeeperClientError(
            kind: .server, status: status, code: detail?.code,
            message: detail?.message ?? HTTPURLResponse.localizedString(forStatusCode: status))
    }
}

/// URLSession as the transport (on Linux, FoundationNetworking over libcurl).
@available(macOS 12, iOS 15, tvOS 15, watchOS 8, visionOS 1, *)
struct URLSessionTransport: StorekeeperClient.Transport {
    let session: URLSession

    init(timeout: TimeInterval) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.httpShouldSetCookies = false
        session = URLSession(configuration: configuration)
    }

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else {
            throw StorekeeperClientError(kind: .invalidAnswer, message: "the answer is not HTTP")
        }
        return (data, http)
    }
}

// MARK: - The server's answers, as they arrive

struct EntitlementsAnswer: Decodable {
    struct Item: Decodable {
        let active: Bool
        let productId: String?
        let expiresDate: Int64?
        let willRenew: Bool
        let periodType: String
        let inGracePeriod: Bool
        let inBillingRetry: Bool
        let source: String
    }
    let appUserId: String
    let bundleId: String
    let entitlements: [String: Item]
    let requestDate: Int64?

    func entitlements(received: Date) -> Entitlements {
        var all: [String: Entitlement] = [:]
        for (name, item) in entitlements {
            all[name] = Entitlement(
                name: name, isActive: item.active, productID: item.productId, expiresDate: date(item.expiresDate),
                willRenew: item.willRenew, periodType: item.periodType, isInGracePeriod: item.inGracePeriod,
                isInBillingRetry: item.inBillingRetry, source: item.source)
        }
        return Entitlements(
            appUserID: appUserId, bundleID: bundleId, all: all, serverDate: date(requestDate), receivedDate: received)
    }
}

struct PostAnswer: Decodable {
    struct Purchase: Decodable {
        let transactionId: String
        let originalTransactionId: String
        let productId: String
        let type: String
        let purchaseDate: Int64?
        let expiresDate: Int64?
        let revoked: Bool

        var purchase: SyncedPurchase {
            SyncedPurchase(
                transactionID: transactionId, originalTransactionID: originalTransactionId, productID: productId,
                type: type, purchaseDate: date(purchaseDate), expiresDate: date(expiresDate), isRevoked: revoked)
        }
    }
    struct AppTransactionFacts: Decodable {
        let appTransactionId: String?
        let originalApplicationVersion: String?
        let originalPurchaseDate: Int64?
        let environment: String

        var facts: SyncedAppTransaction {
            SyncedAppTransaction(
                appTransactionID: appTransactionId, originalApplicationVersion: originalApplicationVersion,
                originalPurchaseDate: date(originalPurchaseDate), environment: environment)
        }
    }
    /// The answer's entitlements part, read as `GET /v1/entitlements` answers it.
    let entitlementsAnswer: EntitlementsAnswer
    let purchases: [Purchase]?
    let appTransaction: AppTransactionFacts?
    let flags: [String]?

    enum CodingKeys: String, CodingKey { case purchases, appTransaction, flags }

    init(from decoder: any Decoder) throws {
        entitlementsAnswer = try EntitlementsAnswer(from: decoder)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        purchases = try container.decodeIfPresent([Purchase].self, forKey: .purchases)
        appTransaction = try container.decodeIfPresent(AppTransactionFacts.self, forKey: .appTransaction)
        flags = try container.decodeIfPresent([String].self, forKey: .flags)
    }
}

private func date(_ milliseconds: Int64?) -> Date? {
    milliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) }
}
