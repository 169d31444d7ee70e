/// Which encoding rules a reader accepts and the bounds it enforces.
///
/// Every read is bounded: total size, nesting depth and the number of elements in any one container.
/// Exceeding a bound is an ``ASN1Error`` (`tooLarge`, `tooDeep`, `tooMany`), never a crash.
public struct ASN1Rules: Sendable, Hashable {
    /// Accept BER forms: indefinite lengths, non-minimal lengths and constructed strings.
    public var allowsBER: Bool
    /// Maximum nesting depth of constructed elements (the root is depth 0).
    public var maxDepth: Int
    /// Maximum size of the whole input in bytes.
    public var maxSize: Int
    /// Maximum number of direct children read from any one constructed element.
    public var maxChildren: Int

    public init(allowsBER: Bool, maxDepth: Int = 32, maxSize: Int = 16 << 20, maxChildren: Int = 1 << 20) {
        self.allowsBER = allowsBER
        self.maxDepth = maxDepth
        self.maxSize = maxSize
        self.maxChildren = maxChildren
    }

    /// Distinguished encoding rules (X.690 §10): definite, minimal lengths; primitive strings.
    public static let der = ASN1Rules(allowsBER: false)
    /// Basic encoding rules (X.690 §8), as Xcode writes receipt envelopes.
    public static let ber = ASN1Rules(allowsBER: true)
}
