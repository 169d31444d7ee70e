import AppStoreEmulator
import StorekeeperHTTP
import StorekeeperJSON
import Testing

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
