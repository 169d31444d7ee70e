internal import CStorekeeperOpenSSL
public import Foundation
public import StorekeeperASN1

/// An X.509 certificate (OpenSSL `X509`) with its DER bytes.
// @unchecked Sendable: the X509 is never mutated after init; OpenSSL's read accessors and chain building
// only touch its internal caches under OpenSSL's own locks.
public final class Certificate: @unchecked Sendable, Hashable, CustomStringConvertible {
    let x509: OpaquePointer  // X509, owned (one reference)
    /// The DER encoding.
    public let derEncoded: [UInt8]
    /// Start of the validity period.
    public let notBefore: Date
    /// End of the validity period.
    public let notAfter: Date

    /// Takes ownership of one reference to `x509`.
    init(owning x509: OpaquePointer) throws {
        self.x509 = x509
        self.derEncoded = try derEncode { i2d_X509(x509, $0) }
        guard let start = secondsSince1970(X509_get0_notBefore(x509)),
            let end = secondsSince1970(X509_get0_notAfter(x509))
        else { throw CryptoError.make(.invalidCertificate, "certificate validity dates do not parse") }
        notBefore = Date(timeIntervalSince1970: TimeInterval(start))
        notAfter = Date(timeIntervalSince1970: TimeInterval(end))
    }

    deinit { X509_free(x509) }

    /// Reads one DER certificate that spans all of `derEncoded`.
    public convenience init(derEncoded: some Collection<UInt8>) throws {
        let bytes = Array(derEncoded)
        let parsed: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let x509 = d2i_X509(nil, &cursor, buffer.count)
            if x509 != nil && cursor != buffer.baseAddress! + buffer.count {
                X509_free(x509)
                return nil
            }
            return x509
        }
        guard let parsed else { throw CryptoError.openSSL(.invalidCertificate, "not a DER certificate") }
        try self.init(owning: parsed)
    }

    /// Reads every `CERTIFICATE` block of a PEM text.
    public static func parsePEM(_ text: String) throws -> [Certificate] {
        var certificates: [Certificate] = []
        try withMemoryBIO(Array(text.utf8)) { bio in
            while let x509 = PEM_read_bio_X509(bio, nil, nil, nil) {
                certificates.append(try Certificate(owning: x509))
            }
        }
        _ = drainOpenSSLErrors()  // the expected "no start line" at the end of input
        guard !certificates.isEmpty else { throw CryptoError.make(.invalidCertificate, "no PEM certificate found") }
        return certificates
    }

    /// Reads certificates from a file's bytes: DER, PEM, or base64 of DER.
    public static func load(_ bytes: [UInt8]) throws -> [Certificate] {
        if let first = bytes.first, first == 0x30 { return [try Certificate(derEncoded: bytes)] }
        let text = String(decoding: bytes, as: UTF8.self)
        if text.contains("-----BEGIN") { return try parsePEM(text) }
        let compact = text.filter { !$0.isWhitespace }
        if let der = Data(base64Encoded: compact) { return [try Certificate(derEncoded: der)] }
        throw CryptoError.make(.invalidCertificate, "neither DER, PEM nor base64")
    }

    /// The certificate as PEM text.
    public var pemEncoded: String {
        let body = Data(derEncoded).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN CERTIFICATE-----\n\(body)\n-----END CERTIFICATE-----\n"
    }

    /// SHA-256 of the DER encoding.
    public var sha256Fingerprint: [UInt8] { Digest.sha256(derEncoded) }

    /// The subject in RFC 2253 form.
    public var subject: String { Self.name(X509_get_subject_name(x509)) }
    /// The issuer in RFC 2253 form.
    public var issuer: String { Self.name(X509_get_issuer_name(x509)) }

    /// The serial number as big-endian magnitude bytes.
    public var serialNumber: [UInt8] {
        guard let serial = X509_get0_serialNumber(x509), let bn = ASN1_INTEGER_to_BN(serial, nil) else { return [] }
        defer { BN_free(bn) }
        var bytes = [UInt8](repeating: 0, count: Int((BN_num_bits(bn) + 7) / 8))
        _ = BN_bn2bin(bn, &bytes)
        return bytes
    }

    /// The subject public key.
    public var publicKey: PublicKey {
        get throws {
            guard let key = X509_get_pubkey(x509) else {
                throw CryptoError.openSSL(.invalidKey, "certificate public key")
            }
            return PublicKey(owning: key)
        }
    }

    /// Whether the certificate carries an extension with this OID (critical or not).
    public func hasExtension(_ oid: ASN1ObjectIdentifier) -> Bool {
        guard let object = OBJ_txt2obj(oid.description, 1) else {
            _ = drainOpenSSLErrors()
            return false
        }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(x509, object, -1) >= 0
    }

    /// Whether the certificate is valid at `date` (inclusive bounds, RFC 5280 §4.1.2.5).
    public func isValid(at date: Date) -> Bool { notBefore <= date && date <= notAfter }

    public var description: String { "Certificate(\(subject))" }

    public static func == (lhs: Certificate, rhs: Certificate) -> Bool { lhs.derEncoded == rhs.derEncoded }
    public func hash(into hasher: inout Hasher) { hasher.combine(derEncoded) }

    /// A new Swift wrapper around an `X509` that OpenSSL owns elsewhere (takes its own reference).
    static func retaining(_ x509: OpaquePointer) throws -> Certificate {
        X509_up_ref(x509)
        return try Certificate(owning: x509)
    }

    private static func name(_ name: OpaquePointer?) -> String {
        guard let name else { return "" }
        let bytes = try? collectingBIO {
            X509_NAME_print_ex($0, name, 0, shim_XN_FLAG_RFC2253_UTF8()) >= 0
        }
        return String(decoding: bytes ?? [], as: UTF8.self)
    }
}
