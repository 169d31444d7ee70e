import Foundation
import StoreModel
import Testing

@testable import PurchaseServer

/// What a write sends ahead of applying an update (PostgreSQL answers it in the write's first round trip).
@Suite("Purchase server: reading ahead")
struct ReadAheadTests {
    @Test("What an update's write reads ahead names the first owner, not every transaction of its subscription")
    func readsAheadNoRenewals() throws {
        let record = PurchaseRecord(
            transactionID: "41", originalTransactionID: "40", bundleID: "app", productID: "monthly",
            kind: .autoRenewable, purchaseDate: Date(timeIntervalSince1970: 1_700_000_000), environment: .sandbox,
            signedDate: Date(timeIntervalSince1970: 1_700_000_000))
        let update = PurchaseUpdate(source: .notification, transaction: record, notice: .v2(.didRenew, nil))
        let ahead = try #require(WriteAhead(update, bundleID: "app"))
        let sql = try SQLServerStore(connection: StoredInputTests.RecordingRunner()).statementsAhead(ahead).map(\.sql)
        #expect(sql.contains(SQLServerStore<StoredInputTests.RecordingRunner>.firstOwnerByOriginal))
        // A subscription renewed for years has that many transactions: none of their documents is read.
        #expect(!sql.contains { $0.contains("SELECT document FROM purchases WHERE original_id") })
    }
}
