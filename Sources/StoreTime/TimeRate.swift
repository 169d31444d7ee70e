public import Foundation

/// How fast subscription time runs: Apple's `SKTestSession.TimeRate` cases, with their raw values as stored
/// in `.storekit` `settings._timeRate`, and the sandbox-only 3-minute rate (shared/spec/test-environment.md §2).
public struct TimeRate: Hashable, Sendable, CustomStringConvertible {
    /// Apple's case name, e.g. `monthlyRenewalEveryFiveMinutes`.
    public let name: String
    /// The raw value in `.storekit` files (nil for the sandbox-only rate, which StoreKitTest lacks).
    public let rawValue: Int?
    private let kind: Kind

    private enum Kind: Hashable, Sendable {
        case realTime
        /// A day lasts this many real seconds (deprecated rates).
        case secondsPerDay(Double)
        /// A month lasts `month` seconds and a week `week` seconds (Apple's tables).
        case monthly(month: Double, week: Double)
        /// Every period lasts this many seconds.
        case fixed(Double)
    }

    private init(_ name: String, _ rawValue: Int?, _ kind: Kind) {
        self.name = name
        self.rawValue = rawValue
        self.kind = kind
    }

    public static let realTime = TimeRate("realTime", 0, .realTime)
    public static let oneHourIsOneDay = TimeRate("oneHourIsOneDay", 1, .secondsPerDay(3600))
    public static let thirtyMinutesIsOneDay = TimeRate("thirtyMinutesIsOneDay", 2, .secondsPerDay(1800))
    public static let fiveMinutesIsOneDay = TimeRate("fiveMinutesIsOneDay", 3, .secondsPerDay(300))
    public static let oneMinuteIsOneDay = TimeRate("oneMinuteIsOneDay", 4, .secondsPerDay(60))
    public static let thirtySecondsIsOneDay = TimeRate("thirtySecondsIsOneDay", 5, .secondsPerDay(30))
    public static let oneSecondIsOneDay = TimeRate("oneSecondIsOneDay", 6, .secondsPerDay(1))
    public static let monthlyRenewalEveryHour = TimeRate(
        "monthlyRenewalEveryHour", 10, .monthly(month: 3600, week: 900))
    public static let monthlyRenewalEveryThirtyMinutes = TimeRate(
        "monthlyRenewalEveryThirtyMinutes", 11, .monthly(month: 1800, week: 600))
    public static let monthlyRenewalEveryFifteenMinutes = TimeRate(
        "monthlyRenewalEveryFifteenMinutes", 12, .monthly(month: 900, week: 300))
    public static let monthlyRenewalEveryFiveMinutes = TimeRate(
        "monthlyRenewalEveryFiveMinutes", 13, .monthly(month: 300, week: 180))
    public static let monthlyRenewalEveryThirtySeconds = TimeRate(
        "monthlyRenewalEveryThirtySeconds", 15, .monthly(month: 30, week: 10))
    /// Sandbox-only (App Store Connect's 3-minute setting); weekly and monthly both 3 minutes.
    public static let monthlyRenewalEveryThreeMinutes = TimeRate(
        "monthlyRenewalEveryThreeMinutes", nil, .monthly(month: 180, week: 180))
    public static let oneRenewalEveryFifteenMinutes = TimeRate("oneRenewalEveryFifteenMinutes", 1000, .fixed(900))
    public static let oneRenewalEveryFiveMinutes = TimeRate("oneRenewalEveryFiveMinutes", 1001, .fixed(300))
    public static let oneRenewalEveryMinute = TimeRate("oneRenewalEveryMinute", 1002, .fixed(60))
    public static let oneRenewalEveryThirtySeconds = TimeRate("oneRenewalEveryThirtySeconds", 1003, .fixed(30))
    public static let oneRenewalEveryTenSeconds = TimeRate("oneRenewalEveryTenSeconds", 1004, .fixed(10))
    public static let oneRenewalEveryTwoSeconds = TimeRate("oneRenewalEveryTwoSeconds", 1005, .fixed(2))

    public static let all: [TimeRate] = [
        .realTime, .oneHourIsOneDay, .thirtyMinutesIsOneDay, .fiveMinutesIsOneDay, .oneMinuteIsOneDay,
        .thirtySecondsIsOneDay, .oneSecondIsOneDay, .monthlyRenewalEveryHour, .monthlyRenewalEveryThirtyMinutes,
        .monthlyRenewalEveryFifteenMinutes, .monthlyRenewalEveryFiveMinutes, .monthlyRenewalEveryThirtySeconds,
        .monthlyRenewalEveryThreeMinutes, .oneRenewalEveryFifteenMinutes, .oneRenewalEveryFiveMinutes,
        .oneRenewalEveryMinute, .oneRenewalEveryThirtySeconds, .oneRenewalEveryTenSeconds, .oneRenewalEveryTwoSeconds,
    ]

    /// The rate with Apple's case name.
    public init?(name: String) {
        guard let rate = Self.all.first(where: { $0.name == name }) else { return nil }
        self = rate
    }

    /// The rate stored as `rawValue` in a `.storekit` file.
    public init?(rawValue: Int) {
        guard let rate = Self.all.first(where: { $0.rawValue == rawValue }) else { return nil }
        self = rate
    }

    public var description: String { name }

    /// When a period starting at `start` ends at this rate: calendar arithmetic at `realTime`; Apple's
    /// scaled table otherwise (weeks and months from the table, several months and years as multiples of
    /// the month, days as a seventh of the week, hours and shorter scaled like days).
    public func end(of period: StorePeriod, from start: Date) -> Date {
        switch kind {
        case .realTime:
            return period.added(to: start)
        case .fixed(let seconds):
            return start.addingTimeInterval(seconds)
        case .secondsPerDay(let day):
            let days =
                Double(period.years) * 365 + Double(period.months) * 30 + Double(period.weeks) * 7 + Double(period.days)
            return start.addingTimeInterval(days * day + Double(period.timeSeconds) / 86_400 * day)
        case .monthly(let month, let week):
            let months = Double(period.years * 12 + period.months) * month
            let days = Double(period.weeks) * week + Double(period.days) * week / 7
            return start.addingTimeInterval(months + days + Double(period.timeSeconds) / 86_400 * week / 7)
        }
    }

    /// Billing grace period for a subscription of `period` (Xcode table: 6/7 of a scaled week for weekly
    /// subscriptions, half a scaled month otherwise; 6 or 16 days in real time; `N` at fixed rates).
    public func gracePeriod(forSubscriptionOf period: StorePeriod, from start: Date) -> TimeInterval {
        switch kind {
        case .realTime: return period == .oneWeek ? 6 * 86_400 : 16 * 86_400
        case .fixed(let seconds): return seconds
        default:
            let reference = period == .oneWeek ? StorePeriod.oneWeek : StorePeriod.oneMonth
            let scaled = end(of: reference, from: start).timeIntervalSince(start)
            return period == .oneWeek ? scaled * 6 / 7 : scaled / 2
        }
    }

    /// Billing retry: 60 days in real time, twice a scaled month otherwise, twice `N` at fixed rates.
    public func billingRetryPeriod(from start: Date) -> TimeInterval {
        switch kind {
        case .realTime: return 60 * 86_400
        case .fixed(let seconds): return 2 * seconds
        default: return 2 * end(of: .oneMonth, from: start).timeIntervalSince(start)
        }
    }
}
