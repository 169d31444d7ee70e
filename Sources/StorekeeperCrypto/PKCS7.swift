internal import CStorekeeperOpenSSL
public import Foundation

/// PKCS #7 / CMS signed-data (RFC 2315, RFC 5652) through OpenSSL: creation for the emulator's receipts and
/// an independent verifier to cross-check Storekeeper's own receipt verification.
public enum PKCS7 {
    /// Signs `content` into a DER `ContentInfo` of type signedData with the content embedded.
    ///
    /// - Parameters:
    ///   - signer: the signing certificate, written first among the certificates.
    ///   - chain: further certificates to embed after the signer, in this order (Apple: intermediate, root).
    ///   - digest: SHA-1 or SHA-256, as Apple's receipts use.
    ///   - signedAttributes: whether to add signed attributes; Apple's receipts have none.
    public static func sign(
        content: [UInt8], signer: Certificate, key: PrivateKey, chain: [Certificate], digest: DigestAlgorithm,
        signedAttributes: Bool = false
    ) throws -> [UInt8] {
        var flags = Int32(PKCS7_BINARY | PKCS7_PARTIAL)
        if !signedAttributes { flags |= Int32(PKCS7_NOATTR) }
        guard let p7 = PKCS7_sign(nil, nil, nil, nil, flags) else { throw CryptoError.openSSL("PKCS7_sign") }
        defer { PKCS7_free(p7) }
        guard PKCS7_sign_add_signer(p7, signer.x509, key.pkey, digest.md, flags) != nil else {
            throw CryptoError.openSSL("PKCS7_sign_add_signer")
        }
        for certificate in chain {
            guard PKCS7_add_certificate(p7, certificate.x509) == 1 else {
                throw CryptoError.openSSL("PKCS7_add_certificate")
            }
        }
        try withMemoryBIO(content) { bio in
            guard PKCS7_final(p7, bio, flags) == 1 else { throw CryptoError.openSSL("PKCS7_final") }
        }
        return try derEncode { i2d_PKCS7(p7, $0) }
    }

    /// Verifies a DER or BER signed-data with OpenSSL's `CMS_verify` against `trustedRoots` at `time`,
    /// with purpose "any" (as `openssl cms -verify -binary -purpose any -attime`), and returns the content.
    ///
    /// This checks the signature and the path only; it knows nothing of Apple's marker extensions.
    public static func verifyWithOpenSSL(_ encoded: [UInt8], trustedRoots: [Certificate], at time: Date) throws
        -> [UInt8]
    {
        let cms: OpaquePointer? = encoded.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_CMS_ContentInfo(nil, &cursor, buffer.count)
        }
        guard let cms else { throw CryptoError.openSSL(.invalidInput, "not a CMS ContentInfo") }
        defer { CMS_ContentInfo_free(cms) }
        guard let store = X509_STORE_new() else { throw CryptoError.openSSL("X509_STORE_new") }
        defer { X509_STORE_free(store) }
        for root in trustedRoots { X509_STORE_add_cert(store, root.x509) }
        let param = X509_STORE_get0_param(store)
        X509_VERIFY_PARAM_set_time(param, time_t(time.timeIntervalSince1970.rounded(.down)))
        X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_ANY)
        return try collectingBIO { out in
            guard CMS_verify(cms, nil, store, nil, out, UInt32(CMS_BINARY)) == 1 else {
                throw CryptoError.openSSL(.verificationFailed, "CMS_verify")
            }
            return true
        }
    }
}
