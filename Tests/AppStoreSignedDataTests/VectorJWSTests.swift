import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// Apple's mock chain and JWS, two JWS signed by Apple's real chain, and Xcode-signed JWS (shared/vectors §3).
@Suite("Signed data from shared/vectors", .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
struct VectorJWSTests {
    static func token(_ name: String) throws -> String {
        String(decoding: try Vectors.bytes("jws/" + name), as: UTF8.self).trimmingCharacters(
            in: .whitespacesAndNewlines)
    }

    static func certificate(_ path: String) throws -> Certificate {
        try #require(try Certificate.load(Vectors.bytes("certs/" + path)).first)
    }

    static let now = Date()

    func mock(environment: String = "Sandbox", bundleID: String = "com.example", appAppleID: Int64? = 1234) throws
        -> SignedDataVerifier
    {
        let root = try Self.certificate("test/app-store-server-library-swift-testCA_2023-01-05_2033-01-02.der")
        // Apple's test chain has no key identifiers; Apple's own tests turn strict checks off for it.
        return try SignedDataVerifier(
            .init(
                trustedRoots: [root], bundleID: bundleID, appAppleID: appAppleID, environment: environment,
                strictChecks: false))
    }

    @Test("Apple's mock JWS verify as Apple's library says they do")
    func mocks() throws {
        let notification = try mock().verify(
            Self.token("app-store-server-library-swift/mock_testNotification.jws"), now: Self.now)
        #expect(notification.status == .ok, "\(notification.reason ?? "")")
        #expect(notification.type == .notification)
        #expect(NotificationPayload(json: try #require(notification.payload)).notificationType == "TEST")
        #expect(
            try mock(environment: "Production").verify(
                Self.token("app-store-server-library-swift/mock_testNotification.jws"), now: Self.now
            ).status == .invalidEnvironment)
        #expect(
            try mock(environment: "Production", appAppleID: 1235).verify(
                Self.token("app-store-server-library-swift/mock_testNotification.jws"), now: Self.now
            ).status == .invalidAppIdentifier)

        let transaction = try mock().verify(
            Self.token("app-store-server-library-swift/mock_transactionInfo.jws"), now: Self.now)
        #expect(transaction.status == .ok)
        #expect(JWSTransaction(json: try #require(transaction.payload)).environment?.known == .sandbox)
        #expect(
            try mock(bundleID: "com.example.x").verify(
                Self.token("app-store-server-library-swift/mock_transactionInfo.jws"), now: Self.now
            ).status == .invalidAppIdentifier)

        let renewal = try mock().verify(
            Self.token("app-store-server-library-swift/mock_renewalInfo.jws"), now: Self.now)
        #expect(renewal.status == .ok)
        #expect(renewal.type == .renewalInfo)

        #expect(
            try mock().verify(Self.token("app-store-server-library-swift/mock_wrongBundleId.jws"), now: Self.now).status
                == .invalidAppIdentifier)
        #expect(
            try mock().verify(
                Self.token("app-store-server-library-swift/mock_missingX5CHeaderClaim.jws"), now: Self.now
            ).status
                == .invalidJWTFormat)
    }

    @Test("With strict checks on, as Apple's Python library has them by default, the mock chain is refused")
    func strictMock() throws {
        let root = try Self.certificate("test/app-store-server-library-swift-testCA_2023-01-05_2033-01-02.der")
        let strict = try SignedDataVerifier(
            .init(trustedRoots: [root], bundleID: "com.example", environment: "Sandbox"))
        let result = strict.verify(
            try Self.token("app-store-server-library-swift/mock_transactionInfo.jws"), now: Self.now)
        #expect(result.status == .verificationFailure)
        #expect(result.reason?.contains("Authority Key Identifier") == true)
    }

    @Test("Apple-signed JWS verify at their signedDate against Apple Root CA - G3, and fail at today's date")
    func realApple() throws {
        let root = try Self.certificate("roots/apple-root-ca-g3_2014-04-30_2039-04-30.cer")
        let renewalToken = try Self.token("go-iap/validator_test.signedRenewalInfo.sandbox.jws")
        let offline = try SignedDataVerifier(.init(trustedRoots: [root], environment: "Sandbox"))
        let renewal = offline.verify(renewalToken, now: Self.now)
        #expect(renewal.status == .ok, "\(renewal.reason ?? "")")
        #expect(JWSRenewalInfo(json: try #require(renewal.payload)).originalTransactionID == "2000000335310644")
        let test = offline.verify(
            try Self.token("store-receipt-validator/test-notification-signed-payload.jws"), now: Self.now)
        #expect(test.status == .ok, "\(test.reason ?? "")")
        // Online checks validate at the current time: the 2021–2023 leaf has expired, so the chain fails before
        // any responder is asked.
        let online = try SignedDataVerifier(
            .init(trustedRoots: [root], environment: "Sandbox", onlineChecks: true),
            ocspTransport: UnreachableTransport())
        #expect(online.verify(renewalToken, now: Self.now).status == .verificationFailure)
        // Against the receipt root (Apple Inc. Root) nothing verifies.
        let wrong = try SignedDataVerifier(
            .init(
                trustedRoots: [try Self.certificate("roots/apple-inc-root_2006-04-25_2035-02-09.cer")],
                environment: "Sandbox"))
        #expect(wrong.verify(renewalToken, now: Self.now).status == .verificationFailure)
    }

    @Test("Xcode-signed JWS verify only with the Xcode certificate trusted")
    func xcode() throws {
        let xcode = try Self.certificate("xcode/storekit-testing-in-xcode_2023-10-19_2024-10-18.cer")
        let g3 = try Self.certificate("roots/apple-root-ca-g3_2014-04-30_2039-04-30.cer")
        let bundle = "com.example.naturelab.backyardbirds.example"
        let trusting = try SignedDataVerifier(.init(trustedRoots: [xcode], bundleID: bundle, environment: "Xcode"))
        let appleOnly = try SignedDataVerifier(.init(trustedRoots: [g3], bundleID: bundle, environment: "Xcode"))
        for (file, type) in [
            ("xcode-signed-transaction.jws", SignedDataType.transaction),
            ("xcode-signed-renewal-info.jws", .renewalInfo),
            ("xcode-signed-app-transaction.jws", .appTransaction),
        ] {
            let token = try Self.token("app-store-server-library-swift/" + file)
            let result = trusting.verify(token, now: Self.now)
            #expect(result.status == .ok, "\(file): \(result.reason ?? "")")
            #expect(result.type == type)
            #expect(appleOnly.verify(token, now: Self.now).status != .ok)
        }
        let transaction = JWSTransaction(
            json: try #require(
                trusting.verify(
                    Self.token("app-store-server-library-swift/xcode-signed-transaction.jws"), now: Self.now
                ).payload))
        #expect(transaction.transactionID == "0")
        #expect(transaction.subscriptionGroupIdentifier == "6F3A93AB")
        #expect(abs(try #require(transaction.purchaseDate).timeIntervalSince1970 - 1_697_679_936.049) < 0.001)
        let app = AppTransaction(
            json: try #require(
                trusting.verify(
                    Self.token("app-store-server-library-swift/xcode-signed-app-transaction.jws"), now: Self.now
                ).payload))
        #expect(app.originalPurchaseDate == Date(timeIntervalSince1970: -62_135_769_600))
        #expect(app.deviceVerificationNonce == UUID(uuidString: "48c8b92d-ce0d-4229-bedf-e61b4f9cfc92"))
        #expect(app.appAppleID == nil)
    }

    @Test("Mutations of the real tokens give a status, never a crash, never OK with other content")
    func mutations() throws {
        let root = try Self.certificate("roots/apple-root-ca-g3_2014-04-30_2039-04-30.cer")
        let verifier = try SignedDataVerifier(.init(trustedRoots: [root], environment: "Sandbox"))
        var generator = SeededGenerator(seed: 11)
        for file in [
            "go-iap/validator_test.signedRenewalInfo.sandbox.jws",
            "store-receipt-validator/test-notification-signed-payload.jws",
        ] {
            let token = Array(try Self.token(file).utf8)
            let original = verifier.verify(String(decoding: token, as: UTF8.self), now: Self.now)
            for _ in 0..<1000 {
                var bytes = token
                let index = Int.random(in: 0..<bytes.count, using: &generator)
                bytes[index] = UInt8.random(in: 0x20...0x7e, using: &generator)
                if Bool.random(using: &generator) {
                    bytes.removeLast(Int.random(in: 0..<bytes.count, using: &generator))
                }
                let result = verifier.verify(String(decoding: bytes, as: UTF8.self), now: Self.now)
                if result.status == .ok { #expect(result.payload == original.payload) }
            }
        }
    }

    @Test("Apple's example JSON models decode with their typed fields")
    func models() throws {
        let transaction = try #require(
            try JSONParser.parse(Vectors.bytes("json-models/app-store-server-library-swift/signedTransaction.json"))
                .objectValue)
        let model = JWSTransaction(json: transaction)
        #expect(model.transactionID != nil)
        #expect(model.type?.known != nil)
        #expect(try JSONParser.parse(model.jsonText) == .object(transaction))
        let notification = try #require(
            try JSONParser.parse(Vectors.bytes("json-models/app-store-server-library-swift/signedNotification.json"))
                .objectValue)
        let decoded = NotificationPayload(json: notification)
        #expect(decoded.notificationType == "SUBSCRIBED")
        #expect(decoded.status?.known == .active)
        #expect(decoded.appMetadata.bundleID == "com.example")
        let summary = try #require(
            try JSONParser.parse(
                Vectors.bytes("json-models/app-store-server-library-swift/signedSummaryNotification.json")
            ).objectValue)
        #expect(NotificationPayload(json: summary).appMetadata.environment == "LocalTesting")
        let external = try #require(
            try JSONParser.parse(
                Vectors.bytes("json-models/app-store-server-library-swift/signedExternalPurchaseTokenNotification.json")
            ).objectValue)
        #expect(NotificationPayload(json: external).appMetadata.environment != nil)
    }
}

/// An OCSP transport that fails the test if it is ever asked.
struct UnreachableTransport: OCSPTransport {
    func post(_ body: [UInt8], to url: String) throws(OCSPTransportError) -> [UInt8] {
        Issue.record("OCSP was asked although the chain had already failed")
        throw OCSPTransportError("not reachable in tests")
    }
}
