public import Foundation
import StoreModel
import StoreTime
import StorekeeperJSON
import StorekeeperLogging
import StorekeeperPostgres
public import StorekeeperSQL
import Synchronization

/// The purchase server's state in PostgreSQL, shared by any number of server processes.
///
/// Writes are `READ COMMITTED` transactions that take a transaction-level advisory lock for each record
/// they read to change (``ServerStore/lock(_:)``: the subscription's original transaction, the user), so
/// processes applying inputs for the same subscription or user give the result of one after the other
/// while the rest run side by side; a deadlock between two of them (40P01) runs the loser again. Inputs,
/// events, ledger entries and deliveries are deduplicated by unique keys (`ON CONFLICT DO NOTHING` waits
/// for a concurrent insert of the same key and then sees it). Serializable transactions were measured
/// first: with distinct subscribers more than half of them failed on predicate locks of shared index pages. Deliveries are claimed with
/// `FOR UPDATE SKIP LOCKED`; background tasks are led by whoever holds their advisory lock.
public final class PostgresServerStorage: ServerStorage {
    let database: PostgresDatabase
    let signingHeaders = SigningHeaders()
    /// Writes of updates waiting to run together (``write(ahead:_:)``).
    let grouped = Mutex(GroupQueue())
    /// Writes of updates run together at most (each one statement set of reads, a lock and its writes).
    static let groupLimit = 32
    /// Groups run at once, each on a connection of the pool: one for every two cores (a group's round trips
    /// are PostgreSQL's work, its bodies this process's: one runner keeps a core of each busy), and at
    /// most half the pool, the rest staying for other work. More runners made smaller groups at the same
    /// rate, and more processes slower than one (measured on two cores: docs/performance-log.md).
    let groupRunners: Int
    /// While the machine is busy and writes come from several callers, a runner waits up to 2 ms for 16 writes
    /// before it takes a group: with four processes on two cores, groups of 6 writes became 9 to 10, and
    /// PostgreSQL's work a notification fell with their number (docs/performance-log.md).
    let gathering: GroupGathering
    /// Groups that failed and ran their writes one by one.
    let groupsRunApart = Atomic<Int>(0)
    public let location: String

    /// The path existing databases took to ``ServerSchema/current(_:)`` (new ones get that at once).
    static let migrations = [
        Migration(
            "001-purchase-server",
            """
            CREATE TABLE subscribers (
                bundle_id TEXT NOT NULL, app_user_id TEXT NOT NULL, document BYTEA NOT NULL,
                PRIMARY KEY (bundle_id, app_user_id)
            );
            CREATE TABLE account_tokens (
                bundle_id TEXT NOT NULL, token TEXT NOT NULL, app_user_id TEXT NOT NULL, PRIMARY KEY (bundle_id, token)
            );
            CREATE TABLE aliases (
                bundle_id TEXT NOT NULL, alias TEXT NOT NULL, app_user_id TEXT NOT NULL, PRIMARY KEY (bundle_id, alias)
            );
            CREATE TABLE purchases (
                transaction_id TEXT PRIMARY KEY, original_id TEXT NOT NULL, bundle_id TEXT NOT NULL, owner TEXT,
                purchase_date DOUBLE PRECISION NOT NULL, document BYTEA NOT NULL
            );
            CREATE INDEX purchases_by_owner ON purchases (bundle_id, owner, purchase_date);
            CREATE INDEX purchases_by_original ON purchases (original_id);
            CREATE TABLE subscriptions (
                original_id TEXT PRIMARY KEY, bundle_id TEXT NOT NULL, owner TEXT, document BYTEA NOT NULL,
                check_due DOUBLE PRECISION
            );
            CREATE INDEX subscriptions_by_owner ON subscriptions (bundle_id, owner);
            CREATE INDEX subscriptions_check_due ON subscriptions (bundle_id, check_due) WHERE check_due IS NOT NULL;
            CREATE TABLE checkpoints (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE ledger (
                transaction_id TEXT NOT NULL, reason TEXT NOT NULL, product_id TEXT NOT NULL,
                quantity BIGINT NOT NULL, date DOUBLE PRECISION NOT NULL, PRIMARY KEY (transaction_id, reason)
            );
            CREATE TABLE grants (
                bundle_id TEXT NOT NULL, owner TEXT NOT NULL, entitlement TEXT NOT NULL, document BYTEA NOT NULL,
                PRIMARY KEY (bundle_id, owner, entitlement)
            );
            CREATE TABLE events (
                position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id TEXT NOT NULL UNIQUE,
                bundle_id TEXT NOT NULL, owner TEXT, original_id TEXT, document BYTEA NOT NULL
            );
            CREATE INDEX events_by_owner ON events (bundle_id, owner, position);
            CREATE INDEX events_by_original ON events (original_id, position);
            CREATE TABLE inputs (
                position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key TEXT NOT NULL UNIQUE,
                kind TEXT NOT NULL, received DOUBLE PRECISION NOT NULL, body BYTEA NOT NULL
            );
            CREATE TABLE deliveries (
                position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id TEXT NOT NULL UNIQUE,
                state TEXT NOT NULL, next_attempt DOUBLE PRECISION, document BYTEA NOT NULL
            );
            CREATE INDEX deliveries_due ON deliveries (next_attempt) WHERE state = 'pending';
            CREATE TABLE request_budgets (
                key TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL
            );
            """),
        Migration("002-charts", "CREATE INDEX purchases_by_date ON purchases (bundle_id, purchase_date);"),
        // What charts read, as columns (the documents of rows stored before are read once at open).
        Migration(
            "003-chart-columns",
            """
            ALTER TABLE purchases ADD COLUMN product_id TEXT;
            ALTER TABLE purchases ADD COLUMN kind TEXT;
            ALTER TABLE purchases ADD COLUMN environment TEXT;
            ALTER TABLE purchases ADD COLUMN expires DOUBLE PRECISION;
            ALTER TABLE purchases ADD COLUMN revoked DOUBLE PRECISION;
            ALTER TABLE purchases ADD COLUMN last_date DOUBLE PRECISION;
            ALTER TABLE purchases ADD COLUMN price BIGINT;
            ALTER TABLE purchases ADD COLUMN currency TEXT;
            ALTER TABLE purchases ADD COLUMN trial BIGINT;
            DROP INDEX purchases_by_date;
            -- Covering: a chart reads the index alone, never the documents beside it.
            CREATE INDEX purchases_by_last_date ON purchases (bundle_id, last_date) INCLUDE (
                purchase_date, original_id, product_id, kind, environment, expires, revoked, price, currency, trial
            );
            """),
        // A month billed over a commitment counts by its own price (MRR): the plan is a chart column too.
        Migration(
            "004-billing-plan",
            """
            ALTER TABLE purchases ADD COLUMN billing_plan TEXT;
            DROP INDEX purchases_by_last_date;
            CREATE INDEX purchases_by_last_date ON purchases (bundle_id, last_date) INCLUDE (
                purchase_date, original_id, product_id, kind, environment, expires, revoked, price, currency, trial,
                billing_plan
            );
            """),
        Migration("005-retention-answers", ServerSchema.retentionAnswers(.postgres)),
        Migration("006-subscriber-versions", ServerSchema.subscriberVersions(.postgres)),
        Migration("007-subscriber-changes", ServerSchema.subscriberChanges),
        Migration("008-inputs-uncompressed", ServerSchema.uncompressedInputs),
        Migration("009-signing-headers", ServerSchema.signingHeaders(.postgres)),
        Migration("010-cache-readers", ServerSchema.cacheReaders),
        Migration("011-purchases-by-original-in-order", ServerSchema.purchasesByOriginalInOrder),
    ]

    /// Connects to `url` (`postgres://…`), keeps up to `poolSize` connections and applies the migrations.
    public convenience init(url: String, poolSize: Int = 8) async throws {
        try await self.init(url: url, poolSize: poolSize, replayingHistory: false)
    }

    /// `replayingHistory`: a new database goes through every migration rather than getting the current
    /// schema at once (as databases made by earlier builds did; the schema tests compare both).
    /// `gathering`: how groups of writes gather (``GroupGathering``; tests give their own).
    package init(
        url: String, poolSize: Int, replayingHistory: Bool,
        gathering: GroupGathering = .whenSaturated(maxDelay: .milliseconds(2), target: 16)
    ) async throws {
        self.gathering = gathering
        location = PostgresDatabase.redacted(url)
        database = try PostgresDatabase(url: url, poolSize: poolSize)
        groupRunners = max(1, min(poolSize / 2, ProcessInfo.processInfo.activeProcessorCount / 2))
        try await database.migrate(
            Self.migrations, baseline: replayingHistory ? nil : ServerSchema.current(.postgres))
        while try await database.write({ try SQLServerStore(connection: $0).backfillChartColumns(limit: 5_000) }) > 0 {}
    }

    public var isShared: Bool { true }

    /// Writes run again (after a deadlock or a lost connection), so far in this process.
    public var retries: Int { database.retries }
    /// Times this process's reads and writes waited for PostgreSQL.
    public var roundTrips: Int { database.roundTrips }

    public func read<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T {
        try await database.read { try body(SQLServerStore(connection: $0)) }
    }

    public func readStatement<T: Sendable>(_ body: @Sendable (any ServerStore) throws -> T) async throws -> T {
        try await database.readStatement { try body(SQLServerStore(connection: $0)) }
    }

    public func write<T: Sendable>(_ body: @escaping @Sendable (any ServerStore) throws -> T) async throws -> T {
        writeCounter.ran(writes: 1)
        return try await signingHeaders.tracking { headers in
            try await database.lockingWrite { try body(SQLServerStore(connection: $0, headers: headers)) }
        }
    }

    public var writeCounts: WriteCounts? { writeCounter.counts }
    /// Counted as each write or group is sent, before its transaction begins (one that cannot begin is counted
    /// too; a write PostgreSQL runs again after a conflict counts once). Every write goes through `write`,
    /// a group, or one of the claims and budgets below, each counted where it starts.
    let writeCounter = WriteCounter()

    public func subscriberChanges(since watermark: SubscriberChanges.Watermark?) async throws -> SubscriberChanges? {
        try await changes(since: watermark, reporting: nil)
    }

    public func subscriberChanges(
        since watermark: SubscriberChanges.Watermark?, reporting report: CacheReaderReport
    ) async throws -> SubscriberChanges? {
        try await changes(since: watermark, reporting: report)
    }

    /// Microseconds since 1970 on PostgreSQL's clock, at the moment it is read.
    private static let clockMicroseconds = "(extract(epoch FROM clock_timestamp()) * 1000000)::int8"

    private func changes(since watermark: SubscriberChanges.Watermark?, reporting report: CacheReaderReport?)
        async throws -> SubscriberChanges
    {
        // Each asking that reports is a commit that waits for PostgreSQL's log flush, even one that renews
        // nothing: a commit not flushed could be lost in a crash with its transaction id, which PostgreSQL
        // could then hand out again, below a mark this process already holds (its changes never named).
        try await database.readStatement { try Self.changes(since: watermark, reporting: report, $0) }
    }

    private static func changes(
        since watermark: SubscriberChanges.Watermark?, reporting report: CacheReaderReport?,
        _ connection: PostgresConnection
    ) throws -> SubscriberChanges {
        // One statement, one snapshot: every transaction before its oldest running one has ended, and
        // those that committed are visible here; a later commit has an id at or after that one. The upper
        // bound changes no answer (a visible change's transaction is below it) but makes the condition a
        // range the planner takes to the index for (an open `>=` went to a scan of every user).
        var parameters: [SQLValue] = []
        var sql = ""
        var columns = "pg_snapshot_xmin(pg_current_snapshot())::text AS watermark"
        if let report {
            // The report, in the same statement: the lease runs from when PostgreSQL reads its clock
            // (after the process sent this), and the others' reports are those committed before this
            // snapshot. A reader that has not applied an answer yet counts as having applied nothing. A
            // lease counts as live if it ran when the statement began, before its snapshot (a reader whose
            // lease ends while a slow statement runs is still waited for).
            //
            // The lease is renewed only if the reader reports having applied the last asking that ran for
            // it (or withdraws): one whose answers are lost on the way back stops being waited for when
            // its lease ends, rather than holding every write back while it renews.
            let now = "(extract(epoch FROM statement_timestamp()) * 1000000)::int8"
            sql += """
                WITH previous AS (
                    SELECT last_asked, lease_until FROM cache_readers WHERE reader = ?
                ), renewal AS (
                    SELECT (NOT EXISTS (SELECT 1 FROM previous) OR ?::int8 = 0
                        OR ?::int8 IS NOT DISTINCT FROM (SELECT last_asked FROM previous)) AS renewed
                ), report AS (
                    INSERT INTO cache_readers AS r (reader, applied, last_asked, lease_until)
                    VALUES (
                        ?, ?::int8, \(now),
                        CASE WHEN (SELECT renewed FROM renewal) THEN \(Self.clockMicroseconds) + ?::int8
                            ELSE coalesce((SELECT lease_until FROM previous), 0) END)
                    ON CONFLICT (reader) DO UPDATE
                    SET applied = excluded.applied, last_asked = excluded.last_asked, lease_until = excluded.lease_until
                ), gone AS (
                    DELETE FROM cache_readers WHERE lease_until < \(Self.clockMicroseconds) - 3600000000 AND reader <> ?
                )

                """
            let applied = report.applied.map(SQLValue.integer) ?? .null
            let lease = SQLValue.integer(max(0, report.lease.wholeMicroseconds))
            parameters += [
                .text(report.reader), lease, applied, .text(report.reader), applied,
                lease,
            ]
            parameters.append(.text(report.reader))
            columns += """
                , \(now) AS asked, (SELECT renewed FROM renewal) AS renewed,
                (SELECT min(coalesce(applied, 0)) FROM cache_readers WHERE reader <> ? AND lease_until > \(now)) AS others
                """
            parameters.append(.text(report.reader))
        }
        if let watermark {
            sql += """
                SELECT \(columns), changed.pairs FROM (
                    SELECT json_agg(json_build_array(bundle_id, app_user_id, changed::text)) AS pairs FROM (
                        SELECT bundle_id, app_user_id, changed FROM subscribers
                        WHERE changed >= ?::xid8 AND changed < pg_snapshot_xmax(pg_current_snapshot()) LIMIT ?
                    ) AS recent
                ) AS changed
                """
            parameters += [.text(watermark.value), .integer(Int64(SubscriberChanges.limit + 1))]
        } else {
            sql += "SELECT \(columns)"
        }
        let rows = try connection.execute(sql, parameters)
        guard let row = rows.first, let value = row["watermark"].string else {
            throw ServerStorageError(message: "PostgreSQL gave no snapshot")
        }
        var users: [SubscriberChanges.Pair] = []
        var marks: [String] = []
        if watermark != nil, let pairs = row["pairs"].string {
            let limits = SQLServerStore<PostgresConnection>.aggregateLimits
            guard case .array(let list) = try JSONParser.parse(Array(pairs.utf8), limits: limits) else {
                throw ServerStorageError(message: "PostgreSQL's list of changed users is not a list")
            }
            for pair in list {
                guard case .array(let parts) = pair, parts.count == 3, let bundle = parts[0].stringValue,
                    let user = parts[1].stringValue, let mark = parts[2].stringValue
                else { throw ServerStorageError(message: "PostgreSQL's list of changed users is malformed") }
                users.append(.init(bundleID: bundle, appUserID: user))
                marks.append(mark)
            }
        }
        let complete = users.count <= SubscriberChanges.limit
        var changes = SubscriberChanges(watermark: .init(value), users: complete ? users : [], complete: complete)
        changes.marks = complete ? marks : []
        if report != nil {
            guard let asked = row["asked"].int64 else {
                throw ServerStorageError(message: "PostgreSQL gave no time for the asking")
            }
            changes.askedAt = asked
            changes.othersApplied = row["others"].int64
            changes.leaseRenewed = row["renewed"] == .integer(1)
        }
        return changes
    }

    public func claimDueDeliveries(until time: Date, lease: Date, limit: Int) async throws -> [WebhookDelivery] {
        writeCounter.ran(writes: 1)
        return try await database.lockingWrite { connection in
            try connection.execute(
                """
                UPDATE deliveries SET next_attempt = ? WHERE position IN (
                    SELECT position FROM deliveries WHERE state = 'pending' AND next_attempt <= ?
                    ORDER BY next_attempt, position LIMIT ? FOR UPDATE SKIP LOCKED)
                RETURNING document
                """,
                [.real(lease.timeIntervalSince1970), .real(time.timeIntervalSince1970), .integer(Int64(limit))]
            ).map { try SQLServerStore<PostgresConnection>.decode(WebhookDelivery.self, $0["document"]) }
                .sorted { ($0.nextAttempt ?? .distantPast, $0.created) < ($1.nextAttempt ?? .distantPast, $1.created) }
        }
    }

    public func lead(_ task: String) async -> Bool {
        await database.tryLock("storekeeper:" + task)
    }

    public func takeRequest(from key: String, rate: Double, burst: Double, now: Date) async throws -> Bool {
        let time = now.timeIntervalSince1970
        writeCounter.ran(writes: 1)
        return try await database.lockingWrite { connection in
            // One statement: the row lock orders processes taking from the same budget. A taker whose clock
            // read is older than the row's (it waited for a connection, or its host's clock is behind) takes
            // what is left without a refill; the row keeps the later time, so a block stays until it passes.
            try !connection.execute(
                """
                INSERT INTO request_budgets AS b (key, tokens, updated) VALUES (?, ?, ?)
                ON CONFLICT (key) DO UPDATE
                SET tokens = LEAST(?, b.tokens + GREATEST(0, excluded.updated - b.updated) * ?) - 1,
                    updated = GREATEST(b.updated, excluded.updated)
                WHERE LEAST(?, b.tokens + GREATEST(0, excluded.updated - b.updated) * ?) >= 1
                RETURNING tokens
                """,
                [.text(key), .real(burst - 1), .real(time), .real(burst), .real(rate), .real(burst), .real(rate)]
            ).isEmpty
        }
    }

    public func blockRequests(to key: String, until date: Date) async throws {
        writeCounter.ran(writes: 1)
        _ = try await database.lockingWrite { connection in
            try connection.execute(
                """
                INSERT INTO request_budgets (key, tokens, updated) VALUES (?, 0, ?)
                ON CONFLICT (key) DO UPDATE SET tokens = 0, updated = GREATEST(request_budgets.updated, excluded.updated)
                """, [.text(key), .real(date.timeIntervalSince1970)])
        }
    }
}

extension PostgresConnection: SQLStatementRunner {
    static var readsAhead: Bool { true }
    static var readsSubscriberInOneStatement: Bool { true }
    static var marksChangingTransactions: Bool { true }

    func lockForTransaction(_ key: String) throws {
        // Sent with the next read: it runs first, and the read sees what the lock's last holder committed.
        // Once a transaction: it holds the lock until it ends (and the rows read ahead since stay).
        try executeLater("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", [.text(key)], once: true)
    }
}
