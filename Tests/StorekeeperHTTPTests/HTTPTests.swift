import Foundation
import StorekeeperHTTP
import StorekeeperJSON
import Synchronization
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

func exampleRouter() -> Responder {
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
            ]), status: 201)
    }
    router.post("/explode") { _, _ in throw CancellationError() }
    return router.freeze()
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
        let lines = Mutex<[String]>([])
        let server = try HTTPServer(
            port: 0, responder: exampleRouter(), log: { line in lines.withLock { $0.append(line) } })
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
        #expect(lines.withLock { $0.count } == 3)
        #expect(lines.withLock { $0.last?.contains("response.status=404") } == true)
        server.stop()
        server.stop()
        await #expect(throws: (any Error).self) { _ = try await Self.send("GET", base + "/_emulator/v1/clock") }
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
