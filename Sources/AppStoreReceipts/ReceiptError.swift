/// A receipt that cannot be read: not base64 or DER, not PKCS #7 signed-data, or a payload that does not
/// follow Apple's grammar. Verification *outcomes* are ``ReceiptVerificationResult`` values instead.
///
/// Descriptions name the offending structure, never the receipt's bytes.
public struct ReceiptError: Error, Hashable, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case notAReceipt
            case malformedContainer
            case malformedPayload
            case missingAttribute
            case duplicateAttribute
            case invalidAttributeValue
            case limitExceeded
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// Neither DER nor base64 of DER, or empty.
        public static let notAReceipt = Code(.notAReceipt)
        /// The PKCS #7 envelope does not parse or is not signed-data with embedded content.
        public static let malformedContainer = Code(.malformedContainer)
        /// The payload is not a SET OF ReceiptAttribute.
        public static let malformedPayload = Code(.malformedPayload)
        /// A required attribute (app level 0, 2, 3, 4, 5, 12; in-app 1701–1704) is absent.
        public static let missingAttribute = Code(.missingAttribute)
        /// A single-valued attribute occurs twice.
        public static let duplicateAttribute = Code(.duplicateAttribute)
        /// An attribute whose value does not have its type's form (wrong inner type, bad date, negative count).
        public static let invalidAttributeValue = Code(.invalidAttributeValue)
        /// Size, depth or count beyond ``ReceiptLimits``.
        public static let limitExceeded = Code(.limitExceeded)

        public var description: String { value.rawValue }
    }

    public let code: Code
    public let reason: String
    public let file: String
    public let line: Int

    public var description: String { "ReceiptError.\(code): \(reason)" }

    public static func == (lhs: ReceiptError, rhs: ReceiptError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    public static func make(_ code: Code, _ reason: String, file: String = #fileID, line: Int = #line) -> ReceiptError {
        ReceiptError(code: code, reason: reason, file: file, line: line)
    }
}

/// Bounds on what the receipt parser accepts.
public struct ReceiptLimits: Sendable, Hashable {
    /// Largest receipt in bytes (after base64 decoding). Apple's largest real one in our vectors is 79 KB.
    public var maxSize: Int = 16 << 20
    /// Deepest ASN.1 nesting.
    public var maxDepth: Int = 24
    /// Most in-app purchases in one receipt.
    public var maxPurchases: Int = 100_000
    /// Most attributes in one purchase.
    public var maxAttributesPerPurchase: Int = 1024
    /// Most certificates embedded in the envelope.
    public var maxCertificates: Int = 16

    public init() {}

    public static let `default` = ReceiptLimits()
}
