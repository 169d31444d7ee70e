public import Foundation
public import StoreModel

/// A customer's test account.
public struct Account: Sendable, Hashable {
    public var id: AccountID
    public var environment: Environment
    /// ISO 3166-1 alpha-3, e.g. "USA".
    public var storefront: String
    /// Ask to Buy: purchases wait as `deferred` until approved or declined.
    public var askToBuy: Bool
    /// Failure injection for the account's purchases.
    public var purchaseFailure: PurchaseFailure?
    /// Renewals fail and enter billing retry (`shouldEnterBillingRetryOnRenewal`).
    public var billingRetryOnRenewal: Bool
    /// A billing grace period precedes billing retry (`billingGracePeriodIsEnabled`).
    public var billingGracePeriod: Bool

    public init(
        id: AccountID, environment: Environment, storefront: String, askToBuy: Bool = false,
        purchaseFailure: PurchaseFailure? = nil, billingRetryOnRenewal: Bool = false, billingGracePeriod: Bool = false
    ) {
        self.id = id
        self.environment = environment
        self.storefront = storefront
        self.askToBuy = askToBuy
        self.purchaseFailure = purchaseFailure
        self.billingRetryOnRenewal = billingRetryOnRenewal
        self.billingGracePeriod = billingGracePeriod
    }
}

/// How the emulator fails an account's purchases when asked to.
public enum PurchaseFailure: String, Sendable, Hashable, CaseIterable {
    case failed
    case interrupted
}

/// A device of an account (its `identifierForVendor`).
public struct Device: Sendable, Hashable {
    public var id: DeviceID
    public var accountID: AccountID

    public init(id: DeviceID, accountID: AccountID) {
        self.id = id
        self.accountID = accountID
    }
}

/// An app installed on a device.
public struct Install: Sendable, Hashable {
    public var deviceID: DeviceID
    public var bundleID: BundleID
    public var version: String
    public var originalVersion: String
    public var originalPurchaseDate: Date
    /// Volume Purchase Program licence: assigned, and when it was revoked.
    public var vppAssigned: Bool
    public var vppRevokedAt: Date?

    public init(
        deviceID: DeviceID, bundleID: BundleID, version: String, originalVersion: String, originalPurchaseDate: Date,
        vppAssigned: Bool = false, vppRevokedAt: Date? = nil
    ) {
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.version = version
        self.originalVersion = originalVersion
        self.originalPurchaseDate = originalPurchaseDate
        self.vppAssigned = vppAssigned
        self.vppRevokedAt = vppRevokedAt
    }
}

/// A transaction as the emulator keeps it: the store's ``Transaction`` plus who bought it and where it is
/// in the payment queue.
public struct StoredTransaction: Sendable, Hashable {
    public var transaction: Transaction
    public var accountID: AccountID
    /// 0 for the purchase, n for the nth renewal.
    public var renewalNumber: Int
    /// Finished by the app (`finishTransaction`): leaves the queue, and consumables leave the receipt.
    public var finished: Bool
    public var applicationUsername: String?
    /// The order id on the customer's e-mailed invoice (Look Up Order ID); nil for a family member's access.
    public var orderID: String?
    /// Where the transaction stands in the order transactions last changed (Get Transaction History's
    /// `revision`): set by the storage on insert and whenever the ``transaction`` itself changes.
    public var revision: Int64

    public init(
        transaction: Transaction, accountID: AccountID, renewalNumber: Int = 0, finished: Bool = false,
        applicationUsername: String? = nil, orderID: String? = nil, revision: Int64 = 0
    ) {
        self.transaction = transaction
        self.accountID = accountID
        self.renewalNumber = renewalNumber
        self.finished = finished
        self.applicationUsername = applicationUsername
        self.orderID = orderID
        self.revision = revision
    }

    public var id: TransactionID { transaction.id }

    /// Whether Apple's rules put it in a receipt: consumables until finished, everything else for good.
    public var isInReceipt: Bool { !(transaction.kind.leavesReceiptWhenFinished && finished) }
}

/// One auto-renewable subscription (an original transaction) and its renewal state.
public struct StoredSubscription: Sendable, Hashable {
    public var state: SubscriptionState
    public var accountID: AccountID
    public var bundleID: BundleID
    public var latestTransactionID: TransactionID

    public init(
        state: SubscriptionState, accountID: AccountID, bundleID: BundleID, latestTransactionID: TransactionID
    ) {
        self.state = state
        self.accountID = accountID
        self.bundleID = bundleID
        self.latestTransactionID = latestTransactionID
    }

    public var originalTransactionID: TransactionID { state.originalTransactionID }
}

/// A payment that did not (yet) become a purchase: deferred (Ask to Buy), failed or interrupted.
public struct PendingPayment: Sendable, Hashable {
    public enum State: String, Sendable, Hashable {
        case deferred, failed, approved
    }

    public enum Reason: String, Sendable, Hashable {
        case declined, failed, interrupted
    }

    public var id: TransactionID
    public var accountID: AccountID
    public var bundleID: BundleID
    public var productID: ProductID
    public var quantity: Int
    public var date: Date
    public var state: State
    public var reason: Reason?
    public var finished: Bool
    public var appAccountToken: String?
    public var applicationUsername: String?
    /// Interrupted payments complete once the customer resolves the interruption.
    public var resolvable: Bool

    public init(
        id: TransactionID, accountID: AccountID, bundleID: BundleID, productID: ProductID, quantity: Int, date: Date,
        state: State, reason: Reason?, finished: Bool = false, appAccountToken: String? = nil,
        applicationUsername: String? = nil, resolvable: Bool = false
    ) {
        self.id = id
        self.accountID = accountID
        self.bundleID = bundleID
        self.productID = productID
        self.quantity = quantity
        self.date = date
        self.state = state
        self.reason = reason
        self.finished = finished
        self.appAccountToken = appAccountToken
        self.applicationUsername = applicationUsername
        self.resolvable = resolvable
    }
}

/// Work that falls due at a store time: a renewal now; grace and retry ends and notification attempts next.
/// At most one event per (kind, key).
public struct DueEvent: Sendable, Hashable {
    public struct Kind: RawRepresentable, Sendable, Hashable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The end of a subscription period: renew, or let it expire. Key: the original transaction id.
        public static let renewal = Kind(rawValue: "renewal")
        /// The end of a billing grace period. Key: the original transaction id.
        public static let gracePeriodEnd = Kind(rawValue: "grace-period-end")
        /// The end of billing retry. Key: the original transaction id.
        public static let billingRetryEnd = Kind(rawValue: "billing-retry-end")
        /// The next attempt to send a notification. Key: the notification's id.
        public static let notificationAttempt = Kind(rawValue: "notification-attempt")
        /// A claimed attempt's lease: if no result is recorded by then, the attempt is made again; at start,
        /// every lease is a send that a stopped process never finished. Key: the notification's id.
        public static let notificationLease = Kind(rawValue: "notification-lease")
    }

    public var kind: Kind
    public var key: String
    public var due: Date

    public init(kind: Kind, key: String, due: Date) {
        self.kind = kind
        self.key = key
        self.due = due
    }
}

/// A Family Sharing group: its organizer and its members (the organizer among them), each account in at
/// most one family.
public struct Family: Sendable, Hashable {
    public var id: String
    public var organizer: AccountID
    public var members: [AccountID]

    public init(id: String, organizer: AccountID, members: [AccountID]) {
        self.id = id
        self.organizer = organizer
        self.members = members
    }
}

/// A family member's access to a purchase another member made: the purchase (its original transaction),
/// the member, and the member's own original transaction for it (ownership `FAMILY_SHARED`).
public struct FamilyShare: Sendable, Hashable {
    public var sourceOriginalID: TransactionID
    public var memberAccountID: AccountID
    public var memberOriginalID: TransactionID
    /// Access ended (REVOKE): the member left the family, or the purchase was refunded.
    public var revoked: Bool

    public init(
        sourceOriginalID: TransactionID, memberAccountID: AccountID, memberOriginalID: TransactionID,
        revoked: Bool = false
    ) {
        self.sourceOriginalID = sourceOriginalID
        self.memberAccountID = memberAccountID
        self.memberOriginalID = memberOriginalID
        self.revoked = revoked
    }
}

/// What a renewal-date extension answered, kept so that the same request identifier answers the same and
/// the yearly cap can be counted.
public struct ExtensionRecord: Sendable, Hashable {
    public var originalTransactionID: TransactionID
    public var requestIdentifier: String
    public var date: Date
    public var effectiveDate: Date
    public var webOrderLineItemID: String

    public init(
        originalTransactionID: TransactionID, requestIdentifier: String, date: Date, effectiveDate: Date,
        webOrderLineItemID: String
    ) {
        self.originalTransactionID = originalTransactionID
        self.requestIdentifier = requestIdentifier
        self.date = date
        self.effectiveDate = effectiveDate
        self.webOrderLineItemID = webOrderLineItemID
    }
}

/// A mass extension's progress.
public struct MassExtension: Sendable, Hashable {
    public var requestIdentifier: String
    public var productID: String
    public var environment: Environment
    /// Upper-cased ISO 3166-1 alpha-3 codes; nil for every storefront.
    public var storefronts: [String]?
    public var complete: Bool
    public var completeDate: Date?
    public var succeeded: Int64
    public var failed: Int64
    /// What a restart needs to go on with it: the app, the request's days and reason, and the last of the
    /// product's subscriptions (in their stored order: original ids by length, then as text) it has been
    /// through. Nil for one stored by a build that kept none of it.
    public var resume: Resume?

    public struct Resume: Sendable, Hashable {
        public var bundleID: String
        public var days: Int
        public var reason: Int
        public var after: String?

        public init(bundleID: String, days: Int, reason: Int, after: String? = nil) {
            (self.bundleID, self.days, self.reason, self.after) = (bundleID, days, reason, after)
        }
    }

    public init(
        requestIdentifier: String, productID: String, environment: Environment, storefronts: [String]?,
        complete: Bool = false, completeDate: Date? = nil, succeeded: Int64 = 0, failed: Int64 = 0,
        resume: Resume? = nil
    ) {
        self.requestIdentifier = requestIdentifier
        self.productID = productID
        self.environment = environment
        self.storefronts = storefronts
        self.complete = complete
        self.completeDate = completeDate
        self.succeeded = succeeded
        self.failed = failed
        self.resume = resume
    }
}

/// The consumption information last sent for a transaction (Send Consumption Information v1 or v2): its
/// version and its body as sent.
public struct ConsumptionRecord: Sendable, Hashable {
    public var transactionID: TransactionID
    public var version: Int
    /// The request's JSON, as sent.
    public var body: String

    public init(transactionID: TransactionID, version: Int, body: String) {
        self.transactionID = transactionID
        self.version = version
        self.body = body
    }
}

/// An App Store Server API key minted at run time: its public half and the app it signs for.
public struct MintedAPIKey: Sendable, Hashable {
    public var keyID: String
    public var issuerID: String
    public var bundleID: String
    /// The public key, DER (SubjectPublicKeyInfo).
    public var publicKey: [UInt8]

    public init(keyID: String, issuerID: String, bundleID: String, publicKey: [UInt8]) {
        self.keyID = keyID
        self.issuerID = issuerID
        self.bundleID = bundleID
        self.publicKey = publicKey
    }
}
