public import StorekeeperLogging

/// What a handler gets besides the request: the path parameters its route captured, the request id, a
/// logger carrying it, and the caller an authentication middleware recognised.
public struct RequestContext: Sendable {
    public var parameters: [String: String]
    public var requestID: String
    /// The server's logger, without the request id (the access log adds it to its own line).
    public var baseLogger: Logger
    /// Who the request is from, when an authentication middleware said so.
    public var caller: String?

    public init(parameters: [String: String] = [:], requestID: String = "", logger: Logger = .disabled) {
        self.parameters = parameters
        self.requestID = requestID
        self.baseLogger = logger
    }

    /// A logger carrying `request.id`: made when a handler asks for it, not for every request (most
    /// requests log only their access line).
    public var logger: Logger {
        get {
            requestID.isEmpty || baseLogger.level == .critical || baseLogger.metadata["request.id"] == requestID
                ? baseLogger : baseLogger.with(["request.id": requestID])
        }
        set { baseLogger = newValue }
    }

    /// A captured path parameter (`{name}` in the route).
    public func parameter(_ name: String) throws(HTTPError) -> String {
        guard let value = parameters[name] else {
            throw HTTPError(status: 500, code: "internal_error", message: "route has no parameter \(name)")
        }
        return value
    }
}

public typealias Handler = @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse

/// A handler that answers without awaiting, on the server's own thread: no task, no suspended
/// connection. Returning nil hands the request to the route's asynchronous handler instead.
public typealias InlineHandler = @Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse?

/// The largest body a request may send, decided from its method, path and `Authorization` header once its
/// headers are in and before any body byte is read (nil: the server's own `maxBody`). The path is
/// canonical: the server refuses the others before it asks.
public typealias BodyLimit = @Sendable (_ method: String, _ path: String, _ authorization: String?) -> Int?

/// One path, one check: a request path is either canonical — `/`, or `/` then segments that are not empty,
/// not `.` or `..`, and hold no encoded `/`, `\` or NUL and no segment that decodes to a dot segment — or it
/// is refused with 400 before any middleware sees it. Guards, authentication and routing then all decide on
/// the same spelling of a path (a double slash cannot reach a route past a prefix check).
public enum CanonicalPath {
    /// Nil when `path` is canonical; otherwise why not.
    public static func problem(_ path: String) -> String? {
        let bytes = path.utf8
        guard bytes.first == UInt8(ascii: "/") else { return "the path must start with /" }
        if bytes.count == 1 { return nil }
        var segment = 0  // length of the current segment
        var dots = 0  // its dots, literal or %2E
        var index = bytes.index(after: bytes.startIndex)
        func endSegment() -> String? {
            if segment == 0 { return "the path has an empty segment (// or a trailing /)" }
            if dots == segment && segment <= 2 { return "the path has a . or .. segment" }
            return nil
        }
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "/") {
                if let problem = endSegment() { return problem }
                segment = 0
                dots = 0
                index = bytes.index(after: index)
                continue
            }
            if byte == UInt8(ascii: "\\") { return "the path has a backslash" }
            if byte == UInt8(ascii: "%") {
                let first = bytes.index(after: index)
                guard first < bytes.endIndex, bytes.index(after: first) < bytes.endIndex else {
                    return "the path has a malformed percent-escape"
                }
                let escape = String(decoding: bytes[first...bytes.index(after: first)], as: UTF8.self).uppercased()
                if ["2F", "5C", "00"].contains(escape) { return "the path has an encoded /, \\ or NUL" }
                if escape == "2E" { dots += 1 }
                segment += 1
                index = bytes.index(first, offsetBy: 2)
                continue
            }
            if byte == UInt8(ascii: ".") { dots += 1 }
            segment += 1
            index = bytes.index(after: index)
        }
        return endSegment()
    }
}

/// A middleware that can also run inline (synchronously), so that routes with an ``InlineHandler`` stay on
/// the server's thread. Routes run inline only when every middleware can.
public protocol InlineMiddleware: HTTPMiddleware {
    func handleInline(
        _ request: HTTPRequest, context: RequestContext,
        next: (HTTPRequest, RequestContext) throws -> HTTPResponse?
    ) throws -> HTTPResponse?
}

/// Wraps every request on its way to the route (Hummingbird's `RouterMiddleware`): request ids, access
/// logs, authentication, fault injection. A middleware may answer itself, or call `next`.
public protocol HTTPMiddleware: Sendable {
    func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse
}

/// Routes built once and then frozen into a ``Responder`` (Hummingbird's builder/responder split).
public struct Router {
    private var routes: [Route] = []
    private var middleware: [any HTTPMiddleware] = []
    private var renderers: [(prefix: String, renderer: HTTPErrorRenderer)] = []
    private var bodyLimit: BodyLimit?
    private var aliases: [String: String] = [:]

    public init() {}

    /// Answers `path`, exactly as spelt (a trailing slash, say, that a published client sends), as `canonical`:
    /// the request then goes through the middleware and routes as `canonical` does. Nothing else is
    /// rewritten, so no other spelling reaches a route.
    public mutating func alias(_ path: String, to canonical: String) {
        precondition(CanonicalPath.problem(canonical) == nil, "an alias leads to a canonical path")
        aliases[path] = canonical
    }

    /// Who may send how much: consulted by the server before it reads a body (see ``BodyLimit``).
    public mutating func limitBodies(_ rule: @escaping BodyLimit) { bodyLimit = rule }

    /// Adds a route; `{name}` path segments capture one segment each, percent-decoded once.
    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping Handler) {
        routes.append(Route(method: method, segments: Self.segments(pattern), handler: handler, inline: nil))
    }

    /// Adds a route that answers inline when it can (`inline` returns a response) and otherwise awaits
    /// `handler`.
    public mutating func add(
        _ method: String, _ pattern: String, inline: @escaping InlineHandler, otherwise handler: @escaping Handler
    ) {
        routes.append(Route(method: method, segments: Self.segments(pattern), handler: handler, inline: inline))
    }

    /// Adds a route that never awaits.
    public mutating func add(
        _ method: String, _ pattern: String,
        inline: @escaping @Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse
    ) {
        add(method, pattern, inline: { try inline($0, $1) }, otherwise: { try inline($0, $1) })
    }

    public mutating func get(_ pattern: String, _ handler: @escaping Handler) { add("GET", pattern, handler) }
    public mutating func post(_ pattern: String, _ handler: @escaping Handler) { add("POST", pattern, handler) }
    public mutating func put(_ pattern: String, _ handler: @escaping Handler) { add("PUT", pattern, handler) }
    public mutating func delete(_ pattern: String, _ handler: @escaping Handler) { add("DELETE", pattern, handler) }

    /// Adds a middleware; the first added is the outermost.
    public mutating func use(_ middleware: any HTTPMiddleware) { self.middleware.append(middleware) }

    /// Errors under `prefix` are written by `renderer` (the longest matching prefix wins).
    public mutating func renderErrors(under prefix: String, with renderer: HTTPErrorRenderer) {
        renderers.append((prefix, renderer))
        renderers.sort { $0.prefix.count > $1.prefix.count }
    }

    /// The immutable responder.
    public func freeze(logger: Logger = .disabled, requestID: @escaping @Sendable () -> String = RequestIDs.next)
        -> Responder
    {
        Responder(
            routes: routes, middleware: middleware, renderers: renderers, bodyLimit: bodyLimit, aliases: aliases,
            logger: logger, requestID: requestID)
    }

    static func segments(_ path: String) -> [Substring] { path.split(separator: "/", omittingEmptySubsequences: true) }

    struct Route: Sendable {
        let method: String
        let segments: [Substring]
        let handler: Handler
        let inline: InlineHandler?

        /// The captured parameters, nil when the path does not match; throws for a malformed escape.
        func match(_ path: [Substring]) throws(HTTPError) -> [String: String]? {
            guard path.count == segments.count else { return nil }
            var parameters: [String: String] = [:]
            for (pattern, actual) in zip(segments, path) {
                if pattern.hasPrefix("{") && pattern.hasSuffix("}") {
                    guard let decoded = PercentDecoding.decode(actual) else {
                        throw HTTPError(
                            status: 400, code: "invalid_path", message: "the path has a malformed percent-escape")
                    }
                    parameters[String(pattern.dropFirst().dropLast())] = decoded
                } else if pattern != actual {
                    return nil
                }
            }
            return parameters
        }
    }
}

/// A frozen router: answers every request with a response — 404 and 405 as errors, handler errors as
/// their ``HTTPError``, anything else as a 500 without details — written by the path's error renderer.
public struct Responder: Sendable {
    let routes: [Router.Route]
    let middleware: [any HTTPMiddleware]
    let renderers: [(prefix: String, renderer: HTTPErrorRenderer)]
    let limitBodies: BodyLimit?
    /// Exact spellings answered as a canonical path (``Router/alias(_:to:)``).
    let aliases: [String: String]
    let logger: Logger
    let requestID: @Sendable () -> String
    /// For each path a route spells without parameters, every route that matches it, in order, with what
    /// each captures: such a path is routed with one lookup instead of a walk over every route.
    let literalPaths: [String: [(route: Router.Route, parameters: [String: String])]]
    /// The middleware chain run inline, built once; nil when some middleware cannot run inline.
    private var inlineChain: (@Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse?)? = nil

    init(
        routes: [Router.Route], middleware: [any HTTPMiddleware],
        renderers: [(prefix: String, renderer: HTTPErrorRenderer)], bodyLimit: BodyLimit?,
        aliases: [String: String] = [:], logger: Logger, requestID: @escaping @Sendable () -> String
    ) {
        self.routes = routes
        self.middleware = middleware
        self.renderers = renderers
        self.limitBodies = bodyLimit
        self.aliases = aliases
        self.logger = logger
        self.requestID = requestID
        let literalPaths = Self.literalPaths(routes)
        self.literalPaths = literalPaths
        let inline = middleware.compactMap { $0 as? any InlineMiddleware }
        guard inline.count == middleware.count else { return }
        let routing = Self.routeInline(routes: routes, literalPaths: literalPaths, renderers: renderers)
        var chain: @Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse? = routing
        for current in inline.reversed() {
            let next = chain
            chain = { request, context in try current.handleInline(request, context: context, next: next) }
        }
        inlineChain = chain
    }
    /// Answers on the calling thread when the route (and every middleware) can; nil means "call
    /// ``respond(to:)``". Unknown paths and methods are answered here too.
    public func respondInline(to request: HTTPRequest) -> HTTPResponse? {
        let request = aliased(request)
        if let refused = refuseNonCanonical(request) { return refused }
        guard let inlineChain else { return nil }
        let context = makeContext(request)
        var response: HTTPResponse
        do {
            guard let answered = try inlineChain(request, context) else { return nil }
            response = answered
        } catch {
            response = render(error, for: request, context: context)
        }
        response.headers.append(("X-Request-ID", context.requestID))
        return response
    }

    private func makeContext(_ request: HTTPRequest) -> RequestContext {
        let id = request.header("X-Request-ID").flatMap(RequestIDs.accept) ?? requestID()
        return RequestContext(requestID: id, logger: logger)
    }

    private static func literalPaths(_ routes: [Router.Route]) -> [String: [(
        route: Router.Route, parameters: [String: String]
    )]] {
        var table: [String: [(route: Router.Route, parameters: [String: String])]] = [:]
        for route in routes where !route.segments.contains(where: { $0.hasPrefix("{") }) {
            let path = "/" + route.segments.joined(separator: "/")
            guard table[path] == nil else { continue }
            table[path] = routes.compactMap { other in (try? other.match(route.segments))?.map { (other, $0) } }
        }
        return table
    }

    /// The routes matching a path, in order, with their parameters: from the table when the path is one a
    /// route spells, otherwise found one by one as asked for (a malformed escape throws when reached).
    struct Matches {
        private var known: ArraySlice<(route: Router.Route, parameters: [String: String])>?
        private var routes: ArraySlice<Router.Route>
        private let segments: [Substring]

        init(
            _ path: String, routes: [Router.Route],
            literalPaths: [String: [(route: Router.Route, parameters: [String: String])]]
        ) {
            known = literalPaths[path].map { $0[...] }
            self.routes = routes[...]
            segments = known == nil ? Router.segments(path) : []
        }

        mutating func next() throws(HTTPError) -> (route: Router.Route, parameters: [String: String])? {
            if known != nil { return known!.popFirst() }
            while let route = routes.popFirst() {
                if let parameters = try route.match(segments) { return (route, parameters) }
            }
            return nil
        }
    }

    private static func routeInline(
        routes: [Router.Route], literalPaths: [String: [(route: Router.Route, parameters: [String: String])]],
        renderers: [(prefix: String, renderer: HTTPErrorRenderer)]
    ) -> @Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse? {
        { request, context in
            var pathMatched = false
            var matches = Matches(request.path, routes: routes, literalPaths: literalPaths)
            while let (route, parameters) = try matches.next() {
                pathMatched = true
                guard route.method == request.method else { continue }
                guard let inline = route.inline else { return nil }
                var context = context
                context.parameters = parameters
                do {
                    return try inline(request, context)
                } catch {
                    return render(error, for: request, context: context, renderers: renderers)
                }
            }
            if pathMatched {
                throw HTTPError(
                    status: 405, code: "method_not_allowed", message: "\(request.method) is not allowed here")
            }
            throw HTTPError(status: 404, code: "not_found", message: "no such resource")
        }
    }

    public func respond(to request: HTTPRequest) async -> HTTPResponse {
        let request = aliased(request)
        if let refused = refuseNonCanonical(request) { return refused }
        let context = makeContext(request)
        var response: HTTPResponse
        do {
            response = try await chain(0)(request, context)
        } catch {
            response = render(error, for: request, context: context)
        }
        response.headers.append(("X-Request-ID", context.requestID))
        return response
    }

    /// The largest body `method` `path` may send from a sender with this `Authorization` header.
    public func bodyLimit(method: String, path: String, authorization: String?, default maxBody: Int) -> Int {
        let path = aliases.isEmpty ? path : aliases[path] ?? path
        // A non-canonical path is refused with 400 after its headers; its body is not needed for that.
        guard CanonicalPath.problem(path) == nil else { return min(maxBody, 16 << 10) }
        return min(maxBody, max(0, limitBodies?(method, path, authorization) ?? maxBody))
    }

    /// An error found before routing (a malformed query, say), written as its path's errors are.
    public func refusal(_ error: HTTPError, for request: HTTPRequest) -> HTTPResponse {
        let context = makeContext(request)
        var response = render(error, for: request, context: context)
        response.headers.append(("X-Request-ID", context.requestID))
        return response
    }

    /// The request with its path's alias in its place, if it has one.
    private func aliased(_ request: HTTPRequest) -> HTTPRequest {
        guard !aliases.isEmpty, let canonical = aliases[request.path] else { return request }
        var request = request
        request.path = canonical
        return request
    }

    /// 400 for a path that is not canonical, before any middleware or route sees it.
    private func refuseNonCanonical(_ request: HTTPRequest) -> HTTPResponse? {
        guard let problem = CanonicalPath.problem(request.path) else { return nil }
        return refusal(HTTPError(status: 400, code: "non_canonical_path", message: problem), for: request)
    }

    /// The error as this path's renderer writes it.
    func render(_ error: any Error, for request: HTTPRequest, context: RequestContext) -> HTTPResponse {
        Self.render(error, for: request, context: context, renderers: renderers)
    }

    static func render(
        _ error: any Error, for request: HTTPRequest, context: RequestContext,
        renderers: [(prefix: String, renderer: HTTPErrorRenderer)]
    ) -> HTTPResponse {
        let renderer = renderers.first { request.path.hasPrefix($0.prefix) }?.renderer ?? .standard
        if let error = error as? any HTTPErrorConvertible { return renderer.render(error.httpError) }
        context.logger.error("request.failed", ["error": String(describing: type(of: error))])
        return renderer.render(
            HTTPError(status: 500, code: "internal_error", message: "the server failed to handle the request"))
    }

    private func chain(_ index: Int) -> Handler {
        guard index < middleware.count else { return route }
        let next = chain(index + 1)
        let current = middleware[index]
        return { request, context in try await current.handle(request, context: context, next: next) }
    }

    private func route(_ request: HTTPRequest, _ context: RequestContext) async throws -> HTTPResponse {
        var pathMatched = false
        var matches = Matches(request.path, routes: routes, literalPaths: literalPaths)
        while let (route, parameters) = try matches.next() {
            pathMatched = true
            guard route.method == request.method else { continue }
            var context = context
            context.parameters = parameters
            do {
                return try await route.handler(request, context)
            } catch {
                return render(error, for: request, context: context)
            }
        }
        if pathMatched {
            throw HTTPError(status: 405, code: "method_not_allowed", message: "\(request.method) is not allowed here")
        }
        throw HTTPError(status: 404, code: "not_found", message: "no such resource")
    }
}
