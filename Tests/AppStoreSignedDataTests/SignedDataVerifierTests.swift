import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// StoreKit 2 signed data made here with ``JWSFixtures``: one negative case per status.
@Suite("Signed data verification")
struct SignedDataVerifierTests {
    let chain = JWSFixtures.chain
    let now = Date(timeIntervalSince1970: 1_704_067_300)

    func verifier(
        environment: String? = "Sandbox", bundleID: String? = JWSFixtures.bundleID, roots: [Certificate]? = nil
    )
        throws -> SignedDataVerifier
    {
        try SignedDataVerifier(
            .init(
                trustedRoots: roots ?? [chain.root], bundleID: bundleID, appAppleID: JWSFixtures.appAppleID,
                environment: environment))
    }

    @Test("A transaction signed like the App Store's verifies and decodes with Apple's keys")
    func transaction() throws {
        let token = try JWSFixtures.sign(JWSFixtures.transaction())
        let result = try verifier().verify(token, now: now)
        #expect(result.status == .ok, "\(result.reason ?? "")")
        #expect(result.type == .transaction)
        let transaction = JWSTransaction(json: try #require(result.payload))
        #expect(transaction.transactionID == "2000000335310644")
        #expect(transaction.type?.known == .autoRenewable)
        #expect(transaction.environment?.known == .sandbox)
        #expect(transaction.price == 9990)
        #expect(transaction.signedDate == Date(timeIntervalSince1970: 1_704_067_200))
        #expect(result.header?["x5c"]?.arrayValue?.count == 3)
        #expect(result.header?.keys == ["alg", "x5c"])
    }

    @Test("Renewal info, app transactions and notifications are detected and verified by type")
    func types() throws {
        let verifier = try verifier()
        let renewal = verifier.verify(try JWSFixtures.sign(JWSFixtures.renewalInfo()), now: now)
        #expect(renewal.status == .ok)
        #expect(renewal.type == .renewalInfo)
        let app = verifier.verify(try JWSFixtures.sign(JWSFixtures.appTransaction()), now: now)
        #expect(app.status == .ok)
        #expect(app.type == .appTransaction)
        let notification = verifier.verify(try JWSFixtures.sign(try JWSFixtures.notification()), now: now)
        #expect(notification.status == .ok, "\(notification.reason ?? "")")
        #expect(notification.type == .notification)
        let data = try #require(notification.payload?["data"])
        #expect(data["signedTransactionInfo"]?.stringValue?.split(separator: ".").count == 3)
        #expect(data["transactionInfo"] == nil, "Apple's payload is left as it was signed")
        #expect(notification.nested["signedTransactionInfo"]?.status == .ok)
        let verified = try #require(notification.notification)
        #expect(verified.transaction?.transactionID == "2000000335310644")
        #expect(verified.renewalInfo?.int64("autoRenewStatus") == 1)
        #expect(verified.payload.notificationUUID != nil)
        let decoded = try #require(notification.decodedPayload?["data"])
        #expect(decoded["transactionInfo"]?["transactionId"] == .string("2000000335310644"))
        #expect(decoded["renewalInfo"]?["autoRenewStatus"] == .integer(1))
        #expect(verifier.verify(try JWSFixtures.sign(JWSFixtures.renewalInfo()), now: now).notification == nil)
    }

    @Test("Unknown keys and enum values survive decoding and re-encoding")
    func forwardCompatible() throws {
        let extra: JSONObject = [
            "type": .string("Subscription Bundle"), "brandNewField": .object(["nested": .array([.integer(1)])]),
            "offerType": .integer(99), "purchaseDate": .double(1_697_679_936_049.7297),
        ]
        let token = try JWSFixtures.sign(JWSFixtures.transaction(extra: extra))
        let result = try verifier().verify(token, now: now)
        #expect(result.status == .ok)
        let transaction = JWSTransaction(json: try #require(result.payload))
        #expect(transaction.type?.rawValue == "Subscription Bundle")
        #expect(transaction.type?.known == nil)
        #expect(transaction.offerType?.rawValue == 99)
        #expect(transaction.json["brandNewField"] == extra["brandNewField"])
        let purchase = try #require(transaction.purchaseDate)
        #expect(abs(purchase.timeIntervalSince1970 - 1_697_679_936.0497297) < 1e-6)
        #expect(try JSONParser.parse(transaction.jsonText) == .object(transaction.json))
    }

    @Test("INVALID_APP_IDENTIFIER and INVALID_ENVIRONMENT per type")
    func claims() throws {
        let token = try JWSFixtures.sign(JWSFixtures.transaction())
        #expect(try verifier(bundleID: "com.example.other").verify(token, now: now).status == .invalidAppIdentifier)
        #expect(try verifier(environment: "Production").verify(token, now: now).status == .invalidEnvironment)
        let renewal = try JWSFixtures.sign(JWSFixtures.renewalInfo())
        #expect(try verifier(bundleID: "com.example.other").verify(renewal, now: now).status == .ok)
        #expect(try verifier(environment: "Production").verify(renewal, now: now).status == .invalidEnvironment)
        // App Apple ID matters in Production only.
        let production = try JWSFixtures.sign(JWSFixtures.appTransaction(receiptType: "Production", appAppleID: 1))
        #expect(try verifier(environment: "Production").verify(production, now: now).status == .invalidAppIdentifier)
        let sandbox = try JWSFixtures.sign(JWSFixtures.appTransaction(receiptType: "Sandbox", appAppleID: 1))
        #expect(try verifier(environment: "Sandbox").verify(sandbox, now: now).status == .ok)
        // With no environment configured (a verifier for every one, as the purchase server's), a configured app
        // Apple ID is still checked on what says Production.
        #expect(try verifier(environment: nil).verify(production, now: now).status == .invalidAppIdentifier)
        #expect(try verifier(environment: nil).verify(sandbox, now: now).status == .ok)
        let ours = try JWSFixtures.sign(
            JWSFixtures.appTransaction(receiptType: "Production", appAppleID: JWSFixtures.appAppleID))
        #expect(try verifier(environment: nil).verify(ours, now: now).status == .ok)
        let otherApp = try JWSFixtures.sign(try JWSFixtures.notification(environment: "Production"))
        let unconfigured = try SignedDataVerifier(.init(trustedRoots: [chain.root], bundleID: JWSFixtures.bundleID))
        #expect(unconfigured.verify(otherApp, now: now).status == .ok, "no app Apple ID configured: nothing to check")
        // An external purchase token's environment comes from its id.
        let token2 = try JWSFixtures.sign([
            "notificationType": .string("EXTERNAL_PURCHASE_TOKEN"), "signedDate": .integer(JWSFixtures.signedDateMs),
            "externalPurchaseToken": .object([
                "externalPurchaseId": .string("SANDBOX_123"), "bundleId": .string(JWSFixtures.bundleID),
                "appAppleId": .integer(JWSFixtures.appAppleID),
            ]),
        ])
        #expect(try verifier(environment: "Sandbox").verify(token2, now: now).status == .ok)
        #expect(try verifier(environment: "Production").verify(token2, now: now).status == .invalidEnvironment)
    }

    @Test("A Production verifier without an app Apple ID is refused, as Apple's libraries refuse it")
    func productionNeedsAppleID() {
        #expect(throws: SignedDataVerifier.ConfigurationError.self) {
            try SignedDataVerifier(.init(trustedRoots: [], environment: "Production"))
        }
    }

    @Test("Chain failures: unknown root, missing markers, expired leaf, two certificates, no roots")
    func chains() throws {
        let payload = JWSFixtures.transaction()
        let otherRoot = try TestPKI(keyKind: .p256).root
        #expect(
            try verifier(roots: [otherRoot]).verify(try JWSFixtures.sign(payload), now: now).status
                == .verificationFailure)
        for broken in [
            try TestPKI(leafMarker: false, keyKind: .p256), try TestPKI(intermediateMarker: false, keyKind: .p256),
        ] {
            let token = try JWSFixtures.sign(payload, chain: broken.chain)
            #expect(try verifier(roots: [broken.root]).verify(token, now: now).status == .verificationFailure)
        }
        // Signed after the leaf expired (2026-01-01): validation happens at signedDate.
        var late = payload
        late["signedDate"] = .integer(1_798_761_600_000)
        #expect(try verifier().verify(try JWSFixtures.sign(late), now: now).status == .verificationFailure)
        let two = JWSFixtures.assemble(
            header: ["alg": .string("ES256"), "x5c": JWSFixtures.x5c([chain.leaf, chain.intermediate])],
            payload: payload,
            signature: try chain.leafKey.signRawECDSA(Array("x".utf8)))
        #expect(try verifier().verify(two, now: now).status == .invalidChainLength)
        #expect(try verifier(roots: []).verify(two, now: now).status == .invalidCertificate)
        var badCertificate = JSONValue.array([.string("not base64!"), .string("AAAA"), .string("AAAA")])
        let bad = JWSFixtures.assemble(
            header: ["alg": .string("ES256"), "x5c": badCertificate], payload: payload, signature: [1])
        #expect(try verifier().verify(bad, now: now).status == .invalidCertificate)
        badCertificate = .array([.string("MAA="), .string("MAA="), .string("MAA=")])
        let undecodable = JWSFixtures.assemble(
            header: ["alg": .string("ES256"), "x5c": badCertificate], payload: payload, signature: [1])
        #expect(try verifier().verify(undecodable, now: now).status == .invalidCertificate)
    }

    @Test("Signature failures: tampered payload, DER signature, other algorithm, wrong key")
    func signatures() throws {
        let token = try JWSFixtures.sign(JWSFixtures.transaction())
        let parts = token.split(separator: ".").map(String.init)
        var tamperedPayload = JWSFixtures.transaction()
        tamperedPayload["quantity"] = .integer(2)
        let swapped = parts[0] + "." + Base64URL.encode(JSONWriter.bytes(.object(tamperedPayload))) + "." + parts[2]
        #expect(try verifier().verify(swapped, now: now).status == .verificationFailure)

        let signingInput = Array((parts[0] + "." + parts[1]).utf8)
        let der = try chain.leafKey.sign(signingInput, algorithm: .ecdsa(.sha256))
        #expect(
            try verifier().verify(parts[0] + "." + parts[1] + "." + Base64URL.encode(der), now: now).status
                == .verificationFailure)

        let header: JSONObject = [
            "alg": .string("HS256"), "x5c": JWSFixtures.x5c([chain.leaf, chain.intermediate, chain.root]),
        ]
        let hs = JWSFixtures.assemble(header: header, payload: JWSFixtures.transaction(), signature: [1, 2, 3])
        #expect(try verifier().verify(hs, now: now).status == .verificationFailure)

        let stranger = try PrivateKey.generateP256()
        let forged = try JWSSigner.sign(
            payload: JWSFixtures.transaction(), key: stranger, chain: [chain.leaf, chain.intermediate, chain.root])
        #expect(try verifier().verify(forged, now: now).status == .verificationFailure)
    }

    @Test(
        "Input that is not a JWS is INVALID_JWT_FORMAT",
        arguments: [
            "", "abc", "a.b", "a.b.c.d", "!!!.e30.AA", "e30.!!!.AA", "bm90IGpzb24.e30.AA", "e30.bm90IGpzb24.AA",
            "WzFd.e30.AA", "eyJhbGciOiJFUzI1NiJ9.e30.AA",
        ])
    func malformed(token: String) throws {
        #expect(try verifier().verify(token, now: now).status == .invalidJWTFormat)
    }

    @Test("Oversized input is refused before parsing")
    func oversized() throws {
        let huge = String(repeating: "A", count: CompactJWS.maxSize + 10)
        #expect(try verifier().verify(huge + "." + huge + ".AA", now: now).status == .invalidJWTFormat)
    }

    @Test("Self-signed Xcode-style data verifies only when its certificate is trusted")
    func xcode() throws {
        let signer = try SigningChain.selfSigned(
            commonName: "StoreKit Testing in Xcode", validity: TestPKI.caValidity, keyKind: .p256)
        let payload = JWSFixtures.transaction(environment: "Xcode")
        let token = try JWSSigner.sign(
            payload: payload,
            header: [
                "typ": .string("JWT"), "kid": .string("Apple_Xcode_Key"), "x5c": JWSFixtures.x5c([signer.certificate]),
            ],
            key: signer.key)
        #expect(try verifier(environment: "Xcode", roots: [signer.certificate]).verify(token, now: now).status == .ok)
        #expect(try verifier(environment: "Xcode").verify(token, now: now).status == .invalidChainLength)
        #expect(
            try verifier(environment: "Sandbox", roots: [signer.certificate]).verify(token, now: now).status
                == .invalidChainLength)
        // Xcode's certificate is the same on every Mac: with no environment configured, what it signs must still
        // say Xcode (a Production claim under it is anyone's forgery).
        #expect(try verifier(environment: nil, roots: [signer.certificate]).verify(token, now: now).status == .ok)
        let production = try JWSSigner.sign(
            payload: JWSFixtures.transaction(environment: "Production"),
            header: ["kid": .string("Apple_Xcode_Key"), "x5c": JWSFixtures.x5c([signer.certificate])],
            key: signer.key)
        #expect(
            try verifier(environment: nil, roots: [signer.certificate]).verify(production, now: now).status
                == .invalidEnvironment)
        let other = try PrivateKey.generateP256()
        let forged = try JWSSigner.sign(
            payload: payload,
            header: ["kid": .string("Apple_Xcode_Key"), "x5c": JWSFixtures.x5c([signer.certificate])], key: other)
        #expect(
            try verifier(environment: "Xcode", roots: [signer.certificate]).verify(forged, now: now).status
                == .verificationFailure)
    }

    @Test(
        "ES256 is P-256: a leaf on P-384 (its key made by the openssl tool) with a signature of its size is refused",
        .enabled(if: ExternalTool.find("openssl") != nil, "openssl not on PATH"))
    func otherCurve() throws {
        let openssl = try #require(ExternalTool.find("openssl"))
        let generated = try ExternalTool.run(openssl, ["ecparam", "-name", "secp384r1", "-genkey", "-noout"])
        let key = try PrivateKey(pem: generated.stdoutText)
        let leaf = try CertificateBuilder(
            commonName: "P-384 leaf", serialNumber: [0x44], notBefore: TestPKI.leafValidity.0,
            notAfter: TestPKI.leafValidity.1, isCA: false, keyUsage: "critical,digitalSignature",
            markerExtensions: [AppleOID.receiptSigningLeaf]
        ).issue(subjectKey: try key.publicKey, issuer: chain.intermediate, issuerKey: chain.intermediateKey)
        let header: JSONObject = [
            "alg": .string("ES256"), "x5c": JWSFixtures.x5c([leaf, chain.intermediate, chain.root]),
        ]
        let input =
            Base64URL.encode(JSONWriter.bytes(.object(header))) + "."
            + Base64URL.encode(JSONWriter.bytes(.object(JWSFixtures.transaction())))
        let token = input + "." + Base64URL.encode(try key.signRawECDSA(Array(input.utf8), digest: .sha256))
        #expect(try verifier().verify(token, now: now).status == .verificationFailure)
    }

    @Test("Thousands of mutated tokens give a status, never a crash, and never OK with other content")
    func mutations() throws {
        let token = Array(try JWSFixtures.sign(try JWSFixtures.notification()).utf8)
        let verifier = try verifier()
        let original = verifier.verify(String(decoding: token, as: UTF8.self), now: now)
        #expect(original.status == .ok)
        var generator = SeededGenerator(seed: 7)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ ".utf8)
        for round in 0..<3000 {
            var bytes = token
            switch round % 4 {
            case 0:
                bytes[Int.random(in: 0..<bytes.count, using: &generator)] = alphabet.randomElement(using: &generator)!
            case 1: bytes.removeLast(Int.random(in: 1..<bytes.count, using: &generator))
            case 2:
                bytes.insert(
                    alphabet.randomElement(using: &generator)!, at: Int.random(in: 0..<bytes.count, using: &generator))
            default: bytes.removeSubrange(Int.random(in: 0..<bytes.count - 8, using: &generator)..<bytes.count - 4)
            }
            let result = verifier.verify(String(decoding: bytes, as: UTF8.self), now: now)
            if result.status == .ok { #expect(result.payload == original.payload, "mutation \(round) accepted") }
        }
    }
}

@Suite("Offer signatures")
struct OfferSignatureTests {
    @Test("V1 signs bundle, key, product, offer, token, nonce and timestamp joined by U+2063, DER in base64")
    func v1() throws {
        let key = try PrivateKey.generateP256()
        let nonce = try #require(UUID(uuidString: "F1E2D3C4-B5A6-4978-8695-A4B3C2D1E0F9"))
        let signature = try OfferSignature.promotionalOfferV1(
            bundleID: "com.example", keyID: "ABC123", productID: "monthly", offerID: "WINBACK",
            appAccountToken: "7E3B1C1A-0000-4000-8000-000000000001", nonce: nonce, timestamp: 1_700_000_000_000,
            key: key)
        let der = try #require(Data(base64Encoded: signature))
        let message =
            "com.example\u{2063}ABC123\u{2063}monthly\u{2063}WINBACK\u{2063}7e3b1c1a-0000-4000-8000-000000000001\u{2063}f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9\u{2063}1700000000000"
        #expect(
            try key.publicKey.verify(signature: Array(der), message: Array(message.utf8), algorithm: .ecdsa(.sha256)))
        #expect(
            !(try key.publicKey.verify(
                signature: Array(der), message: Array((message + "0").utf8), algorithm: .ecdsa(.sha256))))
    }

    @Test("V2 and introductory-offer eligibility are ES256 JWS with kid, typ and Apple's claims")
    func v2() throws {
        let key = try PrivateKey.generateP256()
        let nonce = UUID()
        let token = try OfferSignature.promotionalOfferV2(
            keyID: "ABC123", issuerID: "issuer", bundleID: "com.example", productID: "monthly", offerID: "WINBACK",
            transactionID: "42", nonce: nonce, issuedAt: Date(timeIntervalSince1970: 1_700_000_000), key: key)
        let jws = try CompactJWS(token)
        #expect(jws.header == ["alg": .string("ES256"), "kid": .string("ABC123"), "typ": .string("JWT")])
        #expect(jws.payload["aud"] == .string("promotional-offer"))
        #expect(jws.payload["iat"] == .integer(1_700_000_000))
        #expect(jws.payload["nonce"] == .string(nonce.uuidString.lowercased()))
        #expect(jws.payload["offerIdentifier"] == .string("WINBACK"))
        #expect(try key.publicKey.verify(rawECDSASignature: jws.signature, message: jws.signingInput, digest: .sha256))
        let intro = try CompactJWS(
            try OfferSignature.introductoryOfferEligibility(
                keyID: "ABC123", issuerID: "issuer", bundleID: "com.example", productID: "monthly",
                allowIntroductoryOffer: false, transactionID: "42", nonce: nonce, issuedAt: Date(), key: key))
        #expect(intro.payload["aud"] == .string("introductory-offer-eligibility"))
        #expect(intro.payload["allowIntroductoryOffer"] == .bool(false))
    }
}
