import StorekeeperJSON
import Testing

@Suite("Codable to and from JSONValue")
struct JSONCodingTests {
    enum Kind: String, Codable, Equatable { case one, two }
    struct Inner: Codable, Equatable {
        var name: String
        var flags: [Bool]
    }
    struct Record: Codable, Equatable {
        var id: String
        var count: Int
        var big: Int64
        var ratio: Double
        var kind: Kind
        var optional: String?
        var missing: Int?
        var inner: Inner
        var list: [Inner]
        var map: [String: String]
        var nested: [[Int]]
        var stamp: Stamp
    }
    /// Rendered by the caller (as dates are), through `special`.
    struct Stamp: Codable, Equatable { var seconds: Int64 }

    static let encoder = JSONValueEncoder { value in (value as? Stamp).map { .string("t\($0.seconds)") } }
    static let decoder = JSONValueDecoder { type, json in
        guard type == Stamp.self else { return nil }
        guard let text = json.stringValue, text.hasPrefix("t"), let seconds = Int64(text.dropFirst()) else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "not a stamp"))
        }
        return Stamp(seconds: seconds)
    }

    static let sample = Record(
        id: "x", count: -3, big: Int64.max, ratio: 1796430887068.125, kind: .two, optional: "here", missing: nil,
        inner: Inner(name: "é\"\n", flags: [true, false]), list: [Inner(name: "a", flags: [])], map: ["k": "v"],
        nested: [[1, 2], []], stamp: Stamp(seconds: 42))

    @Test("A record round-trips through JSONValue and bytes; members in declaration order; nil left out")
    func roundTrip() throws {
        let json = try Self.encoder.encode(Self.sample)
        #expect(json.objectValue?.keys.first == "id" && json.objectValue?.keys.contains("missing") == false)
        #expect(json["big"] == .integer(Int64.max), "integers stay exact")
        #expect(json["kind"] == .string("two") && json["stamp"] == .string("t42"))
        #expect(try Self.decoder.decode(Record.self, from: json) == Self.sample)
        let reparsed = try JSONParser.parse(JSONWriter.bytes(json))
        #expect(try Self.decoder.decode(Record.self, from: reparsed) == Self.sample)
    }

    @Test("Wrong shapes are errors, never crashes: a missing member, a wrong type, a fraction for an integer")
    func errors() throws {
        var json = try Self.encoder.encode(Self.sample)
        let cases: [(String, JSONValue?)] = [
            ("id", nil), ("count", .string("3")), ("count", .double(1.5)), ("kind", .string("three")),
            ("list", .object([:])), ("stamp", .string("x")), ("inner", .array([])), ("big", .double(1e30)),
        ]
        for (key, value) in cases {
            var object = try #require(json.objectValue)
            object[key] = value
            #expect(throws: (any Error).self, "\(key)") { try Self.decoder.decode(Record.self, from: .object(object)) }
        }
        json = .array([])
        #expect(throws: (any Error).self) { try Self.decoder.decode(Record.self, from: json) }
    }
}
