import Foundation
import PurchaseServer
import StoreModel
import StorekeeperCrypto
import StorekeeperTestSupport

/// A purchase server on SQLite for the app `JWSFixtures` signs for (its chain trusted), for tests that hand it
/// Apple's payloads directly.
enum FixtureServer {
    static func make(
        environments: Set<Environment> = [.sandbox], serverAPI: ServerAPISettings? = nil,
        receiptRoots: [Certificate] = []
    ) async throws
        -> (server: PurchaseServer, storage: SQLiteServerStorage)
    {
        let app = AppSettings(
            bundleID: JWSFixtures.bundleID, appAppleID: JWSFixtures.appAppleID, environments: environments,
            publicKey: "pk_12345678", receiptRoots: receiptRoots, jwsRoots: [JWSFixtures.chain.root],
            serverAPI: serverAPI)
        let path = try ExternalTool.temporaryDirectory().appendingPathComponent("server.sqlite").path
        let storage = try await SQLiteServerStorage(path: path)
        let server = try PurchaseServer(
            configuration: ServerConfiguration(secretKey: "sk_0123456789abcdef", apps: [app]), storage: storage)
        return (server, storage)
    }
}
