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

    /// A document built member by member must be the one the `Encodable` conformance gives, and read back
    /// the same. With `everyMember`, every stored property must be set, so that one the builder leaves out
    /// (a property added later) shows as a member missing.
    static func checkBuilt<T: StoredDocument & Decodable & Equatable>(_ value: T, everyMember: Bool) throws {
        let built = value.storedDocument
        #expect(built == (try SQLDocuments.encoder.encode(value)), "\(T.self)")
        #expect(try SQLDocuments.decoder.decode(T.self, from: built) == value, "\(T.self)")
        if everyMember { checkEveryMember(of: value, in: built) }
    }

    /// Every stored property of `value` is set, and `document` has a member for each.
    static func checkEveryMember(of value: Any, in document: JSONValue?) {
        let properties = Mirror(reflecting: value).children
        let unset = properties.filter {
            let mirror = Mirror(reflecting: $0.value)
            return mirror.displayStyle == .optional && mirror.children.isEmpty
        }
        #expect(unset.isEmpty, "the fixture sets every property of \(type(of: value)): \(unset.compactMap(\.label))")
        #expect(document?.objectValue?.keys.count == properties.count, "\(type(of: value))")
    }

    @Test("The records each ingestion writes, built member by member, are the documents their coder gives")
    func builtDocuments() throws {
        let commitment = CommitmentFacts(
            billingPeriodNumber: 2, totalBillingPeriods: 12, expiresDate: Self.date, price: 99_000,
            autoRenewStatus: true, renewalDate: Self.date.addingTimeInterval(60))
        var purchase = PurchaseRecord(
            transactionID: "2000000000000002", originalTransactionID: "2000000000000001", bundleID: "com.example.app",
            productID: "monthly", kind: .autoRenewable, quantity: 3, purchaseDate: Self.date,
            expiresDate: Self.date.addingTimeInterval(300), webOrderLineItemID: "1", environment: .sandbox,
            ownership: .familyShared, revocationDate: Self.date, revocationReason: 1, offerType: 1,
            offerDiscountType: "FREE_TRIAL", appAccountToken: "0f1e", price: 2_990, currency: "USD",
            reason: .renewal, signedDate: Self.date, owner: "alice \"a\" é")
        purchase.billingPlanType = "MONTHLY"
        purchase.commitment = commitment
        purchase.revocationType = "REFUND_PRORATED"
        purchase.revocationPercentage = 33_333
        purchase.isUpgraded = true
        purchase.subscriptionGroupID = "21000000"
        try Self.checkBuilt(purchase, everyMember: true)
        Self.checkEveryMember(of: commitment, in: purchase.storedDocument["commitment"])
        try Self.checkBuilt(
            PurchaseRecord(
                transactionID: "1", originalTransactionID: "1", bundleID: "b", productID: "coins", kind: .consumable,
                purchaseDate: Self.date, environment: .production, signedDate: Self.date),
            everyMember: false)

        let subscription = try SQLDocuments.decoder.decode(
            SubscriptionRecord.self,
            from: JSONParser.parse(
                #"""
                {"originalTransactionID": "1", "bundleID": "com.example.app", "environment": "Sandbox",
                 "productID": "monthly", "latestTransactionID": "2", "latestPurchaseDate": 1796430887068.5,
                 "status": 4, "autoRenewStatus": false, "autoRenewProductID": "yearly", "expiresDate": 1796430987068,
                 "gracePeriodExpiresDate": 1796431087068, "expirationIntent": 2, "priceIncreaseStatus": 1,
                 "ownership": "PURCHASED", "revocationDate": 1796430887000, "revocationReason": 0, "offerType": 2,
                 "offerDiscountType": "PAY_AS_YOU_GO", "transactionSignedDate": 1796430887068.25,
                 "renewalSignedDate": 1796430887069, "periodSignedDate": 1796430887067, "owner": "alice",
                 "billingPlanType": "MONTHLY",
                 "renewalBillingPlanType": "BILLED_UPFRONT",
                 "commitment": {"billingPeriodNumber": 2, "totalBillingPeriods": 12, "expiresDate": 1796430887068,
                                "price": 99000, "autoRenewStatus": true, "renewalDate": 1796430887068},
                 "refundRequestDate": 1796430887070, "lastPolled": 1796430887071}
                """#))
        try Self.checkBuilt(subscription, everyMember: true)
        Self.checkEveryMember(of: try #require(subscription.commitment), in: subscription.storedDocument["commitment"])
        var bare = subscription
        (bare.autoRenewProductID, bare.expiresDate, bare.gracePeriodExpiresDate, bare.commitment) = (nil, nil, nil, nil)
        (bare.renewalSignedDate, bare.owner, bare.refundRequestDate, bare.lastPolled) = (nil, nil, nil, nil)
        bare.periodSignedDate = nil
        try Self.checkBuilt(bare, everyMember: false)

        try Self.checkBuilt(
            ServerEvent(
                id: "RENEWAL:2", type: .renewal, bundleID: "com.example.app", appUserID: "alice", date: Self.date,
                environment: .xcode, productID: "monthly", transactionID: "2", originalTransactionID: "1",
                expiresDate: Self.date, source: .notification, appleNotificationType: "DID_RENEW",
                appleSubtype: "BILLING_RECOVERY", details: ["periodType": "normal"]),
            everyMember: true)
        try Self.checkBuilt(
            ServerEvent(
                id: "TEST:u", type: "SOMETHING_NEW", bundleID: "b", appUserID: nil, date: Self.date, source: .api),
            everyMember: false)
        // Details in key order (a dictionary's own order differs from process to process).
        let event = ServerEvent(
            id: "e", type: .transfer, bundleID: "b", appUserID: "u", date: Self.date, source: .app,
            details: ["z": "1", "a": "2", "m": "3"])
        #expect(event.storedDocument["details"]?.objectValue?.keys == ["a", "m", "z"])
        #expect(try SQLDocuments.decoder.decode(ServerEvent.self, from: event.storedDocument) == event)
    }

    @Test("A refund request is asked about from two days on, hourly, until a week past that: never for ever")
    func refundRequestPolling() throws {
        var record = try SQLDocuments.decoder.decode(
            SubscriptionRecord.self,
            from: JSONParser.parse(
                #"""
                {"originalTransactionID": "1", "bundleID": "com.example.app", "environment": "Sandbox",
                 "productID": "monthly", "latestTransactionID": "1", "latestPurchaseDate": 1796000000000,
                 "status": 2, "autoRenewStatus": false, "ownership": "PURCHASED",
                 "transactionSignedDate": 1796000000000, "refundRequestDate": 1796400000000}
                """#))
        let requested = Date(timeIntervalSince1970: 1_796_400_000)
        let decision = requested.addingTimeInterval(2 * 86_400)
        #expect(record.reconciliationDue == decision, "an expired subscription is asked about for the request alone")
        record.lastPolled = decision.addingTimeInterval(60)
        #expect(record.reconciliationDue == decision.addingTimeInterval(60 + 3_600), "again an hour later")
        record.lastPolled = decision.addingTimeInterval(SubscriptionRecord.refundDecisionPatience)
        #expect(record.reconciliationDue == nil, "a week past the expected decision: no more")
    }
}
