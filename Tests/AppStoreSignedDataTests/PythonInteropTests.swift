import AppStoreSignedData
import Foundation
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// Statuses compared with Apple's own Python library (`app-store-server-library`, `SignedDataVerifier`, online
/// checks off) on the same tokens and configuration.
@Suite(
    "Interoperability with Apple's Python library",
    .enabled(if: PythonInterop.python != nil, Comment(rawValue: PythonInterop.missingMessage)))
struct PythonInteropTests {
    struct Case {
        var name: String
        var token: String
        var roots: [Certificate]
        var environment = "Sandbox"
        var bundleID = JWSFixtures.bundleID
        var appAppleID: Int64? = JWSFixtures.appAppleID
        var type: SignedDataType
        var strict = true
        /// Where Storekeeper deliberately differs: input that is not a JWS at all.
        var ours: VerificationStatus? = nil
    }

    static func cases() throws -> [Case] {
        let chain = JWSFixtures.chain
        let root = chain.root
        var list: [Case] = []
        let transaction = try JWSFixtures.sign(JWSFixtures.transaction())
        list.append(Case(name: "valid transaction", token: transaction, roots: [root], type: .transaction))
        list.append(
            Case(
                name: "wrong bundle", token: transaction, roots: [root], bundleID: "com.example.other",
                type: .transaction))
        list.append(
            Case(
                name: "wrong environment", token: transaction, roots: [root], environment: "Production",
                type: .transaction))
        list.append(
            Case(
                name: "unknown root", token: transaction, roots: [try TestPKI(keyKind: .p256).root], type: .transaction)
        )
        let unknown = try JWSFixtures.sign(
            JWSFixtures.transaction(extra: [
                "type": .string("Subscription Bundle"), "offerType": .integer(99),
                "newField": .object(["a": .integer(1)]),
                "purchaseDate": .double(1_704_067_140_000.25),
            ]))
        list.append(Case(name: "unknown keys and enum values", token: unknown, roots: [root], type: .transaction))
        let renewal = try JWSFixtures.sign(JWSFixtures.renewalInfo())
        list.append(Case(name: "valid renewal info", token: renewal, roots: [root], type: .renewalInfo))
        list.append(
            Case(
                name: "renewal info, wrong environment", token: renewal, roots: [root], environment: "Production",
                type: .renewalInfo))
        let notification = try JWSFixtures.sign(try JWSFixtures.notification())
        list.append(Case(name: "valid notification", token: notification, roots: [root], type: .notification))
        let production = try JWSFixtures.sign(try JWSFixtures.notification(environment: "Production"))
        list.append(
            Case(
                name: "production notification", token: production, roots: [root], environment: "Production",
                type: .notification))
        list.append(
            Case(
                name: "production notification, other app", token: production, roots: [root], environment: "Production",
                appAppleID: 7, type: .notification))
        let app = try JWSFixtures.sign(JWSFixtures.appTransaction())
        list.append(Case(name: "valid app transaction", token: app, roots: [root], type: .appTransaction))
        let productionApp = try JWSFixtures.sign(JWSFixtures.appTransaction(receiptType: "Production", appAppleID: 9))
        list.append(
            Case(
                name: "app transaction, other app", token: productionApp, roots: [root], environment: "Production",
                type: .appTransaction))
        for (name, broken) in [
            ("leaf without marker", try TestPKI(leafMarker: false, keyKind: .p256)),
            ("intermediate without marker", try TestPKI(intermediateMarker: false, keyKind: .p256)),
            ("intermediate not a CA", try TestPKI(intermediateIsCA: false, keyKind: .p256)),
        ] {
            list.append(
                Case(
                    name: name, token: try JWSFixtures.sign(JWSFixtures.transaction(), chain: broken.chain),
                    roots: [broken.root], type: .transaction))
        }
        var late = JWSFixtures.transaction()
        late["signedDate"] = .integer(1_798_761_600_000)
        list.append(
            Case(
                name: "signed after the leaf expired", token: try JWSFixtures.sign(late), roots: [root],
                type: .transaction))
        let parts = transaction.split(separator: ".").map(String.init)
        let payload = JWSFixtures.transaction()
        list.append(
            Case(
                name: "two-certificate chain",
                token: JWSFixtures.assemble(
                    header: ["alg": .string("ES256"), "x5c": JWSFixtures.x5c([chain.leaf, chain.intermediate])],
                    payload: payload,
                    signature: Array(repeating: 1, count: 64)), roots: [root], type: .transaction))
        list.append(
            Case(
                name: "HS256",
                token: JWSFixtures.assemble(
                    header: [
                        "alg": .string("HS256"), "x5c": JWSFixtures.x5c([chain.leaf, chain.intermediate, chain.root]),
                    ],
                    payload: payload, signature: [1, 2, 3]), roots: [root], type: .transaction))
        var tampered = payload
        tampered["quantity"] = .integer(5)
        list.append(
            Case(
                name: "tampered payload",
                token: parts[0] + "." + Base64URL.encode(JSONWriter.bytes(.object(tampered))) + "." + parts[2],
                roots: [root], type: .transaction))
        let der = try chain.leafKey.sign(Array((parts[0] + "." + parts[1]).utf8), algorithm: .ecdsa(.sha256))
        list.append(
            Case(
                name: "DER signature", token: parts[0] + "." + parts[1] + "." + Base64URL.encode(der), roots: [root],
                type: .transaction))
        list.append(
            Case(
                name: "certificate not base64",
                token: JWSFixtures.assemble(
                    header: [
                        "alg": .string("ES256"), "x5c": .array([.string("***"), .string("***"), .string("***")]),
                    ],
                    payload: payload, signature: [1]), roots: [root], type: .transaction))
        list.append(Case(name: "no roots", token: transaction, roots: [], type: .transaction))
        list.append(
            Case(
                name: "two segments", token: parts[0] + "." + parts[1], roots: [root], type: .transaction,
                ours: .invalidJWTFormat))
        list.append(
            Case(name: "garbage", token: "not a token", roots: [root], type: .transaction, ours: .invalidJWTFormat))
        list.append(
            Case(
                name: "no x5c",
                token: JWSFixtures.assemble(header: ["alg": .string("ES256")], payload: payload, signature: [1]),
                roots: [root], type: .transaction, ours: .invalidJWTFormat))
        if Vectors.isAvailable {
            let testCA = try Certificate(
                derEncoded: Vectors.bytes("certs/test/app-store-server-library-swift-testCA_2023-01-05_2033-01-02.der"))
            func vector(_ name: String) throws -> String {
                String(decoding: try Vectors.bytes("jws/" + name), as: UTF8.self).trimmingCharacters(
                    in: .whitespacesAndNewlines)
            }
            let mock = try vector("app-store-server-library-swift/mock_transactionInfo.jws")
            list.append(
                Case(
                    name: "Apple mock, strict", token: mock, roots: [testCA], bundleID: "com.example",
                    type: .transaction))
            list.append(
                Case(
                    name: "Apple mock, lenient", token: mock, roots: [testCA], bundleID: "com.example",
                    type: .transaction, strict: false))
            list.append(
                Case(
                    name: "Apple mock notification, lenient",
                    token: try vector("app-store-server-library-swift/mock_testNotification.jws"),
                    roots: [testCA], bundleID: "com.example", appAppleID: 1234, type: .notification, strict: false))
            let g3 = try Certificate(
                derEncoded: Vectors.bytes("certs/roots/apple-root-ca-g3_2014-04-30_2039-04-30.cer"))
            list.append(
                Case(
                    name: "real Apple renewal info",
                    token: try vector("go-iap/validator_test.signedRenewalInfo.sandbox.jws"),
                    roots: [g3], type: .renewalInfo))
            list.append(
                Case(
                    name: "real Apple TEST notification",
                    token: try vector("store-receipt-validator/test-notification-signed-payload.jws"),
                    roots: [g3], bundleID: "com.Abilities", type: .notification))
        }
        return list
    }

    @Test("Every case gets the status Apple's Python library gives, except where a token is not a JWS at all")
    func statuses() throws {
        let python = try #require(PythonInterop.python)
        let cases = try Self.cases()
        var input = ""
        for item in cases {
            var line = JSONObject()
            line["token"] = .string(item.token)
            line["roots"] = .array(item.roots.map { .string(Data($0.derEncoded).base64EncodedString()) })
            line["environment"] = .string(item.environment)
            line["bundleId"] = .string(item.bundleID)
            line["appAppleId"] = item.appAppleID.map(JSONValue.integer) ?? .null
            line["type"] = .string(item.type.rawValue)
            line["strict"] = .bool(item.strict)
            input += JSONWriter.string(.object(line)) + "\n"
        }
        let run = try ExternalTool.run(python, [PythonInterop.verifierScript], stdin: Array(input.utf8))
        try #require(run.status == 0, "\(run.stderrText)")
        let answers = run.stdoutText.split(separator: "\n").map {
            try? JSONParser.parse(String($0))["status"]?.stringValue
        }
        try #require(answers.count == cases.count)
        let now = Date()
        for (item, apple) in zip(cases, answers) {
            let verifier = try SignedDataVerifier(
                .init(
                    trustedRoots: item.roots, bundleID: item.bundleID, appAppleID: item.appAppleID,
                    environment: item.environment,
                    strictChecks: item.strict))
            let ours = verifier.verify(item.token, as: item.type, now: now)
            if let expected = item.ours {
                #expect(ours.status == expected, "\(item.name)")
                #expect(apple == "VERIFICATION_FAILURE", "\(item.name): Apple says \(apple ?? "nothing")")
            } else {
                #expect(
                    ours.status.rawValue == apple,
                    "\(item.name): ours \(ours.status) (\(ours.reason ?? "")), Apple's \(apple ?? "nothing")")
            }
        }
        // Our own chain and signer are accepted by Apple's library as they are.
        #expect(answers.first == "OK")
    }
}
