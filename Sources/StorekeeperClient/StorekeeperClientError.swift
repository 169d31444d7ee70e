/// Why a call to the purchase server did not succeed: a value the app can branch on, with the server's own
/// `code` when the server answered (`verification_failed`, `unauthorized`, `invalid_request`, …).
public struct StorekeeperClientError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }
        /// The server answered with an error (`status`, `code` and `message` are the server's).
        public static let server = Kind("server")
        /// The server could not be reached, or did not answer in time.
        public static let transport = Kind("transport")
        /// The server answered something this client cannot read.
        public static let invalidAnswer = Kind("invalid_answer")
        /// The call itself was wrong (an empty or oversized user id, a bad URL).
        public static let invalidArgument = Kind("invalid_argument")
        public var description: String { rawValue }
    }

    public let kind: Kind
    /// The HTTP status, when the server answered.
    public let status: Int?
    /// The server's error code (`{"error": {"code": …}}`), when it gave one.
    public let code: String?
    public let message: String

    public init(kind: Kind, status: Int? = nil, code: String? = nil, message: String) {
        self.kind = kind
        self.status = status
        self.code = code
        self.message = message
    }

    /// Worth trying again later: the server was unreachable, overloaded or failing (5xx, 429).
    public var isRetryable: Bool {
        if kind == .transport { return true }
        guard kind == .server, let status else { return false }
        return status == 429 || status == 408 || (500...599).contains(status)
    }

    public var description: String {
        var text = kind.rawValue
        if let status { text += " \(status)" }
        if let code { text += " \(code)" }
        return text + ": " + message
    }
}
