/// Identifiers of the store's entities. Each is a distinct type so an account id cannot be passed where a
/// transaction id is expected; the raw value is the wire form.
public protocol StoreIdentifier: RawRepresentable, Hashable, Sendable, Codable, Comparable,
    CustomStringConvertible, ExpressibleByStringLiteral
where RawValue == String {
    init(rawValue: String)
}

extension StoreIdentifier {
    public init(_ rawValue: String) { self.init(rawValue: rawValue) }
    public init(stringLiteral value: String) { self.init(rawValue: value) }
    public var description: String { rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A transaction identifier: a decimal string (`transactionId`, receipt 1703).
public struct TransactionID: StoreIdentifier {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

/// A customer's App Store account.
public struct AccountID: StoreIdentifier {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

/// A device: the app's `identifierForVendor` UUID, upper case.
public struct DeviceID: StoreIdentifier {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

/// A product identifier from App Store Connect or a `.storekit` file.
public struct ProductID: StoreIdentifier {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

/// An app's bundle identifier.
public struct BundleID: StoreIdentifier {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}
