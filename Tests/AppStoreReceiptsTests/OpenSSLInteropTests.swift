import AppStoreReceipts
import Foundation
import StorekeeperCrypto
import StorekeeperTestSupport
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

/// Receipts signed by the `openssl cms` tool, an independent PKCS #7 implementation.
@Suite("Receipts signed by the openssl tool", .enabled(if: ExternalTool.find("openssl") != nil, "openssl not on PATH"))
struct OpenSSLSignedReceiptTests {
    @Test(
        "openssl cms -sign receipts verify: with and without signed attributes, named by issuer or key id",
        arguments: [["-noattr"], [], ["-keyid"], ["-noattr", "-keyid", "-md", "sha1"]])
    func cmsSign(options: [String]) throws {
        let pki = TestPKI.shared
        let openssl = try #require(ExternalTool.find("openssl"))
        let directory = try ExternalTool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
        try Data(pki.leaf.pemEncoded.utf8).write(to: URL(fileURLWithPath: path("leaf.pem")))
        try Data(try pki.leafKey.pemPKCS8().utf8).write(to: URL(fileURLWithPath: path("leaf-key.pem")))
        try Data((pki.intermediate.pemEncoded + pki.root.pemEncoded).utf8).write(
            to: URL(fileURLWithPath: path("chain.pem")))
        try Data(ReceiptFixtures.receipt().payloadDER()).write(to: URL(fileURLWithPath: path("payload.der")))
        let run = try ExternalTool.run(
            openssl,
            [
                "cms", "-sign", "-binary", "-nodetach", "-outform", "DER", "-in", path("payload.der"), "-signer",
                path("leaf.pem"),
                "-inkey", path("leaf-key.pem"), "-certfile", path("chain.pem"), "-out", path("receipt.der"),
            ] + options)
        try #require(run.status == 0, "\(run.stderrText)")
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path("receipt.der"))))
        let verifier = ReceiptVerifier(trustedRoots: [pki.root])
        let expectations = ReceiptExpectations(
            bundleID: ReceiptFixtures.bundleID, deviceIdentifier: ReceiptFixtures.deviceIdentifier)
        let result = verifier.verify(bytes, expecting: expectations, now: TestPKI.referenceDate)
        #expect(result.isValid, "\(options): \(String(describing: result.failure))")
        // A flipped payload byte inside the envelope breaks the signature (or the messageDigest).
        var tampered = bytes
        let at = try #require(tampered.firstRange(of: Array("com.example.storekeeper.coins".utf8))?.lowerBound)
        tampered[at] ^= 0x01
        #expect(
            verifier.verify(tampered, expecting: expectations, now: TestPKI.referenceDate).failure?.code
                == .signatureInvalid)
    }
}
