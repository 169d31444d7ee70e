import Foundation
import StoreModel
package import StorekeeperJSON
import StorekeeperSQL

/// What the SQL store needs of a connection: SQLite's and PostgreSQL's both have it.
protocol SQLStatementRunner {
    @discardableResult func execute(_ sql: String, _ values: [SQLValue]) throws -> [Row]
    /// Runs a statement whose rows and count are not needed: PostgreSQL sends it with the next statement
    /// that is answered (one round trip for both; its failure is thrown there), SQLite runs it now.
    func executeLater(_ sql: String, _ values: [SQLValue]) throws
    /// Runs reads now, together, and answers each once from what they read when it is run next (PostgreSQL,
    /// in a write: one round trip for all); nothing where a statement costs no round trip (SQLite).
    func readAhead(_ statements: [(sql: String, values: [SQLValue])]) throws
    /// Runs a statement whose count of changed rows is wanted only once the transaction is over: PostgreSQL
    /// sends it with the next statement that is answered (`COMMIT` at the latest) and fills the count then,
    /// SQLite runs it now.
    func executeCounted(_ sql: String, _ values: [SQLValue]) throws -> DeferredCount
    /// Rows the last statement changed.
    var changes: Int { get }
    /// Holds `key` until the transaction ends (nothing where transactions run one at a time).
    func lockForTransaction(_ key: String) throws
    /// Whether ``readAhead(_:)`` reads anything (PostgreSQL: a statement is a round trip).
    static var readsAhead: Bool { get }
    /// Sends a statement like ``executeLater(_:_:)``; in a PostgreSQL transaction, not again once sent with
    /// the same values.
    func executeLater(_ sql: String, _ values: [SQLValue], once: Bool) throws
    /// Whether a subscriber's records are read in one statement (PostgreSQL aggregates them as JSON: one
    /// round trip instead of six); else one statement per repository call (SQLite, in process).
    static var readsSubscriberInOneStatement: Bool { get }
    /// Whether a change to a user also records the transaction that made it (`subscribers.changed`, on
    /// PostgreSQL): what processes sharing the database ask for to drop what they keep.
    static var marksChangingTransactions: Bool { get }
}

extension SQLStatementRunner {
    @discardableResult func execute(_ sql: String) throws -> [Row] { try execute(sql, []) }
    func executeLater(_ sql: String, _ values: [SQLValue]) throws { try execute(sql, values) }
    func executeLater(_ sql: String, _ values: [SQLValue], once: Bool) throws { try executeLater(sql, values) }
    func readAhead(_ statements: [(sql: String, values: [SQLValue])]) throws {}
    func executeCounted(_ sql: String, _ values: [SQLValue]) throws -> DeferredCount {
        try execute(sql, values)
        return DeferredCount(changes)
    }
}

/// The purchase server's records over SQL, in the dialect SQLite and PostgreSQL share (upserts with
/// `ON CONFLICT`): one row per subscriber, transaction, subscription, ledger entry, grant, event, raw input
/// and webhook delivery, each record kept as JSON beside the columns its queries use. The schemas are each
/// backend's own (``SQLiteServerStorage``, ``PostgresServerStorage``).
struct SQLServerStore<Connection: SQLStatementRunner>: ServerStore {
    let connection: Connection
    /// In a storage's writes: the signing headers it has committed, and where this write notes those it
    /// inserts (``SigningHeaders/tracking(_:)``).
    var headers: SigningHeaders.Tracking? = nil
    /// In a group of writes sharing a transaction: the users they touch, made in one order at the end
    /// (``SubscriberRepository/touch(bundle:appUserID:)``), so that two groups never wait on each other's
    /// rows.
    var touches: Touches? = nil

    /// The users a group's writes touched, each once.
    final class Touches {
        private(set) var users: Set<[String]> = []
        func note(bundle: String, appUserID: String) { users.insert([bundle, appUserID]) }
    }

    /// Makes the touches noted (``touches``), in order of app and user.
    func touchNoted() throws {
        guard let touches else { return }
        for user in touches.users.sorted(by: { ($0[0], $0[1]) < ($1[0], $1[1]) }) {
            try SQLServerStore(connection: connection).touch(bundle: user[0], appUserID: user[1])
        }
    }

    static func encode<T: Encodable>(_ value: T) throws -> SQLValue {
        .blob(JSONWriter.bytes(try SQLDocuments.encoder.encode(value)))
    }
    /// The records every ingestion writes, built member by member (the same document).
    static func encode(_ value: some StoredDocument) -> SQLValue { .blob(JSONWriter.bytes(value.storedDocument)) }
    static func decode<T: Decodable>(_ type: T.Type, _ value: SQLValue) throws -> T {
        guard let bytes = value.bytes else { throw ServerStorageError(message: "a stored record is missing") }
        return try SQLDocuments.decoder.decode(type, from: JSONParser.parse(bytes))
    }

    func text(_ value: String?) -> SQLValue { value.map(SQLValue.text) ?? .null }

    // MARK: Reading ahead

    static var userByToken: String { "SELECT app_user_id FROM account_tokens WHERE bundle_id = ? AND token = ?" }
    static var purchaseByID: String { "SELECT document FROM purchases WHERE transaction_id = ?" }
    static var purchasesByOriginal: String {
        "SELECT document FROM purchases WHERE original_id = ? ORDER BY purchase_date, transaction_id"
    }
    static var subscriptionByOriginal: String { "SELECT document FROM subscriptions WHERE original_id = ?" }
    static var firstOwnerByOriginal: String {
        """
        SELECT owner FROM purchases WHERE original_id = ? AND owner IS NOT NULL
        ORDER BY purchase_date, transaction_id LIMIT 1
        """
    }

    /// The input's insert first, in the same round trip (its `RETURNING` row says whether it was new):
    /// ``recordInput(_:received:)`` with the same input and time is then answered from it.
    func readAhead(_ ahead: WriteAhead) throws {
        guard Connection.readsAhead else { return }
        try connection.readAhead(statementsAhead(ahead))
    }

    /// What ``readAhead(_:)`` sends.
    func statementsAhead(_ ahead: WriteAhead) throws -> [(sql: String, values: [SQLValue])] {
        var statements: [(sql: String, values: [SQLValue])] = []
        if let input = ahead.input {
            statements.append((Self.insertInput, try inputValues(input, received: ahead.received)))
        }
        statements += [
            (Self.subscriptionByOriginal, [.text(ahead.original.rawValue)]),
            (Self.firstOwnerByOriginal, [.text(ahead.original.rawValue)]),
        ]
        if let transaction = ahead.transaction {
            statements.append((Self.purchaseByID, [.text(transaction.rawValue)]))
        }
        if let token = ahead.appAccountToken {
            statements.append((Self.userByToken, [.text(ahead.bundle), .text(token.lowercased())]))
        }
        return statements
    }

    // MARK: Subscribers

    func subscriber(bundle: String, appUserID: String) throws -> Subscriber? {
        try connection.execute(
            "SELECT document FROM subscribers WHERE bundle_id = ? AND app_user_id = ?",
            [.text(bundle), .text(appUserID)]
        ).first.map { try Self.decode(Subscriber.self, $0["document"]) }
    }

    func subscriber(bundle: String, appAccountToken: String) throws -> Subscriber? {
        guard
            let user = try connection.execute(
                Self.userByToken,
                [.text(bundle), .text(appAccountToken.lowercased())]
            ).first?["app_user_id"].string
        else { return nil }
        return try subscriber(bundle: bundle, appUserID: user)
    }

    func save(_ subscriber: Subscriber) throws {
        try connection.executeLater(
            """
            INSERT INTO subscribers (bundle_id, app_user_id, document) VALUES (?, ?, ?)
            ON CONFLICT (bundle_id, app_user_id) DO UPDATE SET document = excluded.document
            """,
            [.text(subscriber.bundleID), .text(subscriber.appUserID), try Self.encode(subscriber)])
        for token in subscriber.appAccountTokens {
            try connection.executeLater(
                """
                INSERT INTO account_tokens (bundle_id, token, app_user_id) VALUES (?, ?, ?)
                ON CONFLICT (bundle_id, token) DO UPDATE SET app_user_id = excluded.app_user_id
                """,
                [.text(subscriber.bundleID), .text(token.lowercased()), .text(subscriber.appUserID)])
        }
    }

    func touch(bundle: String, appUserID: String) throws {
        if let touches { return touches.note(bundle: bundle, appUserID: appUserID) }
        try connection.executeLater(
            Connection.marksChangingTransactions
                ? """
                UPDATE subscribers SET version = version + 1, changed = pg_current_xact_id()
                WHERE bundle_id = ? AND app_user_id = ?
                """
                : "UPDATE subscribers SET version = version + 1 WHERE bundle_id = ? AND app_user_id = ?",
            [.text(bundle), .text(appUserID)])
    }

    func version(bundle: String, appUserID: String) throws -> Int64? {
        try connection.execute(
            "SELECT version FROM subscribers WHERE bundle_id = ? AND app_user_id = ?",
            [.text(bundle), .text(appUserID)]
        ).first?["version"].int64
    }

    func subscriberRecords(bundle: String, appUserID: String) throws -> SubscriberRecords? {
        guard Connection.readsSubscriberInOneStatement else {
            return try subscriberRecordsOneByOne(bundle: bundle, appUserID: appUserID)
        }
        // Each list as one JSON array of the stored documents, in the order of the repository's own reads;
        // the user is the one the id is an alias of, if it is one.
        func documents(_ table: String, order: String) -> String {
            """
            (SELECT '[' || string_agg(convert_from(document, 'UTF8'), ',' ORDER BY \(order)) || ']' FROM \(table)
                WHERE bundle_id = user_id.bundle AND owner = user_id.id)
            """
        }
        guard
            let row = try connection.execute(
                """
                WITH user_id AS (
                    SELECT CAST(? AS TEXT) AS bundle, COALESCE(
                        (SELECT app_user_id FROM aliases WHERE bundle_id = ? AND alias = ?), CAST(? AS TEXT)) AS id
                )
                SELECT version, document, \(documents("subscriptions", order: "original_id")) AS subscriptions,
                    \(documents("purchases", order: "purchase_date, transaction_id")) AS purchases,
                    \(documents("grants", order: "entitlement")) AS grants,
                    (SELECT json_object_agg(product, total) FROM (
                        SELECT ledger.product_id AS product, CAST(sum(ledger.quantity) AS BIGINT) AS total FROM ledger
                        JOIN purchases ON purchases.transaction_id = ledger.transaction_id
                        WHERE purchases.bundle_id = user_id.bundle AND purchases.owner = user_id.id
                        GROUP BY ledger.product_id) AS sums
                    ) AS balances
                FROM user_id JOIN subscribers ON bundle_id = user_id.bundle AND app_user_id = user_id.id
                """, [.text(bundle), .text(bundle), .text(appUserID), .text(appUserID)]
            ).first
        else { return nil }
        func list<T: Decodable>(_ type: T.Type, _ column: String) throws -> [T] {
            guard let text = row[column].string else { return [] }
            guard case .array(let items) = try JSONParser.parse(Array(text.utf8), limits: Self.aggregateLimits) else {
                throw ServerStorageError(message: "stored \(column) are not a list")
            }
            return try items.map { try SQLDocuments.decoder.decode(type, from: $0) }
        }
        var balances: [String: Int] = [:]
        if let text = row["balances"].string {
            for (product, total) in try JSONParser.parse(Array(text.utf8)).objectValue?.members ?? [] {
                balances[product] = total.int64Value.map(Int.init)
            }
        }
        return SubscriberRecords(
            subscriber: try Self.decode(Subscriber.self, row["document"]),
            subscriptions: try list(SubscriptionRecord.self, "subscriptions"),
            purchases: try list(PurchaseRecord.self, "purchases"), balances: balances,
            grants: try list(Grant.self, "grants"), version: row["version"].int64 ?? 0)
    }

    /// A user's records read together may be many: bounded, far above any user's.
    static var aggregateLimits: JSONParser.Limits {
        JSONParser.Limits(maxSize: 256 << 20, maxDepth: 32, maxMembers: 10_000_000)
    }

    func user(bundle: String, alias: String) throws -> String? {
        try connection.execute(
            "SELECT app_user_id FROM aliases WHERE bundle_id = ? AND alias = ?", [.text(bundle), .text(alias)]
        ).first?["app_user_id"].string
    }

    func saveAlias(bundle: String, alias: String, user: String) throws {
        try connection.execute(
            """
            INSERT INTO aliases (bundle_id, alias, app_user_id) VALUES (?, ?, ?)
            ON CONFLICT (bundle_id, alias) DO UPDATE SET app_user_id = excluded.app_user_id
            """,
            [.text(bundle), .text(alias), .text(user)])
    }

    // MARK: Purchases and subscriptions

    func purchase(_ transactionID: TransactionID) throws -> PurchaseRecord? {
        try connection.execute(
            Self.purchaseByID, [.text(transactionID.rawValue)]
        )
        .first.map { try Self.decode(PurchaseRecord.self, $0["document"]) }
    }

    func save(_ purchase: PurchaseRecord) throws {
        try connection.executeLater(
            """
            INSERT INTO purchases (transaction_id, original_id, bundle_id, owner, purchase_date, document,
                product_id, kind, environment, expires, revoked, last_date, price, currency, trial, billing_plan)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (transaction_id) DO UPDATE SET
            original_id = excluded.original_id, bundle_id = excluded.bundle_id, owner = excluded.owner,
            purchase_date = excluded.purchase_date, document = excluded.document, product_id = excluded.product_id,
            kind = excluded.kind, environment = excluded.environment, expires = excluded.expires,
            revoked = excluded.revoked, last_date = excluded.last_date, price = excluded.price,
            currency = excluded.currency, trial = excluded.trial, billing_plan = excluded.billing_plan
            """,
            [
                .text(purchase.transactionID.rawValue), .text(purchase.originalTransactionID.rawValue),
                .text(purchase.bundleID.rawValue),
                text(purchase.owner), .real(purchase.purchaseDate.timeIntervalSince1970), Self.encode(purchase),
            ] + Self.chartColumns(purchase))
    }

    /// The chart columns of a purchase: product, kind, environment, expiry, refund, last date, price,
    /// currency, trial, billing plan.
    static func chartColumns(_ purchase: PurchaseRecord) -> [SQLValue] {
        let record = SubscriptionCharts.Record(purchase)
        func real(_ date: Date?) -> SQLValue { date.map { .real($0.timeIntervalSince1970) } ?? .null }
        return [
            .text(record.productID), .text(record.kind.rawValue), .text(record.environment.rawValue),
            real(record.expiresDate), real(record.revocationDate), real(record.lastDate),
            record.price.map(SQLValue.integer) ?? .null, record.currency.map(SQLValue.text) ?? .null,
            .integer(record.isTrial ? 1 : 0), record.billingPlan.map(SQLValue.text) ?? .null,
        ]
    }

    /// Fills the chart columns of up to `limit` purchases stored before they existed; how many it filled.
    func backfillChartColumns(limit: Int) throws -> Int {
        let rows = try connection.execute(
            "SELECT document FROM purchases WHERE last_date IS NULL LIMIT ?", [.integer(Int64(limit))])
        for row in rows {
            let purchase = try Self.decode(PurchaseRecord.self, row["document"])
            try connection.execute(
                """
                UPDATE purchases SET product_id = ?, kind = ?, environment = ?, expires = ?, revoked = ?,
                last_date = ?, price = ?, currency = ?, trial = ?, billing_plan = ? WHERE transaction_id = ?
                """, Self.chartColumns(purchase) + [.text(purchase.transactionID.rawValue)])
        }
        return rows.count
    }

    func chartRecords(bundle: String, from: Date, to: Date, limit: Int) throws -> [SubscriptionCharts.Record] {
        try connection.execute(
            """
            SELECT original_id, product_id, kind, environment, purchase_date, expires, revoked, price, currency, trial,
                billing_plan
            FROM purchases WHERE bundle_id = ? AND last_date >= ? AND purchase_date < ? ORDER BY purchase_date LIMIT ?
            """,
            [.text(bundle), .real(from.timeIntervalSince1970), .real(to.timeIntervalSince1970), .integer(Int64(limit))]
        ).map { row in
            // By position, in the order selected (a name lookup per column costs more than the rest).
            func date(_ index: Int) -> Date? { row[index].double.map(Date.init(timeIntervalSince1970:)) }
            return SubscriptionCharts.Record(
                originalTransactionID: row[0].string ?? "", productID: row[1].string ?? "",
                kind: ProductKind(rawValue: row[2].string ?? "") ?? .consumable,
                environment: Environment(rawValue: row[3].string ?? "") ?? .production,
                purchaseDate: date(4) ?? .distantPast, expiresDate: date(5), revocationDate: date(6),
                price: row[7].int64, currency: row[8].string, isTrial: row[9].int64 == 1, billingPlan: row[10].string)
        }
    }

    func purchases(bundle: String, owner: String) throws -> [PurchaseRecord] {
        try connection.execute(
            "SELECT document FROM purchases WHERE bundle_id = ? AND owner = ? ORDER BY purchase_date, transaction_id",
            [.text(bundle), .text(owner)]
        ).map { try Self.decode(PurchaseRecord.self, $0["document"]) }
    }

    func purchases(original: TransactionID) throws -> [PurchaseRecord] {
        try connection.execute(
            Self.purchasesByOriginal, [.text(original.rawValue)]
        ).map { try Self.decode(PurchaseRecord.self, $0["document"]) }
    }

    func firstOwner(original: TransactionID) throws -> String? {
        try connection.execute(Self.firstOwnerByOriginal, [.text(original.rawValue)]).first?["owner"].string
    }

    func subscription(_ originalTransactionID: TransactionID) throws -> SubscriptionRecord? {
        try connection.execute(
            Self.subscriptionByOriginal, [.text(originalTransactionID.rawValue)]
        ).first.map { try Self.decode(SubscriptionRecord.self, $0["document"]) }
    }

    func save(_ subscription: SubscriptionRecord) throws {
        try connection.executeLater(
            """
            INSERT INTO subscriptions (original_id, bundle_id, owner, document, check_due) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (original_id) DO UPDATE SET bundle_id = excluded.bundle_id, owner = excluded.owner,
            document = excluded.document, check_due = excluded.check_due
            """,
            [
                .text(subscription.originalTransactionID.rawValue), .text(subscription.bundleID.rawValue),
                text(subscription.owner),
                Self.encode(subscription),
                subscription.reconciliationDue.map { .real($0.timeIntervalSince1970) } ?? .null,
            ])
    }

    func subscriptions(bundle: String, owner: String) throws -> [SubscriptionRecord] {
        try connection.execute(
            "SELECT document FROM subscriptions WHERE bundle_id = ? AND owner = ? ORDER BY original_id",
            [.text(bundle), .text(owner)]
        ).map { try Self.decode(SubscriptionRecord.self, $0["document"]) }
    }

    func overdueSubscriptions(bundle: String, before date: Date, limit: Int) throws -> [SubscriptionRecord] {
        try connection.execute(
            "SELECT document FROM subscriptions WHERE bundle_id = ? AND check_due < ? ORDER BY check_due LIMIT ?",
            [.text(bundle), .real(date.timeIntervalSince1970), .integer(Int64(limit))]
        ).map { try Self.decode(SubscriptionRecord.self, $0["document"]) }
    }

    func lock(_ key: String) throws { try connection.lockForTransaction(key) }

    func checkpoint(_ key: String) throws -> String? {
        try connection.execute("SELECT value FROM checkpoints WHERE key = ?", [.text(key)]).first?["value"].string
    }

    func setCheckpoint(_ key: String, _ value: String) throws {
        try connection.execute(
            """
            INSERT INTO checkpoints (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value
            """, [.text(key), .text(value)])
    }

    func checkpoints(prefix: String, limit: Int) throws -> [(key: String, value: String)] {
        try connection.execute(
            "SELECT key, value FROM checkpoints WHERE substr(key, 1, CAST(? AS INTEGER)) = ? ORDER BY key LIMIT ?",
            [.integer(Int64(prefix.unicodeScalars.count)), .text(prefix), .integer(Int64(max(0, limit)))]
        ).compactMap { row in row["key"].string.map { ($0, row["value"].string ?? "") } }
    }

    func removeCheckpoint(_ key: String) throws {
        try connection.execute("DELETE FROM checkpoints WHERE key = ?", [.text(key)])
    }
}

/// Records as JSON documents written by ``JSONWriter``, dates in epoch milliseconds with their fraction (as
/// Foundation's `.millisecondsSince1970` wrote the documents stored before, which read back the same).
package enum SQLDocuments {
    package static let encoder = JSONValueEncoder { value in
        (value as? Date).map { .double(EpochMilliseconds.fractional($0)) }
    }
    package static let decoder = JSONValueDecoder { type, json in
        guard type == Date.self else { return nil }
        guard let milliseconds = json.doubleValue, let date = EpochMilliseconds.date(stored: milliseconds) else {
            throw ServerStorageError(message: "a stored date is not milliseconds since 1970: \(json)")
        }
        return date
    }
}
