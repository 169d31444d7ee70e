import AppStoreReceipts
import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import StorekeeperSQL
import Synchronization

/// App Store Server Notifications V1: unsigned, trusted through the shared secret and the receipt they carry.
extension PurchaseServer {
    /// V1: only with the app's shared secret, and only what the re-verified `latest_receipt` says.
    func ingestV1(_ notification: V1Notification, object: JSONObject, body: [UInt8], app: AppRuntime) async throws
        -> Ingested
    {
        guard let secret = app.settings.sharedSecret, let password = notification.password,
            ConstantTime.equals(Array(password.utf8), Array(secret.utf8))
        else {
            metrics.count("storekeeper_verifications_total", ["kind": "notification-v1", "outcome": "BAD_PASSWORD"])
            throw PurchaseServerError.unauthorized("the V1 notification's password is not the app's shared secret")
        }
        guard let latest = notification.latestReceipt, let receipt = Data(base64Encoded: latest)
        else { throw PurchaseServerError.invalid("the V1 notification has no unified_receipt.latest_receipt") }
        let verified = app.receipts.verify(
            Array(receipt), expecting: ReceiptExpectations(bundleID: app.settings.bundleID), now: now())
        metrics.count(
            "storekeeper_verifications_total",
            ["kind": "notification-v1", "outcome": verified.isValid ? "OK" : (verified.failure?.code.rawValue ?? "")])
        guard let parsed = verified.receipt, verified.isValid else {
            throw PurchaseServerError.verification("the V1 notification's receipt did not verify")
        }
        let type = notification.type
        metrics.count(
            "storekeeper_notifications_total",
            ["type": "V1:" + (type.isKnown ? type.rawValue : "other")])
        // Apple's receipts only (Xcode sends no notifications): Production, or else the sandbox.
        let environment = Environment(name: parsed.environment, among: Environment.customerEnvironments) ?? .sandbox
        guard app.settings.environments.contains(environment) else {
            throw PurchaseServerError.invalid(
                "notifications from \(environment.rawValue) are not accepted for \(app.settings.bundleID)")
        }
        var found = Self.purchases(of: parsed, environment: environment).sorted {
            ($0.purchaseDate, $0.transactionID.rawValue) < ($1.purchaseDate, $1.transactionID.rawValue)
        }.map {
            var update = PurchaseUpdate(source: .notification, transaction: $0, notice: .v1(type))
            update.fromReceipt = true
            return update
        }
        let current = now()
        for renewal in notification.pendingRenewals {
            // V1 sends no status: it follows from the receipt's latest period and the retry and grace facts.
            let latest = found.compactMap(\.transaction)
                .filter { $0.originalTransactionID.rawValue == renewal.originalTransactionID }
                .max { $0.purchaseDate < $1.purchaseDate }
            found.append(
                PurchaseUpdate(
                    source: .notification,
                    renewal: RenewalFacts(
                        originalTransactionID: TransactionID(renewal.originalTransactionID),
                        status: renewal.status(
                            latestExpires: latest?.expiresDate, revoked: latest?.revocationDate != nil, at: current),
                        autoRenewStatus: renewal.autoRenewStatus,
                        autoRenewProductID: renewal.autoRenewProductID.map(ProductID.init),
                        expirationIntent: renewal.expirationIntent,
                        gracePeriodExpiresDate: renewal.gracePeriodExpiresDate,
                        isInBillingRetryPeriod: renewal.isInBillingRetryPeriod, signedDate: parsed.creationDate),
                    notice: .v1(type)))
        }
        let updates = found
        // V1 has no id. Apple's retries of one carry a newly made receipt, and nothing else in it tells a retry
        // from a second notification saying the same (a plan changed to B, back, and to B again): keyed by the
        // whole body, a retry is applied again (which changes nothing) rather than a real change being lost.
        let key = "notification-v1:" + Digest.hex(Digest.sha256(body).prefix(16))
        let bundleID = app.settings.bundleID
        // Kept without its `password`: the app's shared secret is not stored with every notification.
        var kept = body
        if object["password"] != nil {
            var withoutPassword = object
            withoutPassword["password"] = nil
            kept = JSONWriter.bytes(.object(withoutPassword))
        }
        // A consumable's refund is in latest_receipt_info only (receipts do not show consumables' refunds): the
        // cancellation of a consumable this server holds, trusted as the rest of V1 is, by the shared secret.
        let cancellations = notification.cancellations
        let creation = parsed.creationDate
        return try await write(input: (key, "notification-v1", kept), viewFollows: false) { store in
            var refunds: [PurchaseUpdate] = []
            for cancelled in cancellations {
                guard var purchase = try store.purchase(TransactionID(cancelled.transactionID)),
                    purchase.bundleID.rawValue == bundleID, purchase.kind == .consumable, purchase.revocationDate == nil
                else { continue }
                purchase.revocationDate = cancelled.date
                purchase.signedDate = max(creation, purchase.signedDate)
                refunds.append(PurchaseUpdate(source: .notification, transaction: purchase, notice: .v1(type)))
            }
            return try self.apply(updates + refunds, bundleID: bundleID, claimant: nil, in: store, now: current)
        }
    }
}
