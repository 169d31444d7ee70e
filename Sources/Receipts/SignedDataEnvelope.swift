import ASN1

/// The parts of a PKCS #7 signed-data envelope that receipt verification needs (RFC 2315 §9.1,
/// RFC 5652 §5), read in place without copying the certificates.
///
/// ```
/// ContentInfo ::= SEQUENCE { contentType OID signedData, content [0] EXPLICIT SignedData }
/// SignedData ::= SEQUENCE { version INTEGER, digestAlgorithms SET, encapContentInfo SEQUENCE {
///     eContentType OID, eContent [0] EXPLICIT OCTET STRING OPTIONAL },
///   certificates [0] IMPLICIT SET OF Certificate OPTIONAL, crls [1] IMPLICIT ANY OPTIONAL,
///   signerInfos SET OF SignerInfo }
/// SignerInfo ::= SEQUENCE { version INTEGER, sid IssuerAndSerialNumber | [0] SubjectKeyIdentifier,
///   digestAlgorithm AlgorithmIdentifier, signedAttrs [0] IMPLICIT SET OF Attribute OPTIONAL,
///   signatureAlgorithm AlgorithmIdentifier, signature OCTET STRING, unsignedAttrs [1] IMPLICIT OPTIONAL }
/// ```
struct SignedDataEnvelope {
    /// The signed content octets (chunks of a BER constructed string joined).
    var content: ArraySlice<UInt8>
    /// The document holding the payload (the envelope's own unless the content was a constructed string) and
    /// the payload's root element.
    var payloadDocument: ASN1Document
    var payloadRoot: ASN1Node
    /// The embedded certificates, read in place.
    var certificates: [ASN1Element]
    var signer: SignerInfo

    struct SignerInfo {
        /// The issuer `Name` (complete encoding) and serial INTEGER content of the signer's certificate,
        /// or nil when the signer is named by subject key identifier.
        var issuer: ArraySlice<UInt8>?
        var serial: ArraySlice<UInt8>?
        var subjectKeyIdentifier: [UInt8]?
        var digestAlgorithm: ASN1ObjectIdentifier
        var signatureAlgorithm: ASN1ObjectIdentifier
        /// The signed attributes re-tagged as the `SET OF` they are signed as, and their content.
        var signedAttributes: (encodedAsSet: [UInt8], element: ASN1Element)?
        var signature: [UInt8]
    }

    static let signedDataOID = ASN1ObjectIdentifier([1, 2, 840, 113_549, 1, 7, 2])

    init(_ bytes: [UInt8], limits: ReceiptLimits) throws {
        let rules = ASN1Rules(
            allowsBER: true, maxDepth: limits.maxDepth, maxSize: limits.maxSize,
            maxChildren: limits.maxPurchases + 1024)
        let root = try ASN1.parse(bytes, rules: rules).expect(.sequence)
        var contentInfo = try root.children()
        guard try contentInfo.read(.objectIdentifier).objectIdentifier() == Self.signedDataOID else {
            throw ASN1Error.make(.invalidValue, "content type is not signedData")
        }
        var explicit = try contentInfo.read(.contextSpecific(0, constructed: true)).children()
        try contentInfo.finish()
        let signedData = try explicit.read(.sequence)
        try explicit.finish()

        var fields = try signedData.children()
        _ = try fields.read(.integer).int64()
        _ = try fields.read(.set)
        var encapsulated = try fields.read(.sequence).children()
        _ = try encapsulated.read(.objectIdentifier).objectIdentifier()
        guard let eContentWrapper = try encapsulated.readIfPresent(.contextSpecific(0, constructed: true)) else {
            throw ASN1Error.make(.invalidValue, "signed-data without embedded content")
        }
        try encapsulated.finish()
        var wrapper = try eContentWrapper.children()
        guard let eContent = try wrapper.next() else { throw ASN1Error.make(.truncated, "empty eContent") }
        try wrapper.finish()
        if eContent.tag == .octetString {
            content = eContent.content
            payloadDocument = eContent.document
            payloadRoot = try eContent.document.inner(of: eContent.node)
        } else {
            let joined = try eContent.octetString()
            content = joined[...]
            payloadDocument = try ASN1Document(joined, rules: rules)
            payloadRoot = try payloadDocument.root()
        }

        certificates = []
        if let set = try fields.readIfPresent(.contextSpecific(0, constructed: true)) {
            var reader = try set.children()
            while let certificate = try reader.next() {
                try certificate.expect(.sequence)
                certificates.append(certificate)
                guard certificates.count <= limits.maxCertificates else {
                    throw ASN1Error.make(.tooMany, "more than \(limits.maxCertificates) certificates")
                }
            }
        }
        _ = try fields.readIfPresent(.contextSpecific(1, constructed: true))
        var signerInfos = try fields.read(.set).children()
        try fields.finish()
        guard let first = try signerInfos.next() else { throw ASN1Error.make(.invalidValue, "no SignerInfo") }
        guard try signerInfos.next() == nil else {
            throw ASN1Error.make(.invalidValue, "more than one SignerInfo")
        }
        signer = try Self.signerInfo(first)
    }

    private static func signerInfo(_ element: ASN1Element) throws -> SignerInfo {
        var fields = try element.expect(.sequence).children()
        _ = try fields.read(.integer).int64()
        guard let sid = try fields.next() else { throw ASN1Error.make(.truncated, "SignerInfo without sid") }
        var issuer: ArraySlice<UInt8>?
        var serial: ArraySlice<UInt8>?
        var keyIdentifier: [UInt8]?
        if sid.tag == .sequence {
            var parts = try sid.children()
            issuer = try parts.read(.sequence).encoded
            serial = try parts.read(.integer).integerBytes()
            try parts.finish()
        } else if sid.tag == .contextSpecific(0, constructed: false) {
            keyIdentifier = Array(sid.content)
        } else {
            throw ASN1Error.make(.unexpectedTag, "SignerInfo sid of \(sid.tag)")
        }
        let digestAlgorithm = try algorithm(try fields.read(.sequence))
        var signedAttributes: ([UInt8], ASN1Element)?
        if let attributes = try fields.readIfPresent(.contextSpecific(0, constructed: true)) {
            guard !attributes.isIndefiniteLength else {
                throw ASN1Error.make(.notDER, "signed attributes must be DER")
            }
            var asSet = Array(attributes.encoded)
            asSet[0] = 0x31
            signedAttributes = (asSet, attributes)
        }
        let signatureAlgorithm = try algorithm(try fields.read(.sequence))
        let signature = try fields.read(.octetString).octetString()
        _ = try fields.readIfPresent(.contextSpecific(1, constructed: true))
        try fields.finish()
        return SignerInfo(
            issuer: issuer, serial: serial, subjectKeyIdentifier: keyIdentifier, digestAlgorithm: digestAlgorithm,
            signatureAlgorithm: signatureAlgorithm, signedAttributes: signedAttributes, signature: signature)
    }

    private static func algorithm(_ element: ASN1Element) throws -> ASN1ObjectIdentifier {
        var parts = try element.children()
        return try parts.read(.objectIdentifier).objectIdentifier()
    }
}

/// The issuer `Name` (complete encoding) and serial number content of a DER certificate, read in place.
///
/// `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { version [0] EXPLICIT OPTIONAL, serialNumber INTEGER,
/// signature AlgorithmIdentifier, issuer Name, … }, … }` (RFC 5280 §4.1).
func issuerAndSerial(ofCertificate certificate: ASN1Element) -> (issuer: ArraySlice<UInt8>, serial: ArraySlice<UInt8>)?
{
    let document = certificate.document
    guard var outer = try? document.children(of: certificate.node),
        let tbs = try? document.read(.sequence, from: &outer), var fields = try? document.children(of: tbs)
    else { return nil }
    var probe = fields
    if let first = try? document.next(&probe), first.tag == .contextSpecific(0, constructed: true) { fields = probe }
    guard let serial = try? document.read(.integer, from: &fields),
        (try? document.read(.sequence, from: &fields)) != nil,
        let issuer = try? document.read(.sequence, from: &fields)
    else { return nil }
    return (document.encoded(issuer), document.content(serial))
}

/// The subjectKeyIdentifier extension's key identifier of a DER certificate, if it has one.
///
/// `TBSCertificate ::= SEQUENCE { …, subjectPublicKeyInfo, issuerUniqueID [1] OPTIONAL,
/// subjectUniqueID [2] OPTIONAL, extensions [3] EXPLICIT SEQUENCE OF Extension OPTIONAL }`,
/// `Extension ::= SEQUENCE { extnID OID, critical BOOLEAN DEFAULT FALSE, extnValue OCTET STRING }`,
/// and the value of id-ce-subjectKeyIdentifier (2.5.29.14) is an OCTET STRING (RFC 5280 §4.2.1.2).
func subjectKeyIdentifier(ofCertificate certificate: ASN1Element) -> [UInt8]? {
    let subjectKeyIdentifierOID = ASN1ObjectIdentifier([2, 5, 29, 14])
    guard var outer = try? certificate.children(), let tbs = try? outer.read(.sequence),
        var fields = try? tbs.children()
    else { return nil }
    while let field = try? fields.next() {
        guard field.tag == .contextSpecific(3, constructed: true) else { continue }
        guard var wrapper = try? field.children(), let list = try? wrapper.read(.sequence),
            var extensions = try? list.children()
        else { return nil }
        while let item = try? extensions.next() {
            guard var parts = try? item.children(), let oid = try? parts.read(.objectIdentifier).objectIdentifier(),
                oid == subjectKeyIdentifierOID
            else { continue }
            _ = try? parts.readIfPresent(.boolean)
            guard let value = try? parts.read(.octetString).innerElement(), let identifier = try? value.octetString()
            else { return nil }
            return identifier
        }
    }
    return nil
}
