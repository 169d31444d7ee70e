import AppStoreReceipts
import Foundation
import StorekeeperCrypto
import StorekeeperTestSupport
import Testing

/// Signature, chain and device-hash checks of the real receipts (shared/vectors/README.md §1.3, §1.4).
@Suite("Verification of real receipts", .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
struct VectorVerificationTests {
    static let index: ReceiptVectorIndex = (try? ReceiptVectorIndex.load()) ?? ReceiptVectorIndex.empty
    static let files = index.entries.map(\.file)
    static let appleRoot = "certs/roots/apple-inc-root_2006-04-25_2035-02-09.cer"
    static let xcodeRoot = "certs/xcode/storekit-test-certificate_2020-04-01_2040-03-27.cer"
    /// The day these facts were written down for: after the newest Apple leaf expired (2026-08-23).
    static let afterAllAppleLeaves = ReceiptDate.parse("2026-11-29T00:00:00Z")!

    static func root(for entry: ReceiptVectorIndex.Entry) throws -> Certificate {
        let path = entry.root.contains("apple-inc-root") ? appleRoot : xcodeRoot
        return try #require(try Certificate.load(Vectors.bytes(path)).first)
    }

    static func otherRoot(for entry: ReceiptVectorIndex.Entry) throws -> Certificate {
        let path = entry.root.contains("apple-inc-root") ? xcodeRoot : appleRoot
        return try #require(try Certificate.load(Vectors.bytes(path)).first)
    }

    @Test("Each receipt verifies against its root at its creation date", arguments: files)
    func verifiesAtCreation(file: String) throws {
        let entry = try #require(Self.index.entries.first(where: { $0.file == file }))
        let bytes = try Vectors.bytes("receipts/" + file)
        let verifier = ReceiptVerifier(trustedRoots: [try Self.root(for: entry)])
        let created = try #require(ReceiptDate.parse(entry.created))
        let result = verifier.verify(bytes, expecting: ReceiptExpectations(bundleID: entry.bundleID), now: created)
        #expect(result.isValid, "\(file): \(String(describing: result.failure))")
    }

    @Test("Each receipt's validity today is what the README says", arguments: files)
    func validityToday(file: String) throws {
        let entry = try #require(Self.index.entries.first(where: { $0.file == file }))
        let bytes = try Vectors.bytes("receipts/" + file)
        let root = try Self.root(for: entry)
        // Validity is checked at the creation date; only a chain that was never valid then fails. To see
        // "today", re-evaluate the same path at today's date, as a verifier using the current time would.
        let verifier = ChainVerifier(
            trustedRoots: [root],
            policy: .appleThreeLevel(
                leafMarker: AppleOID.receiptSigningLeaf, intermediateMarker: AppleOID.wwdrIntermediate))
        let envelopeCertificates = try PKCS7Certificates.extract(bytes)
        let result = verifier.evaluate(signer: envelopeCertificates[0], others: Array(envelopeCertificates.dropFirst()))
            .result(at: Self.afterAllAppleLeaves)
        switch result {
        case .valid:
            #expect(entry.verifiesNow, "\(file) should have expired")
        case .invalid(let failure):
            #expect(!entry.verifiesNow, "\(file): \(failure)")
            #expect(failure.code == .notValidAtTime)
        }
    }

    @Test("OpenSSL's own CMS verifier agrees at the creation date", arguments: files)
    func openSSLAgrees(file: String) throws {
        let entry = try #require(Self.index.entries.first(where: { $0.file == file }))
        let bytes = try Vectors.bytes("receipts/" + file)
        let created = try #require(ReceiptDate.parse(entry.created))
        let content = try PKCS7.verifyWithOpenSSL(bytes, trustedRoots: [try Self.root(for: entry)], at: created)
        let receipt = try Receipt(payload: content)
        #expect(receipt.bundleID == entry.bundleID)
        #expect(throws: CryptoError.self) {
            try PKCS7.verifyWithOpenSSL(bytes, trustedRoots: [try Self.otherRoot(for: entry)], at: created)
        }
    }

    @Test("Against the other root, each receipt is an untrusted chain", arguments: files)
    func wrongRoot(file: String) throws {
        let entry = try #require(Self.index.entries.first(where: { $0.file == file }))
        let bytes = try Vectors.bytes("receipts/" + file)
        let created = try #require(ReceiptDate.parse(entry.created))
        let verifier = ReceiptVerifier(trustedRoots: [try Self.otherRoot(for: entry)])
        #expect(verifier.verify(bytes, expecting: ReceiptExpectations(), now: created).failure?.code == .untrustedChain)
        let noRoots = ReceiptVerifier(trustedRoots: [])
        #expect(noRoots.verify(bytes, expecting: ReceiptExpectations(), now: created).failure?.code == .untrustedChain)
    }

    @Test("A signature made through an expired chain reports certificate_not_valid_at_date")
    func expiredLeafAtCreation() throws {
        // The 2015 receipts were signed inside 2010-11-11 … 2015-11-11; a receipt claiming a later creation
        // date would break the signature, so take the path check alone at a date outside the window.
        let entry = try #require(Self.index.entries.first(where: { $0.file == "kvitto/sandboxReceipt.der" }))
        let bytes = try Vectors.bytes("receipts/" + entry.file)
        let certificates = try PKCS7Certificates.extract(bytes)
        let verifier = ChainVerifier(
            trustedRoots: [try Self.root(for: entry)],
            policy: .appleThreeLevel(
                leafMarker: AppleOID.receiptSigningLeaf, intermediateMarker: AppleOID.wwdrIntermediate))
        let evaluation = verifier.evaluate(signer: certificates[0], others: Array(certificates.dropFirst()))
        #expect(evaluation.result(at: ReceiptDate.parse("2015-11-12T00:00:00Z")!).isValid == false)
        #expect(evaluation.result(at: ReceiptDate.parse("2015-11-10T00:00:00Z")!).isValid)
    }

    @Test("The device-hash pairs reproduce attribute 5 and fail with another identifier")
    func deviceHashes() throws {
        #expect(Self.index.deviceHashes.count == 5)
        for vector in Self.index.deviceHashes {
            let entry = try #require(Self.index.entries.first(where: { $0.file == vector.file }))
            let bytes = try Vectors.bytes("receipts/" + vector.file)
            let verifier = ReceiptVerifier(trustedRoots: [try Self.root(for: entry)])
            let created = try #require(ReceiptDate.parse(entry.created))
            let good = verifier.verify(
                bytes, expecting: ReceiptExpectations(deviceIdentifier: vector.identifier), now: created)
            #expect(good.isValid, "\(vector.file): \(String(describing: good.failure))")
            #expect(good.receipt?.sha1Hash == vector.expectedHash)
            var other = vector.identifier
            other[0] ^= 0x01
            let bad = verifier.verify(bytes, expecting: ReceiptExpectations(deviceIdentifier: other), now: created)
            #expect(bad.failure?.code == .deviceHashMismatch)
        }
    }

    @Test("Bundle id and version mismatches are reported on a real receipt")
    func bundleChecks() throws {
        let entry = try #require(
            Self.index.entries.first(where: { $0.file == "tpinappreceipt/receipt-sandbox-g5.der" }))
        let bytes = try Vectors.bytes("receipts/" + entry.file)
        let verifier = ReceiptVerifier(trustedRoots: [try Self.root(for: entry)])
        let created = try #require(ReceiptDate.parse(entry.created))
        #expect(
            verifier.verify(bytes, expecting: ReceiptExpectations(bundleID: "dev.bonzer.weeka.APP"), now: created)
                .failure?.code == .bundleIDMismatch)
        #expect(
            verifier.verify(
                bytes, expecting: ReceiptExpectations(bundleID: entry.bundleID, bundleVersion: "3"), now: created
            )
            .failure?.code == .bundleVersionMismatch)
        #expect(
            verifier.verify(
                bytes, expecting: ReceiptExpectations(bundleID: entry.bundleID, bundleVersion: "2"), now: created
            )
            .isValid)
    }

    @Test("A legacy iOS 6 transaction receipt is malformed")
    func legacyReceipt() throws {
        let text = try Vectors.bytes("legacy/appreceiptvalidator/deprecatedSinglesTypeExpiredAppleCert_receipt.b64")
        let verifier = ReceiptVerifier(trustedRoots: [])
        let bytes = try Receipt.bytes(fromDERorBase64: text)
        #expect(verifier.verify(bytes, expecting: ReceiptExpectations(), now: Date()).failure?.code == .malformed)
    }

    @Test("Base64 files decode to the same receipt as their DER twins")
    func base64Twins() throws {
        for file in ["tpinappreceipt/receipt-production", "revenuecat-purchases-ios/base64encodedreceiptsample1"] {
            let der = try Vectors.bytes("receipts/\(file).der")
            #expect(try Receipt.bytes(fromDERorBase64: Vectors.bytes("receipts/\(file).b64")) == der)
        }
    }
}

extension ChainResult {
    var isValid: Bool {
        if case .valid = self { return true }
        return false
    }
}

/// The certificates of a receipt's envelope, signer first.
enum PKCS7Certificates {
    static func extract(_ bytes: [UInt8]) throws -> [[UInt8]] {
        try Receipt.embeddedCertificates(in: bytes)
    }
}
