import Foundation
public import StorekeeperSQL
import StorekeeperSQLite
import Synchronization

/// The purchase server's state in SQLite (WAL, `synchronous=FULL`): one row per subscriber, transaction,
/// subscription, ledger entry, grant, event, raw input and webhook delivery, each record kept as JSON beside
/// the columns its queries use. A write touches only its rows, in one transaction.
public struct SQLiteServerStorage: ServerStorage {
    private let database: Database
    public let location: String
    private let hooks = CommitHooks()
    let signingHeaders = SigningHeaders()

    /// The path existing databases took to ``ServerSchema/current(_:)`` (new ones get that at once).
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
        Migration(
            "004-reconciliation-due",
            """
            ALTER TABLE subscriptions ADD COLUMN check_due REAL;
            -- The columns 003 added (status, expires, renewal_signed) are read here once, then no more.
            UPDATE subscriptions SET check_due = expires WHERE status = 1;
            UPDATE subscriptions SET check_due = expires + 86400 WHERE status IN (3, 4);
            CREATE INDEX subscriptions_check_due ON subscriptions (bundle_id, check_due) WHERE check_due IS NOT NULL;
            """),
        Migration("005-charts", "CREATE INDEX purchases_by_date ON purchases (bundle_id, purchase_date);"),
        // What charts read, as columns (the documents of rows stored before are read once at open).
        Migration(
            "006-chart-columns",
            """
            ALTER TABLE purchases ADD COLUMN product_id TEXT;
            ALTER TABLE purchases ADD COLUMN kind TEXT;
            ALTER TABLE purchases ADD COLUMN environment TEXT;
            ALTER TABLE purchases ADD COLUMN expires REAL;
            ALTER TABLE purchases ADD COLUMN revoked REAL;
            ALTER TABLE purchases ADD COLUMN last_date REAL;
            ALTER TABLE purchases ADD COLUMN price INTEGER;
            ALTER TABLE purchases ADD COLUMN currency TEXT;
            ALTER TABLE purchases ADD COLUMN trial INTEGER;
            DROP INDEX purchases_by_date;
            -- Covering: a chart reads the index alone, never the documents beside it.
            CREATE INDEX purchases_by_last_date ON purchases (
                bundle_id, last_date, purchase_date, original_id, product_id, kind, environment, expires, revoked,
                price, currency, trial
            );
            """),
        // The columns 003 added and 004 read once: gone, so that both backends hold the same columns
        // (SchemaParityTests).
        Migration(
            "007-drop-003-columns",
            """
            DROP INDEX IF EXISTS subscriptions_overdue;
            ALTER TABLE subscriptions DROP COLUMN status;
            ALTER TABLE subscriptions DROP COLUMN expires;
            ALTER TABLE subscriptions DROP COLUMN renewal_signed;
            """),
        // A month billed over a commitment counts by its own price (MRR): the plan is a chart column too.
        Migration(
            "008-billing-plan",
            """
            ALTER TABLE purchases ADD COLUMN billing_plan TEXT;
            DROP INDEX purchases_by_last_date;
            CREATE INDEX purchases_by_last_date ON purchases (
                bundle_id, last_date, purchase_date, original_id, product_id, kind, environment, expires, revoked,
                price, currency, trial, billing_plan
            );
            """),
        Migration("009-retention-answers", ServerSchema.retentionAnswers(.sqlite)),
        Migration("010-subscriber-versions", ServerSchema.subscriberVersions(.sqlite)),
        Migration("011-signing-headers", ServerSchema.signingHeaders(.sqlite)),
        Migration("012-purchases-by-original-in-order", ServerSchema.purchasesByOriginalInOrder),
    ]

    public init(path: String) async throws {
        try await self.init(path: path, replayingHistory: false)
    }

    /// `replayingHistory`: a new database goes through every migration rather than getting the current
    /// schema at once (as databases made by earlier builds did; the schema tests compare both).
    package init(path: String, replayingHistory: Bool) async throws {
        location = path
        let hooks = self.hooks
        database = try Database(
            path: path, gathering: .whenSaturated(maxDelay: .milliseconds(1), target: 32), afterCommit: { hooks.run() })
        try await database.migrate(
            Self.migrations, baseline: replayingHistory ? nil : ServerSchema.current(.sqlite))
        while try await database.write({ try SQLServerStore(connection: $0).backfillChartColumns(limit: 5_000) }) > 0 {}
    }

    /// Reads run on reading connections of their own (WAL), each in one snapshot, beside the writer.
    public func read<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T {
        try await database.readConcurrently { try body(SQLServerStore(connection: $0)) }
    }

    /// Reads run beside the writer, so one may read the state before a write that is between its work and
    /// its commit: `hook` tells a reader that keeps what it read when that write has committed.
    public func afterCommit(_ hook: @escaping @Sendable () -> Void) -> Bool {
        hooks.add(hook)
        return true
    }

    public var writeCounts: WriteCounts? { database.writeCounts }

    /// The CPU time the database's writer has spent in write transactions so far (``Database/writerCPU``).
    public var writerCPU: Duration { database.writerCPU }

    /// Counts each statement's cost on the writer from now on, or stops (``Database/countWriterStatements(_:)``).
    public func countWriterStatements(_ on: Bool) async { await database.countWriterStatements(on) }

    /// What each statement on the writer has cost while counted, the costliest first.
    public func writerStatementCosts() async -> [StatementCost] { await database.writerStatementCosts }

    /// Writes wait for one another's commit: concurrent inputs share one fsync (group commit).
    public func write<T: Sendable>(_ body: @escaping @Sendable (any ServerStore) throws -> T) async throws -> T {
        try await signingHeaders.tracking { headers in
            try await database.writeGrouped(repeatable: true) {
                try body(SQLServerStore(connection: $0, headers: headers))
            }
        }
    }
}

/// What runs after each write transaction of one storage.
final class CommitHooks: Sendable {
    private let hooks = Mutex<[@Sendable () -> Void]>([])
    func add(_ hook: @escaping @Sendable () -> Void) { hooks.withLock { $0.append(hook) } }
    func run() { for hook in hooks.withLock({ $0 }) { hook() } }
}

extension Connection: SQLStatementRunner {
    /// SQLite writes run one at a time: there is nothing more to hold.
    func lockForTransaction(_ key: String) {}
    /// A statement costs no round trip: nothing is read ahead.
    static var readsAhead: Bool { false }
    /// In process, six statements cost less than decoding one aggregate.
    static var readsSubscriberInOneStatement: Bool { false }
    static var marksChangingTransactions: Bool { false }
}
