import Foundation
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

@Suite("HTTP server: framing, limits and deadlines over a socket")
struct HTTPServerLiveTests {
    static func server(_ configure: (inout HTTPLimits) -> Void = { _ in }) throws -> HTTPServer {
        var limits = HTTPLimits()
        limits.maxBody = 4096
        limits.maxHeader = 4096
        limits.maxURL = 1024
        limits.maxQueryParameters = 32
        configure(&limits)
        return try HTTPServer(port: 0, limits: limits, responder: exampleRouter())
    }

    @Test(
        "Client mistakes are refused before any handler, each with a JSON body",
        arguments: [
            (
                "POST /_emulator/v1/devices/D/apps/b/payments HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}{}{}",
                400, "ambiguous_framing"
            ),
            (
                "POST /_emulator/v1/devices/D/apps/b/payments HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
                400, "ambiguous_framing"
            ),
            (
                "POST /_emulator/v1/devices/D/apps/b/payments HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
                501, "unsupported_transfer_encoding"
            ),
            (
                "POST /_emulator/v1/devices/D/apps/b/payments HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\nExpect: 100-continue\r\n\r\n",
                413, "payload_too_large"
            ),
            (
                "GET /_emulator/v1/clock HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 6000))\r\n\r\n",
                431, "header_fields_too_large"
            ),
            (
                "GET /_emulator/v1/clock?\(String(repeating: "a", count: 2000)) HTTP/1.1\r\nHost: x\r\n\r\n", 414,
                "uri_too_long"
            ),
            (
                "GET /_emulator/v1/clock?\((0..<40).map { "p\($0)=1" }.joined(separator: "&")) HTTP/1.1\r\nHost: x\r\n\r\n",
                400, "too_many_parameters"
            ),
            ("GET /_emulator/v1/clock?a=%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_query"),
        ])
    func refused(request: String, status: Int, code: String) async throws {
        let server = try Self.server()
        defer { server.stop() }
        let answer = try await RawClient.exchange(port: server.port, request)
        #expect(answer.status == status, "\(answer.raw.prefix(200))")
        #expect(answer.code == code)
        #expect(!answer.raw.contains("100 Continue"))
    }

    @Test("Repeated query parameters and escaped separators reach the handler decoded once")
    func query() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let answer = try await RawClient.exchange(
            port: server.port,
            "POST /_emulator/v1/devices/D/apps/b/payments?ids=a%26b&ids=c HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n{\"productId\":\"p\"}"
        )
        #expect(answer.status == 201, "\(answer.raw)")
        let body = try JSONParser.parse(Array(answer.raw[answer.raw.range(of: "\r\n\r\n")!.upperBound...].utf8))
        #expect(body["ids"] == .array([.string("a&b"), .string("c")]))
    }

    @Test("IPv6 loopback and localhost are served", arguments: ["::1", "localhost"])
    func addresses(host: String) async throws {
        let server = try HTTPServer(host: host, port: 0, responder: exampleRouter())
        defer { server.stop() }
        let port = server.port
        let text = try await RawClient.offPool {
            let client = try RawClient(port: port, host: host == "localhost" ? "localhost" : "::1")
            defer { client.close() }
            client.send("GET /_emulator/v1/clock HTTP/1.1\r\nHost: x\r\n\r\n")
            return client.receive()
        }
        #expect(text.hasPrefix("HTTP/1.1 200"))
    }

    @Test("An unknown or unusable host is a clear error")
    func badHost() {
        #expect(throws: HTTPError.self) { _ = try HTTPServer(host: "256.1.1.1", port: 0, responder: exampleRouter()) }
    }

    @Test("A handler past the request deadline is answered 503 for it; the server keeps serving")
    func deadline() async throws {
        let server = try Self.server { $0.requestTimeout = .milliseconds(300) }
        defer { server.stop() }
        let slow = try await RawClient.exchange(port: server.port, "GET /slow?ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(slow.status == 503)
        #expect(slow.code == "request_timeout")
        let fast = try await RawClient.exchange(
            port: server.port, "GET /_emulator/v1/clock HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(fast.status == 200)
    }

    @Test("Idle connections hold no thread: with many open, other clients and slow handlers are still answered")
    func idleConnections() async throws {
        // Long idle and head deadlines: with the whole suite in parallel, this task's sleeps can be delayed
        // past the defaults (30 s idle, 10 s for a request head), and the server would rightly close the idle
        // and trickling connections meanwhile.
        let server = try Self.server {
            $0.idleTimeout = 600
            $0.headTimeout = 600
        }
        defer { server.stop() }
        let idle = try (0..<300).map { _ in try RawClient(port: server.port) }
        defer { idle.forEach { $0.close() } }
        // Trickling clients: a request line that never completes.
        for client in idle.prefix(100) { client.send("GET /_emulator/v1/clo") }
        var opened = 0
        var trace: [Int] = []
        // Up to ten seconds: a loaded machine (the whole suite in parallel) may be slow to accept.
        for _ in 0..<1_000 {
            opened = server.openConnections
            if trace.count < 20 { trace.append(opened) }
            if opened >= 300 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        if opened < 300, let ss = ExternalTool.find("ss") {
            // Diagnostics: the listen socket's queue, and who holds connections to the port.
            let listen = try ExternalTool.run(ss, ["-ltnp", "sport = :\(server.port)"])
            let established = try ExternalTool.run(ss, ["-tnp", "dport = :\(server.port)"])
            Issue.record(
                "not accepted (open connections over time: \(trace)): \(listen.stdoutText)\n\(established.stdoutText.split(separator: "\n").prefix(5).joined(separator: "\n"))"
            )
        }
        #expect(opened >= 300)
        let port = server.port
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<32 {
                group.addTask {
                    let path = index % 2 == 0 ? "/slow?ms=100" : "/_emulator/v1/clock"
                    return try await RawClient.exchange(port: port, "GET \(path) HTTP/1.1\r\nHost: x\r\n\r\n").status
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 200, count: 32))
    }

    @Test("Stopping answers a request still running with 503 (or closes it), and nothing crashes")
    func stopWhileRunning() async throws {
        let server = try Self.server()
        let port = server.port
        // Connected and sent here, before stop (a task started for it could run late on a loaded machine).
        let client = try RawClient(port: port)
        defer { client.close() }
        // A minute: the stop comes first even when this task's sleep runs late (and past 30 s the request
        // deadline answers 503 anyway).
        client.send("GET /slow?ms=60000 HTTP/1.1\r\nHost: x\r\n\r\n")
        try await Task.sleep(for: .milliseconds(200))
        server.stop()
        let text = try await RawClient.offPool { client.receive() }
        let status = text.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        #expect(status == 503 || status == 0, "\(text)")
        #expect(throws: RawClient.RawError.self) { _ = try RawClient(port: port) }
    }
}

@Suite("HTTP client (libcurl) against the server")
struct HTTPClientTests {
    @Test("Sends methods, headers and bodies; returns statuses, headers and bodies")
    func roundTrip() async throws {
        let server = try HTTPServer(port: 0, responder: exampleRouter())
        defer { server.stop() }
        let client = HTTPClient(timeout: .seconds(5))
        let base = "http://127.0.0.1:\(server.port)"
        let created = try await client.send(
            "POST", base + "/_emulator/v1/devices/D/apps/b/payments?ids=1&ids=2",
            headers: [("Content-Type", "application/json")], body: Array(#"{"productId":"p"}"#.utf8))
        #expect(created.status == 201)
        #expect(created.header("content-type") == "application/json")
        #expect(try JSONParser.parse(created.body)["ids"] == .array([.string("1"), .string("2")]))
        let missing = try await client.send("GET", base + "/missing")
        #expect(missing.status == 404)
    }

    @Test("sendBlocking, on a thread of its own, answers as send does, errors included")
    func blocking() async throws {
        let server = try HTTPServer(port: 0, responder: exampleRouter())
        defer { server.stop() }
        let base = "http://127.0.0.1:\(server.port)"
        let (created, late) = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                let created = HTTPClient(timeout: .seconds(5)).sendBlocking(
                    "POST", base + "/_emulator/v1/devices/D/apps/b/payments?ids=1",
                    headers: [("Content-Type", "application/json")], body: Array(#"{"productId":"p"}"#.utf8))
                let late = HTTPClient(timeout: .milliseconds(200)).sendBlocking("GET", base + "/slow?ms=3000")
                continuation.resume(returning: (created, late))
            }
        }
        let response = try created.get()
        #expect(response.status == 201)
        #expect(try JSONParser.parse(response.body)["ids"] == .array([.string("1")]))
        guard case .failure(let error) = late else {
            Issue.record("a deadline of 200 ms must pass before a 3 s answer")
            return
        }
        #expect(error.code == .timedOut)
    }

    @Test("Deadlines, refused connections, bad URLs and oversized answers are errors of their kind")
    func failures() async throws {
        let server = try HTTPServer(port: 0, responder: exampleRouter())
        let base = "http://127.0.0.1:\(server.port)"
        await #expect(throws: HTTPClientError.self) {
            _ = try await HTTPClient(timeout: .milliseconds(200)).send("GET", base + "/slow?ms=3000")
        }
        do {
            _ = try await HTTPClient(timeout: .milliseconds(200)).send("GET", base + "/slow?ms=3000")
        } catch {
            #expect(error.code == .timedOut)
        }
        // A timeout of zero is the shortest there is, not none (libcurl's 0).
        do {
            _ = try await HTTPClient(timeout: .zero).send("GET", base + "/slow?ms=3000")
            Issue.record("answered past a zero timeout")
        } catch {
            #expect(error.code == .timedOut)
        }
        do {
            _ = try await HTTPClient(maxResponseBytes: 10).send("GET", base + "/_emulator/v1/clock")
        } catch {
            #expect(error.code == .responseTooLarge)
        }
        // A caller that wants the status only takes the body's first bytes and is answered.
        let truncating = HTTPClient(maxResponseBytes: 10, truncatesResponse: true)
        let cut = try await truncating.send("GET", base + "/_emulator/v1/clock")
        #expect(cut.status == 200 && cut.body.count == 10, "\(cut.status) \(cut.body.count)")
        let whole = try await HTTPClient().send("GET", base + "/_emulator/v1/clock")
        #expect(Array(whole.body.prefix(10)) == cut.body)
        do {
            _ = try await HTTPClient().send("GET", "ftp://example.invalid/x")
        } catch {
            #expect(error.code == .invalidURL)
        }
        server.stop()
        do {
            _ = try await HTTPClient().send("GET", base + "/_emulator/v1/clock?token=secret")
            Issue.record("a stopped server cannot answer")
        } catch {
            #expect(error.code == .connectFailed)
            #expect(!error.description.contains("secret"))
        }
        // Nor its credentials.
        let withUser = "http://alice:hunter2@127.0.0.1:\(server.port)/_emulator/v1/clock"
        do {
            _ = try await HTTPClient().send("GET", withUser)
            Issue.record("a stopped server cannot answer")
        } catch {
            #expect(!error.description.contains("hunter2") && !error.description.contains("alice"))
            #expect(error.description.contains("127.0.0.1:\(server.port)/_emulator/v1/clock"))
        }
        #expect(HTTPClient.printable("https://u:p@h/a@b?t=1") == "https://h/a@b")
        #expect(HTTPClient.printable("https://h/a@b") == "https://h/a@b")
    }
}

@Suite("HTTP server shutdown under load")
struct HTTPServerShutdownTests {
    @Test("Stopping while answers to suspended requests are being resumed never aborts (40 rounds)")
    func stopWhileResuming() async throws {
        for round in 0..<40 {
            var router = Router()
            router.get("/answer") { _, _ in
                // Not inline: the connection is suspended, then resumed with this answer.
                try await Task.sleep(for: .microseconds(Int64(round % 7) * 100))
                return HTTPResponse(status: 200, body: Array("ok".utf8))
            }
            let server = try HTTPServer(port: 0, responder: router.freeze())
            let url = "http://127.0.0.1:\(server.port)/answer"
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<6 {
                    group.addTask { _ = try? await HTTPClient(timeout: .seconds(2)).send("GET", url) }
                }
                // Stop as soon as the first answer is out, while the others are being resumed.
                _ = await group.next()
                server.stop()
            }
            // Stopped means stopped: a new request on the port is refused.
            let after = try? await HTTPClient(timeout: .seconds(2)).send("GET", url)
            #expect(after == nil, "round \(round): the stopped server still answered")
        }
    }
}

@Suite("HTTP server: graceful stop")
struct GracefulStopTests {
    final class Gate: Sendable {
        let open = Atomic<Bool>(false)
    }

    @Test("A graceful stop waits for a running handler to answer before stopping")
    func gracefulStop() async throws {
        let gate = Gate()
        var router = Router()
        router.get("/slow") { _, _ in
            // Held until the test opens the gate (a minute at most).
            for _ in 0..<6_000 where !gate.open.load(ordering: .acquiring) {
                try await Task.sleep(for: .milliseconds(10))
            }
            return .json(.object(["done": .bool(true)]))
        }
        let server = try HTTPServer(port: 0, responder: router.freeze())
        let url = "http://127.0.0.1:\(server.port)/slow"
        let answer = Task { try await HTTPClient(timeout: .seconds(120)).send("GET", url) }
        for _ in 0..<6_000 {
            if server.requestsInFlight == 1 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(server.requestsInFlight == 1)
        let stopping = Task { await server.stop(waitingUpTo: .seconds(120)) }
        try await Task.sleep(for: .milliseconds(200))
        #expect(server.requestsInFlight == 1, "the stop waits")
        gate.open.store(true, ordering: .releasing)
        await stopping.value
        let response = try await answer.value
        #expect(response.status == 200)
        #expect(server.requestsInFlight == 0)
    }
}
