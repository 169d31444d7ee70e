import AppStoreSignedData
import Foundation
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperSQL
import StorekeeperTestSupport
import Synchronization
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

    @Test("Bodies signed under two chains in turn each name their own header (the last one named is not reused)")
    func twoHeaders() throws {
        let other = try TestPKI(keyKind: .p256).chain
        var fingerprints: [String] = []
        for chain in [JWSFixtures.chain, other, JWSFixtures.chain, other] {
            let signed = try JWSFixtures.sign(try JWSFixtures.notification(chain: chain), chain: chain)
            let body = Array(#"{"signedPayload":"\#(signed)"}"#.utf8)
            let (stored, header) = try #require(StoredInput.compact(body))
            let encoded = Array(signed.utf8.prefix { $0 != UInt8(ascii: ".") })
            #expect(header.bytes == encoded)
            #expect(header.fingerprint == Digest.hex(Digest.sha256(encoded)))
            #expect(StoredInput.expand(stored, header: header.bytes) == body)
            fingerprints.append(header.fingerprint)
        }
        #expect(fingerprints[0] == fingerprints[2] && fingerprints[1] == fingerprints[3])
        #expect(fingerprints[0] != fingerprints[1])
    }

    @Test("What is not exactly Apple's wrapping of one JWS is kept whole")
    func whole() throws {
        let signed = try JWSFixtures.sign(try JWSFixtures.notification())
        for body in [
            #"{ "signedPayload": "\#(signed)" }"#, #"{"signedPayload":"\#(signed)","x":1}"#, signed,
            #"{"signedPayload":"abc"}"#, #"{"signedPayload":""}"#,
            #"{"signedPayload":"\#(try JWSFixtures.sign(["note": .string("\"~.x")]))"}"#,
            // No header (twice: the header named last is not compared with an empty one).
            #"{"signedPayload":".e30.c2ln"}"#, #"{"signedPayload":".e30.c2ln"}"#,
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

    /// A notification's raw input as the server keeps it; every one signed by the fixtures' chain names the
    /// same header.
    static func input(_ index: Int) throws -> RawInput {
        var payload = try JWSFixtures.notification()
        payload["notificationUUID"] = .string("uuid-\(index)")
        let signed = try JWSFixtures.sign(payload)
        return RawInput(key: "n:\(index)", kind: StoredInput.kind, body: Array(#"{"signedPayload":"\#(signed)"}"#.utf8))
    }

    /// Records the statements it is given and answers none.
    final class RecordingRunner: SQLStatementRunner {
        var statements: [String] = []
        var changes: Int { 1 }
        func execute(_ sql: String, _ values: [SQLValue]) throws -> [Row] {
            statements.append(sql)
            return []
        }
        func lockForTransaction(_ key: String) throws {}
        static var readsAhead: Bool { false }
        static var readsSubscriberInOneStatement: Bool { false }
        static var marksChangingTransactions: Bool { false }
        var headerInserts: Int { statements.filter { $0.contains("INSERT INTO signing_headers") }.count }
    }

    @Test("A signing header is sent with each input until a write that inserted it has committed, then no more")
    func headerSentUntilCommitted() async throws {
        let runner = RecordingRunner()
        let committed = SigningHeaders()
        try await committed.tracking { first in
            _ = try SQLServerStore(connection: runner, headers: first).recordInput(try Self.input(1), received: Date())
            #expect(runner.headerInserts == 1)
            // The first write has not committed: another sends the header too.
            _ = try SQLServerStore(connection: runner, headers: .init(committed: committed)).recordInput(
                try Self.input(2), received: Date())
            #expect(runner.headerInserts == 2)
        }
        // Once it has, none does.
        _ = try SQLServerStore(connection: runner, headers: .init(committed: committed)).recordInput(
            try Self.input(3), received: Date())
        #expect(runner.headerInserts == 2)
        #expect(runner.statements.filter { $0.contains("INSERT INTO inputs") }.count == 3)
        // Outside a storage's writes (no headers given), always.
        _ = try SQLServerStore(connection: runner).recordInput(try Self.input(4), received: Date())
        #expect(runner.headerInserts == 3)
    }

    @Test(
        "A storage knows a header once the write that inserted it commits, not when it rolls back; inputs read back whole",
        arguments: [false] + (PostgresTesting.url == nil ? [] : [true]))
    func headersOfCommittedWrites(postgres: Bool) async throws {
        let storage: any ServerStorage
        let headers: SigningHeaders
        if postgres {
            let shared = try await PostgresServerStorage(url: try PostgresTesting.freshDatabase(), poolSize: 2)
            (storage, headers) = (shared, shared.signingHeaders)
        } else {
            let path = try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path
            let local = try await SQLiteServerStorage(path: path)
            (storage, headers) = (local, local.signingHeaders)
        }
        let inputs = try (1...3).map(Self.input)
        let fingerprint = try #require(inputs[0].compact?.header.fingerprint)
        #expect(inputs.allSatisfy { $0.compact?.header.fingerprint == fingerprint })
        struct Boom: Error {}
        await #expect(throws: Boom.self) {
            try await storage.write { store in
                _ = try store.recordInput(inputs[0], received: Date())
                throw Boom()
            }
        }
        #expect(!headers.contains(fingerprint))
        try await storage.write { store in _ = try store.recordInput(inputs[1], received: Date()) }
        #expect(headers.contains(fingerprint))
        try await storage.write { store in _ = try store.recordInput(inputs[2], received: Date()) }
        try await storage.read { (store: any ServerStore) throws in
            #expect(try store.inputCount() == 2)
            #expect(try store.input(key: "n:1") == nil)
            #expect(try store.input(key: "n:2") == inputs[1].body)
            #expect(try store.input(key: "n:3") == inputs[2].body)
        }
    }

    @Test("A V2 notification is kept under its signing date and UUID: a retry of the same payload is a duplicate")
    func notificationKey() async throws {
        #expect(RawInput.notificationKey(signedDate: 1_704_067_200_000, uuid: "u") == "notification:1704067200000:u")
        #expect(RawInput.notificationKey(signedDate: 42, uuid: "u") == "notification:0000000000042:u")
        #expect(RawInput.notificationKey(signedDate: nil, uuid: "u") == "notification:0000000000000:u")
        #expect(RawInput.notificationKey(signedDate: -5, uuid: "u") == "notification:0000000000000:u")
        let (server, storage) = try await FixtureServer.make()
        let body = Array(#"{"signedPayload":"\#(try JWSFixtures.sign(try JWSFixtures.notification()))"}"#.utf8)
        #expect(try await server.ingestNotification(bundleID: JWSFixtures.bundleID, body: body).duplicate == false)
        #expect(try await server.ingestNotification(bundleID: JWSFixtures.bundleID, body: body).duplicate == true)
        let key = "notification:1704067200000:002e14d5-51f5-4503-b5a8-c3a1af68eb20"
        #expect(try await storage.read { try $0.input(key: key) } == body)
        // The same notification signed again at another date is kept again and applied again: no new event.
        var again = try JWSFixtures.notification()
        again["signedDate"] = .integer(JWSFixtures.signedDateMs + 3_600_000)
        let resigned = Array(#"{"signedPayload":"\#(try JWSFixtures.sign(again))"}"#.utf8)
        let second = try await server.ingestNotification(bundleID: JWSFixtures.bundleID, body: resigned)
        #expect(second.duplicate == false && second.events.isEmpty)
        #expect(try await storage.read { try $0.inputCount() } == 2)
    }

    @Test("Apple's exact wrapping gives its signedPayload without the JSON parser; any other body is the parser's")
    func signedPayloadWithoutParser() async throws {
        let signed = try JWSFixtures.sign(try JWSFixtures.notification())
        #expect(StoredInput.signedPayload(of: Array(#"{"signedPayload":"\#(signed)"}"#.utf8)) == signed)
        #expect(StoredInput.signedPayload(of: Array(#"{"signedPayload":"a.b.c"}"#.utf8)) == "a.b.c")
        for body in [
            // JSON whose string value is not its bytes as they are, other wrappings, and no JSON at all.
            #"{"signedPayload":"\/\#(signed.dropFirst())"}"#, #"{"signedPayload":"a\"b"}"#,
            "{\"signedPayload\":\"a\u{01}b\"}", #"{ "signedPayload": "\#(signed)" }"#,
            #"{"signedPayload":"\#(signed)","x":1}"#, #"{"signedPayload":""}"#, #"{"signedPayload":"}"#, signed,
        ] {
            #expect(StoredInput.signedPayload(of: Array(body.utf8)) == nil, "\(body.prefix(60))")
        }
        // The scan 16 bytes at a time and the tail after it: each such byte found wherever it is, and the body
        // left to the parser; printable ASCII (0x20 to 0x7F) read as it is; bytes past ASCII, which no JWS
        // holds, left to the parser too.
        let clean = Array("abcdefghijklmnopqrstuvwxyz0123456789-_.A".utf8)
        func wrapping(_ bytes: [UInt8]) -> [UInt8] { Array(#"{"signedPayload":""#.utf8) + bytes + Array(#""}"#.utf8) }
        #expect(StoredInput.signedPayload(of: wrapping(clean)) == String(decoding: clean, as: UTF8.self))
        for position in clean.indices {
            for byte: UInt8 in [0x22, 0x5C, 0x00, 0x0A, 0x1F, 0x80, 0xFF] {
                var bytes = clean
                bytes[position] = byte
                #expect(StoredInput.signedPayload(of: wrapping(bytes)) == nil, "\(byte) at \(position)")
            }
            for byte: UInt8 in [0x20, 0x7F] {
                var bytes = clean
                bytes[position] = byte
                #expect(
                    StoredInput.signedPayload(of: wrapping(bytes)) == String(decoding: bytes, as: UTF8.self),
                    "\(byte) at \(position)")
            }
        }
        // A body that escapes a character of the JWS is still read, by the parser, and ingested.
        let (server, _) = try await FixtureServer.make()
        let first = try #require(signed.utf8.first)
        let escaped = #"\u00"# + String(first, radix: 16) + signed.dropFirst()
        let body = Array(#"{"signedPayload":"\#(escaped)"}"#.utf8)
        #expect(try await server.ingestNotification(bundleID: JWSFixtures.bundleID, body: body).duplicate == false)
        // The same notification without the escape is the same input.
        let plain = Array(#"{"signedPayload":"\#(signed)"}"#.utf8)
        #expect(try await server.ingestNotification(bundleID: JWSFixtures.bundleID, body: plain).duplicate == true)
    }
}
