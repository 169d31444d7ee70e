internal import CStorekeeperOpenSSL

/// Digests of messages that all begin with the same bytes, the prefix hashed once: each digest continues
/// from a copy of OpenSSL's state after the prefix (`EVP_MD_CTX_copy_ex`), so it hashes only what follows.
/// A JWS signer's signing inputs all start with its encoded header (with an x5c chain, ~3 KB: close to
/// half of what a V2 notification's three signatures hash).
// @unchecked Sendable: the prefix's context is written in init only; each digest copies it into a context
// of its own, which only reads it (OpenSSL's copy reads its source and duplicates the algorithm context).
public final class PrefixDigest: @unchecked Sendable {
    public let algorithm: DigestAlgorithm
    /// How many bytes the prefix has.
    public let prefixCount: Int
    private let state: OpaquePointer  // EVP_MD_CTX after the prefix, owned

    /// The state after `prefix`, for digests of `prefix` followed by other bytes.
    public init(_ algorithm: DigestAlgorithm, prefix: some Collection<UInt8>) throws {
        guard let state = EVP_MD_CTX_new() else { throw CryptoError.openSSL("EVP_MD_CTX_new") }
        let bytes = Array(prefix)
        let ok = bytes.withUnsafeBytes { raw in
            EVP_DigestInit_ex(state, algorithm.md, nil) == 1 && EVP_DigestUpdate(state, raw.baseAddress, raw.count) == 1
        }
        guard ok else {
            EVP_MD_CTX_free(state)
            throw CryptoError.openSSL("EVP_DigestInit_ex/EVP_DigestUpdate")
        }
        self.algorithm = algorithm
        self.state = state
        prefixCount = bytes.count
    }

    deinit { EVP_MD_CTX_free(state) }

    /// The digest of the prefix followed by `suffix`: `Digest.hash(algorithm, prefix + suffix)`.
    public func hash(appending suffix: some Collection<UInt8>) throws -> [UInt8] {
        let compute = { (pointer: UnsafeRawBufferPointer) throws -> [UInt8] in
            guard let ctx = EVP_MD_CTX_new() else { throw CryptoError.openSSL("EVP_MD_CTX_new") }
            defer { EVP_MD_CTX_free(ctx) }
            var output = [UInt8](repeating: 0, count: self.algorithm.outputSize)
            var size: UInt32 = 0
            let ok = output.withUnsafeMutableBufferPointer { out in
                EVP_MD_CTX_copy_ex(ctx, self.state) == 1
                    && EVP_DigestUpdate(ctx, pointer.baseAddress, pointer.count) == 1
                    && EVP_DigestFinal_ex(ctx, out.baseAddress, &size) == 1
            }
            guard ok, Int(size) == self.algorithm.outputSize else {
                throw CryptoError.openSSL("EVP_MD_CTX_copy_ex/EVP_DigestUpdate/EVP_DigestFinal_ex")
            }
            return output
        }
        if let result = try suffix.withContiguousStorageIfAvailable({ try compute(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        return try Array(suffix).withUnsafeBytes(compute)
    }
}
