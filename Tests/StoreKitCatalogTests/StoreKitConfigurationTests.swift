import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

@Suite("StoreKit configuration files", .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
struct StoreKitConfigurationTests {
    static let files = [
        "01-apple-sample-SKDemo-Products.v2_0.storekit",
        "02-revenuecat-IntegrationTests-PurchaseTester-Configuration.v1_1.storekit",
        "03-revenuecat-PurchaseTesterSwiftUI-PurchaseTesterStoreKitConfiguration.v3_0.storekit",
        "04-revenuecat-PaywallsTester-Products.v4_0.storekit",
        "05-revenuecat-StoreKitUnitTests-UnitTestsConfiguration.v5_0.storekit",
    ]

    static func load(_ file: String) throws -> StoreKitConfiguration {
        try StoreKitConfiguration(data: Vectors.bytes("storekit/" + file))
    }

    @Test(
        "Every format version imports with its products, groups and subscriptions",
        arguments: [
            (files[0], 2, 7, 1, 3), (files[1], 1, 1, 1, 2), (files[2], 3, 3, 6, 13), (files[3], 4, 2, 1, 3),
            (files[4], 5, 3, 2, 4),
        ])
    func counts(file: String, major: Int, products: Int, groups: Int, subscriptions: Int) throws {
        let configuration = try Self.load(file)
        #expect(configuration.version?.major == major)
        #expect(configuration.products.count == products)
        #expect(configuration.subscriptionGroups.count == groups)
        #expect(configuration.subscriptions.count == subscriptions)
        #expect(configuration.subscriptions.allSatisfy { $0.period != nil && $0.level != nil && $0.groupID != nil })
    }

    @Test("Apple's sample: all four kinds, three levels, a pay-up-front introductory offer, its settings")
    func appleSample() throws {
        let configuration = try Self.load(Self.files[0])
        let kinds = Set(
            configuration.products.map(\.kind) + configuration.subscriptions.map { _ in ProductKind.autoRenewable })
        #expect(kinds == Set(ProductKind.allCases))
        #expect(Set(configuration.subscriptions.compactMap(\.level)) == [1, 2, 3])
        #expect(configuration.subscriptions.contains { $0.introductoryOffer?.offerDiscountType == "PAY_UP_FRONT" })
        #expect(configuration.settings.timeRate == .monthlyRenewalEveryThirtySeconds)
        #expect(!configuration.settings.askToBuyEnabled)
        for product in configuration.products {
            #expect(configuration.kind(of: product.productID) == product.kind)
            #expect(product.displayPrice != nil)
            #expect(!product.localizations.isEmpty)
        }
        #expect(configuration.kind(of: "no.such.product") == nil)
    }

    @Test(
        "Offers: code offers with eligibility, promotional offers with ids, 5.0 introductory offers and billing plans")
    func offers() throws {
        let synced = try Self.load(Self.files[2])
        let codeOffers = synced.subscriptions.flatMap(\.codeOffers)
        #expect(codeOffers.count == 8)
        #expect(codeOffers.allSatisfy { $0.json["eligibility"]?.arrayValue?.isEmpty == false })
        #expect(synced.subscriptions.flatMap(\.promotionalOffers).allSatisfy { $0.offerID != nil })
        let newest = try Self.load(Self.files[4])
        let monthly = try #require(
            newest.subscriptions.first { $0.productID == "com.revenuecat.monthly_4.99.1_week_intro" })
        #expect(monthly.introductoryOffer?.offerDiscountType == "FREE_TRIAL")
        #expect(monthly.introductoryOffer?.period == StorePeriod("P3M"))
        #expect(monthly.promotionalOffers.map(\.numberOfPeriods) == [1, 2])
        #expect(monthly.json["billingPlans"]?.arrayValue?.isEmpty == false)
        #expect(newest.settings.timeRate == .realTime)
        let oldest = try Self.load(Self.files[1])
        #expect(oldest.subscriptions.compactMap(\.introductoryOffer).allSatisfy { $0.numberOfPeriods == 1 })
    }
}

@Suite("StoreKit configuration errors")
struct StoreKitConfigurationErrorTests {
    @Test(
        "Malformed catalogues are refused with a reason",
        arguments: [
            "", "[]", #"{"products":[{"type":"Consumable"}]}"#, #"{"products":[{"productID":"a","type":"Gift"}]}"#,
            #"{"subscriptionGroups":[{"subscriptions":[{"productID":"s","recurringSubscriptionPeriod":"monthly"}]}]}"#,
            #"{"products":[{"productID":"a","type":"Consumable"}],"nonRenewingSubscriptions":[{"productID":"a","type":"NonRenewingSubscription"}]}"#,
        ])
    func malformed(text: String) {
        #expect(throws: StoreKitConfiguration.ConfigurationError.self) {
            try StoreKitConfiguration(data: Array(text.utf8))
        }
    }

    @Test("An unknown product type is refused with its place, id and value named")
    func unknownType() throws {
        let cases = [
            (
                #"{"products":[{"productID":"a","type":"Consumable"},{"productID":"b","type":"Gift"}]}"#,
                "products[1] ('b'): type 'Gift' is not one of Consumable, NonConsumable, NonRenewingSubscription"
            ),
            (#"{"nonRenewingSubscriptions":[{"productID":"n"}]}"#, "nonRenewingSubscriptions[0] ('n') has no type"),
            (
                #"{"subscriptionGroups":[{"subscriptions":[{"productID":"s","type":"Consumable","recurringSubscriptionPeriod":"P1M"}]}]}"#,
                "subscriptionGroups[0].subscriptions[0] ('s'): type 'Consumable' is not RecurringSubscription"
            ),
            // A period of no time would renew at the instant it starts, without end.
            (
                #"{"subscriptionGroups":[{"subscriptions":[{"productID":"z","recurringSubscriptionPeriod":"P0Y0M0D"}]}]}"#,
                "subscription 'z': recurringSubscriptionPeriod P0D is no time at all"
            ),
            (
                #"{"subscriptionGroups":[{"subscriptions":[{"productID":"z","recurringSubscriptionPeriod":"PT0S"}]}]}"#,
                "subscription 'z': recurringSubscriptionPeriod P0D is no time at all"
            ),
            // Read when the file loads, not found wrong at a purchase.
            (#"{"products":{}}"#, "products must be an array"),
            (#"{"settings":[]}"#, "settings must be an object"),
            (
                #"{"products":[{"productID":"c","type":"Consumable","displayPrice":1.99}]}"#,
                "products[0] ('c'): displayPrice must be a price such as \"1.99\""
            ),
            (
                #"{"products":[{"productID":"c","type":"Consumable","familyShareable":"true"}]}"#,
                "products[0] ('c'): familyShareable must be true or false"
            ),
            (
                #"{"subscriptionGroups":[{"id":"G","subscriptions":[{"productID":"s","subscriptionGroupID":"H","recurringSubscriptionPeriod":"P1M"}]}]}"#,
                "subscription 's': subscriptionGroupID is not its group's id 'G'"
            ),
            (
                #"{"subscriptionGroups":[{"subscriptions":[{"productID":"s","groupNumber":0,"recurringSubscriptionPeriod":"P1M"}]}]}"#,
                "subscription 's': groupNumber must be a whole number from 1"
            ),
            (
                #"{"subscriptionGroups":[{"subscriptions":[{"productID":"s","recurringSubscriptionPeriod":"P1M","introductoryOffer":{"paymentMode":"gift","subscriptionPeriod":"P1M"}}]}]}"#,
                "subscription 's': introductoryOffer: paymentMode must be free, payAsYouGo or payUpFront"
            ),
            (
                #"{"subscriptionGroups":[{"subscriptions":[{"productID":"s","recurringSubscriptionPeriod":"P1M","adHocOffers":[{"paymentMode":"free","subscriptionPeriod":"P0D"}]}]}]}"#,
                "subscription 's': adHocOffers[0]: subscriptionPeriod must be a period such as P1W or P1M"
            ),
            (
                #"{"subscriptionGroups":[{"subscriptions":[{"productID":"s","recurringSubscriptionPeriod":"P1M","codeOffers":[{"paymentMode":"payUpFront","subscriptionPeriod":"P1M"}]}]}]}"#,
                "subscription 's': codeOffers[0]: a payUpFront offer needs a displayPrice such as \"0.99\""
            ),
            (
                #"{"subscriptionGroups":[{"subscriptions":[{"productID":"s","recurringSubscriptionPeriod":"P1M","introductoryOffer":{"paymentMode":"payAsYouGo","subscriptionPeriod":"P1M","displayPrice":"0.99","numberOfPeriods":0}}]}]}"#,
                "subscription 's': introductoryOffer: numberOfPeriods must be 1 to 120"
            ),
        ]
        for (text, message) in cases {
            do {
                _ = try StoreKitConfiguration(data: Array(text.utf8))
                Issue.record("accepted: \(text)")
            } catch {
                #expect(error.description == message)
            }
        }
        // A subscription without its group's id written takes the group's.
        let grouped = try StoreKitConfiguration(
            data: Array(
                #"{"subscriptionGroups":[{"id":"G","subscriptions":[{"productID":"s","recurringSubscriptionPeriod":"P1M"}]}]}"#
                    .utf8))
        #expect(grouped.subscriptionGroups.first?.subscriptions.first?.groupID == "G")
        // A time rate this build does not know (a newer Xcode's) is kept, not refused: the server asks for --rate.
        let newer = try StoreKitConfiguration(data: Array(#"{"settings":{"_timeRate":99}}"#.utf8))
        #expect(newer.settings.timeRate == nil && newer.settings.json["_timeRate"] == .integer(99))
    }

    @Test("Unknown keys are kept")
    func unknownKeys() throws {
        let text =
            #"{"futureKey":{"x":1},"products":[{"productID":"a","type":"Consumable","newField":true}],"settings":{}}"#
        let configuration = try StoreKitConfiguration(data: Array(text.utf8))
        #expect(configuration.json["futureKey"]?["x"] == .integer(1))
        #expect(configuration.products[0].json["newField"] == .bool(true))
    }
}

@Suite("StoreKit configuration mutations")
struct StoreKitConfigurationMutationTests {
    @Test("Thousands of mutated catalogues import or fail with an error, never a crash")
    func mutations() throws {
        let seed = Array(
            #"{"products":[{"productID":"a","type":"Consumable","displayPrice":"0.99"}],"subscriptionGroups":[{"id":"g","subscriptions":[{"productID":"s","groupNumber":1,"recurringSubscriptionPeriod":"P1M","introductoryOffer":{"paymentMode":"free","subscriptionPeriod":"P1W"}}]}],"settings":{"_timeRate":13}}"#
                .utf8)
        var generator = SeededGenerator(seed: 5)
        let alphabet = Array("{}[],:\"PMWYDT0123456789abc-".utf8)
        var imported = 0
        for _ in 0..<4000 {
            var bytes = seed
            for _ in 0...Int.random(in: 0...2, using: &generator) {
                let index = Int.random(in: 0..<bytes.count, using: &generator)
                if Bool.random(using: &generator) {
                    bytes[index] = alphabet.randomElement(using: &generator)!
                } else {
                    bytes.remove(at: index)
                }
            }
            if let configuration = try? StoreKitConfiguration(data: bytes) {
                imported += 1
                for subscription in configuration.subscriptions { #expect(subscription.period != nil) }
            }
        }
        #expect(imported > 0)
    }

    @Test("Random strings never crash the period parser, and what parses prints back to an equal period")
    func periods() {
        var generator = SeededGenerator(seed: 9)
        let alphabet = Array("PTYMWDHS0123456789-.".utf8)
        for _ in 0..<20_000 {
            let text = String(
                decoding: (0..<Int.random(in: 0...12, using: &generator)).map { _ in
                    alphabet.randomElement(using: &generator)!
                }, as: UTF8.self)
            if let period = StorePeriod(text) { #expect(StorePeriod(period.description) == period) }
        }
    }
}
