import Foundation
import PurchaseServer
import StoreModel
import StorekeeperJSON
import Testing

/// The server's stored documents are written by our JSON writer now; those Foundation's `JSONEncoder`
/// wrote before (dates as `.millisecondsSince1970`) must read back the same, and the other way round.
@Suite("Purchase server: stored documents, before and after the change of writer")
struct StoredDocumentTests {
    static let date = Date(timeIntervalSince1970: 1_796_430_887.068_5)

    static func foundation() -> (JSONEncoder, JSONDecoder) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .millisecondsSince1970
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return (encoder, decoder)
    }

    static func check<T: Codable & Equatable>(_ value: T) throws {
        let (encoder, decoder) = foundation()
        let old = try encoder.encode(value)
        let read = try SQLDocuments.decoder.decode(T.self, from: JSONParser.parse(Array(old)))
        #expect(read == value, "a document Foundation wrote reads back the same: \(T.self)")
        let new = JSONWriter.bytes(try SQLDocuments.encoder.encode(value))
        #expect(try decoder.decode(T.self, from: Data(new)) == value, "Foundation reads ours: \(T.self)")
        #expect(try SQLDocuments.decoder.decode(T.self, from: JSONParser.parse(new)) == value)
    }

    @Test("Every stored record type, with fractional-millisecond dates and optionals set and not")
    func records() throws {
        var purchase = PurchaseRecord(
            transactionID: "2000000000000002", originalTransactionID: "2000000000000001", bundleID: "com.example.app",
            productID: "monthly", kind: .autoRenewable, purchaseDate: Self.date,
            expiresDate: Self.date.addingTimeInterval(300), webOrderLineItemID: "1", environment: .sandbox,
            offerType: 1, offerDiscountType: "FREE_TRIAL", appAccountToken: "0f1e", price: 2_990, currency: "USD",
            reason: .renewal, signedDate: Self.date, owner: "alice")
        try Self.check(purchase)
        purchase.expiresDate = Date(timeIntervalSince1970: 1e16)  // a grant's "for good" is as far
        try Self.check(purchase)
        purchase.expiresDate = nil
        purchase.reason = nil
        purchase.owner = nil
        try Self.check(purchase)
        try Self.check(
            ServerEvent(
                id: "RENEWAL:2", type: .renewal, bundleID: "com.example.app", appUserID: "alice", date: Self.date,
                environment: .xcode, productID: "monthly", transactionID: "2", originalTransactionID: "1",
                expiresDate: Self.date, source: .notification, appleNotificationType: "DID_RENEW",
                details: ["periodType": "normal"]))
        try Self.check(
            ServerEvent(
                id: "TEST:u", type: "SOMETHING_NEW", bundleID: "b", appUserID: nil, date: Self.date, source: .api))
        var subscriber = Subscriber(bundleID: "com.example.app", appUserID: "alice", firstSeen: Self.date)
        subscriber.aliases = ["old"]
        subscriber.flags = ["multiple_apple_accounts"]
        try Self.check(subscriber)
        var delivery = WebhookDelivery(
            id: "d", eventID: "e", eventType: "RENEWAL", bundleID: "b", url: "http://x", body: "{}", created: Self.date)
        delivery.attempts = [
            .init(date: Self.date, status: 500, error: nil), .init(date: Self.date, status: nil, error: "timeout"),
        ]
        try Self.check(delivery)
        try Self.check(
            LedgerEntry(transactionID: "1", productID: "coins", quantity: -5, reason: .refund, date: Self.date))
    }
}
