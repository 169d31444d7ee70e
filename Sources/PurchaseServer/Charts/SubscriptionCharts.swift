public import Foundation
public import StoreModel

/// The charts a developer reads (RevenueCat's definitions, shared/spec/backends.md §1.5), computed from the
/// stored transactions of one app: a pure function of the records, the range and the clock.
///
/// - `actives`: paid, unexpired, unrevoked subscriptions at the end of each period (cancelled but
///   unexpired count); `trials`: the same for free trials.
/// - `actives_new`: subscriptions whose first paid period started in the period (trial conversions count).
/// - `churn`: of the subscriptions active (paid) at the start of the period, the share not active at its end,
///   in percent (a lapse that comes back before the end is not churn; cancelled is not churn until expiry).
/// - `revenue`: prices of the transactions bought in the period, minus those refunded in it, in the app's
///   currency (gross).
/// - `mrr`: the normalised monthly value of the paid subscriptions active at the end of each period.
///
/// Money is in milliunits of the app's currency; transactions in other currencies are left out and
/// counted (there is no exchange rate offline).
public struct SubscriptionCharts: Sendable {
    public enum Chart: String, Sendable, CaseIterable {
        case actives, trials, activesNew = "actives_new", churn, revenue, mrr
        /// Retention Messaging: the share of realtime requests not followed by a cancellation within a day.
        case retentionSaveRate = "retention_save_rate"

        public var title: String {
            switch self {
            case .actives: "Active subscriptions"
            case .trials: "Active trials"
            case .activesNew: "New subscriptions"
            case .churn: "Churn (%)"
            case .revenue: "Revenue"
            case .mrr: "MRR"
            case .retentionSaveRate: "Retention save rate (%)"
            }
        }

        public var isMoney: Bool { self == .revenue || self == .mrr }
    }

    public enum Resolution: String, Sendable, CaseIterable {
        case day, week, month
        /// For rehearsals on compressed store time, where a month lasts minutes.
        case hour, minute

        /// The length of one period, when it is fixed (hours and minutes).
        var fixedLength: TimeInterval? {
            switch self {
            case .hour: 3_600
            case .minute: 60
            default: nil
            }
        }

        /// Hours and minutes: periods of one length, shown with their time.
        public var isFixed: Bool { fixedLength != nil }

        /// The range a chart covers when none is asked for.
        public var defaultRange: TimeInterval {
            switch self {
            case .day, .week, .month: 30 * 86_400
            case .hour: 2 * 86_400
            case .minute: 3 * 3_600
            }
        }
    }

    /// One period of a chart: `[start, end)`.
    public struct Point: Sendable, Hashable {
        public var start: Date
        public var end: Date
        /// A count, a percentage, or milliunits of money.
        public var value: Double
    }

    public struct Result: Sendable {
        public var chart: Chart
        public var points: [Point]
        public var currency: String
        /// Transactions left out because they were in another currency.
        public var otherCurrencies: Int
    }

    /// What a chart needs of one transaction (the storage keeps these as columns beside the document).
    public struct Record: Sendable, Hashable {
        public var originalTransactionID: String
        public var productID: String
        public var kind: ProductKind
        public var environment: Environment
        public var purchaseDate: Date
        public var expiresDate: Date?
        public var revocationDate: Date?
        /// Milliunits.
        public var price: Int64?
        public var currency: String?
        public var isTrial: Bool
        /// `MONTHLY` for a month billed over a commitment: its price is the month's, whatever the product's
        /// period.
        public var billingPlan: String? = nil

        /// The last date a chart may need it on: its purchase, its expiry or its refund, whichever is latest.
        public var lastDate: Date { max(purchaseDate, expiresDate ?? purchaseDate, revocationDate ?? purchaseDate) }
    }

    public var currency: String
    /// The subscription period of each product (`P1M`, …) for MRR; products missing here are normalised by
    /// the length of the period bought (wrong for accelerated sandbox time, so configure them).
    public var periods: [String: String]

    public init(currency: String, periods: [String: String] = [:]) {
        self.currency = currency
        self.periods = periods
    }

    /// At most this many periods per chart.
    public static let maxPoints = 400

    /// The periods of `[from, to)` at `resolution` in UTC: whole days, weeks from Monday, calendar months,
    /// hours, minutes. At most ``maxPoints``: the first of days, weeks and months, the last of hours and
    /// minutes (a long range at a fine resolution shows its end).
    public static func periods(from: Date, to: Date, resolution: Resolution) -> [(Date, Date)] {
        var from = from
        if let length = resolution.fixedLength {
            from = max(from, to.addingTimeInterval(-length * Double(maxPoints)))
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        calendar.firstWeekday = 2
        let component: Calendar.Component =
            switch resolution {
            case .day: .day
            case .week: .weekOfYear
            case .month: .month
            case .hour: .hour
            case .minute: .minute
            }
        var start = calendar.dateInterval(of: component, for: from)?.start ?? from
        var result: [(Date, Date)] = []
        while start < to, result.count < maxPoints {
            guard let end = calendar.date(byAdding: component, value: 1, to: start) else { break }
            result.append((start, end))
            start = end
        }
        return result
    }

    /// Whether a transaction is a free trial: an introductory offer with a free-trial discount (or no price).
    public static func isTrial(_ record: PurchaseRecord) -> Bool {
        guard record.offerType == 1 else { return false }
        if let discount = record.offerDiscountType { return discount == "FREE_TRIAL" }
        return (record.price ?? 0) == 0
    }

    /// The monthly value of one period's price (milliunits).
    func monthly(_ record: Record) -> Double {
        let price = Double(record.price ?? 0)
        // A commitment billed monthly counts by what is billed each month.
        if record.billingPlan == "MONTHLY" { return price }
        let days: Double
        if let period = periods[record.productID] {
            days = Self.days(ofPeriod: period) ?? 30
        } else if let expires = record.expiresDate {
            days = expires.timeIntervalSince(record.purchaseDate) / 86_400
        } else {
            days = 30
        }
        return Self.monthlyFactor(days: days) * price
    }

    /// The spec's table: 1 day ×30, 3 days ×10, a week ×4, 2 weeks ×2, 4 weeks or a month ×1, 2 months ½,
    /// 3 months ⅓, 6 months ⅙, a year 1/12.
    static func monthlyFactor(days: Double) -> Double {
        switch days {
        case ..<2: 30
        case ..<5: 10
        case ..<10: 4
        case ..<20: 2
        case ..<45: 1
        case ..<75: 1.0 / 2
        case ..<135: 1.0 / 3
        case ..<270: 1.0 / 6
        default: 1.0 / 12
        }
    }

    /// Records grouped by original transaction, each group by purchase date.
    static func byOriginal(_ records: [Record]) -> [[Record]] {
        var groups: [String: [Record]] = [:]
        for record in records { groups[record.originalTransactionID, default: []].append(record) }
        return groups.values.map { group in group.count < 2 ? group : group.sorted { $0.purchaseDate < $1.purchaseDate }
        }
    }

    /// The period `date` falls in, of consecutive periods beginning at `starts` (ascending) with the last
    /// ending at `end`; nil outside them. A binary search: charts bucket up to millions of records.
    static func period(of date: Date, starts: [Date], end: Date) -> Int? {
        guard let first = starts.first, date >= first, date < end else { return nil }
        let index = lowerBound(starts, date)
        return index < starts.count && starts[index] == date ? index : index - 1
    }

    /// The first index of sorted `dates` whose date is at or after `date` (`dates.count` when none is).
    static func lowerBound(_ dates: [Date], _ date: Date) -> Int {
        var (low, high) = (0, dates.count)
        while low < high {
            let middle = (low + high) / 2
            if dates[middle] < date { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// Days in an ISO 8601 period such as `P1M`, `P1W`, `P3D`, `P1Y` (months as 30, years as 365).
    public static func days(ofPeriod text: String) -> Double? {
        guard text.hasPrefix("P"), text.count <= 16 else { return nil }
        var total = 0.0
        var number = ""
        for character in text.dropFirst() {
            if character.isNumber {
                number.append(character)
                continue
            }
            guard let value = Double(number) else { return nil }
            switch character {
            case "D": total += value
            case "W": total += value * 7
            case "M": total += value * 30
            case "Y": total += value * 365
            default: return nil
            }
            number = ""
        }
        return number.isEmpty && total > 0 ? total : nil
    }

    /// The chart over `[from, to)`; snapshots at a period's end are taken at `min(end, now)`.
    /// `records` are the app's transactions whose span (purchase to ``Record/lastDate``) meets `[from, to)`.
    public func compute(
        _ chart: Chart, records: [Record], from: Date, to: Date, resolution: Resolution, now: Date
    ) -> Result {
        let buckets = Self.periods(from: from, to: to, resolution: resolution)
        var values = [Double](repeating: 0, count: buckets.count)
        var other = 0
        let subscriptions = records.filter { $0.kind == .autoRenewable }
        // Snapshot instants: the start of the first period, then each period's end (capped at now).
        let instants = [min(buckets.first?.0 ?? from, now)] + buckets.map { min($0.1, now) }
        func activeInstants(_ record: Record) -> Range<Int> {
            // Active at t when purchase <= t < min(expires, revocation).
            let start = record.purchaseDate
            var end = record.expiresDate ?? record.purchaseDate
            if let revoked = record.revocationDate { end = min(end, revoked) }
            let first = Self.lowerBound(instants, start)
            let last = Self.lowerBound(instants, end)
            return first..<max(first, last)
        }
        let starts = buckets.map(\.0)
        let end = buckets.last?.1 ?? from
        func bucket(_ date: Date) -> Int? { Self.period(of: date, starts: starts, end: end) }
        switch chart {
        case .actives, .trials, .mrr:
            // Per subscription, the instants its periods cover (counted once where periods overlap), added
            // through a difference array: linear in the records and the periods.
            var difference = [Double](repeating: 0, count: instants.count + 1)
            var chosen: [Record] = []
            for record in subscriptions {
                guard chart == .trials ? record.isTrial : !record.isTrial else { continue }
                if chart == .mrr, record.currency != nil, record.currency != currency {
                    other += 1
                    continue
                }
                chosen.append(record)
            }
            for group in Self.byOriginal(chosen) {
                var covered = 0
                for record in group {
                    let range = activeInstants(record)
                    let lower = max(range.lowerBound, covered)
                    guard lower < range.upperBound else { continue }
                    let value = chart == .mrr ? monthly(record) : 1
                    difference[lower] += value
                    difference[range.upperBound] -= value
                    covered = range.upperBound
                }
            }
            var running = 0.0
            for index in instants.indices {
                running += difference[index]
                if index > 0 { values[index - 1] = running }
            }
        case .activesNew:
            var firstPaid: [String: Date] = [:]
            for record in subscriptions where !record.isTrial {
                let known = firstPaid[record.originalTransactionID]
                if known == nil || record.purchaseDate < known! {
                    firstPaid[record.originalTransactionID] = record.purchaseDate
                }
            }
            for date in firstPaid.values {
                if let index = bucket(date) { values[index] += 1 }
            }
        case .churn:
            // Per subscription, the merged runs of instants it is active at: active at a period's start when
            // the run holds its index; churned in it when the run ends right after.
            var atStartDifference = [Double](repeating: 0, count: instants.count + 1)
            var churned = [Double](repeating: 0, count: buckets.count)
            for group in Self.byOriginal(subscriptions.filter { !$0.isTrial }) {
                var runs: [Range<Int>] = []
                for record in group {
                    let range = activeInstants(record)
                    guard !range.isEmpty else { continue }
                    if let last = runs.last, range.lowerBound <= last.upperBound {
                        runs[runs.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
                    } else {
                        runs.append(range)
                    }
                }
                for run in runs {
                    atStartDifference[run.lowerBound] += 1
                    atStartDifference[run.upperBound] -= 1
                    if run.upperBound - 1 < buckets.count { churned[run.upperBound - 1] += 1 }
                }
            }
            var atStart = [Double](repeating: 0, count: buckets.count)
            var running = 0.0
            for index in buckets.indices {
                running += atStartDifference[index]
                atStart[index] = running
            }
            for index in buckets.indices where atStart[index] > 0 && instants[index + 1] > instants[index] {
                values[index] = (churned[index] / atStart[index] * 10_000).rounded() / 100
            }
        case .retentionSaveRate:
            // From the retention answers, not the transactions (``PurchaseServer/retentionSaveRate(_:)``).
            break
        case .revenue:
            for record in records {
                guard let price = record.price else { continue }
                if let given = record.currency, given != currency {
                    other += 1
                    continue
                }
                if let index = bucket(record.purchaseDate) { values[index] += Double(price) }
                if let revoked = record.revocationDate, let index = bucket(revoked) { values[index] -= Double(price) }
            }
        }
        if chart == .mrr { values = values.map { $0.rounded() } }
        return Result(
            chart: chart,
            points: buckets.indices.map { Point(start: buckets[$0].0, end: buckets[$0].1, value: values[$0]) },
            currency: currency, otherCurrencies: other)
    }
}

// In an extension, so the record keeps Swift's memberwise initialiser (storage reads columns into it).
extension SubscriptionCharts.Record {
    /// What charts need of a stored purchase.
    public init(_ purchase: PurchaseRecord) {
        originalTransactionID = purchase.originalTransactionID.rawValue
        productID = purchase.productID.rawValue
        kind = purchase.kind
        environment = purchase.environment
        purchaseDate = purchase.purchaseDate
        expiresDate = purchase.expiresDate
        revocationDate = purchase.revocationDate
        price = purchase.price
        currency = purchase.currency
        isTrial = SubscriptionCharts.isTrial(purchase)
        billingPlan = purchase.billingPlanType
    }
}
