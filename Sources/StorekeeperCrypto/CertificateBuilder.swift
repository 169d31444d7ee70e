internal import CStorekeeperOpenSSL
public import Foundation
public import StorekeeperASN1

/// Issues X.509 v3 certificates: test and emulator CAs, intermediates and signing leaves.
public struct CertificateBuilder: Sendable {
    public var commonName: String
    public var organization: String?
    public var organizationalUnit: String?
    public var country: String?
    /// Big-endian serial number bytes; should be unique per issuer.
    public var serialNumber: [UInt8]
    public var notBefore: Date
    public var notAfter: Date
    /// `basicConstraints cA=TRUE` (critical) when set; its path length constraint when given.
    public var isCA: Bool
    public var pathLength: Int?
    /// OpenSSL `keyUsage` value, e.g. `critical,keyCertSign,cRLSign` or `critical,digitalSignature`.
    public var keyUsage: String?
    /// OpenSSL `extendedKeyUsage` value, e.g. `codeSigning`.
    public var extendedKeyUsage: String?
    /// Non-critical extensions whose value is `05 00` (NULL), like Apple's marker OIDs.
    public var markerExtensions: [ASN1ObjectIdentifier]
    /// Digest of the issuer's signature.
    public var signatureDigest: DigestAlgorithm
    /// An OCSP responder URL for Authority Information Access.
    public var ocspURL: String?

    public init(
        commonName: String, organization: String? = nil, organizationalUnit: String? = nil, country: String? = nil,
        serialNumber: [UInt8], notBefore: Date, notAfter: Date, isCA: Bool, pathLength: Int? = nil,
        keyUsage: String? = nil, extendedKeyUsage: String? = nil, markerExtensions: [ASN1ObjectIdentifier] = [],
        signatureDigest: DigestAlgorithm = .sha256, ocspURL: String? = nil
    ) {
        self.ocspURL = ocspURL
        self.commonName = commonName
        self.organization = organization
        self.organizationalUnit = organizationalUnit
        self.country = country
        self.serialNumber = serialNumber
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.isCA = isCA
        self.pathLength = pathLength
        self.keyUsage = keyUsage
        self.extendedKeyUsage = extendedKeyUsage
        self.markerExtensions = markerExtensions
        self.signatureDigest = signatureDigest
    }

    /// Issues a certificate for `subjectKey`, signed by `issuerKey`; `issuer` nil means self-signed.
    public func issue(subjectKey: PublicKey, issuer: Certificate?, issuerKey: PrivateKey) throws -> Certificate {
        guard let x509 = X509_new() else { throw CryptoError.openSSL("X509_new") }
        var owned = true
        defer { if owned { X509_free(x509) } }

        guard X509_set_version(x509, 2) == 1 else { throw CryptoError.openSSL("X509_set_version") }
        guard let serial = serialNumber.withUnsafeBufferPointer({ BN_bin2bn($0.baseAddress, Int32($0.count), nil) })
        else { throw CryptoError.openSSL("serial number") }
        defer { BN_free(serial) }
        guard BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(x509)) != nil else {
            throw CryptoError.openSSL("serial number")
        }

        guard let name = X509_NAME_new() else { throw CryptoError.openSSL("X509_NAME_new") }
        defer { X509_NAME_free(name) }
        for (field, value) in [("C", country), ("O", organization), ("OU", organizationalUnit), ("CN", commonName)] {
            guard let value else { continue }
            let bytes = Array(value.utf8)
            guard X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, bytes, Int32(bytes.count), -1, 0) == 1 else {
                throw CryptoError.openSSL("subject \(field)")
            }
        }
        guard X509_set_subject_name(x509, name) == 1 else { throw CryptoError.openSSL("subject") }
        let issuerName = issuer.map { X509_get_subject_name($0.x509) } ?? name
        guard X509_set_issuer_name(x509, issuerName) == 1 else { throw CryptoError.openSSL("issuer") }

        for (date, setter) in [(notBefore, X509_set1_notBefore), (notAfter, X509_set1_notAfter)] {
            guard let time = ASN1_TIME_set(nil, time_t(date.timeIntervalSince1970.rounded(.down))) else {
                throw CryptoError.openSSL("validity")
            }
            defer { ASN1_TIME_free(time) }
            guard setter(x509, time) == 1 else { throw CryptoError.openSSL("validity") }
        }
        guard X509_set_pubkey(x509, subjectKey.pkey) == 1 else { throw CryptoError.openSSL("X509_set_pubkey") }

        var context = X509V3_CTX()
        shim_X509V3_set_ctx_nodb(&context)
        X509V3_set_ctx(&context, issuer?.x509 ?? x509, x509, nil, nil, 0)
        var extensions: [(Int32, String)] = []
        if isCA {
            extensions.append((NID_basic_constraints, "critical,CA:TRUE" + (pathLength.map { ",pathlen:\($0)" } ?? "")))
        } else {
            extensions.append((NID_basic_constraints, "critical,CA:FALSE"))
        }
        if let keyUsage { extensions.append((NID_key_usage, keyUsage)) }
        if let extendedKeyUsage { extensions.append((NID_ext_key_usage, extendedKeyUsage)) }
        if let ocspURL { extensions.append((NID_info_access, "OCSP;URI:" + ocspURL)) }
        extensions.append((NID_subject_key_identifier, "hash"))
        if issuer != nil || isCA { extensions.append((NID_authority_key_identifier, "keyid:always")) }
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else {
                throw CryptoError.openSSL("extension \(value)")
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x509, ext, -1) == 1 else { throw CryptoError.openSSL("X509_add_ext") }
        }
        for oid in markerExtensions {
            guard let object = OBJ_txt2obj(oid.description, 1), let value = ASN1_OCTET_STRING_new() else {
                throw CryptoError.openSSL("marker extension \(oid)")
            }
            defer {
                ASN1_OBJECT_free(object)
                ASN1_OCTET_STRING_free(value)
            }
            let null: [UInt8] = [0x05, 0x00]
            guard ASN1_OCTET_STRING_set(value, null, 2) == 1,
                let ext = X509_EXTENSION_create_by_OBJ(nil, object, 0, value)
            else { throw CryptoError.openSSL("marker extension \(oid)") }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x509, ext, -1) == 1 else { throw CryptoError.openSSL("X509_add_ext") }
        }

        guard X509_sign(x509, issuerKey.pkey, signatureDigest.md) > 0 else { throw CryptoError.openSSL("X509_sign") }
        owned = false
        return try Certificate(owning: x509)
    }
}
