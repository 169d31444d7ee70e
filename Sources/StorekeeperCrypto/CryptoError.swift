internal import CStorekeeperOpenSSL

/// An error from a cryptographic operation, with OpenSSL's own messages where it produced them.
///
/// Equality compares ``code`` only. Descriptions never contain key material or signed payloads.
public struct CryptoError: Error, Hashable, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case invalidCertificate
            case invalidKey
            case invalidSignature
            case invalidInput
            case unsupportedAlgorithm
            case verificationFailed
            case openSSL
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// Bytes that are not an X.509 certificate (DER or PEM).
        public static let invalidCertificate = Code(.invalidCertificate)
        /// Bytes that are not a key of a supported kind.
        public static let invalidKey = Code(.invalidKey)
        /// A signature that is malformed (not merely wrong).
        public static let invalidSignature = Code(.invalidSignature)
        /// Input of the wrong shape or size.
        public static let invalidInput = Code(.invalidInput)
        /// An algorithm or key type Storekeeper does not accept.
        public static let unsupportedAlgorithm = Code(.unsupportedAlgorithm)
        /// A verification that OpenSSL rejected (used by the OpenSSL-backed PKCS #7 verifier).
        public static let verificationFailed = Code(.verificationFailed)
        /// Any other failure reported by OpenSSL.
        public static let openSSL = Code(.openSSL)

        public var description: String { value.rawValue }
    }

    public let code: Code
    public let reason: String
    public let file: String
    public let line: Int

    public var description: String { "CryptoError.\(code): \(reason)" }

    public static func == (lhs: CryptoError, rhs: CryptoError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    public static func make(_ code: Code, _ reason: String, file: String = #fileID, line: Int = #line) -> CryptoError {
        CryptoError(code: code, reason: reason, file: file, line: line)
    }

    /// An error for a failed OpenSSL call, with the thread's error queue drained into the reason.
    static func openSSL(_ what: String, file: String = #fileID, line: Int = #line) -> CryptoError {
        openSSL(.openSSL, what, file: file, line: line)
    }

    /// An error with the given code for a failed OpenSSL call, with the error queue drained into the reason.
    static func openSSL(_ code: Code, _ what: String, file: String = #fileID, line: Int = #line) -> CryptoError {
        let queue = drainOpenSSLErrors()
        return CryptoError(code: code, reason: queue.isEmpty ? what : "\(what): \(queue)", file: file, line: line)
    }
}

/// Empties OpenSSL's per-thread error queue and returns its messages, joined.
func drainOpenSSLErrors() -> String {
    var messages: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        if messages.count < 4 {
            messages.append(
                String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
    }
    return messages.joined(separator: "; ")
}
