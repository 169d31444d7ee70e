import Foundation
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

@testable import AppStoreReceipts

@Suite("verifyReceipt JSON form")
struct ReceiptJSONTests {
    @Test(
        "Decoding the cross-walk receipt reproduces Apple's own verifyReceipt `receipt` object",
        .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
    func crossWalk() throws {
        let apple = try JSONParser.parse(
            Vectors.bytes("verify-receipt/revenuecat-purchases-ios/verifyReceiptSample1.json"))
        let appleReceipt = try #require(apple["receipt"]?.objectValue)
        let der = try Vectors.bytes("receipts/revenuecat-purchases-ios/base64encodedreceiptsample1.der")
        let receipt = try #require(
            ReceiptVerifier(trustedRoots: []).verify(der, expecting: .init(), now: Date()).receipt)
        let requestMs = try #require(appleReceipt["request_date_ms"]?.stringValue.flatMap { Double($0) })
        var ours = receipt.verifyReceiptJSON(requestDate: Date(timeIntervalSince1970: requestMs / 1000))
        ours["raw"] = nil
        var ourPurchases = try #require(ours["in_app"]?.arrayValue)
        ourPurchases = ourPurchases.map { entry in
            var object = entry.objectValue!
            object["raw"] = nil
            return .object(object)
        }
        ours["in_app"] = nil
        var theirs = appleReceipt
        let theirPurchases = try #require(theirs["in_app"]?.arrayValue)
        theirs["in_app"] = nil
        // Same keys, same JSON types, same values (key order aside).
        #expect(Set(ours.keys) == Set(theirs.keys))
        for key in theirs.keys { #expect(ours[key] == theirs[key], "receipt.\(key)") }
        #expect(ourPurchases.count == theirPurchases.count)
        // Apple's in_app is not in payload order; match entries by transaction id.
        for theirEntry in theirPurchases {
            let id = try #require(theirEntry["transaction_id"])
            let ourEntry = try #require(ourPurchases.first(where: { $0["transaction_id"] == id }))
            let ourKeys = Set(try #require(ourEntry.objectValue).keys)
            let theirKeys = Set(try #require(theirEntry.objectValue).keys)
            #expect(ourKeys == theirKeys, "in_app \(id)")
            for key in theirKeys { #expect(ourEntry[key] == theirEntry[key], "in_app \(id).\(key)") }
        }
    }

    @Test("Absent attributes, empty dates and a zero web order id leave their keys out; 1713 = 0 stays")
    func omissions() {
        let purchase = InAppPurchase(
            quantity: 1, productID: "coins", transactionID: "1", purchaseDate: Date(timeIntervalSince1970: 0),
            webOrderLineItemID: 0, isTrialPeriod: false)
        let json = purchase.verifyReceiptJSON()
        #expect(json["web_order_line_item_id"] == nil)
        #expect(json["expires_date"] == nil)
        #expect(json["is_in_intro_offer_period"] == nil)
        #expect(json["original_transaction_id"] == nil)
        #expect(json["is_trial_period"] == .string("false"))
        #expect(json["quantity"] == .string("1"))
        #expect(json["purchase_date"] == .string("1970-01-01 00:00:00 Etc/GMT"))
        #expect(json["purchase_date_pst"] == .string("1969-12-31 16:00:00 America/Los_Angeles"))
    }

    @Test("App-level ids are JSON numbers; unknown attributes appear in `raw` in base64")
    func appLevelTypes() throws {
        let receipt = ReceiptFixtures.receipt(unknownAttributes: [
            ReceiptAttribute(type: 99, version: 2, value: [1, 2, 3])
        ])
        let json = receipt.verifyReceiptJSON(requestDate: nil)
        #expect(json["adam_id"] == .integer(690_661_663))
        #expect(json["app_item_id"] == .integer(690_661_663))
        #expect(json["download_id"] == .integer(74_011_462_945_433))
        #expect(json["version_external_identifier"] == .integer(863_855_306))
        #expect(json["request_date"] == nil)
        let raw = try #require(json["raw"])
        #expect(raw["opaque_value"] == .string(Data(ReceiptFixtures.opaqueValue).base64EncodedString()))
        #expect(
            raw["unknown_attributes"]
                == .array([.object(["type": .integer(99), "version": .integer(2), "value": .string("AQID")])]))
        #expect(json["in_app"]?.arrayValue?.count == receipt.inAppPurchases.count)
    }

    @Test("JSON written by JSONWriter parses back to the same value")
    func writerParserRoundTrip() throws {
        let json = JSONValue.object(
            ReceiptFixtures.receipt(purchases: 20).verifyReceiptJSON(requestDate: TestPKI.referenceDate))
        #expect(try JSONParser.parse(JSONWriter.string(json)) == json)
        #expect(try JSONParser.parse(JSONWriter.string(json, pretty: true)) == json)
    }
}

@Suite("Receipt dates")
struct ReceiptDateTests {
    @Test(
        "Every date form Apple and Xcode write parses to the same instant",
        arguments: [
            ("2024-02-23T17:27:16Z", 1_708_709_236.0),
            ("2020-09-27T12:07:19.686Z", 1_601_208_439.686),
            ("2020-07-22T18:33:15+0100", 1_595_439_195.0),
            ("2020-07-22T18:33:15+01:00", 1_595_439_195.0),
            ("2020-10-16T14:29:30+0300", 1_602_847_770.0),
            ("4001-01-01T00:00:00Z", 64_092_211_200.0),
            ("4001-01-01T02:00:00+0200", 64_092_211_200.0),
            ("1969-12-31T23:59:59Z", -1.0),
            ("2013-08-01T07:00:00Z", 1_375_340_400.0),
        ])
    func parses(text: String, seconds: Double) throws {
        let date = try #require(ReceiptDate.parse(text))
        #expect(abs(date.timeIntervalSince1970 - seconds) < 0.0005)
    }

    @Test(
        "Malformed dates are rejected",
        arguments: [
            "", "2024-02-23", "2024-02-23T17:27:16", "2024-02-30T00:00:00Z", "2024-13-01T00:00:00Z",
            "2024-02-23T24:00:00Z", "2024-02-23T17:27:16+1", "2024-02-23T17:27:16+01:0", "2024-02-23T17:27:16.Z",
            "2024-02-23T17:27:16Zjunk", "２０２４-02-23T17:27:16Z", "2024-02-23X17:27:16Z",
        ])
    func rejects(text: String) {
        #expect(ReceiptDate.parse(text) == nil)
    }

    @Test("Triplets follow verifyReceipt: GMT, milliseconds, Pacific time with daylight saving")
    func triplets() throws {
        let summer = try #require(ReceiptDate.parse("2020-07-14T19:36:40Z"))
        #expect(ReceiptDate.gmtString(summer) == "2020-07-14 19:36:40 Etc/GMT")
        #expect(ReceiptDate.pacificString(summer) == "2020-07-14 12:36:40 America/Los_Angeles")
        #expect(ReceiptDate.milliseconds(summer) == 1_594_755_400_000)
        let winter = try #require(ReceiptDate.parse("2013-08-01T07:00:00Z"))
        #expect(ReceiptDate.pacificString(winter) == "2013-08-01 00:00:00 America/Los_Angeles")
        let january = try #require(ReceiptDate.parse("2024-01-15T08:00:00Z"))
        #expect(ReceiptDate.pacificString(january) == "2024-01-15 00:00:00 America/Los_Angeles")
        let fraction = try #require(ReceiptDate.parse("2020-09-27T12:07:19.686Z"))
        #expect(ReceiptDate.milliseconds(fraction) == 1_601_208_439_686)
        #expect(ReceiptDate.rfc3339String(fraction) == "2020-09-27T12:07:19.686Z")
        #expect(ReceiptDate.rfc3339String(summer) == "2020-07-14T19:36:40Z")
        // The digit-by-digit writer says what the general formatter says, for every year it takes.
        var generator = SystemRandomNumberGenerator()
        let edges: [Int64] = [0, 999, 1_000, -1, -86_400_000, 253_402_300_799_999, 951_782_400_000, 1_583_020_800_001]
        for ms in edges
            + (0..<2_000).map({ _ in Int64.random(in: -62_167_219_200_000...253_402_300_799_999, using: &generator) })
        {
            #expect(
                ReceiptDate.rfc3339Bytes(milliseconds: ms) == ReceiptDate.rfc3339Formatted(milliseconds: ms),
                "\(ms)")
        }
        #expect(ReceiptDate.rfc3339Bytes(milliseconds: 253_402_300_800_000) == nil, "year 10000: the general one")
    }
}
