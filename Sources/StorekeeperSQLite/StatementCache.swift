/// Prepared statements by SQL text, with their result columns' names, reused by ``Connection/execute(_:_:)``.
///
/// Found by a fingerprint of the text (its length and eight of its bytes) and then the text compared whole,
/// rather than by a dictionary that hashes the whole text at each call: a renewal's statements are hundreds
/// of bytes each, and hashing them was ~3% of the lifecycle writer's own Swift samples (`perf`). Most texts
/// are the same constant each call, which Swift compares with itself by identity.
struct StatementCache {
    /// A prepared statement and its result columns' names, made at its first row.
    final class Entry {
        let sql: String
        let statement: OpaquePointer  // sqlite3_stmt, owned by the connection
        var columns: [String]?
        /// Calls and their thread CPU time in nanoseconds, while the connection counts
        /// (``Connection/countsStatements``).
        var calls = 0
        var cpuNanoseconds = 0

        init(sql: String, statement: OpaquePointer) {
            self.sql = sql
            self.statement = statement
        }
    }

    private var buckets: [Int: [Entry]] = [:]
    private(set) var count = 0

    /// The length and eight bytes spread over the text (all of a shorter one).
    static func fingerprint(_ sql: String) -> Int {
        func mix(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
            var key = bytes.count
            let step = max(1, bytes.count / 8)
            var offset = bytes.count > 0 ? bytes.count - 1 : 0
            for _ in 0..<min(8, bytes.count) {
                key = key &* 31 &+ Int(bytes[offset])
                offset -= step
            }
            return key
        }
        return sql.utf8.withContiguousStorageIfAvailable(mix) ?? Array(sql.utf8).withUnsafeBufferPointer(mix)
    }

    func entry(_ sql: String, fingerprint: Int) -> Entry? {
        buckets[fingerprint]?.first { $0.sql == sql }
    }

    mutating func insert(_ entry: Entry, fingerprint: Int) {
        buckets[fingerprint, default: []].append(entry)
        count += 1
    }

    /// Every entry, removed (their statements are the caller's to finalize).
    mutating func removeAll() -> [Entry] {
        defer {
            buckets = [:]
            count = 0
        }
        return buckets.values.flatMap { $0 }
    }

    var entries: [Entry] { buckets.values.flatMap { $0 } }
}
