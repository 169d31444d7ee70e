import Foundation
import StoreModel
import StorekeeperJSON
import StorekeeperSQL

/// The SQL store's ledger, grants, retention answers, events, raw inputs and webhook deliveries.
extension SQLServerStore {
    // MARK: Ledger and grants

    func append(_ entry: LedgerEntry) throws -> Bool {
        try connection.execute(
            """
            INSERT INTO ledger (transaction_id, reason, product_id, quantity, date) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT DO NOTHING
            """,
            [
                .text(entry.transactionID.rawValue), .text(entry.key), .text(entry.productID.rawValue),
                .integer(Int64(entry.quantity)), .real(entry.date.timeIntervalSince1970),
            ])
        return connection.changes > 0
    }

    func balances(bundle: String, owner: String) throws -> [String: Int] {
        var result: [String: Int] = [:]
        for row in try connection.execute(
            """
            SELECT ledger.product_id AS product, CAST(sum(ledger.quantity) AS BIGINT) AS total FROM ledger
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
            """
            INSERT INTO grants (bundle_id, owner, entitlement, document) VALUES (?, ?, ?, ?)
            ON CONFLICT (bundle_id, owner, entitlement) DO UPDATE SET document = excluded.document
            """,
            [.text(bundle), .text(owner), .text(grant.entitlement), try Self.encode(grant)])
    }

    // MARK: Events and inputs

    func insert(_ answer: RetentionAnswer) throws -> Bool {
        try connection.execute(
            """
            INSERT INTO retention_answers (request_id, bundle_id, original_id, environment, date, answer, rule, cancelled)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
            """,
            [
                .text(answer.requestIdentifier), .text(answer.bundleID.rawValue),
                .text(answer.originalTransactionID.rawValue), .text(answer.environment.rawValue),
                .real(answer.date.timeIntervalSince1970), .text(answer.answer), text(answer.rule),
                answer.cancelled.map { .real($0.timeIntervalSince1970) } ?? .null,
            ])
        return connection.changes > 0
    }

    func markRetentionCancelled(original: TransactionID, since: Date, until: Date, at date: Date) throws {
        try connection.execute(
            """
            UPDATE retention_answers SET cancelled = ?
            WHERE original_id = ? AND date >= ? AND date <= ? AND cancelled IS NULL
            """,
            [
                .real(date.timeIntervalSince1970), .text(original.rawValue), .real(since.timeIntervalSince1970),
                .real(until.timeIntervalSince1970),
            ])
    }

    private func retentionAnswer(_ row: Row) -> RetentionAnswer {
        RetentionAnswer(
            requestIdentifier: row["request_id"].string ?? "", bundleID: BundleID(row["bundle_id"].string ?? ""),
            originalTransactionID: TransactionID(row["original_id"].string ?? ""),
            environment: Environment(rawValue: row["environment"].string ?? "") ?? .production,
            date: Date(timeIntervalSince1970: row["date"].double ?? 0), answer: row["answer"].string ?? "",
            rule: row["rule"].string, cancelled: row["cancelled"].double.map(Date.init(timeIntervalSince1970:)))
    }

    func retentionAnswers(bundle: String, from: Date, to: Date, limit: Int) throws -> [RetentionAnswer] {
        try connection.execute(
            """
            SELECT * FROM retention_answers WHERE bundle_id = ? AND date >= ? AND date < ? ORDER BY date LIMIT ?
            """,
            [
                .text(bundle), .real(from.timeIntervalSince1970), .real(to.timeIntervalSince1970),
                .integer(Int64(max(0, limit))),
            ]
        ).map(retentionAnswer)
    }

    func retentionAnswers(original: TransactionID, limit: Int) throws -> [RetentionAnswer] {
        try connection.execute(
            "SELECT * FROM retention_answers WHERE original_id = ? ORDER BY date DESC LIMIT ?",
            [.text(original.rawValue), .integer(Int64(max(0, limit)))]
        ).reversed().map(retentionAnswer)
    }

    func append(_ event: ServerEvent) throws -> Bool {
        try connection.execute(Self.insertEvent, eventValues(event))
        return connection.changes > 0
    }

    func appendLater(_ event: ServerEvent) throws -> DeferredCount {
        try connection.executeCounted(Self.insertEvent, eventValues(event))
    }

    private static var insertEvent: String {
        """
        INSERT INTO events (id, bundle_id, owner, original_id, document) VALUES (?, ?, ?, ?, ?)
        ON CONFLICT DO NOTHING
        """
    }

    private func eventValues(_ event: ServerEvent) -> [SQLValue] {
        [
            .text(event.id), .text(event.bundleID.rawValue), text(event.appUserID),
            text(event.originalTransactionID?.rawValue), Self.encode(event),
        ]
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

    func cancellation(original: TransactionID, from: Date, through: Date) throws -> Date? {
        // An event's id starts with its type (PurchaseEngine.EventContext.event).
        try connection.execute(
            """
            SELECT document FROM events WHERE original_id = ? AND id LIKE ?
            ORDER BY position DESC LIMIT 100
            """, [.text(original.rawValue), .text(ServerEventType.cancellation.rawValue + ":%")]
        ).map { try Self.decode(ServerEvent.self, $0["document"]) }
            .filter { $0.type == .cancellation }.map(\.date).filter { $0 >= from && $0 <= through }.min()
    }

    func claimOwnerlessEvents(original: TransactionID, owner: String) throws -> [ServerEvent] {
        var claimed: [ServerEvent] = []
        for row in try connection.execute(
            "SELECT position, document FROM events WHERE original_id = ? AND owner IS NULL ORDER BY position",
            [.text(original.rawValue)])
        {
            var event = try Self.decode(ServerEvent.self, row["document"])
            event.appUserID = owner
            try connection.execute(
                "UPDATE events SET owner = ?, document = ? WHERE position = ?",
                [.text(owner), Self.encode(event), row["position"]])
            claimed.append(event)
        }
        return claimed
    }

    /// Its `RETURNING` row answers a read ahead (PostgreSQL); on SQLite the count of changes says the same,
    /// and `RETURNING` costs there: SQLite keeps the rows in a temporary table opened and closed each time
    /// (~2 µs an insert with Debian's SQLite).
    static var insertInput: String {
        Connection.readsAhead
            ? "INSERT INTO inputs (key, kind, received, body) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1"
            : "INSERT INTO inputs (key, kind, received, body) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
    }

    func recordInput(_ input: RawInput, received: Date) throws -> Bool {
        try connection.execute(Self.insertInput, try inputValues(input, received: received))
        return connection.changes > 0
    }

    /// The values of an input's insert. Its header is sent first (with the insert: one round trip on
    /// PostgreSQL, once a transaction), and is kept once: not sent at all once a write of this storage that
    /// inserted it has committed.
    func inputValues(_ input: RawInput, received: Date) throws -> [SQLValue] {
        var stored = input.body
        if let compact = input.compact {
            let fingerprint = compact.header.fingerprint
            if headers?.committed.contains(fingerprint) != true {
                try connection.executeLater(
                    "INSERT INTO signing_headers (fingerprint, header) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    [.text(fingerprint), .blob(compact.header.bytes)], once: true)
                headers?.inserted.note(fingerprint)
            }
            stored = compact.stored
        }
        return [.text(input.key), .text(input.kind), .real(received.timeIntervalSince1970), .blob(stored)]
    }

    func input(key: String) throws -> [UInt8]? {
        guard let row = try connection.execute("SELECT kind, body FROM inputs WHERE key = ?", [.text(key)]).first,
            case .blob(let stored) = row["body"]
        else { return nil }
        guard row["kind"].string == StoredInput.kind, let fingerprint = StoredInput.fingerprint(of: stored) else {
            return stored
        }
        guard
            case .blob(let header) = try connection.execute(
                "SELECT header FROM signing_headers WHERE fingerprint = ?", [.text(fingerprint)]
            ).first?["header"],
            let body = StoredInput.expand(stored, header: header)
        else { throw ServerStorageError(message: "the input \(key) names a header that is not kept") }
        return body
    }

    func inputCount() throws -> Int {
        Int(try connection.execute("SELECT count(*) AS n FROM inputs").first?["n"].int64 ?? 0)
    }

    // MARK: Deliveries

    func insert(_ delivery: WebhookDelivery) throws -> Bool {
        try connection.execute(
            "INSERT INTO deliveries (id, state, next_attempt, document) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [
                .text(delivery.id), .text(delivery.state.rawValue),
                delivery.nextAttempt.map { .real($0.timeIntervalSince1970) } ?? .null, try Self.encode(delivery),
            ])
        return connection.changes > 0
    }

    func update(_ delivery: WebhookDelivery) throws {
        guard try store(delivery, leasedUntil: nil) else { throw ServerStorageError.missing("delivery") }
    }

    func recordAttempt(_ delivery: WebhookDelivery, claimedUntil lease: Date) throws -> Bool {
        try store(delivery, leasedUntil: lease)
    }

    /// Writes the delivery's row over the stored one (only while its next attempt is `lease`, when given);
    /// whether a row was written.
    private func store(_ delivery: WebhookDelivery, leasedUntil lease: Date?) throws -> Bool {
        var values: [SQLValue] = [
            .text(delivery.state.rawValue), delivery.nextAttempt.map { .real($0.timeIntervalSince1970) } ?? .null,
            try Self.encode(delivery), .text(delivery.id),
        ]
        if let lease { values.append(.real(lease.timeIntervalSince1970)) }
        try connection.execute(
            "UPDATE deliveries SET state = ?, next_attempt = ?, document = ? WHERE id = ?"
                + (lease == nil ? "" : " AND next_attempt = ?"), values)
        return connection.changes > 0
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

    func latestDeliveries(limit: Int) throws -> [WebhookDelivery] {
        try connection.execute(
            "SELECT document FROM deliveries ORDER BY position DESC LIMIT ?", [.integer(Int64(limit))]
        ).map { try Self.decode(WebhookDelivery.self, $0["document"]) }
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
