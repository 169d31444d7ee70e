public import Foundation

/// A three-level signing hierarchy shaped like Apple's (root → intermediate carrying the WWDR marker →
/// leaf carrying the receipt-signing marker), generated with fresh keys.
///
/// The emulator signs receipts (RSA) and signed data (P-256) with such chains; tests and the sample receipt
/// use them too. Flags let tests drop a marker or the intermediate's CA bit to build broken chains.
public struct SigningChain: Sendable {
    public let rootKey: PrivateKey
    public let root: Certificate
    public let intermediateKey: PrivateKey
    public let intermediate: Certificate
    public let leafKey: PrivateKey
    public let leaf: Certificate

    public enum KeyKind: Sendable {
        case rsa2048
        case p256

        func generate() throws -> PrivateKey {
            switch self {
            case .rsa2048: try PrivateKey.generateRSA(bits: 2048)
            case .p256: try PrivateKey.generateP256()
            }
        }

        var digest: DigestAlgorithm { .sha256 }
    }

    public struct Options: Sendable {
        public var keyKind: KeyKind = .rsa2048
        public var organization = "Storekeeper"
        public var rootName = "Storekeeper Root CA"
        public var intermediateName = "Storekeeper Worldwide Developer Relations"
        public var leafName = "Storekeeper Receipt Signing"
        /// Validity of the root and the intermediate.
        public var caValidity: (Date, Date)
        /// Validity of the leaf.
        public var leafValidity: (Date, Date)
        public var leafMarker = true
        public var intermediateMarker = true
        public var intermediateIsCA = true
        /// OCSP responder named in the leaf's and the intermediate's Authority Information Access.
        public var ocspURL: String?

        public init(caValidity: (Date, Date), leafValidity: (Date, Date)) {
            self.caValidity = caValidity
            self.leafValidity = leafValidity
        }
    }

    public init(_ options: Options) throws {
        let kind = options.keyKind
        rootKey = try kind.generate()
        root = try CertificateBuilder(
            commonName: options.rootName, organization: options.organization, country: "US", serialNumber: [0x01],
            notBefore: options.caValidity.0, notAfter: options.caValidity.1, isCA: true,
            keyUsage: "critical,keyCertSign,cRLSign", signatureDigest: kind.digest
        ).issue(subjectKey: try rootKey.publicKey, issuer: nil, issuerKey: rootKey)
        intermediateKey = try kind.generate()
        intermediate = try CertificateBuilder(
            commonName: options.intermediateName, organization: options.organization, organizationalUnit: "G1",
            country: "US", serialNumber: [0x02], notBefore: options.caValidity.0, notAfter: options.caValidity.1,
            isCA: options.intermediateIsCA, pathLength: options.intermediateIsCA ? 0 : nil,
            keyUsage: options.intermediateIsCA ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature",
            markerExtensions: options.intermediateMarker ? [AppleOID.wwdrIntermediate] : [],
            signatureDigest: kind.digest, ocspURL: options.ocspURL
        ).issue(subjectKey: try intermediateKey.publicKey, issuer: root, issuerKey: rootKey)
        leafKey = try kind.generate()
        leaf = try CertificateBuilder(
            commonName: options.leafName, organization: options.organization, country: "US",
            serialNumber: [0x03, 0x7f], notBefore: options.leafValidity.0, notAfter: options.leafValidity.1,
            isCA: false, keyUsage: "critical,digitalSignature",
            markerExtensions: options.leafMarker ? [AppleOID.receiptSigningLeaf] : [], signatureDigest: kind.digest,
            ocspURL: options.ocspURL
        ).issue(subjectKey: try leafKey.publicKey, issuer: intermediate, issuerKey: intermediateKey)
    }

    /// The certificates to embed after the leaf, as Apple does: intermediate, then root.
    public var embedded: [Certificate] { [intermediate, root] }

    /// A self-signed signer like Xcode's `StoreKit` certificate: CA, code-signing EKU, no marker OIDs.
    public static func selfSigned(commonName: String, validity: (Date, Date), keyKind: KeyKind = .rsa2048) throws
        -> (key: PrivateKey, certificate: Certificate)
    {
        let key = try keyKind.generate()
        let certificate = try CertificateBuilder(
            commonName: commonName, serialNumber: [0x10], notBefore: validity.0, notAfter: validity.1, isCA: true,
            extendedKeyUsage: "critical,codeSigning", signatureDigest: keyKind.digest
        ).issue(subjectKey: try key.publicKey, issuer: nil, issuerKey: key)
        return (key, certificate)
    }
}
