internal import CStorekeeperOpenSSL
internal import Synchronization

/// What a key's `EVP_PKEY_CTX` was initialised for.
enum KeyOperation: Hashable, Sendable {
    case sign
    case verify
}

/// `EVP_PKEY_CTX`s of one key already initialised for an operation and algorithm, reused across calls.
///
/// Setting a context up costs OpenSSL 3 provider look-ups: about a third of an RSA-2048 verification, and
/// an eighth of an ES256 signature. A context is used by one thread at a time (taken out under the lock,
/// put back after a successful call); one that saw an error is freed, not reused. At most `capacity` wait.
/// OpenSSL's error queue is left to the caller, which drains it when a call failed. Each context holds a
/// reference of its own to the key (`EVP_PKEY_CTX_new` counts one), so the key's owner may drop its
/// reference before the pool frees the contexts.
// @unchecked Sendable: the contexts are only touched under the mutex or by the one caller that took one.
final class KeyContextPool: @unchecked Sendable {
    // @unchecked Sendable: an entry is held by the pool or by the one caller that took it out.
    private struct Entry: @unchecked Sendable {
        let ctx: OpaquePointer  // EVP_PKEY_CTX, owned by the pool or the caller that took it
        let operation: KeyOperation
        let algorithm: SignatureAlgorithm
    }

    private let pkey: OpaquePointer  // EVP_PKEY, owned by the key that owns the pool
    private let idle = Mutex<[Entry]>([])
    private let capacity = 8

    init(pkey: OpaquePointer) { self.pkey = pkey }

    deinit {
        for entry in idle.withLock({ $0 }) { EVP_PKEY_CTX_free(entry.ctx) }
    }

    /// Runs `body` with a context for `operation` and `algorithm`: its answer, or `nil` if OpenSSL cannot
    /// set one up. `body` answers `nil` when its call failed; only a context that succeeded goes back.
    func with<Result>(
        _ operation: KeyOperation, _ algorithm: SignatureAlgorithm, _ body: (OpaquePointer) -> Result?
    ) -> Result? {
        guard let entry = take(operation, algorithm) else { return nil }
        let result = body(entry.ctx)
        if result != nil {
            let kept = idle.withLock { idle -> Bool in
                guard idle.count < capacity else { return false }
                idle.append(entry)
                return true
            }
            if !kept { EVP_PKEY_CTX_free(entry.ctx) }
        } else {
            EVP_PKEY_CTX_free(entry.ctx)
        }
        return result
    }

    private func take(_ operation: KeyOperation, _ algorithm: SignatureAlgorithm) -> Entry? {
        let reused = idle.withLock { idle -> Entry? in
            guard let index = idle.lastIndex(where: { $0.operation == operation && $0.algorithm == algorithm })
            else { return nil }
            return idle.remove(at: index)
        }
        if let reused { return reused }
        guard let ctx = EVP_PKEY_CTX_new(pkey, nil) else { return nil }
        var ok =
            switch operation {
            case .sign: EVP_PKEY_sign_init(ctx) == 1
            case .verify: EVP_PKEY_verify_init(ctx) == 1
            }
        if ok, case .rsaPKCS1 = algorithm { ok = shim_EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1 }
        ok = ok && shim_EVP_PKEY_CTX_set_signature_md(ctx, algorithm.digest.md) == 1
        guard ok else {
            EVP_PKEY_CTX_free(ctx)
            return nil
        }
        return Entry(ctx: ctx, operation: operation, algorithm: algorithm)
    }
}
