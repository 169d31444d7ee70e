import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

@testable import PurchaseServer

/// `/metrics` is open to anyone who can reach it: its labels come from closed sets, never from what a sender wrote.
@Suite("Purchase server: metric labels")
struct MetricsLabelTests {
    @Test("A notification type this build does not know is counted as other, not under its own name")
    func unknownType() async throws {
        let (server, _) = try await FixtureServer.make()
        let responder = server.responder()
        func metrics() async -> String {
            var get = HTTPRequest(method: "GET", target: "/metrics", headers: [], body: [])
            get.remoteAddress = "127.0.0.1"
            return String(decoding: await responder.respond(to: get).body, as: UTF8.self)
        }
        #expect(await metrics().contains("storekeeper_inputs_stored 0"))
        var notification = try JWSFixtures.notification()
        notification["notificationType"] = .string("A_TYPE_FROM_THE_FUTURE_0123456789")
        let body = JSONWriter.bytes(.object(["signedPayload": .string(try JWSFixtures.sign(notification))]))
        var post = HTTPRequest(
            method: "POST", target: "/v1/notifications/apple/\(JWSFixtures.bundleID)",
            headers: [("Content-Type", "application/json")], body: body)
        post.remoteAddress = "127.0.0.1"
        let taken = await responder.respond(to: post)
        #expect(taken.status == 200, "\(String(decoding: taken.body, as: UTF8.self))")
        let text = await metrics()
        #expect(text.contains(#"storekeeper_notifications_total{type="other"} 1"#), "\(text)")
        #expect(!text.contains("A_TYPE_FROM_THE_FUTURE"))
        // The table counts are made at most once every five seconds (each reads a whole table, on an open
        // route): the input just stored is not counted yet.
        #expect(text.contains("storekeeper_inputs_stored 0"), "\(text)")
    }

    @Test("A counter's key lists its labels sorted by name, values escaped, however many there are")
    func keys() {
        #expect(Metrics.key("n", [:]) == "n")
        #expect(Metrics.key("n", ["type": "DID_RENEW"]) == #"n{type="DID_RENEW"}"#)
        let two = #"n{kind="notification",outcome="valid"}"#
        #expect(Metrics.key("n", ["kind": "notification", "outcome": "valid"]) == two)
        #expect(Metrics.key("n", ["outcome": "valid", "kind": "notification"]) == two)
        #expect(Metrics.key("n", ["b": "2", "a": "1", "c": "3"]) == #"n{a="1",b="2",c="3"}"#)
        #expect(Metrics.key("n", ["a": "x\"y\\z\n"]) == #"n{a="x\"y\\z\n"}"#)
    }
}
