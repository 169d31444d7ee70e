import AppStoreEmulator
import Foundation
import StorekeeperHTTP
import StorekeeperJSON
import Testing

@Suite("The emulator's certificate files")
struct PKIFileTests {
    @Test("A damaged key or certificate stops the start with an error that names the file, never its contents")
    func damagedFileNamed() throws {
        for name in ["jws-leaf-key.pem", "receipt-intermediate.pem"] {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pki-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            _ = try EmulatorPKI.loadOrCreate(in: directory)
            let damaged = "-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n"
            try Data(damaged.utf8).write(to: directory.appendingPathComponent(name))
            do {
                _ = try EmulatorPKI.loadOrCreate(in: directory)
                Issue.record("a damaged \(name) was accepted")
            } catch let error as EmulatorError {
                #expect(error.message.contains(directory.appendingPathComponent(name).path), "\(error.message)")
                #expect(!error.message.contains("not base64"))
            }
        }
    }
}

@Suite("Emulator lifetime")
struct EmulatorLifetimeTests {
    @Test("A store nobody holds is released, its files closed: routes, the Server API and a purchase keep no cycle")
    func released() async throws {
        weak var weakStore: AppStore?
        do {
            let harness = try await AppStoreTests.Harness.make()
            weakStore = harness.store
            let (status, _) = try await harness.call(
                "POST", "/_emulator/v1/accounts", ["environment": .string("Sandbox"), "storefront": .string("USA")])
            #expect(status == 201)
            _ = harness.store.serverAPI
            // Served over a socket too, then stopped.
            let server = try HTTPServer(port: 0, responder: harness.responder)
            server.stop()
        }
        for _ in 0..<200 where weakStore != nil { try await Task.sleep(for: .milliseconds(10)) }
        #expect(weakStore == nil, "the store is still held after its last user went")
    }
}
