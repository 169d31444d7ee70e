internal import CStorekeeperOpenSSL

/// A private key (OpenSSL `EVP_PKEY`), RSA or EC P-256.
///
/// Its description never shows key material.
// @unchecked Sendable: the EVP_PKEY is never mutated after init and every signing call uses an
// EVP_PKEY_CTX no other thread holds at the time, which OpenSSL allows concurrently.
public final class PrivateKey: @unchecked Sendable, CustomStringConvertible {
    let pkey: OpaquePointer  // EVP_PKEY, owned
    /// Signing contexts already initialised, reused across calls.
    private let contexts: KeyContextPool

    init(owning pkey: OpaquePointer) {
        self.pkey = pkey
        contexts = KeyContextPool(pkey: pkey)
    }

    deinit { EVP_PKEY_free(pkey) }

    /// A new RSA key.
    public static func generateRSA(bits: Int = 2048) throws -> PrivateKey {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nil) else { throw CryptoError.openSSL("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_keygen_init(ctx) == 1, shim_EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(bits)) == 1 else {
            throw CryptoError.openSSL("RSA key generation set-up")
        }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen(ctx, &key) == 1, let key else { throw CryptoError.openSSL("RSA key generation") }
        return PrivateKey(owning: key)
    }

    /// A new EC key on P-256 (prime256v1), the curve of ES256.
    public static func generateP256() throws -> PrivateKey {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else { throw CryptoError.openSSL("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_keygen_init(ctx) == 1,
            shim_EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, NID_X9_62_prime256v1) == 1
        else { throw CryptoError.openSSL("EC key generation set-up") }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen(ctx, &key) == 1, let key else { throw CryptoError.openSSL("EC key generation") }
        return PrivateKey(owning: key)
    }

    /// Reads a PEM private key: PKCS #8 (`PRIVATE KEY`, as in Apple's `.p8` files) or the traditional forms.
    public convenience init(pem: String) throws {
        let key = try withMemoryBIO(Array(pem.utf8)) { PEM_read_bio_PrivateKey($0, nil, nil, nil) }
        guard let key else { throw CryptoError.openSSL(.invalidKey, "not a PEM private key") }
        self.init(owning: key)
    }

    /// Reads a DER PKCS #8 `PrivateKeyInfo`.
    public convenience init(pkcs8DER: [UInt8]) throws {
        let key = try withMemoryBIO(pkcs8DER) { d2i_PrivateKey_bio($0, nil) }
        guard let key else { throw CryptoError.openSSL(.invalidKey, "not a DER private key") }
        self.init(owning: key)
    }

    /// The key as unencrypted PKCS #8 PEM. Secret: write it only to files meant for it.
    public func pemPKCS8() throws -> String {
        let bytes = try collectingBIO { PEM_write_bio_PKCS8PrivateKey($0, pkey, nil, nil, 0, nil, nil) == 1 }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The matching public key.
    public var publicKey: PublicKey {
        get throws {
            let der = try derEncode { i2d_PUBKEY(pkey, $0) }
            return try PublicKey(derEncoded: der)
        }
    }

    public var isRSA: Bool { EVP_PKEY_get_base_id(pkey) == EVP_PKEY_RSA }
    public var isEC: Bool { EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC }
    public var bits: Int { Int(EVP_PKEY_get_bits(pkey)) }

    public var description: String { "PrivateKey(\(isRSA ? "RSA" : isEC ? "EC" : "other")-\(bits), redacted)" }

    /// Signs `message`. ECDSA signatures come out as DER; see ``signRawECDSA(_:digest:)`` for `r‖s`.
    public func sign(_ message: some Collection<UInt8>, algorithm: SignatureAlgorithm) throws -> [UInt8] {
        try checkKind(algorithm)
        return try sign(hashed: Digest.hash(algorithm.digest, message), algorithm: algorithm)
    }

    /// Signs a digest already taken with `algorithm`'s digest (by ``PrefixDigest``, say): the same
    /// signature as ``sign(_:algorithm:)`` over the message it is the digest of.
    public func sign(hashed digest: [UInt8], algorithm: SignatureAlgorithm) throws -> [UInt8] {
        try checkKind(algorithm)
        guard digest.count == algorithm.digest.outputSize else {
            throw CryptoError.make(
                .invalidInput,
                "a \(algorithm.digest) digest has \(algorithm.digest.outputSize) bytes, not \(digest.count)")
        }
        let signed = contexts.with(.sign, algorithm) { ctx -> [UInt8]? in
            var length = 0
            guard EVP_PKEY_sign(ctx, nil, &length, digest, digest.count) == 1 else { return nil }
            var signature = [UInt8](repeating: 0, count: length)
            guard EVP_PKEY_sign(ctx, &signature, &length, digest, digest.count) == 1 else { return nil }
            signature.removeLast(signature.count - length)
            return signature
        }
        guard let signed else { throw CryptoError.openSSL("EVP_PKEY_sign") }
        return signed
    }

    private func checkKind(_ algorithm: SignatureAlgorithm) throws {
        switch algorithm {
        case .rsaPKCS1:
            guard isRSA else { throw CryptoError.make(.unsupportedAlgorithm, "RSA signature with a non-RSA key") }
        case .ecdsa:
            guard isEC else { throw CryptoError.make(.unsupportedAlgorithm, "ECDSA signature with a non-EC key") }
        }
    }

    /// Signs `message` with ECDSA and returns the JOSE form `r‖s` (RFC 7518 §3.4).
    public func signRawECDSA(_ message: some Collection<UInt8>, digest: DigestAlgorithm = .sha256) throws -> [UInt8] {
        try signRawECDSA(hashed: Digest.hash(digest, message), digest: digest)
    }

    /// ``signRawECDSA(_:digest:)`` for a digest already taken with `digest`.
    public func signRawECDSA(hashed value: [UInt8], digest: DigestAlgorithm = .sha256) throws -> [UInt8] {
        let der = try sign(hashed: value, algorithm: .ecdsa(digest))
        guard let raw = ECDSASignature.raw(fromDER: der, fieldSize: (bits + 7) / 8) else {
            throw CryptoError.make(.invalidSignature, "OpenSSL produced an ECDSA signature that does not convert")
        }
        return raw
    }
}
