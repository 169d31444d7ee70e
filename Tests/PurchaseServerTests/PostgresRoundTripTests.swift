import Foundation
import StoreModel
import StorekeeperTestSupport
import Testing

@testable import PurchaseServer

/// What a notification's write costs in waits for PostgreSQL (issue 34: at most a few round trips, not one
/// per statement).
@Suite(
    "PostgreSQL: a notification's write in few round trips",
    .enabled(if: PostgresTesting.url != nil, PostgresTesting.skipMessage))
struct PostgresRoundTripTests {
    @Test(
        "A new subscription's renewal: its lock, input and reads, then its writes with COMMIT: two round trips"
    )
    func notificationWrite() async throws {
        let storage = try await PostgresServerStorage(url: try PostgresTesting.freshDatabase(), poolSize: 1)
        let server = try PurchaseServer(
            configuration: ServerConfiguration(
                secretKey: "sk_round_trips_0123",
                apps: [AppSettings(bundleID: "app", publicKey: "pk_round_trips", receiptRoots: [], jwsRoots: [])]),
            storage: storage)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        func renewal(_ id: String, original: String) -> PurchaseUpdate {
            var record = PurchaseRecord(
                transactionID: TransactionID(id), originalTransactionID: TransactionID(original), bundleID: "app",
                productID: "monthly", kind: .autoRenewable, purchaseDate: now,
                expiresDate: now.addingTimeInterval(86_400),
                environment: .sandbox, signedDate: now)
            record.appAccountToken = "0f4b8f3e-0000-4000-8000-00000000000" + String(id.suffix(1))
            return PurchaseUpdate(source: .notification, transaction: record, notice: .v2(.didRenew, nil))
        }
        // As a V2 notification is ingested: what applying it reads goes with the input's insert.
        func ingest(_ update: PurchaseUpdate, key: String) async throws -> (trips: Int, events: Int) {
            let before = storage.roundTrips
            let raw = RawInput(key: key, kind: "notification-v2", body: Array("{}".utf8))
            let result = try await server.write(raw: raw, ahead: .init(update, bundleID: "app"), viewFollows: false) {
                store in
                try server.apply(update, bundleID: "app", claimant: nil, in: store, now: now)
            }
            return (storage.roundTrips - before, result.events.count)
        }
        // Statements are prepared on a connection's first use of them; count from the second notification.
        _ = try await ingest(renewal("1", original: "1"), key: "notification:1")
        // The follower asks on its own while it holds a lease; without one it asks only for those waiting.
        await server.leave()
        // Two round trips in the write: its lock, the input's insert and every read; its writes with COMMIT
        // (whether its events are new is read from their inserts' answers then: no user owns the subscription
        // yet, so nothing else in the write depends on it). It changed no user's answers, so no process has
        // anything of it to drop: no asking follows (a write that changes a user's is acknowledged after one:
        // ClusterTests).
        let second = try await ingest(renewal("2", original: "2"), key: "notification:2")
        #expect(second.events > 0, "the renewal was applied")
        #expect(second.trips == 2, "round trips: \(second.trips)")
        // The same again is a duplicate: the input's insert finds it, nothing more runs.
        let duplicate = try await ingest(renewal("2", original: "2"), key: "notification:2")
        #expect(duplicate.events == 0)
        #expect(duplicate.trips == 2, "round trips: \(duplicate.trips)")
        // The same renewal in another input (Apple's notification and a poll of the Server API both tell it):
        // applied again, its event is known, and the answer counts none.
        let again = try await ingest(renewal("2", original: "2"), key: "notification:2-again")
        #expect(again.events == 0, "the renewal's event was recorded before")
        #expect(again.trips == 2, "round trips: \(again.trips)")
        // What was read ahead is what the write used: the stored subscription is the renewal's.
        let stored = try await storage.read { try $0.subscription(TransactionID("2")) }
        #expect(stored?.owner == nil && stored?.originalTransactionID == TransactionID("2"))
    }
}
