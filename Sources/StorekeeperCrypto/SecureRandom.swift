internal import CStorekeeperOpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG.
public enum SecureRandom {
    public static func bytes(_ count: Int) throws -> [UInt8] {
        var output = [UInt8](repeating: 0, count: count)
        guard count == 0 || RAND_bytes(&output, Int32(count)) == 1 else { throw CryptoError.openSSL("RAND_bytes") }
        return output
    }
}

/// Comparisons of secrets that take the same time whatever bytes differ (shared secrets, bearer tokens).
public enum ConstantTime {
    /// Whether `a` and `b` are equal; the time depends only on their lengths.
    public static func equals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
