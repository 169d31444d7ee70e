public import StorekeeperJSON

/// An HTTP request as the router sees it: method, path, decoded query, headers and the whole body.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path without the query string, e.g. `/_emulator/v1/clock`.
    public var path: String
    public var query: [String: String]
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(
        method: String, path: String, query: [String: String] = [:], headers: [(name: String, value: String)] = [],
        body: [UInt8] = []
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }

    /// The first header with this name, compared case-insensitively.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// The body as a JSON object; a client mistake (400) when it is not one.
    public func jsonObject() throws(HTTPError) -> JSONObject {
        guard let object = try? JSONParser.parse(body).objectValue else {
            throw HTTPError(status: 400, code: "invalid_body", message: "the request body is not a JSON object")
        }
        return object
    }
}

/// A response: status, headers and body.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response.
    public static func json(_ value: JSONValue, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: JSONWriter.bytes(value))
    }

    public static let noContent = HTTPResponse(status: 204)
}

/// A failure a handler reports to the client as `{"error": {"code", "message"}}` with an HTTP status.
public struct HTTPError: Error, Sendable, CustomStringConvertible {
    public let status: Int
    public let code: String
    public let message: String

    public init(status: Int, code: String, message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public var description: String { "\(status) \(code): \(message)" }

    public var response: HTTPResponse {
        .json(.object(["error": .object(["code": .string(code), "message": .string(message)])]), status: status)
    }
}
