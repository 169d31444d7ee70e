import Foundation
import StoreModel
import Synchronization

/// Family Sharing. A purchase of a family-shareable non-consumable or auto-renewable subscription gives
/// every other member of the buyer's family access: a transaction of their own (ownership
/// `FAMILY_SHARED`, its own transaction ids) that follows the purchaser's — each new period is copied, each
/// change of state mirrored, and each notification the purchaser's subscription causes is sent for the
/// member's copy too. Access ends with REVOKE when the member or the purchaser leaves the family or the
/// purchase is refunded. A member cannot act on a shared subscription (no verbs, no refund requests):
/// only the purchaser can.
extension AppStore {
    /// Members in a family at most (Apple: the organizer and up to five others).
    static let maxFamilyMembers = 6

    /// Creates a family (`POST /_emulator/v1/families`); the members' family-shareable purchases are
    /// shared with one another at once.
    public func createFamily(organizer: String, members: [String]) async throws -> Family {
        var everyone = [AccountID(organizer)]
        for member in members.map(AccountID.init) where !everyone.contains(member) { everyone.append(member) }
        let all = everyone
        guard all.count <= Self.maxFamilyMembers else {
            throw EmulatorError.invalid("a family has at most \(Self.maxFamilyMembers) members, the organizer included")
        }
        try await catchUp()
        let current = now
        let id = "F" + newUUID().lowercased().replacingOccurrences(of: "-", with: "").prefix(12)
        return try await storage.write { store in
            var accounts: [Account] = []
            for member in all {
                guard let account = try store.account(member) else {
                    throw EmulatorError.notFound("no account \(member.rawValue)")
                }
                if let family = try store.family(member: member) {
                    throw EmulatorError.conflict("account \(member.rawValue) is already in family \(family.id)")
                }
                guard account.environment == accounts.first?.environment ?? account.environment else {
                    throw EmulatorError.invalid("a family's accounts are all in one environment")
                }
                accounts.append(account)
            }
            let family = Family(id: id, organizer: all[0], members: all)
            try store.save(family)
            try store.setSetting(Setting.familiesExist, "1")
            self.familiesExist.withLock { $0 = true }
            for account in accounts {
                for bundle in self.apps.keys.sorted().map(BundleID.init) {
                    for subscription in try store.subscriptions(account: account.id, bundle: bundle)
                    where try self.isPurchaser(subscription.originalTransactionID, in: store) {
                        try self.shareSubscription(subscription, account: account, notices: [], in: store, now: current)
                    }
                    for stored in try store.transactions(account: account.id, bundle: bundle)
                    where stored.transaction.kind == .nonConsumable && stored.transaction.ownership == .purchased {
                        try self.shareOneTime(stored, account: account, in: store, now: current)
                    }
                }
            }
            return family
        }
    }

    public func family(_ id: String) async throws -> Family {
        guard let family = try await storage.read({ try $0.family(id) }) else {
            throw EmulatorError.notFound("no family \(id)")
        }
        return family
    }

    /// Removes a member (`DELETE /_emulator/v1/families/{f}/members/{accountId}`): the member loses access
    /// to the others' purchases and they to the member's (REVOKE each).
    public func removeFamilyMember(familyID: String, accountID: String) async throws -> Family {
        try await catchUp()
        let current = now
        return try await storage.write { store in
            guard var family = try store.family(familyID) else { throw EmulatorError.notFound("no family \(familyID)") }
            let leaving = AccountID(accountID)
            guard family.members.contains(leaving) else {
                throw EmulatorError.notFound("account \(accountID) is not in family \(familyID)")
            }
            guard leaving != family.organizer else {
                throw EmulatorError.invalid("the organizer cannot leave the family; remove the other members first")
            }
            family.members.removeAll { $0 == leaving }
            try store.save(family)
            for owner in family.members + [leaving] {
                for source in try self.sharedPurchases(of: owner, in: store) {
                    for share in try store.shares(source: source) where !share.revoked {
                        guard owner == leaving || share.memberAccountID == leaving else { continue }
                        try self.revoke(share, in: store, now: current)
                    }
                }
            }
            return family
        }
    }

    /// Whether `originalID` is a purchase of its own (not a family member's access to someone else's).
    func isPurchaser(_ originalID: TransactionID, in store: any EmulatorStore) throws -> Bool {
        try store.transaction(originalID)?.transaction.ownership != .familyShared
    }

    /// The original transaction ids of the account's own family-shareable purchases, in every app.
    func sharedPurchases(of account: AccountID, in store: any EmulatorStore) throws -> [TransactionID] {
        var result: [TransactionID] = []
        for bundle in apps.keys.sorted().map(BundleID.init) {
            for stored in try store.transactions(account: account, bundle: bundle)
            where stored.transaction.ownership == .purchased && stored.renewalNumber == 0
                && (catalog.entry(stored.transaction.productID.rawValue)?.familyShareable ?? false)
                && stored.transaction.id == stored.transaction.originalID
            {
                result.append(stored.id)
            }
        }
        return result
    }

    /// After a change to the purchaser's subscription: grants access to members who have none (while it
    /// is in force), copies a new period to those who have it, mirrors its state, and sends each of them
    /// the notices the change caused (a refund revokes their access instead).
    func shareSubscription(
        _ subscription: StoredSubscription, account: Account, notices: [Notice], in store: any EmulatorStore,
        now: Date
    ) throws {
        guard familiesExist.withLock({ $0 }),
            catalog.entry(subscription.state.productID.rawValue)?.familyShareable == true
                || catalog.entry(subscription.state.autoRenewProductID.rawValue)?.familyShareable == true,
            let family = try store.family(member: account.id),
            try isPurchaser(subscription.originalTransactionID, in: store),
            let latest = try store.transaction(subscription.latestTransactionID)
        else { return }
        let existing = Dictionary(
            try store.shares(source: subscription.originalTransactionID).map { ($0.memberAccountID, $0) },
            uniquingKeysWith: { first, _ in first })
        for member in family.members where member != account.id {
            guard let memberAccount = try store.account(member) else { continue }
            guard let share = existing[member] else {
                let inForce = [.active, .billingRetry, .billingGracePeriod].contains(subscription.state.status)
                guard inForce, latest.transaction.isActive(at: now) || subscription.state.isInBillingRetry else {
                    continue
                }
                let id = try newTransactionID(in: store)
                var copy = Self.familyCopy(of: latest, id: id, originalID: id, member: member)
                copy.transaction.appTransactionID = try store.makeAppTransaction(
                    account: member, bundle: copy.transaction.bundleID)
                copy.transaction.originalPurchaseDate = now
                try store.insert(copy)
                var state = subscription.state
                state.originalTransactionID = id
                state.runStart = nil  // the member's run begins with its own copy
                let memberSubscription = StoredSubscription(
                    state: state, accountID: member, bundleID: subscription.bundleID, latestTransactionID: id)
                try store.save(memberSubscription)
                try store.save(
                    FamilyShare(
                        sourceOriginalID: subscription.originalTransactionID, memberAccountID: member,
                        memberOriginalID: id))
                try enqueue(
                    Notice(.subscribed, .initialBuy, v1: .initialBuy), subscription: memberSubscription,
                    account: memberAccount, in: store, now: now)
                continue
            }
            guard !share.revoked, var memberSubscription = try store.subscription(share.memberOriginalID),
                var current = try store.transaction(memberSubscription.latestTransactionID)
            else { continue }
            if current.transaction.webOrderLineItemID != latest.transaction.webOrderLineItemID {
                // A new period: the member's previous one ends when it starts.
                if let expires = current.transaction.expiresDate, expires > latest.transaction.purchaseDate {
                    current.transaction.expiresDate = latest.transaction.purchaseDate
                    try store.update(current)
                }
                var copy = Self.familyCopy(
                    of: latest, id: try newTransactionID(in: store), originalID: share.memberOriginalID, member: member)
                copy.transaction.appTransactionID = current.transaction.appTransactionID
                copy.transaction.originalPurchaseDate = current.transaction.originalPurchaseDate
                copy.renewalNumber = current.renewalNumber + 1
                try store.insert(copy)
                memberSubscription.latestTransactionID = copy.id
            } else {
                current.transaction.productID = latest.transaction.productID
                current.transaction.expiresDate = latest.transaction.expiresDate
                current.transaction.revocationDate = latest.transaction.revocationDate
                current.transaction.revocationReason = latest.transaction.revocationReason
                current.transaction.revocationPercentage = latest.transaction.revocationPercentage
                current.transaction.isUpgraded = latest.transaction.isUpgraded
                try store.update(current)
            }
            var state = subscription.state
            state.originalTransactionID = share.memberOriginalID
            state.runStart = memberSubscription.state.runStart  // the member's own run, not the purchaser's
            memberSubscription.state = state
            try store.save(memberSubscription)
            for notice in notices {
                switch notice.type {
                case .refund:
                    try revoke(share, in: store, now: now)
                case .subscribed, .didRenew, .didFailToRenew, .gracePeriodExpired, .expired, .didChangeRenewalStatus,
                    .didChangeRenewalPref:
                    try enqueue(notice, subscription: memberSubscription, account: memberAccount, in: store, now: now)
                default:
                    // Price consent, refund requests and their outcomes concern the purchaser alone.
                    continue
                }
            }
        }
    }

    /// Gives the other members of the buyer's family access to a family-shareable non-consumable.
    func shareOneTime(_ stored: StoredTransaction, account: Account, in store: any EmulatorStore, now: Date) throws {
        guard familiesExist.withLock({ $0 }), stored.transaction.kind == .nonConsumable,
            stored.transaction.revocationDate == nil,
            catalog.entry(stored.transaction.productID.rawValue)?.familyShareable == true,
            let family = try store.family(member: account.id)
        else { return }
        let shared = Set(try store.shares(source: stored.id).map(\.memberAccountID))
        for member in family.members where member != account.id && !shared.contains(member) {
            guard let memberAccount = try store.account(member) else { continue }
            let id = try newTransactionID(in: store)
            var copy = Self.familyCopy(of: stored, id: id, originalID: id, member: member)
            copy.transaction.appTransactionID = try store.makeAppTransaction(
                account: member, bundle: copy.transaction.bundleID)
            copy.transaction.originalPurchaseDate = now
            try store.insert(copy)
            try store.save(FamilyShare(sourceOriginalID: stored.id, memberAccountID: member, memberOriginalID: id))
            if memberAccount.environment != .production {
                try enqueue(
                    Notice(.oneTimeCharge), transaction: copy, renewal: nil, account: memberAccount, in: store, now: now
                )
            }
        }
    }

    /// Ends the access of every member to a refunded one-time purchase.
    func revokeShares(of source: TransactionID, in store: any EmulatorStore, now: Date) throws {
        guard familiesExist.withLock({ $0 }) else { return }
        for share in try store.shares(source: source) where !share.revoked {
            try revoke(share, in: store, now: now)
        }
    }

    /// Ends one member's access: their copy is revoked and REVOKE is sent for it.
    func revoke(_ share: FamilyShare, in store: any EmulatorStore, now: Date) throws {
        var ended = share
        ended.revoked = true
        try store.save(ended)
        guard let memberAccount = try store.account(share.memberAccountID) else { return }
        let notice = Notice(.revoke, v1: .revoke)
        if var subscription = try store.subscription(share.memberOriginalID) {
            if var latest = try store.transaction(subscription.latestTransactionID),
                latest.transaction.revocationDate == nil
            {
                latest.transaction.setRevocation(now, reason: .other)
                try store.update(latest)
            }
            subscription.state.status = .revoked
            subscription.state.autoRenew = false
            try store.save(subscription)
            try enqueue(notice, subscription: subscription, account: memberAccount, in: store, now: now)
        } else if var copy = try store.transaction(share.memberOriginalID) {
            if copy.transaction.revocationDate == nil {
                copy.transaction.setRevocation(now, reason: .other)
                try store.update(copy)
            }
            try enqueue(notice, transaction: copy, renewal: nil, account: memberAccount, in: store, now: now)
        }
    }

    /// A member's transaction for a purchase made by someone else in the family.
    static func familyCopy(
        of source: StoredTransaction, id: TransactionID, originalID: TransactionID, member: AccountID
    )
        -> StoredTransaction
    {
        var copy = source
        copy.transaction.id = id
        copy.transaction.originalID = originalID
        copy.transaction.ownership = .familyShared
        copy.transaction.appAccountToken = nil
        copy.accountID = member
        copy.applicationUsername = nil
        // The member paid nothing: no order of their own.
        copy.orderID = nil
        copy.finished = false
        copy.renewalNumber = 0
        return copy
    }
}
