import StorekeeperJSON
import Testing

@Suite("JSONWriter siblings")
struct JSONWriterSiblingsTests {
    static let siblings = JSONWriter.Siblings(skipping: ["balances"]) { key, value in
        key.hasSuffix("Date") ? (key + "Text", "t\(value)") : nil
    }

    @Test("a sibling follows each member it is asked for, at every depth but inside the skipped members")
    func written() {
        let value: JSONValue = .object([
            "expiresDate": .integer(5), "count": .integer(2), "name": .string("aDate"),
            "items": .array([.object(["purchaseDate": .integer(7)])]),
            "balances": .object(["coinsDate": .integer(3)]), "nested": .object(["renewalDate": .integer(9)]),
        ])
        #expect(
            String(decoding: JSONWriter.bytes(value, siblings: Self.siblings), as: UTF8.self)
                == #"{"expiresDate":5,"expiresDateText":"t5","count":2,"name":"aDate","items":[{"purchaseDate":7,"purchaseDateText":"t7"}],"balances":{"coinsDate":3},"nested":{"renewalDate":9,"renewalDateText":"t9"}}"#
        )
        // Pretty output stays valid JSON and reads back with the siblings.
        let pretty = JSONWriter.bytes(value, pretty: true, siblings: Self.siblings)
        let parsed = try? JSONParser.parse(pretty)
        #expect(parsed?["nested"]?["renewalDateText"] == .string("t9"))
        #expect(parsed?["balances"]?["coinsDateText"] == nil)
        // Without siblings, the value as it is.
        #expect(JSONWriter.string(value).contains("Text") == false)
    }
}
