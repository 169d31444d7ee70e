import AppStoreReceipts
import AppStoreSignedData
public import Foundation
import StoreKitCatalog
public import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperLogging
import SubscriptionLifecycle
import Synchronization

/// What a customer does on a device: accounts, devices and installs, products, payments and the queue, Ask
/// to Buy, receipts and signed data.
extension AppStore {
    // MARK: - Accounts, devices, installs

    /// A test account in `storefront` (an ISO 3166-1 alpha-3 code; nil: ``defaultStorefront``).
    public func createAccount(environment: Environment, storefront code: String? = nil) async throws -> Account {
        guard environment == .sandbox || environment == .production else {
            throw EmulatorError.invalid("environment must be Sandbox or Production")
        }
        guard let storefront = code.map(Storefront.init(countryCode:)) ?? defaultStorefront else {
            throw EmulatorError.invalid(
                "member 'storefront' must be an App Store storefront's ISO 3166-1 alpha-3 code such as USA")
        }
        let settings = accountDefaults
        let account = Account(
            id: AccountID(newTimeOrderedUUID(at: now)), environment: environment, storefront: storefront.countryCode,
            askToBuy: settings?.askToBuyEnabled ?? false,
            purchaseFailure: settings?.failTransactionsEnabled == true || settings?.purchaseErrorEnabled == true
                ? .failed : nil,
            billingRetryOnRenewal: settings?.renewalBillingIssuesEnabled ?? false,
            billingGracePeriod: settings?.billingGracePeriodEnabled ?? false)
        try await storage.write { try $0.insert(account) }
        return account
    }

    public func createDevice(accountID: AccountID, deviceID: UUID?) async throws -> Device {
        let device = Device(id: DeviceID((deviceID ?? UUID(bytes: randomBytes(16))).uuidString), accountID: accountID)
        try await catchUp()
        try await storage.write { store in
            guard try store.account(accountID) != nil else { throw EmulatorError.notFound("no account \(accountID)") }
            guard try store.device(device.id) == nil else { throw EmulatorError.invalid("device \(device.id) exists") }
            try store.insert(device)
        }
        return device
    }

    /// Installs (or updates) an app; the account's first install's version and date are the original ones,
    /// on every device of the account (Apple's original purchase of the app is the account's, not a device's).
    public func install(deviceID: String, bundleID: String, version: String?) async throws -> (
        install: Install, environment: Environment
    ) {
        let app = try self.app(bundleID)
        let version = version ?? app.version
        let current = now
        return try await storage.write { store in
            let (device, account) = try self.device(deviceID, in: store)
            var install: Install
            if let installed = try store.install(device: device.id, bundle: BundleID(bundleID)) {
                install = installed
            } else {
                let first = try store.installs(account: account.id, bundle: BundleID(bundleID)).first
                install = Install(
                    deviceID: device.id, bundleID: BundleID(bundleID), version: version,
                    originalVersion: first?.originalVersion ?? version,
                    originalPurchaseDate: first?.originalPurchaseDate ?? current)
            }
            install.version = version
            try store.save(install)
            // The download is the account's app transaction (once per account and app).
            _ = try store.makeAppTransaction(account: account.id, bundle: BundleID(bundleID))
            return (install, account.environment)
        }
    }

    // MARK: - Catalogue

    /// The products a device's request names, and the identifiers the catalogue does not have; the device
    /// and the app must exist.
    public func products(_ identifiers: [String], deviceID: String, bundleID: String) async throws -> (
        products: [Catalog.Entry], invalid: [String]
    ) {
        _ = try app(bundleID)
        _ = try await storage.read { try self.device(deviceID, in: $0) }
        return products(identifiers)
    }

    /// The whole catalogue, by product id.
    public var catalogEntries: [Catalog.Entry] { catalog.all }

    /// The products named, and the identifiers the catalogue does not have.
    public func products(_ identifiers: [String]) -> (products: [Catalog.Entry], invalid: [String]) {
        var products: [Catalog.Entry] = []
        var invalid: [String] = []
        for identifier in identifiers {
            if let entry = catalog.entry(identifier) { products.append(entry) } else { invalid.append(identifier) }
        }
        return (products, invalid)
    }

    // MARK: - Payments and the queue

    /// What a payment became: a purchase (with its JWS), or a payment waiting (deferred) or failed.
    public enum PaymentOutcome: Sendable {
        case purchased(StoredTransaction, jws: String)
        case pending(PendingPayment)
    }

    /// An entry of the payment queue.
    public enum QueueEntry: Sendable {
        case transaction(StoredTransaction, state: String)
        case payment(PendingPayment)

        var sortKey: (Date, String) {
            switch self {
            case .transaction(let stored, _): (stored.transaction.purchaseDate, stored.id.rawValue)
            case .payment(let payment): (payment.date, payment.id.rawValue)
            }
        }
    }

    /// Buys `productID`: the transaction is purchased at once and stays in the queue until finished.
    /// An offer is checked (signature, eligibility) when the purchase is made: a deferred or failed payment
    /// gets none.
    public func pay(
        deviceID: String, bundleID: String, productID: String, quantity: Int, applicationUsername: String?,
        appAccountToken: String?, offer: OfferRequest? = nil, billingPlan: BillingPlanType? = nil
    ) async throws -> PaymentOutcome {
        _ = try app(bundleID)
        guard let entry = catalog.entry(productID) else { throw EmulatorError.notFound("no product \(productID)") }
        if billingPlan == .monthly {
            guard entry.monthlyPlan != nil else {
                throw EmulatorError.invalid(
                    "\(productID) is not sold with a monthly plan (billingPlans in the catalogue)")
            }
            guard offer == nil else { throw EmulatorError.invalid("offers for the monthly plan are not modelled") }
        }
        guard (1...10).contains(quantity), quantity == 1 || entry.kind == .consumable else {
            throw EmulatorError.invalid("quantity must be 1, or 1 to 10 for consumables")
        }
        if let token = appAccountToken, UUID(uuidString: token) == nil {
            throw EmulatorError.invalid("appAccountToken must be a UUID")
        }
        try await catchUp()
        let current = now
        let outcome = try await storage.write { store -> Written in
            let (device, account) = try self.device(deviceID, in: store)
            guard try store.install(device: device.id, bundle: BundleID(bundleID)) != nil else {
                throw EmulatorError.invalid("install \(bundleID) on device \(deviceID) first")
            }
            if account.askToBuy || account.purchaseFailure != nil {
                let payment = PendingPayment(
                    id: try self.newTransactionID(in: store), accountID: account.id, bundleID: BundleID(bundleID),
                    productID: ProductID(productID), quantity: quantity, date: current,
                    state: account.askToBuy ? .deferred : .failed,
                    reason: account.askToBuy ? nil : (account.purchaseFailure == .interrupted ? .interrupted : .failed),
                    appAccountToken: appAccountToken?.lowercased(), applicationUsername: applicationUsername,
                    resolvable: !account.askToBuy && account.purchaseFailure == .interrupted)
                try store.insert(payment)
                return .pending(payment)
            }
            return .purchased(
                try self.purchase(
                    account: account, bundleID: bundleID, entry: entry, quantity: quantity,
                    applicationUsername: applicationUsername, appAccountToken: appAccountToken, offer: offer,
                    billingPlan: billingPlan, now: current, in: store))
        }
        switch outcome {
        case .purchased(let stored): return .purchased(stored, jws: try await signedTransaction(stored))
        case .pending(let payment): return .pending(payment)
        }
    }

    enum Written: Sendable {
        case purchased(StoredTransaction)
        case pending(PendingPayment)
    }

    /// Records a completed purchase inside a write.
    func purchase(
        account: Account, bundleID: String, entry: Catalog.Entry, quantity: Int, applicationUsername: String?,
        appAccountToken: String?, offer request: OfferRequest? = nil, billingPlan: BillingPlanType? = nil,
        now current: Date, in store: any EmulatorStore
    ) throws -> StoredTransaction {
        var transaction = Transaction(
            id: try newTransactionID(in: store), bundleID: BundleID(bundleID), productID: ProductID(entry.productID),
            kind: entry.kind, quantity: quantity, purchaseDate: current,
            subscriptionGroupID: entry.subscription?.groupID, price: charged(listPrice(entry.productID), account),
            appAccountToken: appAccountToken?.lowercased())
        transaction.appTransactionID = try store.makeAppTransaction(account: account.id, bundle: BundleID(bundleID))
        guard let subscriptionEntry = entry.subscription, subscriptionEntry.period != nil else {
            _ = try offerTerms(
                request, entry: entry, standing: .new, bundleID: bundleID, appAccountToken: appAccountToken, in: store)
            let stored = StoredTransaction(
                transaction: transaction, accountID: account.id, applicationUsername: applicationUsername,
                orderID: newOrderID(at: current))
            try store.insert(stored)
            // Apple sends ONE_TIME_CHARGE for one-time purchases, so far in the sandbox only.
            if account.environment != .production {
                try enqueue(
                    Notice(.oneTimeCharge), transaction: stored, renewal: nil, account: account, in: store, now: current
                )
            }
            try shareOneTime(stored, account: account, in: store, now: current)
            return stored
        }
        let engine = lifecycle(for: account)
        let group = subscriptionEntry.groupID
        // The account's own subscription in the group (a family member's access to another's is not).
        let existing = try store.subscriptions(account: account.id, bundle: transaction.bundleID).first {
            catalog.entry($0.state.productID.rawValue)?.subscription?.groupID == group
                && (try? isPurchaser($0.originalTransactionID, in: store)) == true
        }
        let monthly = billingPlan == .monthly
        // The monthly plan's offers are not modelled: its first month is at the plan's price.
        let terms =
            monthly
            ? nil
            : try offerTerms(
                request, entry: entry, standing: GroupStanding(existing), bundleID: bundleID,
                appAccountToken: appAccountToken, in: store)
        if var subscription = existing, subscription.state.status == .active || subscription.state.isInBillingRetry {
            guard !monthly else {
                throw EmulatorError.invalid(
                    "a subscriber changes to the monthly plan at renewal; this customer is subscribed in the group")
            }
            // Another product of the group while subscribed: an upgrade, downgrade or crossgrade; or an offer
            // redeemed by a subscriber.
            let productID = transaction.productID
            let event: LifecycleEvent = terms.map { .redeemOffer(productID, $0) } ?? .changeProduct(productID)
            let effects = try Self.refusing { () throws(LifecycleError) in
                try engine.handle(event, to: &subscription.state, at: current)
            }
            try apply(effects, to: &subscription, account: account, in: store, now: current)
            guard let latest = try store.transaction(subscription.latestTransactionID) else {
                throw EmulatorError.notFound("no transaction \(subscription.latestTransactionID)")
            }
            return latest
        }
        transaction.webOrderLineItemID = try newWebOrderLineItemID(in: store)
        if let terms {
            transaction.offer = terms.offer
            transaction.price = charged(price(of: terms.offer, productID: transaction.productID), account)
        }
        if let previous = existing, let original = try store.transaction(previous.originalTransactionID) {
            // A resubscription keeps the group's original transaction.
            transaction.originalID = original.id
            transaction.originalPurchaseDate = original.transaction.originalPurchaseDate
        }
        let originalID = transaction.originalID
        let productID = transaction.productID
        var (state, effects) = try Self.refusing { () throws(LifecycleError) in
            try engine.subscribe(
                originalTransactionID: originalID, productID: productID, at: current, resubscribe: existing != nil,
                offer: terms, plan: billingPlan)
        }
        // The previous run's last period, read once: where its run ended, and the renewal number after it.
        let previousLatest = try existing.flatMap { try store.transaction($0.latestTransactionID) }
        if let previous = existing {
            // A lapse of 60 days (at the store's time rate) or more starts a new run of periods; a shorter one
            // continues the last. Paid service ended at the expiry, or at a refund of the last period before it.
            let refunded = previousLatest?.transaction.revocationDate
            let ended = [previous.state.expiresDate, refunded].compactMap { $0 }.min()
            let lapsed = ended.map { rate.end(of: Self.runLapse, from: $0) <= current }
            state.runStart = lapsed == true ? current : previous.state.runStart
        }
        transaction.expiresDate = state.expiresDate
        transaction.billingPlan = state.billingPlan
        if let commitment = state.commitment {
            let billed = commitmentBilling(commitment, productID: productID, account: account)
            transaction.price = billed.price
            transaction.commitment = billed.commitment
        }
        var stored = StoredTransaction(
            transaction: transaction, accountID: account.id, applicationUsername: applicationUsername,
            orderID: newOrderID(at: current))
        if let previousLatest { stored.renewalNumber = previousLatest.renewalNumber + 1 }
        try store.insert(stored)
        var subscription = StoredSubscription(
            state: state, accountID: account.id, bundleID: transaction.bundleID, latestTransactionID: transaction.id)
        try apply(effects, to: &subscription, account: account, in: store, now: current)
        return stored
    }

    /// A lapse shorter than this does not end a run of periods (Apple's `recentSubscriptionStartDate`).
    static let runLapse = StorePeriod(days: 60)

    /// Unfinished transactions and payments of the device's account for the app, oldest first.
    public func unfinished(deviceID: String, bundleID: String) async throws -> [QueueEntry] {
        try await catchUp()
        return try await storage.read { store in
            let (_, account) = try self.device(deviceID, in: store)
            let purchased = try store.unfinishedTransactions(account: account.id, bundle: BundleID(bundleID)).map {
                QueueEntry.transaction($0, state: "purchased")
            }
            let pending = try store.unfinishedPayments(account: account.id, bundle: BundleID(bundleID)).map(
                QueueEntry.payment)
            return (purchased + pending).sorted { $0.sortKey < $1.sortKey }
        }
    }

    public func finish(deviceID: String, bundleID: String, transactionID: String) async throws {
        try await storage.write { store in
            let (_, account) = try self.device(deviceID, in: store)
            let id = TransactionID(transactionID)
            if var payment = try store.payment(id), payment.accountID == account.id,
                payment.bundleID.rawValue == bundleID, !payment.finished
            {
                guard payment.state != .deferred else {
                    throw EmulatorError.invalid(
                        "a deferred transaction ends with its approval or decline, not with finish")
                }
                payment.finished = true
                try store.update(payment)
                return
            }
            guard var stored = try store.transaction(id), stored.accountID == account.id,
                stored.transaction.bundleID.rawValue == bundleID
            else { throw EmulatorError.notFound("no transaction \(transactionID) for this device and app") }
            stored.finished = true
            try store.update(stored)
        }
    }

    /// Non-consumables and subscriptions of the account (state `restored`).
    public func restore(deviceID: String, bundleID: String) async throws -> [StoredTransaction] {
        try await catchUp()
        return try await storage.read { store in
            let (_, account) = try self.device(deviceID, in: store)
            return try store.transactions(account: account.id, bundle: BundleID(bundleID)).filter {
                $0.transaction.kind != .consumable
            }
        }
    }

    // MARK: - Ask to Buy, failure injection, volume purchase

    /// Sets the account's Ask to Buy switch and purchase-failure injection (`.some(nil)` clears it).
    public func configureAccount(_ accountID: String, askToBuy: Bool?, purchaseFailure: PurchaseFailure??)
        async throws -> Account
    {
        try await storage.write { store in
            guard var account = try store.account(AccountID(accountID)) else {
                throw EmulatorError.notFound("no account \(accountID)")
            }
            if let askToBuy { account.askToBuy = askToBuy }
            if let purchaseFailure { account.purchaseFailure = purchaseFailure }
            try store.update(account)
            return account
        }
    }

    /// Approves or declines a deferred (Ask to Buy) payment: approval delivers a purchase to the queue, a
    /// decline a failed transaction.
    public func decide(accountID: String, paymentID: String, approve: Bool) async throws -> QueueEntry {
        try await catchUp()
        let current = now
        let entry = try await storage.write { store -> QueueEntry in
            guard var payment = try store.payment(TransactionID(paymentID)), payment.accountID.rawValue == accountID,
                payment.state == .deferred, let account = try store.account(payment.accountID)
            else { throw EmulatorError.notFound("no deferred payment \(paymentID) for this account") }
            if approve {
                payment.state = .approved
                payment.finished = true
                try store.update(payment)
                guard let entry = self.catalog.entry(payment.productID.rawValue) else {
                    throw EmulatorError.notFound("no product \(payment.productID)")
                }
                return .transaction(
                    try self.purchase(
                        account: account, bundleID: payment.bundleID.rawValue, entry: entry, quantity: payment.quantity,
                        applicationUsername: payment.applicationUsername, appAccountToken: payment.appAccountToken,
                        now: current, in: store), state: "purchased")
            }
            payment.state = .failed
            payment.reason = .declined
            try store.update(payment)
            return .payment(payment)
        }
        return entry
    }

    /// Completes the account's interrupted payments (the customer fixed what interrupted them).
    public func resolveInterruptions(accountID: String) async throws -> [StoredTransaction] {
        try await catchUp()
        let current = now
        return try await storage.write { store in
            guard let account = try store.account(AccountID(accountID)) else {
                throw EmulatorError.notFound("no account \(accountID)")
            }
            var delivered: [StoredTransaction] = []
            for var payment in try store.resolvablePayments(account: account.id) {
                payment.resolvable = false
                try store.update(payment)
                guard let entry = self.catalog.entry(payment.productID.rawValue) else { continue }
                delivered.append(
                    try self.purchase(
                        account: account, bundleID: payment.bundleID.rawValue, entry: entry, quantity: payment.quantity,
                        applicationUsername: payment.applicationUsername, appAccountToken: payment.appAccountToken,
                        now: current, in: store))
            }
            return delivered
        }
    }

    public enum VolumePurchaseAction: String, Sendable, CaseIterable {
        case assign, revoke
    }

    /// Assigns or revokes a Volume Purchase Program licence for the app on a device.
    public func volumePurchase(deviceID: String, bundleID: String, action: VolumePurchaseAction) async throws
        -> Install
    {
        let current = now
        return try await storage.write { store in
            let (device, _) = try self.device(deviceID, in: store)
            guard var install = try store.install(device: device.id, bundle: BundleID(bundleID)) else {
                throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
            }
            switch action {
            case .assign:
                install.vppAssigned = true
                install.vppRevokedAt = nil
            case .revoke:
                guard install.vppAssigned else { throw EmulatorError.invalid("no licence is assigned") }
                install.vppRevokedAt = current
            }
            try store.save(install)
            return install
        }
    }

    // MARK: - Receipts

    /// Sandbox receipt-refresh properties (`SKReceiptRefreshRequest(receiptProperties:)`).
    public struct RefreshProperties: Sendable {
        public var volumePurchase = false
        public var expired = false
        public var revoked = false
        public init(volumePurchase: Bool = false, expired: Bool = false, revoked: Bool = false) {
            (self.volumePurchase, self.expired, self.revoked) = (volumePurchase, expired, revoked)
        }
    }

    /// The device's unified receipt for the app, signed now.
    public func receipt(deviceID: String, bundleID: String, refresh: RefreshProperties = RefreshProperties())
        async throws -> [UInt8]
    {
        let app = try self.app(bundleID)
        try await catchUp()
        let (device, account, install, purchases) = try await storage.read { store in
            let (device, account) = try self.device(deviceID, in: store)
            guard let install = try store.install(device: device.id, bundle: BundleID(bundleID)) else {
                throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
            }
            return (
                device, account, install,
                try store.transactions(account: account.id, bundle: BundleID(bundleID)).filter(\.isInReceipt)
            )
        }
        let production = account.environment == .production
        let current = Self.wholeSeconds(now)
        let volume = install.vppAssigned || refresh.volumePurchase || refresh.expired || refresh.revoked
        var expiration: Date?
        if let revoked = install.vppRevokedAt { expiration = revoked.addingTimeInterval(Self.vppGrace) }
        if refresh.revoked { expiration = current.addingTimeInterval(Self.vppGrace) }
        if refresh.expired { expiration = current.addingTimeInterval(-1) }
        let type = ReceiptType(environment: account.environment, volumePurchase: volume).rawValue
        var receipt = Receipt(
            receiptType: type, appItemID: production ? app.appAppleID : 0,
            bundleID: bundleID, appVersion: install.version, opaqueValue: randomBytes(16), sha1Hash: [],
            ageRating: "4+",
            developerID: 0, creationDate: current, downloadID: 0, versionExternalID: 0,
            originalPurchaseDate: Self.wholeSeconds(install.originalPurchaseDate),
            originalAppVersion: install.originalVersion, expirationDate: expiration.map(Self.wholeSeconds),
            inAppPurchases: purchases.map { InAppPurchase($0.transaction) }
        )
        receipt.sha1Hash = receipt.deviceHash(for: Self.uuidBytes(device.id.rawValue))
        return try receipt.signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
    }

    static func wholeSeconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }

    static func uuidBytes(_ text: String) -> [UInt8] {
        guard let uuid = UUID(uuidString: text) else { return Array(text.utf8) }
        return withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }

    /// A catalogue price as `account` is charged it: the amount as the catalogue gives it, in its storefront's
    /// currency (Xcode's StoreKit Testing does not convert amounts either).
    func charged(_ price: Money?, _ account: Account) -> Money? {
        price.map {
            Money(
                milliunits: $0.milliunits,
                currency: (Storefront(countryCode: account.storefront) ?? defaultStorefront).currency)
        }
    }

    // MARK: - Signed data

    /// The transaction's JWS, signed now by the emulator's chain.
    public func signedTransaction(_ stored: StoredTransaction) async throws -> String {
        let account = try await storage.read { try $0.account(stored.accountID) }
        return try signedTransaction(stored, account: account)
    }

    func signedTransaction(_ stored: StoredTransaction, account: Account?) throws -> String {
        try signer.sign(transactionPayload(stored, account: account))
    }

    /// `JWSTransactionDecodedPayload` of a transaction, signed now.
    func transactionPayload(_ stored: StoredTransaction, account: Account?) -> JSONObject {
        let storefront = account?.storefront ?? "USA"
        var json = JWSTransaction(
            stored.transaction, environment: account?.environment ?? .sandbox, signedDate: now,
            storefront: storefront, storefrontID: Self.storefrontID(storefront)
        ).json
        if let offer = stored.transaction.offer, let whole = offerPeriod(offer, productID: stored.transaction.productID)
        {
            json["offerPeriod"] = .string(whole)
        }
        return json
    }

    /// Apple's `offerPeriod`: the whole offer, so a pay-as-you-go offer of two one-month periods is P2M (the
    /// stored offer keeps one period, the length the lifecycle renews each discounted period by).
    func offerPeriod(_ offer: Offer, productID: ProductID) -> String? {
        guard offer.discountType == .payAsYouGo, let text = offer.period, let period = StorePeriod(text),
            let count = catalogOffer(offer, productID: productID)?.numberOfPeriods
        else { return offer.period }
        return period.repeated(count).description
    }

    /// The latest transaction of every product the account is entitled to now, signed.
    public func entitlements(deviceID: String, bundleID: String) async throws -> [String] {
        try await catchUp()
        let current = now
        let (account, owned) = try await storage.read { store in
            let (_, account) = try self.device(deviceID, in: store)
            let owned = try store.transactions(account: account.id, bundle: BundleID(bundleID)).filter {
                $0.isInReceipt && $0.transaction.isActive(at: current)
            }
            return (account, owned)
        }
        let latest = Dictionary(grouping: owned, by: \.transaction.originalID).compactMap {
            $0.value.max { $0.renewalNumber < $1.renewalNumber }
        }
        return try latest.sorted { $0.id < $1.id }.map { try signedTransaction($0, account: account) }
    }

    public func appTransaction(deviceID: String, bundleID: String) async throws -> String {
        let app = try self.app(bundleID)
        let (device, account, install, appTransactionID) = try await storage.read { store in
            let (device, account) = try self.device(deviceID, in: store)
            guard let install = try store.install(device: device.id, bundle: BundleID(bundleID)) else {
                throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
            }
            return (
                device, account, install, try store.appTransactionID(account: account.id, bundle: BundleID(bundleID))
            )
        }
        let production = account.environment == .production
        let nonce = UUID(bytes: randomBytes(16))
        let verification = Digest.hash(.sha384, Self.uuidBytes(nonce.uuidString) + Self.uuidBytes(device.id.rawValue))
        var payload = AppTransaction(
            app: app, install: install, environment: production ? .production : .sandbox, created: now,
            deviceVerification: Data(verification).base64EncodedString(), nonce: nonce)
        if let appTransactionID { payload.json["appTransactionId"] = .string(appTransactionID.rawValue) }
        return try signer.sign(payload.json)
    }
}
