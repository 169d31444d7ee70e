import Foundation
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

@Suite("JSON reader and writer")
struct JSONParserTests {
    @Test("Objects keep member order; integers stay exact; doubles, strings and escapes decode")
    func values() throws {
        let value = try JSONParser.parse(
            #"{"b": 1, "a": [true, false, null], "n": -9007199254740993, "d": 1697679936049.7297, "s": "\u00e9\n\"\ud83d\ude00"}"#
        )
        #expect(value.objectValue?.keys == ["b", "a", "n", "d", "s"])
        #expect(value["n"] == .integer(-9_007_199_254_740_993))
        #expect(value["d"]?.doubleValue == 1_697_679_936_049.7297)
        #expect(value["s"] == .string("é\n\"😀"))
        #expect(value["a"] == .array([.bool(true), .bool(false), .null]))
        #expect(try JSONParser.parse(JSONWriter.string(value)) == value)
    }

    @Test("A string's plain run ends at the first quote, backslash, control or non-ASCII byte, wherever it is")
    func plainRun() throws {
        let clean = Array("abcdefghijklmnopqrstuvwxyz0123456789-_. ~\u{7F}".utf8)
        #expect(clean.withUnsafeBufferPointer { JSONParser.plainEnd(in: $0, from: 0) } == clean.count)
        #expect(clean.withUnsafeBufferPointer { JSONParser.plainEnd(in: $0, from: 7) } == clean.count)
        for position in clean.indices {
            for byte: UInt8 in [0x22, 0x5C, 0x00, 0x0A, 0x1F, 0x80, 0xFF] {
                var bytes = clean
                bytes[position] = byte
                #expect(bytes.withUnsafeBufferPointer { JSONParser.plainEnd(in: $0, from: 0) } == position)
                // And the parser reads the string the same with or without the fast path's help.
                let text = String(decoding: bytes, as: UTF8.self)
                if byte >= 0x20, let parsed = try? JSONParser.parse(JSONWriter.string(.string(text))) {
                    #expect(parsed == .string(text))
                }
            }
        }
    }

    @Test("The writer's bytes: escapes, control characters, U+2028, raw non-ASCII, pretty form; string() is the same")
    func writerBytes() {
        let value: JSONValue = .object([
            "s": .string("a\"b\\c\n\r\t\u{01}\u{2028}é😀"), "e": .string(""), "n": .integer(-5), "d": .double(2),
            "a": .array([.null, .bool(true), .object([:]), .array([])]),
        ])
        let compact = #"{"s":"a\"b\\c\n\r\t\u0001\u2028é😀","e":"","n":-5,"d":2.0,"a":[null,true,{},[]]}"#
        #expect(JSONWriter.bytes(value) == Array(compact.utf8))
        #expect(JSONWriter.string(value) == compact)
        #expect(
            JSONWriter.string(.object(["k": .array([.integer(1)])]), pretty: true) == "{\n  \"k\": [\n    1\n  ]\n}")
    }

    @Test(
        "Malformed documents are errors",
        arguments: [
            "", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "01", "1.", "1e", "-", "\"\\x\"", "\"\\ud800\"",
            "\"a\u{01}\"",
            "tru", "nul", "{\"a\":1}x", "{\"a\":1,\"a\":2}", "[\"\\u12G4\"]",
        ])
    func malformed(text: String) {
        #expect(throws: JSONParser.Error.self) { try JSONParser.parse(text) }
    }

    @Test("A string reads the same wherever its escape, non-ASCII character or end falls (the eight-byte scan)")
    func stringScan() throws {
        // Printable ASCII but `"` and `\`, including the bytes either side of them and of 0x20.
        let filler = Array(" !#$%&'()*+,-./0123456789:;<=>?@AZ[]^_`az{|}~\u{7f}")
        let specials = ["\"", "\\", "\n", "\u{01}", "é", "😀", "/"]
        for length in 0..<28 {
            for position in 0...length {
                let plain = String((0..<length).map { filler[($0 * 7 + length) % filler.count] })
                for special in specials {
                    var text = plain
                    text.insert(contentsOf: special, at: text.index(text.startIndex, offsetBy: position))
                    #expect(try JSONParser.parse(JSONWriter.string(.string(text))) == .string(text))
                }
                // A raw control character is an error wherever it falls.
                var raw = Array("\"\(plain)\"".utf8)
                raw.insert(0x1f, at: position + 1)
                #expect(throws: JSONParser.Error.self) { try JSONParser.parse(raw) }
            }
        }
    }

    @Test("Bytes that are not UTF-8 inside a string are an error")
    func invalidUTF8() {
        #expect(throws: JSONParser.Error.self) { try JSONParser.parse([0x22, 0xff, 0x22]) }
        #expect(throws: JSONParser.Error.self) { try JSONParser.parse([0x22, 0xc3, 0x22]) }
    }

    @Test("Depth, size and member limits hold, and deep nesting is an error rather than a crash")
    func limits() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONParser.Error.self) { try JSONParser.parse(deep) }
        #expect(throws: JSONParser.Error.self) {
            try JSONParser.parse("[1,2,3,4]", limits: JSONParser.Limits(maxSize: 100, maxDepth: 4, maxMembers: 3))
        }
        #expect(throws: JSONParser.Error.self) {
            try JSONParser.parse("[1]", limits: JSONParser.Limits(maxSize: 2, maxDepth: 4, maxMembers: 3))
        }
    }

    @Test("Thousands of mutated documents parse or fail cleanly, and what parses round-trips")
    func mutations() throws {
        let seed = Array(
            #"{"notificationType":"SUBSCRIBED","data":{"appAppleId":41234,"price":10990,"list":[1,2.5,"x\u0041",null,true]},"signedDate":1698148900000.5}"#
                .utf8)
        var generator = SeededGenerator(seed: 3)
        let alphabet = Array("{}[],:\"\\-0123456789.eEtruefalsnl \u{7f}".utf8) + [0xc3, 0xff, 0x00]
        for _ in 0..<5000 {
            var bytes = seed
            for _ in 0...Int.random(in: 0...3, using: &generator) {
                let index = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0...2, using: &generator) {
                case 0: bytes[index] = alphabet.randomElement(using: &generator)!
                case 1: bytes.remove(at: index)
                default: bytes.insert(alphabet.randomElement(using: &generator)!, at: index)
                }
                if bytes.isEmpty { break }
            }
            if let value = try? JSONParser.parse(bytes) {
                #expect(try JSONParser.parse(JSONWriter.string(value)) == value)
            }
        }
    }
}
