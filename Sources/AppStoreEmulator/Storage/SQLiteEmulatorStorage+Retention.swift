import Foundation
import StoreModel
import StorekeeperSQL
import StorekeeperSQLite

/// Retention Messaging's items and realtime requests, a row each, over one connection.
extension SQLiteEmulatorStorage.Store {
    private func retentionItem(_ row: Row) -> RetentionItem? {
        guard let kind = row["kind"].string.flatMap(RetentionItem.Kind.init(rawValue:)),
            let environment = row["environment"].string.flatMap(Environment.init(rawValue:))
        else { return nil }
        return RetentionItem(
            kind: kind, bundleID: BundleID(row["bundle_id"].string ?? ""), environment: environment,
            id: row["id"].string ?? "", state: row["state"].string ?? "", document: row["document"].string ?? "{}",
            created: date(row["created"]) ?? .distantPast)
    }

    func retentionItem(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, id: String) throws
        -> RetentionItem?
    {
        try connection.execute(
            "SELECT * FROM retention_items WHERE kind = ? AND bundle_id = ? AND environment = ? AND id = ?",
            [.text(kind.rawValue), .text(bundle.rawValue), .text(environment.rawValue), .text(id)]
        ).first.flatMap(retentionItem)
    }

    func save(_ item: RetentionItem) throws {
        try connection.execute(
            """
            INSERT OR REPLACE INTO retention_items (kind, bundle_id, environment, id, state, document, created)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .text(item.kind.rawValue), .text(item.bundleID.rawValue), .text(item.environment.rawValue),
                .text(item.id), .text(item.state), .text(item.document), real(item.created),
            ])
    }

    func deleteRetentionItem(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, id: String)
        throws -> Bool
    {
        try connection.execute(
            "DELETE FROM retention_items WHERE kind = ? AND bundle_id = ? AND environment = ? AND id = ?",
            [.text(kind.rawValue), .text(bundle.rawValue), .text(environment.rawValue), .text(id)])
        return connection.changes > 0
    }

    func retentionItems(_ kind: RetentionItem.Kind, bundle: BundleID, environment: Environment, limit: Int) throws
        -> [RetentionItem]
    {
        try connection.execute(
            """
            SELECT * FROM retention_items WHERE kind = ? AND bundle_id = ? AND environment = ?
            ORDER BY created, id LIMIT ?
            """,
            [.text(kind.rawValue), .text(bundle.rawValue), .text(environment.rawValue), .integer(Int64(max(0, limit)))]
        ).compactMap(retentionItem)
    }

    func insert(_ request: RetentionRequestRecord) throws {
        try inserting("retention request") {
            try connection.execute(
                """
                INSERT INTO retention_requests
                    (request_identifier, original_transaction_id, bundle_id, environment, date, document)
                VALUES (?, ?, ?, ?, ?, ?)
                """,
                [
                    .text(request.requestIdentifier), .text(request.originalTransactionID.rawValue),
                    .text(request.bundleID.rawValue), .text(request.environment.rawValue), real(request.date),
                    .text(request.document),
                ])
        }
    }

    func retentionRequests(original: TransactionID, limit: Int) throws -> [RetentionRequestRecord] {
        try connection.execute(
            """
            SELECT * FROM retention_requests WHERE original_transaction_id = ? ORDER BY position DESC LIMIT ?
            """,
            [.text(original.rawValue), .integer(Int64(max(0, limit)))]
        ).reversed().map { row in
            RetentionRequestRecord(
                requestIdentifier: row["request_identifier"].string ?? "", originalTransactionID: original,
                bundleID: BundleID(row["bundle_id"].string ?? ""),
                environment: row["environment"].string.flatMap(Environment.init(rawValue:)) ?? .sandbox,
                date: date(row["date"]) ?? .distantPast, document: row["document"].string ?? "{}")
        }
    }
}
