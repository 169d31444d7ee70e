import AppStoreSignedData
import Foundation
import StoreModel
public import StorekeeperSQL
import StorekeeperSQLite
import Synchronization

/// The emulator's state in SQLite tables (WAL, `synchronous=FULL`): one row per account, device, install,
/// transaction, subscription, pending payment and due event, each with the indexes its queries need. A
/// change writes only the rows it touches, in one transaction; writes run one at a time on the database's
/// own serial executor, in the order they were submitted.
public struct SQLiteEmulatorStorage: EmulatorStorage {
    private let database: Database
    private let headers = JWSHeaders()

    /// Opens (creating and migrating) the database at `path`; a state document left by an older build is
    /// moved into the tables once.
    public init(path: String) async throws {
        // The database makes the file 0600 before SQLite opens it (its -wal and -shm take that mode).
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

    /// How long the database's writer has spent in write transactions so far (``Database/writerBusy``).
    public var writerBusy: Duration? { database.writerBusy }
    /// The CPU time of those transactions (``Database/writerCPU``).
    public var writerCPU: Duration? { database.writerCPU }
    /// Counts each statement's cost on the writer (``Database/countWriterStatements(_:)``).
    public func countWriterStatements(_ on: Bool) async { await database.countWriterStatements(on) }
    public func writerStatementCosts() async -> [StatementCost] { await database.writerStatementCosts }

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

        func date(_ value: SQLValue) -> Date? { value.double.map(Date.init(timeIntervalSince1970:)) }
        func real(_ date: Date?) -> SQLValue { date.map { .real($0.timeIntervalSince1970) } ?? .null }
        func text(_ value: String?) -> SQLValue { value.map(SQLValue.text) ?? .null }
        func integer(_ value: Int64?) -> SQLValue { value.map(SQLValue.integer) ?? .null }
        func flag(_ value: Bool) -> SQLValue { .integer(value ? 1 : 0) }

        func changed(_ what: String) throws {
            guard connection.changes > 0 else { throw EmulatorStorageError.missing(what) }
        }

        func inserting(_ what: String, _ body: () throws -> Void) throws {
            do { try body() } catch let error as SQLiteError where error.isConstraintViolation {
                throw error.code.rawValue == 1555 || error.code.rawValue == 2067
                    ? EmulatorStorageError.duplicate(what) : EmulatorStorageError.missing("owner of the \(what)")
            }
        }

        // MARK: Accounts

        func accountRow(_ row: Row) -> Account {
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

        func install(_ row: Row) -> Install {
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

        func appTransactionID(account: AccountID, bundle: BundleID) throws -> TransactionID? {
            try connection.execute(
                "SELECT serial FROM app_transactions WHERE account_id = ? AND bundle_id = ?",
                [.text(account.rawValue), .text(bundle.rawValue)]
            ).first?["serial"].int64.map(AppTransactionIDs.id(serial:))
        }

        func makeAppTransaction(account: AccountID, bundle: BundleID) throws -> TransactionID {
            if let id = try appTransactionID(account: account, bundle: bundle) { return id }
            let rows = try connection.execute(
                "INSERT INTO app_transactions (account_id, bundle_id) VALUES (?, ?) RETURNING serial",
                [.text(account.rawValue), .text(bundle.rawValue)])
            guard let serial = rows.first?["serial"].int64 else {
                throw EmulatorStorageError.missing("app transaction")
            }
            return AppTransactionIDs.id(serial: serial)
        }

        func appTransaction(_ id: TransactionID) throws -> (account: AccountID, bundle: BundleID)? {
            guard let serial = AppTransactionIDs.serial(id) else { return nil }
            guard
                let row = try connection.execute(
                    "SELECT account_id, bundle_id FROM app_transactions WHERE serial = ?", [.integer(serial)]
                ).first, let account = row["account_id"].string, let bundle = row["bundle_id"].string
            else { return nil }
            return (AccountID(account), BundleID(bundle))
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
            revocation_reason, is_upgraded, renewal_number, finished, order_id, app_transaction_id, billing_plan,
            commitment, revocation_percentage
            """

        func values(_ stored: StoredTransaction) -> [SQLValue] {
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
                text(t.appTransactionID?.rawValue), text(t.billingPlan?.rawValue),
                text(CommitmentColumns.text(t.commitment)), integer(t.revocationPercentage),
            ]
        }

        func storedTransaction(_ row: Row) -> StoredTransaction {
            let offer = row["offer_type"].int64.flatMap(OfferType.init(rawValue:)).map {
                Offer(
                    type: $0, identifier: row["offer_id"].string,
                    discountType: row["offer_discount"].string.flatMap(OfferDiscountType.init(rawValue:)),
                    period: row["offer_period"].string)
            }
            let price = row["price"].int64.map { Money(milliunits: $0, currency: row["currency"].string ?? "USD") }
            var transaction = Transaction(
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
            transaction.appTransactionID = row["app_transaction_id"].string.map(TransactionID.init(rawValue:))
            transaction.billingPlan = row["billing_plan"].string.flatMap(BillingPlanType.init(rawValue:))
            transaction.commitment = CommitmentColumns.transactionCommitment(row["commitment"].string)
            transaction.revocationPercentage = row["revocation_percentage"].int64
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

        func purchaseDate(of id: TransactionID) throws -> Date? {
            try connection.execute("SELECT purchase_date FROM transactions WHERE id = ?", [.text(id.rawValue)]).first
                .flatMap { date($0[0]) }
        }

        /// Made once: a renewal inserts a transaction, and this text is the statement cache's key.
        static let insertTransaction = """
            INSERT INTO transactions (\(transactionColumns), revision)
            VALUES (\(placeholders(32)), \(nextRevision))
            """

        func insert(_ transaction: StoredTransaction) throws {
            try inserting("transaction") { try connection.execute(Self.insertTransaction, values(transaction)) }
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

        func originalIDs(account: AccountID, bundle: BundleID) throws -> Set<TransactionID> {
            Set(
                try connection.execute(
                    "SELECT DISTINCT original_id FROM transactions WHERE account_id = ? AND bundle_id = ?",
                    [.text(account.rawValue), .text(bundle.rawValue)]
                ).compactMap { $0["original_id"].string.map(TransactionID.init) })
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
