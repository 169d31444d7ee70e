public import StorekeeperJSON

/// A query string decoded once: every parameter in order, repeated names kept (`?ids=a&ids=b`), names and
/// values percent-decoded exactly once (`ids=a%26b` is one value, `a&b`; `+` is a space, as in forms).
public struct HTTPQuery: Sendable, Hashable, ExpressibleByDictionaryLiteral {
    public var parameters: [Parameter]

    public struct Parameter: Sendable, Hashable {
        public var name: String
        public var value: String
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    public init(_ parameters: [Parameter] = []) { self.parameters = parameters }

    public init(dictionaryLiteral elements: (String, String)...) {
        parameters = elements.map { Parameter(name: $0.0, value: $0.1) }
    }

    /// Parses a raw query string (without `?`); nil when an escape is malformed or a name or value is not
    /// UTF-8.
    public init?(encoded: Substring) {
        var parameters: [Parameter] = []
        for pair in encoded.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = PercentDecoding.decode(parts[0], plusIsSpace: true),
                let value = parts.count > 1 ? PercentDecoding.decode(parts[1], plusIsSpace: true) : ""
            else { return nil }
            parameters.append(Parameter(name: name, value: value))
        }
        self.parameters = parameters
    }

    /// The first value of a parameter.
    public subscript(_ name: String) -> String? { parameters.first { $0.name == name }?.value }

    /// Every value of a parameter, in order.
    public func values(_ name: String) -> [String] { parameters.filter { $0.name == name }.map(\.value) }

    public var isEmpty: Bool { parameters.isEmpty }
}

/// Percent-decoding (RFC 3986 §2.1), done once, strictly.
public enum PercentDecoding {
    /// Decodes `%XX` escapes (and `+` as a space when asked); nil for a malformed escape or bytes that are
    /// not UTF-8.
    public static func decode(_ text: Substring, plusIsSpace: Bool = false) -> String? {
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "%") || (plusIsSpace && $0 == UInt8(ascii: "+")) })
        else { return String(text) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "%"):
                guard let high = iterator.next().flatMap(hex), let low = iterator.next().flatMap(hex) else {
                    return nil
                }
                bytes.append(high << 4 | low)
            case UInt8(ascii: "+") where plusIsSpace: bytes.append(UInt8(ascii: " "))
            default: bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// An HTTP request as handlers see it: method, raw path, decoded query, headers and the whole body.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path as received, without the query string and still percent-encoded, e.g.
    /// `/_emulator/v1/devices/D/apps/com.example%2Bapp/install`. The router decodes each segment once.
    public var path: String
    public var query: HTTPQuery
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// The client's address, when the request came over a socket.
    public var remoteAddress: String?

    public init(
        method: String, path: String, query: HTTPQuery = HTTPQuery(), headers: [(name: String, value: String)] = [],
        body: [UInt8] = [], remoteAddress: String? = nil
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
    }

    /// A request for a target such as `/a/b?x=1&y=2` (the query decoded once; a malformed one is dropped).
    public init(
        method: String, target: String, headers: [(name: String, value: String)] = [], body: [UInt8] = []
    ) {
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        self.init(
            method: method, path: String(parts[0]),
            query: parts.count > 1 ? HTTPQuery(encoded: parts[1]) ?? HTTPQuery() : HTTPQuery(), headers: headers,
            body: body)
    }

    /// The first header with this name, compared case-insensitively.
    public func header(_ name: String) -> String? {
        headers.first { HTTPHeaderName.equal($0.name, name) }?.value
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

    /// The first header with this name, compared case-insensitively.
    public func header(_ name: String) -> String? {
        headers.first { HTTPHeaderName.equal($0.name, name) }?.value
    }
}

/// An error a module of its own defines that knows how it reaches a client: the router answers it as its
/// ``httpError``, so no layer rethrows another's error by hand. Domain errors adopt it (the emulator's, the
/// purchase server's); an error that does not is a 500.
public protocol HTTPErrorConvertible: Error {
    var httpError: HTTPError { get }
}

/// A failure a handler reports to the client with an HTTP status. How it is written is the responder's
/// ``HTTPErrorRenderer`` (by default `{"error": {"code", "message"}}`).
public struct HTTPError: Error, Sendable, Hashable, CustomStringConvertible, HTTPErrorConvertible {
    public let status: Int
    public let code: String
    public let message: String
    /// Extra response headers (e.g. `Retry-After`).
    public var headers: [String: String]

    public init(status: Int, code: String, message: String, headers: [String: String] = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    public var httpError: HTTPError { self }

    public var description: String { "\(status) \(code): \(message)" }

    /// The default rendering: `{"error": {"code", "message"}}`.
    public var response: HTTPResponse { HTTPErrorRenderer.standard.render(self) }
}

/// Writes an ``HTTPError`` as a response: the emulator's `{"error": {"code", "message"}}`, or Apple's
/// `{"errorCode", "errorMessage"}` for the App Store Server API.
public struct HTTPErrorRenderer: Sendable {
    public let render: @Sendable (HTTPError) -> HTTPResponse

    public init(_ render: @escaping @Sendable (HTTPError) -> HTTPResponse) { self.render = render }

    public static let standard = HTTPErrorRenderer { error in
        var response = HTTPResponse.json(
            .object(["error": .object(["code": .string(error.code), "message": .string(error.message)])]),
            status: error.status)
        for (name, value) in error.headers.sorted(by: { $0.key < $1.key }) { response.headers.append((name, value)) }
        return response
    }

    /// Apple's shape: `code` is the numeric error code (e.g. "4040010"); for a non-numeric one (an unknown
    /// path, a method not allowed, an unexpected failure) the general code of the status, its three digits
    /// then zeros (5000000 for a 500, 4000000 for a 400), as Apple's codes begin with their status.
    public static let apple = HTTPErrorRenderer { error in
        let code = Int64(error.code) ?? Int64(min(max(error.status, 100), 599)) * 10_000
        var response = HTTPResponse.json(
            .object(["errorCode": .integer(code), "errorMessage": .string(error.message)]), status: error.status)
        for (name, value) in error.headers.sorted(by: { $0.key < $1.key }) { response.headers.append((name, value)) }
        return response
    }
}

/// Header names compared as HTTP does (ASCII letters without regard to case), without making lower-cased
/// copies: a lookup is on every request's path.
enum HTTPHeaderName {
    static func equal(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        return a.utf8.elementsEqual(b.utf8) { x, y in
            x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7A)
        }
    }
}

/// Addresses as the servers judge them.
public enum HTTPAddress {
    /// Whether a host or peer address is this machine's own (binding it exposes nothing beyond it; a peer with
    /// it is a process here, a local proxy say): `localhost`, `::1` (bracketed or not), an IPv4 literal in
    /// 127.0.0.0/8, or one mapped into IPv6 (`::ffff:127.0.0.1`); not a name that merely starts with `127.`.
    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" || host == "[::1]" { return true }
        let v4 = host.hasPrefix("::ffff:") ? String(host.dropFirst(7)) : host
        let parts = v4.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "127" else { return false }
        return parts.allSatisfy { part in
            (1...3).contains(part.count) && part.allSatisfy { $0.isASCII && $0.isNumber }
                && Int(part).map { $0 <= 255 } == true
        }
    }
}
