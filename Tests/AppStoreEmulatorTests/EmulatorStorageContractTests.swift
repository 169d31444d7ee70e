import AppStoreEmulator
import Foundation
import StoreModel
import StorekeeperTestSupport
import Testing

/// One contract for every ``EmulatorStorage`` backend.
@Suite("Emulator storage contract")
struct EmulatorStorageContractTests {
    enum Backend: String, CaseIterable, CustomStringConvertible {
        case memory, sqlite
        var description: String { rawValue }

        func make() async throws -> any EmulatorStorage {
            switch self {
            case .memory: InMemoryEmulatorStorage()
            case .sqlite:
                try await SQLiteEmulatorStorage(
                    path: try ExternalTool.temporaryDirectory().appendingPathComponent("store.sqlite").path)
            }
        }
    }

    static let start = Date(timeIntervalSince1970: 1_704_067_200)
    static let account = Account(id: "A1", environment: .sandbox, storefront: "USA")

    static func transaction(
        _ id: String, account: AccountID = "A1", at offset: TimeInterval, kind: ProductKind = .consumable
    )
        -> StoredTransaction
    {
        StoredTransaction(
            transaction: Transaction(
                id: TransactionID(id), bundleID: "com.example", productID: "p", kind: kind,
                purchaseDate: start.addingTimeInterval(offset),
                expiresDate: kind == .autoRenewable ? start.addingTimeInterval(offset + 300) : nil,
                webOrderLineItemID: kind == .autoRenewable ? 7 : nil,
                offer: Offer(type: .introductory, discountType: .freeTrial, period: "P1W"),
                price: Money(milliunits: 990, currency: "USD"), appAccountToken: "7e3b1c1a-0000-4000-8000-000000000001"),
            accountID: account, applicationUsername: "user")
    }

    @Test(
        "App transactions: one per account and app, made once, found by id, gone with a failed write",
        arguments: Backend.allCases)
    func appTransactions(backend: Backend) async throws {
        let storage = try await backend.make()
        let (first, again, other, otherApp) = try await storage.write { store in
            try store.insert(Self.account)
            try store.insert(Account(id: "A2", environment: .sandbox, storefront: "USA"))
            #expect(try store.appTransactionID(account: "A1", bundle: "com.example") == nil)
            return (
                try store.makeAppTransaction(account: "A1", bundle: "com.example"),
                try store.makeAppTransaction(account: "A1", bundle: "com.example"),
                try store.makeAppTransaction(account: "A2", bundle: "com.example"),
                try store.makeAppTransaction(account: "A1", bundle: "com.example.other")
            )
        }
        #expect(first == again, "made once")
        #expect(Set([first, other, otherApp]).count == 3)
        #expect(first.rawValue.count == 16 && first.rawValue.hasPrefix("6"))
        try await storage.read { store in
            #expect(try store.appTransactionID(account: "A1", bundle: "com.example") == first)
            let owner = try #require(try store.appTransaction(otherApp))
            #expect(owner.account == "A1" && owner.bundle == "com.example.other")
            #expect(try store.appTransaction("6999999999999999") == nil)
            #expect(try store.appTransaction("2000000000000001") == nil, "a purchase's id is not one")
        }
        struct Abort: Error {}
        await #expect(throws: Abort.self) {
            try await storage.write { store in
                _ = try store.makeAppTransaction(account: "A2", bundle: "com.example.other")
                throw Abort()
            }
        }
        let rolledBack = try await storage.read { try $0.appTransactionID(account: "A2", bundle: "com.example.other") }
        #expect(rolledBack == nil)
        // The id travels with the purchases made since.
        var made = Self.transaction("11", at: 0)
        made.transaction.appTransactionID = first
        let stored = made
        try await storage.write { try $0.insert(stored) }
        #expect(try await storage.read { try $0.transaction("11") }?.transaction.appTransactionID == first)
    }

    @Test(
        "Retention Messaging: items per kind, app and environment, replaced and deleted; requests per subscription",
        arguments: Backend.allCases)
    func retention(backend: Backend) async throws {
        let storage = try await backend.make()
        @Sendable func item(
            _ id: String, _ kind: RetentionItem.Kind = .message, environment: Environment = .sandbox, at: Double
        )
            -> RetentionItem
        {
            RetentionItem(
                kind: kind, bundleID: "com.example", environment: environment, id: id, state: "PENDING",
                document: #"{"header":"\#(id)"}"#, created: Date(timeIntervalSince1970: at))
        }
        try await storage.write { store in
            try store.save(item("b", at: 2))
            try store.save(item("a", at: 1))
            try store.save(item("c", at: 2))
            try store.save(item("a", .image, at: 1))
            try store.save(item("a", environment: .production, at: 1))
            var approved = item("b", at: 2)
            approved.state = "APPROVED"
            try store.save(approved)
        }
        try await storage.read { store in
            let messages = try store.retentionItems(.message, bundle: "com.example", environment: .sandbox, limit: 10)
            #expect(messages.map(\.id) == ["a", "b", "c"], "oldest first, ties by id")
            #expect(messages[1].state == "APPROVED" && messages[1].document == #"{"header":"b"}"#)
            #expect(
                try store.retentionItems(.message, bundle: "com.example", environment: .sandbox, limit: 2).count == 2)
            #expect(
                try store.retentionItems(.image, bundle: "com.example", environment: .sandbox, limit: 10).count == 1)
            #expect(
                try store.retentionItem(.message, bundle: "com.example", environment: .production, id: "a")?.created
                    == Date(timeIntervalSince1970: 1))
            #expect(try store.retentionItem(.message, bundle: "com.other", environment: .sandbox, id: "a") == nil)
        }
        let deleted = try await storage.write { store in
            (
                try store.deleteRetentionItem(.message, bundle: "com.example", environment: .sandbox, id: "a"),
                try store.deleteRetentionItem(.message, bundle: "com.example", environment: .sandbox, id: "a")
            )
        }
        #expect(deleted == (true, false))
        @Sendable func request(_ id: String, _ original: TransactionID, at: Double) -> RetentionRequestRecord {
            RetentionRequestRecord(
                requestIdentifier: id, originalTransactionID: original, bundleID: "com.example", environment: .sandbox,
                date: Date(timeIntervalSince1970: at), document: #"{"outcome":"message"}"#)
        }
        try await storage.write { store in
            for index in 0..<5 { try store.insert(request("r\(index)", "100", at: Double(index))) }
            try store.insert(request("other", "200", at: 9))
        }
        await #expect(throws: (any Error).self, "a request identifier is recorded once") {
            try await storage.write { try $0.insert(request("r1", "100", at: 10)) }
        }
        try await storage.read { store in
            let latest = try store.retentionRequests(original: "100", limit: 3)
            #expect(latest.map(\.requestIdentifier) == ["r2", "r3", "r4"], "the latest, oldest first")
            #expect(
                latest.last?.date == Date(timeIntervalSince1970: 4)
                    && latest.last?.document == #"{"outcome":"message"}"#)
            #expect(try store.retentionRequests(original: "200", limit: 10).count == 1)
        }
    }

    static let subscription: StoredSubscription = {
        var state = SubscriptionState(
            originalTransactionID: "10", productID: "p", autoRenewProductID: "q", status: .billingRetry,
            autoRenew: false, expiresDate: start, expirationIntent: .billingError, gracePeriodExpiresDate: start,
            billingRetryEndsDate: start, renewalCount: 3, priceIncreaseStatus: .pending)
        state.offer = Offer(type: .offerCode, identifier: "SPRING", discountType: .payAsYouGo, period: "P1M")
        state.offerPeriodsLeft = 2
        state.billingPlan = .monthly
        state.commitment = SubscriptionCommitment(
            billingPeriodNumber: 3, totalBillingPeriods: 12, expiresDate: start.addingTimeInterval(0.25),
            autoRenew: false, renewalPlan: .billedUpfront)
        state.renewalBillingPlan = .monthly
        state.runStart = start.addingTimeInterval(0.5)
        return StoredSubscription(state: state, accountID: "A1", bundleID: "com.example", latestTransactionID: "10")
    }()

    @Test("Rows round-trip every field; lookups find them; updates replace them", arguments: Backend.allCases)
    func roundTrip(backend: Backend) async throws {
        let storage = try await backend.make()
        let stored = Self.transaction("10", at: 0, kind: .autoRenewable)
        try await storage.write { store in
            try store.insert(Self.account)
            try store.insert(Device(id: "D1", accountID: "A1"))
            try store.save(
                Install(
                    deviceID: "D1", bundleID: "com.example", version: "2", originalVersion: "1",
                    originalPurchaseDate: Self.start, vppAssigned: true, vppRevokedAt: Self.start))
            try store.insert(stored)
            try store.save(Self.subscription)
            try store.insert(
                PendingPayment(
                    id: "11", accountID: "A1", bundleID: "com.example", productID: "p", quantity: 2, date: Self.start,
                    state: .failed, reason: .interrupted, appAccountToken: "t", applicationUsername: "u",
                    resolvable: true))
            try store.setSetting("k", "v")
        }
        try await storage.read { (store: any EmulatorStore) throws in
            #expect(try store.account("A1") == Self.account)
            #expect(try store.device("D1") == Device(id: "D1", accountID: "A1"))
            #expect(try store.install(device: "D1", bundle: "com.example")?.vppRevokedAt == Self.start)
            #expect(try store.transaction("10").map(Self.withoutRevision) == stored)
            #expect(try store.purchaseDate(of: "10") == stored.transaction.purchaseDate)
            #expect(try store.purchaseDate(of: "12") == nil)
            #expect(try store.subscription("10") == Self.subscription)
            #expect(try store.subscriptions(account: "A1", bundle: "com.example").count == 1)
            #expect(try store.payment("11")?.reason == .interrupted)
            #expect(try store.resolvablePayments(account: "A1").map(\.id) == ["11"])
            #expect(try store.setting("k") == "v")
            #expect(try store.transactionCount() == 1)
            #expect(try store.accounts(after: nil, limit: 10) == [Self.account])
            #expect(try store.accounts(after: "A1", limit: 10).isEmpty)
            #expect(try store.devices(account: "A1") == [Device(id: "D1", accountID: "A1")])
            #expect(try store.devices(account: "A2").isEmpty)
        }
        var changed = stored
        changed.finished = true
        changed.transaction.revocationDate = Self.start
        changed.transaction.revocationReason = .appIssue
        changed.transaction.billingPlan = .monthly
        changed.transaction.commitment = TransactionCommitment(
            billingPeriodNumber: 2, totalBillingPeriods: 12, expiresDate: Self.start.addingTimeInterval(1.5),
            price: Money(milliunits: 29_880, currency: "EUR"))
        let finished = changed
        try await storage.write { try $0.update(finished) }
        try await storage.read { (store: any EmulatorStore) throws in
            #expect(try store.transaction("10").map(Self.withoutRevision) == finished)
            #expect(try store.unfinishedTransactions(account: "A1", bundle: "com.example").isEmpty)
        }
    }

    /// A stored transaction without the revision the storage gave it.
    static func withoutRevision(_ stored: StoredTransaction) -> StoredTransaction {
        var copy = stored
        copy.revision = 0
        return copy
    }

    @Test(
        "Revisions follow changes of the transaction itself (not finishing); orders and installs are found",
        arguments: Backend.allCases)
    func revisionsOrdersInstalls(backend: Backend) async throws {
        let storage = try await backend.make()
        try await storage.write { store in
            try store.insert(Self.account)
            try store.insert(Account(id: "A2", environment: .sandbox, storefront: "USA"))
            try store.insert(Device(id: "D1", accountID: "A1"))
            try store.insert(Device(id: "D2", accountID: "A1"))
            try store.insert(Device(id: "D3", accountID: "A2"))
            for (device, offset) in [("D2", 60.0), ("D1", 0), ("D3", 0)] {
                try store.save(
                    Install(
                        deviceID: DeviceID(device), bundleID: "com.example", version: "1", originalVersion: "1",
                        originalPurchaseDate: Self.start.addingTimeInterval(offset)))
            }
            for index in 1...5 {
                var row = Self.transaction(String(index), at: Double(index))
                row.orderID = index == 2 ? "ORDER2" : nil
                try store.insert(row)
            }
            try store.insert(Self.transaction("6", account: "A2", at: 6))
        }
        @Sendable func ids(_ rows: [StoredTransaction]) -> [String] { rows.map(\.id.rawValue) }
        let (all, newest) = try await storage.read { store in
            (
                try store.transactions(
                    account: "A1", bundle: "com.example", revisionAfter: nil, descending: false, limit: 10),
                try store.transactions(
                    account: "A1", bundle: "com.example", revisionAfter: nil, descending: true, limit: 2)
            )
        }
        #expect(ids(all) == ["1", "2", "3", "4", "5"])
        #expect(ids(newest) == ["5", "4"])
        let third = all[2].revision
        try await storage.write { store in
            var finished = try #require(try store.transaction("1"))
            finished.finished = true
            try store.update(finished)
            var refunded = try #require(try store.transaction("2"))
            refunded.transaction.revocationDate = Self.start
            try store.update(refunded)
        }
        try await storage.read { (store: any EmulatorStore) throws in
            let after = try store.transactions(
                account: "A1", bundle: "com.example", revisionAfter: third, descending: false, limit: 10)
            #expect(ids(after) == ["4", "5", "2"], "a change moves a transaction to the end; finishing does not")
            let before = try store.transactions(
                account: "A1", bundle: "com.example", revisionAfter: third, descending: true, limit: 10)
            #expect(ids(before) == ["1"])
            #expect(ids(try store.transactions(orderID: "ORDER2")) == ["2"])
            #expect(try store.transactions(orderID: "NONE").isEmpty)
            #expect(try store.installs(account: "A1", bundle: "com.example").map(\.deviceID.rawValue) == ["D1", "D2"])
            #expect(try store.installs(account: "A1", bundle: "other").isEmpty)
            // Every account's, most recently changed first, filtered and paged (the dashboard's listing).
            let everyone = try store.transactions(matching: TransactionFilter(), revisionBefore: nil, limit: 10)
            #expect(ids(everyone) == ["2", "6", "5", "4", "3", "1"])
            #expect(
                ids(try store.transactions(matching: TransactionFilter(account: "A2"), revisionBefore: nil, limit: 10))
                    == ["6"])
            #expect(
                ids(
                    try store.transactions(
                        matching: TransactionFilter(account: "A1", bundle: "com.example", product: "p"),
                        revisionBefore: everyone[1].revision, limit: 2)) == ["5", "4"])
            #expect(
                try store.transactions(matching: TransactionFilter(product: "q"), revisionBefore: nil, limit: 10)
                    .isEmpty)
            #expect(try store.devices(account: "A1").map(\.id.rawValue) == ["D1", "D2"])
            #expect(try store.accounts(after: nil, limit: 1).map(\.id.rawValue) == ["A1"])
            #expect(try store.accounts(after: "A1", limit: 5).map(\.id.rawValue) == ["A2"])
        }
    }

    @Test("A write that throws leaves nothing behind", arguments: Backend.allCases)
    func rollback(backend: Backend) async throws {
        let storage = try await backend.make()
        struct Boom: Error {}
        await #expect(throws: Boom.self) {
            try await storage.write { store in
                try store.insert(Self.account)
                try store.insert(Self.transaction("1", at: 0))
                try store.setSetting("counter", "2")
                try store.schedule(DueEvent(kind: .renewal, key: "1", due: Self.start))
                throw Boom()
            }
        }
        try await storage.read { (store: any EmulatorStore) throws in
            #expect(try store.account("A1") == nil)
            #expect(try store.transaction("1") == nil)
            #expect(try store.setting("counter") == nil)
            #expect(try store.nextDue() == nil)
            #expect(try store.transactions(account: "A1", bundle: "com.example").isEmpty)
        }
    }

    @Test("Duplicates, missing owners and missing rows are errors of their kind", arguments: Backend.allCases)
    func integrity(backend: Backend) async throws {
        let storage = try await backend.make()
        try await storage.write { try $0.insert(Self.account) }
        let cases: [(@Sendable (any EmulatorStore) throws -> Void, EmulatorStorageError.Kind)] = [
            ({ store in try store.insert(Self.account) }, .duplicate),
            ({ store in try store.insert(Device(id: "D", accountID: "nobody")) }, .missing),
            ({ store in try store.update(Account(id: "nobody", environment: .sandbox, storefront: "USA")) }, .missing),
            ({ store in try store.update(Self.transaction("404", at: 0)) }, .missing),
            // A subscription stays with its account and app.
            (
                { store in
                    try store.insert(Account(id: "A3", environment: .sandbox, storefront: "USA"))
                    try store.save(Self.subscription)
                    var moved = Self.subscription
                    moved.accountID = "A3"
                    try store.save(moved)
                }, .invalid
            ),
            (
                { store in
                    try store.save(Self.subscription)
                    var moved = Self.subscription
                    moved.bundleID = "com.example.other"
                    try store.save(moved)
                }, .invalid
            ),
        ]
        for (body, kind) in cases {
            do {
                try await storage.write { try body($0) }
                Issue.record("expected a \(kind) error")
            } catch let error as EmulatorStorageError {
                #expect(error.kind == kind)
            }
        }
    }

    @Test(
        "An account's transactions come back by purchase date then numeric id, others' never",
        arguments: Backend.allCases)
    func ordering(backend: Backend) async throws {
        let storage = try await backend.make()
        try await storage.write { store in
            try store.insert(Self.account)
            try store.insert(Account(id: "A2", environment: .production, storefront: "GBR"))
            for (id, offset) in [("9", 5.0), ("10", 5.0), ("3", 1.0), ("100", 0.0)] {
                try store.insert(Self.transaction(id, at: offset))
            }
            try store.insert(Self.transaction("7", account: "A2", at: 0))
        }
        let ids = try await storage.read {
            try $0.transactions(account: "A1", bundle: "com.example").map(\.id.rawValue)
        }
        #expect(ids == ["100", "3", "9", "10"])
        // Their originals, each once (a renewal's is its purchase's), without the rows.
        try await storage.write { store in
            var renewal = Self.transaction("11", at: 6)
            renewal.transaction.originalID = "9"
            try store.insert(renewal)
        }
        let originals = try await storage.read { try $0.originalIDs(account: "A1", bundle: "com.example") }
        #expect(originals == ["100", "3", "9", "10"])
        #expect(try await storage.read { try $0.originalIDs(account: "A2", bundle: "com.other") }.isEmpty)
    }

    @Test("Due events: one per kind and key, earliest first, only what is due", arguments: Backend.allCases)
    func dueEvents(backend: Backend) async throws {
        let storage = try await backend.make()
        try await storage.write { store in
            try store.schedule(DueEvent(kind: .renewal, key: "b", due: Self.start.addingTimeInterval(20)))
            try store.schedule(DueEvent(kind: .renewal, key: "a", due: Self.start.addingTimeInterval(30)))
            try store.schedule(DueEvent(kind: .renewal, key: "c", due: Self.start.addingTimeInterval(10)))
            // Rescheduling replaces.
            try store.schedule(DueEvent(kind: .renewal, key: "a", due: Self.start.addingTimeInterval(5)))
            try store.cancel(kind: .renewal, key: "c")
        }
        try await storage.read { (store: any EmulatorStore) throws in
            #expect(try store.nextDue() == Self.start.addingTimeInterval(5))
            #expect(try store.due(until: Self.start.addingTimeInterval(25), limit: 10).map(\.key) == ["a", "b"])
            #expect(try store.due(until: Self.start.addingTimeInterval(25), limit: 1).map(\.key) == ["a"])
            #expect(try store.due(until: Self.start, limit: 10).isEmpty)
        }
        try await storage.write { store in
            try store.schedule(DueEvent(kind: .notificationLease, key: "n2", due: Self.start))
            try store.schedule(DueEvent(kind: .notificationLease, key: "n1", due: Self.start.addingTimeInterval(9)))
        }
        try await storage.read { (store: any EmulatorStore) throws in
            #expect(try store.events(kind: .notificationLease, limit: 10).map(\.key) == ["n1", "n2"])
            #expect(try store.events(kind: .notificationLease, limit: 1).map(\.key) == ["n1"])
            #expect(try store.events(kind: .renewal, limit: 10).map(\.key) == ["a", "b"])
        }
    }

    @Test(
        "Notifications: stored whole, updated in state and attempts, paged in creation order",
        arguments: Backend.allCases)
    func notifications(backend: Backend) async throws {
        let storage = try await backend.make()
        @Sendable func make(_ id: String, _ bundle: String, _ environment: Environment, at offset: TimeInterval)
            -> OutboundNotification
        {
            OutboundNotification(
                id: id, bundleID: BundleID(bundle), environment: environment, version: 2, url: "http://r.example/n",
                body: Array("{\"signedPayload\":\"\(id)\"}".utf8), signedPayload: id,
                notice: Notice(.didRenew, .billingRecovery, v1: "DID_RECOVER"), originalTransactionID: "7",
                created: Self.start.addingTimeInterval(offset), retryDelays: [60, 120], retryClientErrors: false,
                timeoutMilliseconds: 2_500)
        }
        try await storage.write { store in
            for (index, id) in ["z", "y", "x", "w"].enumerated() {
                try store.insert(make(id, "com.example", .sandbox, at: Double(index)))
            }
            try store.insert(make("other", "com.other", .sandbox, at: 0))
            try store.insert(make("production", "com.example", .production, at: 0))
            #expect(throws: EmulatorStorageError.self) { try store.insert(make("z", "com.example", .sandbox, at: 9)) }
        }
        try await storage.write { store in
            var stored = try #require(try store.notification("y"))
            _ = Outbox.record(.timedOut, status: nil, at: Self.start.addingTimeInterval(5), in: &stored)
            _ = Outbox.record(.success, status: 200, at: Self.start.addingTimeInterval(65), in: &stored)
            try store.update(stored)
        }
        try await storage.read { (store: any EmulatorStore) throws in
            let y = try #require(try store.notification("y"))
            #expect(
                y
                    == {
                        var expected = make("y", "com.example", .sandbox, at: 1)
                        expected.state = .delivered
                        expected.attempts = [
                            SendAttempt(date: Self.start.addingTimeInterval(5), result: .timedOut),
                            SendAttempt(date: Self.start.addingTimeInterval(65), result: .success),
                        ]
                        return expected
                    }())
            // Its delivery alone (no payload read): the same state and attempts.
            let delivery = try #require(try store.delivery("y"))
            #expect(delivery.state == y.state && delivery.attempts == y.attempts)
            #expect(try store.delivery("z")?.state == .pending)
            #expect(try store.delivery("z")?.attempts == [])
            #expect(try store.delivery("missing") == nil)
            let page = try store.notifications(
                bundle: "com.example", environment: .sandbox, from: .distantPast, to: .distantFuture, after: nil,
                limit: 3)
            #expect(page.map(\.notification.id) == ["z", "y", "x"])
            let rest = try store.notifications(
                bundle: "com.example", environment: .sandbox, from: .distantPast, to: .distantFuture,
                after: page.last?.position, limit: 3)
            #expect(rest.map(\.notification.id) == ["w"])
            let window = try store.notifications(
                bundle: "com.example", environment: .sandbox, from: Self.start.addingTimeInterval(1),
                to: Self.start.addingTimeInterval(3), after: nil, limit: 10)
            #expect(window.map(\.notification.id) == ["y", "x"])
            // One subscription's notifications, in creation order, across apps and environments.
            #expect(
                try store.notifications(original: "7", limit: 10).map(\.id) == [
                    "z", "y", "x", "w", "other", "production",
                ])
            #expect(try store.notifications(original: "7", limit: 2).map(\.id) == ["z", "y"])
            #expect(try store.notifications(original: "8", limit: 10).isEmpty)
        }
    }

    @Test(
        "Families: members in order, one family per account, a replaced member list; shares by purchase",
        arguments: Backend.allCases)
    func families(backend: Backend) async throws {
        let storage = try await backend.make()
        try await storage.write { store in
            for id in ["A1", "A2", "A3", "A4"] {
                try store.insert(Account(id: AccountID(id), environment: .sandbox, storefront: "USA"))
            }
            try store.save(Family(id: "F1", organizer: "A1", members: ["A1", "A3", "A2"]))
            #expect(throws: EmulatorStorageError.self) {
                try store.save(Family(id: "F2", organizer: "A4", members: ["A4", "A2"]))
            }
            #expect(throws: EmulatorStorageError.self) {
                try store.save(Family(id: "F3", organizer: "A9", members: ["A9"]))
            }
            try store.save(FamilyShare(sourceOriginalID: "10", memberAccountID: "A3", memberOriginalID: "11"))
            try store.save(FamilyShare(sourceOriginalID: "10", memberAccountID: "A2", memberOriginalID: "12"))
        }
        // A write that throws keeps none of its family changes.
        await #expect(throws: EmulatorStorageError.self) {
            try await storage.write { store in
                try store.save(Family(id: "F1", organizer: "A1", members: ["A1"]))
                try store.save(Family(id: "F9", organizer: "A9", members: ["A9"]))
            }
        }
        try await storage.read { (store: any EmulatorStore) throws in
            #expect(try store.family("F1") == Family(id: "F1", organizer: "A1", members: ["A1", "A3", "A2"]))
            #expect(try store.family(member: "A2")?.id == "F1")
            #expect(try store.family(member: "A4") == nil)
            #expect(try store.family("F2") == nil)
            #expect(try store.shares(source: "10").map(\.memberAccountID) == ["A2", "A3"])
        }
        try await storage.write { store in
            try store.save(Family(id: "F1", organizer: "A1", members: ["A1", "A3"]))
            try store.save(
                FamilyShare(sourceOriginalID: "10", memberAccountID: "A2", memberOriginalID: "12", revoked: true))
        }
        try await storage.read { (store: any EmulatorStore) throws in
            #expect(try store.family(member: "A2") == nil)
            #expect(try store.family(member: "A3")?.members == ["A1", "A3"])
            #expect(try store.shares(source: "10").first?.revoked == true)
            #expect(try store.shares(source: "99").isEmpty)
        }
    }

    @Test(
        "The delivery queue: a line per receiver in outbox order, each once, taken a few at a time; a rolled-back take keeps them",
        arguments: Backend.allCases)
    func deliveryQueue(backend: Backend) async throws {
        let storage = try await backend.make()
        try await storage.write { store in
            for (index, id) in ["c", "a", "d", "b", "e", "f"].enumerated() {
                try store.insert(
                    OutboundNotification(
                        id: id, bundleID: "com.example", environment: .production, version: 1,
                        url: index < 4 ? "http://r/n" : "http://q/n", body: Array(id.utf8), signedPayload: nil,
                        notice: Notice(.subscribed, .initialBuy), originalTransactionID: "7",
                        created: Self.start.addingTimeInterval(Double(index)), retryDelays: [],
                        retryClientErrors: true, timeoutMilliseconds: 1_000))
            }
            #expect(try !store.hasQueued())
            #expect(try store.queuedURLs().isEmpty)
            #expect(try store.takeQueued(url: "http://r/n", limit: 10).isEmpty)
            // Queued in another order than written: taken in the outbox's (creation) order.
            for id in ["b", "f", "c", "d", "e"] { try store.queueForDelivery(id) }
            try store.queueForDelivery("c")
            #expect(throws: EmulatorStorageError.self) { try store.queueForDelivery("missing") }
            #expect(try store.hasQueued())
            #expect(try store.hasQueued(url: "http://q/n"))
            #expect(try !store.hasQueued(url: "http://elsewhere/n"))
            #expect(try store.queuedURLs() == ["http://q/n", "http://r/n"])
            #expect(try store.queuedCount() == 5)
        }
        struct RolledBack: Error {}
        await #expect(throws: RolledBack.self) {
            try await storage.write { store in
                #expect(try store.takeQueued(url: "http://r/n", limit: 10).map(\.id) == ["c", "d", "b"])
                throw RolledBack()
            }
        }
        let taken = try await storage.write { store in
            (
                try store.takeQueued(url: "http://r/n", limit: 2), try store.hasQueued(url: "http://r/n"),
                try store.takeQueued(url: "http://r/n", limit: 2), try store.queuedURLs()
            )
        }
        #expect(taken.0.map(\.id) == ["c", "d"])
        #expect(taken.0.first?.body == Array("c".utf8), "taken whole")
        #expect(taken.1)
        #expect(taken.2.map(\.id) == ["b"])
        #expect(taken.3 == ["http://q/n"], "the other receiver's line is untouched")
        #expect(try await storage.read { try $0.hasQueued(url: "http://r/n") } == false)
        #expect(try await storage.read { try $0.queuedCount() } == 2)
        let rest = try await storage.write { store in try store.takeQueued(url: "http://q/n", limit: 10) }
        #expect(rest.map(\.id) == ["e", "f"])
        #expect(try await storage.read { try $0.hasQueued() } == false)
        #expect(try await storage.read { try $0.queuedURLs() } == [])
    }

    @Test(
        "A prune deletes done notifications created before its date, oldest first, at most its limit; pending ones stay",
        arguments: Backend.allCases)
    func prune(backend: Backend) async throws {
        let storage = try await backend.make()
        @Sendable func notification(_ id: String, at offset: TimeInterval, _ state: OutboxState) -> OutboundNotification
        {
            OutboundNotification(
                id: id, bundleID: "com.example", environment: .production, version: 1, url: "http://r/n",
                body: Array(id.utf8), signedPayload: nil, notice: Notice(.subscribed, .initialBuy),
                originalTransactionID: "7", created: Self.start.addingTimeInterval(offset), state: state,
                retryDelays: [], retryClientErrors: true, timeoutMilliseconds: 1_000)
        }
        // Written out of creation order; "p" is old but pending, "f" failed for good.
        try await storage.write { store in
            for (id, offset, state) in [
                ("c", 3.0, OutboxState.delivered), ("a", 1, .delivered), ("p", 0, .pending), ("f", 2, .failed),
                ("d", 4, .delivered), ("new", 10, .delivered),
            ] {
                try store.insert(notification(id, at: offset, state))
            }
        }
        func ids() async throws -> [String] {
            try await storage.read { store in
                try store.notifications(
                    bundle: "com.example", environment: .production, from: .distantPast, to: .distantFuture,
                    after: nil, limit: 100
                ).map(\.notification.id)
            }
        }
        struct RolledBack: Error {}
        await #expect(throws: RolledBack.self) {
            try await storage.write { store in
                #expect(try store.pruneNotifications(createdBefore: Self.start.addingTimeInterval(5), limit: 10) == 4)
                throw RolledBack()
            }
        }
        #expect(try await ids() == ["c", "a", "p", "f", "d", "new"], "a rolled-back prune keeps them")
        let before = Self.start.addingTimeInterval(5)
        #expect(try await storage.write { try $0.pruneNotifications(createdBefore: before, limit: 2) } == 2)
        #expect(try await ids() == ["c", "p", "d", "new"], "the oldest two done ones")
        #expect(try await storage.read { try $0.notification("a") } == nil)
        #expect(try await storage.write { try $0.pruneNotifications(createdBefore: before, limit: 10) } == 2)
        #expect(try await ids() == ["p", "new"])
        #expect(try await storage.write { try $0.pruneNotifications(createdBefore: before, limit: 10) } == 0)
        // The pending one goes once it is done; positions keep growing after a prune (the history's cursor).
        try await storage.write { store in
            var done = try #require(try store.notification("p"))
            done.state = .delivered
            try store.update(done)
            try store.insert(notification("next", at: 11, .pending))
        }
        let positions = try await storage.read { store in
            try store.notifications(
                bundle: "com.example", environment: .production, from: .distantPast, to: .distantFuture,
                after: nil, limit: 100)
        }
        #expect(positions.map(\.notification.id) == ["p", "new", "next"])
        #expect(positions.map(\.position) == positions.map(\.position).sorted())
        #expect(positions.last!.position > 6, "not a position given before")
        #expect(try await storage.write { try $0.pruneNotifications(createdBefore: before, limit: 10) } == 1)
        #expect(try await ids() == ["new", "next"])
        #expect(try await storage.read { try $0.notification("next")?.body } == Array("next".utf8))
    }

    @Test("Concurrent writers are applied one at a time: no update is lost", arguments: Backend.allCases)
    func serialised(backend: Backend) async throws {
        let storage = try await backend.make()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    try await storage.write { store in
                        let value = Int(try store.setting("n") ?? "0")!
                        try store.setSetting("n", String(value + 1))
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await storage.read { try $0.setting("n") } == "100")
    }

    @Test(
        "SQLite: commitment period counts read back are bounded, whatever a damaged row holds",
        .enabled(if: ExternalTool.find("sqlite3") != nil, "needs the sqlite3 command"))
    func damagedCommitmentCounts() async throws {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("store.sqlite").path
        let storage = try await SQLiteEmulatorStorage(path: path)
        let stored = {
            var stored = Self.transaction("10", at: 0, kind: .autoRenewable)
            stored.transaction.commitment = TransactionCommitment(
                billingPeriodNumber: 3, totalBillingPeriods: 12, expiresDate: Self.start, price: nil)
            return stored
        }()
        try await storage.write { store in
            try store.insert(Self.account)
            try store.insert(stored)
            try store.save(Self.subscription)
        }
        let sqlite = try #require(ExternalTool.find("sqlite3"))
        let damaged = #"{"number":9223372036854775807,"total":-9223372036854775808,"expires":0}"#
        let edit = try ExternalTool.run(
            sqlite,
            [
                path,
                "UPDATE transactions SET commitment = '\(damaged)'; UPDATE subscriptions SET commitment = '\(damaged)';",
            ])
        #expect(edit.status == 0, "\(edit.stderrText)")
        let reopened = try await SQLiteEmulatorStorage(path: path)
        try await reopened.read { (store: any EmulatorStore) throws in
            let bound = SubscriptionCommitment.periodsBound
            let transaction = try #require(try store.transaction("10")?.transaction.commitment)
            #expect(transaction.billingPeriodNumber == bound && transaction.totalBillingPeriods == 0)
            let subscription = try #require(try store.subscription("10")?.state.commitment)
            #expect(subscription.billingPeriodNumber == bound && subscription.totalBillingPeriods == 0)
        }
    }

    @Test(
        "SQLite: notifications stored with their payload in the row (before migration 007) keep it after opening",
        .enabled(if: ExternalTool.find("sqlite3") != nil, "needs the sqlite3 command"))
    func notificationPayloadMigration() async throws {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("store.sqlite").path
        let v2 = OutboundNotification(
            id: "v2", bundleID: "com.example", environment: .sandbox, version: 2, url: "http://r.example/n",
            body: Array("{\"signedPayload\":\"a.b.c\"}".utf8), signedPayload: "a.b.c",
            notice: Notice(.didRenew, nil, v1: "DID_RENEW"), originalTransactionID: "7", created: Self.start,
            retryDelays: [60], retryClientErrors: true, timeoutMilliseconds: 5_000)
        let v1 = {
            var v1 = v2
            v1.id = "v1"
            v1.version = 1
            v1.body = Array("{\"notification_type\":\"DID_RENEW\",\"password\":\"s\"}".utf8)
            v1.signedPayload = nil
            return v1
        }()
        let storage = try await SQLiteEmulatorStorage(path: path)
        try await storage.write { store in
            try store.insert(v2)
            try store.insert(v1)
        }
        // As the build before 007 kept them: the payload in the row, no payload table, migrations from 007 on
        // not run.
        let sqlite = try #require(ExternalTool.find("sqlite3"))
        let undone = try ExternalTool.run(
            sqlite,
            [
                path,
                """
                UPDATE notifications SET body = CAST('{"signedPayload":"a.b.c"}' AS BLOB), signed_payload = 'a.b.c'
                    WHERE id = 'v2';
                UPDATE notifications SET body = CAST('{"notification_type":"DID_RENEW","password":"s"}' AS BLOB)
                    WHERE id = 'v1';
                DROP TABLE notification_payloads;
                DROP TABLE notification_queue;
                DROP INDEX notifications_done_by_created;
                CREATE INDEX transactions_by_owner ON transactions (account_id, bundle_id, purchase_date);
                DROP INDEX transactions_by_owner_revision;
                CREATE INDEX transactions_by_owner_revision ON transactions (account_id, bundle_id, revision);
                CREATE INDEX transactions_unfinished ON transactions (account_id, bundle_id) WHERE finished = 0;
                DROP TABLE app_transactions; ALTER TABLE transactions DROP COLUMN app_transaction_id;
                DROP TABLE retention_items; DROP TABLE retention_requests;
                ALTER TABLE transactions DROP COLUMN billing_plan; ALTER TABLE transactions DROP COLUMN commitment;
                ALTER TABLE subscriptions DROP COLUMN billing_plan; ALTER TABLE subscriptions DROP COLUMN commitment;
                ALTER TABLE subscriptions DROP COLUMN renewal_billing_plan;
                ALTER TABLE subscriptions DROP COLUMN run_start;
                ALTER TABLE transactions DROP COLUMN revocation_percentage;
                ALTER TABLE mass_extensions DROP COLUMN bundle_id; ALTER TABLE mass_extensions DROP COLUMN extend_by_days;
                ALTER TABLE mass_extensions DROP COLUMN extend_reason_code;
                ALTER TABLE mass_extensions DROP COLUMN resume_after;
                DELETE FROM schema_migrations WHERE id >= '007';
                """,
            ])
        #expect(undone.status == 0, "\(undone.stderrText)")
        let reopened = try await SQLiteEmulatorStorage(path: path)
        // Migration 011 dropped the index again.
        let indexes = try ExternalTool.run(
            sqlite, [path, "SELECT name FROM sqlite_master WHERE name = 'transactions_by_owner'"])
        #expect(indexes.status == 0 && indexes.stdoutText.isEmpty, "\(indexes.stdoutText)")
        // Migration 012 replaced the partial index of unfinished transactions by `finished` in the owner index.
        let owner = try ExternalTool.run(
            sqlite,
            [
                path,
                """
                SELECT m.name || ':' || group_concat(c.name, ',') FROM sqlite_master m, pragma_index_info(m.name) c
                WHERE m.name IN ('transactions_unfinished', 'transactions_by_owner_revision') GROUP BY m.name
                """,
            ])
        #expect(
            owner.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
                == "transactions_by_owner_revision:account_id,bundle_id,revision,finished", "\(owner.stdoutText)")
        try await reopened.read { (store: any EmulatorStore) throws in
            #expect(try store.notification("v2") == v2)
            #expect(try store.notification("v1") == v1)
        }
    }

    @Test(
        "Records: extensions, mass extensions, consumption, refund requests, minted keys and nonces round-trip",
        arguments: Backend.allCases)
    func records(backend: Backend) async throws {
        let storage = try await backend.make()
        let first = ExtensionRecord(
            originalTransactionID: "10", requestIdentifier: "r1", date: Self.start,
            effectiveDate: Self.start.addingTimeInterval(86_400), webOrderLineItemID: "7")
        var secondRecord = first
        secondRecord.requestIdentifier = "r2"
        secondRecord.date = Self.start.addingTimeInterval(60)
        let mass = MassExtension(
            requestIdentifier: "m1", productID: "p", environment: .production, storefronts: ["USA", "GBR"],
            resume: MassExtension.Resume(bundleID: "com.example", days: 3, reason: 1, after: "12"))
        let pending = MassExtension(
            requestIdentifier: "m2", productID: "p", environment: .sandbox, storefronts: nil, succeeded: 2,
            resume: MassExtension.Resume(bundleID: "com.example", days: 90, reason: 0))
        var doneProgress = mass
        doneProgress.complete = true
        doneProgress.completeDate = Self.start
        doneProgress.succeeded = 3
        doneProgress.failed = 1
        let key = MintedAPIKey(keyID: "K1", issuerID: "i", bundleID: "com.example", publicKey: [1, 2, 3])
        let (second, done) = (secondRecord, doneProgress)
        try await storage.write { store in
            try store.insert(first)
            try store.insert(second)
            try store.save(mass)
            try store.save(done)
            try store.save(pending)
            try store.save(ConsumptionRecord(transactionID: "1", version: 1, body: "{}"))
            try store.save(ConsumptionRecord(transactionID: "1", version: 2, body: #"{"deliveryStatus":"DELIVERED"}"#))
            try store.setRefundRequest("1", reason: "UNINTENDED_PURCHASE")
            try store.setRefundRequest("2", reason: "OTHER")
            try store.setRefundRequest("2", reason: nil)
            try store.insert(key)
            #expect(try store.useOfferNonce("n1"))
            #expect(try !store.useOfferNonce("n1"), "a nonce is used once")
        }
        await #expect(throws: EmulatorStorageError.self) { try await storage.write { try $0.insert(first) } }
        await #expect(throws: EmulatorStorageError.self) { try await storage.write { try $0.insert(key) } }
        try await storage.read { (store: any EmulatorStore) throws in
            #expect(try store.renewalExtensions(original: "10") == [first, second])
            #expect(try store.renewalExtensions(original: "11").isEmpty)
            #expect(try store.massExtension(productID: "p", requestIdentifier: "m1") == done)
            #expect(try store.massExtension(productID: "p", requestIdentifier: "m2") == pending)
            #expect(try store.incompleteMassExtensions(limit: 10) == [pending], "the done one is not")
            #expect(try store.incompleteMassExtensions(limit: 0).isEmpty)
            #expect(try store.massExtension(productID: "q", requestIdentifier: "m1") == nil)
            #expect(
                try store.consumption("1")
                    == ConsumptionRecord(transactionID: "1", version: 2, body: #"{"deliveryStatus":"DELIVERED"}"#))
            #expect(try store.refundRequest("1") == "UNINTENDED_PURCHASE")
            #expect(try store.refundRequest("2") == nil)
            #expect(try store.mintedAPIKeys() == [key])
        }
        struct Boom: Error {}
        await #expect(throws: Boom.self) {
            try await storage.write { store in
                #expect(try store.useOfferNonce("n2"))
                try store.setRefundRequest("1", reason: nil)
                throw Boom()
            }
        }
        try await storage.write { (store: any EmulatorStore) throws in
            #expect(try store.useOfferNonce("n2"), "a rolled-back nonce was never used")
            #expect(try store.refundRequest("1") == "UNINTENDED_PURCHASE")
        }
    }

    @Test(
        "SQLite: what builds before migration 013 kept as JSON in settings moves into the record tables",
        .enabled(if: ExternalTool.find("sqlite3") != nil, "needs the sqlite3 command"))
    func recordsMigration() async throws {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("store.sqlite").path
        _ = try await SQLiteEmulatorStorage(path: path)
        let sqlite = try #require(ExternalTool.find("sqlite3"))
        let der = Data([1, 2, 3]).base64EncodedString()
        let undone = try ExternalTool.run(
            sqlite,
            [
                path,
                """
                DROP TABLE renewal_extensions; DROP TABLE mass_extensions; DROP TABLE consumption;
                DROP TABLE refund_requests; DROP TABLE api_keys; DROP TABLE offer_nonces;
                DROP TABLE app_transactions; ALTER TABLE transactions DROP COLUMN app_transaction_id;
                DROP TABLE retention_items; DROP TABLE retention_requests;
                ALTER TABLE transactions DROP COLUMN billing_plan; ALTER TABLE transactions DROP COLUMN commitment;
                ALTER TABLE subscriptions DROP COLUMN billing_plan; ALTER TABLE subscriptions DROP COLUMN commitment;
                ALTER TABLE subscriptions DROP COLUMN renewal_billing_plan;
                ALTER TABLE subscriptions DROP COLUMN run_start;
                ALTER TABLE transactions DROP COLUMN revocation_percentage;
                DELETE FROM schema_migrations WHERE id >= '013';
                INSERT INTO settings VALUES ('extensions.10', '[{"requestIdentifier":"r1","date":1704067200000,"effectiveDate":1704153600000,"webOrderLineItemId":"7"}]');
                INSERT INTO settings VALUES ('massExtension.p.m1', '{"requestIdentifier":"m1","productId":"p","environment":"Production","complete":true,"succeededCount":3,"failedCount":1,"completeDate":1704067200000,"storefrontCountryCodes":["USA","GBR"]}');
                INSERT INTO settings VALUES ('consumption.1', '{"customerConsented":true,"deliveryStatus":"DELIVERED"}');
                INSERT INTO settings VALUES ('consumption.2', '{"customerConsented":true,"consumptionStatus":1}');
                INSERT INTO settings VALUES ('refundRequest.1', 'UNINTENDED_PURCHASE');
                INSERT INTO settings VALUES ('refundRequest.2', '');
                INSERT INTO settings VALUES ('apiKeys', '[{"keyId":"K1","issuerId":"i","bundleId":"com.example","publicKey":"\(der)"}]');
                INSERT INTO settings VALUES ('offerNonce.n1', '1');
                """,
            ])
        #expect(undone.status == 0, "\(undone.stderrText)")
        let reopened = try await SQLiteEmulatorStorage(path: path)
        try await reopened.write { (store: any EmulatorStore) throws in
            #expect(
                try store.renewalExtensions(original: "10") == [
                    ExtensionRecord(
                        originalTransactionID: "10", requestIdentifier: "r1", date: Self.start,
                        effectiveDate: Self.start.addingTimeInterval(86_400), webOrderLineItemID: "7")
                ])
            #expect(
                try store.massExtension(productID: "p", requestIdentifier: "m1")
                    == MassExtension(
                        requestIdentifier: "m1", productID: "p", environment: .production, storefronts: ["USA", "GBR"],
                        complete: true, completeDate: Self.start, succeeded: 3, failed: 1))
            #expect(try store.consumption("1")?.version == 2)
            #expect(try store.consumption("2")?.version == 1)
            #expect(try store.refundRequest("1") == "UNINTENDED_PURCHASE")
            #expect(try store.refundRequest("2") == nil, "an answered request is gone")
            #expect(
                try store.mintedAPIKeys() == [
                    MintedAPIKey(keyID: "K1", issuerID: "i", bundleID: "com.example", publicKey: [1, 2, 3])
                ])
            #expect(try !store.useOfferNonce("n1"), "a nonce used before the migration stays used")
            for key in ["extensions.10", "massExtension.p.m1", "consumption.1", "refundRequest.1", "apiKeys"] {
                #expect(try store.setting(key) == nil, "\(key) left settings")
            }
        }
    }
}
