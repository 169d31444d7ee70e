public import Foundation
public import StorekeeperHTTP

/// A call to the App Store Server API that did not succeed: Apple's error answer (status, `errorCode`,
/// `errorMessage`, `Retry-After`), no answer at all, an answer that is not what the endpoint returns, or a
/// signed field that failed verification.
public struct AppStoreServerAPIError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable {
        /// The API answered with an HTTP error status (``status``, ``code``).
        case api
        /// No answer arrived (``transport``).
        case transport
        /// The answer is not the JSON the endpoint returns.
        case invalidResponse
        /// A signed field of the answer failed ``SignedDataVerifier`` (``reason`` says why).
        case verificationFailed
        /// A request the client refuses to send (e.g. no key).
        case invalidRequest
    }

    public var kind: Kind
    /// The HTTP status, for `.api`.
    public var status: Int?
    /// Apple's `errorCode`, when the body had one.
    public var code: APIErrorCode?
    public var message: String
    /// When Apple says to try again (`Retry-After` of a 429), if it said.
    public var retryAfter: Date?
    public var transport: HTTPClientError?

    public init(
        kind: Kind, status: Int? = nil, code: APIErrorCode? = nil, message: String, retryAfter: Date? = nil,
        transport: HTTPClientError? = nil
    ) {
        self.kind = kind
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
        self.transport = transport
    }

    /// Whether Apple advises trying again: its retryable codes, a 429, a 5xx without a body, or no answer.
    public var isRetryable: Bool {
        switch kind {
        // No answer: worth another try, unless the same request must fail again (an answer past the size limit,
        // a URL libcurl refuses).
        case .transport: return ![.responseTooLarge, .invalidURL].contains(transport?.code)
        case .api:
            if let code { return code.isRetryable }
            return status == 429 || (status ?? 0) >= 500
        default: return false
        }
    }

    public var description: String {
        switch kind {
        case .api:
            let code = self.code.map { " \($0)" } ?? ""
            // Apple's 401 has no body: say what it refuses.
            let hint =
                status == 401 && self.code == nil
                ? " (the bearer token was refused: check the key, its key id, the issuer id and the bundle id)" : ""
            return "App Store Server API answered \(status ?? 0)\(code): \(message)\(hint)"
        case .transport: return "App Store Server API unreachable: \(message)"
        default: return message
        }
    }
}
