import AppStoreEmulator
import Foundation
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
