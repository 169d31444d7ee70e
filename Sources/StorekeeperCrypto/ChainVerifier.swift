internal import CStorekeeperOpenSSL
public import Foundation
internal import Glibc
internal import Synchronization

/// Why a certificate path was rejected.
public struct ChainFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case untrusted
            case notValidAtTime
            case missingExtension
            case wrongLength
            case invalidCertificate
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// No path to a trusted root, or a bad signature along the path.
        public static let untrusted = Code(.untrusted)
        /// A certificate of the path is not valid at the validation time.
        public static let notValidAtTime = Code(.notValidAtTime)
        /// A certificate of the path lacks an extension the policy requires.
        public static let missingExtension = Code(.missingExtension)
        /// The path has a length the policy does not accept.
        public static let wrongLength = Code(.wrongLength)
        /// An embedded certificate does not parse.
        public static let invalidCertificate = Code(.invalidCertificate)

        public var description: String { value.rawValue }
    }

    public let code: Code
    public let reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(code): \(reason)" }
}

/// The outcome of a path validation, a value rather than a throw.
public enum ChainResult: Sendable {
    /// The path from the signer to a trusted root, and the time window in which all of it is valid.
    case valid(ValidChain)
    case invalid(ChainFailure)
}

/// A validated path.
public struct ValidChain: Sendable {
    /// Signer first, trusted root last.
    public let certificates: [Certificate]
    /// The latest `notBefore` along the path.
    public let validFrom: Date
    /// The earliest `notAfter` along the path.
    public let validUntil: Date
}

/// Validates certificate paths to a fixed set of trusted roots under a ``ChainPolicy``, with OpenSSL's
/// `X509_verify_cert`, and remembers each valid path's structural result by the certificates' bytes.
///
/// A path's structure (signatures, extensions, length) does not depend on time, so it is checked once with
/// OpenSSL's time checks off and cached with the intersection of the validity periods; each later
/// validation at a given time is a dictionary look-up and two comparisons. The cache is bounded.
public final class ChainVerifier: Sendable {
    public let trustedRoots: [Certificate]
    public let policy: ChainPolicy
    private let cache = Mutex<[CertificateSetKey: Evaluation]>([:])
    /// The most recent evaluation, checked first without building a key (a stream of receipts or signed
    /// data from one signer hits it every time).
    private let lastHit = Mutex<(key: CertificateSetKey, evaluation: Evaluation)?>(nil)
    private let cacheLimit: Int

    /// A signer key and the time-independent verdict on its path.
    public struct Evaluation: Sendable {
        /// The signer's public key, when its certificate parses.
        public let signerKey: PublicKey?
        /// The structural verdict: a valid path (not yet checked against a time) or a failure.
        public let structure: ChainResult

        /// The verdict at `time`: the structural verdict, then the validity window.
        public func result(at time: Date) -> ChainResult {
            guard case .valid(let chain) = structure else { return structure }
            guard chain.validFrom <= time && time <= chain.validUntil else {
                let formatter = ISO8601DateFormatter()
                return .invalid(
                    ChainFailure(
                        .notValidAtTime,
                        "certificates valid \(formatter.string(from: chain.validFrom)) to "
                            + "\(formatter.string(from: chain.validUntil)), not at \(formatter.string(from: time))"))
            }
            return structure
        }
    }

    public init(trustedRoots: [Certificate], policy: ChainPolicy, cacheLimit: Int = 4096) {
        self.trustedRoots = trustedRoots
        self.policy = policy
        self.cacheLimit = cacheLimit
    }

    /// Evaluates the path from the certificate `signer` (DER) through any of `others` (DER, in any order,
    /// possibly including roots, which are never trusted for being embedded).
    public func evaluate(signer: some Collection<UInt8>, others: [some Collection<UInt8>]) -> Evaluation {
        if let hit = lastHit.withLock({ last -> Evaluation? in
            guard let last, last.key.matches(signer: signer, others: others) else { return nil }
            return last.evaluation
        }) {
            return hit
        }
        let key = CertificateSetKey(parts: [Array(signer)] + others.map { Array($0) })
        if let cached = cache.withLock({ $0[key] }) {
            lastHit.withLock { $0 = (key, cached) }
            return cached
        }
        let evaluation = evaluateUncached(key.parts)
        // Only paths to a trusted root are kept: anyone can send certificates that fail, as many and as large
        // as a request allows, and keeping those would let them fill memory (and the cache's buckets).
        if case .valid = evaluation.structure {
            cache.withLock { entries in
                if entries.count >= cacheLimit { entries.removeAll(keepingCapacity: true) }
                entries[key] = evaluation
            }
        }
        lastHit.withLock { $0 = (key, evaluation) }
        return evaluation
    }

    /// How many paths the cache holds (each one valid to a trusted root).
    public var cachedPaths: Int { cache.withLock { $0.count } }

    /// Validates at `time` without the cache (for callers holding parsed certificates).
    public func verify(signer: Certificate, others: [Certificate], at time: Date) -> ChainResult {
        evaluate(signer: signer.derEncoded, others: others.map(\.derEncoded)).result(at: time)
    }

    private func evaluateUncached(_ parts: [[UInt8]]) -> Evaluation {
        let certificates: [Certificate]
        do {
            certificates = try parts.map { try Certificate(derEncoded: $0) }
        } catch {
            return Evaluation(signerKey: nil, structure: .invalid(ChainFailure(.invalidCertificate, "\(error)")))
        }
        let signer = certificates[0]
        let key = try? signer.publicKey
        return Evaluation(
            signerKey: key, structure: buildPath(signer: signer, untrusted: Array(certificates.dropFirst())))
    }

    private func buildPath(signer: Certificate, untrusted: [Certificate]) -> ChainResult {
        guard let store = X509_STORE_new() else { return .invalid(ChainFailure(.untrusted, "X509_STORE_new failed")) }
        defer { X509_STORE_free(store) }
        for root in trustedRoots { X509_STORE_add_cert(store, root.x509) }
        guard let stack = sk_shim_X509_new_null() else { return .invalid(ChainFailure(.untrusted, "out of memory")) }
        defer { sk_shim_X509_free(stack) }
        for certificate in untrusted { sk_shim_X509_push(stack, certificate.x509) }
        guard let ctx = X509_STORE_CTX_new() else { return .invalid(ChainFailure(.untrusted, "out of memory")) }
        defer { X509_STORE_CTX_free(ctx) }
        guard X509_STORE_CTX_init(ctx, store, signer.x509, stack) == 1 else {
            return .invalid(ChainFailure(.untrusted, "X509_STORE_CTX_init: \(drainOpenSSLErrors())"))
        }
        let param = X509_STORE_CTX_get0_param(ctx)
        X509_VERIFY_PARAM_set_flags(
            param, UInt(X509_V_FLAG_NO_CHECK_TIME) | (policy.strict ? UInt(X509_V_FLAG_X509_STRICT) : 0))
        X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_ANY)
        guard X509_verify_cert(ctx) == 1 else {
            let message = String(cString: X509_verify_cert_error_string(Int(X509_STORE_CTX_get_error(ctx))))
            _ = drainOpenSSLErrors()
            return .invalid(ChainFailure(.untrusted, message))
        }
        guard let built = X509_STORE_CTX_get0_chain(ctx) else {
            return .invalid(ChainFailure(.untrusted, "no chain after verification"))
        }
        var path: [Certificate] = []
        for index in 0..<sk_shim_X509_num(built) {
            guard let x509 = sk_shim_X509_value(built, index), let certificate = try? Certificate.retaining(x509) else {
                return .invalid(ChainFailure(.invalidCertificate, "certificate \(index) of the path"))
            }
            path.append(certificate)
        }
        if path.count == 1 && policy.acceptsTrustedSigner && trustedRoots.contains(path[0]) {
            // The caller trusts this signer itself.
        } else if let required = policy.requiredExtensions[path.count] {
            for (position, oids) in required.sorted(by: { $0.key < $1.key }) {
                for oid in oids where !path[position].hasExtension(oid) {
                    return .invalid(
                        ChainFailure(.missingExtension, "certificate \(position) of the path lacks extension \(oid)"))
                }
            }
        } else {
            return .invalid(ChainFailure(.wrongLength, "path of \(path.count) certificates"))
        }
        return .valid(
            ValidChain(
                certificates: path,
                validFrom: path.map(\.notBefore).max()!,
                validUntil: path.map(\.notAfter).min()!))
    }
}

/// A cache key over certificate bytes: cheap to hash (sizes and a few tail bytes), exact to compare.
struct CertificateSetKey: Hashable, Sendable {
    let parts: [[UInt8]]

    static func == (lhs: CertificateSetKey, rhs: CertificateSetKey) -> Bool {
        guard lhs.parts.count == rhs.parts.count else { return false }
        for (left, right) in zip(lhs.parts, rhs.parts) {
            guard left.count == right.count else { return false }
            guard !left.isEmpty else { continue }
            let same = left.withUnsafeBytes { l in
                right.withUnsafeBytes { r in memcmp(l.baseAddress!, r.baseAddress!, l.count) == 0 }
            }
            guard same else { return false }
        }
        return true
    }

    /// Whether this key holds exactly these certificates, compared without copying them.
    func matches(signer: some Collection<UInt8>, others: [some Collection<UInt8>]) -> Bool {
        guard parts.count == others.count + 1, Self.same(parts[0], signer) else { return false }
        for (part, other) in zip(parts.dropFirst(), others) where !Self.same(part, other) { return false }
        return true
    }

    private static func same(_ stored: [UInt8], _ candidate: some Collection<UInt8>) -> Bool {
        guard stored.count == candidate.count else { return false }
        if let result = candidate.withContiguousStorageIfAvailable({ buffer in
            stored.withUnsafeBufferPointer { memcmp($0.baseAddress!, buffer.baseAddress!, buffer.count) == 0 }
        }) {
            return result
        }
        return stored.elementsEqual(candidate)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(parts.count)
        for part in parts {
            hasher.combine(part.count)
            // The tail of a certificate is its signature: distinct for distinct certificates in practice;
            // equality below compares every byte, so a collision only costs a comparison.
            part.withUnsafeBytes { hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: $0.suffix(16))) }
        }
    }
}
