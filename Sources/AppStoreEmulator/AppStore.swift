public import StoreKitCatalog
public import StorekeeperCrypto
public import Foundation
public import StorekeeperJSON
import AppStoreReceipts
import StorekeeperSQLite
import AppStoreSignedData
public import StoreTime

typealias ProductKind = Catalog.ProductKind

/// A caller mistake or a missing resource, reported by the API as a 4xx JSON error.
public struct EmulatorError: Error, Sendable, CustomStringConvertible {
    public let status: Int
    public let code: String
    public let message: String

    static func notFound(_ what: String) -> EmulatorError {
        EmulatorError(status: 404, code: "not_found", message: what)
    }
    static func invalid(_ what: String) -> EmulatorError {
        EmulatorError(status: 400, code: "invalid_request", message: what)
    }

    public var description: String { "\(status) \(code): \(message)" }
}

/// The emulated App Store: catalogue, accounts, devices, installs, the payment queue, receipts and signed
/// data, a virtual clock with renewals. Every change is written to SQLite before the call returns.
public actor AppStore {
    let catalog: [StoreKitConfiguration]
    let apps: [String: AppConfiguration]
    public nonisolated let pki: EmulatorPKI
    private let storage: any StateStorage
    private var state: StoreState
    private let realNow: @Sendable () -> Date
    private let randomBytes: @Sendable (Int) -> [UInt8]

    /// Renewals stop after this many in the sandbox, as Apple's sandbox does.
    public static let sandboxRenewalCap = 12

    /// Opens the store kept in `dataDirectory` (certificates, and the state in SQLite unless `storage` is
    /// given), creating it on first start.
    public init(
        catalog: [StoreKitConfiguration], apps: [AppConfiguration], dataDirectory: URL, rate: TimeRate? = nil,
        storage: (any StateStorage)? = nil,
        realNow: @escaping @Sendable () -> Date = { Date() },
        randomBytes: @escaping @Sendable (Int) -> [UInt8] = {
            (try? SecureRandom.bytes($0)) ?? [UInt8](repeating: 0, count: $0)
        }
    ) async throws {
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
        self.catalog = catalog
        self.apps = Dictionary(apps.map { ($0.bundleID, $0) }, uniquingKeysWith: { first, _ in first })
        self.pki = try EmulatorPKI.loadOrCreate(in: dataDirectory.appendingPathComponent("pki"))
        self.realNow = realNow
        self.randomBytes = randomBytes
        let opened: any StateStorage
        if let storage {
            opened = storage
        } else {
            opened = try await SQLiteStateStorage(path: dataDirectory.appendingPathComponent("store.sqlite").path)
        }
        self.storage = opened
        let storage = opened
        if let document = try await storage.load() {
            state = try JSONDecoder().decode(StoreState.self, from: Data(document))
        } else {
            state = StoreState()
        }
        if let rate { state.rateName = rate.name }
        try await save()
    }

    private func save() async throws {
        try await storage.save(Array(try JSONEncoder().encode(state)))
    }

    // MARK: - Clock

    public var rate: TimeRate { TimeRate(name: state.rateName) ?? .monthlyRenewalEveryFiveMinutes }
    /// The persisted clock: the real clock plus every advance, at the store's rate.
    private var clock: VirtualClock {
        get { VirtualClock(rate: rate, offset: state.clockOffset) }
        set {
            state.clockOffset = newValue.offset
            state.rateName = newValue.rate.name
        }
    }

    /// Store time now: the real time plus every advance.
    public var now: Date { clock.now(real: realNow()) }

    /// Advances store time by `period` at the current rate (and switches rate first when asked), then runs
    /// every renewal that fell due, in order.
    public func setClock(advance period: StorePeriod?, rate newRate: TimeRate?) async throws -> (
        now: Date, rate: TimeRate
    ) {
        if let newRate { clock.rate = newRate }
        if let period { clock.advance(by: period, real: realNow()) }
        runDueRenewals()
        try await save()
        return (now, rate)
    }

    /// Runs what fell due while real time passed (renewals at the current rate) and saves it. The HTTP API
    /// calls this before every request, so a receipt fetched after a scaled month carries the renewal.
    public func catchUp() async throws {
        let before = state.transactions.count
        runDueRenewals()
        if state.transactions.count != before { try await save() }
    }

    /// Creates renewals for every subscription whose period ended, earliest first, up to the sandbox cap.
    private func runDueRenewals() {
        let current = now
        while true {
            let latest = Dictionary(
                grouping: state.transactions.filter { $0.kind == ProductKind.autoRenewable.rawValue }, by: \.originalID
            ).compactMap { $0.value.max { $0.renewalNumber < $1.renewalNumber } }
            let due = latest.filter { transaction in
                guard let expires = transaction.expiresDate, expires <= current else { return false }
                let sandbox = state.accounts.first { $0.id == transaction.accountID }?.environment != "Production"
                return !sandbox || transaction.renewalNumber < Self.sandboxRenewalCap
            }
            guard let next = due.min(by: { ($0.expiresDate!, $0.originalID) < ($1.expiresDate!, $1.originalID) }),
                let period = subscription(next.productID)?.period
            else { return }
            var renewal = next
            renewal.id = state.newTransactionID()
            renewal.purchaseDate = next.expiresDate!
            renewal.expiresDate = rate.end(of: period, from: renewal.purchaseDate)
            renewal.webOrderLineItemID = state.newWebOrderLineItemID()
            renewal.renewalNumber += 1
            renewal.finished = false
            renewal.isTrialPeriod = false
            state.transactions.append(renewal)
        }
    }

    // MARK: - Accounts, devices, installs

    public func createAccount(environment: String, storefront: String) async throws -> String {
        guard environment == "Sandbox" || environment == "Production" else {
            throw EmulatorError.invalid("environment must be Sandbox or Production")
        }
        guard storefront.count == 3, storefront.allSatisfy(\.isLetter) else {
            throw EmulatorError.invalid("storefront must be an ISO 3166-1 alpha-3 code such as USA")
        }
        let id = UUID(bytes: randomBytes(16)).uuidString
        state.accounts.append(.init(id: id, environment: environment, storefront: storefront.uppercased()))
        try await save()
        return id
    }

    public func createDevice(accountID: String, deviceID: UUID?) async throws -> String {
        guard state.accounts.contains(where: { $0.id == accountID }) else {
            throw EmulatorError.notFound("no account \(accountID)")
        }
        let id = (deviceID ?? UUID(bytes: randomBytes(16))).uuidString
        guard !state.devices.contains(where: { $0.id == id }) else {
            throw EmulatorError.invalid("device \(id) exists")
        }
        state.devices.append(.init(id: id, accountID: accountID))
        try await save()
        return id
    }

    /// Installs (or updates) an app; the first install's version and date become the original ones.
    public func install(deviceID: String, bundleID: String, version: String?) async throws -> JSONObject {
        let device = try self.device(deviceID)
        let app = try self.app(bundleID)
        let version = version ?? app.version
        if let index = state.installs.firstIndex(where: { $0.deviceID == device.id && $0.bundleID == bundleID }) {
            state.installs[index].version = version
        } else {
            state.installs.append(
                .init(
                    deviceID: device.id, bundleID: bundleID, version: version, originalVersion: version,
                    originalPurchaseDate: now))
        }
        try await save()
        let install = state.installs.first { $0.deviceID == device.id && $0.bundleID == bundleID }!
        var object = JSONObject()
        object["bundle_id"] = .string(bundleID)
        object["application_version"] = .string(install.version)
        object["original_application_version"] = .string(install.originalVersion)
        for (key, value) in ReceiptDate.triplet("original_purchase_date", install.originalPurchaseDate) {
            object[key] = .string(value)
        }
        object["receipt_type"] = .string(
            try environment(of: device) == "Production" ? "Production" : "ProductionSandbox")
        return object
    }

    // MARK: - Catalogue

    struct CatalogEntry {
        var productID: String
        var kind: ProductKind
        var displayPrice: String?
        var name: String?
        var subscription: Subscription?
    }

    func entry(_ productID: String) -> CatalogEntry? {
        for configuration in catalog {
            if let product = configuration.products.first(where: { $0.productID == productID }) {
                return CatalogEntry(
                    productID: productID, kind: product.kind, displayPrice: product.displayPrice,
                    name: product.localizations.first?.displayName, subscription: nil)
            }
            if let subscription = configuration.subscriptions.first(where: { $0.productID == productID }) {
                return CatalogEntry(
                    productID: productID, kind: .autoRenewable, displayPrice: subscription.displayPrice,
                    name: subscription.localizations.first?.displayName, subscription: subscription)
            }
        }
        return nil
    }

    func subscription(_ productID: String) -> Subscription? { entry(productID)?.subscription }

    /// The products a device's request names, and the identifiers the catalogue does not have.
    public func products(_ identifiers: [String]) -> (products: [JSONValue], invalid: [String]) {
        var products: [JSONValue] = []
        var invalid: [String] = []
        for identifier in identifiers {
            guard let entry = entry(identifier) else {
                invalid.append(identifier)
                continue
            }
            var object: JSONObject = [
                "productId": .string(identifier), "type": .string(entry.kind.rawValue),
                "displayName": .string(entry.name ?? identifier), "displayPrice": .string(entry.displayPrice ?? "0.00"),
            ]
            if let subscription = entry.subscription {
                object["subscriptionPeriod"] = .string(subscription.period?.description ?? "")
                object["subscriptionGroupId"] = subscription.groupID.map(JSONValue.string) ?? .null
                object["groupLevel"] = subscription.level.map { .integer(Int64($0)) } ?? .null
            }
            products.append(.object(object))
        }
        return (products, invalid)
    }

    // MARK: - Payments and the queue

    /// Buys `productID`: the transaction is purchased at once and stays in the queue until finished.
    public func pay(
        deviceID: String, bundleID: String, productID: String, quantity: Int, applicationUsername: String?,
        appAccountToken: String?
    ) async throws -> (transaction: JSONObject, jws: String?) {
        let device = try self.device(deviceID)
        _ = try app(bundleID)
        guard state.installs.contains(where: { $0.deviceID == device.id && $0.bundleID == bundleID }) else {
            throw EmulatorError.invalid("install \(bundleID) on device \(deviceID) first")
        }
        guard let entry = entry(productID) else { throw EmulatorError.notFound("no product \(productID)") }
        guard (1...10).contains(quantity), quantity == 1 || entry.kind == .consumable else {
            throw EmulatorError.invalid("quantity must be 1, or 1 to 10 for consumables")
        }
        if let token = appAccountToken, UUID(uuidString: token) == nil {
            throw EmulatorError.invalid("appAccountToken must be a UUID")
        }
        let current = now
        let account = state.accounts.first { $0.id == device.accountID }
        if account?.askToBuy == true || account?.purchaseFailure != nil {
            let deferred = account?.askToBuy == true
            let pending = StoreState.PendingPayment(
                id: state.newTransactionID(), accountID: device.accountID, bundleID: bundleID, productID: productID,
                quantity: quantity, date: current, state: deferred ? "deferred" : "failed",
                reason: deferred ? nil : account?.purchaseFailure, finished: false,
                appAccountToken: appAccountToken?.lowercased(),
                applicationUsername: applicationUsername,
                resolvable: !deferred && account?.purchaseFailure == "interrupted")
            state.pending = (state.pending ?? []) + [pending]
            try await save()
            return (pendingEntry(pending), nil)
        }
        return try await purchase(
            accountID: device.accountID, bundleID: bundleID, productID: productID, quantity: quantity,
            applicationUsername: applicationUsername, appAccountToken: appAccountToken)
    }

    /// Records a completed purchase and returns its queue entry and JWS.
    private func purchase(
        accountID: String, bundleID: String, productID: String, quantity: Int, applicationUsername: String?,
        appAccountToken: String?
    ) async throws -> (transaction: JSONObject, jws: String?) {
        guard let entry = entry(productID) else { throw EmulatorError.notFound("no product \(productID)") }
        let current = now
        let id = state.newTransactionID()
        var transaction = StoreState.Transaction(
            id: id, originalID: id, accountID: accountID, bundleID: bundleID, productID: productID,
            kind: entry.kind.rawValue,
            quantity: quantity, purchaseDate: current, originalPurchaseDate: current, expiresDate: nil,
            webOrderLineItemID: nil,
            renewalNumber: 0, finished: false, appAccountToken: appAccountToken?.lowercased(),
            applicationUsername: applicationUsername,
            isTrialPeriod: false, subscriptionGroupID: entry.subscription?.groupID)
        if let subscription = entry.subscription, let period = subscription.period {
            let trial = subscription.introductoryOffer?.paymentMode == "free"
            let firstPeriod = trial ? (subscription.introductoryOffer?.period ?? period) : period
            transaction.expiresDate = rate.end(of: firstPeriod, from: current)
            transaction.webOrderLineItemID = state.newWebOrderLineItemID()
            transaction.isTrialPeriod = trial
        }
        state.transactions.append(transaction)
        try await save()
        return (queueEntry(transaction, state: "purchased"), try signedTransaction(transaction))
    }

    /// Unfinished transactions of the device's account for the app, oldest first.
    public func unfinished(deviceID: String, bundleID: String) throws -> [JSONValue] {
        let device = try self.device(deviceID)
        let purchased = state.transactions.filter {
            $0.accountID == device.accountID && $0.bundleID == bundleID && !$0.finished
        }
        .map { (date: $0.purchaseDate, id: $0.id, entry: queueEntry($0, state: "purchased")) }
        let pending = (state.pending ?? []).filter {
            $0.accountID == device.accountID && $0.bundleID == bundleID && !$0.finished
        }
        .map { (date: $0.date, id: $0.id, entry: pendingEntry($0)) }
        return (purchased + pending).sorted { ($0.date, $0.id) < ($1.date, $1.id) }.map { .object($0.entry) }
    }

    public func finish(deviceID: String, bundleID: String, transactionID: String) async throws {
        let device = try self.device(deviceID)
        if let index = (state.pending ?? []).firstIndex(where: {
            $0.id == transactionID && $0.accountID == device.accountID && $0.bundleID == bundleID && !$0.finished
        }) {
            guard state.pending![index].state != "deferred" else {
                throw EmulatorError.invalid("a deferred transaction ends with its approval or decline, not with finish")
            }
            state.pending![index].finished = true
            try await save()
            return
        }
        guard
            let index = state.transactions.firstIndex(where: {
                $0.id == transactionID && $0.accountID == device.accountID && $0.bundleID == bundleID
            })
        else { throw EmulatorError.notFound("no transaction \(transactionID) for this device and app") }
        state.transactions[index].finished = true
        try await save()
    }

    /// Non-consumables and subscriptions of the account, each with state `restored`.
    public func restore(deviceID: String, bundleID: String) throws -> [JSONValue] {
        let device = try self.device(deviceID)
        return receiptTransactions(accountID: device.accountID, bundleID: bundleID)
            .filter { $0.kind != ProductKind.consumable.rawValue }
            .map { .object(queueEntry($0, state: "restored")) }
    }

    private func pendingEntry(_ payment: StoreState.PendingPayment) -> JSONObject {
        var object: JSONObject = [
            "transactionIdentifier": .string(payment.id), "productIdentifier": .string(payment.productID),
            "state": .string(payment.state), "transactionDate": .integer(ReceiptDate.milliseconds(payment.date)),
            "quantity": .integer(Int64(payment.quantity)),
        ]
        if let reason = payment.reason {
            object["error"] = .object([
                "code": .string(reason),
                "message": .string("the payment \(reason == "declined" ? "was declined" : reason)"),
            ])
        }
        if let username = payment.applicationUsername { object["applicationUsername"] = .string(username) }
        if let token = payment.appAccountToken { object["appAccountToken"] = .string(token) }
        return object
    }

    // MARK: - Ask to Buy, failure injection, volume purchase

    /// Sets the account's Ask to Buy switch and purchase-failure injection ("failed", "interrupted" or none).
    public func configureAccount(_ accountID: String, askToBuy: Bool?, purchaseFailure: String??) async throws
        -> JSONObject
    {
        guard let index = state.accounts.firstIndex(where: { $0.id == accountID }) else {
            throw EmulatorError.notFound("no account \(accountID)")
        }
        if let askToBuy { state.accounts[index].askToBuy = askToBuy }
        if let purchaseFailure {
            guard purchaseFailure == nil || purchaseFailure == "failed" || purchaseFailure == "interrupted" else {
                throw EmulatorError.invalid("purchaseFailure must be failed, interrupted or null")
            }
            state.accounts[index].purchaseFailure = purchaseFailure
        }
        try await save()
        let account = state.accounts[index]
        return [
            "accountId": .string(account.id), "askToBuy": .bool(account.askToBuy ?? false),
            "purchaseFailure": account.purchaseFailure.map(JSONValue.string) ?? .null,
        ]
    }

    /// Approves or declines a deferred (Ask to Buy) payment: approval delivers a purchase to the queue, a
    /// decline a failed transaction.
    public func decide(accountID: String, paymentID: String, approve: Bool) async throws -> JSONObject {
        guard
            let index = (state.pending ?? []).firstIndex(where: {
                $0.id == paymentID && $0.accountID == accountID && $0.state == "deferred"
            })
        else { throw EmulatorError.notFound("no deferred payment \(paymentID) for this account") }
        let payment = state.pending![index]
        if approve {
            state.pending![index].state = "approved"
            state.pending![index].finished = true
            let result = try await purchase(
                accountID: accountID, bundleID: payment.bundleID, productID: payment.productID,
                quantity: payment.quantity,
                applicationUsername: payment.applicationUsername, appAccountToken: payment.appAccountToken)
            return result.transaction
        }
        state.pending![index].state = "failed"
        state.pending![index].reason = "declined"
        try await save()
        return pendingEntry(state.pending![index])
    }

    /// Completes the account's interrupted payments (the customer fixed what interrupted them).
    public func resolveInterruptions(accountID: String) async throws -> [JSONValue] {
        var delivered: [JSONValue] = []
        for index in (state.pending ?? []).indices
        where state.pending![index].accountID == accountID && state.pending![index].resolvable {
            state.pending![index].resolvable = false
            let payment = state.pending![index]
            let result = try await purchase(
                accountID: accountID, bundleID: payment.bundleID, productID: payment.productID,
                quantity: payment.quantity,
                applicationUsername: payment.applicationUsername, appAccountToken: payment.appAccountToken)
            delivered.append(.object(result.transaction))
        }
        try await save()
        return delivered
    }

    /// Assigns or revokes a Volume Purchase Program licence for the app on a device.
    public func volumePurchase(deviceID: String, bundleID: String, action: String) async throws -> JSONObject {
        let device = try self.device(deviceID)
        guard let index = state.installs.firstIndex(where: { $0.deviceID == device.id && $0.bundleID == bundleID })
        else {
            throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
        }
        switch action {
        case "assign":
            state.installs[index].vppAssigned = true
            state.installs[index].vppRevokedAt = nil
        case "revoke":
            guard state.installs[index].vppAssigned == true else {
                throw EmulatorError.invalid("no licence is assigned")
            }
            state.installs[index].vppRevokedAt = now
        default:
            throw EmulatorError.invalid("action must be assign or revoke")
        }
        try await save()
        let install = state.installs[index]
        var object: JSONObject = ["assigned": .bool(install.vppAssigned == true)]
        if let revoked = install.vppRevokedAt {
            object["revokedAt"] = .integer(ReceiptDate.milliseconds(revoked))
            object["expiresAt"] = .integer(ReceiptDate.milliseconds(revoked.addingTimeInterval(Self.vppGrace)))
        }
        return object
    }

    /// A revoked licence's receipt stops validating this long after the revocation.
    public static let vppGrace: TimeInterval = 30 * 86_400

    private func queueEntry(_ transaction: StoreState.Transaction, state: String) -> JSONObject {
        var object: JSONObject = [
            "transactionIdentifier": .string(transaction.id),
            "originalTransactionIdentifier": .string(transaction.originalID),
            "productIdentifier": .string(transaction.productID), "state": .string(state),
            "transactionDate": .integer(ReceiptDate.milliseconds(transaction.purchaseDate)),
            "quantity": .integer(Int64(transaction.quantity)),
        ]
        if let username = transaction.applicationUsername { object["applicationUsername"] = .string(username) }
        if let token = transaction.appAccountToken { object["appAccountToken"] = .string(token) }
        return object
    }

    // MARK: - Receipts

    /// What Apple's rules put in a receipt: consumables until finished, everything else for good.
    func receiptTransactions(accountID: String, bundleID: String) -> [StoreState.Transaction] {
        state.transactions.filter {
            $0.accountID == accountID && $0.bundleID == bundleID
                && ($0.kind != ProductKind.consumable.rawValue || !$0.finished)
        }.sorted { ($0.purchaseDate, $0.id) < ($1.purchaseDate, $1.id) }
    }

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
    public func receipt(deviceID: String, bundleID: String, refresh: RefreshProperties = RefreshProperties()) throws
        -> [UInt8]
    {
        let device = try self.device(deviceID)
        let app = try self.app(bundleID)
        guard let install = state.installs.first(where: { $0.deviceID == device.id && $0.bundleID == bundleID }) else {
            throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
        }
        let production = try environment(of: device) == "Production"
        let current = now
        let volume = install.vppAssigned == true || refresh.volumePurchase || refresh.expired || refresh.revoked
        var expiration: Date?
        if let revoked = install.vppRevokedAt { expiration = revoked.addingTimeInterval(Self.vppGrace) }
        if refresh.revoked { expiration = Self.wholeSeconds(current).addingTimeInterval(Self.vppGrace) }
        if refresh.expired { expiration = Self.wholeSeconds(current).addingTimeInterval(-1) }
        let type = (production ? "Production" : "ProductionSandbox")
            .replacingOccurrences(of: "Production", with: volume ? "ProductionVPP" : "Production")
        var receipt = Receipt(
            receiptType: type, appItemID: production ? app.appAppleID : 0,
            bundleID: bundleID, appVersion: install.version, opaqueValue: randomBytes(16), sha1Hash: [],
            ageRating: "4+",
            developerID: 0, creationDate: Self.wholeSeconds(now), downloadID: 0, versionExternalID: 0,
            originalPurchaseDate: Self.wholeSeconds(install.originalPurchaseDate),
            originalAppVersion: install.originalVersion, expirationDate: expiration.map(Self.wholeSeconds),
            inAppPurchases: receiptTransactions(accountID: device.accountID, bundleID: bundleID).map(Self.inAppPurchase)
        )
        receipt.sha1Hash = receipt.deviceHash(for: Self.uuidBytes(device.id))
        return try receipt.signed(
            by: pki.receipts.leaf, key: pki.receipts.leafKey, chain: [pki.receipts.intermediate, pki.receipts.root])
    }

    static func inAppPurchase(_ transaction: StoreState.Transaction) -> InAppPurchase {
        let subscription = transaction.kind == ProductKind.autoRenewable.rawValue
        return InAppPurchase(
            quantity: Int64(transaction.quantity), productID: transaction.productID, transactionID: transaction.id,
            purchaseDate: wholeSeconds(transaction.purchaseDate), originalTransactionID: transaction.originalID,
            originalPurchaseDate: wholeSeconds(transaction.originalPurchaseDate),
            productTypeRaw: ProductKind(rawValue: transaction.kind)?.receiptProductType,
            expiresDate: transaction.expiresDate.map(wholeSeconds),
            webOrderLineItemID: transaction.webOrderLineItemID ?? 0,
            isTrialPeriod: transaction.isTrialPeriod, isInIntroOfferPeriod: subscription ? false : nil)
    }

    static func wholeSeconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }

    static func uuidBytes(_ text: String) -> [UInt8] {
        guard let uuid = UUID(uuidString: text) else { return Array(text.utf8) }
        return withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }

    // MARK: - Signed data

    func signedTransaction(_ transaction: StoreState.Transaction) throws -> String {
        let account = state.accounts.first { $0.id == transaction.accountID }
        var payload: JSONObject = [
            "transactionId": .string(transaction.id), "originalTransactionId": .string(transaction.originalID),
            "bundleId": .string(transaction.bundleID), "productId": .string(transaction.productID),
            "purchaseDate": .integer(ReceiptDate.milliseconds(transaction.purchaseDate)),
            "originalPurchaseDate": .integer(ReceiptDate.milliseconds(transaction.originalPurchaseDate)),
            "quantity": .integer(Int64(transaction.quantity)), "type": .string(transaction.kind),
            "inAppOwnershipType": .string("PURCHASED"), "signedDate": .integer(ReceiptDate.milliseconds(now)),
            "environment": .string(account?.environment ?? "Sandbox"),
            "transactionReason": .string(transaction.renewalNumber > 0 ? "RENEWAL" : "PURCHASE"),
            "storefront": .string(account?.storefront ?? "USA"),
            "storefrontId": .string(Self.storefrontID(account?.storefront)),
        ]
        if let web = transaction.webOrderLineItemID { payload["webOrderLineItemId"] = .string(String(web)) }
        if let group = transaction.subscriptionGroupID { payload["subscriptionGroupIdentifier"] = .string(group) }
        if let expires = transaction.expiresDate {
            payload["expiresDate"] = .integer(ReceiptDate.milliseconds(expires))
        }
        if let token = transaction.appAccountToken { payload["appAccountToken"] = .string(token) }
        if let price = entry(transaction.productID)?.displayPrice, let value = Decimal(string: price) {
            payload["price"] = .integer(Int64(truncating: (value * 1000) as NSDecimalNumber))
            payload["currency"] = .string("USD")
        }
        if transaction.isTrialPeriod {
            payload["offerType"] = .integer(1)
            payload["offerDiscountType"] = .string("FREE_TRIAL")
        }
        return try JWSSigner.sign(
            payload: payload, key: pki.signedData.leafKey,
            chain: [pki.signedData.leaf, pki.signedData.intermediate, pki.signedData.root])
    }

    /// The latest transaction of every product the account is entitled to now, signed.
    public func entitlements(deviceID: String, bundleID: String) throws -> [String] {
        let device = try self.device(deviceID)
        let current = now
        let owned = receiptTransactions(accountID: device.accountID, bundleID: bundleID).filter {
            $0.kind == ProductKind.nonConsumable.rawValue || $0.kind == ProductKind.nonRenewing.rawValue
                || ($0.kind == ProductKind.autoRenewable.rawValue && ($0.expiresDate ?? .distantPast) > current)
        }
        let latest = Dictionary(grouping: owned, by: \.originalID).compactMap {
            $0.value.max { $0.renewalNumber < $1.renewalNumber }
        }
        return try latest.sorted { $0.id < $1.id }.map(signedTransaction)
    }

    public func appTransaction(deviceID: String, bundleID: String) throws -> String {
        let device = try self.device(deviceID)
        let app = try self.app(bundleID)
        guard let install = state.installs.first(where: { $0.deviceID == device.id && $0.bundleID == bundleID }) else {
            throw EmulatorError.invalid("\(bundleID) is not installed on device \(deviceID)")
        }
        let production = try environment(of: device) == "Production"
        let nonce = UUID(bytes: randomBytes(16))
        let verification = Digest.hash(.sha384, Self.uuidBytes(nonce.uuidString) + Self.uuidBytes(device.id))
        let payload: JSONObject = [
            "receiptType": .string(production ? "Production" : "Sandbox"), "appAppleId": .integer(app.appAppleID),
            "bundleId": .string(bundleID), "applicationVersion": .string(install.version),
            "versionExternalIdentifier": .integer(0),
            "receiptCreationDate": .integer(ReceiptDate.milliseconds(now)),
            "originalPurchaseDate": .integer(ReceiptDate.milliseconds(install.originalPurchaseDate)),
            "originalApplicationVersion": .string(install.originalVersion),
            "deviceVerification": .string(Data(verification).base64EncodedString()),
            "deviceVerificationNonce": .string(nonce.uuidString.lowercased()), "originalPlatform": .string("iOS"),
        ]
        return try JWSSigner.sign(
            payload: payload, key: pki.signedData.leafKey,
            chain: [pki.signedData.leaf, pki.signedData.intermediate, pki.signedData.root])
    }

    // MARK: - Look-ups

    func device(_ id: String) throws -> StoreState.Device {
        guard let device = state.devices.first(where: { $0.id.lowercased() == id.lowercased() }) else {
            throw EmulatorError.notFound("no device \(id)")
        }
        return device
    }

    func app(_ bundleID: String) throws -> AppConfiguration {
        guard let app = apps[bundleID] else { throw EmulatorError.notFound("no app \(bundleID) is configured") }
        return app
    }

    func environment(of device: StoreState.Device) throws -> String {
        guard let account = state.accounts.first(where: { $0.id == device.accountID }) else {
            throw EmulatorError.notFound("no account \(device.accountID)")
        }
        return account.environment
    }

    func transactions(accountID: String, bundleID: String) -> [StoreState.Transaction] {
        state.transactions.filter { $0.accountID == accountID && $0.bundleID == bundleID }
    }

    func accountOwning(transactionIDs: [String]) -> StoreState.Account? {
        guard let transaction = state.transactions.first(where: { transactionIDs.contains($0.id) }) else { return nil }
        return state.accounts.first { $0.id == transaction.accountID }
    }

    static func storefrontID(_ storefront: String?) -> String {
        [
            "USA": "143441", "GBR": "143444", "FRA": "143442", "DEU": "143443", "JPN": "143462", "CAN": "143455",
            "AUS": "143460",
        ][
            storefront ?? "USA"] ?? "143441"
    }
}

extension UUID {
    /// A random (version 4) UUID from 16 injected random bytes.
    init(bytes: [UInt8]) {
        var value = bytes + [UInt8](repeating: 0, count: max(0, 16 - bytes.count))
        value[6] = value[6] & 0x0f | 0x40
        value[8] = value[8] & 0x3f | 0x80
        self = UUID(
            uuid: (
                value[0], value[1], value[2], value[3], value[4], value[5], value[6], value[7], value[8], value[9],
                value[10], value[11], value[12], value[13], value[14], value[15]
            ))
    }
}
