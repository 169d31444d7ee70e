import Foundation
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("One path, one check: non-canonical paths are refused before any middleware")
struct CanonicalPathTests {
    @Test(
        "Empty, dot and encoded-slash segments are not canonical",
        arguments: [
            "//_emulator/v1/clock", "///_emulator///v1//clock", "/_emulator//v1/clock", "/_emulator/v1/clock/",
            "/_emulator/./v1/clock", "/_emulator/v1/../v1/clock", "/.", "/..", "/%2e%2E/x", "/a/%2E", "/a%2Fb",
            "/a%2fb", "/a%5Cb", "/a\\b", "/a%00", "//", "", "_emulator/v1/clock", "http://evil/_emulator/v1/clock",
            "/a%2", "/a%",
        ])
    func refused(path: String) {
        #expect(CanonicalPath.problem(path) != nil, "\(path)")
    }

    @Test(
        "Ordinary paths are canonical",
        arguments: ["/", "/_emulator/v1/clock", "/a/b.c", "/a/...", "/a/.b", "/v1/subscribers/user%20one", "/a/%41"])
    func accepted(path: String) {
        #expect(CanonicalPath.problem(path) == nil, "\(path)")
    }

    /// Counts the requests a middleware sees (it must see none of the refused ones).
    final class Counting: InlineMiddleware {
        let seen = Atomic<Int>(0)
        func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
            seen.add(1, ordering: .relaxed)
            return try await next(request, context)
        }
        func handleInline(
            _ request: HTTPRequest, context: RequestContext,
            next: (HTTPRequest, RequestContext) throws -> HTTPResponse?
        ) throws -> HTTPResponse? {
            seen.add(1, ordering: .relaxed)
            return try next(request, context)
        }
    }

    @Test("A double slash is a 400 that no middleware or route sees; the canonical path reaches both")
    func beforeMiddleware() async {
        let counting = Counting()
        var router = exampleRouterBuilder()
        router.use(counting)
        let responder = router.freeze()
        for path in ["//_emulator/v1/clock", "/_emulator//v1/clock", "/_emulator/v1/./clock"] {
            let inline = responder.respondInline(to: HTTPRequest(method: "GET", path: path))
            #expect(inline?.status == 400)
            let answered = await responder.respond(to: HTTPRequest(method: "GET", path: path))
            #expect(answered.status == 400)
            #expect(
                (try? JSONParser.parse(answered.body))?["error"]?["code"]?.stringValue == "non_canonical_path")
        }
        #expect(counting.seen.load(ordering: .relaxed) == 0)
        let fine = await responder.respond(to: HTTPRequest(method: "GET", path: "/_emulator/v1/clock"))
        #expect(fine.status == 200)
        #expect(counting.seen.load(ordering: .relaxed) == 1)
        // Apple's paths keep Apple's error shape.
        let apple = await responder.respond(to: HTTPRequest(method: "GET", path: "/inApps//v1/missing"))
        #expect((try? JSONParser.parse(apple.body))?["errorCode"] != nil)
    }

    @Test("An alias answers one exact spelling as its canonical path, through the middleware; no other spelling")
    func alias() async {
        let counting = Counting()
        var router = Router()
        router.use(counting)
        router.add("GET", "/a/b", inline: { request, _ in .json(.object(["path": .string(request.path)])) })
        router.alias("/a/b/", to: "/a/b")
        let responder = router.freeze()
        let inline = responder.respondInline(to: HTTPRequest(method: "GET", path: "/a/b/"))
        let answered = await responder.respond(to: HTTPRequest(method: "GET", path: "/a/b/"))
        for response in [inline, answered] {
            #expect(
                response?.status == 200 && (try? JSONParser.parse(response?.body ?? []))?["path"] == .string("/a/b"))
        }
        #expect(counting.seen.load(ordering: .relaxed) == 2)
        for path in ["/a//b/", "//a/b/", "/a/b//"] {
            #expect(await responder.respond(to: HTTPRequest(method: "GET", path: path)).status == 400, "\(path)")
        }
        #expect(responder.bodyLimit(method: "POST", path: "/a/b/", authorization: nil, default: 1 << 20) == 1 << 20)
    }
}

@Suite("Connections that cannot starve the server; bodies bounded by who sends them", .serialized)
struct ConnectionProtectionTests {
    static func server(_ configure: (inout HTTPLimits) -> Void) throws -> HTTPServer {
        var limits = HTTPLimits()
        configure(&limits)
        var router = exampleRouterBuilder()
        router.post("/small") { request, _ in .json(.object(["bytes": .integer(Int64(request.body.count))])) }
        router.post("/large") { request, _ in .json(.object(["bytes": .integer(Int64(request.body.count))])) }
        router.limitBodies { _, path, authorization in
            path == "/large" && authorization == "Bearer right" ? nil : 1_000
        }
        return try HTTPServer(port: 0, limits: limits, responder: router.freeze())
    }

    /// Whether the server has closed the connection (a read sees the end, or an error), within `seconds`.
    static func closed(_ client: RawClient, within seconds: Int) -> Bool {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(client.descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var byte: UInt8 = 0
        return recv(client.descriptor, &byte, 1, 0) <= 0 && errno != EAGAIN
    }

    @Test("A client trickling its request head a byte at a time is closed at the head deadline")
    func slowHead() async throws {
        let server = try Self.server { $0.headTimeout = 2 }
        defer { server.stop() }
        let (wasClosed, stillOpenAfterHalf) = try await RawClient.offPool { () -> (Bool, Bool) in
            let client = try RawClient(port: server.port)
            defer { client.close() }
            let line = Array("GET /_emulator/v1/clock HTTP/1.1\r\nHost: x\r\nX-Slow: ".utf8)
            var index = 0
            // Half a second of bytes: still open (the deadline is for the whole head).
            for _ in 0..<5 {
                client.send(String(UnicodeScalar(line[index % line.count])))
                index += 1
                usleep(100_000)
            }
            var probe: UInt8 = 0
            let open = recv(client.descriptor, &probe, 1, Int32(MSG_DONTWAIT)) < 0 && errno == EAGAIN
            // Keep trickling: libmicrohttpd's idle timer restarts with every byte; the deadline does not.
            for _ in 0..<60 {
                client.send(String(UnicodeScalar(line[index % line.count])))
                index += 1
                usleep(100_000)
                var byte: UInt8 = 0
                if recv(client.descriptor, &byte, 1, Int32(MSG_DONTWAIT)) == 0 { return (true, open) }
            }
            return (Self.closed(client, within: 2), open)
        }
        #expect(stillOpenAfterHalf)
        #expect(wasClosed)
        #expect(server.protection.slowClosed >= 1)
        // A well-behaved client is still answered.
        let answer = try await RawClient.exchange(
            port: server.port, "GET /_emulator/v1/clock HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(answer.status == 200)
    }

    @Test("A body arriving slower than the minimum rate is closed after its grace")
    func slowBody() async throws {
        let server = try Self.server {
            $0.headTimeout = 1
            $0.minBodyRate = 500
        }
        defer { server.stop() }
        let wasClosed = try await RawClient.offPool { () -> Bool in
            let client = try RawClient(port: server.port)
            defer { client.close() }
            client.send("POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n")
            for _ in 0..<40 {
                client.send("a")
                usleep(100_000)
                var byte: UInt8 = 0
                if recv(client.descriptor, &byte, 1, Int32(MSG_DONTWAIT)) == 0 { return true }
            }
            return Self.closed(client, within: 2)
        }
        #expect(wasClosed)
        #expect(server.protection.slowClosed >= 1)
    }

    @Test("One address holds at most its cap; another address is still answered")
    func perAddress() async throws {
        let server = try Self.server { $0.perAddressLimit = 4 }
        defer { server.stop() }
        let held = try (0..<4).map { _ in try RawClient(port: server.port) }
        defer { held.forEach { $0.close() } }
        for _ in 0..<100 where server.openConnections < 4 { try await Task.sleep(for: .milliseconds(20)) }
        let refused = try await RawClient.offPool { () -> Bool in
            let fifth = try RawClient(port: server.port)
            defer { fifth.close() }
            return Self.closed(fifth, within: 2)
        }
        #expect(refused)
        #expect(server.protection.refused >= 1)
        let other = try await RawClient.offPool { () -> Int in
            let client = try RawClient(port: server.port, source: "127.0.0.2")
            defer { client.close() }
            client.send("GET /_emulator/v1/clock HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return client.receive().split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        }
        #expect(other == 200)
    }

    @Test("Handlers the deadline answered for still count until they end: past the limit a request is refused at once")
    func overdueHandlersCount() async throws {
        // Handlers that ignore cancellation, held until released.
        let held = Mutex<[CheckedContinuation<Void, Never>]>([])
        var router = Router()
        router.get("/stubborn") { _, _ in
            await withCheckedContinuation { continuation in held.withLock { $0.append(continuation) } }
            return .json(.object([:]))
        }
        router.get("/quick") { _, _ in .json(.object(["ok": .bool(true)])) }
        var limits = HTTPLimits()
        limits.maxConnections = 4
        limits.reservedConnections = 0
        limits.perAddressLimit = 0
        limits.requestTimeout = .milliseconds(200)
        let server = try HTTPServer(port: 0, limits: limits, responder: router.freeze())
        defer { server.stop() }
        let base = "http://127.0.0.1:\(server.port)"
        // Generous client timeouts: the whole suite runs beside this test on two cores. Each connection closes
        // with its answer, so that only the handlers stay.
        func get(_ path: String) async throws -> HTTPClient.Response {
            try await HTTPClient(timeout: .seconds(120)).send("GET", base + path, headers: [("Connection", "close")])
        }
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<4 { group.addTask { try await get("/stubborn").status } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses == [503, 503, 503, 503], "answered at the deadline")
        // Their four handlers still run: a fifth is refused at once, not started.
        let busy = try await get("/quick")
        #expect(busy.status == 503 && String(decoding: busy.body, as: UTF8.self).contains("busy"))
        for _ in 0..<6_000 where held.withLock({ $0.count }) < 4 { try await Task.sleep(for: .milliseconds(10)) }
        held.withLock { continuations in
            continuations.forEach { $0.resume() }
            continuations = []
        }
        var status = 0
        for _ in 0..<6_000 {
            status = try await get("/quick").status
            if status == 200 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(status == 200, "served again once they ended")
    }

    @Test("Near the connection limit, the reserve goes only to addresses that hold no connection")
    func reserve() async throws {
        let server = try Self.server {
            $0.maxConnections = 16
            $0.reservedConnections = 4
            $0.perAddressLimit = 0
        }
        defer { server.stop() }
        let held = try (0..<12).map { _ in try RawClient(port: server.port) }
        defer { held.forEach { $0.close() } }
        for _ in 0..<100 where server.openConnections < 12 { try await Task.sleep(for: .milliseconds(20)) }
        let sameAddressRefused = try await RawClient.offPool { () -> Bool in
            let ninth = try RawClient(port: server.port)
            defer { ninth.close() }
            return Self.closed(ninth, within: 2)
        }
        #expect(sameAddressRefused)
        let other = try await RawClient.offPool { () -> Int in
            let client = try RawClient(port: server.port, source: "127.0.0.3")
            defer { client.close() }
            client.send("GET /_emulator/v1/clock HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return client.receive().split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        }
        #expect(other == 200)
    }

    @Test("A route's own body limit applies before any byte is read: declared or chunked, 413 at once")
    func routeLimits() async throws {
        let server = try Self.server { _ in }
        defer { server.stop() }
        let body = String(repeating: "a", count: 5_000)
        // Declared over the route's 1,000 bytes: 413 without sending the body.
        let declared = try await RawClient.exchange(
            port: server.port, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        #expect(declared.status == 413)
        #expect(declared.code == "payload_too_large")
        // The same body to the large route with the right sender: read and handed over.
        let allowed = try await RawClient.exchange(
            port: server.port,
            "POST /large HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer right\r\nContent-Length: 5000\r\n\r\n" + body)
        #expect(allowed.status == 200)
        // ... and from anyone else, refused.
        let stranger = try await RawClient.exchange(
            port: server.port, "POST /large HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        #expect(stranger.status == 413)
        // Chunked past the limit: 413 as soon as the stream passes it, the rest never read.
        let chunked = try await RawClient.exchange(
            port: server.port,
            "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                + String(5_000, radix: 16) + "\r\n" + body + "\r\n")
        #expect(chunked.status == 413)
        // Under the limit, chunked: answered.
        let small = try await RawClient.exchange(
            port: server.port,
            "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        #expect(small.status == 200)
        // Every reservation is given back once its connection has finished (no leak).
        for _ in 0..<100 where server.protection.bufferedBytes > 0 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(server.protection.bufferedBytes == 0)
    }

    @Test("Bodies buffered for all requests together are capped: past the cap 503 server_busy, then free again")
    func bufferedCap() async throws {
        let server = try Self.server {
            $0.maxBufferedBytes = 1_500
            $0.headTimeout = 30
            $0.minBodyRate = 0
        }
        defer { server.stop() }
        let stalled = try RawClient(port: server.port)
        stalled.send("POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\nabc")
        for _ in 0..<100 where server.protection.bufferedBytes < 900 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(server.protection.bufferedBytes == 900)
        let busy = try await RawClient.exchange(
            port: server.port, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n")
        #expect(busy.status == 503)
        #expect(busy.code == "server_busy")
        stalled.close()
        for _ in 0..<100 where server.protection.bufferedBytes > 0 { try await Task.sleep(for: .milliseconds(20)) }
        let body = String(repeating: "b", count: 900)
        let fine = try await RawClient.exchange(
            port: server.port, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n" + body)
        #expect(fine.status == 200)
    }
}
