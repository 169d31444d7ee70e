import Foundation
import StoreModel
import StorekeeperSQL
import StorekeeperSQLite
import Synchronization

/// The emulator's state in SQLite tables (WAL, `synchronous=FULL`): one row per account, device, install,
/// transaction, subscription, pending payment and due event, each with the indexes its queries need. A
/// change writes only the rows it touches, in one transaction; writes run one at a time on the database's
/// own serial executor, in the order they were submitted.
public struct SQLiteEmulatorStorage: EmulatorStorage {
    private let database: Database
    private let headers = JWSHeaders()

    static let migrations = [
        // 001 kept the whole state as one JSON document; 002 moves it into tables (imported at open).
        Migration("001-state", "CREATE TABLE state (id INTEGER PRIMARY KEY CHECK (id = 1), document BLOB NOT NULL)"),
        Migration(
            "002-tables",
            """
            CREATE TABLE accounts (
                id TEXT PRIMARY KEY, environment TEXT NOT NULL, storefront TEXT NOT NULL,
                ask_to_buy INTEGER NOT NULL DEFAULT 0, purchase_failure TEXT
            );
            CREATE TABLE devices (id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts (id));
            CREATE TABLE installs (
                device_id TEXT NOT NULL REFERENCES devices (id), bundle_id TEXT NOT NULL, version TEXT NOT NULL,
                original_version TEXT NOT NULL, original_purchase_date REAL NOT NULL,
                vpp_assigned INTEGER NOT NULL DEFAULT 0, vpp_revoked_at REAL,
                PRIMARY KEY (device_id, bundle_id)
            );
            CREATE TABLE transactions (
                id TEXT PRIMARY KEY, original_id TEXT NOT NULL, account_id TEXT NOT NULL REFERENCES accounts (id),
                bundle_id TEXT NOT NULL, product_id TEXT NOT NULL, kind TEXT NOT NULL,
                quantity INTEGER NOT NULL CHECK (quantity > 0), purchase_date REAL NOT NULL,
                original_purchase_date REAL NOT NULL, expires_date REAL, web_order_line_item_id INTEGER,
                group_id TEXT, reason TEXT NOT NULL, ownership TEXT NOT NULL, offer_type INTEGER, offer_id TEXT,
                offer_discount TEXT, offer_period TEXT, price INTEGER, currency TEXT, app_account_token TEXT,
                application_username TEXT, revocation_date REAL, revocation_reason INTEGER,
                is_upgraded INTEGER NOT NULL DEFAULT 0, renewal_number INTEGER NOT NULL DEFAULT 0,
                finished INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX transactions_by_owner ON transactions (account_id, bundle_id, purchase_date);
            CREATE INDEX transactions_unfinished ON transactions (account_id, bundle_id) WHERE finished = 0;
            CREATE INDEX transactions_by_original ON transactions (original_id, renewal_number);
            CREATE TABLE subscriptions (
                original_id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts (id),
                bundle_id TEXT NOT NULL, product_id TEXT NOT NULL, auto_renew_product_id TEXT NOT NULL,
                status INTEGER NOT NULL, auto_renew INTEGER NOT NULL, expires_date REAL, expiration_intent INTEGER,
                grace_period_expires_date REAL, billing_retry_ends_date REAL, renewal_count INTEGER NOT NULL,
                latest_transaction_id TEXT NOT NULL
            );
            CREATE INDEX subscriptions_by_owner ON subscriptions (account_id, bundle_id);
            CREATE TABLE pending_payments (
                id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts (id), bundle_id TEXT NOT NULL,
                product_id TEXT NOT NULL, quantity INTEGER NOT NULL, date REAL NOT NULL, state TEXT NOT NULL,
                reason TEXT, finished INTEGER NOT NULL DEFAULT 0, app_account_token TEXT, application_username TEXT,
                resolvable INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX pending_payments_by_account ON pending_payments (account_id, date);
            CREATE TABLE due_events (
                kind TEXT NOT NULL, key TEXT NOT NULL, due REAL NOT NULL, PRIMARY KEY (kind, key)
            );
            CREATE INDEX due_events_by_time ON due_events (due, kind, key);
            CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """),
        Migration(
            "003-lifecycle-and-notifications",
            """
            ALTER TABLE accounts ADD COLUMN billing_retry_on_renewal INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE accounts ADD COLUMN billing_grace_period INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE subscriptions ADD COLUMN price_increase_status INTEGER;
            CREATE TABLE notifications (
                position INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, bundle_id TEXT NOT NULL,
                environment TEXT NOT NULL, version INTEGER NOT NULL, url TEXT NOT NULL, body BLOB NOT NULL,
                signed_payload TEXT, type TEXT NOT NULL, subtype TEXT, v1_type TEXT, original_transaction_id TEXT,
                created REAL NOT NULL, state TEXT NOT NULL, attempts TEXT NOT NULL, retry_delays TEXT NOT NULL,
                retry_client_errors INTEGER NOT NULL, timeout_ms INTEGER NOT NULL
            );
            CREATE INDEX notifications_by_app ON notifications (bundle_id, environment, created, position);
            CREATE INDEX subscriptions_by_renewal_product ON subscriptions (auto_renew_product_id, status);
            """),
        Migration(
            "004-family-sharing-and-offers",
            """
            ALTER TABLE subscriptions ADD COLUMN offer_type INTEGER;
            ALTER TABLE subscriptions ADD COLUMN offer_id TEXT;
            ALTER TABLE subscriptions ADD COLUMN offer_discount TEXT;
            ALTER TABLE subscriptions ADD COLUMN offer_period TEXT;
            ALTER TABLE subscriptions ADD COLUMN offer_periods_left INTEGER NOT NULL DEFAULT 0;
            CREATE TABLE families (id TEXT PRIMARY KEY, organizer TEXT NOT NULL REFERENCES accounts (id));
            CREATE TABLE family_members (
                account_id TEXT PRIMARY KEY REFERENCES accounts (id),
                family_id TEXT NOT NULL REFERENCES families (id), position INTEGER NOT NULL
            );
            CREATE INDEX family_members_by_family ON family_members (family_id, position);
            CREATE TABLE family_shares (
                source_original_id TEXT NOT NULL, member_account_id TEXT NOT NULL REFERENCES accounts (id),
                member_original_id TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (source_original_id, member_account_id)
            );
            """),
        Migration(
            "005-server-api",
            """
            ALTER TABLE transactions ADD COLUMN order_id TEXT;
            ALTER TABLE transactions ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
            UPDATE transactions SET revision = rowid;
            CREATE INDEX transactions_by_revision ON transactions (revision);
            CREATE INDEX transactions_by_owner_revision ON transactions (account_id, bundle_id, revision);
            CREATE INDEX transactions_by_order ON transactions (order_id) WHERE order_id IS NOT NULL;
            """),
        Migration(
            "006-dashboard",
            """
            CREATE INDEX devices_by_account ON devices (account_id);
            CREATE INDEX notifications_by_original ON notifications (original_transaction_id, position);
            CREATE INDEX transactions_by_product_revision ON transactions (product_id, revision);
            """),
        // A notification's signed payload (V2) or body (V1) is written once, beside the row whose state and
        // attempts change: recording an attempt then rewrites a small row, not 14 KB of JWS.
        Migration(
            "007-notification-payloads",
            """
            CREATE TABLE notification_payloads (position INTEGER PRIMARY KEY, payload BLOB NOT NULL);
            INSERT INTO notification_payloads (position, payload)
                SELECT position, CASE WHEN version = 2 AND signed_payload IS NOT NULL
                    THEN CAST(signed_payload AS BLOB) ELSE body END FROM notifications;
            UPDATE notifications SET body = x'', signed_payload = NULL;
            """),
        // Notifications waiting for a delivery slot (the process sends a bounded number at once), in
        // outbox order.
        Migration(
            "008-delivery-queue", "CREATE TABLE notification_queue (position INTEGER PRIMARY KEY)"),
        // One line per receiver: a receiver that does not answer keeps its own notifications waiting, not
        // every other receiver's behind them.
        Migration(
            "009-delivery-queue-by-receiver",
            """
            DELETE FROM notification_queue WHERE position NOT IN (SELECT position FROM notifications);
            ALTER TABLE notification_queue ADD COLUMN url TEXT NOT NULL DEFAULT '';
            UPDATE notification_queue
                SET url = (SELECT n.url FROM notifications n WHERE n.position = notification_queue.position);
            CREATE INDEX notification_queue_by_url ON notification_queue (url, position);
            """),
        // Done notifications by age, for a retention limit: a prune reads the oldest and nothing else.
        Migration(
            "010-notifications-done-by-created",
            "CREATE INDEX notifications_done_by_created ON notifications (created) WHERE state <> 'pending'"),
        // (account, bundle, purchase date) duplicated the prefix of `transactions_by_owner_revision`, which now
        // answers an account's transactions (sorted after; an account has hundreds, not millions): one random
        // B-tree page fewer for every purchase and renewal. `bench lifecycle` 10,000 x 2 wrote 19.5% less.
        Migration("011-drop-transactions-by-owner", "DROP INDEX IF EXISTS transactions_by_owner"),
        // An account's unfinished transactions are read from its entries in the owner index, which now carries
        // `finished` (SQLite tests it in the index and reads only the unfinished rows): the partial index it
        // replaces put every renewal on a page of its own a second time: ~15% of the WAL frames of a
        // `bench lifecycle` run without notifications (frames by B-tree, from the WAL's frame headers).
        Migration(
            "012-unfinished-in-owner-index",
            """
            DROP INDEX IF EXISTS transactions_unfinished;
            DROP INDEX IF EXISTS transactions_by_owner_revision;
            CREATE INDEX transactions_by_owner_revision ON transactions (account_id, bundle_id, revision, finished);
            """),
    ]

    /// Opens (creating and migrating) the database at `path`; a state document left by an older build is
    /// moved into the tables once.
    public init(path: String) async throws {
        // Created 0600 before SQLite opens it; its -wal and -shm files take the same mode.
        if path != ":memory:" { try PrivateFiles.touch(path) }
        database = try Database(path: path)
        try await database.migrate(Self.migrations)
        let headers = headers
        try await database.write { connection in
            guard
                let document = try connection.execute("SELECT document FROM state WHERE id = 1").first?["document"]
                    .bytes
            else { return }
            try LegacyStateImport.importDocument(document, into: Store(connection: connection, headers: headers))
            try connection.execute("DELETE FROM state")
        }
    }

    public func read<T: Sendable>(_ body: @Sendable (any EmulatorStore) throws -> T) async throws -> T {
        let headers = headers
        return try await database.read { try body(Store(connection: $0, headers: headers)) }
    }

    /// A group commit: writes waiting at the same moment share one transaction and one fsync, each all or
    /// nothing on its own (a savepoint), in the order they were submitted; each returns once the group is
    /// on disk.
    public func write<T: Sendable>(_ body: @escaping @Sendable (any EmulatorStore) throws -> T) async throws -> T {
        let headers = headers
        return try await database.writeGrouped { try body(Store(connection: $0, headers: headers)) }
    }

    /// The repositories over one connection (inside a read or a write).
    struct Store: EmulatorStore {
        let connection: Connection
        let headers: JWSHeaders

        private func date(_ value: SQLValue) -> Date? { value.double.map(Date.init(timeIntervalSince1970:)) }
        private func real(_ date: Date?) -> SQLValue { date.map { .real($0.timeIntervalSince1970) } ?? .null }
        private func text(_ value: String?) -> SQLValue { value.map(SQLValue.text) ?? .null }
        private func integer(_ value: Int64?) -> SQLValue { value.map(SQLValue.integer) ?? .null }
        private func flag(_ value: Bool) -> SQLValue { .integer(value ? 1 : 0) }

        private func changed(_ what: String) throws {
            guard connection.changes > 0 else { throw EmulatorStorageError.missing(what) }
        }

        private func inserting(_ what: String, _ body: () throws -> Void) throws {
            do { try body() } catch let error as SQLiteError where error.isConstraintViolation {
                throw error.code.rawValue == 1555 || error.code.rawValue == 2067
                    ? EmulatorStorageError.duplicate(what) : EmulatorStorageError.missing("owner of the \(what)")
            }
        }

        // MARK: Accounts

        private func accountRow(_ row: Row) -> Account {
            Account(
                id: AccountID(row["id"].string ?? ""),
                environment: Environment(rawValue: row["environment"].string ?? "") ?? .sandbox,
                storefront: row["storefront"].string ?? "USA", askToBuy: row["ask_to_buy"].int64 == 1,
                purchaseFailure: row["purchase_failure"].string.flatMap(PurchaseFailure.init(rawValue:)),
                billingRetryOnRenewal: row["billing_retry_on_renewal"].int64 == 1,
                billingGracePeriod: row["billing_grace_period"].int64 == 1)
        }

        func account(_ id: AccountID) throws -> Account? {
            try connection.execute("SELECT * FROM accounts WHERE id = ?", [.text(id.rawValue)]).first.map(accountRow)
        }

        func insert(_ account: Account) throws {
            try inserting("account") {
                try connection.execute(
                    """
                    INSERT INTO accounts (id, environment, storefront, ask_to_buy, purchase_failure,
                        billing_retry_on_renewal, billing_grace_period) VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(account.id.rawValue), .text(account.environment.rawValue), .text(account.storefront),
                        flag(account.askToBuy), text(account.purchaseFailure?.rawValue),
                        flag(account.billingRetryOnRenewal), flag(account.billingGracePeriod),
                    ])
            }
        }

        func update(_ account: Account) throws {
            try connection.execute(
                """
                UPDATE accounts SET environment = ?, storefront = ?, ask_to_buy = ?, purchase_failure = ?,
                    billing_retry_on_renewal = ?, billing_grace_period = ? WHERE id = ?
                """,
                [
                    .text(account.environment.rawValue), .text(account.storefront), flag(account.askToBuy),
                    text(account.purchaseFailure?.rawValue), flag(account.billingRetryOnRenewal),
                    flag(account.billingGracePeriod), .text(account.id.rawValue),
                ])
            try changed("account")
        }

        // MARK: Devices

        func accounts(after id: AccountID?, limit: Int) throws -> [Account] {
            try connection.execute(
                "SELECT * FROM accounts WHERE id > ? ORDER BY id LIMIT ?",
                [.text(id?.rawValue ?? ""), .integer(Int64(max(0, limit)))]
            ).map(accountRow)
        }

        func devices(account: AccountID) throws -> [Device] {
            try connection.execute(
                "SELECT * FROM devices WHERE account_id = ? ORDER BY id", [.text(account.rawValue)]
            ).map { Device(id: DeviceID($0["id"].string ?? ""), accountID: AccountID($0["account_id"].string ?? "")) }
        }

        func device(_ id: DeviceID) throws -> Device? {
            try connection.execute("SELECT account_id FROM devices WHERE id = ?", [.text(id.rawValue)]).first.map {
                Device(id: id, accountID: AccountID($0["account_id"].string ?? ""))
            }
        }

        func insert(_ device: Device) throws {
            try inserting("device") {
                try connection.execute(
                    "INSERT INTO devices (id, account_id) VALUES (?, ?)",
                    [.text(device.id.rawValue), .text(device.accountID.rawValue)])
            }
        }

        // MARK: Installs

        private func install(_ row: Row) -> Install {
            Install(
                deviceID: DeviceID(row["device_id"].string ?? ""), bundleID: BundleID(row["bundle_id"].string ?? ""),
                version: row["version"].string ?? "", originalVersion: row["original_version"].string ?? "",
                originalPurchaseDate: date(row["original_purchase_date"]) ?? .distantPast,
                vppAssigned: row["vpp_assigned"].int64 == 1, vppRevokedAt: date(row["vpp_revoked_at"]))
        }

        func install(device: DeviceID, bundle: BundleID) throws -> Install? {
            try connection.execute(
                "SELECT * FROM installs WHERE device_id = ? AND bundle_id = ?",
                [.text(device.rawValue), .text(bundle.rawValue)]
            ).first.map(install)
        }

        func installs(account: AccountID, bundle: BundleID) throws -> [Install] {
            try connection.execute(
                """
                SELECT installs.* FROM installs JOIN devices ON devices.id = installs.device_id
                WHERE devices.account_id = ? AND installs.bundle_id = ?
                ORDER BY installs.original_purchase_date, installs.device_id
                """, [.text(account.rawValue), .text(bundle.rawValue)]
            ).map(install)
        }

        func save(_ install: Install) throws {
            try inserting("install") {
                try connection.execute(
                    """
                    INSERT OR REPLACE INTO installs (device_id, bundle_id, version, original_version,
                        original_purchase_date, vpp_assigned, vpp_revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(install.deviceID.rawValue), .text(install.bundleID.rawValue), .text(install.version),
                        .text(install.originalVersion), real(install.originalPurchaseDate), flag(install.vppAssigned),
                        real(install.vppRevokedAt),
                    ])
            }
        }

        // MARK: Transactions

        static let transactionColumns = """
            id, original_id, account_id, bundle_id, product_id, kind, quantity, purchase_date, original_purchase_date,
            expires_date, web_order_line_item_id, group_id, reason, ownership, offer_type, offer_id, offer_discount,
            offer_period, price, currency, app_account_token, application_username, revocation_date,
            revocation_reason, is_upgraded, renewal_number, finished, order_id
            """

        private func values(_ stored: StoredTransaction) -> [SQLValue] {
            let t = stored.transaction
            return [
                .text(t.id.rawValue), .text(t.originalID.rawValue), .text(stored.accountID.rawValue),
                .text(t.bundleID.rawValue), .text(t.productID.rawValue), .text(t.kind.rawValue),
                .integer(Int64(t.quantity)), real(t.purchaseDate), real(t.originalPurchaseDate), real(t.expiresDate),
                integer(t.webOrderLineItemID), text(t.subscriptionGroupID), .text(t.reason.rawValue),
                .text(t.ownership.rawValue), integer(t.offer?.type.rawValue), text(t.offer?.identifier),
                text(t.offer?.discountType?.rawValue), text(t.offer?.period), integer(t.price?.milliunits),
                text(t.price?.currency), text(t.appAccountToken), text(stored.applicationUsername),
                real(t.revocationDate), integer(t.revocationReason?.rawValue), flag(t.isUpgraded),
                .integer(Int64(stored.renewalNumber)), flag(stored.finished), text(stored.orderID),
            ]
        }

        private func storedTransaction(_ row: Row) -> StoredTransaction {
            let offer = row["offer_type"].int64.flatMap(OfferType.init(rawValue:)).map {
                Offer(
                    type: $0, identifier: row["offer_id"].string,
                    discountType: row["offer_discount"].string.flatMap(OfferDiscountType.init(rawValue:)),
                    period: row["offer_period"].string)
            }
            let price = row["price"].int64.map { Money(milliunits: $0, currency: row["currency"].string ?? "USD") }
            let transaction = Transaction(
                id: TransactionID(row["id"].string ?? ""), originalID: TransactionID(row["original_id"].string ?? ""),
                bundleID: BundleID(row["bundle_id"].string ?? ""), productID: ProductID(row["product_id"].string ?? ""),
                kind: ProductKind(rawValue: row["kind"].string ?? "") ?? .consumable,
                quantity: Int(row["quantity"].int64 ?? 1), purchaseDate: date(row["purchase_date"]) ?? .distantPast,
                originalPurchaseDate: date(row["original_purchase_date"]), expiresDate: date(row["expires_date"]),
                webOrderLineItemID: row["web_order_line_item_id"].int64, subscriptionGroupID: row["group_id"].string,
                reason: TransactionReason(rawValue: row["reason"].string ?? "") ?? .purchase,
                ownership: OwnershipType(rawValue: row["ownership"].string ?? "") ?? .purchased, offer: offer,
                price: price, appAccountToken: row["app_account_token"].string,
                revocationDate: date(row["revocation_date"]),
                revocationReason: row["revocation_reason"].int64.flatMap(RevocationReason.init(rawValue:)),
                isUpgraded: row["is_upgraded"].int64 == 1)
            return StoredTransaction(
                transaction: transaction, accountID: AccountID(row["account_id"].string ?? ""),
                renewalNumber: Int(row["renewal_number"].int64 ?? 0), finished: row["finished"].int64 == 1,
                applicationUsername: row["application_username"].string, orderID: row["order_id"].string,
                revision: row["revision"].int64 ?? 0)
        }

        func transaction(_ id: TransactionID) throws -> StoredTransaction? {
            try connection.execute("SELECT * FROM transactions WHERE id = ?", [.text(id.rawValue)]).first.map(
                storedTransaction)
        }

        func insert(_ transaction: StoredTransaction) throws {
            try inserting("transaction") {
                try connection.execute(
                    """
                    INSERT INTO transactions (\(Self.transactionColumns), revision)
                    VALUES (\(Self.placeholders(28)), \(Self.nextRevision))
                    """, values(transaction))
            }
        }

        func update(_ transaction: StoredTransaction) throws {
            // The key, the owner and the app never change.
            let columns = Self.transactionColumns.split(separator: ",").map {
                $0.trimmingCharacters(in: .whitespacesAndNewlines)
            }
            var assignments = columns.dropFirst().map { "\($0) = ?" }.joined(separator: ", ")
            // Finishing is the app's business: only a change of the transaction itself moves its revision.
            if let old = try self.transaction(transaction.id), old.transaction != transaction.transaction {
                assignments += ", revision = \(Self.nextRevision)"
            }
            try connection.execute(
                "UPDATE transactions SET \(assignments) WHERE id = ? AND account_id = ? AND bundle_id = ?",
                Array(values(transaction).dropFirst()) + [
                    .text(transaction.id.rawValue), .text(transaction.accountID.rawValue),
                    .text(transaction.transaction.bundleID.rawValue),
                ])
            guard connection.changes > 0 else {
                throw try self.transaction(transaction.id) == nil
                    ? EmulatorStorageError.missing("transaction")
                    : EmulatorStorageError.invalid("a transaction's account and app cannot change")
            }
        }

        func transactions(account: AccountID, bundle: BundleID) throws -> [StoredTransaction] {
            try connection.execute(
                """
                SELECT * FROM transactions WHERE account_id = ? AND bundle_id = ?
                ORDER BY purchase_date, length(id), id
                """, [.text(account.rawValue), .text(bundle.rawValue)]
            ).map(storedTransaction)
        }

        func unfinishedTransactions(account: AccountID, bundle: BundleID) throws -> [StoredTransaction] {
            try connection.execute(
                """
                SELECT * FROM transactions WHERE account_id = ? AND bundle_id = ? AND finished = 0
                ORDER BY purchase_date, length(id), id
                """, [.text(account.rawValue), .text(bundle.rawValue)]
            ).map(storedTransaction)
        }

        /// The next revision: one past the largest (an indexed look-up).
        static let nextRevision = "(SELECT coalesce(max(revision), 0) + 1 FROM transactions)"

        func transactions(
            account: AccountID, bundle: BundleID, revisionAfter revision: Int64?, descending: Bool, limit: Int
        ) throws -> [StoredTransaction] {
            var sql = "SELECT * FROM transactions WHERE account_id = ? AND bundle_id = ?"
            var values: [SQLValue] = [.text(account.rawValue), .text(bundle.rawValue)]
            if let revision {
                sql += descending ? " AND revision < ?" : " AND revision > ?"
                values.append(.integer(revision))
            }
            sql += descending ? " ORDER BY revision DESC LIMIT ?" : " ORDER BY revision LIMIT ?"
            values.append(.integer(Int64(max(0, limit))))
            return try connection.execute(sql, values).map(storedTransaction)
        }

        func transactions(matching filter: TransactionFilter, revisionBefore revision: Int64?, limit: Int) throws
            -> [StoredTransaction]
        {
            var sql = "SELECT * FROM transactions WHERE revision < ?"
            var values: [SQLValue] = [.integer(revision ?? .max)]
            for (column, value) in [
                ("account_id", filter.account?.rawValue), ("bundle_id", filter.bundle?.rawValue),
                ("product_id", filter.product?.rawValue),
            ] {
                guard let value else { continue }
                sql += " AND \(column) = ?"
                values.append(.text(value))
            }
            sql += " ORDER BY revision DESC LIMIT ?"
            values.append(.integer(Int64(max(0, limit))))
            return try connection.execute(sql, values).map(storedTransaction)
        }

        func transactions(orderID: String) throws -> [StoredTransaction] {
            try connection.execute(
                "SELECT * FROM transactions WHERE order_id = ? ORDER BY purchase_date, length(id), id",
                [.text(orderID)]
            ).map(storedTransaction)
        }

        func transactions(original: TransactionID) throws -> [StoredTransaction] {
            try connection.execute(
                "SELECT * FROM transactions WHERE original_id = ? ORDER BY renewal_number, length(id), id",
                [.text(original.rawValue)]
            ).map(storedTransaction)
        }

        func transactionCount() throws -> Int {
            Int(try connection.execute("SELECT count(*) AS n FROM transactions").first?["n"].int64 ?? 0)
        }

        static func placeholders(_ count: Int) -> String { Array(repeating: "?", count: count).joined(separator: ", ") }

        // MARK: Subscriptions

        private func storedSubscription(_ row: Row) -> StoredSubscription {
            var state = SubscriptionState(
                originalTransactionID: TransactionID(row["original_id"].string ?? ""),
                productID: ProductID(row["product_id"].string ?? ""),
                autoRenewProductID: ProductID(row["auto_renew_product_id"].string ?? ""),
                status: SubscriptionStatus(rawValue: row["status"].int64 ?? 1) ?? .active,
                autoRenew: row["auto_renew"].int64 == 1, expiresDate: date(row["expires_date"]),
                expirationIntent: row["expiration_intent"].int64.flatMap(ExpirationIntent.init(rawValue:)),
                gracePeriodExpiresDate: date(row["grace_period_expires_date"]),
                billingRetryEndsDate: date(row["billing_retry_ends_date"]),
                renewalCount: Int(row["renewal_count"].int64 ?? 0),
                priceIncreaseStatus: row["price_increase_status"].int64.flatMap(PriceIncreaseStatus.init(rawValue:)))
            state.offer = row["offer_type"].int64.flatMap(OfferType.init(rawValue:)).map {
                Offer(
                    type: $0, identifier: row["offer_id"].string,
                    discountType: row["offer_discount"].string.flatMap(OfferDiscountType.init(rawValue:)),
                    period: row["offer_period"].string)
            }
            state.offerPeriodsLeft = Int(row["offer_periods_left"].int64 ?? 0)
            return StoredSubscription(
                state: state, accountID: AccountID(row["account_id"].string ?? ""),
                bundleID: BundleID(row["bundle_id"].string ?? ""),
                latestTransactionID: TransactionID(row["latest_transaction_id"].string ?? ""))
        }

        func subscription(_ originalID: TransactionID) throws -> StoredSubscription? {
            try connection.execute("SELECT * FROM subscriptions WHERE original_id = ?", [.text(originalID.rawValue)])
                .first.map(storedSubscription)
        }

        func save(_ subscription: StoredSubscription) throws {
            let state = subscription.state
            try inserting("subscription") {
                try connection.execute(
                    """
                    INSERT INTO subscriptions (original_id, account_id, bundle_id, product_id,
                        auto_renew_product_id, status, auto_renew, expires_date, expiration_intent,
                        grace_period_expires_date, billing_retry_ends_date, renewal_count, latest_transaction_id,
                        price_increase_status, offer_type, offer_id, offer_discount, offer_period, offer_periods_left)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (original_id) DO UPDATE SET product_id = excluded.product_id,
                        auto_renew_product_id = excluded.auto_renew_product_id, status = excluded.status,
                        auto_renew = excluded.auto_renew, expires_date = excluded.expires_date,
                        expiration_intent = excluded.expiration_intent,
                        grace_period_expires_date = excluded.grace_period_expires_date,
                        billing_retry_ends_date = excluded.billing_retry_ends_date,
                        renewal_count = excluded.renewal_count, latest_transaction_id = excluded.latest_transaction_id,
                        price_increase_status = excluded.price_increase_status, offer_type = excluded.offer_type,
                        offer_id = excluded.offer_id, offer_discount = excluded.offer_discount,
                        offer_period = excluded.offer_period, offer_periods_left = excluded.offer_periods_left
                    WHERE account_id = excluded.account_id AND bundle_id = excluded.bundle_id
                    """,
                    [
                        .text(state.originalTransactionID.rawValue), .text(subscription.accountID.rawValue),
                        .text(subscription.bundleID.rawValue), .text(state.productID.rawValue),
                        .text(state.autoRenewProductID.rawValue), .integer(state.status.rawValue),
                        flag(state.autoRenew), real(state.expiresDate), integer(state.expirationIntent?.rawValue),
                        real(state.gracePeriodExpiresDate), real(state.billingRetryEndsDate),
                        .integer(Int64(state.renewalCount)), .text(subscription.latestTransactionID.rawValue),
                        integer(state.priceIncreaseStatus?.rawValue), integer(state.offer?.type.rawValue),
                        text(state.offer?.identifier), text(state.offer?.discountType?.rawValue),
                        text(state.offer?.period), .integer(Int64(state.offerPeriodsLeft)),
                    ])
            }
            // The owner is not assigned on update (an index of it would be rewritten at every renewal): a save
            // that would change it changes nothing, and is refused.
            guard connection.changes > 0 else {
                throw EmulatorStorageError.invalid("a subscription's account and app cannot change")
            }
        }

        func subscriptionIDs(renewingTo product: ProductID) throws -> [TransactionID] {
            try connection.execute(
                """
                SELECT original_id FROM subscriptions WHERE auto_renew_product_id = ? AND status IN (1, 3, 4)
                ORDER BY length(original_id), original_id
                """, [.text(product.rawValue)]
            ).compactMap { $0["original_id"].string.map(TransactionID.init) }
        }

        func subscriptions(account: AccountID, bundle: BundleID) throws -> [StoredSubscription] {
            try connection.execute(
                """
                SELECT * FROM subscriptions WHERE account_id = ? AND bundle_id = ?
                ORDER BY length(original_id), original_id
                """, [.text(account.rawValue), .text(bundle.rawValue)]
            ).map(storedSubscription)
        }

        // MARK: Pending payments

        private func pendingPayment(_ row: Row) -> PendingPayment {
            PendingPayment(
                id: TransactionID(row["id"].string ?? ""), accountID: AccountID(row["account_id"].string ?? ""),
                bundleID: BundleID(row["bundle_id"].string ?? ""), productID: ProductID(row["product_id"].string ?? ""),
                quantity: Int(row["quantity"].int64 ?? 1), date: date(row["date"]) ?? .distantPast,
                state: PendingPayment.State(rawValue: row["state"].string ?? "") ?? .failed,
                reason: row["reason"].string.flatMap(PendingPayment.Reason.init(rawValue:)),
                finished: row["finished"].int64 == 1, appAccountToken: row["app_account_token"].string,
                applicationUsername: row["application_username"].string, resolvable: row["resolvable"].int64 == 1)
        }

        private func values(_ payment: PendingPayment) -> [SQLValue] {
            [
                .text(payment.id.rawValue), .text(payment.accountID.rawValue), .text(payment.bundleID.rawValue),
                .text(payment.productID.rawValue), .integer(Int64(payment.quantity)), real(payment.date),
                .text(payment.state.rawValue), text(payment.reason?.rawValue), flag(payment.finished),
                text(payment.appAccountToken), text(payment.applicationUsername), flag(payment.resolvable),
            ]
        }

        func payment(_ id: TransactionID) throws -> PendingPayment? {
            try connection.execute("SELECT * FROM pending_payments WHERE id = ?", [.text(id.rawValue)]).first.map(
                pendingPayment)
        }

        func insert(_ payment: PendingPayment) throws {
            try inserting("payment") {
                try connection.execute(
                    """
                    INSERT INTO pending_payments (id, account_id, bundle_id, product_id, quantity, date, state, reason,
                        finished, app_account_token, application_username, resolvable)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """, values(payment))
            }
        }

        func update(_ payment: PendingPayment) throws {
            try connection.execute(
                """
                UPDATE pending_payments SET account_id = ?, bundle_id = ?, product_id = ?, quantity = ?, date = ?,
                    state = ?, reason = ?, finished = ?, app_account_token = ?, application_username = ?,
                    resolvable = ?
                WHERE id = ?
                """, Array(values(payment).dropFirst()) + [.text(payment.id.rawValue)])
            try changed("payment")
        }

        func unfinishedPayments(account: AccountID, bundle: BundleID) throws -> [PendingPayment] {
            try connection.execute(
                """
                SELECT * FROM pending_payments WHERE account_id = ? AND bundle_id = ? AND finished = 0 ORDER BY date, id
                """, [.text(account.rawValue), .text(bundle.rawValue)]
            ).map(pendingPayment)
        }

        func resolvablePayments(account: AccountID) throws -> [PendingPayment] {
            try connection.execute(
                "SELECT * FROM pending_payments WHERE account_id = ? AND resolvable = 1 ORDER BY date, id",
                [.text(account.rawValue)]
            ).map(pendingPayment)
        }

        // MARK: Due events

        func schedule(_ event: DueEvent) throws {
            try connection.execute(
                """
                INSERT INTO due_events (kind, key, due) VALUES (?, ?, ?)
                ON CONFLICT (kind, key) DO UPDATE SET due = excluded.due
                """,
                [.text(event.kind.rawValue), .text(event.key), real(event.due)])
        }

        func cancel(kind: DueEvent.Kind, key: String) throws {
            try connection.execute(
                "DELETE FROM due_events WHERE kind = ? AND key = ?", [.text(kind.rawValue), .text(key)])
        }

        func events(kind: DueEvent.Kind, limit: Int) throws -> [DueEvent] {
            try connection.execute(
                "SELECT kind, key, due FROM due_events WHERE kind = ? ORDER BY key LIMIT ?",
                [.text(kind.rawValue), .integer(Int64(limit))]
            ).map { row in
                DueEvent(
                    kind: DueEvent.Kind(rawValue: row["kind"].string ?? ""), key: row["key"].string ?? "",
                    due: date(row["due"]) ?? .distantPast)
            }
        }

        func nextDue() throws -> Date? {
            try connection.execute("SELECT min(due) AS due FROM due_events").first.flatMap { date($0["due"]) }
        }

        func due(until time: Date, limit: Int) throws -> [DueEvent] {
            try connection.execute(
                "SELECT kind, key, due FROM due_events WHERE due <= ? ORDER BY due, kind, key LIMIT ?",
                [real(time), .integer(Int64(limit))]
            ).map { row in
                DueEvent(
                    kind: DueEvent.Kind(rawValue: row["kind"].string ?? ""), key: row["key"].string ?? "",
                    due: date(row["due"]) ?? .distantPast)
            }
        }

        // MARK: Notifications

        private static func attemptsText(_ attempts: [SendAttempt]) -> String {
            attempts.map { "\(EpochMilliseconds.milliseconds($0.date)):\($0.result.rawValue)" }
                .joined(separator: ",")
        }

        private static func attempts(_ text: String) -> [SendAttempt] {
            text.split(separator: ",").compactMap { item in
                let parts = item.split(separator: ":")
                guard parts.count == 2, let milliseconds = Int64(parts[0]),
                    let date = EpochMilliseconds.date(milliseconds),
                    let result = SendAttemptResult(rawValue: String(parts[1]))
                else { return nil }
                return SendAttempt(date: date, result: result)
            }
        }

        /// The columns of a notification with its payload.
        private static let notificationColumns =
            "n.*, p.payload FROM notifications n JOIN notification_payloads p ON p.position = n.position"

        /// What the outbox keeps of a V2 signed payload: short when its header is registered.
        private func storedPayload(_ jws: [UInt8]) throws -> [UInt8] {
            let header = Array(jws.prefix { $0 != UInt8(ascii: ".") })
            guard let fingerprint = try headers.fingerprint(of: header, in: self),
                let stored = StoredJWS.compact(jws, header: header, fingerprint: fingerprint)
            else { return jws }
            return stored
        }

        /// A V2 signed payload as it was signed.
        private func signedPayload(_ stored: [UInt8]) throws -> String {
            guard let fingerprint = StoredJWS.fingerprint(of: stored) else {
                return String(decoding: stored, as: UTF8.self)
            }
            guard let header = try headers.header(fingerprint, in: self),
                let jws = StoredJWS.expand(stored, header: header)
            else {
                throw EmulatorStorageError.invalid("a stored notification names an unknown JWS header \(fingerprint)")
            }
            return String(decoding: jws, as: UTF8.self)
        }

        private func outbound(_ row: Row) throws -> OutboundNotification {
            let version = Int(row["version"].int64 ?? 2)
            let payload = row["payload"].bytes ?? []
            // V2 posts {"signedPayload": …}, derived again from the payload; V1 posts the stored body.
            let signedPayload = try version == 2 ? self.signedPayload(payload) : nil
            let body = signedPayload.map { OutboundNotification.v2Body(signedPayload: $0) } ?? payload
            return OutboundNotification(
                id: row["id"].string ?? "", bundleID: BundleID(row["bundle_id"].string ?? ""),
                environment: Environment(rawValue: row["environment"].string ?? "") ?? .sandbox,
                version: version, url: row["url"].string ?? "", body: body, signedPayload: signedPayload,
                notice: Notice(
                    NotificationType(rawValue: row["type"].string ?? "") ?? .test,
                    row["subtype"].string.flatMap(NotificationSubtype.init(rawValue:)), v1: row["v1_type"].string),
                originalTransactionID: row["original_transaction_id"].string.map(TransactionID.init),
                created: date(row["created"]) ?? .distantPast,
                state: OutboxState(rawValue: row["state"].string ?? "") ?? .pending,
                attempts: Self.attempts(row["attempts"].string ?? ""),
                retryDelays: (row["retry_delays"].string ?? "").split(separator: ",").compactMap { Double($0) },
                retryClientErrors: row["retry_client_errors"].int64 == 1,
                timeoutMilliseconds: Int(row["timeout_ms"].int64 ?? 5_000))
        }

        func insert(_ notification: OutboundNotification) throws {
            try inserting("notification") {
                try connection.execute(
                    """
                    INSERT INTO notifications (id, bundle_id, environment, version, url, body, signed_payload, type,
                        subtype, v1_type, original_transaction_id, created, state, attempts, retry_delays,
                        retry_client_errors, timeout_ms)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(notification.id), .text(notification.bundleID.rawValue),
                        .text(notification.environment.rawValue), .integer(Int64(notification.version)),
                        .text(notification.url), .blob([]), .null,
                        .text(notification.notice.type.rawValue), text(notification.notice.subtype?.rawValue),
                        text(notification.notice.v1Type), text(notification.originalTransactionID?.rawValue),
                        real(notification.created), .text(notification.state.rawValue),
                        .text(Self.attemptsText(notification.attempts)),
                        .text(notification.retryDelays.map { String($0) }.joined(separator: ",")),
                        flag(notification.retryClientErrors), .integer(Int64(notification.timeoutMilliseconds)),
                    ])
                let payload: [UInt8]
                if notification.version != 2 {
                    payload = notification.body
                } else if let compact = notification.compactPayload,
                    try headers.fingerprint(of: compact.header.bytes, in: self) == compact.header.fingerprint
                {
                    payload = compact.bytes
                } else {
                    payload = try storedPayload(Array((notification.signedPayload ?? "").utf8))
                }
                try connection.execute(
                    "INSERT INTO notification_payloads (position, payload) VALUES (last_insert_rowid(), ?)",
                    [.blob(payload)])
            }
        }

        func update(_ notification: OutboundNotification) throws {
            try connection.execute(
                "UPDATE notifications SET state = ?, attempts = ? WHERE id = ?",
                [
                    .text(notification.state.rawValue), .text(Self.attemptsText(notification.attempts)),
                    .text(notification.id),
                ])
            try changed("notification")
        }

        func notification(_ id: String) throws -> OutboundNotification? {
            try connection.execute("SELECT \(Self.notificationColumns) WHERE n.id = ?", [.text(id)]).first.map {
                try outbound($0)
            }
        }

        func delivery(_ id: String) throws -> (state: OutboxState, attempts: [SendAttempt])? {
            try connection.execute("SELECT state, attempts FROM notifications WHERE id = ?", [.text(id)]).first.map {
                row in
                let state = OutboxState(rawValue: row["state"].string ?? "") ?? .pending
                return (state, Self.attempts(row["attempts"].string ?? ""))
            }
        }

        func queueForDelivery(_ id: String) throws {
            try connection.execute(
                """
                INSERT OR IGNORE INTO notification_queue (position, url)
                    SELECT position, url FROM notifications WHERE id = ?
                """, [.text(id)])
            if connection.changes == 0 {
                // Already queued, or no such notification.
                guard try !connection.execute("SELECT 1 FROM notifications WHERE id = ?", [.text(id)]).isEmpty else {
                    throw EmulatorStorageError.missing("notification")
                }
            }
        }

        func takeQueued(url: String, limit: Int) throws -> [OutboundNotification] {
            let rows = try connection.execute(
                """
                SELECT \(Self.notificationColumns) JOIN notification_queue q ON q.position = n.position
                    WHERE q.url = ? ORDER BY q.position LIMIT ?
                """, [.text(url), .integer(Int64(max(0, limit)))])
            guard let last = rows.last?["position"].int64 else { return [] }
            try connection.execute(
                "DELETE FROM notification_queue WHERE url = ? AND position <= ?", [.text(url), .integer(last)])
            return try rows.map { try outbound($0) }
        }

        func queuedURLs() throws -> [String] {
            // A skip scan of the index: one step a receiver, however long its line.
            try connection.execute(
                """
                WITH RECURSIVE receivers (url) AS (
                    SELECT min(url) FROM notification_queue
                    UNION ALL
                    SELECT (SELECT min(q.url) FROM notification_queue q WHERE q.url > receivers.url)
                        FROM receivers WHERE receivers.url IS NOT NULL
                )
                SELECT url FROM receivers WHERE url IS NOT NULL ORDER BY url
                """
            ).compactMap { $0["url"].string }
        }

        func hasQueued() throws -> Bool {
            try !connection.execute("SELECT 1 FROM notification_queue LIMIT 1").isEmpty
        }

        func hasQueued(url: String) throws -> Bool {
            try !connection.execute("SELECT 1 FROM notification_queue WHERE url = ? LIMIT 1", [.text(url)]).isEmpty
        }

        func queuedCount() throws -> Int {
            Int(try connection.execute("SELECT count(*) AS n FROM notification_queue").first?["n"].int64 ?? 0)
        }

        func pruneNotifications(createdBefore date: Date, limit: Int) throws -> Int {
            // The same rows for both statements: nothing else runs in between, in this transaction.
            let oldest = """
                SELECT position FROM notifications WHERE state <> 'pending' AND created < ?
                    ORDER BY created, position LIMIT ?
                """
            let arguments: [SQLValue] = [real(date), .integer(Int64(max(0, limit)))]
            try connection.execute("DELETE FROM notification_payloads WHERE position IN (\(oldest))", arguments)
            try connection.execute("DELETE FROM notifications WHERE position IN (\(oldest))", arguments)
            return connection.changes
        }

        func notifications(original: TransactionID, limit: Int) throws -> [OutboundNotification] {
            try connection.execute(
                "SELECT \(Self.notificationColumns) WHERE n.original_transaction_id = ? ORDER BY n.position LIMIT ?",
                [.text(original.rawValue), .integer(Int64(max(0, limit)))]
            ).map { try outbound($0) }
        }

        func notifications(
            bundle: BundleID, environment: Environment, from: Date, to: Date, after: Int64?, limit: Int
        ) throws -> [(position: Int64, notification: OutboundNotification)] {
            try connection.execute(
                """
                SELECT \(Self.notificationColumns) WHERE n.bundle_id = ? AND n.environment = ? AND n.created >= ?
                    AND n.created < ? AND n.position > ? ORDER BY n.position LIMIT ?
                """,
                [
                    .text(bundle.rawValue), .text(environment.rawValue), real(from), real(to), .integer(after ?? 0),
                    .integer(Int64(limit)),
                ]
            ).map { (position: $0["position"].int64 ?? 0, notification: try outbound($0)) }
        }

        // MARK: Families

        func family(_ id: String) throws -> Family? {
            guard
                let organizer = try connection.execute("SELECT organizer FROM families WHERE id = ?", [.text(id)])
                    .first?["organizer"].string
            else { return nil }
            let members = try connection.execute(
                "SELECT account_id FROM family_members WHERE family_id = ? ORDER BY position", [.text(id)]
            ).compactMap { $0["account_id"].string.map(AccountID.init) }
            return Family(id: id, organizer: AccountID(organizer), members: members)
        }

        func family(member account: AccountID) throws -> Family? {
            guard
                let id = try connection.execute(
                    "SELECT family_id FROM family_members WHERE account_id = ?", [.text(account.rawValue)]
                ).first?["family_id"].string
            else { return nil }
            return try family(id)
        }

        func save(_ family: Family) throws {
            // Checked before anything changes, so a refused family leaves no rows behind.
            for member in family.members {
                guard try account(member) != nil else { throw EmulatorStorageError.missing("owner of the family") }
                if let other = try self.family(member: member)?.id, other != family.id {
                    throw EmulatorStorageError.duplicate("family member")
                }
            }
            try inserting("family member") {
                try connection.execute(
                    "INSERT INTO families (id, organizer) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET organizer = excluded.organizer",
                    [.text(family.id), .text(family.organizer.rawValue)])
                try connection.execute("DELETE FROM family_members WHERE family_id = ?", [.text(family.id)])
                for (position, member) in family.members.enumerated() {
                    try connection.execute(
                        "INSERT INTO family_members (account_id, family_id, position) VALUES (?, ?, ?)",
                        [.text(member.rawValue), .text(family.id), .integer(Int64(position))])
                }
            }
        }

        func shares(source: TransactionID) throws -> [FamilyShare] {
            try connection.execute(
                "SELECT * FROM family_shares WHERE source_original_id = ? ORDER BY member_account_id",
                [.text(source.rawValue)]
            ).map { row in
                FamilyShare(
                    sourceOriginalID: source, memberAccountID: AccountID(row["member_account_id"].string ?? ""),
                    memberOriginalID: TransactionID(row["member_original_id"].string ?? ""),
                    revoked: row["revoked"].int64 == 1)
            }
        }

        func save(_ share: FamilyShare) throws {
            try inserting("family share") {
                try connection.execute(
                    """
                    INSERT OR REPLACE INTO family_shares (source_original_id, member_account_id, member_original_id,
                        revoked) VALUES (?, ?, ?, ?)
                    """,
                    [
                        .text(share.sourceOriginalID.rawValue), .text(share.memberAccountID.rawValue),
                        .text(share.memberOriginalID.rawValue), flag(share.revoked),
                    ])
            }
        }

        // MARK: Settings

        func setting(_ key: String) throws -> String? {
            try connection.execute("SELECT value FROM settings WHERE key = ?", [.text(key)]).first?["value"].string
        }

        func setSetting(_ key: String, _ value: String) throws {
            try connection.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [.text(key), .text(value)])
        }
    }
}

/// The JWS headers the outbox's stored payloads name (``StoredJWS``), as registered in `settings` by the
/// emulator when it opens the store. Only a header read from there is used, so a payload is never kept
/// short under a header the database does not hold.
final class JWSHeaders: Sendable {
    private let known = Mutex<[(header: [UInt8], fingerprint: String)]>([])

    /// The fingerprint of a registered header; nil when it is not registered.
    func fingerprint(of header: [UInt8], in store: SQLiteEmulatorStorage.Store) throws -> String? {
        if let found = known.withLock({ $0.first { $0.header == header } }) { return found.fingerprint }
        let fingerprint = StoredJWS.fingerprint(header: header)
        guard try store.setting(AppStore.Setting.jwsHeader(fingerprint)).map({ Array($0.utf8) }) == header else {
            return nil
        }
        known.withLock { $0.append((header, fingerprint)) }
        return fingerprint
    }

    /// The registered header with this fingerprint.
    func header(_ fingerprint: String, in store: SQLiteEmulatorStorage.Store) throws -> [UInt8]? {
        if let found = known.withLock({ $0.first { $0.fingerprint == fingerprint } }) { return found.header }
        guard let header = try store.setting(AppStore.Setting.jwsHeader(fingerprint)).map({ Array($0.utf8) }) else {
            return nil
        }
        known.withLock { $0.append((header, fingerprint)) }
        return header
    }
}
