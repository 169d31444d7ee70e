public import StorekeeperHTTP

/// A purchase-server failure: a caller's mistake, a refused input, a missing resource or a configuration
/// that cannot work; answered as `{"error": {"code", "message"}}` with `status`.
public struct PurchaseServerError: Error, Sendable, Hashable, CustomStringConvertible, HTTPErrorConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }
        public static let invalidRequest = Code("invalid_request")
        public static let unauthorized = Code("unauthorized")
        public static let notFound = Code("not_found")
        /// Signed data or a receipt that did not verify.
        public static let verificationFailed = Code("verification_failed")
        public static let configuration = Code("configuration")
        public static let unavailable = Code("unavailable")
        /// A purchase whose signed `appAccountToken` belongs to another user.
        public static let accountTokenMismatch = Code("app_account_token_mismatch")
        public var description: String { rawValue }
    }

    public let code: Code
    public let status: Int
    public let message: String

    public var description: String { "\(code): \(message)" }

    public var httpError: HTTPError { HTTPError(status: status, code: code.rawValue, message: message) }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    static func invalid(_ message: String) -> Self { Self(code: .invalidRequest, status: 400, message: message) }
    static func notFound(_ message: String) -> Self { Self(code: .notFound, status: 404, message: message) }
    static func unauthorized(_ message: String) -> Self { Self(code: .unauthorized, status: 401, message: message) }
    static func verification(_ message: String) -> Self {
        Self(code: .verificationFailed, status: 422, message: message)
    }
    static func configuration(_ message: String) -> Self { Self(code: .configuration, status: 500, message: message) }
    static func unavailable(_ message: String) -> Self { Self(code: .unavailable, status: 503, message: message) }
}
