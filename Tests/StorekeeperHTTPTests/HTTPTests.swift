import Foundation
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

func exampleRouter() -> Responder { exampleRouterBuilder().freeze() }

func exampleRouterBuilder() -> Router {
    var router = Router()
    router.get("/_emulator/v1/clock") { _, _ in .json(.object(["now": .integer(1), "rate": .string("realTime")])) }
    router.post("/_emulator/v1/devices/{device}/apps/{bundleID}/payments") { request, context in
        let body = try request.jsonObject()
        guard let product = body["productId"]?.stringValue else {
            throw HTTPError(status: 400, code: "invalid_body", message: "productId is required")
        }
        return .json(
            .object([
                "device": .string(try context.parameter("device")),
                "bundle": .string(try context.parameter("bundleID")),
                "product": .string(product), "query": .string(request.query["ids"] ?? ""),
                "ids": .array(request.query.values("ids").map(JSONValue.string)),
            ]), status: 201)
    }
    router.post("/explode") { _, _ in throw CancellationError() }
    router.get("/slow") { request, _ in
        try await Task.sleep(for: .milliseconds(Int(request.query["ms"] ?? "50") ?? 50))
        return .json(.object(["slept": .bool(true)]))
    }
    router.get("/inApps/v1/missing") { _, _ in
        throw HTTPError(status: 404, code: "4040010", message: "Transaction id not found.")
    }
    router.renderErrors(under: "/inApps", with: .apple)
    return router
}

@Suite("Router (no sockets)")
struct RouterTests {
    let responder = exampleRouter()

    @Test("Routes match methods and paths and capture parameters, percent-decoded")
    func matching() async throws {
        let response = await responder.respond(
            to: HTTPRequest(
                method: "POST", path: "/_emulator/v1/devices/D1/apps/com.example%2Bapp/payments",
                body: Array(#"{"productId":"coins"}"#.utf8)))
        #expect(response.status == 201)
        let body = try JSONParser.parse(response.body)
        #expect(body["bundle"] == .string("com.example+app"))
        #expect(body["device"] == .string("D1"))
        #expect(response.headers.contains { $0.name == "Content-Type" && $0.value == "application/json" })
    }

    @Test("Unknown paths are 404, wrong methods 405, bad bodies 400, handler crashes 500 — all JSON errors")
    func errors() async throws {
        let cases: [(HTTPRequest, Int, String)] = [
            (HTTPRequest(method: "GET", path: "/nope"), 404, "not_found"),
            (HTTPRequest(method: "DELETE", path: "/_emulator/v1/clock"), 405, "method_not_allowed"),
            (
                HTTPRequest(method: "POST", path: "/_emulator/v1/devices/d/apps/b/payments", body: Array("{".utf8)),
                400, "invalid_body"
            ),
            (
                HTTPRequest(method: "POST", path: "/_emulator/v1/devices/d/apps/b/payments", body: Array("{}".utf8)),
                400, "invalid_body"
            ),
            (HTTPRequest(method: "POST", path: "/explode"), 500, "internal_error"),
        ]
        for (request, status, code) in cases {
            let response = await responder.respond(to: request)
            #expect(response.status == status, "\(request.method) \(request.path)")
            #expect(try JSONParser.parse(response.body)["error"]?["code"] == .string(code))
        }
    }
}

@Suite("Routing order: literal paths found by lookup route as the walk over every route did")
struct RouteOrderTests {
    /// `/items/{id}` comes first, so it answers `GET /items/new`; the literal route answers only `POST`.
    func responder(inline: Bool, log: InMemoryLogHandler) -> Responder {
        var router = Router()
        let parameter: @Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse = { _, context in
            context.logger.info("handled")
            return .json(.object(["route": .string("id"), "id": .string(try context.parameter("id"))]))
        }
        let literal: @Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse = { _, _ in
            .json(.object(["route": .string("new")]))
        }
        if inline {
            router.add("GET", "/items/{id}", inline: parameter)
            router.add("POST", "/items/new", inline: literal)
            router.add("GET", "/", inline: literal)
        } else {
            router.get("/items/{id}") { try parameter($0, $1) }
            router.post("/items/new") { try literal($0, $1) }
            router.get("/") { try literal($0, $1) }
        }
        router.use(AccessLogMiddleware())
        return router.freeze(logger: Logger(label: "test", handler: log))
    }

    @Test("Each method and spelling reaches the first route that matches it", arguments: [true, false])
    func order(inline: Bool) async throws {
        let log = InMemoryLogHandler()
        let responder = responder(inline: inline, log: log)
        let cases: [(String, String, Int, String?, String?)] = [
            ("GET", "/items/new", 200, "id", "new"),
            ("POST", "/items/new", 200, "new", nil),
            ("DELETE", "/items/new", 405, nil, nil),
            ("GET", "/items/n%65w", 200, "id", "new"),  // not the literal spelling: found by the walk
            ("POST", "/items/n%65w", 405, nil, nil),
            ("GET", "/items/x%zz", 400, nil, nil),
            ("GET", "/", 200, "new", nil),
            ("GET", "/items", 404, nil, nil),
        ]
        for (method, path, status, route, id) in cases {
            let request = HTTPRequest(method: method, path: path)
            let response: HTTPResponse
            if inline {
                response = try #require(responder.respondInline(to: request))
            } else {
                response = await responder.respond(to: request)
            }
            #expect(response.status == status, "\(method) \(path)")
            if let route {
                let body = try JSONParser.parse(response.body)
                #expect(body["route"] == .string(route), "\(method) \(path)")
                #expect(body["id"]?.stringValue == id, "\(method) \(path)")
            }
        }
        // A handler's own line and the access line carry the same request id.
        let handled = log.records.filter { $0.message == "handled" }
        #expect(handled.count == 2)
        for record in handled {
            let id = try #require(record.metadata["request.id"])
            #expect(log.records.filter { $0.metadata["request.id"] == id }.count == 2)
        }
        #expect(log.records.filter { $0.message == "request answered" }.count == cases.count)
    }
}

@Suite("HTTP server over loopback")
struct HTTPServerTests {
    static func send(_ method: String, _ url: String, body: [UInt8]? = nil) async throws -> (Int, [UInt8]) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = method
        if let body { request.httpBody = Data(body) }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, Array(data))
    }

    @Test("Binds port 0, answers requests with query strings and bodies, logs them, and stops")
    func roundTrip() async throws {
        let memory = InMemoryLogHandler()
        var router = exampleRouterBuilder()
        router.use(AccessLogMiddleware())
        let server = try HTTPServer(
            port: 0, responder: router.freeze(logger: Logger(label: "test", handler: memory)))
        #expect(server.port > 0)
        let base = "http://127.0.0.1:\(server.port)"
        let (status, body) = try await Self.send("GET", base + "/_emulator/v1/clock")
        #expect(status == 200)
        #expect(try JSONParser.parse(body)["rate"] == .string("realTime"))
        let (created, echo) = try await Self.send(
            "POST", base + "/_emulator/v1/devices/D/apps/com.example/payments?ids=a,b",
            body: Array(#"{"productId":"p"}"#.utf8))
        #expect(created == 201)
        #expect(try JSONParser.parse(echo)["query"] == .string("a,b"))
        let (missing, _) = try await Self.send("GET", base + "/missing")
        #expect(missing == 404)
        #expect(memory.records.count == 3)
        #expect(memory.records.last?.metadata["response.status"] == "404")
        #expect(memory.records.allSatisfy { $0.metadata["request.id"]?.isEmpty == false })
        server.stop()
        server.stop()
        await #expect(throws: (any Error).self) { _ = try await Self.send("GET", base + "/_emulator/v1/clock") }
    }

    @Test("A request a guard refuses is logged with the bytes of the answer it got, not 0")
    func refusalBytes() async throws {
        struct Refuse: InlineMiddleware {
            func handleInline(
                _ request: HTTPRequest, context: RequestContext,
                next: (HTTPRequest, RequestContext) throws -> HTTPResponse?
            ) throws -> HTTPResponse? { throw HTTPError(status: 403, code: "forbidden_host", message: "not this host") }
            func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
                throw HTTPError(status: 403, code: "forbidden_host", message: "not this host")
            }
        }
        let memory = InMemoryLogHandler()
        var router = exampleRouterBuilder()
        router.use(AccessLogMiddleware())
        router.use(Refuse())
        let responder = router.freeze(logger: Logger(label: "test", handler: memory))
        for inline in [true, false] {
            let request = HTTPRequest(method: "GET", path: "/_emulator/v1/clock")
            let response =
                inline ? try #require(responder.respondInline(to: request)) : await responder.respond(to: request)
            #expect(response.status == 403)
            #expect(memory.records.last?.metadata["response.bytes"] == String(response.body.count), "inline \(inline)")
            #expect(response.body.count > 0)
        }
    }

    @Test("A body over the limit is refused with 413 before any handler runs")
    func bodyLimit() async throws {
        var limits = HTTPLimits()
        limits.maxBody = 1024
        let server = try HTTPServer(port: 0, limits: limits, responder: exampleRouter())
        defer { server.stop() }
        let (status, body) = try await Self.send(
            "POST", "http://127.0.0.1:\(server.port)/_emulator/v1/devices/D/apps/b/payments",
            body: Array(repeating: 0x20, count: 4096))
        #expect(status == 413)
        #expect(try JSONParser.parse(body)["error"]?["code"] == .string("payload_too_large"))
    }

    @Test("Concurrent clients are all answered")
    func concurrency() async throws {
        let server = try HTTPServer(port: 0, responder: exampleRouter())
        defer { server.stop() }
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<40 {
                group.addTask { try await Self.send("GET", "http://127.0.0.1:\(server.port)/_emulator/v1/clock").0 }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 200, count: 40))
    }
}

@Suite("Query, middleware and error rendering (no sockets)")
struct MiddlewareTests {
    @Test(
        "Queries keep repeated names and decode once",
        arguments: [
            ("ids=a%26b&ids=c", ["a&b", "c"]), ("ids=a+b&x=1", ["a b"]), ("ids=%2541", ["%41"]), ("x=1", []),
            ("ids=&ids", ["", ""]),
        ])
    func query(encoded: String, ids: [String]) throws {
        let query = try #require(HTTPQuery(encoded: Substring(encoded)))
        #expect(query.values("ids") == ids)
    }

    @Test("A malformed escape or non-UTF-8 bytes are not a query", arguments: ["a=%zz", "a=%4", "a=%ff%fe"])
    func malformedQuery(encoded: String) {
        #expect(HTTPQuery(encoded: Substring(encoded)) == nil)
    }

    @Test("Path parameters are decoded once; a malformed escape is a 400")
    func pathDecoding() async throws {
        let responder = exampleRouter()
        let once = await responder.respond(
            to: HTTPRequest(
                method: "POST", path: "/_emulator/v1/devices/D%252F/apps/b/payments",
                body: Array(#"{"productId":"p"}"#.utf8)))
        #expect(try JSONParser.parse(once.body)["device"] == .string("D%2F"))
        let bad = await responder.respond(
            to: HTTPRequest(method: "POST", path: "/_emulator/v1/devices/D%zz/apps/b/payments", body: []))
        #expect(bad.status == 400)
        #expect(try JSONParser.parse(bad.body)["error"]?["code"] == .string("invalid_path"))
    }

    @Test("Errors under a prefix use that prefix's renderer (Apple's errorCode/errorMessage)")
    func appleErrors() async throws {
        let response = await exampleRouter().respond(to: HTTPRequest(method: "GET", path: "/inApps/v1/missing"))
        #expect(response.status == 404)
        let body = try JSONParser.parse(response.body)
        #expect(body["errorCode"] == .integer(4_040_010))
        #expect(body["errorMessage"] == .string("Transaction id not found."))
        let unknown = await exampleRouter().respond(to: HTTPRequest(method: "GET", path: "/inApps/v1/nothing"))
        // A path no route has: the general code of its status, never 0 (Apple's codes begin with their status).
        #expect(unknown.status == 404)
        #expect(try JSONParser.parse(unknown.body)["errorCode"] == .integer(4_040_000))
    }

    @Test("Every response carries a request id; a plain client id is kept, an odd one replaced")
    func requestIDs() async throws {
        let responder = exampleRouter()
        let kept = await responder.respond(
            to: HTTPRequest(method: "GET", path: "/_emulator/v1/clock", headers: [("X-Request-ID", "abc-123")]))
        #expect(kept.header("X-Request-ID") == "abc-123")
        let replaced = await responder.respond(
            to: HTTPRequest(method: "GET", path: "/_emulator/v1/clock", headers: [("X-Request-ID", "a b\u{1}")]))
        #expect(replaced.header("X-Request-ID") != "a b\u{1}")
        #expect(replaced.header("X-Request-ID")?.isEmpty == false)
    }

    struct Caller: HTTPMiddleware {
        func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
            var response = try await next(request, context)
            response.headers.append(("X-Caller", context.caller ?? "none"))
            return response
        }
    }

    @Test("Authentication names the caller or refuses; middleware runs outermost first")
    func authentication() async throws {
        var router = exampleRouterBuilder()
        router.use(
            AuthenticationMiddleware(prefixes: ["/_emulator"]) { request in
                guard request.header("Authorization") == "Bearer good" else {
                    throw HTTPError(status: 401, code: "unauthorized", message: "a bearer token is required")
                }
                return "tester"
            })
        // Inner to the authentication: it sees the caller, and does not run for a refused request.
        router.use(Caller())
        let responder = router.freeze()
        let refused = await responder.respond(to: HTTPRequest(method: "GET", path: "/_emulator/v1/clock"))
        #expect(refused.status == 401)
        #expect(refused.header("X-Caller") == nil)
        let allowed = await responder.respond(
            to: HTTPRequest(method: "GET", path: "/_emulator/v1/clock", headers: [("Authorization", "Bearer good")]))
        #expect(allowed.status == 200)
        #expect(allowed.header("X-Caller") == "tester")
        let open = await responder.respond(to: HTTPRequest(method: "GET", path: "/inApps/v1/missing"))
        #expect(open.status == 404)
    }

    @Test("Injected faults answer with their status and Retry-After for their count, then stop")
    func faults() async throws {
        let faults = FaultInjectionMiddleware()
        faults.add(.init(id: "1", pathGlob: "/_emulator/*/clock", status: 429, retryAfterSeconds: 3, remaining: 2))
        var router = exampleRouterBuilder()
        router.use(faults)
        let responder = router.freeze()
        for _ in 0..<2 {
            let response = await responder.respond(to: HTTPRequest(method: "GET", path: "/_emulator/v1/clock"))
            #expect(response.status == 429)
            #expect(response.header("Retry-After") == "3")
        }
        #expect(await responder.respond(to: HTTPRequest(method: "GET", path: "/_emulator/v1/clock")).status == 200)
        #expect(faults.current.isEmpty)
        #expect(FaultInjectionMiddleware.glob("/inApps/*", matches: "/inApps/v1/history/1"))
        #expect(!FaultInjectionMiddleware.glob("/inApps/*/x", matches: "/inApps/v1/y"))
    }
}

@Suite("Request bodies: control characters found over bytes")
struct ControlCharacterTests {
    @Test("Every scalar is a control character exactly when Unicode's general category says Cc, alone or in text")
    func everyScalar() {
        var disagreements: [UInt32] = []
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }  // surrogates
            let control = scalar.properties.generalCategory == .control
            let alone = String(Character(scalar))
            if RequestBody.hasControlCharacter(alone) != control
                || RequestBody.hasControlCharacter("aé" + alone + "€z") != control
            {
                disagreements.append(value)
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(10).map { String($0, radix: 16) })")
        #expect(!RequestBody.hasControlCharacter(String(repeating: "eyJhbGciOiJFUzI1NiJ9.", count: 1_000)))
    }

    @Test("A string member with a control character is refused; without one it is kept", arguments: ["\u{85}", "\t"])
    func refused(control: String) throws {
        let request = HTTPRequest(
            method: "POST", path: "/",
            body: JSONWriter.bytes(.object(["a": .string("x" + control), "b": .string("Ä")])))
        let body = try RequestBody(request, allowed: ["a", "b"])
        #expect(throws: HTTPError.self) { try body.string("a") }
        #expect(try body.string("b") == "Ä")
    }
}
