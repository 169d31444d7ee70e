internal import CStorekeeperOpenSSL
import StorekeeperCommandLine
import StorekeeperCrypto

/// Tight loops of one OpenSSL operation with a context prepared once: the yardsticks that benchmarks print
/// their own rates against, measured in the same run on the same machine. The key is read again from its
/// DER encoding and the digest fetched here, so no OpenSSL type leaves `StorekeeperCrypto`.
enum OpenSSLBaseline {
    /// Verifies an RSA PKCS #1 v1.5 `signature` over `digest` `iterations` times; true if every call verified.
    static func rsaVerify(
        key: PublicKey, signature: [UInt8], digest: [UInt8], algorithm: DigestAlgorithm, iterations: Int
    ) -> Bool {
        loop(key: key, algorithm: algorithm, rsa: true, signature: signature, digest: digest, iterations: iterations)
    }

    /// Verifies a DER ECDSA `signature` over `digest` `iterations` times; true if every call verified.
    static func ecdsaVerify(
        key: PublicKey, signature: [UInt8], digest: [UInt8], algorithm: DigestAlgorithm, iterations: Int
    ) -> Bool {
        loop(key: key, algorithm: algorithm, rsa: false, signature: signature, digest: digest, iterations: iterations)
    }

    private static func loop(
        key: PublicKey, algorithm: DigestAlgorithm, rsa: Bool, signature: [UInt8], digest: [UInt8], iterations: Int
    ) -> Bool {
        let der = key.derEncoded
        let pkey: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var start = buffer.baseAddress
            return d2i_PUBKEY(nil, &start, buffer.count)
        }
        guard let pkey else { return false }
        defer { EVP_PKEY_free(pkey) }
        guard let md = EVP_MD_fetch(nil, algorithm.description, nil) else { return false }
        defer { EVP_MD_free(md) }
        guard let ctx = EVP_PKEY_CTX_new(pkey, nil) else { return false }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_verify_init(ctx) == 1, !rsa || shim_EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1,
            shim_EVP_PKEY_CTX_set_signature_md(ctx, md) == 1
        else { return false }
        var ok = true
        for _ in 0..<iterations {
            ok = ok && EVP_PKEY_verify(ctx, signature, signature.count, digest, digest.count) == 1
        }
        return ok
    }
}
