import Foundation
public import StoreModel
public import StoreTime
public import StorekeeperJSON

/// An Xcode StoreKit configuration file (`.storekit`, JSON, formats 1.1–5.0): the emulator's catalogue.
///
/// Every object keeps its JSON (`json`), so keys Storekeeper does not model survive; typed accessors cover
/// the keys of shared/spec/test-environment.md §4.
public struct StoreKitConfiguration: Sendable, Hashable {
    public var json: JSONObject
    public var products: [Product]
    public var subscriptionGroups: [SubscriptionGroup]
    public var settings: Settings

    public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Reads a `.storekit` file's bytes.
    public init(data: some Collection<UInt8>) throws(ConfigurationError) {
        let value: JSONValue
        do {
            value = try JSONParser.parse(
                data, limits: JSONParser.Limits(maxSize: 16 << 20, maxDepth: 32, maxMembers: 100_000))
        } catch {
            throw ConfigurationError(description: "not JSON: \(error)")
        }
        guard let root = value.objectValue else {
            throw ConfigurationError(description: "the file is not a JSON object")
        }
        json = root
        for key in ["products", "nonRenewingSubscriptions", "subscriptionGroups"]
        where root[key] != nil && root[key] != .null && root[key]?.arrayValue == nil {
            throw ConfigurationError(description: "\(key) must be an array")
        }
        if let settings = root["settings"], settings != .null, settings.objectValue == nil {
            throw ConfigurationError(description: "settings must be an object")
        }
        // Any JSON object would otherwise read as a catalogue of nothing (a scenario file given by mistake).
        guard
            ["products", "nonRenewingSubscriptions", "subscriptionGroups", "settings"].contains(where: {
                root[$0] != nil
            })
        else {
            throw ConfigurationError(
                description:
                    "not a .storekit catalogue: it has no products, nonRenewingSubscriptions or subscriptionGroups")
        }
        var products: [Product] = []
        for key in ["products", "nonRenewingSubscriptions"] {
            for (index, item) in (root[key]?.arrayValue ?? []).enumerated() {
                let place = "\(key)[\(index)]"
                guard let object = item.objectValue, let id = object["productID"]?.stringValue else {
                    throw ConfigurationError(description: "\(place) has no productID")
                }
                guard let type = object["type"]?.stringValue else {
                    throw ConfigurationError(description: "\(place) ('\(id)') has no type")
                }
                guard let product = Product(json: object) else {
                    throw ConfigurationError(
                        description:
                            "\(place) ('\(id)'): type '\(type)' is not one of Consumable, NonConsumable, NonRenewingSubscription"
                    )
                }
                try Self.checkItem(object, place: "\(place) ('\(id)')")
                products.append(product)
            }
        }
        var groups: [SubscriptionGroup] = []
        for item in root["subscriptionGroups"]?.arrayValue ?? [] {
            guard var object = item.objectValue else {
                throw ConfigurationError(description: "a subscription group is not an object")
            }
            if let list = object["subscriptions"], list != .null, list.arrayValue == nil {
                throw ConfigurationError(
                    description: "subscriptionGroups[\(groups.count)].subscriptions must be an array")
            }
            // A group's id ties its subscriptions together (changes within it, its win-back offers): a group
            // written without one gets one of its own (two without would otherwise be taken for one); two with
            // the same are refused.
            if object["id"]?.stringValue.map({ $0.isEmpty }) ?? true {
                object["id"] = JSONValue.string("subscriptionGroups[\(groups.count)]")
            }
            if let groupID = object["id"]?.stringValue, groups.contains(where: { $0.id == groupID }) {
                throw ConfigurationError(
                    description: "subscriptionGroups[\(groups.count)]: the id '\(groupID)' is another group's too")
            }
            var group = SubscriptionGroup(json: object)
            for (index, item) in (object["subscriptions"]?.arrayValue ?? []).enumerated() {
                let place = "subscriptionGroups[\(groups.count)].subscriptions[\(index)]"
                guard let subscription = item.objectValue, let id = subscription["productID"]?.stringValue else {
                    throw ConfigurationError(description: "\(place) has no productID")
                }
                if let type = subscription["type"]?.stringValue, ProductKind(storeKitType: type) != .autoRenewable {
                    throw ConfigurationError(
                        description: "\(place) ('\(id)'): type '\(type)' is not RecurringSubscription")
                }
            }
            for index in group.subscriptions.indices {
                // A subscription's group is the one it is listed in: its own subscriptionGroupID, when written,
                // must name it (the JWS's subscriptionGroupIdentifier, and what upgrades compare).
                let subscription = group.subscriptions[index]
                let place = "subscription '\(subscription.productID)'"
                switch (subscription.json["subscriptionGroupID"], group.id) {
                case (nil, let id?), (.null?, let id?):
                    group.subscriptions[index].json["subscriptionGroupID"] = .string(id)
                case (let written?, let id?) where written.stringValue != id:
                    throw ConfigurationError(
                        description: "\(place): subscriptionGroupID is not its group's id '\(id)'")
                case (let written?, nil) where written.stringValue == nil:
                    throw ConfigurationError(description: "\(place): subscriptionGroupID must be a string")
                default: break
                }
                try Self.checkItem(subscription.json, place: place)
                if let level = subscription.json["groupNumber"], level != .null,
                    (level.int64Value ?? 0) < 1
                {
                    throw ConfigurationError(description: "\(place): groupNumber must be a whole number from 1")
                }
                try Self.checkOffers(subscription)
            }
            for subscription in group.subscriptions {
                guard let period = subscription.period else {
                    throw ConfigurationError(
                        description: "subscription '\(subscription.productID)' has no valid recurringSubscriptionPeriod"
                    )
                }
                // A period of nothing would renew at the instant it starts, again and again.
                guard !period.isZero else {
                    throw ConfigurationError(
                        description:
                            "subscription '\(subscription.productID)': recurringSubscriptionPeriod \(period) is no time at all"
                    )
                }
                _ = try subscription.checkedBillingPlans()
            }
            groups.append(group)
        }
        let all = products.map(\.productID) + groups.flatMap { $0.subscriptions.map(\.productID) }
        if let duplicate = Dictionary(grouping: all, by: { $0 }).first(where: { $0.value.count > 1 })?.key {
            throw ConfigurationError(description: "product '\(duplicate)' is defined twice")
        }
        self.products = products
        self.subscriptionGroups = groups
        self.settings = Settings(json: root["settings"]?.objectValue ?? JSONObject())
    }

    /// Whether `text` is a price as the file writes one (a decimal string such as "1.99").
    static func isPrice(_ text: String?) -> Bool { text.flatMap { Money(decimal: $0, currency: "USD") } != nil }

    /// What every product and subscription has, when written: a price Storekeeper can read (a decimal string
    /// such as "1.99"), and `familyShareable` a boolean.
    static func checkItem(_ object: JSONObject, place: String) throws(ConfigurationError) {
        if let price = object["displayPrice"], price != .null,
            !Self.isPrice(price.stringValue)
        {
            throw ConfigurationError(description: "\(place): displayPrice must be a price such as \"1.99\"")
        }
        if let shareable = object["familyShareable"], shareable != .null, shareable.boolValue == nil {
            throw ConfigurationError(description: "\(place): familyShareable must be true or false")
        }
    }

    /// A subscription's offers, checked when the file is read rather than at a purchase (where a bad one
    /// would silently charge the full price): objects, a known payment mode, a period that is some time, a
    /// number of periods from 1 to 120, and a price for the paid modes.
    static func checkOffers(_ subscription: Subscription) throws(ConfigurationError) {
        var offers: [(String, JSONValue)] = []
        if let intro = subscription.json["introductoryOffer"], intro != .null {
            offers.append(("introductoryOffer", intro))
        }
        for key in ["introductoryOffers", "adHocOffers", "codeOffers", "winbackOffers"] {
            guard let value = subscription.json[key], value != .null else { continue }
            guard let list = value.arrayValue else {
                throw ConfigurationError(
                    description: "subscription '\(subscription.productID)': \(key) must be an array")
            }
            offers += list.enumerated().map { ("\(key)[\($0.offset)]", $0.element) }
        }
        for (name, value) in offers {
            let place = "subscription '\(subscription.productID)': \(name)"
            guard let object = value.objectValue else {
                throw ConfigurationError(description: "\(place) is not an object")
            }
            let offer = SubscriptionOffer(json: object)
            guard offer.offerDiscountType != nil else {
                throw ConfigurationError(description: "\(place): paymentMode must be free, payAsYouGo or payUpFront")
            }
            guard let period = offer.period, !period.isZero else {
                throw ConfigurationError(
                    description: "\(place): subscriptionPeriod must be a period such as P1W or P1M")
            }
            if let count = object["numberOfPeriods"], count != .null, !(1...120).contains(count.int64Value ?? 0) {
                throw ConfigurationError(description: "\(place): numberOfPeriods must be 1 to 120")
            }
            if offer.paymentMode != "free",
                !Self.isPrice(offer.displayPrice)
            {
                throw ConfigurationError(
                    description: "\(place): a \(offer.paymentMode ?? "") offer needs a displayPrice such as \"0.99\"")
            }
        }
    }

    /// Sets a subscription's `billingPlans` (the emulator's `--config` member of that name, for catalogues
    /// whose `.storekit` file has none), checked as the file's own would be; false when no subscription
    /// has `productID`.
    public mutating func setBillingPlans(productID: String, _ plans: JSONValue) throws(ConfigurationError) -> Bool {
        for (groupIndex, group) in subscriptionGroups.enumerated() {
            guard let index = group.subscriptions.firstIndex(where: { $0.productID == productID }) else { continue }
            var subscription = group.subscriptions[index]
            subscription.json["billingPlans"] = plans
            _ = try subscription.checkedBillingPlans()
            subscriptionGroups[groupIndex].subscriptions[index] = subscription
            return true
        }
        return false
    }

    /// `{major, minor}` of the file format, e.g. (5, 0).
    public var version: (major: Int, minor: Int)? {
        guard let major = json["version"]?["major"]?.int64Value, let minor = json["version"]?["minor"]?.int64Value
        else {
            return nil
        }
        return (Int(major), Int(minor))
    }

    public var identifier: String? { json["identifier"]?.stringValue }

    /// Xcode's local key for signing promotional offers (`subscriptionOffersKeyPair`): its id and PKCS#8
    /// private key in PEM or bare base64.
    public var offersKeyPair: (id: String, privateKey: String)? {
        guard let pair = json["subscriptionOffersKeyPair"]?.objectValue, let id = pair["id"]?.stringValue,
            let key = pair["privateKey"]?.stringValue
        else { return nil }
        return (id, key)
    }

    /// Every auto-renewable subscription of every group.
    public var subscriptions: [Subscription] { subscriptionGroups.flatMap(\.subscriptions) }

    /// The kind of product with this identifier, if the catalogue has it.
    public func kind(of productID: String) -> ProductKind? {
        if let product = products.first(where: { $0.productID == productID }) { return product.kind }
        return subscriptions.contains(where: { $0.productID == productID }) ? .autoRenewable : nil
    }

    public static func == (lhs: StoreKitConfiguration, rhs: StoreKitConfiguration) -> Bool { lhs.json == rhs.json }
    public func hash(into hasher: inout Hasher) { hasher.combine(json) }
}

/// A localized name and description.
public struct Localization: Sendable, Hashable {
    public var locale: String
    public var displayName: String
    public var description: String

    init(json: JSONObject) {
        locale = json["locale"]?.stringValue ?? ""
        displayName = json["displayName"]?.stringValue ?? ""
        description = json["description"]?.stringValue ?? ""
    }

    static func list(_ value: JSONValue?) -> [Localization] {
        (value?.arrayValue ?? []).compactMap(\.objectValue).map(Localization.init)
    }

    /// The name to show from `localizations`: the one of `locale` (the file's `_locale`), else the first that
    /// is not empty (Xcode writes `""` for a name left blank); nil when there is none.
    public static func displayName(_ localizations: [Localization], locale: String?) -> String? {
        let named = localizations.filter { !$0.displayName.isEmpty }
        let normalized = locale?.replacingOccurrences(of: "-", with: "_")
        return (named.first { $0.locale.replacingOccurrences(of: "-", with: "_") == normalized } ?? named.first)?
            .displayName
    }
}

/// What every sellable item of a catalogue has.
public protocol CatalogItem {
    var json: JSONObject { get }
    var productID: String { get }
}

extension CatalogItem {
    public var referenceName: String? { json["referenceName"]?.stringValue }
    /// The price as written, a decimal string (`"1.99"`).
    public var displayPrice: String? { json["displayPrice"]?.stringValue }
    public var familyShareable: Bool { json["familyShareable"]?.boolValue ?? false }
    public var localizations: [Localization] { Localization.list(json["localizations"]) }
}

/// A consumable, non-consumable or non-renewing subscription (`products[]`, `nonRenewingSubscriptions[]`).
public struct Product: CatalogItem, Sendable, Hashable {
    public var json: JSONObject
    public var productID: String
    public var kind: ProductKind

    init?(json: JSONObject) {
        guard let productID = json["productID"]?.stringValue else { return nil }
        guard let type = json["type"]?.stringValue, let kind = ProductKind(storeKitType: type), kind != .autoRenewable
        else { return nil }
        self.kind = kind
        self.json = json
        self.productID = productID
    }

}

/// A subscription group (`subscriptionGroups[]`).
public struct SubscriptionGroup: Sendable, Hashable {
    public var json: JSONObject
    public var subscriptions: [Subscription]

    init(json: JSONObject) {
        self.json = json
        subscriptions = (json["subscriptions"]?.arrayValue ?? []).compactMap(\.objectValue).compactMap(
            Subscription.init)
    }

    public var id: String? { json["id"]?.stringValue }
    public var name: String? { json["name"]?.stringValue }
    public var localizations: [Localization] { Localization.list(json["localizations"]) }
}

/// An auto-renewable subscription.
public struct Subscription: CatalogItem, Sendable, Hashable {
    public var json: JSONObject
    public var productID: String

    init?(json: JSONObject) {
        guard let productID = json["productID"]?.stringValue else { return nil }
        self.json = json
        self.productID = productID
    }

    /// The group's `id` (the JWS `subscriptionGroupIdentifier`).
    public var groupID: String? { json["subscriptionGroupID"]?.stringValue }
    /// Level within the group; 1 is the highest tier.
    public var level: Int? { json["groupNumber"]?.int64Value.map(Int.init) }
    public var period: StorePeriod? { json["recurringSubscriptionPeriod"]?.stringValue.flatMap(StorePeriod.init) }
    /// The introductory offer (`introductoryOffer`, or the first of 5.0's `introductoryOffers`).
    public var introductoryOffer: SubscriptionOffer? {
        (json["introductoryOffer"]?.objectValue ?? json["introductoryOffers"]?.arrayValue?.first?.objectValue)
            .map(SubscriptionOffer.init)
    }
    /// The monthly plan over a 12-month commitment, when the subscription is sold with one and it is enabled
    /// (Xcode 26.5's `billingPlans`: `[{"billingPlanType": "BILLED_UPFRONT", "displayPrice", …},
    /// {"billingPlanType": "MONTHLY", "displayPrice": "0.5", "commitmentDisplayPrice": "6.00", "internalID",
    /// "isEnabled": true}]`, on a yearly subscription).
    public var monthlyPlan: BillingPlan? {
        (try? checkedBillingPlans())?.first { $0.type == .monthly && $0.isEnabled }
    }

    /// A billing plan of a subscription, as Xcode writes it.
    public struct BillingPlan: Sendable, Hashable {
        public var type: BillingPlanType
        /// The price of each billing period (a month for `MONTHLY`).
        public var displayPrice: String?
        /// The whole commitment's price (`commitmentDisplayPrice`).
        public var commitmentDisplayPrice: String?
        public var isEnabled: Bool
        /// Billing periods in the commitment: 12 months for `MONTHLY`, one for `BILLED_UPFRONT`.
        public var totalBillingPeriods: Int { type == .monthly ? 12 : 1 }
    }

    /// `billingPlans`, checked: objects with a known `billingPlanType`; `MONTHLY` only on a yearly subscription,
    /// with a price.
    func checkedBillingPlans() throws(StoreKitConfiguration.ConfigurationError) -> [BillingPlan] {
        guard let value = json["billingPlans"], value != .null else { return [] }
        func refuse(_ what: String) -> StoreKitConfiguration.ConfigurationError {
            StoreKitConfiguration.ConfigurationError(
                description: "subscription '\(productID)': billingPlans \(what)")
        }
        guard let items = value.arrayValue, items.count <= 16 else { throw refuse("must be an array (at most 16)") }
        var plans: [BillingPlan] = []
        for item in items {
            guard let raw = item["billingPlanType"]?.stringValue else { throw refuse("entries need a billingPlanType") }
            guard let type = BillingPlanType(rawValue: raw) else {
                throw refuse("has an unknown billingPlanType '\(raw)' (BILLED_UPFRONT or MONTHLY)")
            }
            let displayPrice = item["displayPrice"]?.stringValue
            let commitment = item["commitmentDisplayPrice"]?.stringValue
            if type == .monthly {
                guard period == StorePeriod(years: 1) else {
                    throw refuse("MONTHLY is a yearly (P1Y) subscription's plan")
                }
                guard StoreKitConfiguration.isPrice(displayPrice) else {
                    throw refuse("MONTHLY needs a displayPrice such as \"2.49\"")
                }
            }
            if let commitment, !StoreKitConfiguration.isPrice(commitment) {
                throw refuse("commitmentDisplayPrice '\(commitment)' is not a price")
            }
            plans.append(
                BillingPlan(
                    type: type, displayPrice: displayPrice, commitmentDisplayPrice: commitment,
                    isEnabled: item["isEnabled"]?.boolValue ?? true))
        }
        return plans
    }

    /// Promotional offers (`adHocOffers`).
    public var promotionalOffers: [SubscriptionOffer] { offers("adHocOffers") }
    public var codeOffers: [SubscriptionOffer] { offers("codeOffers") }
    public var winBackOffers: [SubscriptionOffer] { offers("winbackOffers") }

    private func offers(_ key: String) -> [SubscriptionOffer] {
        (json[key]?.arrayValue ?? []).compactMap(\.objectValue).map(SubscriptionOffer.init)
    }
}

/// An introductory, promotional, code or win-back offer.
public struct SubscriptionOffer: Sendable, Hashable {
    public var json: JSONObject

    /// `free`, `payAsYouGo` or `payUpFront`, as written.
    public var paymentMode: String? { json["paymentMode"]?.stringValue }
    /// The JWS `offerDiscountType` for the payment mode.
    public var offerDiscountType: String? {
        switch paymentMode {
        case "free": "FREE_TRIAL"
        case "payAsYouGo": "PAY_AS_YOU_GO"
        case "payUpFront": "PAY_UP_FRONT"
        default: nil
        }
    }
    public var period: StorePeriod? { json["subscriptionPeriod"]?.stringValue.flatMap(StorePeriod.init) }
    /// How many periods the offer lasts (1 when the file, as format 1.1 does, leaves it out; at most 120).
    public var numberOfPeriods: Int { json["numberOfPeriods"]?.int64Value.map { Int(max(1, min($0, 120))) } ?? 1 }
    /// The promotional or win-back offer's identifier (`offerID`).
    public var offerID: String? { json["offerID"]?.stringValue }
    public var referenceName: String? { json["referenceName"]?.stringValue }
    public var internalID: String? { json["internalID"]?.stringValue }
    /// The price of each discounted period as written (`"0.99"`); nil for a free trial.
    public var displayPrice: String? { json["displayPrice"]?.stringValue }
    /// Offer codes: who may redeem — `new`, `existing` and/or `expired` subscribers (all when not written).
    public var eligibility: [String] {
        json["eligibility"]?.arrayValue?.compactMap(\.stringValue) ?? ["new", "existing", "expired"]
    }
}

/// The `settings` object.
public struct Settings: Sendable, Hashable {
    public var json: JSONObject

    /// `_timeRate`, when it names a rate Storekeeper knows.
    public var timeRate: TimeRate? { json["_timeRate"]?.int64Value.flatMap { TimeRate(rawValue: Int($0)) } }
    public var storefront: String? { json["_storefront"]?.stringValue }
    public var locale: String? { json["_locale"]?.stringValue }
    public var askToBuyEnabled: Bool { json["_askToBuyEnabled"]?.boolValue ?? false }
    public var failTransactionsEnabled: Bool { json["_failTransactionsEnabled"]?.boolValue ?? false }
    /// Xcode 15's StoreKit errors (`_storeKitErrors`, which replaced `_failTransactionsEnabled`): whether the
    /// purchase error is turned on, so that purchases fail.
    public var purchaseErrorEnabled: Bool {
        (json["_storeKitErrors"]?.arrayValue ?? []).contains { item in
            item["enabled"]?.boolValue == true
                && (item["name"]?.stringValue == "Purchase" || item["current"]?["type"]?.stringValue == "purchase")
        }
    }
    public var billingGracePeriodEnabled: Bool { json["_billingGracePeriodEnabled"]?.boolValue ?? false }
    /// Xcode's "Renewal Billing Issues": renewals fail and enter billing retry.
    public var renewalBillingIssuesEnabled: Bool { json["_renewalBillingIssuesEnabled"]?.boolValue ?? false }
}
