internal import CStorekeeperOpenSSL

/// Tight loops of one OpenSSL operation with a context prepared once: the yardsticks that benchmarks print
/// their own rates against, measured in the same run on the same machine.
public enum OpenSSLBaseline {
    /// Verifies an RSA PKCS #1 v1.5 `signature` over `digest` `iterations` times; true if every call verified.
    public static func rsaVerify(
        key: PublicKey, signature: [UInt8], digest: [UInt8], algorithm: DigestAlgorithm, iterations: Int
    )
        -> Bool
    {
        guard let ctx = EVP_PKEY_CTX_new(key.pkey, nil) else { return false }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_verify_init(ctx) == 1, shim_EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1,
            shim_EVP_PKEY_CTX_set_signature_md(ctx, algorithm.md) == 1
        else { return false }
        var ok = true
        for _ in 0..<iterations {
            ok = ok && EVP_PKEY_verify(ctx, signature, signature.count, digest, digest.count) == 1
        }
        return ok
    }

    /// Verifies a DER ECDSA `signature` over `digest` `iterations` times; true if every call verified.
    public static func ecdsaVerify(
        key: PublicKey, signature: [UInt8], digest: [UInt8], algorithm: DigestAlgorithm, iterations: Int
    )
        -> Bool
    {
        guard let ctx = EVP_PKEY_CTX_new(key.pkey, nil) else { return false }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_verify_init(ctx) == 1, shim_EVP_PKEY_CTX_set_signature_md(ctx, algorithm.md) == 1 else {
            return false
        }
        var ok = true
        for _ in 0..<iterations {
            ok = ok && EVP_PKEY_verify(ctx, signature, signature.count, digest, digest.count) == 1
        }
        return ok
    }
}
