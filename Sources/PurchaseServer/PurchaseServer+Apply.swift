import Foundation
import StoreModel
import StorekeeperHTTP
import Synchronization

/// Applying updates inside a write: the locks they take, ownership (the claimant, its alias and account token,
/// the transfer policy), the engine's outcome, records, ledger, events and webhooks.
extension PurchaseServer {
    /// Takes the locks of the subscriptions `originals` (each once) in the order a group of notifications
    /// takes them (``WriteAhead/locksFirst(_:before:)``): a write needing several never holds one a group
    /// waits for while it waits for one the group holds.
    func lockSubscriptions(of originals: [TransactionID], in store: any ServerStore) throws {
        for original in Set(originals).sorted(by: { WriteAhead.locksFirst($0, before: $1) }) {
            try store.lock(original: original)
        }
    }

    /// Applies `updates` in one write, each as ``apply(_:bundleID:claimant:in:now:)`` does, after taking
    /// their subscriptions' locks together (``lockSubscriptions(of:in:)``).
    func apply(_ updates: [PurchaseUpdate], bundleID: String, claimant: String?, in store: any ServerStore, now: Date)
        throws -> RecordedEvents
    {
        try lockSubscriptions(of: updates.compactMap(\.originalTransactionID), in: store)
        var memo = ClaimantMemo()
        let recorded = try updates.map {
            try apply($0, bundleID: bundleID, claimant: claimant, in: store, now: now, memo: &memo)
        }
        try finish(memo, bundleID: bundleID, in: store)
        return RecordedEvents(joining: recorded)
    }

    /// The user `given` names (itself, or the user it is an alias of), read under the locks of both. An id
    /// becomes an alias, and a user is merged into another, only under the locks of the ids that change
    /// (``alias(bundleID:appUserID:alias:)``): once `given`'s lock is held it cannot become an alias, and once
    /// its user's is, that user cannot be merged away, until this write ends. What is read before a lock may
    /// be a merge's past (one that committed in between), so each lock is followed by a read again.
    func lockedUser(_ given: String, bundleID: String, in store: any ServerStore) throws -> String {
        try store.lock(user: given, bundle: bundleID)
        var locked: Set<String> = [given]
        var user = try store.user(bundle: bundleID, alias: given) ?? given
        while !locked.contains(user) {
            // Each turn is a merge of the user another process committed meanwhile.
            guard locked.count < Self.aliasReadsBound else {
                throw PurchaseServerError.unavailable(
                    "\(RequestBody.printable(given))'s user kept changing while this write waited; try again")
            }
            try store.lock(user: user, bundle: bundleID)
            locked.insert(user)
            user = try store.user(bundle: bundleID, alias: given) ?? given
        }
        return user
    }

    /// Users locked at most while following an id's alias through merges committed meanwhile.
    static let aliasReadsBound = 8

    /// What one write's updates for a claimant look up once, not once an update (a receipt holds every period
    /// of a subscription): the user the claimant's id names, the user's row as this write last read or wrote
    /// it, and whether the user's subscriptions are to be checked for several Apple accounts when they end.
    struct ClaimantMemo {
        /// The claimant's id as given, and the user it names.
        var given: String?
        var user: String?
        /// Nil until read; then the row (nil: none yet).
        var subscriber: Subscriber??
        var checkAccounts = false
    }

    /// What the updates of one write left to do once: the check for several Apple accounts.
    func finish(_ memo: ClaimantMemo, bundleID: String, in store: any ServerStore) throws {
        if memo.checkAccounts, let user = memo.user {
            try flagSeveralAccounts(bundleID: bundleID, user: user, in: store)
        }
    }

    /// Inside a write that changes what the user's answers are made from: what this process keeps of them
    /// goes, and on storage other processes share the user's version moves, so what they keep is not used.
    func changed(_ bundleID: String, _ user: String, in store: any ServerStore) throws {
        userChanges.add(1, ordering: .sequentiallyConsistent)
        cache.invalidate(bundleID, user)
        if cache.shared { try store.touch(bundle: bundleID, appUserID: user) }
    }

    /// Applies one update inside a write: ownership (the claimant and the transfer policy), the engine,
    /// the records, the ledger, events and their webhooks. Answers the events it recorded (not those already
    /// there).
    func apply(_ update: PurchaseUpdate, bundleID: String, claimant: String?, in store: any ServerStore, now: Date)
        throws -> RecordedEvents
    {
        var memo = ClaimantMemo()
        let recorded = try apply(update, bundleID: bundleID, claimant: claimant, in: store, now: now, memo: &memo)
        try finish(memo, bundleID: bundleID, in: store)
        return recorded
    }

    /// One update of a write whose updates share `memo` (``finish(_:bundleID:in:)`` follows the last).
    func apply(
        _ update: PurchaseUpdate, bundleID: String, claimant: String?, in store: any ServerStore, now: Date,
        memo: inout ClaimantMemo
    ) throws -> RecordedEvents {
        guard let ahead = WriteAhead(update, bundleID: bundleID) else { return [] }
        let originalID = ahead.original
        // The subscription, then the user (a user the app knows by another id, an alias, is that user): what
        // follows reads them as the last writer left them.
        try store.lock(original: originalID)
        let claimant = try claimant.map { given in
            if let user = memo.user, memo.given == given { return user }
            let user = try lockedUser(given, bundleID: bundleID, in: store)
            (memo.given, memo.user, memo.subscriber) = (given, user, nil)
            return user
        }
        try store.readAhead(ahead)
        if let transaction = update.transaction, transaction.bundleID.rawValue != bundleID {
            throw PurchaseServerError.invalid("the transaction is for \(transaction.bundleID), not \(bundleID)")
        }
        let storedPurchase = try update.transaction.flatMap { try store.purchase($0.transactionID) }
        let storedSubscription = try store.subscription(originalID)
        var owner = storedSubscription?.owner ?? storedPurchase?.owner
        if owner == nil { owner = try store.firstOwner(original: originalID) }
        if owner == nil, let token = update.transaction?.appAccountToken,
            let holder = try store.subscriber(bundle: bundleID, appAccountToken: token)?.appUserID
        {
            // The holder's user, read under the holder's lock (``lockedUser(_:bundleID:in:)``): a merge of the
            // holder into another user that committed after the token was read made the holder an alias of
            // that user, and the purchase goes there.
            owner = try lockedUser(holder, bundleID: bundleID, in: store)
        }
        // Whoever held it before a transfer below loses it: their answers change too.
        let previousOwner = owner
        var events: [ServerEvent] = []
        var transferred = false
        if let claimant, let token = update.transaction?.appAccountToken?.lowercased() {
            try checkAccountToken(token, claimant: claimant, bundleID: bundleID, in: store)
        }
        if let claimant {
            let storedSubscriber = try memo.subscriber ?? store.subscriber(bundle: bundleID, appUserID: claimant)
            var subscriber = storedSubscriber ?? Subscriber(bundleID: bundleID, appUserID: claimant, firstSeen: now)
            if let token = update.transaction?.appAccountToken?.lowercased(),
                !subscriber.appAccountTokens.contains(token)
            {
                subscriber.appAccountTokens.append(token)
            }
            if let current = owner, current != claimant {
                switch configuration.transferPolicy {
                case .transfer:
                    owner = claimant
                    transferred = true
                    events.append(
                        ServerEvent(
                            id:
                                "\(ServerEventType.transfer):\(originalID):\(claimant):\(PurchaseEngine.milliseconds(update.transaction?.signedDate))",
                            type: .transfer, bundleID: BundleID(bundleID), appUserID: claimant, date: now,
                            environment: update.transaction?.environment, productID: update.transaction?.productID,
                            transactionID: update.transaction?.transactionID, originalTransactionID: originalID,
                            source: update.source, details: ["transferredFrom": current, "transferredTo": claimant]))
                case .keep:
                    if !subscriber.flags.contains("purchase_kept_by_other_user") {
                        subscriber.flags.append("purchase_kept_by_other_user")
                    }
                }
            } else {
                owner = claimant
            }
            // Written when new or changed (a token, a flag): not again for each purchase of a receipt, nor for
            // each transaction an app posts for a user it already has.
            if subscriber != storedSubscriber { try store.save(subscriber) }
            memo.subscriber = .some(subscriber)
        }
        for user in Set(
            [owner, previousOwner, claimant, storedSubscription?.owner, storedPurchase?.owner].compactMap { $0 })
        {
            try changed(bundleID, user, in: store)
        }
        let outcome = PurchaseEngine.apply(
            update, purchase: storedPurchase, subscription: storedSubscription, owner: owner, now: now)
        // An owner known now holds even when the facts were stale (a receipt signed before the notification).
        if var purchase = outcome.purchase {
            if let owner { purchase.owner = owner }
            if purchase != storedPurchase { try store.save(purchase) }
        }
        if var subscription = outcome.subscription {
            if let owner { subscription.owner = owner }
            if subscription != storedSubscription { try store.save(subscription) }
        }
        if transferred, let owner {
            for var purchase in try store.purchases(original: originalID) where purchase.owner != owner {
                purchase.owner = owner
                try store.save(purchase)
            }
            if var subscription = try store.subscription(originalID), subscription.owner != owner {
                subscription.owner = owner
                try store.save(subscription)
            }
        }
        for entry in outcome.ledger { _ = try store.append(entry) }
        // Events of a purchase no user has claimed yet wait for one: their webhooks go out with the user, when
        // the user posts it or when the purchase, stored without an owner, gets one here (an account token bound
        // since by a post of another purchase). A purchase whose owner was stored has none waiting.
        let ownerless =
            (storedSubscription.map { $0.owner == nil } ?? false) || (storedPurchase.map { $0.owner == nil } ?? false)
        if let owner, claimant == owner || ownerless {
            for event in try store.claimOwnerlessEvents(original: originalID, owner: owner) {
                try enqueueWebhooks(for: event, in: store)
            }
        }
        var recorded: RecordedEvents = []
        for event in events + outcome.events {
            // Nothing in this write depends on whether an event of a purchase no user owns yet is new (it
            // waits for its user, webhooks and all), unless it is a cancellation: only the answer does. On
            // PostgreSQL its insert then goes with the commit, not in a round trip of its own.
            let waitsForUser = event.appUserID == nil && event.originalTransactionID != nil
            guard !waitsForUser || event.type == .cancellation else {
                recorded.append(event, inserted: try store.appendLater(event))
                continue
            }
            guard try store.append(event) else { continue }
            if !waitsForUser {
                try enqueueWebhooks(for: event, in: store)
            }
            // A cancellation within a day of a retention answer means the answer did not save it.
            if event.type == .cancellation, let original = event.originalTransactionID {
                try store.markRetentionCancelled(
                    original: original, since: event.date.addingTimeInterval(-Self.retentionSaveWindow),
                    until: event.date, at: event.date)
            }
            recorded.append(event)
        }
        if let claimant, let owner, owner == claimant, update.transaction?.kind == .autoRenewable {
            memo.checkAccounts = true
        }
        return recorded
    }

    /// One Apple account has one original purchase per subscription group: several for one user means
    /// several Apple accounts feed it (a shared or resold account).
    func flagSeveralAccounts(bundleID: String, user: String, in store: any ServerStore) throws {
        let purchases = try store.purchases(bundle: bundleID, owner: user).filter {
            $0.kind == .autoRenewable && $0.ownership == .purchased
        }
        guard Self.severalAccounts(purchases),
            var subscriber = try store.subscriber(bundle: bundleID, appUserID: user),
            !subscriber.flags.contains("multiple_apple_accounts")
        else { return }
        subscriber.flags.append("multiple_apple_accounts")
        try store.save(subscriber)
    }

    /// Whether `purchases` (one user's auto-renewable ones) hold two original purchases of one subscription
    /// group: an app with several groups has one original in each from a single Apple account. Products are in
    /// one group when a signed purchase says so (`subscriptionGroupIdentifier`) or when one original holds
    /// both (an upgrade, a downgrade); a product seen only in receipts, never beside another, is its own.
    static func severalAccounts(_ purchases: [PurchaseRecord]) -> Bool {
        // Union-find over the names products, groups and originals go by.
        var parent: [String: String] = [:]
        func root(_ name: String) -> String {
            var name = name
            while let up = parent[name], up != name { name = up }
            return name
        }
        func join(_ a: String, _ b: String) {
            let (x, y) = (root(a), root(b))
            if x != y { parent[x] = y }
        }
        for purchase in purchases {
            let product = "product:\(purchase.productID)"
            join(product, "original:\(purchase.originalTransactionID)")
            if let group = purchase.subscriptionGroupID { join(product, "group:\(group)") }
        }
        var originalOfGroup: [String: TransactionID] = [:]
        for purchase in purchases {
            let group = root("product:\(purchase.productID)")
            if let seen = originalOfGroup[group] {
                if seen != purchase.originalTransactionID { return true }
            } else {
                originalOfGroup[group] = purchase.originalTransactionID
            }
        }
        return false
    }

    /// A signed `appAccountToken` binds a purchase to the user who made it: a claimant other than the user
    /// who already holds the token (by an earlier claim, or whose id is that UUID) is refused, whatever the
    /// transfer policy — holding another user's signed transaction is not enough to take it.
    func checkAccountToken(_ token: String, claimant: String, bundleID: String, in store: any ServerStore) throws {
        // Writes binding one token run one after the other, so the second sees the first's binding (processes
        // apart, on PostgreSQL; a write takes one token's lock, after its subscriptions' and user's).
        try store.lock(accountToken: token, bundle: bundleID)
        var holders: Set<String> = []
        if let holder = try store.subscriber(bundle: bundleID, appAccountToken: token)?.appUserID {
            holders.insert(holder)
        }
        for spelling in Set([token, token.uppercased()]) {
            let user = try store.user(bundle: bundleID, alias: spelling) ?? spelling
            if try store.subscriber(bundle: bundleID, appUserID: user) != nil { holders.insert(user) }
        }
        holders.remove(claimant)
        guard holders.isEmpty else {
            throw PurchaseServerError(
                code: .accountTokenMismatch, status: 409,
                message: "the transaction's appAccountToken belongs to another user of this app")
        }
    }
}
