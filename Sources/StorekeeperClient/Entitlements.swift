public import Foundation

/// One entitlement of a user, as the purchase server computed it from the user's purchases and grants.
public struct Entitlement: Sendable, Hashable {
    public let name: String
    public let isActive: Bool
    /// The product that gives it (nil for a developer's grant without one).
    public let productID: String?
    /// Nil when it does not expire (a non-consumable, a grant without an end).
    public let expiresDate: Date?
    public let willRenew: Bool
    /// `normal`, `trial`, `intro` or `promotional` (RevenueCat's words).
    public let periodType: String
    public let isInGracePeriod: Bool
    public let isInBillingRetry: Bool
    /// `app_store` (a purchase) or `promotional` (a developer's grant).
    public let source: String
}

/// A user's entitlements at one moment: what the server answered, and when this client received it.
public struct Entitlements: Sendable, Hashable {
    public let appUserID: String
    public let bundleID: String
    /// Every entitlement the server knows for the user, active or not, by name.
    public let all: [String: Entitlement]
    /// The server's clock when it answered (the store's time when it follows the emulator's clock).
    public let serverDate: Date?
    /// This client's clock when the answer arrived.
    public let receivedDate: Date

    public subscript(name: String) -> Entitlement? { all[name] }

    /// The active ones, by name.
    public var active: [Entitlement] { all.values.filter(\.isActive).sorted { $0.name < $1.name } }

    public func isActive(_ name: String) -> Bool { all[name]?.isActive ?? false }

    /// How old this answer is at `now`, in seconds.
    public func age(at now: Date) -> TimeInterval { max(0, now.timeIntervalSince(receivedDate)) }
}

/// What the server answered a synced transaction or app transaction.
public struct SyncResult: Sendable, Hashable {
    /// The user's entitlements after the server applied the post.
    public let entitlements: Entitlements
    /// The purchases the post carried, as the server recorded them.
    public let purchases: [SyncedPurchase]
    /// For an app transaction: what the server read from it.
    public let appTransaction: SyncedAppTransaction?
    /// What the server noticed about the user (`purchase_kept_by_other_user`: the purchase is another user's
    /// under the server's `keep` policy, so it gave this one nothing; `multiple_apple_accounts`).
    public let flags: [String]

    public init(
        entitlements: Entitlements, purchases: [SyncedPurchase], appTransaction: SyncedAppTransaction?,
        flags: [String] = []
    ) {
        self.entitlements = entitlements
        self.purchases = purchases
        self.appTransaction = appTransaction
        self.flags = flags
    }
}

public struct SyncedPurchase: Sendable, Hashable {
    public let transactionID: String
    public let originalTransactionID: String
    public let productID: String
    /// `Auto-Renewable Subscription`, `Non-Consumable`, `Consumable` or `Non-Renewing Subscription`.
    public let type: String
    public let purchaseDate: Date?
    public let expiresDate: Date?
    public let isRevoked: Bool
}

public struct SyncedAppTransaction: Sendable, Hashable {
    public let appTransactionID: String?
    public let originalApplicationVersion: String?
    public let originalPurchaseDate: Date?
    /// `Production`, `Sandbox` or `Xcode`.
    public let environment: String
}
