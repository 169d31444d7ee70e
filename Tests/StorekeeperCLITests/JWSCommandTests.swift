import AppStoreSignedData
import Foundation
import StorekeeperCLITestSupport
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// `storekeeper jws …` and `storekeeper offer sign`, in-process.
@Suite("storekeeper jws and offer")
struct JWSCommandTests {
    struct Files {
        let directory: URL
        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

        init() throws {
            directory = try ExternalTool.temporaryDirectory()
            let chain = JWSFixtures.chain
            try Data(chain.root.pemEncoded.utf8).write(to: URL(fileURLWithPath: path("root.pem")))
            try Data(chain.leaf.derEncoded).write(to: URL(fileURLWithPath: path("leaf.der")))
            try Data(chain.intermediate.pemEncoded.utf8).write(to: URL(fileURLWithPath: path("intermediate.pem")))
            try Data(try chain.leafKey.pemPKCS8().utf8).write(to: URL(fileURLWithPath: path("leaf-key.pem")))
            try Data(JSONWriter.bytes(.object(JWSFixtures.transaction()))).write(
                to: URL(fileURLWithPath: path("payload.json")))
        }
    }

    static let now = Date(timeIntervalSince1970: 1_704_067_300)

    @Test("jws sign, then jws verify: status OK with type, header and payload; exit 0")
    func signAndVerify() async throws {
        let files = try Files()
        let signed = await CapturedConsole.run(
            [
                "jws", "sign", "--key", files.path("leaf-key.pem"), "--cert", files.path("leaf.der"), "--cert",
                files.path("intermediate.pem"), "--cert", files.path("root.pem"), files.path("payload.json"),
            ])
        #expect(signed.status == 0, "\(signed.stderr)")
        let token = signed.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(token.split(separator: ".").count == 3)
        let verified = await CapturedConsole.run(
            [
                "jws", "verify", "--root", files.path("root.pem"), "--bundle-id", JWSFixtures.bundleID, "--environment",
                "Sandbox",
            ],
            stdin: Array((token + "\n").utf8), now: Self.now)
        #expect(verified.status == 0, "\(verified.stdout)")
        let output = try JSONParser.parse(verified.stdout)
        #expect(output["status"] == .string("OK"))
        #expect(output["type"] == .string("transaction"))
        #expect(output["header"]?["alg"] == .string("ES256"))
        #expect(output["payload"]?["transactionId"] == .string("2000000335310644"))

        let wrong = await CapturedConsole.run(
            [
                "jws", "verify", "--root", files.path("root.pem"), "--bundle-id", "com.other", "--environment",
                "Sandbox",
            ],
            stdin: Array(token.utf8), now: Self.now)
        #expect(wrong.status == 1)
        #expect(try JSONParser.parse(wrong.stdout)["status"] == .string("INVALID_APP_IDENTIFIER"))
        let asRenewal = await CapturedConsole.run(
            [
                "jws", "verify", "--root", files.path("root.pem"), "--environment", "Production", "--app-apple-id", "1",
                "--type",
                "renewal-info",
            ], stdin: Array(token.utf8), now: Self.now)
        #expect(try JSONParser.parse(asRenewal.stdout)["status"] == .string("INVALID_ENVIRONMENT"))
        #expect(try JSONParser.parse(asRenewal.stdout)["type"] == .string("renewal-info"))
    }

    @Test("jws sign refuses a key that does not belong to the leaf, or is not P-256: exit 2, a sentence, no JWS")
    func signRefusesWrongKeys() async throws {
        let files = try Files()
        try Data(try PrivateKey.generateP256().pemPKCS8().utf8).write(
            to: URL(fileURLWithPath: files.path("other-key.pem")))
        try Data(try PrivateKey.generateRSA().pemPKCS8().utf8).write(to: URL(fileURLWithPath: files.path("rsa.pem")))
        let chain = [
            "--cert", files.path("leaf.der"), "--cert", files.path("intermediate.pem"), "--cert",
            files.path("root.pem"),
            files.path("payload.json"),
        ]
        let other = await CapturedConsole.run(["jws", "sign", "--key", files.path("other-key.pem")] + chain)
        #expect(other.status == 2)
        #expect(other.stdout.isEmpty)
        #expect(other.stderr.contains("does not belong to the leaf certificate"))
        let rsa = await CapturedConsole.run(["jws", "sign", "--key", files.path("rsa.pem")] + chain)
        #expect(rsa.status == 2)
        #expect(rsa.stdout.isEmpty)
        #expect(rsa.stderr.contains("P-256") && !rsa.stderr.contains("CryptoError"), "\(rsa.stderr)")
    }

    @Test("A notification shows the nested signed fields as they came and their decoded forms beside them")
    func notification() async throws {
        let files = try Files()
        let token = try JWSFixtures.sign(try JWSFixtures.notification())
        let run = await CapturedConsole.run(
            [
                "jws", "verify", "--root", files.path("root.pem"), "--bundle-id", JWSFixtures.bundleID, "--environment",
                "Sandbox",
            ],
            stdin: Array(token.utf8), now: Self.now)
        #expect(run.status == 0)
        let data = try #require(try JSONParser.parse(run.stdout)["payload"]?["data"])
        #expect(data["signedTransactionInfo"]?.stringValue?.hasPrefix("ey") == true)
        #expect(data["transactionInfo"]?["bundleId"] == .string(JWSFixtures.bundleID))
        #expect(data["renewalInfo"]?["autoRenewProductId"] == .string("com.example.storekeeper.monthly"))
    }

    @Test("Not a JWS: INVALID_JWT_FORMAT without header or payload, exit 1; decode fails with exit 1")
    func malformed() async throws {
        let files = try Files()
        let run = await CapturedConsole.run(
            ["jws", "verify", "--root", files.path("root.pem")], stdin: Array("a.b".utf8))
        #expect(run.status == 1)
        let output = try JSONParser.parse(run.stdout)
        #expect(output["status"] == .string("INVALID_JWT_FORMAT"))
        #expect(output["payload"] == nil)
        #expect(await CapturedConsole.run(["jws", "decode"], stdin: Array("a.b".utf8)).status == 1)
    }

    @Test("jws decode prints the detected type, header and payload without verifying")
    func decode() async throws {
        let token = try JWSFixtures.sign(JWSFixtures.renewalInfo())
        let run = await CapturedConsole.run(["jws", "decode", "-"], stdin: Array(token.utf8))
        #expect(run.status == 0)
        let output = try JSONParser.parse(run.stdout)
        #expect(output["type"] == .string("renewal-info"))
        #expect(output["payload"]?["autoRenewStatus"] == .integer(1))
    }

    @Test(
        "Usage errors exit 64",
        arguments: [
            ["jws", "verify"], ["jws", "verify", "--root", "r", "--environment", "Staging"],
            ["jws", "verify", "--root", "r", "--environment", "Production"],
            ["jws", "verify", "--root", "r", "--type", "receipt"], ["jws", "sign", "--key", "k"],
            ["offer", "sign", "--key", "k"], ["jws", "verify", "--root", "r", "--app-apple-id", "x"],
        ])
    func usage(arguments: [String]) async {
        let run = await CapturedConsole.run(arguments)
        #expect(run.status == 64, "\(run.stderr)")
        #expect(run.stderr.hasPrefix("Error: "))
    }

    @Test("offer sign V1 prints a signature that verifies over Apple's U+2063 string; V2 prints a JWS")
    func offer() async throws {
        let files = try Files()
        let key = try PrivateKey.generateP256()
        let keyPath = files.path("SubscriptionKey_ABC123.p8")
        try Data(try key.pemPKCS8().utf8).write(to: URL(fileURLWithPath: keyPath))
        let common = [
            "offer", "sign", "--key", keyPath, "--key-id", "ABC123", "--bundle-id", "com.example", "--product-id",
            "monthly",
            "--offer-id", "WINBACK", "--app-account-token", "7E3B1C1A-0000-4000-8000-000000000001", "--nonce",
            "F1E2D3C4-B5A6-4978-8695-A4B3C2D1E0F9", "--timestamp", "1700000000000",
        ]
        let v1 = await CapturedConsole.run(common)
        #expect(v1.status == 0, "\(v1.stderr)")
        let output = try JSONParser.parse(v1.stdout)
        let signature = try #require(output["signature"]?.stringValue.flatMap { Data(base64Encoded: $0) })
        let message = [
            "com.example", "ABC123", "monthly", "WINBACK", "7e3b1c1a-0000-4000-8000-000000000001",
            "f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9", "1700000000000",
        ].joined(separator: "\u{2063}")
        #expect(
            try key.publicKey.verify(
                signature: Array(signature), message: Array(message.utf8), algorithm: .ecdsa(.sha256)))
        #expect(output["nonce"] == .string("f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9"))
        let withToken = await CapturedConsole.run(common + ["--format", "v2", "--issuer-id", "issuer"])
        #expect(withToken.status == 64, "V2 has no app account token: \(withToken.stderr)")
        #expect(withToken.stderr.contains("app-account-token"))
        let v2Arguments = common.enumerated().filter { index, _ in
            !(index > 0 && common[index - 1] == "--app-account-token") && common[index] != "--app-account-token"
        }.map(\.element)
        let v2 = await CapturedConsole.run(v2Arguments + ["--format", "v2", "--issuer-id", "issuer"])
        #expect(v2.status == 0, "\(v2.stderr)")
        let jws = try CompactJWS(v2.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(jws.header["kid"] == .string("ABC123"))
        #expect(jws.payload["aud"] == .string("promotional-offer"))
    }
}
