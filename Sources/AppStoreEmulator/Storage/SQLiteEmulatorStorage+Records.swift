import Foundation
import StoreModel
import StorekeeperSQL
import StorekeeperSQLite

/// Renewal extensions, mass extensions, consumption information, refund requests, minted API keys and offer
/// nonces, a row each, over one connection.
extension SQLiteEmulatorStorage.Store {
    func renewalExtensions(original: TransactionID) throws -> [ExtensionRecord] {
        try connection.execute(
            "SELECT * FROM renewal_extensions WHERE original_transaction_id = ? ORDER BY position",
            [.text(original.rawValue)]
        ).map { row in
            ExtensionRecord(
                originalTransactionID: original, requestIdentifier: row["request_identifier"].string ?? "",
                date: date(row["date"]) ?? .distantPast, effectiveDate: date(row["effective_date"]) ?? .distantPast,
                webOrderLineItemID: row["web_order_line_item_id"].string ?? "")
        }
    }

    func insert(_ record: ExtensionRecord) throws {
        try inserting("renewal extension") {
            try connection.execute(
                """
                INSERT INTO renewal_extensions
                    (original_transaction_id, request_identifier, date, effective_date, web_order_line_item_id)
                VALUES (?, ?, ?, ?, ?)
                """,
                [
                    .text(record.originalTransactionID.rawValue), .text(record.requestIdentifier), real(record.date),
                    real(record.effectiveDate), .text(record.webOrderLineItemID),
                ])
        }
    }

    func massExtension(productID: String, requestIdentifier: String) throws -> MassExtension? {
        try connection.execute(
            "SELECT * FROM mass_extensions WHERE product_id = ? AND request_identifier = ?",
            [.text(productID), .text(requestIdentifier)]
        ).first.map(massExtension)
    }

    func incompleteMassExtensions(limit: Int) throws -> [MassExtension] {
        try connection.execute(
            "SELECT * FROM mass_extensions WHERE complete = 0 ORDER BY product_id, request_identifier LIMIT ?",
            [.integer(Int64(max(0, limit)))]
        ).map(massExtension)
    }

    private func massExtension(_ row: Row) -> MassExtension {
        var resume: MassExtension.Resume?
        if let bundle = row["bundle_id"].string, let days = row["extend_by_days"].int64,
            let reason = row["extend_reason_code"].int64
        {
            resume = MassExtension.Resume(
                bundleID: bundle, days: Int(days), reason: Int(reason), after: row["resume_after"].string)
        }
        return MassExtension(
            requestIdentifier: row["request_identifier"].string ?? "", productID: row["product_id"].string ?? "",
            environment: Environment(rawValue: row["environment"].string ?? "") ?? .sandbox,
            storefronts: row["storefronts"].string.map { $0.split(separator: ",").map(String.init) },
            complete: row["complete"].int64 == 1, completeDate: date(row["complete_date"]),
            succeeded: row["succeeded"].int64 ?? 0, failed: row["failed"].int64 ?? 0, resume: resume)
    }

    func save(_ progress: MassExtension) throws {
        try connection.execute(
            """
            INSERT OR REPLACE INTO mass_extensions
                (product_id, request_identifier, environment, storefronts, complete, complete_date, succeeded, failed,
                 bundle_id, extend_by_days, extend_reason_code, resume_after)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .text(progress.productID), .text(progress.requestIdentifier), .text(progress.environment.rawValue),
                text(progress.storefronts?.joined(separator: ",")), flag(progress.complete),
                real(progress.completeDate), .integer(progress.succeeded), .integer(progress.failed),
                text(progress.resume?.bundleID), progress.resume.map { .integer(Int64($0.days)) } ?? .null,
                progress.resume.map { .integer(Int64($0.reason)) } ?? .null,
                text(progress.resume?.after),
            ])
    }

    func consumption(_ transactionID: TransactionID) throws -> ConsumptionRecord? {
        try connection.execute(
            "SELECT version, body FROM consumption WHERE transaction_id = ?", [.text(transactionID.rawValue)]
        ).first.map { row in
            ConsumptionRecord(
                transactionID: transactionID, version: Int(row["version"].int64 ?? 2), body: row["body"].string ?? "")
        }
    }

    func save(_ consumption: ConsumptionRecord) throws {
        try connection.execute(
            "INSERT OR REPLACE INTO consumption (transaction_id, version, body) VALUES (?, ?, ?)",
            [.text(consumption.transactionID.rawValue), .integer(Int64(consumption.version)), .text(consumption.body)])
    }

    func refundRequest(_ transactionID: TransactionID) throws -> String? {
        try connection.execute(
            "SELECT reason FROM refund_requests WHERE transaction_id = ?", [.text(transactionID.rawValue)]
        ).first?["reason"].string
    }

    func setRefundRequest(_ transactionID: TransactionID, reason: String?) throws {
        if let reason {
            try connection.execute(
                "INSERT OR REPLACE INTO refund_requests (transaction_id, reason) VALUES (?, ?)",
                [.text(transactionID.rawValue), .text(reason)])
        } else {
            try connection.execute(
                "DELETE FROM refund_requests WHERE transaction_id = ?", [.text(transactionID.rawValue)])
        }
    }

    func mintedAPIKeys() throws -> [MintedAPIKey] {
        try connection.execute("SELECT * FROM api_keys ORDER BY position").compactMap { row in
            guard let der = row["public_key"].string.flatMap({ Data(base64Encoded: $0) }) else { return nil }
            return MintedAPIKey(
                keyID: row["key_id"].string ?? "", issuerID: row["issuer_id"].string ?? "",
                bundleID: row["bundle_id"].string ?? "", publicKey: Array(der))
        }
    }

    func insert(_ key: MintedAPIKey) throws {
        try inserting("API key") {
            try connection.execute(
                "INSERT INTO api_keys (key_id, issuer_id, bundle_id, public_key) VALUES (?, ?, ?, ?)",
                [
                    .text(key.keyID), .text(key.issuerID), .text(key.bundleID),
                    .text(Data(key.publicKey).base64EncodedString()),
                ])
        }
    }

    func useOfferNonce(_ nonce: String) throws -> Bool {
        try connection.execute("INSERT OR IGNORE INTO offer_nonces (nonce) VALUES (?)", [.text(nonce)])
        return connection.changes > 0
    }
}
