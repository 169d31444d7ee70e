import AppStoreEmulator
import Foundation
import StorekeeperHTTP
import StorekeeperJSON
import Testing

/// The control plane refuses web pages and foreign hosts; Apple's endpoints keep Apple's behaviour.
@Suite("Emulator control-plane protection")
struct ControlPlaneTests {
    static func response(
        _ responder: Responder, _ method: String, _ path: String, headers: [(String, String)], body: String = ""
    ) async -> (Int, String?) {
        let response = await responder.respond(
            to: HTTPRequest(
                method: method, path: path, headers: headers.map { (name: $0.0, value: $0.1) }, body: Array(body.utf8)))
        return (response.status, (try? JSONParser.parse(response.body))?["error"]?["code"]?.stringValue)
    }

    @Test("A page elsewhere cannot drive it: foreign Origin, text/plain or form posts, DNS-rebound Host")
    func browserAttacks() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let controlPlane = ControlPlaneGuard(listeningOn: "127.0.0.1")
        controlPlane.setPort(8080)
        let responder = EmulatorRoutes(harness.store).responder(guard: controlPlane)
        let accounts = "/_emulator/v1/accounts"
        let body = #"{"environment":"Sandbox"}"#
        let cases: [([(String, String)], Int, String)] = [
            (
                [("Host", "127.0.0.1:8080"), ("Origin", "http://attacker.example"), ("Content-Type", "text/plain")],
                403, "forbidden_origin"
            ),
            (
                [
                    ("Host", "127.0.0.1:8080"), ("Origin", "http://attacker.example"),
                    ("Content-Type", "application/json"),
                ], 403, "forbidden_origin"
            ),
            (
                [
                    ("Host", "127.0.0.1:8080"), ("Origin", "http://127.0.0.1:9999"),
                    ("Content-Type", "application/json"),
                ], 403, "forbidden_origin"
            ),
            ([("Host", "127.0.0.1:8080"), ("Content-Type", "text/plain")], 415, "unsupported_media_type"),
            (
                [("Host", "127.0.0.1:8080"), ("Content-Type", "application/x-www-form-urlencoded")], 415,
                "unsupported_media_type"
            ),
            ([("Host", "127.0.0.1:8080")], 415, "unsupported_media_type"),
            ([("Host", "attacker.example:8080"), ("Content-Type", "application/json")], 403, "forbidden_host"),
            ([("Content-Type", "application/json")], 403, "forbidden_host"),
        ]
        for (headers, status, code) in cases {
            let (got, error) = await Self.response(responder, "POST", accounts, headers: headers, body: body)
            #expect(got == status, "\(headers)")
            #expect(error == code, "\(headers)")
        }
        // The emulator's own origin, localhost and ::1 are fine.
        for host in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"] {
            let (status, _) = await Self.response(
                responder, "POST", accounts,
                headers: [("Host", host), ("Origin", "http://\(host)"), ("Content-Type", "application/json")],
                body: body)
            #expect(status == 201, "\(host)")
        }
        let (read, _) = await Self.response(responder, "GET", "/_emulator/v1/clock", headers: [("Host", "localhost")])
        #expect(read == 200)
    }

    @Test("Loopback is localhost, ::1 or an IPv4 literal in 127.0.0.0/8, not a name starting with 127.")
    func loopback() {
        for host in ["localhost", "::1", "[::1]", "127.0.0.1", "127.1.2.3", "127.255.255.255"] {
            #expect(ControlPlaneGuard.isLoopback(host), "\(host)")
        }
        for host in [
            "127.attacker.example", "127.0.0.1.nip.io", "127.0.0", "127.0.0.256", "128.0.0.1", "0.0.0.0", "127..0.1",
        ] {
            #expect(!ControlPlaneGuard.isLoopback(host), "\(host)")
        }
    }

    @Test("Apple's endpoints keep Apple's behaviour: any content type, sandbox host names")
    func appleEndpoints() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let responder = EmulatorRoutes(harness.store).responder(
            guard: ControlPlaneGuard(listeningOn: "127.0.0.1", token: "a-long-enough-token"))
        for headers in [
            [("Host", "sandbox.itunes.apple.com")], [("Host", "buy.itunes.apple.com"), ("Content-Type", "text/plain")],
            [],
        ] {
            let response = await responder.respond(
                to: HTTPRequest(
                    method: "POST", path: "/sandbox/verifyReceipt", headers: headers.map { (name: $0.0, value: $0.1) },
                    body: Array(#"{"receipt-data":"AAAA"}"#.utf8)))
            #expect(response.status == 200)
            #expect(try JSONParser.parse(response.body)["status"] == .integer(21002))
        }
    }

    @Test("With a token, the control plane needs Authorization: Bearer <token>")
    func token() async throws {
        let harness = try await AppStoreTests.Harness.make()
        let responder = EmulatorRoutes(harness.store).responder(
            guard: ControlPlaneGuard(
                listeningOn: "0.0.0.0", extraHosts: ["emulator.test"], token: "a-long-enough-token"))
        let base: [(String, String)] = [("Host", "emulator.test"), ("Content-Type", "application/json")]
        let (missing, code) = await Self.response(responder, "GET", "/_emulator/v1/clock", headers: base)
        #expect(missing == 401)
        #expect(code == "unauthorized")
        let (wrong, _) = await Self.response(
            responder, "GET", "/_emulator/v1/clock", headers: base + [("Authorization", "Bearer a-long-enough-tokeN")])
        #expect(wrong == 401)
        let (right, _) = await Self.response(
            responder, "GET", "/_emulator/v1/clock", headers: base + [("Authorization", "Bearer a-long-enough-token")])
        #expect(right == 200)
    }
}
