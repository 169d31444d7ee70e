import Synchronization

/// The signing headers a storage's writes have committed to `signing_headers`, whose rows are never deleted:
/// an input naming one of them needs no insert of it. At most ``limit`` are kept (the headers of Apple's
/// signing certificates in use are few; beyond the limit each write inserts as before).
final class SigningHeaders: Sendable {
    static let limit = 256
    private let fingerprints = Mutex<Set<String>>([])

    /// What one write's store is given: the headers known committed, and where it notes those it inserts.
    struct Tracking: Sendable {
        let committed: SigningHeaders
        let inserted = Inserted()
    }

    func contains(_ fingerprint: String) -> Bool { fingerprints.withLock { $0.contains(fingerprint) } }

    /// Runs one write of the storage with its tracking; the headers it inserted are known once it returns
    /// (committed). A write that throws leaves them unknown, to be inserted again.
    func tracking<T>(_ write: (Tracking) async throws -> T) async throws -> T {
        let tracking = Tracking(committed: self)
        let result = try await write(tracking)
        let noted = tracking.inserted.fingerprints.withLock { $0 }
        if !noted.isEmpty {
            fingerprints.withLock { known in
                for fingerprint in noted where known.count < Self.limit { known.insert(fingerprint) }
            }
        }
        return result
    }

    /// The headers one write inserted (every run of its body: a write run again notes them again).
    final class Inserted: Sendable {
        fileprivate let fingerprints = Mutex<Set<String>>([])
        func note(_ fingerprint: String) { _ = fingerprints.withLock { $0.insert(fingerprint) } }
    }
}
