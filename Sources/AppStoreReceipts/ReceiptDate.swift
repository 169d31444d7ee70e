public import Foundation
import StoreModel

/// Receipt dates: Apple's "IA5STRING, interpreted as an RFC 3339 date", and verifyReceipt's date triplets.
public enum ReceiptDate {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM|±HHMM)`; the colon-less offset is Xcode's.
    ///
    /// Returns `nil` for anything else. An empty string is "absent" and handled by callers.
    public static func parse(_ text: String) -> Date? {
        parse(bytes: ArraySlice(text.utf8))
    }

    /// Parses the same forms from the bytes of an IA5String without building a `String`.
    public static func parse(bytes utf8: ArraySlice<UInt8>) -> Date? {
        guard utf8.count >= 20 else { return nil }
        return utf8.withUnsafeBufferPointer { parse(buffer: $0) }
    }

    private static func parse(buffer utf8: UnsafeBufferPointer<UInt8>) -> Date? {
        func digits(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let byte = utf8[index]
                guard byte >= 0x30 && byte <= 0x39 else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
        guard utf8[4] == UInt8(ascii: "-"), utf8[7] == UInt8(ascii: "-"),
            utf8[10] == UInt8(ascii: "T") || utf8[10] == UInt8(ascii: "t"),
            utf8[13] == UInt8(ascii: ":"), utf8[16] == UInt8(ascii: ":"),
            let year = digits(0..<4), let month = digits(5..<7), let day = digits(8..<10),
            let hour = digits(11..<13), let minute = digits(14..<16), let second = digits(17..<19),
            (1...12).contains(month), day >= 1, day <= daysInMonth(year: year, month: month),
            hour < 24, minute < 60, second < 61
        else { return nil }

        var index = 19
        var fraction = 0.0
        if utf8[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            let start = index
            while index < utf8.count, utf8[index] >= 0x30, utf8[index] <= 0x39 {
                fraction += Double(utf8[index] - 0x30) * scale
                scale /= 10
                index += 1
            }
            guard index > start, index - start <= 9 else { return nil }
        }
        guard index < utf8.count else { return nil }
        var offsetSeconds = 0
        switch utf8[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            guard index + 1 == utf8.count else { return nil }
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            let sign = utf8[index] == UInt8(ascii: "-") ? -1 : 1
            let rest = utf8.count - index - 1
            let hours: Int?
            let minutes: Int?
            if rest == 5 && utf8[index + 3] == UInt8(ascii: ":") {
                hours = digits(index + 1..<index + 3)
                minutes = digits(index + 4..<index + 6)
            } else if rest == 4 {
                hours = digits(index + 1..<index + 3)
                minutes = digits(index + 3..<index + 5)
            } else {
                return nil
            }
            guard let hours, let minutes, hours < 24, minutes < 60 else { return nil }
            offsetSeconds = sign * (hours * 3600 + minutes * 60)
        default:
            return nil
        }
        let days = CivilCalendar.days(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    /// UNIX milliseconds (``EpochMilliseconds``: rounded down, never trapping).
    public static func milliseconds(_ date: Date) -> Int64 { EpochMilliseconds.milliseconds(date) }

    /// `YYYY-MM-DD HH:MM:SS Etc/GMT`.
    public static func gmtString(_ date: Date) -> String {
        format(milliseconds: milliseconds(date), offsetSeconds: 0) + " Etc/GMT"
    }

    /// `YYYY-MM-DD HH:MM:SS America/Los_Angeles`, Pacific local time with daylight saving.
    public static func pacificString(_ date: Date) -> String {
        let offset = pacific.secondsFromGMT(for: date)
        return format(milliseconds: milliseconds(date), offsetSeconds: offset) + " America/Los_Angeles"
    }

    /// RFC 3339 in UTC with `Z`, as Apple writes receipt attributes (`2024-02-23T17:27:16Z`); milliseconds
    /// are written (`.686Z`) only when the date has them.
    public static func rfc3339String(_ date: Date) -> String {
        let ms = milliseconds(date)
        return rfc3339Bytes(milliseconds: ms) ?? rfc3339Formatted(milliseconds: ms)
    }

    /// ``rfc3339String(_:)`` for any year, through the general formatter.
    static func rfc3339Formatted(milliseconds ms: Int64) -> String {
        let text = format(milliseconds: ms, offsetSeconds: 0).replacingOccurrences(of: " ", with: "T")
        let fraction = Int(((ms % 1000) + 1000) % 1000)
        guard fraction != 0 else { return text + "Z" }
        let digits = String(fraction)
        return text + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }

    /// ``rfc3339String(_:)`` for years 0 to 9999, written digit by digit into one buffer (the purchase server
    /// writes one beside every date it answers); nil for other years.
    static func rfc3339Bytes(milliseconds ms: Int64) -> String? {
        let totalSeconds = Int(ms.floorDivided(by: 1000))
        let days = totalSeconds.floorDivided(by: 86_400)
        let secondOfDay = totalSeconds - days * 86_400
        let (year, month, day) = CivilCalendar.date(days: days)
        guard (0...9999).contains(year) else { return nil }
        let fraction = Int(ms - Int64(totalSeconds) * 1000)
        return String(unsafeUninitializedCapacity: 24) { buffer in
            var count = 0
            func put(_ value: Int, _ width: Int) {
                var divisor = 1
                for _ in 1..<width { divisor *= 10 }
                while divisor > 0 {
                    buffer[count] = UInt8(ascii: "0") + UInt8(value / divisor % 10)
                    count += 1
                    divisor /= 10
                }
            }
            func put(_ byte: Unicode.Scalar) {
                buffer[count] = UInt8(ascii: byte)
                count += 1
            }
            put(year, 4)
            put("-")
            put(month, 2)
            put("-")
            put(day, 2)
            put("T")
            put(secondOfDay / 3600, 2)
            put(":")
            put(secondOfDay / 60 % 60, 2)
            put(":")
            put(secondOfDay % 60, 2)
            if fraction != 0 {
                put(".")
                put(fraction, 3)
            }
            put("Z")
            return count
        }
    }

    /// The three verifyReceipt keys for a date: `name`, `name_ms`, `name_pst`.
    public static func triplet(_ name: String, _ date: Date) -> [(String, String)] {
        [(name, gmtString(date)), (name + "_ms", String(milliseconds(date))), (name + "_pst", pacificString(date))]
    }

    private static let pacific = TimeZone(identifier: "America/Los_Angeles") ?? TimeZone(secondsFromGMT: -8 * 3600)!

    private static func format(milliseconds: Int64, offsetSeconds: Int) -> String {
        let totalSeconds = Int(milliseconds.floorDivided(by: 1000)) + offsetSeconds
        let days = totalSeconds.floorDivided(by: 86_400)
        let secondOfDay = totalSeconds - days * 86_400
        let (year, month, day) = CivilCalendar.date(days: days)
        func pad(_ value: Int, _ width: Int) -> String {
            let text = String(value)
            return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2)) "
            + "\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2))"
    }

    private static func daysInMonth(year: Int, month: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

extension BinaryInteger {
    fileprivate func floorDivided(by divisor: Self) -> Self {
        let quotient = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }
}
