import Foundation
public import StoreModel
import StorekeeperJSON
import SubscriptionLifecycle

/// A customer's refund request and Apple's decision (the in-app `beginRefundRequest` path): a consumable
/// or auto-renewable subscription first causes CONSUMPTION_REQUEST (Apple asks the developer for
/// consumption data), a subscription's auto-renew is turned off, then the decision refunds the purchase
/// (REFUND) or declines it (REFUND_DECLINED).
extension AppStore {
    /// Records a refund request for `transactionID`; answers the transaction and its subscription's state.
    public func requestRefund(transactionID: String, reason: ConsumptionRequestReason) async throws -> (
        transaction: StoredTransaction, subscription: SubscriptionState?
    ) {
        try await catchUp()
        let current = now
        return try await storage.write { store in
            let (stored, account) = try self.purchaserTransaction(transactionID, in: store)
            guard stored.transaction.revocationDate == nil else {
                throw EmulatorError.invalid("transaction \(transactionID) is already refunded")
            }
            guard try store.refundRequest(stored.id) == nil else {
                throw EmulatorError.conflict("transaction \(transactionID) already has a refund request waiting")
            }
            try store.setRefundRequest(stored.id, reason: reason.rawValue)
            let kind = stored.transaction.kind
            guard kind == .consumable || kind == .autoRenewable else { return (stored, nil) }
            // V1's CONSUMPTION_REQUEST is for consumables only; V2's covers subscriptions too.
            let notice = Notice(.consumptionRequest, v1: kind == .consumable ? .consumptionRequest : nil)
            let extra: JSONObject = ["consumptionRequestReason": .string(reason.rawValue)]
            guard kind == .autoRenewable, var subscription = try store.subscription(stored.transaction.originalID)
            else {
                try self.enqueue(
                    notice, transaction: stored, renewal: nil, account: account, in: store, now: current, extra: extra)
                return (stored, nil)
            }
            try self.enqueue(
                notice, period: stored, of: subscription, account: account, in: store, now: current, extra: extra)
            // The App Store turns auto-renew off while the request is considered.
            if subscription.state.autoRenew, subscription.state.status != .expired {
                let effects = try Self.refusing { () throws(LifecycleError) in
                    try self.lifecycle(for: account).handle(.setAutoRenew(false), to: &subscription.state, at: current)
                }
                try self.apply(effects, to: &subscription, account: account, in: store, now: current)
            }
            return (try store.transaction(subscription.latestTransactionID) ?? stored, subscription.state)
        }
    }

    /// Apple's decision on a waiting refund request: approved refunds the purchase, declined sends
    /// REFUND_DECLINED.
    public func decideRefund(transactionID: String, approved: Bool, reason: RevocationReason) async throws -> (
        transaction: StoredTransaction, subscription: SubscriptionState?
    ) {
        try await catchUp()
        let current = now
        return try await storage.write { store in
            let (stored, account) = try self.purchaserTransaction(transactionID, in: store)
            guard try store.refundRequest(stored.id) != nil else {
                throw EmulatorError.invalid(
                    "transaction \(transactionID) has no refund request waiting for a decision (refund-request first)")
            }
            try store.setRefundRequest(stored.id, reason: nil)
            if approved {
                return try self.refund(transactionID: transactionID, reason: reason, in: store, now: current)
            }
            let notice = Notice(.refundDeclined)
            if stored.transaction.kind == .autoRenewable,
                let subscription = try store.subscription(stored.transaction.originalID)
            {
                try self.enqueue(notice, period: stored, of: subscription, account: account, in: store, now: current)
                return (try store.transaction(subscription.latestTransactionID) ?? stored, subscription.state)
            }
            try self.enqueue(notice, transaction: stored, renewal: nil, account: account, in: store, now: current)
            return (stored, nil)
        }
    }

    /// The transaction and its account, when the account bought it (not a family member's access).
    func purchaserTransaction(_ transactionID: String, in store: any EmulatorStore) throws -> (
        StoredTransaction, Account
    ) {
        guard let stored = try store.transaction(TransactionID(transactionID)),
            let account = try store.account(stored.accountID)
        else { throw EmulatorError.notFound("no transaction \(transactionID)") }
        try Self.refuseFamilyShared(stored)
        return (stored, account)
    }

    /// Reverses a granted refund (REFUND_REVERSED): subscriptions through the engine (they keep their
    /// renewal date), other products by clearing their revocation.
    public func reverseRefund(transactionID: String) async throws -> (
        transaction: StoredTransaction, subscription: SubscriptionState?
    ) {
        try await catchUp()
        let current = now
        return try await storage.write { store in
            let (found, account) = try self.purchaserTransaction(transactionID, in: store)
            var stored = found
            if stored.transaction.kind == .autoRenewable {
                if let past = try self.pastPeriod(stored, refund: nil, account: account, in: store, now: current) {
                    return past
                }
                return try self.subscriptionVerb(.refundReversed, transactionID: transactionID, in: store, now: current)
            }
            guard stored.transaction.revocationDate != nil else {
                throw EmulatorError.invalid("transaction \(transactionID) is not refunded")
            }
            stored.transaction.setRevocation(nil, reason: nil)
            try store.update(stored)
            try self.enqueue(
                Notice(.refundReversed), transaction: stored, renewal: nil, account: account, in: store, now: current)
            return (stored, nil)
        }
    }
}
