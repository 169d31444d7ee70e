import Foundation
import StorekeeperTestSupport
import Testing

@testable import PurchaseServer

/// The statements every notification runs find their rows in the order they ask for from an index: a
/// temporary b-tree sorts them at each call (SQLite opens one even over no rows), and a subscription's
/// purchases grow with its history.
@Suite(
    "Purchase server: a subscription's purchases in order from their index",
    .enabled(if: ExternalTool.find("sqlite3") != nil, "needs the sqlite3 command"))
struct QueryPlanTests {
    @Test(
        "The first owner and the purchases of an original: no temporary b-tree, made now or through every migration",
        arguments: [false, true])
    func purchasesByOriginal(replayingHistory: Bool) async throws {
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path
        _ = try await SQLiteServerStorage(path: path, replayingHistory: replayingHistory)
        let sqlite3 = try #require(ExternalTool.find("sqlite3"))
        for statement in [
            SQLServerStore<StoredInputTests.RecordingRunner>.firstOwnerByOriginal,
            SQLServerStore<StoredInputTests.RecordingRunner>.purchasesByOriginal,
        ] {
            let plan = try ExternalTool.run(sqlite3, [path, "EXPLAIN QUERY PLAN " + statement])
            #expect(plan.status == 0, "\(plan.stderrText)")
            #expect(plan.stdoutText.contains("USING INDEX purchases_by_original"), "\(statement): \(plan.stdoutText)")
            #expect(!plan.stdoutText.contains("TEMP B-TREE"), "\(statement): \(plan.stdoutText)")
        }
    }
}
