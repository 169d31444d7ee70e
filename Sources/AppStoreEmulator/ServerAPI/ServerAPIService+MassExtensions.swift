import AppStoreServerAPI
import Foundation
import StoreModel
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

/// Extend Subscription Renewal Dates for All Active Subscribers: taken at once, run in the background a batch
/// of subscriptions a write, gone on with after a restart, its status asked for by request identifier.
extension ServerAPIService {
    /// Subscriptions one write of a mass extension handles.
    static let massExtensionBatch = 250
    /// Mass extensions running at once (each goes through every subscription of its product); a new request
    /// past them is refused with Apple's rate-limit error, as Apple limits this endpoint too.
    static let maxMassExtensions = 4

    /// Takes a mass extension and runs it in the background, a batch of subscriptions per write; at the end
    /// RENEWAL_EXTENSION/SUMMARY says how many succeeded and failed. A request identifier already taken
    /// answers without starting again.
    func apiMassExtend(_ mass: MassExtensionRequest, scope: APIScope) async throws -> String {
        let (request, productID, storefronts) = (mass.extension, mass.productID, mass.storefronts)
        guard appStore.catalog.entry(productID)?.subscription != nil else {
            throw EmulatorError.api(.invalidProductId, "Invalid product id.")
        }
        let progress = MassExtension(
            requestIdentifier: request.requestIdentifier, productID: productID, environment: scope.environment,
            storefronts: storefronts,
            resume: MassExtension.Resume(bundleID: scope.bundleID, days: request.days, reason: request.reason))
        // A slot is taken before the request is stored (a refused one stores nothing) and given back when no
        // job starts.
        guard massExtensionsRunning.wrappingAdd(1, ordering: .relaxed).newValue <= Self.maxMassExtensions else {
            massExtensionsRunning.wrappingSubtract(1, ordering: .relaxed)
            // Apple's 429 carries Retry-After (epoch milliseconds): a minute on, when a slot may be free.
            let later = appStore.realNow().addingTimeInterval(60)
            throw HTTPError(
                status: 429, code: String(APIErrorCode.rateLimitExceeded.rawValue), message: "Rate limit exceeded.",
                headers: ["Retry-After": String(EpochMilliseconds.milliseconds(later, roundingUp: true))])
        }
        let started: Bool
        do {
            started = try await self.appStore.storage.write { store -> Bool in
                if let taken = try store.massExtension(
                    productID: productID, requestIdentifier: request.requestIdentifier)
                {
                    // Requests are kept by product and identifier: another app's or environment's under the same
                    // ones is refused, not answered as if it were this one (whose status it could not read).
                    guard Self.belongs(taken, to: scope) else {
                        throw EmulatorError.api(.invalidRequestIdentifier, "Invalid request identifier.")
                    }
                    return false
                }
                try store.save(progress)
                return true
            }
        } catch {
            massExtensionsRunning.wrappingSubtract(1, ordering: .relaxed)
            throw error
        }
        guard started else {
            massExtensionsRunning.wrappingSubtract(1, ordering: .relaxed)
            return request.requestIdentifier
        }
        startMassExtension(progress, request: request, scope: scope)
        return request.requestIdentifier
    }

    /// Runs a mass extension whose slot among ``maxMassExtensions`` is taken, giving it back when it ends.
    private func startMassExtension(_ progress: MassExtension, request: ExtensionRequest, scope: APIScope) {
        jobs.start { [self, appStore] in
            defer { self.massExtensionsRunning.wrappingSubtract(1, ordering: .relaxed) }
            await self.runMassExtension(progress, request: request, scope: scope)
            // The job keeps the store alive until it ends (this service holds it unowned).
            _ = appStore
        }
    }

    /// Goes on with the mass extensions a stopped process left incomplete, each from where it got to (the
    /// subscriptions it had been through are not counted again).
    func resumeMassExtensions() async {
        guard !massExtensionsResumed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        do {
            let incomplete = try await appStore.storage.read { try $0.incompleteMassExtensions(limit: 1_000) }
            for progress in incomplete {
                guard let resume = progress.resume else { continue }
                let request = ExtensionRequest(
                    days: resume.days, reason: resume.reason, requestIdentifier: progress.requestIdentifier)
                let scope = APIScope(bundleID: resume.bundleID, environment: progress.environment)
                // Counted among those running (a new request waits for them), however many a restart finds.
                massExtensionsRunning.wrappingAdd(1, ordering: .relaxed)
                startMassExtension(progress, request: request, scope: scope)
            }
        } catch {
            appStore.logger.error("mass-extension.resume-failed", ["error": String(describing: error)])
        }
    }

    func runMassExtension(_ initial: MassExtension, request: ExtensionRequest, scope: APIScope) async {
        var progress = initial
        do {
            let ids = try await self.appStore.storage.read {
                try $0.subscriptionIDs(renewingTo: ProductID(initial.productID))
            }
            // After a restart, from the first subscription past the last one it had been through.
            var start = 0
            if let after = initial.resume?.after {
                start = ids.firstIndex { ($0.rawValue.count, $0.rawValue) > (after.count, after) } ?? ids.count
            }
            while start < ids.count {
                let batch = Array(ids[start..<min(ids.count, start + Self.massExtensionBatch)])
                start += batch.count
                let last = batch.last?.rawValue
                let current = self.appStore.now
                let snapshot = progress
                progress = try await self.appStore.storage.write { store in
                    var progress = snapshot
                    for id in batch {
                        guard let subscription = try store.subscription(id),
                            subscription.bundleID.rawValue == scope.bundleID,
                            let account = try store.account(subscription.accountID),
                            account.environment == scope.environment, subscription.state.status == .active
                        else { continue }
                        if let storefronts = progress.storefronts, !storefronts.contains(account.storefront) {
                            continue
                        }
                        // A family member's access follows the purchaser's; only purchasers count.
                        if try store.transaction(subscription.originalTransactionID)?.transaction.ownership
                            == .familyShared
                        {
                            continue
                        }
                        var perSubscription = request
                        perSubscription.requestIdentifier = "mass:" + request.requestIdentifier
                        do {
                            _ = try self.extendRenewal(
                                subscription, account: account, request: perSubscription, in: store, now: current)
                            progress.succeeded += 1
                        } catch is EmulatorError {
                            // Apple tells of each subscription it could not extend: RENEWAL_EXTENSION/FAILURE.
                            progress.failed += 1
                            // Told if it can be: a notice that cannot be made does not undo the batch.
                            do {
                                try self.appStore.enqueue(
                                    Notice(.renewalExtension, .failure), subscription: subscription, account: account,
                                    in: store, now: current)
                            } catch {
                                self.appStore.logger.error(
                                    "mass-extension.failure-notice", ["error": String(describing: error)])
                            }
                        }
                    }
                    progress.resume?.after = last
                    try store.save(progress)
                    return progress
                }
            }
            let current = self.appStore.now
            let finished = progress
            try await self.appStore.storage.write { store in
                var done = finished
                done.complete = true
                done.completeDate = current
                try store.save(done)
                var summary: JSONObject = [
                    "requestIdentifier": .string(done.requestIdentifier),
                    "environment": .string(scope.environment.rawValue), "bundleId": .string(scope.bundleID),
                    "productId": .string(done.productID), "succeededCount": .integer(done.succeeded),
                    "failedCount": .integer(done.failed),
                ]
                if let app = self.appStore.apps[scope.bundleID] { summary["appAppleId"] = .integer(app.appAppleID) }
                if let storefronts = done.storefronts {
                    summary["storefrontCountryCodes"] = .array(storefronts.map(JSONValue.string))
                }
                _ = try self.enqueueAppNotification(
                    Notice(.renewalExtension, .summary), scope: scope, container: "summary", content: summary,
                    in: store, now: current)
            }
            deliverDue()
        } catch {
            self.appStore.logger.error("mass-extension.failed", ["error": String(describing: error)])
        }
    }

    func apiMassExtensionStatus(productID: String, requestIdentifier: String, scope: APIScope) async throws
        -> MassExtension
    {
        let stored = try await self.appStore.storage.read {
            try $0.massExtension(productID: productID, requestIdentifier: requestIdentifier)
        }
        // Another app's or environment's request is not found.
        guard let stored, Self.belongs(stored, to: scope) else {
            throw EmulatorError.api(.statusRequestNotFound, "Status request not found.")
        }
        return stored
    }

    /// Whether a stored mass extension is the app's and environment's that `scope` names (one stored before
    /// the app was kept, with no `resume`, counts as any app's of its environment).
    static func belongs(_ mass: MassExtension, to scope: APIScope) -> Bool {
        mass.environment == scope.environment && (mass.resume.map { $0.bundleID == scope.bundleID } ?? true)
    }
}
