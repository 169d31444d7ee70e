import Foundation
import PurchaseServer
import StoreModel
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// Which environment an Apple notification is from, wherever its payload says it.
@Suite("Purchase server: notification environments")
struct NotificationEnvironmentTests {
    @Test("A notification's environment is read from data, summary, appData or the external purchase token's id")
    func environments() async throws {
        let app = AppSettings(
            bundleID: JWSFixtures.bundleID, appAppleID: JWSFixtures.appAppleID, environments: [.production],
            publicKey: "pk_12345678", receiptRoots: [], jwsRoots: [JWSFixtures.chain.root])
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path
        let server = try PurchaseServer(
            configuration: ServerConfiguration(secretKey: "sk_0123456789abcdef", apps: [app]),
            storage: try await SQLiteServerStorage(path: path))
        func post(_ notification: JSONObject) async -> Int {
            do {
                let body = JSONWriter.bytes(.object(["signedPayload": .string(try JWSFixtures.sign(notification))]))
                _ = try await server.ingestNotification(bundleID: JWSFixtures.bundleID, body: body)
                return 200
            } catch let error as PurchaseServerError {
                return error.status
            } catch {
                return 0
            }
        }
        var base = try JWSFixtures.notification(environment: "Production")
        base["data"] = nil
        var consent = base
        consent["notificationType"] = .string("RESCIND_CONSENT")
        consent["notificationUUID"] = .string(UUID().uuidString.lowercased())
        consent["appData"] = .object([
            "appAppleId": .integer(JWSFixtures.appAppleID), "bundleId": .string(JWSFixtures.bundleID),
            "environment": .string("Sandbox"),
        ])
        #expect(await post(consent) == 400, "a sandbox appData for a production-only app")
        var token = base
        token["notificationType"] = .string("EXTERNAL_PURCHASE_TOKEN")
        token["subtype"] = .string("UNREPORTED")
        token["notificationUUID"] = .string(UUID().uuidString.lowercased())
        token["externalPurchaseToken"] = .object([
            "externalPurchaseId": .string("SANDBOX_0123"), "bundleId": .string(JWSFixtures.bundleID),
            "appAppleId": .integer(JWSFixtures.appAppleID), "tokenCreationDate": .integer(1_700_000_000_000),
        ])
        #expect(await post(token) == 400, "a sandbox token id for a production-only app")
        token["externalPurchaseToken"] = .object([
            "externalPurchaseId": .string("0123"), "bundleId": .string(JWSFixtures.bundleID),
            "appAppleId": .integer(JWSFixtures.appAppleID), "tokenCreationDate": .integer(1_700_000_000_000),
        ])
        #expect(await post(token) == 200, "a production token")
    }
}
