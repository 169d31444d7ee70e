public import StoreKitCatalog
public import StoreModel

/// The products the emulator sells, from its `.storekit` catalogues, indexed by product id.
public struct Catalog: Sendable {
    /// One product as the store sees it.
    public struct Entry: Sendable {
        public var productID: String
        public var kind: ProductKind
        public var displayPrice: String? { didSet { price = Self.price(displayPrice) } }
        public var name: String?
        /// The subscription's definition, for auto-renewable subscriptions.
        public var subscription: Subscription?
        /// Family Sharing: a purchase gives every member of the buyer's family access.
        public var familyShareable = false
        /// The price in milliunits (the catalogue's currency is USD), parsed once: every renewal reads it.
        public private(set) var price: Money?
        /// The monthly plan over a commitment (`billingPlans`), for a yearly subscription sold with one: each
        /// month's price, the number of months, and the whole commitment's price (`commitmentDisplayPrice`,
        /// else the months' prices added up).
        public private(set) var monthlyPlan: (price: Money, periods: Int, commitmentPrice: Money)?

        private static func monthlyPlan(_ subscription: Subscription?) -> (
            price: Money, periods: Int, commitmentPrice: Money
        )? {
            guard let plan = subscription?.monthlyPlan,
                let price = plan.displayPrice.flatMap({ Money(decimal: $0, currency: "USD") })
            else { return nil }
            let (added, overflow) = price.milliunits.multipliedReportingOverflow(by: Int64(plan.totalBillingPeriods))
            let total =
                plan.commitmentDisplayPrice.flatMap { Money(decimal: $0, currency: "USD") }
                ?? Money(milliunits: overflow ? .max : added, currency: "USD")
            return (price, plan.totalBillingPeriods, total)
        }

        init(
            productID: String, kind: ProductKind, displayPrice: String?, name: String?,
            subscription: Subscription? = nil, familyShareable: Bool
        ) {
            self.productID = productID
            self.kind = kind
            self.displayPrice = displayPrice
            self.name = name
            self.subscription = subscription
            self.familyShareable = familyShareable
            price = Self.price(displayPrice)
            monthlyPlan = Self.monthlyPlan(subscription)
        }

        private static func price(_ displayPrice: String?) -> Money? {
            displayPrice.flatMap { Money(decimal: $0, currency: "USD") }
        }
    }

    private let entries: [String: Entry]
    /// Each subscription group's win-back offers, by their identifiers, in the catalogue's order.
    private let winBackOffers: [String: [String]]

    /// Refuses a product defined in two catalogues (one of them would be dropped without a word).
    init(_ configurations: [StoreKitConfiguration]) throws(EmulatorError) {
        var entries: [String: Entry] = [:]
        var winBackOffers: [String: [String]] = [:]
        for configuration in configurations {
            for id in configuration.products.map(\.productID) + configuration.subscriptions.map(\.productID)
            where entries[id] != nil {
                throw EmulatorError.configuration("product '\(id)' is defined in two catalogues")
            }
            for subscription in configuration.subscriptions {
                guard let group = subscription.groupID else { continue }
                winBackOffers[group, default: []] += subscription.winBackOffers.compactMap(AppStore.winBackID)
            }
            for product in configuration.products where entries[product.productID] == nil {
                entries[product.productID] = Entry(
                    productID: product.productID, kind: product.kind, displayPrice: product.displayPrice,
                    name: Localization.displayName(product.localizations, locale: configuration.settings.locale),
                    familyShareable: product.familyShareable)
            }
            for subscription in configuration.subscriptions where entries[subscription.productID] == nil {
                entries[subscription.productID] = Entry(
                    productID: subscription.productID, kind: .autoRenewable, displayPrice: subscription.displayPrice,
                    name: Localization.displayName(subscription.localizations, locale: configuration.settings.locale),
                    subscription: subscription,
                    familyShareable: subscription.familyShareable)
            }
        }
        self.entries = entries
        self.winBackOffers = winBackOffers
    }

    /// The win-back offers of subscription group `group` (renewal info's `eligibleWinBackOfferIds`).
    func winBackOfferIDs(group: String) -> [String] { winBackOffers[group] ?? [] }

    public func entry(_ productID: String) -> Entry? { entries[productID] }

    /// Every product, by product id.
    public var all: [Entry] { entries.values.sorted { $0.productID < $1.productID } }
}
