/// An error raised while reading or writing ASN.1.
///
/// Equality compares ``code`` only, so tests can write `#expect(error.code == .truncated)`.
public struct ASN1Error: Error, Hashable, CustomStringConvertible, Sendable {
    /// What went wrong, as an extensible set of static values.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case truncated
            case invalidTag
            case invalidLength
            case unexpectedEndOfContents
            case trailingBytes
            case tooDeep
            case tooLarge
            case tooMany
            case unexpectedTag
            case invalidValue
            case notDER
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// The input ends before an element does.
        public static let truncated = Code(.truncated)
        /// An identifier octet (or high-tag-number form) that cannot be read.
        public static let invalidTag = Code(.invalidTag)
        /// A length that is reserved, too long, or points past its container.
        public static let invalidLength = Code(.invalidLength)
        /// An end-of-contents marker where none may stand, or one that is missing.
        public static let unexpectedEndOfContents = Code(.unexpectedEndOfContents)
        /// Bytes after the single root element.
        public static let trailingBytes = Code(.trailingBytes)
        /// Nesting deeper than the configured limit.
        public static let tooDeep = Code(.tooDeep)
        /// Input or an element larger than the configured limit.
        public static let tooLarge = Code(.tooLarge)
        /// More elements than the configured limit.
        public static let tooMany = Code(.tooMany)
        /// A well-formed element of another type than the grammar asks for.
        public static let unexpectedTag = Code(.unexpectedTag)
        /// A value whose content does not fit its type (an oversized INTEGER, a bad OID, a bad string).
        public static let invalidValue = Code(.invalidValue)
        /// A BER form that DER forbids (indefinite or non-minimal lengths, constructed strings).
        public static let notDER = Code(.notDER)

        public var description: String { value.rawValue }
    }

    public let code: Code
    public let reason: String
    public let file: String
    public let line: Int

    public var description: String { "ASN1Error.\(code): \(reason)" }

    public static func == (lhs: ASN1Error, rhs: ASN1Error) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    public static func make(
        _ code: Code, _ reason: String, file: String = #fileID, line: Int = #line
    ) -> ASN1Error {
        ASN1Error(code: code, reason: reason, file: file, line: line)
    }
}
