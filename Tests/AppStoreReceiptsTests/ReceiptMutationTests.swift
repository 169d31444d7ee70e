import AppStoreReceipts
import Foundation
import StorekeeperASN1
import StorekeeperCrypto
import StorekeeperTestSupport
import Testing

/// Flips, truncations, extensions and hostile encodings: every outcome is a value; nothing crashes or hangs,
/// and nothing but the original content is ever accepted.
@Suite("Receipt mutations")
struct ReceiptMutationTests {
    /// Runs `count` mutations of `original` and checks each outcome.
    static func mutate(_ original: [UInt8], roots: [Certificate], now: Date, count: Int, seed: UInt64) throws -> Int {
        let verifier = ReceiptVerifier(trustedRoots: roots)
        let baseline = verifier.verify(original, expecting: ReceiptExpectations(), now: now)
        let originalReceipt = try #require(baseline.receipt)
        var generator = SeededGenerator(seed: seed)
        var rejected = 0
        for round in 0..<count {
            var bytes = original
            switch round % 6 {
            case 0, 1:  // flip one to three bits anywhere
                for _ in 0...Int.random(in: 0...2, using: &generator) {
                    let index = Int.random(in: 0..<bytes.count, using: &generator)
                    bytes[index] ^= UInt8(1) << UInt8.random(in: 0...7, using: &generator)
                }
            case 2:  // overwrite a byte with a boundary value (often a tag or length octet)
                let index = Int.random(in: 0..<bytes.count, using: &generator)
                bytes[index] =
                    [0x00, 0x80, 0x81, 0x84, 0xff, 0x30, 0x31, 0xa0, 0x04, 0x24][
                        Int.random(in: 0..<10, using: &generator)]
            case 3:  // truncate
                bytes.removeLast(Int.random(in: 1..<bytes.count, using: &generator))
            case 4:  // extend with garbage
                bytes += (0..<Int.random(in: 1...64, using: &generator)).map { _ in
                    UInt8.random(in: 0...255, using: &generator)
                }
            default:  // cut a slice out of the middle
                let start = Int.random(in: 0..<bytes.count - 1, using: &generator)
                bytes.removeSubrange(start..<min(bytes.count, start + Int.random(in: 1...32, using: &generator)))
            }
            let result = verifier.verify(bytes, expecting: ReceiptExpectations(), now: now)
            switch result {
            case .valid(let receipt):
                // Only bytes outside what is signed and trusted (an embedded copy of a root, say) may change.
                #expect(receipt == originalReceipt, "mutation \(round) was accepted with different content")
            case .invalid:
                rejected += 1
            }
        }
        return rejected
    }

    @Test("Thousands of mutations of a receipt built here never crash and never pass with other content")
    func fixtureMutations() throws {
        let pki = TestPKI.shared
        let original = try ReceiptFixtures.signed()
        let rejected = try Self.mutate(original, roots: [pki.root], now: TestPKI.referenceDate, count: 3000, seed: 1)
        #expect(rejected > 2500)
        let ber = try ReceiptFixtures.berEnvelope(original, chunkSize: 64)
        _ = try Self.mutate(ber, roots: [pki.root], now: TestPKI.referenceDate, count: 1500, seed: 2)
    }

    @Test(
        "Mutations of the real receipts never crash and never pass with other content",
        .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
    func vectorMutations() throws {
        let index = try ReceiptVectorIndex.load()
        let appleRoot = try Certificate(
            derEncoded: Vectors.bytes("certs/roots/apple-inc-root_2006-04-25_2035-02-09.cer"))
        let xcodeRoot = try Certificate(
            derEncoded: Vectors.bytes("certs/xcode/storekit-test-certificate_2020-04-01_2040-03-27.cer"))
        var total = 0
        for (number, entry) in index.entries.enumerated() {
            let bytes = try Vectors.bytes("receipts/" + entry.file)
            let created = try #require(ReceiptDate.parse(entry.created))
            total += try Self.mutate(
                bytes, roots: [appleRoot, xcodeRoot], now: created, count: 150, seed: UInt64(number + 10))
        }
        #expect(total > 26 * 100)
    }

    @Test(
        "Hostile lengths, deep nesting and huge counts are errors, not crashes",
        arguments: [
            [0x30, 0x84, 0xff, 0xff, 0xff, 0xff],
            [0x30, 0x88, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            [0x30, 0x89, 0x01, 0, 0, 0, 0, 0, 0, 0, 0],
            [0x30, 0xff],
            [0x30, 0x80],
            [0x04, 0x80, 0x00, 0x00],
            [0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00],
            Array(repeating: 0x30, count: 1) + [0x80] + Array(repeating: 0x00, count: 1),
        ] as [[UInt8]])
    func hostile(bytes: [UInt8]) {
        let result = ReceiptVerifier(trustedRoots: []).verify(bytes, expecting: ReceiptExpectations(), now: Date())
        #expect(result.failure?.code == .malformed)
    }

    @Test("Indefinite nesting 100 000 deep stops at the depth limit")
    func deepIndefinite() {
        let depth = 100_000
        let bytes =
            Array([[UInt8]](repeating: [0x30, 0x80], count: depth).joined())
            + Array(repeating: 0x00, count: 2 * depth)
        let result = ReceiptVerifier(trustedRoots: []).verify(bytes, expecting: ReceiptExpectations(), now: Date())
        #expect(result.failure?.code == .malformed)
        #expect(result.failure?.message.contains("deeper") == true)
    }

    @Test("Nested garbage inside an in-app attribute is malformed")
    func deepPayload() throws {
        var inner: [UInt8] = [0x05, 0x00]
        for _ in 0..<200 { inner = DERWriter.encode { $0.append(.sequence, content: inner) } }
        let attribute = Receipt.encodeForTest(type: 17, value: inner)
        let payload = DERWriter.encode { $0.append(.set, content: attribute) }
        #expect(throws: ReceiptError.self) { try Receipt(payload: payload) }
    }

    @Test("Limits on purchases and size are enforced")
    func limits() throws {
        var limits = ReceiptLimits()
        limits.maxPurchases = 10
        let payload = ReceiptFixtures.receipt(purchases: 20).payloadDER()
        #expect(throws: ReceiptError.self) { try Receipt(payload: payload, limits: limits) }
        limits = ReceiptLimits()
        limits.maxSize = 100
        let bytes = try ReceiptFixtures.signed()
        let result = ReceiptVerifier(trustedRoots: [TestPKI.shared.root], limits: limits)
            .verify(bytes, expecting: ReceiptExpectations(), now: TestPKI.referenceDate)
        #expect(result.failure?.code == .malformed)
    }
}

extension Receipt {
    static func encodeForTest(type: Int64, value: [UInt8]) -> [UInt8] {
        DERWriter.encode { writer in
            writer.appendSequence {
                $0.appendInteger(type)
                $0.appendInteger(1)
                $0.appendOctetString(value)
            }
        }
    }
}
