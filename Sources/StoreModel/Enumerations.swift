/// The App Store environment a purchase, receipt or signed payload belongs to.
public enum Environment: String, Sendable, Hashable, CaseIterable, Codable {
    case production = "Production"
    case sandbox = "Sandbox"
    case xcode = "Xcode"
    case localTesting = "LocalTesting"

    /// Where the App Store has customers (accounts, notifications, the Server API): Sandbox and Production.
    public static let customerEnvironments: [Environment] = [.sandbox, .production]

    /// The one reading of an environment's name: Apple's ("Production", "Sandbox", "Xcode", "LocalTesting";
    /// a receipt's "ProductionSandbox" is the sandbox), limited to `allowed`; nil for anything else.
    public init?(name: String, among allowed: [Environment] = Environment.allCases) {
        let value = name == "ProductionSandbox" ? Environment.sandbox : Environment(rawValue: name)
        guard let value, allowed.contains(value) else { return nil }
        self = value
    }

    /// `allowed`'s names for a message: "Sandbox, Production".
    public static func names(_ allowed: [Environment]) -> String { allowed.map(\.rawValue).joined(separator: ", ") }
}

/// The four kinds of in-app product. Raw values are the JWS `type` strings; the receipt's attribute 1707
/// and the `.storekit` file's `type` are renderings of the same value.
public enum ProductKind: String, Sendable, Hashable, CaseIterable, Codable {
    case autoRenewable = "Auto-Renewable Subscription"
    case nonConsumable = "Non-Consumable"
    case consumable = "Consumable"
    case nonRenewing = "Non-Renewing Subscription"

    /// The receipt's attribute 1707 value (0 non-consumable, 1 consumable, 2 non-renewing, 3 auto-renewable).
    public var receiptProductType: Int64 {
        switch self {
        case .nonConsumable: 0
        case .consumable: 1
        case .nonRenewing: 2
        case .autoRenewable: 3
        }
    }

    public init?(receiptProductType: Int64) {
        guard let kind = Self.allCases.first(where: { $0.receiptProductType == receiptProductType }) else {
            return nil
        }
        self = kind
    }

    /// The `type` of a product in a `.storekit` file ("Consumable", "NonConsumable", "NonRenewable",
    /// "RecurringSubscription" or "AutoRenewable").
    public init?(storeKitType: String) {
        switch storeKitType {
        case "Consumable": self = .consumable
        case "NonConsumable": self = .nonConsumable
        case "NonRenewable", "NonRenewingSubscription": self = .nonRenewing
        case "RecurringSubscription", "AutoRenewable": self = .autoRenewable
        default: return nil
        }
    }

    /// Whether a finished transaction of this kind leaves the receipt (consumables only).
    public var leavesReceiptWhenFinished: Bool { self == .consumable }
}

/// `inAppOwnershipType`.
public enum OwnershipType: String, Sendable, Hashable, CaseIterable, Codable {
    case purchased = "PURCHASED"
    case familyShared = "FAMILY_SHARED"
}

/// `transactionReason`.
public enum TransactionReason: String, Sendable, Hashable, CaseIterable, Codable {
    case purchase = "PURCHASE"
    case renewal = "RENEWAL"
}

/// `offerType`.
public enum OfferType: Int64, Sendable, Hashable, CaseIterable, Codable {
    case introductory = 1
    case promotional = 2
    case offerCode = 3
    case winBack = 4
    /// A retention offer (WWDC26): redeemed on the cancellation page, from a retention message.
    case retention = 5
}

/// `billingPlanType` and `renewalBillingPlanType` (API 1.21): a yearly subscription billed up front, or
/// monthly over a 12-month commitment.
public enum BillingPlanType: String, Sendable, Hashable, CaseIterable, Codable {
    case billedUpfront = "BILLED_UPFRONT"
    case monthly = "MONTHLY"
}

/// `offerDiscountType`.
public enum OfferDiscountType: String, Sendable, Hashable, CaseIterable, Codable {
    case freeTrial = "FREE_TRIAL"
    case payAsYouGo = "PAY_AS_YOU_GO"
    case payUpFront = "PAY_UP_FRONT"
}

/// `revocationReason`.
public enum RevocationReason: Int64, Sendable, Hashable, CaseIterable, Codable {
    case other = 0
    case appIssue = 1
}

/// `expirationIntent`.
public enum ExpirationIntent: Int64, Sendable, Hashable, CaseIterable, Codable {
    case customerCancelled = 1
    case billingError = 2
    case didNotConsentToPriceIncrease = 3
    case productNotAvailable = 4
    case other = 5
}

/// Apple's subscription status (Get All Subscription Statuses, `data.status` of notifications).
public enum SubscriptionStatus: Int64, Sendable, Hashable, CaseIterable, Codable {
    case active = 1
    case expired = 2
    case billingRetry = 3
    case billingGracePeriod = 4
    case revoked = 5
}

/// A unified receipt's type (attribute 0): the environment it was issued in, and whether it came through
/// the Volume Purchase Program.
public enum ReceiptType: String, Sendable, Hashable, CaseIterable, Codable {
    case production = "Production"
    case productionVPP = "ProductionVPP"
    case productionSandbox = "ProductionSandbox"
    case productionVPPSandbox = "ProductionVPPSandbox"
    case xcode = "Xcode"

    public init(environment: Environment, volumePurchase: Bool) {
        switch (environment, volumePurchase) {
        case (.production, false): self = .production
        case (.production, true): self = .productionVPP
        case (.xcode, _), (.localTesting, _): self = .xcode
        case (_, false): self = .productionSandbox
        case (_, true): self = .productionVPPSandbox
        }
    }

    public var environment: Environment {
        switch self {
        case .production, .productionVPP: .production
        case .productionSandbox, .productionVPPSandbox: .sandbox
        case .xcode: .xcode
        }
    }
}
