import AppStoreReceipts
import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperJSON

/// What an app posts for its user (the app's public key, or the developer's secret key): StoreKit 2's signed
/// transactions and `AppTransaction`, and the original API's receipts, each verified, stored and applied.
extension PurchaseServer {
    /// What an app's post did: the user's view, and the purchases the post carried.
    struct Posted {
        var view: SubscriberView
        var transactionIDs: Set<TransactionID>
    }

    /// A StoreKit 2 transaction the app posts for its user.
    public func ingestTransaction(bundleID: String, appUserID: String, signedTransaction: String) async throws
        -> SubscriberView
    {
        try await postTransaction(bundleID: bundleID, appUserID: appUserID, signedTransaction: signedTransaction).view
    }

    func postTransaction(bundleID: String, appUserID: String, signedTransaction: String) async throws -> Posted {
        let app = try app(bundleID)
        try Self.checkUserID(appUserID)
        let result = app.verify(signedTransaction, as: .transaction, now: now())
        metrics.count("storekeeper_verifications_total", ["kind": "transaction", "outcome": result.status.rawValue])
        guard result.isOK, let payload = result.payload, let purchase = Self.purchase(JWSTransaction(json: payload))
        else {
            throw PurchaseServerError.verification(
                "the transaction did not verify: \(result.status.rawValue) (\(result.reason ?? ""))"
                    + Self.trustHint(result.status))
        }
        guard app.settings.environments.contains(purchase.environment) || purchase.environment == .xcode else {
            throw PurchaseServerError.invalid("transactions from \(purchase.environment.rawValue) are not accepted")
        }
        // Per user: the same transaction posted by another user is a claim of its own (transfer or keep).
        let key =
            "transaction:\(purchase.transactionID):\(PurchaseEngine.milliseconds(purchase.signedDate)):\(appUserID)"
        let current = now()
        _ = try await write(input: (key, "transaction", Array(signedTransaction.utf8))) { store in
            try self.apply(
                PurchaseUpdate(source: .app, transaction: purchase), bundleID: bundleID, claimant: appUserID,
                in: store,
                now: current)
        }
        if purchase.kind == .autoRenewable {
            await refreshFromAPI(
                app: app, originalTransactionID: purchase.originalTransactionID, environment: purchase.environment)
        }
        return Posted(
            view: try await subscriber(bundleID: bundleID, appUserID: appUserID),
            transactionIDs: [purchase.transactionID])
    }

    /// What an app's `AppTransaction` said: who bought or downloaded the app, when and which version first.
    struct PostedAppTransaction {
        var view: SubscriberView
        var appTransactionID: String?
        var originalApplicationVersion: String?
        var originalPurchaseDate: Date?
        var environment: Environment
    }

    /// StoreKit 2's `AppTransaction` the app posts for its user: verified as a transaction is (chain, bundle,
    /// environment), recorded once per user as an `APP_TRANSACTION` event.
    func postAppTransaction(bundleID: String, appUserID: String, signedAppTransaction: String) async throws
        -> PostedAppTransaction
    {
        let app = try app(bundleID)
        try Self.checkUserID(appUserID)
        let result = app.verify(signedAppTransaction, as: .appTransaction, now: now())
        metrics.count(
            "storekeeper_verifications_total", ["kind": "app-transaction", "outcome": result.status.rawValue])
        guard result.isOK, let payload = result.payload else {
            throw PurchaseServerError.verification(
                "the app transaction did not verify: \(result.status.rawValue) (\(result.reason ?? ""))"
                    + Self.trustHint(result.status))
        }
        let appTransaction = AppTransaction(json: payload)
        guard appTransaction.bundleID == bundleID else {
            throw PurchaseServerError.invalid(
                "the app transaction is for \(appTransaction.bundleID ?? "no app"), not \(bundleID)")
        }
        guard let environment = appTransaction.receiptType.flatMap({ Environment(name: $0.rawValue) }) else {
            throw PurchaseServerError.invalid("the app transaction names no environment this server knows")
        }
        guard app.settings.environments.contains(environment) || environment == .xcode else {
            throw PurchaseServerError.invalid("app transactions from \(environment.rawValue) are not accepted")
        }
        var details: [String: String] = [:]
        details["appTransactionId"] = appTransaction.appTransactionID
        details["originalApplicationVersion"] = appTransaction.originalApplicationVersion
        details["applicationVersion"] = appTransaction.applicationVersion
        details["originalPurchaseDate"] = appTransaction.originalPurchaseDate.map {
            String(EpochMilliseconds.milliseconds($0))
        }
        // Once per user and app download: `appTransactionId` (iOS 18.4 and later), else what stays the same
        // on every signing of it (the first purchase's date and version).
        let identity =
            appTransaction.appTransactionID
            ?? "\(details["originalPurchaseDate"] ?? "-"):\(appTransaction.originalApplicationVersion ?? "-")"
        let current = now()
        let facts = details
        let recorded = try await write(input: nil) { store -> RecordedEvents in
            // An alias is its user; a user the server has not seen becomes known (a first launch, nothing bought).
            let user = try self.lockedUser(appUserID, bundleID: bundleID, in: store)
            if try store.subscriber(bundle: bundleID, appUserID: user) == nil {
                try store.save(Subscriber(bundleID: bundleID, appUserID: user, firstSeen: current))
            }
            let event = ServerEvent(
                id: "\(ServerEventType.appTransaction):\(identity):\(user)", type: .appTransaction,
                bundleID: BundleID(bundleID), appUserID: user, date: current, environment: environment,
                source: .app, details: facts)
            return try store.append(event) ? [event] : []
        }
        for event in recorded.events { cache.invalidate(bundleID, event.appUserID ?? appUserID) }
        cache.invalidate(bundleID, appUserID)
        return PostedAppTransaction(
            view: try await subscriber(bundleID: bundleID, appUserID: appUserID),
            appTransactionID: appTransaction.appTransactionID,
            originalApplicationVersion: appTransaction.originalApplicationVersion,
            originalPurchaseDate: appTransaction.originalPurchaseDate, environment: environment)
    }

    /// An app receipt the app posts for its user: verified locally (chain, bundle, and the device hash when
    /// `deviceID` is given); every purchase in it applied.
    public func ingestReceipt(bundleID: String, appUserID: String, receipt: [UInt8], deviceID: String?) async throws
        -> SubscriberView
    {
        try await postReceipt(bundleID: bundleID, appUserID: appUserID, receipt: receipt, deviceID: deviceID).view
    }

    func postReceipt(bundleID: String, appUserID: String, receipt: [UInt8], deviceID: String?) async throws -> Posted {
        let app = try app(bundleID)
        try Self.checkUserID(appUserID)
        var expectations = ReceiptExpectations(bundleID: bundleID)
        if let deviceID {
            guard let uuid = UUID(uuidString: deviceID) else {
                throw PurchaseServerError.invalid("deviceId must be the device's identifierForVendor (a UUID)")
            }
            expectations.deviceIdentifier = withUnsafeBytes(of: uuid.uuid) { Array($0) }
        }
        let (verified, verifiedEnvironment) = app.verify(receipt, expecting: expectations, now: now())
        metrics.count(
            "storekeeper_verifications_total",
            ["kind": "receipt", "outcome": verified.isValid ? "OK" : (verified.failure?.code.rawValue ?? "")])
        guard verified.isValid, let parsed = verified.receipt else {
            throw PurchaseServerError.verification(
                "the receipt did not verify: \(verified.failure.map { String(describing: $0.code) } ?? "invalid")"
                    + (verified.failure?.code == .untrustedChain ? Self.trustHint(.invalidChain) : ""))
        }
        let environment = verifiedEnvironment ?? .sandbox
        guard app.settings.environments.contains(environment) || environment == .xcode else {
            throw PurchaseServerError.invalid("receipts from \(environment.rawValue) are not accepted")
        }
        let purchases = Self.purchases(of: parsed, environment: environment)
        let key =
            "receipt:" + Digest.hex(Digest.sha256(receipt).prefix(16)) + ":\(appUserID)"
        let current = now()
        _ = try await write(input: (key, "receipt", receipt)) { store in
            // A receipt with no purchase in it still makes the user known (with nothing to show yet): the user
            // the id names, read under its lock, so a user an alias request is writing meanwhile is not
            // written over with an empty row.
            if purchases.isEmpty {
                let user = try self.lockedUser(appUserID, bundleID: bundleID, in: store)
                if try store.subscriber(bundle: bundleID, appUserID: user) == nil {
                    try store.save(Subscriber(bundleID: bundleID, appUserID: user, firstSeen: current))
                }
            }
            // In the order they were bought (a receipt lists them in its bytes' order): each period follows the
            // one before it.
            let updates = purchases.sorted {
                ($0.purchaseDate, $0.transactionID.rawValue) < ($1.purchaseDate, $1.transactionID.rawValue)
            }.map {
                var update = PurchaseUpdate(source: .app, transaction: $0)
                update.fromReceipt = true
                return update
            }
            return try self.apply(updates, bundleID: bundleID, claimant: appUserID, in: store, now: current)
        }
        // Apple's API asked about the subscriptions bought last, together, so that the post waits one inline
        // timeout at most however many a receipt carries; the rest are the reconciler's and the notifications'.
        await withTaskGroup(of: Void.self) { group in
            for original in Self.inlineRefreshes(of: purchases) {
                group.addTask {
                    await self.refreshFromAPI(app: app, originalTransactionID: original, environment: environment)
                }
            }
        }
        return Posted(
            view: try await subscriber(bundleID: bundleID, appUserID: appUserID),
            transactionIDs: Set(purchases.map(\.transactionID)))
    }

    /// How many of a receipt's subscriptions its post asks Apple's API about while it waits.
    static let inlineRefreshLimit = 3

    /// The auto-renewable subscriptions (originals) a receipt's post asks Apple's API about: those whose latest
    /// purchase in the receipt is newest, at most ``inlineRefreshLimit``.
    static func inlineRefreshes(of purchases: [PurchaseRecord]) -> [TransactionID] {
        var latest: [TransactionID: Date] = [:]
        for purchase in purchases where purchase.kind == .autoRenewable {
            latest[purchase.originalTransactionID] = max(
                latest[purchase.originalTransactionID] ?? .distantPast, purchase.purchaseDate)
        }
        return latest.sorted { ($0.value, $0.key.rawValue) > ($1.value, $1.key.rawValue) }
            .prefix(inlineRefreshLimit).map(\.key)
    }
}
