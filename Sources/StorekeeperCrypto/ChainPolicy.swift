public import StorekeeperASN1

/// What a certificate path must look like besides ending in a trusted root.
///
/// Apple's rule for receipts and signed data: leaf → intermediate → root, with a marker extension on the
/// leaf and another on the intermediate. A signer that is itself one of the caller's trusted roots (Xcode's
/// self-signed test certificates) is a separate, explicit allowance.
public struct ChainPolicy: Sendable, Hashable {
    /// For each accepted path length (leaf and root counted), the extensions required at each position
    /// (0 = leaf).
    public var requiredExtensions: [Int: [Int: [ASN1ObjectIdentifier]]]
    /// Whether a signer that is one of the trusted roots is accepted on its own (a path of length 1).
    public var acceptsTrustedSigner: Bool
    /// OpenSSL's `X509_V_FLAG_X509_STRICT` (RFC 5280 conformance checks), as Apple's Python library sets for
    /// signed data.
    public var strict: Bool

    public init(
        requiredExtensions: [Int: [Int: [ASN1ObjectIdentifier]]], acceptsTrustedSigner: Bool, strict: Bool = false
    ) {
        self.requiredExtensions = requiredExtensions
        self.acceptsTrustedSigner = acceptsTrustedSigner
        self.strict = strict
    }

    /// Apple's App Store signing paths: three certificates, the leaf carrying `leafMarker`, the intermediate
    /// `intermediateMarker`; a trusted self-signed signer is accepted too (the caller chose to trust it).
    public static func appleThreeLevel(leafMarker: ASN1ObjectIdentifier, intermediateMarker: ASN1ObjectIdentifier)
        -> ChainPolicy
    {
        ChainPolicy(requiredExtensions: [3: [0: [leafMarker], 1: [intermediateMarker]]], acceptsTrustedSigner: true)
    }

    /// Apple's rule for StoreKit 2 signed data: exactly leaf → WWDR intermediate → trusted root with both
    /// markers, strict RFC 5280 checks, no self-signed signer.
    public static let appleSignedData = ChainPolicy(
        requiredExtensions: [3: [0: [AppleOID.receiptSigningLeaf], 1: [AppleOID.wwdrIntermediate]]],
        acceptsTrustedSigner: false, strict: true)
}

/// Apple's marker extensions (values `05 00`, non-critical).
public enum AppleOID {
    /// On App Store receipt and signed-data signing leaves ("Mac App Store Receipt Signing").
    public static let receiptSigningLeaf = ASN1ObjectIdentifier([1, 2, 840, 113_635, 100, 6, 11, 1])
    /// On Apple Worldwide Developer Relations intermediates.
    public static let wwdrIntermediate = ASN1ObjectIdentifier([1, 2, 840, 113_635, 100, 6, 2, 1])
}
