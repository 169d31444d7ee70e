import AppStoreReceipts
import Foundation
import StorekeeperASN1
import StorekeeperCrypto
import StorekeeperTestSupport
import Testing

/// Verification of receipts built in code by ``TestPKI`` and ``ReceiptFixtures``: one negative case per reason.
@Suite("Receipt verification")
struct ReceiptVerifierTests {
    let pki = TestPKI.shared
    let now = TestPKI.referenceDate
    var verifier: ReceiptVerifier { ReceiptVerifier(trustedRoots: [pki.root]) }
    var expectations: ReceiptExpectations {
        ReceiptExpectations(
            bundleID: ReceiptFixtures.bundleID, bundleVersion: ReceiptFixtures.appVersion,
            deviceIdentifier: ReceiptFixtures.deviceIdentifier)
    }

    @Test("A well-formed receipt passes every check and decodes to what was written")
    func valid() throws {
        let receipt = ReceiptFixtures.receipt()
        let result = verifier.verify(try ReceiptFixtures.signed(receipt), expecting: expectations, now: now)
        #expect(result.isValid, "\(String(describing: result.failure))")
        // DER sorts the purchases (as Apple's receipts do); everything else is exactly what was written.
        var decoded = try #require(result.receipt)
        #expect(Set(decoded.inAppPurchases) == Set(receipt.inAppPurchases))
        decoded.inAppPurchases = receipt.inAppPurchases
        #expect(decoded == receipt)
        // Written unsorted, the payload order comes back as written.
        let unsorted = try receipt.signed(
            by: pki.leaf, key: pki.leafKey, chain: [pki.intermediate, pki.root], sorted: false)
        #expect(verifier.verify(unsorted, expecting: expectations, now: now).receipt == receipt)
    }

    @Test("SHA-1 and SHA-256 envelopes both verify", arguments: [DigestAlgorithm.sha1, .sha256])
    func digests(digest: DigestAlgorithm) throws {
        let bytes = try ReceiptFixtures.signed(digest: digest)
        #expect(verifier.verify(bytes, expecting: expectations, now: now).isValid)
    }

    @Test(
        "Xcode-style BER envelopes with indefinite lengths and chunked payloads verify",
        arguments: [1, 7, 512, 100_000])
    func berEnvelope(chunkSize: Int) throws {
        let der = try ReceiptFixtures.signed()
        let ber = try ReceiptFixtures.berEnvelope(der, chunkSize: chunkSize)
        #expect(ber != der)
        #expect(ber[1] == 0x80)
        let result = verifier.verify(ber, expecting: expectations, now: now)
        #expect(result.isValid, "\(String(describing: result.failure))")
        #expect(Set(try #require(result.receipt).inAppPurchases) == Set(ReceiptFixtures.receipt().inAppPurchases))
        #expect(try PKCS7.verifyWithOpenSSL(ber, trustedRoots: [pki.root], at: now).count > 0)
    }

    @Test("Unknown attributes survive at both levels, in payload order, and never fail verification")
    func unknownAttributes() throws {
        let extra = [
            ReceiptAttribute(type: 99, version: 7, value: [0x04, 0x03, 0x01, 0x02, 0x03]),
            ReceiptAttribute(type: 1_000_000, version: 1, value: [0xff, 0x00]),  // not even DER inside
            ReceiptAttribute(type: -5, version: 0, value: []),
        ]
        var receipt = ReceiptFixtures.receipt(unknownAttributes: extra)
        receipt.inAppPurchases[0].unknownAttributes.append(
            ReceiptAttribute(type: 1799, version: 3, value: [0x0c, 0x00]))
        let result = verifier.verify(try ReceiptFixtures.signed(receipt), expecting: expectations, now: now)
        let decoded = try #require(result.receipt)
        #expect(result.isValid)
        #expect(Set(decoded.unknownAttributes) == Set(extra))
        let first = try #require(
            decoded.inAppPurchases.first(where: { $0.transactionID == receipt.inAppPurchases[0].transactionID }))
        #expect(first.unknownAttributes.contains(ReceiptAttribute(type: 1799, version: 3, value: [0x0c, 0x00])))
    }

    @Test("Undocumented receipt attributes of another form are kept raw, not fatal; negative ids and flags are")
    func undocumentedForms() throws {
        // Attribute 8 as text that is not a date, 10 as an INTEGER, 11 as a string: Apple documents none of them.
        let odd = [
            ReceiptAttribute(type: 8, version: 1, value: [0x16, 0x01, 0x78]),
            ReceiptAttribute(type: 10, version: 1, value: [0x02, 0x01, 0x05]),
            ReceiptAttribute(type: 11, version: 1, value: [0x0c, 0x01, 0x41]),
        ]
        var receipt = ReceiptFixtures.receipt(unknownAttributes: odd)
        (receipt.appTransactionDate, receipt.ageRating, receipt.developerID) = (nil, nil, nil)
        let result = verifier.verify(try ReceiptFixtures.signed(receipt), expecting: expectations, now: now)
        #expect(result.isValid, "\(String(describing: result.failure))")
        let decoded = try #require(result.receipt)
        #expect(decoded.appTransactionDate == nil && decoded.ageRating == nil && decoded.developerID == nil)
        #expect(Set(decoded.unknownAttributes.map(\.type)).isSuperset(of: [8, 10, 11]))
        for (type, value) in [(1711, [0x02, 0x01, 0xff] as [UInt8]), (1713, [0x02, 0x01, 0xff])] {
            var receipt = ReceiptFixtures.receipt()
            receipt.inAppPurchases[0].webOrderLineItemID = nil
            receipt.inAppPurchases[0].isTrialPeriod = nil
            receipt.inAppPurchases[0].unknownAttributes.append(
                ReceiptAttribute(type: Int64(type), version: 1, value: value))
            let negative = verifier.verify(try ReceiptFixtures.signed(receipt), expecting: expectations, now: now)
            #expect(negative.failure?.code == .malformed, "attribute \(type): \(String(describing: negative.failure))")
        }
    }

    @Test("Hundreds of purchases decode in payload order")
    func manyPurchases() throws {
        let receipt = ReceiptFixtures.receipt(purchases: 600)
        let unsorted = try receipt.signed(
            by: pki.leaf, key: pki.leafKey, chain: [pki.intermediate, pki.root], sorted: false)
        let result = verifier.verify(unsorted, expecting: expectations, now: now)
        let decoded = try #require(result.receipt)
        #expect(result.isValid)
        #expect(decoded.inAppPurchases.count == 601)
        #expect(decoded.inAppPurchases.map(\.transactionID) == receipt.inAppPurchases.map(\.transactionID))
    }

    @Test("malformed: not a receipt, not signed-data, or a payload breaking the grammar")
    func malformed() throws {
        let good = try ReceiptFixtures.signed()
        let cases: [[UInt8]] = [
            [], [0x30], [0x30, 0x00], Array(good.prefix(good.count - 1)), good + [0x00],
            DERWriter.encode { $0.appendSequence { $0.appendObjectIdentifier(ASN1ObjectIdentifier([1, 2, 3])) } },
        ]
        for bytes in cases {
            #expect(verifier.verify(bytes, expecting: expectations, now: now).failure?.code == .malformed)
        }
        // A payload without the bundle id, signed correctly: still malformed.
        var receipt = ReceiptFixtures.receipt()
        receipt.receiptType = ""
        let payload = Receipt.testPayload(dropping: 2, from: receipt)
        let signed = try PKCS7.sign(
            content: payload, signer: pki.leaf, key: pki.leafKey, chain: [pki.intermediate, pki.root], digest: .sha256)
        let failure = try #require(verifier.verify(signed, expecting: expectations, now: now).failure)
        #expect(failure.code == .malformed)
        #expect(failure.message.contains("attribute 2"))
    }

    @Test("signature_invalid: a changed payload byte, a changed signature, a foreign signer")
    func signatureInvalid() throws {
        let good = try ReceiptFixtures.signed()
        let content = ReceiptFixtures.receipt().payloadDER()
        let contentStart = try #require(good.firstRange(of: content)?.lowerBound)
        var tamperedPayload = good
        // Flip a byte inside the product id of the first purchase (still a valid payload).
        let product = Array("com.example.storekeeper.monthly".utf8)
        let productAt = try #require(tamperedPayload[contentStart...].firstRange(of: product)?.lowerBound)
        tamperedPayload[productAt + 5] ^= 0x01
        var tamperedSignature = good
        tamperedSignature[good.count - 10] ^= 0x01
        for bytes in [tamperedPayload, tamperedSignature] {
            let failure = try #require(verifier.verify(bytes, expecting: expectations, now: now).failure)
            #expect(failure.code == .signatureInvalid, "\(failure)")
        }
        // Signed by a key whose certificate is not embedded.
        let other = try TestPKI()
        let foreign = try PKCS7.sign(
            content: content, signer: other.leaf, key: other.leafKey, chain: [other.intermediate], digest: .sha256)
        #expect(verifier.verify(foreign, expecting: expectations, now: now).failure?.code == .untrustedChain)
    }

    @Test("Signed attributes are checked (RFC 5652 §5.4), not ignored")
    func signedAttributes() throws {
        let content = ReceiptFixtures.receipt().payloadDER()
        let signed = try PKCS7.sign(
            content: content, signer: pki.leaf, key: pki.leafKey, chain: [pki.intermediate, pki.root], digest: .sha256,
            signedAttributes: true)
        #expect(verifier.verify(signed, expecting: expectations, now: now).isValid)
        // Change the payload but keep the attributes: the messageDigest no longer matches.
        var tampered = signed
        let at = try #require(tampered.firstRange(of: Array("com.example.storekeeper.coins".utf8))?.lowerBound)
        tampered[at] ^= 0x01
        #expect(verifier.verify(tampered, expecting: expectations, now: now).failure?.code == .signatureInvalid)
    }

    @Test("untrusted_chain: unknown root, missing marker OIDs, a non-CA intermediate, a two-certificate path")
    func untrustedChain() throws {
        let receipt = ReceiptFixtures.receipt()
        let otherRoot = try TestPKI().root
        let wrongRoot = ReceiptVerifier(trustedRoots: [otherRoot])
        #expect(
            wrongRoot.verify(try ReceiptFixtures.signed(receipt), expecting: expectations, now: now).failure?.code
                == .untrustedChain)

        for broken in [
            try TestPKI(leafMarker: false), try TestPKI(intermediateMarker: false),
            try TestPKI(intermediateIsCA: false),
        ] {
            let bytes = try ReceiptFixtures.signed(receipt, pki: broken)
            let result = ReceiptVerifier(trustedRoots: [broken.root]).verify(bytes, expecting: expectations, now: now)
            #expect(result.failure?.code == .untrustedChain, "\(String(describing: result.failure))")
        }
        // Leaf signed directly by the trusted root: a path of two.
        let shortLeaf = try CertificateBuilder(
            commonName: "short", serialNumber: [9], notBefore: TestPKI.leafValidity.0, notAfter: TestPKI.leafValidity.1,
            isCA: false, markerExtensions: [AppleOID.receiptSigningLeaf]
        ).issue(subjectKey: try pki.leafKey.publicKey, issuer: pki.root, issuerKey: pki.rootKey)
        let bytes = try receipt.signed(by: shortLeaf, key: pki.leafKey, chain: [pki.root])
        #expect(verifier.verify(bytes, expecting: expectations, now: now).failure?.code == .untrustedChain)
    }

    @Test("A self-signed signer verifies only when the caller trusts it, like Xcode's StoreKit certificate")
    func selfSignedSigner() throws {
        let (key, certificate) = try TestPKI.selfSigned()
        let receipt = ReceiptFixtures.receipt(receiptType: "Xcode")
        let bytes = try ReceiptFixtures.berEnvelope(try receipt.signed(by: certificate, key: key, chain: []))
        #expect(verifier.verify(bytes, expecting: expectations, now: now).failure?.code == .untrustedChain)
        #expect(ReceiptVerifier(trustedRoots: [certificate]).verify(bytes, expecting: expectations, now: now).isValid)
    }

    @Test("certificate_not_valid_at_date: validity is judged at the creation date, not now")
    func notValidAtCreation() throws {
        let late = ReceiptFixtures.receipt(creationDate: Date(timeIntervalSince1970: 1_798_761_600))  // 2027-01-01
        let bytes = try ReceiptFixtures.signed(late)
        #expect(verifier.verify(bytes, expecting: expectations, now: now).failure?.code == .certificateNotValidAtDate)
        // A receipt created inside the leaf's window stays valid long after the leaf expired.
        let inside = try ReceiptFixtures.signed()
        #expect(
            verifier.verify(inside, expecting: expectations, now: Date(timeIntervalSince1970: 2_000_000_000)).isValid)
    }

    @Test("bundle_id_mismatch, bundle_version_mismatch and device_hash_mismatch, each byte-exact")
    func appChecks() throws {
        let bytes = try ReceiptFixtures.signed()
        var wrong = expectations
        wrong.bundleID = ReceiptFixtures.bundleID.uppercased()
        #expect(verifier.verify(bytes, expecting: wrong, now: now).failure?.code == .bundleIDMismatch)
        wrong = expectations
        wrong.bundleVersion = "42.0"
        #expect(verifier.verify(bytes, expecting: wrong, now: now).failure?.code == .bundleVersionMismatch)
        wrong = expectations
        wrong.deviceIdentifier = Array(ReceiptFixtures.deviceIdentifier.reversed())
        #expect(verifier.verify(bytes, expecting: wrong, now: now).failure?.code == .deviceHashMismatch)
        // Checks are skipped when the caller expects nothing.
        #expect(verifier.verify(bytes, expecting: ReceiptExpectations(), now: now).isValid)
    }

    @Test("receipt_expired: a licence expiry at or before now invalidates; a later one does not")
    func expired() throws {
        let expiry = now.addingTimeInterval(3600)
        let bytes = try ReceiptFixtures.signed(ReceiptFixtures.receipt(expirationDate: expiry))
        #expect(verifier.verify(bytes, expecting: expectations, now: now).isValid)
        #expect(verifier.verify(bytes, expecting: expectations, now: expiry).failure?.code == .receiptExpired)
        #expect(
            verifier.verify(bytes, expecting: expectations, now: expiry.addingTimeInterval(1)).failure?.code
                == .receiptExpired)
    }

    @Test("The first failing check wins, in the documented order")
    func order() throws {
        // Expired licence, wrong bundle and wrong device at once: the bundle id is reported.
        let bytes = try ReceiptFixtures.signed(ReceiptFixtures.receipt(expirationDate: now.addingTimeInterval(-1)))
        let wrong = ReceiptExpectations(bundleID: "x", bundleVersion: "y", deviceIdentifier: [1])
        #expect(verifier.verify(bytes, expecting: wrong, now: now).failure?.code == .bundleIDMismatch)
        // Untrusted and not valid at the date: untrusted wins.
        let late = try ReceiptFixtures.signed(
            ReceiptFixtures.receipt(creationDate: Date(timeIntervalSince1970: 1_798_761_600)))
        #expect(
            ReceiptVerifier(trustedRoots: []).verify(late, expecting: wrong, now: now).failure?.code == .untrustedChain)
    }

    @Test("Repeated verification hits the chain cache and gives the same verdicts")
    func cacheConsistency() throws {
        let good = try ReceiptFixtures.signed()
        let late = try ReceiptFixtures.signed(
            ReceiptFixtures.receipt(creationDate: Date(timeIntervalSince1970: 1_798_761_600)))
        let shared = verifier
        for _ in 0..<3 {
            #expect(shared.verify(good, expecting: expectations, now: now).isValid)
            #expect(shared.verify(late, expecting: expectations, now: now).failure?.code == .certificateNotValidAtDate)
        }
    }
}

extension Receipt {
    /// The payload with every attribute of `type` left out (to build receipts missing a required field).
    static func testPayload(dropping type: Int64, from receipt: Receipt) -> [UInt8] {
        let full = receipt.payloadDER(sorted: false)
        guard let root = try? ASN1.parse(full), var reader = try? root.children() else { return full }
        var kept: [[UInt8]] = []
        while let element = try? reader.next() {
            guard var parts = try? element.children(), let found = try? parts.read(.integer).int64() else { continue }
            if found != type { kept.append(Array(element.encoded)) }
        }
        return DERWriter.encode { $0.append(.set, content: kept.flatMap { $0 }) }
    }
}
