public import Crypto
public import Foundation

/// Certificate chains built in code for tests: an Apple-like RSA chain for receipts (root → intermediate
/// with the WWDR marker → leaf with the receipt-signing marker) and a self-signed, Xcode-like signer.
public struct TestPKI: Sendable {
    public let rootKey: PrivateKey
    public let root: Certificate
    public let intermediateKey: PrivateKey
    public let intermediate: Certificate
    public let leafKey: PrivateKey
    public let leaf: Certificate

    /// The reference time fixtures are built around: 2024-01-01T00:00:00Z.
    public static let referenceDate = Date(timeIntervalSince1970: 1_704_067_200)

    /// Validity of the default leaf: 2023-01-01 … 2026-01-01.
    public static let leafValidity = (Date(timeIntervalSince1970: 1_672_531_200), Date(timeIntervalSince1970: 1_767_225_600))

    /// One shared chain (RSA key generation is slow; the keys are never secret).
    public static let shared: TestPKI = {
        do {
            return try TestPKI()
        } catch {
            fatalError("cannot build the test PKI: \(error)")
        }
    }()

    /// Builds a chain; the flags drop the marker extensions or the CA bit to make broken chains.
    public init(
        leafMarker: Bool = true, intermediateMarker: Bool = true, intermediateIsCA: Bool = true,
        leafNotBefore: Date = TestPKI.leafValidity.0, leafNotAfter: Date = TestPKI.leafValidity.1,
        keyKind: KeyKind = .rsa
    ) throws {
        let start = Date(timeIntervalSince1970: 1_577_836_800)  // 2020-01-01
        let end = Date(timeIntervalSince1970: 2_208_988_800)  // 2040-01-01
        rootKey = try keyKind.generate()
        root = try CertificateBuilder(
            commonName: "Storekeeper Test Root CA", organization: "Storekeeper Tests", country: "US",
            serialNumber: [0x01], notBefore: start, notAfter: end, isCA: true,
            keyUsage: "critical,keyCertSign,cRLSign"
        ).issue(subjectKey: try rootKey.publicKey, issuer: nil, issuerKey: rootKey)
        intermediateKey = try keyKind.generate()
        intermediate = try CertificateBuilder(
            commonName: "Storekeeper Test Worldwide Developer Relations", organization: "Storekeeper Tests",
            organizationalUnit: "G1", country: "US", serialNumber: [0x02], notBefore: start, notAfter: end,
            isCA: intermediateIsCA, pathLength: intermediateIsCA ? 0 : nil,
            keyUsage: intermediateIsCA ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature",
            markerExtensions: intermediateMarker ? [AppleOID.wwdrIntermediate] : []
        ).issue(subjectKey: try intermediateKey.publicKey, issuer: root, issuerKey: rootKey)
        leafKey = try keyKind.generate()
        leaf = try CertificateBuilder(
            commonName: "Storekeeper Test Receipt Signing", organization: "Storekeeper Tests", country: "US",
            serialNumber: [0x03, 0x7f], notBefore: leafNotBefore, notAfter: leafNotAfter, isCA: false,
            keyUsage: "critical,digitalSignature", markerExtensions: leafMarker ? [AppleOID.receiptSigningLeaf] : []
        ).issue(subjectKey: try leafKey.publicKey, issuer: intermediate, issuerKey: intermediateKey)
    }

    public enum KeyKind: Sendable {
        case rsa
        case p256

        func generate() throws -> PrivateKey {
            switch self {
            case .rsa: try PrivateKey.generateRSA(bits: 2048)
            case .p256: try PrivateKey.generateP256()
            }
        }
    }

    /// A self-signed RSA signer like Xcode's `StoreKit` certificate (code-signing EKU, no marker OIDs).
    public static func selfSigned(commonName: String = "Storekeeper Test StoreKit") throws -> (PrivateKey, Certificate) {
        let key = try PrivateKey.generateRSA(bits: 2048)
        let certificate = try CertificateBuilder(
            commonName: commonName, serialNumber: [0x10], notBefore: Date(timeIntervalSince1970: 1_577_836_800),
            notAfter: Date(timeIntervalSince1970: 2_208_988_800), isCA: true, extendedKeyUsage: "critical,codeSigning"
        ).issue(subjectKey: try key.publicKey, issuer: nil, issuerKey: key)
        return (key, certificate)
    }
}
