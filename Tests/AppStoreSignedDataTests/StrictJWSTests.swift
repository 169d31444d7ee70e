import AppStoreSignedData
import Foundation
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// Non-canonical JWS encodings are refused with a specific reason, even when the signature would verify.
@Suite("Strict JWS")
struct StrictJWSTests {
    static func verify(_ token: String) throws -> SignedDataResult {
        try SignedDataVerifier(
            .init(trustedRoots: [JWSFixtures.chain.root], bundleID: JWSFixtures.bundleID, environment: "Sandbox")
        ).verify(token, now: Date())
    }

    static func token() throws -> String { try JWSFixtures.sign(JWSFixtures.transaction()) }

    @Test("The unmodified token is OK")
    func baseline() throws {
        #expect(try Self.verify(try Self.token()).status == .ok)
    }

    @Test("Padding on any segment is refused", arguments: [0, 1, 2])
    func padding(segment: Int) throws {
        var parts = try Self.token().split(separator: ".").map(String.init)
        parts[segment] += "=="
        let result = try Self.verify(parts.joined(separator: "."))
        #expect(result.status == .invalidJWTFormat)
        #expect(result.reason?.contains("base64url") == true)
    }

    @Test("A token of other than three segments is refused, with the count found", arguments: [0, 1, 3, 4])
    func segmentCount(dots: Int) throws {
        var parts = try Self.token().split(separator: ".").map(String.init)
        while parts.count > dots + 1 { parts[parts.count - 2] += parts.removeLast() }
        while parts.count < dots + 1 { parts.append("AAAA") }
        let result = try Self.verify(parts.joined(separator: "."))
        #expect(result.status == .invalidJWTFormat)
        #expect(result.reason?.contains("found \(dots + 1)") == true, "\(result.reason ?? "")")
    }

    @Test("Unused low bits of the last character must be zero (one encoding per signature)")
    func trailingBits() throws {
        var parts = try Self.token().split(separator: ".").map(String.init)
        // A 64-byte signature is 86 characters; the last carries 4 unused bits.
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let last = try #require(alphabet.firstIndex(of: parts[2].last!))
        #expect(last & 0x0f == 0)
        parts[2] = String(parts[2].dropLast()) + String(alphabet[last | 1])
        let result = try Self.verify(parts.joined(separator: "."))
        #expect(result.status == .invalidJWTFormat)
    }

    @Test(
        "Header members of the wrong type, and critical extensions, are refused",
        arguments: [
            ("alg", JSONValue.integer(7), "alg"), ("kid", .integer(1), "kid"), ("typ", .bool(true), "typ"),
            ("x5c", .array([.integer(1)]), "x5c"), ("crit", .array([.string("exp")]), "crit"),
        ])
    func headerTypes(name: String, value: JSONValue, mentioned: String) throws {
        var header: JSONObject = [
            "alg": .string("ES256"),
            "x5c": JWSFixtures.x5c([JWSFixtures.chain.leaf, JWSFixtures.chain.intermediate, JWSFixtures.chain.root]),
        ]
        header[name] = value
        let token = try JWSSigner.sign(
            payload: JWSFixtures.transaction(), header: header, key: JWSFixtures.chain.leafKey)
        let result = try Self.verify(token)
        if name == "alg" {
            // The signer forces alg to ES256; build the token by hand instead.
            let parts = token.split(separator: ".")
            let forged = Base64URL.encode(JSONWriter.bytes(.object(header))) + "." + parts[1] + "." + parts[2]
            let forgedResult = try Self.verify(forged)
            #expect(forgedResult.status == .invalidJWTFormat)
            #expect(forgedResult.reason?.contains(mentioned) == true)
        } else {
            #expect(result.status == .invalidJWTFormat)
            #expect(result.reason?.contains(mentioned) == true)
        }
    }

    @Test("An alg other than exactly ES256 is a verification failure", arguments: ["es256", "ES256 ", "ES384", "none"])
    func algorithm(alg: String) throws {
        let parts = try Self.token().split(separator: ".")
        let header: JSONObject = [
            "alg": .string(alg),
            "x5c": JWSFixtures.x5c([JWSFixtures.chain.leaf, JWSFixtures.chain.intermediate, JWSFixtures.chain.root]),
        ]
        let forged = Base64URL.encode(JSONWriter.bytes(.object(header))) + "." + parts[1] + "." + parts[2]
        #expect(try Self.verify(forged).status == .verificationFailure)
    }
}
