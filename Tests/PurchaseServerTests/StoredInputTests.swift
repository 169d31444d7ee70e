import AppStoreSignedData
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

    @Test(
        "Made from the payload its verification decoded, the compact form is the same; a body it does not match is not kept so"
    )
    func fromVerifiedPayload() throws {
        let signed = try JWSFixtures.sign(try JWSFixtures.notification())
        let body = Array(#"{"signedPayload":"\#(signed)"}"#.utf8)
        let parts = signed.split(separator: ".")
        let payload = try #require(Base64URL.decode(Array(parts[1].utf8)))
        let (stored, header) = try #require(StoredInput.compact(body, token: signed, payload: payload))
        let whole = try #require(StoredInput.compact(body))
        #expect(stored == whole.stored)
        #expect(header == whole.header)
        #expect(StoredInput.expand(stored, header: header.bytes) == body)
        // A token that is not the body's as is (here the body escapes a slash), a payload that is not the
        // token's, and a body with another wrapping are not kept from the payload.
        #expect(StoredInput.compact(body, token: signed + "x", payload: payload) == nil)
        #expect(StoredInput.compact(body, token: signed, payload: Array(payload.dropLast())) == nil)
        let escaped = Array(#"{"signedPayload":"\/\#(signed.dropFirst())"}"#.utf8)
        #expect(StoredInput.compact(escaped, token: "/" + signed.dropFirst(), payload: payload) == nil)
        let spaced = Array(#"{ "signedPayload": "\#(signed)" }"#.utf8)
        #expect(StoredInput.compact(spaced, token: signed, payload: payload) == nil)
        // The raw input the server keeps for an ingested notification reads back as posted.
        let raw = RawInput(key: "k", body: body, token: signed, payload: payload)
        #expect(raw.compact?.stored == whole.stored)
    }
}
