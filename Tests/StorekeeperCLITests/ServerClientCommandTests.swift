import AppStoreSignedData
import Foundation
import StorekeeperCLITestSupport
import StorekeeperCommandLine
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

@testable import StorekeeperCLI

/// Where `server subscriber` and `server events` find the server's secret key.
@Suite("CLI: the purchase server's secret key for the client commands")
struct SecretKeyTests {
    static func key(_ command: [String], _ environment: [String: String]) throws -> String {
        guard case .parsed(let arguments) = try Arguments.parse(command, spec: ServerClientCommands.subscriberSpec)
        else { throw CommandError.usage("not a run") }
        return try ServerClientCommands.secretKey(arguments, environment)
    }

    @Test("Options win over variables; a file's \"${NAME}\" is read from the environment")
    func precedence() throws {
        let directory = try ExternalTool.temporaryDirectory()
        let plain = directory.appendingPathComponent("plain.json")
        try Data(#"{"secretKey": "sk_from_the_file_0001"}"#.utf8).write(to: plain)
        let indirect = directory.appendingPathComponent("indirect.json")
        try Data(#"{"secretKey": "${MY_SERVER_KEY}"}"#.utf8).write(to: indirect)
        let variables = ["STOREKEEPER_SECRET_KEY": "sk_from_the_variable", "STOREKEEPER_SERVER_CONFIG": indirect.path]

        #expect(try Self.key(["alice", "--config", plain.path], variables) == "sk_from_the_file_0001")
        #expect(try Self.key(["alice", "--secret-key", "sk_given", "--config", plain.path], variables) == "sk_given")
        #expect(try Self.key(["alice"], variables) == "sk_from_the_variable")
        var noKey = variables
        noKey["STOREKEEPER_SECRET_KEY"] = nil
        noKey["MY_SERVER_KEY"] = "sk_through_the_file"
        #expect(try Self.key(["alice"], noKey) == "sk_through_the_file")
        #expect(throws: CommandError.self) { try Self.key(["alice", "--config", indirect.path], [:]) }
        #expect(throws: CommandError.self) { try Self.key(["alice"], [:]) }
    }
}

/// `server events` against a stand-in purchase server answering pages of a user's 1,203 events.
@Suite("CLI: server events follows the server's pages")
struct ServerEventsCommandTests {
    @Test(
        "Every event by default, through the cursors, up to 10,000 (then a cursor); --limit and --cursor take a part; the key is sent"
    )
    func pages() async throws {
        let total = Mutex(1_203)
        let seen = Mutex<[String]>([])
        var router = Router()
        router.add(
            "GET", "/v1/subscribers/{id}/events",
            inline: { request, _ in
                seen.withLock { $0.append(request.query["limit"] ?? "-") }
                guard
                    request.headers.first(where: { $0.name.lowercased() == "authorization" })?.value == "Bearer sk_key"
                else { return HTTPResponse(status: 401) }
                let after = Int(request.query["cursor"] ?? "0") ?? 0
                let limit = Int(request.query["limit"] ?? "50") ?? 50
                let count = total.withLock { $0 }
                // A total of 0 stands for a broken server: no events, and always a cursor on.
                let positions = count == 0 ? [] : Array((after + 1)...min(count, after + limit))
                let events = positions.map { JSONValue.object(["id": .string("E\($0)")]) }
                let next: JSONValue =
                    count == 0
                    ? .string(String(after)) : positions.count == limit ? .string(String(positions.last!)) : .null
                return HTTPResponse(
                    status: 200, headers: [("Content-Type", "application/json")],
                    body: JSONWriter.bytes(.object(["events": .array(events), "nextCursor": next])))
            })
        let server = try HTTPServer(port: 0, responder: router.freeze())
        defer { server.stop() }
        let base = [
            "server", "events", "alice", "--server", "http://127.0.0.1:\(server.port)", "--secret-key", "sk_key",
        ]

        let all = await CapturedConsole.run(base)
        #expect(all.status == 0, "\(all.stderr)")
        let answer = try JSONParser.parse(Array(all.stdout.utf8))
        let ids = answer["events"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
        #expect(ids.count == 1_203 && ids.first == "E1" && ids.last == "E1203" && answer["nextCursor"] == .null)
        #expect(seen.withLock { $0 } == ["500", "500", "500"], "pages of 500")

        let part = await CapturedConsole.run(base + ["--limit", "20", "--cursor", "1000"])
        let partAnswer = try JSONParser.parse(Array(part.stdout.utf8))
        let partIDs = partAnswer["events"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
        #expect(partIDs == (1001...1020).map { "E\($0)" } && partAnswer["nextCursor"] == .string("1020"))

        for limit in ["0", "100001"] {
            let refused = await CapturedConsole.run(base + ["--limit", limit])
            #expect(refused.status == 64, "\(refused.stderr)")
        }

        // A history longer than one call holds: the first 10,000 and where the next call goes on.
        total.withLock { $0 = 12_345 }
        let long = await CapturedConsole.run(base)
        let longAnswer = try JSONParser.parse(Array(long.stdout.utf8))
        let longIDs = longAnswer["events"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
        #expect(longIDs.count == 10_000 && longIDs.last == "E10000" && longAnswer["nextCursor"] == .string("10000"))
        let rest = await CapturedConsole.run(base + ["--cursor", "10000"])
        let restIDs = try JSONParser.parse(Array(rest.stdout.utf8))["events"]?.arrayValue ?? []
        #expect(restIDs.count == 2_345)

        // A server whose pages add nothing but always say there is more: an error, not a loop.
        total.withLock { $0 = 0 }
        let stuck = await CapturedConsole.run(base + ["--cursor", "7"])
        #expect(stuck.status == 1 && stuck.stderr.contains("does not move on"), "\(stuck.stderr)")
    }
}

/// `appstore buy --app-user-id` against a stand-in emulator that counts the payments it takes.
@Suite("CLI: appstore buy --app-user-id")
struct BuyAndPostCommandTests {
    @Test(
        "Without --server or --app-key nothing is bought (64); a refused post leaves the purchase printed (1)",
        .enabled(
            if: ProcessInfo.processInfo.environment["STOREKEEPER_APP_KEY"] == nil,
            "STOREKEEPER_APP_KEY is set in this shell: it would stand for the missing --app-key"))
    func checkedBeforeBuying() async throws {
        let payments = Mutex(0)
        var router = Router()
        router.add(
            "POST", "/_emulator/v1/devices/{device}/apps/{bundle}/payments",
            inline: { _, _ in
                payments.withLock { $0 += 1 }
                return HTTPResponse(
                    status: 201, headers: [("Content-Type", "application/json")],
                    body: JSONWriter.bytes(
                        .object(["jwsRepresentation": .string("a.b.c"), "state": .string("purchased")])))
            })
        router.add(
            "POST", "/v1/transactions",
            inline: { _, _ in
                HTTPResponse(
                    status: 422, headers: [("Content-Type", "application/json")],
                    body: JSONWriter.bytes(
                        .object(["error": .object(["code": .string("verification_failed"), "message": .string("no")])]))
                )
            })
        let server = try HTTPServer(port: 0, responder: router.freeze())
        defer { server.stop() }
        let base = "http://127.0.0.1:\(server.port)"
        let buy = [
            "appstore", "buy", "--url", base, "--device", UUID().uuidString, "--product", "p", "--app-user-id",
            "alice",
        ]
        let unplaced = await CapturedConsole.run(buy + ["--server", base])
        #expect(unplaced.status == 64 && unplaced.stderr.contains("--app-key"), "\(unplaced.stderr)")
        #expect(payments.withLock { $0 } == 0, "nothing bought")

        let refused = await CapturedConsole.run(buy + ["--server", base, "--app-key", "pk_test"])
        #expect(refused.status == 1 && refused.stderr.contains("verification_failed"), "\(refused.stderr)")
        #expect(payments.withLock { $0 } == 1)
        #expect(refused.stdout.contains("a.b.c"), "the purchase is printed: \(refused.stdout)")
    }
}

/// `jws verify --online`'s OCSP transport against a stand-in responder.
@Suite("CLI: OCSP through libcurl, bounded")
struct CurlOCSPTransportTests {
    @Test("The responder's answer comes back; another status, a non-HTTP URL and an answer over 1 MiB are errors")
    func bounded() async throws {
        let sizes = Mutex([16, 2 << 20])
        var router = Router()
        router.add(
            "POST", "/ocsp",
            inline: { request, _ in
                guard request.header("Content-Type") == "application/ocsp-request" else {
                    return HTTPResponse(status: 415)
                }
                let size = sizes.withLock { $0.isEmpty ? 0 : $0.removeFirst() }
                return HTTPResponse(status: size == 0 ? 500 : 200, body: [UInt8](repeating: 0x30, count: size))
            })
        let responder = try HTTPServer(port: 0, responder: router.freeze())
        defer { responder.stop() }
        let url = "http://127.0.0.1:\(responder.port)/ocsp"
        let transport = CurlOCSPTransport()
        #expect(try await transport.post([0x30, 0x00], to: url).count == 16)
        await #expect(throws: OCSPTransportError.self) { _ = try await transport.post([0x30, 0x00], to: url) }
        await #expect(throws: OCSPTransportError.self) { _ = try await transport.post([0x30, 0x00], to: url) }
        await #expect(throws: OCSPTransportError.self) {
            _ = try await transport.post([0x30], to: "file:///etc/passwd")
        }
    }
}

/// The two servers' commands pointed at the other server: the error says so.
@Suite("CLI: commands pointed at the wrong server")
struct WrongServerTests {
    /// The purchase server's answer to a request without its secret key.
    static let secretKeyRefusal = HTTPResponse(
        status: 401, headers: [("Content-Type", "application/json")],
        body: JSONWriter.bytes(
            .object([
                "error": .object([
                    "code": .string("unauthorized"),
                    "message": .string("this route needs Authorization: Bearer <secret key>"),
                ])
            ])))

    @Test("appstore commands at a purchase server, and server commands at an emulator, say which server it is")
    func wrongServer() async throws {
        var router = Router()
        router.add(
            "GET", "/_emulator/v1/apps/{bundle}/products",
            inline: { _, _ in WrongServerTests.secretKeyRefusal })
        let stand = try HTTPServer(port: 0, responder: router.freeze())
        defer { stand.stop() }
        let url = "http://127.0.0.1:\(stand.port)"
        let products = await CapturedConsole.run(["appstore", "products", "--url", url])
        #expect(products.status == 1 && products.stderr.contains("that is a purchase server"), "\(products.stderr)")
        // Nothing answers /v1/subscribers there: the router's 404.
        let subscriber = await CapturedConsole.run([
            "server", "subscriber", "u1", "--server", url, "--secret-key", "sk_0123456789abcdef",
        ])
        #expect(
            subscriber.status == 1 && subscriber.stderr.contains("is --server the emulator?"), "\(subscriber.stderr)")
    }
}

@Suite("CLI: server commands, refused keys and the default address")
struct ServerCommandRefusalTests {
    @Test("A refused secret key says so; without --server the commands ask serve's default address")
    func refusedKey() async throws {
        var router = Router()
        router.add(
            "GET", "/v1/subscribers/{id}",
            inline: { _, _ in WrongServerTests.secretKeyRefusal })
        let stand = try HTTPServer(port: 0, responder: router.freeze())
        defer { stand.stop() }
        let refused = await CapturedConsole.run([
            "server", "subscriber", "u1", "--server", "http://127.0.0.1:\(stand.port)", "--secret-key",
            "sk_wrong_wrong_1",
        ])
        #expect(refused.status == 1 && refused.stderr.contains("the secret key was refused"), "\(refused.stderr)")
        guard ProcessInfo.processInfo.environment["STOREKEEPER_SERVER"] == nil else { return }
        let defaulted = await CapturedConsole.run(["server", "subscriber", "u1", "--secret-key", "sk_wrong_wrong_1"])
        // (Something else on this machine may listen there; when nothing does, the error names the address.)
        #expect(defaulted.status != 64, "not a usage error: \(defaulted.stderr)")
        #expect(
            defaulted.status != 69 || defaulted.stderr.contains("http://127.0.0.1:8090"),
            "the default address is named: \(defaulted.stderr)")
    }
}
