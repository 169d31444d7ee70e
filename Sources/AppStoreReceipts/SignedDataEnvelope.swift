import StorekeeperASN1

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
    static let dataOID = ASN1ObjectIdentifier([1, 2, 840, 113_549, 1, 7, 1])
    /// The digest algorithms a receipt's `digestAlgorithms` may list: SHA-1, SHA-256, SHA-384, SHA-512.
    static let digestOIDs: Set<ASN1ObjectIdentifier> = [
        ASN1ObjectIdentifier([1, 3, 14, 3, 2, 26]), ASN1ObjectIdentifier([2, 16, 840, 1, 101, 3, 4, 2, 1]),
        ASN1ObjectIdentifier([2, 16, 840, 1, 101, 3, 4, 2, 2]), ASN1ObjectIdentifier([2, 16, 840, 1, 101, 3, 4, 2, 3]),
    ]

    init(_ bytes: [UInt8], limits: ReceiptLimits) throws {
        let rules = ASN1Rules(
            allowsBER: true, maxDepth: limits.maxDepth, maxSize: limits.maxSize,
            maxChildren: limits.maxPurchases + 1024)
        let document = try ASN1Document(bytes, rules: rules)
        let root = try document.root()
        guard root.tag == .sequence else { throw ASN1Error.make(.unexpectedTag, "ContentInfo is not a SEQUENCE") }
        var contentInfo = try document.children(of: root)
        let contentType = try document.read(.objectIdentifier, from: &contentInfo)
        guard document.content(contentType).elementsEqual(Self.signedDataOID.contentBytes) else {
            throw ASN1Error.make(.invalidValue, "content type is not signedData")
        }
        var explicit = try document.children(
            of: try document.read(.contextSpecific(0, constructed: true), from: &contentInfo))
        try Self.finish(contentInfo)
        let signedData = try document.read(.sequence, from: &explicit)
        try Self.finish(explicit)

        var fields = try document.children(of: signedData)
        _ = try document.read(.integer, from: &fields)
        var digestAlgorithms: [ASN1ObjectIdentifier] = []
        var digestSet = try document.children(of: try document.read(.set, from: &fields))
        while let algorithm = try document.next(&digestSet) {
            guard algorithm.tag == .sequence else {
                throw ASN1Error.make(.unexpectedTag, "a digest algorithm is not an AlgorithmIdentifier")
            }
            let oid = try Self.algorithm(algorithm, document)
            guard Self.digestOIDs.contains(oid) else {
                throw ASN1Error.make(.invalidValue, "digestAlgorithms lists \(oid), which is not a digest algorithm")
            }
            digestAlgorithms.append(oid)
            guard digestAlgorithms.count <= 8 else { throw ASN1Error.make(.tooMany, "more than 8 digest algorithms") }
        }
        var encapsulated = try document.children(of: try document.read(.sequence, from: &fields))
        let eContentType = try document.read(.objectIdentifier, from: &encapsulated)
        guard document.content(eContentType).elementsEqual(Self.dataOID.contentBytes) else {
            throw ASN1Error.make(.invalidValue, "the signed content type is not data")
        }
        guard
            let eContentWrapper = try Self.readIfPresent(
                .contextSpecific(0, constructed: true), document, &encapsulated)
        else { throw ASN1Error.make(.invalidValue, "signed-data without embedded content") }
        try Self.finish(encapsulated)
        var wrapper = try document.children(of: eContentWrapper)
        guard let eContent = try document.next(&wrapper) else { throw ASN1Error.make(.truncated, "empty eContent") }
        try Self.finish(wrapper)
        if eContent.tag == .octetString {
            content = document.content(eContent)
            payloadDocument = document
            payloadRoot = try document.inner(of: eContent)
        } else {
            let joined = try document.octetString(eContent)
            content = joined[...]
            payloadDocument = try ASN1Document(joined, rules: rules)
            payloadRoot = try payloadDocument.root()
        }

        certificates = []
        if let set = try Self.readIfPresent(.contextSpecific(0, constructed: true), document, &fields) {
            var reader = try document.children(of: set)
            while let certificate = try document.next(&reader) {
                guard certificate.tag == .sequence else {
                    throw ASN1Error.make(.unexpectedTag, "a certificate is not a SEQUENCE")
                }
                certificates.append(ASN1Element(document: document, node: certificate))
                guard certificates.count <= limits.maxCertificates else {
                    throw ASN1Error.make(.tooMany, "more than \(limits.maxCertificates) certificates")
                }
            }
        }
        _ = try Self.readIfPresent(.contextSpecific(1, constructed: true), document, &fields)
        var signerInfos = try document.children(of: try document.read(.set, from: &fields))
        try Self.finish(fields)
        guard let first = try document.next(&signerInfos) else { throw ASN1Error.make(.invalidValue, "no SignerInfo") }
        guard try document.next(&signerInfos) == nil else {
            throw ASN1Error.make(.invalidValue, "more than one SignerInfo")
        }
        signer = try Self.signerInfo(first, in: document)
        guard digestAlgorithms.contains(signer.digestAlgorithm) else {
            throw ASN1Error.make(.invalidValue, "the signer's digest algorithm is not among digestAlgorithms")
        }
    }

    private static func finish(_ iterator: ASN1NodeIterator) throws {
        guard iterator.isAtEnd else { throw ASN1Error.make(.trailingBytes, "unexpected element after the last field") }
    }

    private static func readIfPresent(_ tag: ASN1Tag, _ document: ASN1Document, _ iterator: inout ASN1NodeIterator)
        throws -> ASN1Node?
    {
        var probe = iterator
        guard let node = try document.next(&probe), node.tag == tag else { return nil }
        iterator = probe
        return node
    }

    private static func signerInfo(_ node: ASN1Node, in document: ASN1Document) throws -> SignerInfo {
        guard node.tag == .sequence else { throw ASN1Error.make(.unexpectedTag, "SignerInfo is not a SEQUENCE") }
        var fields = try document.children(of: node)
        _ = try document.read(.integer, from: &fields)
        guard let sid = try document.next(&fields) else { throw ASN1Error.make(.truncated, "SignerInfo without sid") }
        var issuer: ArraySlice<UInt8>?
        var serial: ArraySlice<UInt8>?
        var keyIdentifier: [UInt8]?
        if sid.tag == .sequence {
            var parts = try document.children(of: sid)
            issuer = document.encoded(try document.read(.sequence, from: &parts))
            let serialNode = try document.read(.integer, from: &parts)
            guard serialNode.contentLength > 0 else { throw ASN1Error.make(.invalidValue, "empty serial number") }
            serial = document.content(serialNode)
            try finish(parts)
        } else if sid.tag == .contextSpecific(0, constructed: false) {
            keyIdentifier = Array(document.content(sid))
        } else {
            throw ASN1Error.make(.unexpectedTag, "SignerInfo sid of \(sid.tag)")
        }
        let digestAlgorithm = try algorithm(try document.read(.sequence, from: &fields), document)
        var signedAttributes: ([UInt8], ASN1Element)?
        if let attributes = try readIfPresent(.contextSpecific(0, constructed: true), document, &fields) {
            guard !attributes.isIndefiniteLength else {
                throw ASN1Error.make(.notDER, "signed attributes must be DER")
            }
            var asSet = Array(document.encoded(attributes))
            asSet[0] = 0x31
            signedAttributes = (asSet, ASN1Element(document: document, node: attributes))
        }
        let signatureAlgorithm = try algorithm(try document.read(.sequence, from: &fields), document)
        let signature = try document.octetString(try document.read(.octetString, from: &fields))
        _ = try readIfPresent(.contextSpecific(1, constructed: true), document, &fields)
        try finish(fields)
        return SignerInfo(
            issuer: issuer, serial: serial, subjectKeyIdentifier: keyIdentifier, digestAlgorithm: digestAlgorithm,
            signatureAlgorithm: signatureAlgorithm, signedAttributes: signedAttributes, signature: signature)
    }

    private static func algorithm(_ node: ASN1Node, _ document: ASN1Document) throws -> ASN1ObjectIdentifier {
        var parts = try document.children(of: node)
        let oid = try document.read(.objectIdentifier, from: &parts)
        return try ASN1ObjectIdentifier(contentBytes: Array(document.content(oid)))
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
