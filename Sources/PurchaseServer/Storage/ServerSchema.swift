import StorekeeperSQL

/// The purchase server's schema, declared once for both SQL backends.
///
/// `current(_:)` is what a new database is made with: every table, column and index as the server uses
/// them today, written once, with the few places the dialects differ named in ``Dialect``. Each backend's
/// `migrations` are the path its existing databases took to the same place; their steps are recorded by id
/// in those databases and never change. A database with none of it applied gets `current` and every
/// history id recorded; one with part of it goes on through the history. `SchemaParityTests` checks
/// that both routes, on both backends, end with the same tables, columns and indexes.
///
/// A later change is one migration, written here once with the dialect's names, appended to both lists,
/// and made in `current` too.
enum ServerSchema {
    /// Where SQLite and PostgreSQL differ in what the server needs.
    struct Dialect: Sendable {
        /// Seconds since 1970 as a float.
        var real: String
        /// A record's bytes.
        var blob: String
        var integer: String
        /// An increasing row position, the table's key.
        var position: String
        /// A covering index on `key` that also holds `carried` (PostgreSQL's `INCLUDE`; SQLite puts them in
        /// the key).
        var covering: @Sendable (_ name: String, _ table: String, _ key: String, _ carried: String) -> String
        /// Tables only this backend needs, with why in a comment.
        var only: String

        static let sqlite = Dialect(
            real: "REAL", blob: "BLOB", integer: "INTEGER", position: "INTEGER PRIMARY KEY AUTOINCREMENT",
            covering: { name, table, key, carried in "CREATE INDEX \(name) ON \(table) (\(key), \(carried));" },
            only: "")

        static let postgres = Dialect(
            real: "DOUBLE PRECISION", blob: "BYTEA", integer: "BIGINT",
            position: "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            covering: { name, table, key, carried in
                "CREATE INDEX \(name) ON \(table) (\(key)) INCLUDE (\(carried));"
            },
            // Many processes take from one App Store Server API budget under a row lock; one SQLite process
            // keeps its budgets among its checkpoints.
            only: """
                CREATE TABLE request_budgets (
                    key TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL
                );
                \(ServerSchema.subscriberChanges)
                \(ServerSchema.uncompressedInputs)
                \(ServerSchema.cacheReaders)
                """)
    }

    /// Every table and index, as they are today.
    /// Retention Messaging's answers (SQLite migration 009, PostgreSQL 005): kept as they were added.
    static func retentionAnswers(_ d: Dialect) -> String {
        """
        CREATE TABLE retention_answers (
            request_id TEXT PRIMARY KEY, bundle_id TEXT NOT NULL, original_id TEXT NOT NULL, environment TEXT NOT NULL,
            date \(d.real) NOT NULL, answer TEXT NOT NULL, rule TEXT, cancelled \(d.real)
        );
        CREATE INDEX retention_answers_by_date ON retention_answers (bundle_id, date);
        CREATE INDEX retention_answers_by_original ON retention_answers (original_id, date);
        """
    }

    /// A count of changes to each user's records (SQLite migration 010, PostgreSQL 006): processes sharing
    /// the state keep a user's answers while it stays the same.
    static func subscriberVersions(_ d: Dialect) -> String {
        "ALTER TABLE subscribers ADD COLUMN version \(d.integer) NOT NULL DEFAULT 0;"
    }

    /// PostgreSQL only (migration 007): the transaction that last changed each user. Processes sharing the
    /// database ask which users transactions since their last asking changed, and drop what they keep of
    /// them (`PostgresServerStorage.subscriberChanges(since:)`).
    static let subscriberChanges = """
        ALTER TABLE subscribers ADD COLUMN changed xid8;
        CREATE INDEX subscribers_by_change ON subscribers (changed);
        """

    /// PostgreSQL only (migration 008): raw inputs are kept out of line and never compressed. A V2
    /// notification is ~14 KB of base64url that pglz shrinks little, and trying cost a fifth of PostgreSQL's
    /// CPU while ingesting notifications. (SQLite compresses nothing.)
    static let uncompressedInputs = "ALTER TABLE inputs ALTER COLUMN body SET STORAGE EXTERNAL;"

    /// PostgreSQL only (migration 010): the processes answering reads from memory, each with the last asking
    /// it applied, the last asking that ran for it and the end of its lease (microseconds since 1970 on
    /// PostgreSQL's clock). A write is
    /// answered once every live reader applied an asking that began after the write committed
    /// (`ChangeFollower`).
    static let cacheReaders = """
        CREATE TABLE cache_readers (
            reader TEXT PRIMARY KEY, applied BIGINT, last_asked BIGINT NOT NULL, lease_until BIGINT NOT NULL
        );
        """

    /// A subscription's purchases in the order they were made (SQLite migration 012, PostgreSQL 011): the
    /// first owner of an original purchase (read at every notification) and its purchases in order come
    /// from the index in that order. On `(original_id)` alone each sorted them in a temporary b-tree, even
    /// over none: the first owner's read 5–6 µs of the SQLite writer's CPU a notification in `bench serve
    /// --statements` (one purchase a subscription), 1.4 now; with 60 purchases, 21 µs before and 5 now.
    static let purchasesByOriginalInOrder = """
        DROP INDEX purchases_by_original;
        CREATE INDEX purchases_by_original ON purchases (original_id, purchase_date, transaction_id);
        """

    /// The JWS headers compact raw inputs name (SQLite migration 011, PostgreSQL 009; `StoredInput`).
    static func signingHeaders(_ d: Dialect) -> String {
        "CREATE TABLE signing_headers (fingerprint TEXT PRIMARY KEY, header \(d.blob) NOT NULL);"
    }

    static func current(_ d: Dialect) -> String {
        """
        CREATE TABLE subscribers (
            bundle_id TEXT NOT NULL, app_user_id TEXT NOT NULL, document \(d.blob) NOT NULL,
            version \(d.integer) NOT NULL DEFAULT 0, PRIMARY KEY (bundle_id, app_user_id)
        );
        CREATE TABLE account_tokens (
            bundle_id TEXT NOT NULL, token TEXT NOT NULL, app_user_id TEXT NOT NULL, PRIMARY KEY (bundle_id, token)
        );
        CREATE TABLE aliases (
            bundle_id TEXT NOT NULL, alias TEXT NOT NULL, app_user_id TEXT NOT NULL, PRIMARY KEY (bundle_id, alias)
        );
        CREATE TABLE purchases (
            transaction_id TEXT PRIMARY KEY, original_id TEXT NOT NULL, bundle_id TEXT NOT NULL, owner TEXT,
            purchase_date \(d.real) NOT NULL, document \(d.blob) NOT NULL,
            -- What charts read, beside the document.
            product_id TEXT, kind TEXT, environment TEXT, expires \(d.real), revoked \(d.real), last_date \(d.real),
            price \(d.integer), currency TEXT, trial \(d.integer), billing_plan TEXT
        );
        CREATE INDEX purchases_by_owner ON purchases (bundle_id, owner, purchase_date);
        CREATE INDEX purchases_by_original ON purchases (original_id, purchase_date, transaction_id);
        -- Covering: a chart reads the index alone, never the documents beside it.
        \(d.covering(
            "purchases_by_last_date", "purchases", "bundle_id, last_date",
            "purchase_date, original_id, product_id, kind, environment, expires, revoked, price, currency, trial, "
                + "billing_plan"))
        CREATE TABLE subscriptions (
            original_id TEXT PRIMARY KEY, bundle_id TEXT NOT NULL, owner TEXT, document \(d.blob) NOT NULL,
            check_due \(d.real)
        );
        CREATE INDEX subscriptions_by_owner ON subscriptions (bundle_id, owner);
        CREATE INDEX subscriptions_check_due ON subscriptions (bundle_id, check_due) WHERE check_due IS NOT NULL;
        \(retentionAnswers(d))
        CREATE TABLE checkpoints (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE ledger (
            transaction_id TEXT NOT NULL, reason TEXT NOT NULL, product_id TEXT NOT NULL,
            quantity \(d.integer) NOT NULL, date \(d.real) NOT NULL, PRIMARY KEY (transaction_id, reason)
        );
        CREATE TABLE grants (
            bundle_id TEXT NOT NULL, owner TEXT NOT NULL, entitlement TEXT NOT NULL, document \(d.blob) NOT NULL,
            PRIMARY KEY (bundle_id, owner, entitlement)
        );
        CREATE TABLE events (
            position \(d.position), id TEXT NOT NULL UNIQUE, bundle_id TEXT NOT NULL, owner TEXT,
            original_id TEXT, document \(d.blob) NOT NULL
        );
        CREATE INDEX events_by_owner ON events (bundle_id, owner, position);
        CREATE INDEX events_by_original ON events (original_id, position);
        CREATE TABLE inputs (
            position \(d.position), key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, received \(d.real) NOT NULL,
            body \(d.blob) NOT NULL
        );
        CREATE TABLE deliveries (
            position \(d.position), id TEXT NOT NULL UNIQUE, state TEXT NOT NULL, next_attempt \(d.real),
            document \(d.blob) NOT NULL
        );
        CREATE INDEX deliveries_due ON deliveries (next_attempt) WHERE state = 'pending';
        \(signingHeaders(d))
        \(d.only)
        """
    }
}
