import Foundation

/// An amount of money in milliunits of its currency (10990 USD is 10.99 USD), as the App Store's `price`.
public struct Money: Sendable, Hashable, Codable {
    public var milliunits: Int64
    /// ISO 4217 code, e.g. "USD".
    public var currency: String

    public init(milliunits: Int64, currency: String) {
        self.milliunits = milliunits
        self.currency = currency
    }

    /// Parses a decimal price such as "9.99"; nil when it is not a non-negative decimal with at most three
    /// fraction digits that fits in milliunits.
    public init?(decimal text: String, currency: String) {
        // The whole text, digits and one point (Foundation's parser stops at the first character it does not
        // take: "1,99" read as 1, "4.99 USD" as 4.99).
        let bytes = Array(text.utf8)
        let point = bytes.firstIndex(of: UInt8(ascii: "."))
        guard (1...24).contains(bytes.count), bytes.first != UInt8(ascii: "."),
            bytes.enumerated().allSatisfy({ $0.offset == point || (48...57).contains($0.element) })
        else { return nil }
        guard let value = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")), value >= 0 else {
            return nil
        }
        let scaled = value * 1000
        var rounded = Decimal()
        var input = scaled
        NSDecimalRound(&rounded, &input, 0, .plain)
        guard rounded == scaled, rounded <= Decimal(Int64.max) else { return nil }
        self.init(milliunits: NSDecimalNumber(decimal: rounded).int64Value, currency: currency)
    }

    /// The amount as a decimal string with the fraction digits it needs ("9.99", "10", "0.5").
    public var decimalString: String {
        let whole = milliunits / 1000
        var fraction = String(abs(milliunits % 1000))
        while fraction.count < 3 { fraction = "0" + fraction }
        while fraction.hasSuffix("0") { fraction.removeLast() }
        let sign = milliunits < 0 && whole == 0 ? "-" : ""
        return fraction.isEmpty ? "\(sign)\(whole)" : "\(sign)\(whole).\(fraction)"
    }
}
