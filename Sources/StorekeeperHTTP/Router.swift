/// What a handler gets besides the request: the path parameters its route captured.
public struct RequestContext: Sendable {
    public var parameters: [String: String]

    /// A captured path parameter (`{name}` in the route).
    public func parameter(_ name: String) throws(HTTPError) -> String {
        guard let value = parameters[name] else {
            throw HTTPError(status: 500, code: "internal_error", message: "route has no parameter \(name)")
        }
        return value
    }
}

public typealias Handler = @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse

/// Routes built once and then frozen into a ``Responder`` (Hummingbird's builder/responder split).
public struct Router {
    private var routes: [Route] = []

    public init() {}

    /// Adds a route; `{name}` path segments capture one segment each.
    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping Handler) {
        routes.append(Route(method: method, segments: Self.segments(pattern), handler: handler))
    }

    public mutating func get(_ pattern: String, _ handler: @escaping Handler) { add("GET", pattern, handler) }
    public mutating func post(_ pattern: String, _ handler: @escaping Handler) { add("POST", pattern, handler) }

    /// The immutable responder.
    public func freeze() -> Responder { Responder(routes: routes) }

    static func segments(_ path: String) -> [Substring] { path.split(separator: "/", omittingEmptySubsequences: true) }

    struct Route: Sendable {
        let method: String
        let segments: [Substring]
        let handler: Handler

        func match(_ path: [Substring]) -> [String: String]? {
            guard path.count == segments.count else { return nil }
            var parameters: [String: String] = [:]
            for (pattern, actual) in zip(segments, path) {
                if pattern.hasPrefix("{") && pattern.hasSuffix("}") {
                    parameters[String(pattern.dropFirst().dropLast())] =
                        String(actual).removingPercentEncodingIfPossible
                } else if pattern != actual {
                    return nil
                }
            }
            return parameters
        }
    }
}

/// A frozen router: answers every request with a response — 404 and 405 as JSON errors, handler errors as
/// their ``HTTPError``, anything else as a 500 without details.
public struct Responder: Sendable {
    let routes: [Router.Route]

    public func respond(to request: HTTPRequest) async -> HTTPResponse {
        let path = Router.segments(request.path)
        var pathMatched = false
        for route in routes {
            guard let parameters = route.match(path) else { continue }
            pathMatched = true
            guard route.method == request.method else { continue }
            do {
                return try await route.handler(request, RequestContext(parameters: parameters))
            } catch let error as HTTPError {
                return error.response
            } catch {
                return HTTPError(
                    status: 500, code: "internal_error", message: "the server failed to handle the request"
                ).response
            }
        }
        if pathMatched {
            return HTTPError(status: 405, code: "method_not_allowed", message: "\(request.method) is not allowed here")
                .response
        }
        return HTTPError(status: 404, code: "not_found", message: "no such resource").response
    }
}

extension String {
    fileprivate var removingPercentEncodingIfPossible: String {
        var bytes: [UInt8] = []
        var iterator = utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            let pair = [iterator.next(), iterator.next()].compactMap { $0 }
            if pair.count == 2, let value = UInt8(String(decoding: pair, as: UTF8.self), radix: 16) {
                bytes.append(value)
            } else {
                bytes.append(byte)
                bytes.append(contentsOf: pair)
            }
        }
        return String(validating: bytes, as: UTF8.self) ?? self
    }
}
