import Foundation
import StoreModel
import Testing

@Suite("Store vocabulary")
struct StoreModelTests {
    @Test("one product kind, three renderings", arguments: ProductKind.allCases)
    func productKindRenderings(kind: ProductKind) {
        #expect(ProductKind(receiptProductType: kind.receiptProductType) == kind)
        #expect(ProductKind(rawValue: kind.rawValue) == kind)
    }

    @Test("storekit type names")
    func storeKitTypes() {
        #expect(ProductKind(storeKitType: "Consumable") == .consumable)
        #expect(ProductKind(storeKitType: "NonConsumable") == .nonConsumable)
        #expect(ProductKind(storeKitType: "NonRenewable") == .nonRenewing)
        #expect(ProductKind(storeKitType: "RecurringSubscription") == .autoRenewable)
        #expect(ProductKind(storeKitType: "Bogus") == nil)
        #expect(ProductKind(receiptProductType: 9) == nil)
    }

    @Test(
        "money in milliunits",
        arguments: [
            ("9.99", Int64(9990), "9.99"), ("10", 10000, "10"), ("0.5", 500, "0.5"), ("0.001", 1, "0.001"),
        ])
    func money(text: String, milliunits: Int64, rendered: String) throws {
        let money = try #require(Money(decimal: text, currency: "USD"))
        #expect(money.milliunits == milliunits)
        #expect(money.decimalString == rendered)
    }

    @Test(
        "money refuses what milliunits cannot hold, and anything but digits and one point",
        arguments: ["-1", "0.0001", "abc", "1e30", "1,99", "4.99 USD", "$1.99", " 1.99", "1.9.9", ".5", ""])
    func moneyRefused(text: String) {
        #expect(Money(decimal: text, currency: "USD") == nil)
    }

    @Test("a transaction is active while its period runs and it is not revoked")
    func activity() {
        let start = Date(timeIntervalSince1970: 1_000_000)
        var transaction = Transaction(
            id: "1", bundleID: "com.example", productID: "monthly", kind: .autoRenewable, purchaseDate: start,
            expiresDate: start.addingTimeInterval(100))
        #expect(transaction.originalID == "1")
        #expect(transaction.isActive(at: start.addingTimeInterval(50)))
        #expect(!transaction.isActive(at: start.addingTimeInterval(100)))
        transaction.revocationDate = start
        #expect(!transaction.isActive(at: start.addingTimeInterval(50)))
        let lifetime = Transaction(
            id: "2", bundleID: "com.example", productID: "lifetime", kind: .nonConsumable, purchaseDate: start)
        #expect(lifetime.isActive(at: .distantFuture))
    }
}

@Suite("Environment: one reading of its names")
struct EnvironmentNameTests {
    @Test("Apple's names, the receipt's ProductionSandbox, and a limit to the customers' environments")
    func names() {
        #expect(Environment(name: "Production") == .production)
        #expect(Environment(name: "Sandbox") == .sandbox)
        #expect(Environment(name: "ProductionSandbox") == .sandbox)
        #expect(Environment(name: "Xcode") == .xcode)
        #expect(Environment(name: "LocalTesting") == .localTesting)
        #expect(Environment(name: "sandbox") == nil, "names are Apple's, case and all")
        #expect(Environment(name: "Xcode", among: Environment.customerEnvironments) == nil)
        #expect(Environment(name: "Production", among: Environment.customerEnvironments) == .production)
        #expect(Environment.names(Environment.customerEnvironments) == "Sandbox, Production")
    }
}

@Suite("Notification types V1: Apple's names, unknown ones kept")
struct NotificationTypeV1Tests {
    @Test("The documented types, and a name this build does not know keeps its raw value")
    func names() {
        #expect(NotificationTypeV1.known.count == 13)
        #expect(Set(NotificationTypeV1.known.map(\.rawValue)).count == 13, "no name twice")
        #expect(NotificationTypeV1.initialBuy.rawValue == "INITIAL_BUY")
        #expect(Notice(.subscribed, .initialBuy, v1: .initialBuy).v1Type == "INITIAL_BUY")
        let future = NotificationTypeV1(rawValue: "SOMETHING_NEW")
        #expect(future.rawValue == "SOMETHING_NEW" && !NotificationTypeV1.known.contains(future))
    }

    @Test("V2 types and subtypes and the server's event types: Apple's names, unknown ones kept through JSON")
    func openVocabularies() throws {
        #expect(NotificationType.known.count == 23, "the 23 types of Apple's library (spec §2.2)")
        #expect(Set(NotificationType.known).count == NotificationType.known.count, "no name twice")
        #expect(NotificationSubtype.known.count == 19)
        #expect(Set(NotificationSubtype.known).count == NotificationSubtype.known.count)
        #expect(Set(ServerEventType.known).count == ServerEventType.known.count)
        #expect(NotificationType(known: "DID_RENEW") == .didRenew)
        #expect(NotificationType(known: "DID_RENEW_LATER") == nil, "an unknown name is not a known one")
        #expect(NotificationSubtype(known: "SUMMARY") == .summary)
        #expect(ServerEventType.initialPurchase.rawValue == "INITIAL_PURCHASE")
        #expect(ServerEventType.refund.isLoss && !ServerEventType.renewal.isLoss)
        #expect("\(ServerEventType.transfer):1" == "TRANSFER:1", "ids are written with the raw name")

        struct Stored: Codable, Equatable {
            var type: NotificationType
            var subtype: NotificationSubtype?
            var event: ServerEventType
            var source: ServerEventSource
        }
        let json = #"{"type":"SOMETHING_NEW","subtype":"SUMMARY","event":"FUTURE_EVENT","source":"app"}"#
        let decoded = try JSONDecoder().decode(Stored.self, from: Data(json.utf8))
        #expect(decoded.type.rawValue == "SOMETHING_NEW" && !decoded.type.isKnown)
        #expect(decoded.subtype == .summary && decoded.event.rawValue == "FUTURE_EVENT" && decoded.source == .app)
        let again = try JSONDecoder().decode(Stored.self, from: JSONEncoder().encode(decoded))
        #expect(again == decoded, "a name this build does not know survives a round trip")
        // Stored records (the purchase server's documents) hold ids as plain strings.
        #expect(String(decoding: try JSONEncoder().encode(TransactionID("2000")), as: UTF8.self) == #""2000""#)
        #expect(try JSONDecoder().decode(ProductID.self, from: Data(#""com.x.pro""#.utf8)) == "com.x.pro")
    }
}
