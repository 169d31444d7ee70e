import Crypto
import Foundation
import Receipts
import TestSupport
import Testing

/// Receipts built by Storekeeper, checked by an independent implementation: the `openssl` command.
@Suite(
    "Interoperability with the openssl tool", .enabled(if: ExternalTool.find("openssl") != nil, "openssl not on PATH"))
struct OpenSSLInteropTests {
    @Test("openssl cms -verify accepts our DER and BER receipts against our root at the creation date")
    func cmsVerify() throws {
        let pki = TestPKI.shared
        let openssl = try #require(ExternalTool.find("openssl"))
        let directory = try ExternalTool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let root = directory.appendingPathComponent("root.pem")
        try Data(pki.root.pemEncoded.utf8).write(to: root)
        let der = try ReceiptFixtures.signed()
        for (name, bytes) in [("der", der), ("ber", try ReceiptFixtures.berEnvelope(der))] {
            let file = directory.appendingPathComponent("receipt.\(name)")
            try Data(bytes).write(to: file)
            let out = directory.appendingPathComponent("payload.\(name)")
            let attime = String(Int(TestPKI.referenceDate.timeIntervalSince1970))
            let result = try ExternalTool.run(
                openssl,
                [
                    "cms", "-verify", "-inform", "DER", "-binary", "-purpose", "any", "-CAfile", root.path, "-attime",
                    attime,
                    "-in", file.path, "-out", out.path,
                ])
            #expect(result.status == 0, "\(name): \(result.stderrText)")
            let payload = Array(try Data(contentsOf: out))
            #expect(try Receipt(payload: payload).bundleID == ReceiptFixtures.bundleID)
            // And openssl's ASN.1 parser reads the payload's attributes.
            let parsed = try ExternalTool.run(openssl, ["asn1parse", "-inform", "DER", "-in", out.path])
            #expect(parsed.status == 0)
            #expect(parsed.stdoutText.contains("SET"))
        }
    }
}
