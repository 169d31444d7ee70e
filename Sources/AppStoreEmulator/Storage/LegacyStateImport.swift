import Foundation
import StoreModel

/// The whole-document state of builds before the tables (migration 001), read once to import it.
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
}

/// Moves a state document of an older build into the tables, row by row.
enum LegacyStateImport {
    static func importDocument(_ document: [UInt8], into store: any EmulatorStore) throws {
        let state = try JSONDecoder().decode(StoreState.self, from: Data(document))
        for account in state.accounts {
            try store.insert(
                Account(
                    id: AccountID(account.id), environment: Environment(rawValue: account.environment) ?? .sandbox,
                    storefront: account.storefront, askToBuy: account.askToBuy ?? false,
                    purchaseFailure: account.purchaseFailure.flatMap(PurchaseFailure.init(rawValue:))))
        }
        for device in state.devices {
            try store.insert(Device(id: DeviceID(device.id.uppercased()), accountID: AccountID(device.accountID)))
        }
        for install in state.installs {
            try store.save(
                Install(
                    deviceID: DeviceID(install.deviceID.uppercased()), bundleID: BundleID(install.bundleID),
                    version: install.version, originalVersion: install.originalVersion,
                    originalPurchaseDate: install.originalPurchaseDate, vppAssigned: install.vppAssigned ?? false,
                    vppRevokedAt: install.vppRevokedAt))
        }
        for old in state.transactions {
            let kind = ProductKind(rawValue: old.kind) ?? .consumable
            let transaction = Transaction(
                id: TransactionID(old.id), originalID: TransactionID(old.originalID), bundleID: BundleID(old.bundleID),
                productID: ProductID(old.productID), kind: kind, quantity: old.quantity, purchaseDate: old.purchaseDate,
                originalPurchaseDate: old.originalPurchaseDate, expiresDate: old.expiresDate,
                webOrderLineItemID: old.webOrderLineItemID, subscriptionGroupID: old.subscriptionGroupID,
                reason: old.renewalNumber > 0 ? .renewal : .purchase,
                offer: old.isTrialPeriod ? Offer(type: .introductory, discountType: .freeTrial) : nil,
                appAccountToken: old.appAccountToken)
            try store.insert(
                StoredTransaction(
                    transaction: transaction, accountID: AccountID(old.accountID), renewalNumber: old.renewalNumber,
                    finished: old.finished, applicationUsername: old.applicationUsername))
            guard kind == .autoRenewable else { continue }
            if let existing = try store.subscription(transaction.originalID),
                existing.state.renewalCount > old.renewalNumber
            {
                continue
            }
            try store.save(
                StoredSubscription(
                    state: SubscriptionState(
                        originalTransactionID: transaction.originalID, productID: transaction.productID,
                        expiresDate: old.expiresDate, renewalCount: old.renewalNumber),
                    accountID: AccountID(old.accountID), bundleID: transaction.bundleID,
                    latestTransactionID: transaction.id))
            if let expires = old.expiresDate {
                try store.schedule(DueEvent(kind: .renewal, key: transaction.originalID.rawValue, due: expires))
            }
        }
        for payment in state.pending ?? [] {
            try store.insert(
                PendingPayment(
                    id: TransactionID(payment.id), accountID: AccountID(payment.accountID),
                    bundleID: BundleID(payment.bundleID), productID: ProductID(payment.productID),
                    quantity: payment.quantity, date: payment.date,
                    state: PendingPayment.State(rawValue: payment.state) ?? .failed,
                    reason: payment.reason.flatMap(PendingPayment.Reason.init(rawValue:)), finished: payment.finished,
                    appAccountToken: payment.appAccountToken, applicationUsername: payment.applicationUsername,
                    resolvable: payment.resolvable))
        }
        try store.setSetting(AppStore.Setting.nextTransactionID, String(state.nextTransactionID))
        try store.setSetting(AppStore.Setting.nextWebOrderLineItemID, String(state.nextWebOrderLineItemID))
        try store.setSetting(AppStore.Setting.clockOffset, String(state.clockOffset))
        try store.setSetting(AppStore.Setting.rate, state.rateName)
    }
}
