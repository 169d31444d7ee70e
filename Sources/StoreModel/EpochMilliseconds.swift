public import Foundation

/// Milliseconds since 1970-01-01T00:00:00Z, as Apple's JSON, JWS and Server API carry dates: the one
/// conversion between them and `Date` for the whole code base. A date becomes milliseconds rounded down (as
/// Apple's own libraries write them), clamped to ``range`` so that no date can trap; a number outside
/// ``range`` (or not finite) is not a date at all, so an input that carries one is refused, not stored.
public enum EpochMilliseconds {
    /// The instants a JSON date can be: ECMAScript's, ±100,000,000 days around 1970 (years −271,821 to
    /// 275,760). Xcode's signed data writes year 0 for "no date", so the range reaches well before year 1.
    public static let range: ClosedRange<Int64> = -8_640_000_000_000_000...8_640_000_000_000_000

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

    /// The date a JSON number stands for, fraction kept (some signed data carries fractional milliseconds);
    /// nil for a value that is not finite or lies outside ``range``.
    public static func date(_ milliseconds: Double) -> Date? {
        guard milliseconds.isFinite, milliseconds >= Double(range.lowerBound), milliseconds <= Double(range.upperBound)
        else { return nil }
        return Date(timeIntervalSince1970: milliseconds / 1000)
    }

    /// `date` in milliseconds with its fraction, as a stored record keeps it (so it reads back the same date).
    public static func fractional(_ date: Date) -> Double { date.timeIntervalSince1970 * 1000 }

    /// The date a stored record's ``fractional(_:)`` number stands for, whatever its size (a stored date
    /// was a `Date` already, one far in the future included); nil when it is not finite.
    public static func date(stored milliseconds: Double) -> Date? {
        milliseconds.isFinite ? Date(timeIntervalSince1970: milliseconds / 1000) : nil
    }

    /// `milliseconds` as text, as query parameters and logs write it.
    public static func string(_ date: Date) -> String { String(milliseconds(date)) }
}
