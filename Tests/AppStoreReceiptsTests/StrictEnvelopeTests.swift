import AppStoreReceipts
import Foundation
import StorekeeperTestSupport
import Testing

/// Encodings Apple does not produce are refused, each with its own reason (issue: strict verification).
@Suite("Strict receipt envelopes")
struct StrictEnvelopeTests {
    static let dataOID: [UInt8] = [0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01]
    static let sha256OID: [UInt8] = [0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01]

    /// The receipt with the first occurrence of `pattern` changed so that its last byte is `last`.
    static func replacingLastByte(of pattern: [UInt8], with last: UInt8) throws -> [UInt8] {
        var bytes = try ReceiptFixtures.signed()
        let index = try #require(
            (0...(bytes.count - pattern.count)).first { bytes[$0..<($0 + pattern.count)].elementsEqual(pattern) })
        bytes[index + pattern.count - 1] = last
        return bytes
    }

    static func failure(_ bytes: [UInt8]) -> ReceiptVerificationFailure? {
        ReceiptVerifier(trustedRoots: [TestPKI.shared.root]).verify(
            bytes, expecting: .init(), now: TestPKI.referenceDate
        ).failure
    }

    @Test("The unmodified receipt verifies (the mutations below are the only change)")
    func baseline() throws {
        #expect(Self.failure(try ReceiptFixtures.signed()) == nil)
    }

    @Test("A signed content type other than data (here envelopedData) is malformed")
    func contentType() throws {
        let failure = try #require(Self.failure(try Self.replacingLastByte(of: Self.dataOID, with: 0x03)))
        #expect(failure.code == .malformed)
        #expect(failure.message.contains("content type is not data"))
    }

    @Test("A digestAlgorithms entry that is not a digest algorithm is malformed")
    func notADigest() throws {
        let failure = try #require(Self.failure(try Self.replacingLastByte(of: Self.sha256OID, with: 0x7f)))
        #expect(failure.code == .malformed)
        #expect(failure.message.contains("not a digest algorithm"))
    }

    @Test("digestAlgorithms that do not list the signer's algorithm are malformed")
    func inconsistentDigest() throws {
        // SHA-256 in the set becomes SHA-384; the signer still says SHA-256.
        let failure = try #require(Self.failure(try Self.replacingLastByte(of: Self.sha256OID, with: 0x02)))
        #expect(failure.code == .malformed)
        #expect(failure.message.contains("not among digestAlgorithms"))
    }

    @Test("Bytes after the envelope are malformed")
    func trailing() throws {
        let failure = try #require(Self.failure(try ReceiptFixtures.signed() + [0x00, 0x00]))
        #expect(failure.code == .malformed)
    }
}
