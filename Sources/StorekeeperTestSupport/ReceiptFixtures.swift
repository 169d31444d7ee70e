public import AppStoreReceipts
public import Foundation
import StorekeeperASN1
public import StorekeeperCrypto

/// Receipts built in code from a fixed reference time, signed by ``TestPKI``.
public enum ReceiptFixtures {
    public static let bundleID = "com.example.storekeeper"
    public static let appVersion = "42"
    /// The device identifier the fixtures' hash is computed for.
    public static let deviceIdentifier: [UInt8] = Array(0x10..<0x20)
    public static var opaqueValue: [UInt8] { receipt().opaqueValue }

    /// A production-like receipt with `purchases` auto-renewable periods followed by one consumable.
    public static func receipt(
        purchases: Int = 3, creationDate: Date = TestPKI.referenceDate, receiptType: String = "Production",
        expirationDate: Date? = nil, unknownAttributes: [ReceiptAttribute] = []
    ) -> Receipt {
        Receipt.example(
            bundleID: bundleID, appVersion: appVersion, creationDate: creationDate, deviceIdentifier: deviceIdentifier,
            renewals: purchases, receiptType: receiptType, expirationDate: expirationDate,
            unknownAttributes: unknownAttributes)
    }

    /// `receipt` signed by the shared test chain (leaf, intermediate, root embedded).
    public static func signed(
        _ receipt: Receipt = receipt(), pki: TestPKI = .shared, digest: DigestAlgorithm = .sha256
    ) throws -> [UInt8] {
        try receipt.signed(by: pki.leaf, key: pki.leafKey, chain: [pki.intermediate, pki.root], digest: digest)
    }

    /// Re-encodes a DER receipt the way Xcode does: indefinite lengths on ContentInfo, its `[0]`, SignedData,
    /// EncapsulatedContentInfo and its `[0]`, and the payload as a constructed OCTET STRING of `chunkSize`
    /// chunks.
    public static func berEnvelope(_ der: [UInt8], chunkSize: Int = 512) throws -> [UInt8] {
        func indefinite(_ tag: ASN1Tag, _ parts: [[UInt8]]) -> [UInt8] {
            tag.constructed(true).encoded + [0x80] + parts.flatMap { $0 } + [0x00, 0x00]
        }
        func children(_ element: ASN1Element) throws -> [ASN1Element] {
            var reader = try element.children()
            var result: [ASN1Element] = []
            while let child = try reader.next() { result.append(child) }
            return result
        }
        let root = try ASN1.parse(der)
        let contentInfo = try children(root)
        let signedData = try children(try children(contentInfo[1])[0])
        let encapsulated = try children(signedData[2])
        let payload = try children(encapsulated[1])[0].octetString()
        var chunks: [[UInt8]] = []
        var offset = 0
        repeat {
            let end = min(offset + chunkSize, payload.count)
            var writer = DERWriter()
            writer.appendOctetString(payload[offset..<end])
            chunks.append(writer.bytes)
            offset = end
        } while offset < payload.count
        let eContent = indefinite(.octetString, chunks)
        let encap = indefinite(
            .sequence, [Array(encapsulated[0].encoded), indefinite(.contextSpecific(0, constructed: true), [eContent])])
        var signedParts = signedData.map { Array($0.encoded) }
        signedParts[2] = encap
        let signed = indefinite(.sequence, signedParts)
        return indefinite(
            .sequence, [Array(contentInfo[0].encoded), indefinite(.contextSpecific(0, constructed: true), [signed])])
    }
}

/// A small deterministic generator (SplitMix64) for mutation tests.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
