import Foundation

/// An app the emulator sells for (`--config` JSON or `--bundle-id`).
public struct AppConfiguration: Codable, Sendable, Hashable {
    public var bundleID: String
    public var appAppleID: Int64
    /// The version a fresh install gets when the install request names none.
    public var version: String
    /// verifyReceipt's `password`; nil accepts any.
    public var sharedSecret: String?
    /// Where server notifications go, by version ("v1", "v2"); kept for the emulator's notification part.
    public var notificationURLs: [String: String]?

    public init(
        bundleID: String, appAppleID: Int64 = 1_234_567_890, version: String = "1.0", sharedSecret: String? = nil
    ) {
        self.bundleID = bundleID
        self.appAppleID = appAppleID
        self.version = version
        self.sharedSecret = sharedSecret
    }
}

/// Everything the emulator remembers; persisted whole after every change.
struct StoreState: Codable, Sendable {
    struct Account: Codable, Sendable {
        var id: String
        var environment: String  // "Sandbox" | "Production"
        var storefront: String
        /// Ask to Buy: purchases wait as `deferred` until approved or declined.
        var askToBuy: Bool?
        /// Failure injection for the account's purchases: "failed" or "interrupted".
        var purchaseFailure: String?
    }

    /// A payment that did not (yet) become a purchase: deferred (Ask to Buy), failed or interrupted.
    struct PendingPayment: Codable, Sendable {
        var id: String
        var accountID: String
        var bundleID: String
        var productID: String
        var quantity: Int
        var date: Date
        var state: String  // "deferred" | "failed"
        var reason: String?  // "declined" | "failed" | "interrupted"
        var finished: Bool
        var appAccountToken: String?
        var applicationUsername: String?
        /// Interrupted payments complete once the customer resolves the interruption.
        var resolvable: Bool
    }

    struct Device: Codable, Sendable {
        var id: String  // UUID string, the identifierForVendor
        var accountID: String
    }

    struct Install: Codable, Sendable {
        var deviceID: String
        var bundleID: String
        var version: String
        var originalVersion: String
        var originalPurchaseDate: Date
        /// Volume Purchase Program licence: assigned, and when it was revoked.
        var vppAssigned: Bool?
        var vppRevokedAt: Date?
    }

    /// A StoreKit transaction; renewals are new transactions with the same original id.
    struct Transaction: Codable, Sendable {
        var id: String
        var originalID: String
        var accountID: String
        var bundleID: String
        var productID: String
        var kind: String  // ProductKind raw value
        var quantity: Int
        var purchaseDate: Date
        var originalPurchaseDate: Date
        var expiresDate: Date?
        var webOrderLineItemID: Int64?
        var renewalNumber: Int  // 0 for the purchase, n for the nth renewal
        var finished: Bool
        var appAccountToken: String?
        var applicationUsername: String?
        var isTrialPeriod: Bool
        var subscriptionGroupID: String?
    }

    var accounts: [Account] = []
    var devices: [Device] = []
    var installs: [Install] = []
    var transactions: [Transaction] = []
    var pending: [PendingPayment]? = []
    var nextTransactionID: Int64 = 2_000_000_000_000_001
    var nextWebOrderLineItemID: Int64 = 2_000_000_100_000_001
    var clockOffset: TimeInterval = 0
    var rateName = "monthlyRenewalEveryFiveMinutes"

    mutating func newTransactionID() -> String {
        defer { nextTransactionID += 1 }
        return String(nextTransactionID)
    }

    mutating func newWebOrderLineItemID() -> Int64 {
        defer { nextWebOrderLineItemID += 1 }
        return nextWebOrderLineItemID
    }
}
