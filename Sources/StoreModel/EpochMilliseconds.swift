public import Foundation

/// Milliseconds since 1970-01-01T00:00:00Z, as Apple's JSON, JWS and Server API carry dates: the one
/// conversion between them and `Date` for the whole code base. A date becomes milliseconds rounded down (as
/// Apple's own libraries write them), clamped to ``range`` so that no date can trap; milliseconds outside
/// ``range`` (or not finite) are not a date at all, so an input that carries them is refused, not stored.
public enum EpochMilliseconds {
    /// The instants the formats can carry: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z.
    public static let range: ClosedRange<Int64> = -62_135_596_800_000...253_402_300_799_999

    /// `date` in milliseconds, rounded down (up for a time not to come before, such as `Retry-After`); a date
    /// outside ``range`` gives its nearer end.
    public static func milliseconds(_ date: Date, roundingUp: Bool = false) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded(roundingUp ? .up : .down)
        guard value.isFinite else { return value > 0 ? range.upperBound : range.lowerBound }
        if value <= Double(range.lowerBound) { return range.lowerBound }
        if value >= Double(range.upperBound) { return range.upperBound }
        return Int64(value)
    }

    /// The date `milliseconds` stands for; nil outside ``range``.
    public static func date(_ milliseconds: Int64) -> Date? {
        guard range.contains(milliseconds) else { return nil }
        return Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    /// The date a JSON number stands for (an integer, or a whole number written as a double); nil for a
    /// fraction, a value that is not finite, or one outside ``range``.
    public static func date(_ milliseconds: Double) -> Date? {
        guard milliseconds.isFinite, milliseconds == milliseconds.rounded(.down),
            milliseconds >= Double(range.lowerBound), milliseconds <= Double(range.upperBound)
        else { return nil }
        return date(Int64(milliseconds))
    }

    /// `milliseconds` as text, as query parameters and logs write it.
    public static func string(_ date: Date) -> String { String(milliseconds(date)) }
}
