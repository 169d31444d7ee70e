import Catalog
import Foundation
import JSON
import StoreTime
import TestSupport
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

    @Test("Unknown keys are kept")
    func unknownKeys() throws {
        let text =
            #"{"futureKey":{"x":1},"products":[{"productID":"a","type":"Consumable","newField":true}],"settings":{}}"#
        let configuration = try StoreKitConfiguration(data: Array(text.utf8))
        #expect(configuration.json["futureKey"]?["x"] == .integer(1))
        #expect(configuration.products[0].json["newField"] == .bool(true))
    }
}
