import Foundation
import StorekeeperSQLite

/// The purchase server's state in SQLite (WAL, `synchronous=FULL`): one row per subscriber, transaction,
/// subscription, ledger entry, grant, event, raw input and webhook delivery, each record kept as JSON beside
/// the columns its queries use. A write touches only its rows, in one transaction.
public struct SQLiteServerStorage: ServerStorage {
    private let database: Database

    static let migrations = [
        Migration(
            "001-purchase-server",
            """
            CREATE TABLE subscribers (
                bundle_id TEXT NOT NULL, app_user_id TEXT NOT NULL, document BLOB NOT NULL,
                PRIMARY KEY (bundle_id, app_user_id)
            );
            CREATE TABLE account_tokens (
                bundle_id TEXT NOT NULL, token TEXT NOT NULL, app_user_id TEXT NOT NULL, PRIMARY KEY (bundle_id, token)
            );
            CREATE TABLE purchases (
                transaction_id TEXT PRIMARY KEY, original_id TEXT NOT NULL, bundle_id TEXT NOT NULL, owner TEXT,
                purchase_date REAL NOT NULL, document BLOB NOT NULL
            );
            CREATE INDEX purchases_by_owner ON purchases (bundle_id, owner, purchase_date);
            CREATE INDEX purchases_by_original ON purchases (original_id);
            CREATE TABLE subscriptions (
                original_id TEXT PRIMARY KEY, bundle_id TEXT NOT NULL, owner TEXT, document BLOB NOT NULL
            );
            CREATE INDEX subscriptions_by_owner ON subscriptions (bundle_id, owner);
            CREATE TABLE ledger (
                transaction_id TEXT NOT NULL, reason TEXT NOT NULL, product_id TEXT NOT NULL,
                quantity INTEGER NOT NULL, date REAL NOT NULL, PRIMARY KEY (transaction_id, reason)
            );
            CREATE TABLE grants (
                bundle_id TEXT NOT NULL, owner TEXT NOT NULL, entitlement TEXT NOT NULL, document BLOB NOT NULL,
                PRIMARY KEY (bundle_id, owner, entitlement)
            );
            CREATE TABLE events (
                position INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, bundle_id TEXT NOT NULL,
                owner TEXT, original_id TEXT, document BLOB NOT NULL
            );
            CREATE INDEX events_by_owner ON events (bundle_id, owner, position);
            CREATE INDEX events_by_original ON events (original_id, position);
            CREATE TABLE inputs (
                position INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
                received REAL NOT NULL, body BLOB NOT NULL
            );
            CREATE TABLE deliveries (
                position INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, state TEXT NOT NULL,
                next_attempt REAL, document BLOB NOT NULL
            );
            CREATE INDEX deliveries_due ON deliveries (next_attempt) WHERE state = 'pending';
            """),
        Migration(
            "002-aliases",
            """
            CREATE TABLE aliases (
                bundle_id TEXT NOT NULL, alias TEXT NOT NULL, app_user_id TEXT NOT NULL, PRIMARY KEY (bundle_id, alias)
            );
            """),
        Migration(
            "003-reconciliation",
            """
            ALTER TABLE subscriptions ADD COLUMN status INTEGER;
            ALTER TABLE subscriptions ADD COLUMN expires REAL;
            ALTER TABLE subscriptions ADD COLUMN renewal_signed REAL;
            CREATE INDEX subscriptions_overdue ON subscriptions (bundle_id, expires) WHERE status = 1;
            CREATE TABLE checkpoints (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """),
    ]

    public init(path: String) async throws {
        if path != ":memory:" {
            let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            if descriptor >= 0 { close(descriptor) }
        }
        database = try Database(path: path)
        try await database.migrate(Self.migrations)
    }

    public func read<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T {
        try await database.read { try body(Store(connection: $0)) }
    }

    /// Writes wait for one another's commit: concurrent inputs share one fsync (group commit).
    public func write<T: Sendable>(_ body: @escaping @Sendable (any ServerStore) throws -> T) async throws -> T {
        try await database.writeGrouped { try body(Store(connection: $0)) }
    }

    struct Store: ServerStore {
        let connection: Connection

        static func encode<T: Encodable>(_ value: T) throws -> SQLValue {
            .blob(Array(try Self.encoder.encode(value)))
        }
        static func decode<T: Decodable>(_ type: T.Type, _ value: SQLValue) throws -> T {
            guard let bytes = value.bytes else { throw ServerStorageError(message: "a stored record is missing") }
            return try Self.decoder.decode(type, from: Data(bytes))
        }
        static let encoder: JSONEncoder = {
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .millisecondsSince1970
            return encoder
        }()
        static let decoder: JSONDecoder = {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .millisecondsSince1970
            return decoder
        }()

        private func text(_ value: String?) -> SQLValue { value.map(SQLValue.text) ?? .null }

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
                    "SELECT app_user_id FROM account_tokens WHERE bundle_id = ? AND token = ?",
                    [.text(bundle), .text(appAccountToken.lowercased())]
                ).first?["app_user_id"].string
            else { return nil }
            return try subscriber(bundle: bundle, appUserID: user)
        }

        func save(_ subscriber: Subscriber) throws {
            try connection.execute(
                "INSERT OR REPLACE INTO subscribers (bundle_id, app_user_id, document) VALUES (?, ?, ?)",
                [.text(subscriber.bundleID), .text(subscriber.appUserID), try Self.encode(subscriber)])
            for token in subscriber.appAccountTokens {
                try connection.execute(
                    "INSERT OR REPLACE INTO account_tokens (bundle_id, token, app_user_id) VALUES (?, ?, ?)",
                    [.text(subscriber.bundleID), .text(token.lowercased()), .text(subscriber.appUserID)])
            }
        }

        func user(bundle: String, alias: String) throws -> String? {
            try connection.execute(
                "SELECT app_user_id FROM aliases WHERE bundle_id = ? AND alias = ?", [.text(bundle), .text(alias)]
            ).first?["app_user_id"].string
        }

        func saveAlias(bundle: String, alias: String, user: String) throws {
            try connection.execute(
                "INSERT OR REPLACE INTO aliases (bundle_id, alias, app_user_id) VALUES (?, ?, ?)",
                [.text(bundle), .text(alias), .text(user)])
        }

        // MARK: Purchases and subscriptions

        func purchase(_ transactionID: String) throws -> PurchaseRecord? {
            try connection.execute("SELECT document FROM purchases WHERE transaction_id = ?", [.text(transactionID)])
                .first.map { try Self.decode(PurchaseRecord.self, $0["document"]) }
        }

        func save(_ purchase: PurchaseRecord) throws {
            try connection.execute(
                """
                INSERT OR REPLACE INTO purchases (transaction_id, original_id, bundle_id, owner, purchase_date, document)
                VALUES (?, ?, ?, ?, ?, ?)
                """,
                [
                    .text(purchase.transactionID), .text(purchase.originalTransactionID), .text(purchase.bundleID),
                    text(purchase.owner), .real(purchase.purchaseDate.timeIntervalSince1970), try Self.encode(purchase),
                ])
        }

        func purchases(bundle: String, owner: String) throws -> [PurchaseRecord] {
            try connection.execute(
                "SELECT document FROM purchases WHERE bundle_id = ? AND owner = ? ORDER BY purchase_date, transaction_id",
                [.text(bundle), .text(owner)]
            ).map { try Self.decode(PurchaseRecord.self, $0["document"]) }
        }

        func purchases(original: String) throws -> [PurchaseRecord] {
            try connection.execute(
                "SELECT document FROM purchases WHERE original_id = ? ORDER BY purchase_date, transaction_id",
                [.text(original)]
            ).map { try Self.decode(PurchaseRecord.self, $0["document"]) }
        }

        func subscription(_ originalTransactionID: String) throws -> SubscriptionRecord? {
            try connection.execute(
                "SELECT document FROM subscriptions WHERE original_id = ?", [.text(originalTransactionID)]
            ).first.map { try Self.decode(SubscriptionRecord.self, $0["document"]) }
        }

        func save(_ subscription: SubscriptionRecord) throws {
            try connection.execute(
                """
                INSERT OR REPLACE INTO subscriptions (original_id, bundle_id, owner, document, status, expires,
                    renewal_signed) VALUES (?, ?, ?, ?, ?, ?, ?)
                """,
                [
                    .text(subscription.originalTransactionID), .text(subscription.bundleID), text(subscription.owner),
                    try Self.encode(subscription), .integer(subscription.status),
                    subscription.expiresDate.map { .real($0.timeIntervalSince1970) } ?? .null,
                    subscription.renewalSignedDate.map { .real($0.timeIntervalSince1970) } ?? .null,
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
                """
                SELECT document FROM subscriptions WHERE bundle_id = ? AND status = 1 AND expires < ?
                AND (renewal_signed IS NULL OR renewal_signed < expires) ORDER BY expires LIMIT ?
                """, [.text(bundle), .real(date.timeIntervalSince1970), .integer(Int64(limit))]
            ).map { try Self.decode(SubscriptionRecord.self, $0["document"]) }
        }

        func checkpoint(_ key: String) throws -> String? {
            try connection.execute("SELECT value FROM checkpoints WHERE key = ?", [.text(key)]).first?["value"].string
        }

        func setCheckpoint(_ key: String, _ value: String) throws {
            try connection.execute(
                "INSERT OR REPLACE INTO checkpoints (key, value) VALUES (?, ?)", [.text(key), .text(value)])
        }

        // MARK: Ledger and grants

        func append(_ entry: LedgerEntry) throws -> Bool {
            try connection.execute(
                """
                INSERT OR IGNORE INTO ledger (transaction_id, reason, product_id, quantity, date) VALUES (?, ?, ?, ?, ?)
                """,
                [
                    .text(entry.transactionID), .text(entry.reason.rawValue), .text(entry.productID),
                    .integer(Int64(entry.quantity)), .real(entry.date.timeIntervalSince1970),
                ])
            return connection.changes > 0
        }

        func balances(bundle: String, owner: String) throws -> [String: Int] {
            var result: [String: Int] = [:]
            for row in try connection.execute(
                """
                SELECT ledger.product_id AS product, sum(ledger.quantity) AS total FROM ledger
                JOIN purchases ON purchases.transaction_id = ledger.transaction_id
                WHERE purchases.bundle_id = ? AND purchases.owner = ? GROUP BY ledger.product_id
                """, [.text(bundle), .text(owner)])
            {
                if let product = row["product"].string { result[product] = Int(row["total"].int64 ?? 0) }
            }
            return result
        }

        func grants(bundle: String, owner: String) throws -> [Grant] {
            try connection.execute(
                "SELECT document FROM grants WHERE bundle_id = ? AND owner = ? ORDER BY entitlement",
                [.text(bundle), .text(owner)]
            ).map { try Self.decode(Grant.self, $0["document"]) }
        }

        func save(_ grant: Grant, bundle: String, owner: String) throws {
            try connection.execute(
                "INSERT OR REPLACE INTO grants (bundle_id, owner, entitlement, document) VALUES (?, ?, ?, ?)",
                [.text(bundle), .text(owner), .text(grant.entitlement), try Self.encode(grant)])
        }

        // MARK: Events and inputs

        func append(_ event: ServerEvent) throws -> Bool {
            try connection.execute(
                "INSERT OR IGNORE INTO events (id, bundle_id, owner, original_id, document) VALUES (?, ?, ?, ?, ?)",
                [
                    .text(event.id), .text(event.bundleID), text(event.appUserID), text(event.originalTransactionID),
                    try Self.encode(event),
                ])
            return connection.changes > 0
        }

        func events(bundle: String, owner: String, after position: Int64?, limit: Int) throws -> [(
            position: Int64, event: ServerEvent
        )] {
            try connection.execute(
                """
                SELECT position, document FROM events WHERE bundle_id = ? AND position > ? AND (owner = ? OR original_id IN
                    (SELECT original_id FROM purchases WHERE bundle_id = ? AND owner = ?))
                ORDER BY position LIMIT ?
                """,
                [
                    .text(bundle), .integer(position ?? 0), .text(owner), .text(bundle), .text(owner),
                    .integer(Int64(limit)),
                ]
            ).map { ($0["position"].int64 ?? 0, try Self.decode(ServerEvent.self, $0["document"])) }
        }

        func claimOwnerlessEvents(original: String, owner: String) throws -> [ServerEvent] {
            var claimed: [ServerEvent] = []
            for row in try connection.execute(
                "SELECT position, document FROM events WHERE original_id = ? AND owner IS NULL ORDER BY position",
                [.text(original)])
            {
                var event = try Self.decode(ServerEvent.self, row["document"])
                event.appUserID = owner
                try connection.execute(
                    "UPDATE events SET owner = ?, document = ? WHERE position = ?",
                    [.text(owner), try Self.encode(event), row["position"]])
                claimed.append(event)
            }
            return claimed
        }

        func recordInput(key: String, kind: String, body: [UInt8], received: Date) throws -> Bool {
            try connection.execute(
                "INSERT OR IGNORE INTO inputs (key, kind, received, body) VALUES (?, ?, ?, ?)",
                [.text(key), .text(kind), .real(received.timeIntervalSince1970), .blob(body)])
            return connection.changes > 0
        }

        func inputCount() throws -> Int {
            Int(try connection.execute("SELECT count(*) AS n FROM inputs").first?["n"].int64 ?? 0)
        }

        // MARK: Deliveries

        func insert(_ delivery: WebhookDelivery) throws -> Bool {
            try connection.execute(
                "INSERT OR IGNORE INTO deliveries (id, state, next_attempt, document) VALUES (?, ?, ?, ?)",
                [
                    .text(delivery.id), .text(delivery.state.rawValue),
                    delivery.nextAttempt.map { .real($0.timeIntervalSince1970) } ?? .null, try Self.encode(delivery),
                ])
            return connection.changes > 0
        }

        func update(_ delivery: WebhookDelivery) throws {
            try connection.execute(
                "UPDATE deliveries SET state = ?, next_attempt = ?, document = ? WHERE id = ?",
                [
                    .text(delivery.state.rawValue),
                    delivery.nextAttempt.map { .real($0.timeIntervalSince1970) } ?? .null,
                    try Self.encode(delivery), .text(delivery.id),
                ])
            guard connection.changes > 0 else { throw ServerStorageError.missing("delivery") }
        }

        func dueDeliveries(until time: Date, limit: Int) throws -> [WebhookDelivery] {
            try connection.execute(
                """
                SELECT document FROM deliveries WHERE state = 'pending' AND next_attempt <= ?
                ORDER BY next_attempt, position LIMIT ?
                """, [.real(time.timeIntervalSince1970), .integer(Int64(limit))]
            ).map { try Self.decode(WebhookDelivery.self, $0["document"]) }
        }

        func nextDeliveryDue() throws -> Date? {
            try connection.execute("SELECT min(next_attempt) AS due FROM deliveries WHERE state = 'pending'").first?[
                "due"
            ].double.map(Date.init(timeIntervalSince1970:))
        }

        func deliveries(after position: Int64?, limit: Int) throws -> [(position: Int64, delivery: WebhookDelivery)] {
            try connection.execute(
                "SELECT position, document FROM deliveries WHERE position > ? ORDER BY position LIMIT ?",
                [.integer(position ?? 0), .integer(Int64(limit))]
            ).map { ($0["position"].int64 ?? 0, try Self.decode(WebhookDelivery.self, $0["document"])) }
        }

        func pendingDeliveryCount() throws -> Int {
            Int(
                try connection.execute("SELECT count(*) AS n FROM deliveries WHERE state = 'pending'").first?["n"].int64
                    ?? 0)
        }
    }
}
