public import Foundation

/// An ISO 8601 duration as the App Store writes periods (`P1W`, `P1M`, `P3D`, `P1Y`, `PT5M`…):
/// calendar parts, added in UTC (shared/spec/test-environment.md §4.4).
public struct StorePeriod: Hashable, Sendable, CustomStringConvertible {
    public var years = 0
    public var months = 0
    public var weeks = 0
    public var days = 0
    public var hours = 0
    public var minutes = 0
    public var seconds = 0

    public init(
        years: Int = 0, months: Int = 0, weeks: Int = 0, days: Int = 0, hours: Int = 0, minutes: Int = 0,
        seconds: Int = 0
    ) {
        (self.years, self.months, self.weeks, self.days) = (years, months, weeks, days)
        (self.hours, self.minutes, self.seconds) = (hours, minutes, seconds)
    }

    /// The period `count` times over (an offer's `numberOfPeriods` of one period: Apple's `offerPeriod`).
    public func repeated(_ count: Int) -> StorePeriod {
        let times = max(0, min(count, 1_000))
        return StorePeriod(
            years: years * times, months: months * times, weeks: weeks * times, days: days * times,
            hours: hours * times, minutes: minutes * times, seconds: seconds * times)
    }

    /// Parses `PnYnMnWnDTnHnMnS` (each part optional, at least one present, non-negative integers).
    public init?(_ text: String) {
        var rest = Substring(text)
        guard rest.first == "P", rest.count > 1 else { return nil }
        rest = rest.dropFirst()
        var inTime = false
        var sawPart = false
        var sawTimePart = false
        while !rest.isEmpty {
            if rest.first == "T" {
                guard !inTime else { return nil }
                inTime = true
                rest = rest.dropFirst()
                continue
            }
            let digits = rest.prefix(while: \.isASCII).prefix(while: \.isNumber)
            guard !digits.isEmpty, digits.count <= 6, let value = Int(digits) else { return nil }
            rest = rest.dropFirst(digits.count)
            guard let unit = rest.first else { return nil }
            rest = rest.dropFirst()
            switch (inTime, unit) {
            case (false, "Y"): years = value
            case (false, "M"): months = value
            case (false, "W"): weeks = value
            case (false, "D"): days = value
            case (true, "H"): hours = value
            case (true, "M"): minutes = value
            case (true, "S"): seconds = value
            default: return nil
            }
            sawPart = true
            sawTimePart = sawTimePart || inTime
        }
        guard sawPart, !inTime || sawTimePart else { return nil }
    }

    public static let oneWeek = StorePeriod(weeks: 1)
    public static let oneMonth = StorePeriod(months: 1)
    public static let oneYear = StorePeriod(years: 1)

    /// Whole months in the date part (years count twelve), when the period has nothing else.
    public var wholeMonths: Int? {
        weeks == 0 && days == 0 && hours == 0 && minutes == 0 && seconds == 0 ? years * 12 + months : nil
    }

    /// Days in the date part when it is only weeks and days.
    public var wholeDays: Int? {
        years == 0 && months == 0 && hours == 0 && minutes == 0 && seconds == 0 ? weeks * 7 + days : nil
    }

    /// Whether every part is zero (`P0D`, `PT0S`): a period that ends where it starts.
    public var isZero: Bool { years == 0 && months == 0 && weeks == 0 && days == 0 && timeSeconds == 0 }

    /// Seconds in the time part.
    var timeSeconds: Int { hours * 3600 + minutes * 60 + seconds }

    /// `date` plus this period on the Gregorian calendar in UTC.
    public func added(to date: Date) -> Date {
        var components = DateComponents()
        components.year = years
        components.month = months
        components.day = weeks * 7 + days
        components.second = timeSeconds
        return Self.calendar.date(byAdding: components, to: date) ?? date
    }

    private static let calendar: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(secondsFromGMT: 0)!
        return calendar
    }()

    public var description: String {
        var text = "P"
        for (value, unit) in [(years, "Y"), (months, "M"), (weeks, "W"), (days, "D")] where value != 0 {
            text += "\(value)\(unit)"
        }
        if timeSeconds != 0 {
            text += "T"
            for (value, unit) in [(hours, "H"), (minutes, "M"), (seconds, "S")] where value != 0 {
                text += "\(value)\(unit)"
            }
        }
        return text == "P" ? "P0D" : text
    }
}
