import StorekeeperJSON
import StorekeeperTestSupport
import Testing

@testable import PurchaseServer

/// Raw V2 notifications are kept in a compact form that gives back the exact bytes.
@Suite("Purchase server: V2 notifications kept compact")
struct StoredInputTests {
    @Test("A notification as Apple posts it is kept in under a third of its bytes, its header named once")
    func compact() throws {
        let signed = try JWSFixtures.sign(try JWSFixtures.notification())
        let body = Array(#"{"signedPayload":"\#(signed)"}"#.utf8)
        let (stored, header) = try #require(StoredInput.compact(body))
        #expect(stored.count * 3 < body.count, "\(stored.count) of \(body.count) bytes")
        #expect(stored.first == UInt8(ascii: "~"))
        #expect(StoredInput.fingerprint(of: stored) == header.fingerprint)
        #expect(header.fingerprint.count == 64, "SHA-256 in hexadecimal")
        #expect(signed.utf8.starts(with: header.bytes))
        #expect(StoredInput.expand(stored, header: header.bytes) == body)
        // Another header does not give it back.
        #expect(StoredInput.expand(stored, header: Array("eyJhbGciOiJFUzI1NiJ9".utf8)) != body)
    }

    @Test("What is not exactly Apple's wrapping of one JWS is kept whole")
    func whole() throws {
        let signed = try JWSFixtures.sign(try JWSFixtures.notification())
        for body in [
            #"{ "signedPayload": "\#(signed)" }"#, #"{"signedPayload":"\#(signed)","x":1}"#, signed,
            #"{"signedPayload":"abc"}"#, #"{"signedPayload":""}"#,
            #"{"signedPayload":"\#(try JWSFixtures.sign(["note": .string("\"~.x")]))"}"#,
        ] {
            #expect(StoredInput.compact(Array(body.utf8)) == nil, "\(body.prefix(60))")
        }
    }
}
