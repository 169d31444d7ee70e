internal import CStorekeeperOpenSSL

/// A message digest algorithm (OpenSSL's EVP_MD, fetched once).
public struct DigestAlgorithm: Hashable, Sendable, CustomStringConvertible {
    private enum Value: String, Hashable, Sendable {
        case sha1 = "SHA1"
        case sha256 = "SHA256"
        case sha384 = "SHA384"
        case sha512 = "SHA512"
    }

    private let value: Value
    private init(_ value: Value) { self.value = value }

    public static let sha1 = DigestAlgorithm(.sha1)
    public static let sha256 = DigestAlgorithm(.sha256)
    public static let sha384 = DigestAlgorithm(.sha384)
    public static let sha512 = DigestAlgorithm(.sha512)

    /// Output size in bytes.
    public var outputSize: Int {
        switch value {
        case .sha1: 20
        case .sha256: 32
        case .sha384: 48
        case .sha512: 64
        }
    }

    public var description: String { value.rawValue }

    /// The fetched implementation; fetching once avoids a provider look-up per call.
    var md: OpaquePointer {
        switch value {
        case .sha1: FetchedDigests.shared.sha1
        case .sha256: FetchedDigests.shared.sha256
        case .sha384: FetchedDigests.shared.sha384
        case .sha512: FetchedDigests.shared.sha512
        }
    }
}

/// Process-wide fetched `EVP_MD` objects.
// @unchecked Sendable: the pointers are set once in init and never change; fetched EVP_MD objects are
// immutable and safe to share between threads (OpenSSL 3 "Algorithm fetching").
private final class FetchedDigests: @unchecked Sendable {
    static let shared = FetchedDigests()
    let sha1: OpaquePointer  // EVP_MD
    let sha256: OpaquePointer  // EVP_MD
    let sha384: OpaquePointer  // EVP_MD
    let sha512: OpaquePointer  // EVP_MD

    private init() {
        func fetch(_ name: String) -> OpaquePointer {
            guard let md = EVP_MD_fetch(nil, name, nil) else {
                fatalError("OpenSSL has no \(name) digest: \(drainOpenSSLErrors())")
            }
            return md
        }
        sha1 = fetch("SHA1")
        sha256 = fetch("SHA256")
        sha384 = fetch("SHA384")
        sha512 = fetch("SHA512")
    }
}

/// One-shot message digests.
public enum Digest {
    /// The digest of `bytes`.
    public static func hash(_ algorithm: DigestAlgorithm, _ bytes: some Collection<UInt8>) -> [UInt8] {
        let compute = { (pointer: UnsafeRawBufferPointer) -> [UInt8] in
            var output = [UInt8](repeating: 0, count: algorithm.outputSize)
            var size: UInt32 = 0
            let ok = output.withUnsafeMutableBufferPointer { out in
                EVP_Digest(pointer.baseAddress, pointer.count, out.baseAddress, &size, algorithm.md, nil)
            }
            precondition(ok == 1 && Int(size) == algorithm.outputSize, "EVP_Digest failed: \(drainOpenSSLErrors())")
            return output
        }
        if let result = bytes.withContiguousStorageIfAvailable({ compute(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        return Array(bytes).withUnsafeBytes(compute)
    }

    public static func sha1(_ bytes: some Collection<UInt8>) -> [UInt8] { hash(.sha1, bytes) }

    /// Lower-case hexadecimal of `bytes` (digests in keys, fingerprints, signature headers).
    public static func hex(_ bytes: some Collection<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
    public static func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] { hash(.sha256, bytes) }
}

/// Keyed message authentication (HMAC, RFC 2104) with OpenSSL's EVP MAC.
public enum HMAC {
    /// HMAC-SHA256 of `message` under `key` (32 bytes).
    public static func sha256(key: some Collection<UInt8>, message: some Collection<UInt8>) -> [UInt8] {
        let key = Array(key)
        let message = Array(message)
        var output = [UInt8](repeating: 0, count: 32)
        var size = 0
        let result = key.withUnsafeBytes { keyBytes in
            message.withUnsafeBytes { messageBytes in
                output.withUnsafeMutableBufferPointer { out in
                    EVP_Q_mac(
                        nil, "HMAC", nil, "SHA256", nil, keyBytes.baseAddress, keyBytes.count,
                        messageBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), messageBytes.count,
                        out.baseAddress, out.count, &size)
                }
            }
        }
        precondition(result != nil && size == 32, "EVP_Q_mac failed: \(drainOpenSSLErrors())")
        return output
    }
}
