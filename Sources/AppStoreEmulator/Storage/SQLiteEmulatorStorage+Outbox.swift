import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperSQL
import StorekeeperSQLite
import Synchronization

/// The outbox's notifications and their delivery queue, families and settings, over one connection.
extension SQLiteEmulatorStorage.Store {
    // MARK: Notifications

    static func attemptsText(_ attempts: [SendAttempt]) -> String {
        attempts.map { "\(EpochMilliseconds.milliseconds($0.date)):\($0.result.rawValue)" }
            .joined(separator: ",")
    }

    static func attempts(_ text: String) -> [SendAttempt] {
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
    static let notificationColumns =
        "n.*, p.payload FROM notifications n JOIN notification_payloads p ON p.position = n.position"

    /// What the outbox keeps of a V2 signed payload: short when its header is registered.
    func storedPayload(_ jws: [UInt8]) throws -> [UInt8] {
        let header = Array(jws.prefix { $0 != UInt8(ascii: ".") })
        guard let fingerprint = try headers.fingerprint(of: header, in: self),
            let stored = StoredJWS.compact(jws, header: header, fingerprint: fingerprint)
        else { return jws }
        return stored
    }

    /// A V2 signed payload as it was signed.
    func signedPayload(_ stored: [UInt8]) throws -> String {
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

    func outbound(_ row: Row) throws -> OutboundNotification {
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
                NotificationType(rawValue: row["type"].string ?? NotificationType.test.rawValue),
                row["subtype"].string.map(NotificationSubtype.init(rawValue:)),
                v1: row["v1_type"].string.map(NotificationTypeV1.init(rawValue:))),
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
                    text(notification.notice.v1Type?.rawValue), text(notification.originalTransactionID?.rawValue),
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
