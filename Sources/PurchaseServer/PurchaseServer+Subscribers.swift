import AppStoreReceipts
public import Foundation
import StoreModel
import StoreTime
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperSQL
import Synchronization

/// What an app user has: entitlements, subscriptions, purchases, consumable balances and flags.
public struct SubscriberView: Sendable {
    public struct Entitlement: Sendable, Hashable {
        public var active: Bool
        public var productID: String?
        public var expiresDate: Date?
        public var willRenew: Bool
        public var periodType: String
        public var inGracePeriod: Bool
        public var inBillingRetry: Bool
        /// `app_store` or `promotional` (a developer's grant).
        public var source: String
    }

    public var appUserID: String
    /// Other ids of the same user.
    public var aliases: [String]
    public var bundleID: String
    public var entitlements: [String: Entitlement]
    public var subscriptions: [SubscriptionRecord]
    public var purchases: [PurchaseRecord]
    public var balances: [String: Int]
    public var flags: [String]
}

extension PurchaseServer {
    /// The user's view now; an unknown user is a 404.
    public func subscriber(bundleID: String, appUserID requested: String) async throws -> SubscriberView {
        let app = try app(bundleID)
        return Self.view(try await records(bundleID: bundleID, requested), app: app.settings, now: now())
    }

    /// The records of the user (or of the user `requested` is an alias of): those kept when current, else
    /// read in one snapshot (one statement on PostgreSQL) and kept; an unknown user is a 404.
    func records(bundleID: String, _ requested: String) async throws -> SubscriberCache.Entry {
        if let entry = try await currentEntry(bundleID, requested) { return entry }
        // On shared storage nothing is kept before the follower's first asking (which vouches for nothing
        // kept before it and drops it all).
        if let follower, !follower.started { try await follower.catchUp() }
        let generation = cache.generation(bundleID, requested)
        cache.missed()
        guard
            let found = try await storage.readStatement({
                try $0.subscriberRecords(bundle: bundleID, appUserID: requested)
            })
        else { throw PurchaseServerError.notFound("no subscriber \(RequestBody.printable(requested))") }
        let entry = SubscriberCache.Entry(records: found)
        // Only under the user's own id: an alias's answer is not cached (its user's writes invalidate the user).
        if found.subscriber.appUserID == requested { cache.store(entry, bundleID, requested, since: generation) }
        return entry
    }

    /// The user's kept records if they are current: on storage other processes write, at once while the
    /// follower's lease runs, else once it has dropped the users changed up to now (a user not kept is read
    /// afresh without waiting for it).
    func currentEntry(_ bundleID: String, _ user: String) async throws -> SubscriberCache.Entry? {
        guard let follower, !follower.vouches else { return cache.entry(bundleID, user) }
        guard cache.holds(bundleID, user) else { return nil }
        try await follower.catchUp()
        return cache.entry(bundleID, user)
    }

    /// A cached user's answer as bytes without the database, for answering inline; nil when the user's
    /// records are not kept, or are kept beside other processes' writes while this process holds no live
    /// lease (they wait for the follower).
    func cachedAnswer(_ answer: SubscriberCache.Answer, bundleID: String, appUserID: String) throws -> [UInt8]? {
        let app = try app(bundleID)
        guard follower?.vouches ?? true, let entry = cache.entry(bundleID, appUserID) else { return nil }
        return rendered(answer, of: entry, app: app, bundleID: bundleID, appUserID: appUserID)
    }

    /// The user's answer as bytes, from current kept records or read ones.
    func answer(_ answer: SubscriberCache.Answer, bundleID: String, appUserID: String) async throws -> [UInt8] {
        let app = try app(bundleID)
        let entry = try await records(bundleID: bundleID, appUserID)
        return rendered(answer, of: entry, app: app, bundleID: bundleID, appUserID: appUserID)
    }

    /// An answer rendered once per change of the user's records (and once more each time one of their expiry
    /// dates passes), not per request. The entitlements answer is kept without its `requestDate`, which is
    /// added per request.
    func rendered(
        _ answer: SubscriberCache.Answer, of entry: SubscriberCache.Entry, app: AppRuntime, bundleID: String,
        appUserID: String
    ) -> [UInt8] {
        let now = now()
        let body: [UInt8]
        if let rendered = entry.rendered[answer], rendered.holds(at: now) {
            body = rendered.bytes
        } else {
            let view = Self.view(entry, app: app.settings, now: now)
            switch answer {
            case .subscriber: body = Self.answer(.object(Self.render(view))).body
            case .entitlements:
                var object = Self.renderEntitlements(view, asked: appUserID, now: now)
                object["requestDate"] = nil
                body = Self.answer(.object(object)).body
            }
            let (from, until) = Self.span(of: entry, app: app.settings, around: now)
            cache.store(.init(bytes: body, from: from, until: until), as: answer, for: entry, bundleID, appUserID)
        }
        guard answer == .entitlements else { return body }
        // `…}` + `,"requestDate":…,"requestDateISO":"…"}`, as the writer writes the whole object.
        let milliseconds = EpochMilliseconds.milliseconds(now)
        var tail = #","requestDate":\#(milliseconds)"#
        if let sibling = ISODates.sibling("requestDate", milliseconds) {
            tail += #","\#(sibling.key)":"\#(sibling.value)""#
        }
        var answer = [UInt8]()
        answer.reserveCapacity(body.count + tail.utf8.count)
        answer.append(contentsOf: body.dropLast())
        answer.append(contentsOf: tail.utf8)
        answer.append(0x7D)
        return answer
    }

    /// The span of time around `now` in which no expiry date of the entry passes: from the latest one at or
    /// before `now` to the first one after it. What the view says is the same anywhere in it.
    static func span(of entry: SubscriberCache.Entry, app: AppSettings, around now: Date) -> (from: Date, until: Date) {
        var from = Date.distantPast
        var until = Date.distantFuture
        func consider(_ date: Date?) {
            guard let date else { return }
            if date <= now { from = max(from, date) } else { until = min(until, date) }
        }
        for subscription in entry.records.subscriptions {
            consider(subscription.expiresDate)
            consider(subscription.gracePeriodExpiresDate)
        }
        for grant in entry.records.grants { consider(grant.expiresDate) }
        for purchase in entry.records.purchases { consider(Self.entitlementEnd(of: purchase, app: app)) }
        return (from, until)
    }

    static func view(_ entry: SubscriberCache.Entry, app: AppSettings, now: Date) -> SubscriberView {
        view(
            entry.records.subscriber, subscriptions: entry.records.subscriptions, purchases: entry.records.purchases,
            balances: entry.records.balances, grants: entry.records.grants, app: app, now: now)
    }

    /// When a one-time purchase stops giving its entitlements: a non-renewing subscription's expiry (as
    /// recorded, else its purchase date plus the app's ``AppSettings/nonRenewingDurations`` for it); nil for good.
    static func entitlementEnd(of purchase: PurchaseRecord, app: AppSettings) -> Date? {
        guard purchase.kind == .nonRenewing else { return nil }
        return purchase.expiresDate
            ?? app.nonRenewingDurations[purchase.productID.rawValue]?.added(to: purchase.purchaseDate)
    }

    /// Entitlements from the app's product map: an active or grace-period subscription (until its renewal date,
    /// or the grace period's end), a one-time purchase not refunded (a non-renewing subscription until its
    /// ``entitlementEnd(of:app:)``), or a developer's grant.
    static func view(
        _ subscriber: Subscriber, subscriptions: [SubscriptionRecord], purchases: [PurchaseRecord],
        balances: [String: Int], grants: [Grant], app: AppSettings, now: Date
    ) -> SubscriberView {
        var entitlements: [String: SubscriberView.Entitlement] = [:]
        for (name, products) in app.entitlements {
            var candidates: [SubscriberView.Entitlement] = []
            for subscription in subscriptions where products.contains(subscription.productID.rawValue) {
                let graceActive =
                    subscription.status == 4 && (subscription.gracePeriodExpiresDate ?? .distantPast) > now
                let periodActive =
                    subscription.status == 1 && subscription.revocationDate == nil
                    && (subscription.expiresDate ?? .distantFuture) > now
                candidates.append(
                    SubscriberView.Entitlement(
                        active: periodActive || graceActive, productID: subscription.productID.rawValue,
                        expiresDate: subscription.expiresDate,
                        willRenew: subscription.autoRenewStatus && [1, 3, 4].contains(subscription.status),
                        periodType: PurchaseEngine.periodType(subscription.offerType, subscription.offerDiscountType),
                        inGracePeriod: subscription.status == 4, inBillingRetry: subscription.status == 3,
                        source: "app_store"))
            }
            for purchase in purchases
            where products.contains(purchase.productID.rawValue) && purchase.kind != .autoRenewable
                && purchase.kind != .consumable
            {
                let end = Self.entitlementEnd(of: purchase, app: app)
                candidates.append(
                    SubscriberView.Entitlement(
                        active: purchase.revocationDate == nil && (end ?? .distantFuture) > now,
                        productID: purchase.productID.rawValue, expiresDate: end ?? purchase.expiresDate,
                        willRenew: false, periodType: "normal", inGracePeriod: false, inBillingRetry: false,
                        source: "app_store"))
            }
            for grant in grants where grant.entitlement == name {
                candidates.append(
                    SubscriberView.Entitlement(
                        active: grant.revokedAt == nil && (grant.expiresDate ?? .distantFuture) > now, productID: nil,
                        expiresDate: grant.expiresDate, willRenew: false, periodType: "promotional",
                        inGracePeriod: false, inBillingRetry: false, source: "promotional"))
            }
            // The best: active first, then the one that lasts longest (nil: for good).
            if let best = candidates.max(by: { a, b in
                (a.active ? 1 : 0, a.expiresDate ?? .distantFuture) < (
                    b.active ? 1 : 0, b.expiresDate ?? .distantFuture
                )
            }) {
                entitlements[name] = best
            }
        }
        return SubscriberView(
            appUserID: subscriber.appUserID, aliases: subscriber.aliases, bundleID: subscriber.bundleID,
            entitlements: entitlements,
            subscriptions: subscriptions, purchases: purchases, balances: balances, flags: subscriber.flags)
    }

    /// The user an id stands for: itself, or the user it is an alias of.
    func user(bundleID: String, _ id: String) async throws -> String {
        try await storage.read { try $0.user(bundle: bundleID, alias: id) } ?? id
    }

    /// The user's events, oldest first, after `position`.
    public func events(bundleID: String, appUserID requested: String, after position: Int64?, limit: Int) async throws
        -> [(position: Int64, event: ServerEvent)]
    {
        _ = try app(bundleID)
        let appUserID = try await user(bundleID: bundleID, requested)
        return try await storage.read {
            try $0.events(bundle: bundleID, owner: appUserID, after: position, limit: limit)
        }
    }

    /// Makes `alias` another id of `appUserID` (an anonymous id the app used before the user signed in):
    /// the alias's purchases, subscriptions, grants and tokens move to the user, and requests naming the
    /// alias answer for the user from now on.
    public func alias(bundleID: String, appUserID requested: String, alias: String) async throws -> SubscriberView {
        _ = try app(bundleID)
        try Self.checkUserID(requested)
        try Self.checkUserID(alias)
        let current = now()
        _ = try await write(input: nil) { store in
            // The alias's subscriptions first, as every write takes a subscription's lock before a user's (a
            // post of one of them holds it and waits for the alias's user lock); read again under the user
            // locks below, where one claimed in between is locked too.
            try self.lockSubscriptions(of: try Self.originals(ownedBy: alias, bundleID: bundleID, in: store), in: store)
            // Both ids, then the user the requested one names (the order it always took): two requests
            // making one alias cannot both find it free.
            try store.lock(user: requested, bundle: bundleID)
            try store.lock(user: alias, bundle: bundleID)
            let user = try self.lockedUser(requested, bundleID: bundleID, in: store)
            let existing = try store.user(bundle: bundleID, alias: alias)
            guard alias != user, existing != user else { return [] }
            guard existing == nil else {
                throw PurchaseServerError.invalid("\(RequestBody.printable(alias)) is already an alias of another user")
            }
            // The alias's subscriptions are locked first, in the order a group of notifications takes them
            // (PostgresServerStorage), before either user's row changes: a group holding one changes its
            // owner's row last.
            try self.lockSubscriptions(of: try Self.originals(ownedBy: alias, bundleID: bundleID, in: store), in: store)
            try self.changed(bundleID, user, in: store)
            try self.changed(bundleID, alias, in: store)
            var main =
                try store.subscriber(bundle: bundleID, appUserID: user)
                ?? Subscriber(bundleID: bundleID, appUserID: user, firstSeen: current)
            if let merged = try store.subscriber(bundle: bundleID, appUserID: alias) {
                // Each purchase is read again under its subscription's lock before it moves.
                for listed in try store.purchases(bundle: bundleID, owner: alias) {
                    try store.lock(original: listed.originalTransactionID)
                    guard var purchase = try store.purchase(listed.transactionID), purchase.owner == alias else {
                        continue
                    }
                    purchase.owner = user
                    try store.save(purchase)
                }
                for listed in try store.subscriptions(bundle: bundleID, owner: alias) {
                    try store.lock(original: listed.originalTransactionID)
                    guard var subscription = try store.subscription(listed.originalTransactionID),
                        subscription.owner == alias
                    else { continue }
                    subscription.owner = user
                    try store.save(subscription)
                }
                for grant in try store.grants(bundle: bundleID, owner: alias) {
                    try store.save(grant, bundle: bundleID, owner: user)
                }
                for token in merged.appAccountTokens where !main.appAccountTokens.contains(token) {
                    main.appAccountTokens.append(token)
                }
                for flag in merged.flags where !main.flags.contains(flag) { main.flags.append(flag) }
                for earlier in merged.aliases where earlier != user {
                    try store.saveAlias(bundle: bundleID, alias: earlier, user: user)
                    if !main.aliases.contains(earlier) { main.aliases.append(earlier) }
                }
                main.firstSeen = min(main.firstSeen, merged.firstSeen)
            }
            if !main.aliases.contains(alias) { main.aliases.append(alias) }
            try store.saveAlias(bundle: bundleID, alias: alias, user: user)
            try store.save(main)
            return []
        }
        return try await subscriber(bundleID: bundleID, appUserID: requested)
    }

    /// Grants an entitlement until `expiresDate` (nil: for good) — PROMOTIONAL, as hosted backends call it.
    public func grant(bundleID: String, appUserID requested: String, entitlement: String, expiresDate: Date?)
        async throws -> SubscriberView
    {
        let app = try app(bundleID)
        try Self.checkUserID(requested)
        guard app.settings.entitlements[entitlement] != nil else {
            throw PurchaseServerError.notFound(
                "no entitlement \(RequestBody.printable(entitlement)) is configured for \(bundleID)")
        }
        let current = now()
        guard (expiresDate ?? .distantFuture) > current else {
            throw PurchaseServerError.invalid("the grant would have expired already")
        }
        _ = try await write(input: nil) { store in
            let appUserID = try self.lockedUser(requested, bundleID: bundleID, in: store)
            try self.changed(bundleID, appUserID, in: store)
            if try store.subscriber(bundle: bundleID, appUserID: appUserID) == nil {
                try store.save(Subscriber(bundleID: bundleID, appUserID: appUserID, firstSeen: current))
            }
            try store.save(
                Grant(entitlement: entitlement, grantedAt: current, expiresDate: expiresDate, revokedAt: nil),
                bundle: bundleID, owner: appUserID)
            return []
        }
        return try await subscriber(bundleID: bundleID, appUserID: requested)
    }

    /// Ends a grant now.
    public func revokeGrant(bundleID: String, appUserID requested: String, entitlement: String) async throws
        -> SubscriberView
    {
        _ = try app(bundleID)
        let current = now()
        _ = try await write(input: nil) { store in
            let appUserID = try self.lockedUser(requested, bundleID: bundleID, in: store)
            try self.changed(bundleID, appUserID, in: store)
            guard
                var grant = try store.grants(bundle: bundleID, owner: appUserID).first(where: {
                    $0.entitlement == entitlement && $0.revokedAt == nil
                })
            else {
                throw PurchaseServerError.notFound(
                    "\(RequestBody.printable(appUserID)) has no grant of \(RequestBody.printable(entitlement))")
            }
            grant.revokedAt = current
            try store.save(grant, bundle: bundleID, owner: appUserID)
            return []
        }
        return try await subscriber(bundleID: bundleID, appUserID: requested)
    }

    /// What the users kept in memory have done so far, as `/metrics` gives it.
    public struct SubscriberCacheCounts: Sendable, Hashable {
        /// Users kept now, and at most (the configuration's ``ServerConfiguration/cachedUsers``).
        public var users: Int
        public var capacity: Int
        /// Reads of a user's records answered from memory, and reads that asked the storage.
        public var hits: Int
        public var misses: Int
    }

    /// For benchmarks and reports.
    public var subscriberCacheCounts: SubscriberCacheCounts { cache.counts }

    /// Counters the storage and the change follower keep, for `/metrics`: the write transactions and the
    /// writes they held (their ratio is the group commits' mean size), and the follower's round trips.
    func totals() -> [(name: String, help: String, value: Double)] {
        var totals: [(name: String, help: String, value: Double)] = []
        if let counts = storage.writeCounts {
            totals.append(
                (
                    "storekeeper_storage_write_transactions_total",
                    "Write transactions run on the storage (a group commit is one).", Double(counts.transactions)
                ))
            totals.append(
                ("storekeeper_storage_writes_total", "Writes those transactions held.", Double(counts.writes)))
        }
        let cached = cache.counts
        totals.append(
            (
                "storekeeper_subscriber_cache_hits_total",
                "Reads of a user's records answered from the users kept in memory.", Double(cached.hits)
            ))
        totals.append(
            (
                "storekeeper_subscriber_cache_misses_total",
                "Reads of a user that asked the storage (not kept, or changed since).", Double(cached.misses)
            ))
        if let follower {
            totals.append(
                (
                    "storekeeper_cache_askings_total",
                    "Round trips asking the shared storage which users changed (lease renewals included).",
                    Double(follower.askings)
                ))
        }
        return totals
    }

    /// Pending deliveries and stored inputs, for `/metrics`: counted at most once every five seconds (a count
    /// reads a whole table, and `/metrics` is open to whoever reaches it).
    func gauges() async -> [(name: String, help: String, value: Double)] {
        // Kept in memory: read at every asking, not counted from the storage.
        let live: [(name: String, help: String, value: Double)] = [
            (
                "storekeeper_subscriber_cache_users",
                "Users kept in memory (at most the configuration's cachedUsers).", Double(cache.counts.users)
            )
        ]
        let now = ContinuousClock.now
        if let counted = gaugesCounted.withLock({ $0 }), now - counted.at < .seconds(5) { return counted.values + live }
        let counts = try? await storage.read { store in (try store.pendingDeliveryCount(), try store.inputCount()) }
        let values: [(name: String, help: String, value: Double)] = [
            ("storekeeper_webhook_outbox_pending", "Webhook deliveries waiting to be sent.", Double(counts?.0 ?? 0)),
            (
                "storekeeper_inputs_stored", "Inputs stored raw (notifications, transactions, receipts).",
                Double(counts?.1 ?? 0)
            ),
        ]
        if counts != nil { gaugesCounted.withLock { $0 = (now, values) } }
        return values + live
    }

    /// The originals of the purchases and subscriptions `owner` holds.
    static func originals(ownedBy owner: String, bundleID: String, in store: any ServerStore) throws -> [TransactionID]
    {
        try store.purchases(bundle: bundleID, owner: owner).map(\.originalTransactionID)
            + store.subscriptions(bundle: bundleID, owner: owner).map(\.originalTransactionID)
    }
}
