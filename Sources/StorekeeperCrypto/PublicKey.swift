internal import CStorekeeperOpenSSL

/// A signature scheme: RSA PKCS #1 v1.5 or ECDSA, each with a digest.
public enum SignatureAlgorithm: Hashable, Sendable {
    case rsaPKCS1(DigestAlgorithm)
    case ecdsa(DigestAlgorithm)

    var digest: DigestAlgorithm {
        switch self {
        case .rsaPKCS1(let digest), .ecdsa(let digest): digest
        }
    }
}

/// A public key (OpenSSL `EVP_PKEY`), RSA or EC.
// @unchecked Sendable: the EVP_PKEY is never mutated after init; OpenSSL allows concurrent
// verification with one key as long as each call uses its own EVP_PKEY_CTX, which every method does.
public final class PublicKey: @unchecked Sendable, CustomStringConvertible {
    let pkey: OpaquePointer  // EVP_PKEY, owned
    /// Verification contexts already initialised, reused across calls.
    private let contexts: KeyContextPool

    /// Whether this is an EC key on P-256 (prime256v1), the one curve ES256 allows.
    public let isP256: Bool

    /// Takes ownership of an `EVP_PKEY`.
    init(owning pkey: OpaquePointer) {
        self.pkey = pkey
        contexts = KeyContextPool(pkey: pkey)
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        isP256 =
            EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC
            && EVP_PKEY_get_group_name(pkey, &name, name.count, &length) == 1
            && name.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } == "prime256v1"
    }

    deinit { EVP_PKEY_free(pkey) }

    /// Reads a DER `SubjectPublicKeyInfo`.
    public convenience init(derEncoded: [UInt8]) throws {
        let key: OpaquePointer? = derEncoded.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let key else { throw CryptoError.openSSL(.invalidKey, "not a DER SubjectPublicKeyInfo") }
        self.init(owning: key)
    }

    /// Reads a PEM `PUBLIC KEY`.
    public convenience init(pem: String) throws {
        let key = try withMemoryBIO(Array(pem.utf8)) { PEM_read_bio_PUBKEY($0, nil, nil, nil) }
        guard let key else { throw CryptoError.openSSL(.invalidKey, "not a PEM public key") }
        self.init(owning: key)
    }

    /// The DER `SubjectPublicKeyInfo`.
    public var derEncoded: [UInt8] {
        (try? derEncode { i2d_PUBKEY(pkey, $0) }) ?? []
    }

    /// Key type and size, e.g. `RSA-2048` or `EC P-256`.
    public var description: String {
        let bits = EVP_PKEY_get_bits(pkey)
        switch EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_RSA: return "RSA-\(bits)"
        case EVP_PKEY_EC: return "EC-\(bits)"
        default: return "key-\(bits)"
        }
    }

    public var isRSA: Bool { EVP_PKEY_get_base_id(pkey) == EVP_PKEY_RSA }
    public var isEC: Bool { EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC }
    public var bits: Int { Int(EVP_PKEY_get_bits(pkey)) }

    /// Verifies a signature over `message` (hashed here with the algorithm's digest).
    ///
    /// ECDSA signatures are DER `ECDSA-Sig-Value`; use ``verify(rawECDSASignature:message:digest:)`` for
    /// the JOSE `r‖s` form. Returns `false` for a wrong or malformed signature and a mismatched key type.
    public func verify(
        signature: some Collection<UInt8>, message: some Collection<UInt8>, algorithm: SignatureAlgorithm
    )
        -> Bool
    {
        verify(signature: Array(signature), digest: Digest.hash(algorithm.digest, message), algorithm: algorithm)
    }

    /// Verifies a signature over an already computed digest.
    public func verify(signature: [UInt8], digest: [UInt8], algorithm: SignatureAlgorithm) -> Bool {
        switch algorithm {
        case .rsaPKCS1: guard isRSA else { return false }
        case .ecdsa: guard isEC else { return false }
        }
        guard digest.count == algorithm.digest.outputSize else { return false }
        let verified = contexts.with(.verify, algorithm) { ctx -> Bool? in
            EVP_PKEY_verify(ctx, signature, signature.count, digest, digest.count) == 1 ? true : nil
        }
        guard verified == true else {
            _ = drainOpenSSLErrors()
            return false
        }
        return true
    }

    /// Verifies a JOSE ECDSA signature (`r‖s`, each as wide as the curve order; RFC 7518 §3.4).
    public func verify(
        rawECDSASignature: some Collection<UInt8>, message: some Collection<UInt8>, digest: DigestAlgorithm
    )
        -> Bool
    {
        guard isEC, let der = ECDSASignature.der(fromRaw: Array(rawECDSASignature), fieldSize: (bits + 7) / 8) else {
            return false
        }
        return verify(signature: der, digest: Digest.hash(digest, message), algorithm: .ecdsa(digest))
    }
}

/// Conversions between the DER `ECDSA-Sig-Value` and the fixed-width `r‖s` form.
public enum ECDSASignature {
    /// `r‖s` (each `fieldSize` bytes) as DER, or `nil` if the size is wrong.
    public static func der(fromRaw raw: [UInt8], fieldSize: Int) -> [UInt8]? {
        guard raw.count == 2 * fieldSize, fieldSize > 0 else { return nil }
        guard let sig = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(sig) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(fieldSize), nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + fieldSize, Int32(fieldSize), nil) }
        guard let r, let s else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        guard ECDSA_SIG_set0(sig, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        return try? derEncode { i2d_ECDSA_SIG(sig, $0) }
    }

    /// A DER `ECDSA-Sig-Value` as `r‖s` of `fieldSize` bytes each, or `nil` if it does not parse or fit.
    public static func raw(fromDER der: [UInt8], fieldSize: Int) -> [UInt8]? {
        let sig: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let parsed = d2i_ECDSA_SIG(nil, &cursor, buffer.count)
            if parsed != nil && cursor != buffer.baseAddress! + buffer.count {
                ECDSA_SIG_free(parsed)
                return nil
            }
            return parsed
        }
        guard let sig else {
            _ = drainOpenSSLErrors()
            return nil
        }
        defer { ECDSA_SIG_free(sig) }
        var output = [UInt8](repeating: 0, count: 2 * fieldSize)
        let ok = output.withUnsafeMutableBufferPointer { buffer -> Bool in
            BN_bn2binpad(ECDSA_SIG_get0_r(sig), buffer.baseAddress, Int32(fieldSize)) == fieldSize
                && BN_bn2binpad(ECDSA_SIG_get0_s(sig), buffer.baseAddress! + fieldSize, Int32(fieldSize)) == fieldSize
        }
        return ok ? output : nil
    }
}
