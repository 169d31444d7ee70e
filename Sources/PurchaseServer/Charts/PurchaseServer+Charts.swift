public import Foundation
public import StoreModel
import StorekeeperJSON
import Synchronization

/// One notification as it arrived at this process: for the dashboard's list of recent notifications.
public struct NotificationLogEntry: Sendable, Hashable {
    public var received: Date
    public var bundleID: String
    /// `stored`, `duplicate` or `rejected`.
    public var outcome: String
    /// Apple's type and subtype (from the events it caused), when known.
    public var type: String?
    public var events: Int
    /// Why it was rejected.
    public var error: String?
}

/// The last notifications this process received (not shared between processes; not kept across restarts).
final class NotificationLog: Sendable {
    private let entries = Mutex<[NotificationLogEntry]>([])
    static let capacity = 200

    func record(_ entry: NotificationLogEntry) {
        entries.withLock { list in
            list.append(entry)
            if list.count > Self.capacity { list.removeFirst(list.count - Self.capacity) }
        }
    }

    /// Newest first.
    var latest: [NotificationLogEntry] { entries.withLock { $0.reversed() } }
}

/// What a chart request asks for.
public struct ChartQuery: Sendable, Hashable {
    public var bundleID: String
    public var from: Date
    public var to: Date
    public var resolution: SubscriptionCharts.Resolution
    /// nil: every environment.
    public var environment: Environment?

    public init(
        bundleID: String, from: Date, to: Date, resolution: SubscriptionCharts.Resolution, environment: Environment?
    ) {
        self.bundleID = bundleID
        self.from = from
        self.to = to
        self.resolution = resolution
        self.environment = environment
    }

    /// The longest range a chart covers.
    public static let maxRange: TimeInterval = 5 * 366 * 86_400
}

extension PurchaseServer {
    /// Transactions one chart request may read; more is an error asking for a shorter range.
    static let maxChartRecords = 2_000_000

    /// The charts of `query`, from the stored transactions (one read for all of them).
    public func charts(_ charts: [SubscriptionCharts.Chart], _ query: ChartQuery) async throws -> [SubscriptionCharts
        .Result]
    {
        let app = try app(query.bundleID)
        guard query.from < query.to, query.to.timeIntervalSince(query.from) <= ChartQuery.maxRange else {
            throw PurchaseServerError.invalid("the range must be from before to, and at most five years")
        }
        let limit = Self.maxChartRecords
        let records = try await storage.read { store in
            try store.chartRecords(bundle: query.bundleID, from: query.from, to: query.to, limit: limit + 1)
        }
        guard records.count <= limit else {
            throw PurchaseServerError.invalid("more than \(limit) transactions in the range; ask for a shorter one")
        }
        let selected =
            query.environment.map { environment in records.filter { $0.environment == environment } } ?? records
        let engine = SubscriptionCharts(currency: app.settings.currency, periods: app.settings.subscriptionPeriods)
        let current = now()
        var results: [SubscriptionCharts.Result] = []
        for chart in charts {
            if chart == .retentionSaveRate {
                results.append(try await retentionSaveRate(query))
            } else {
                results.append(
                    engine.compute(
                        chart, records: selected, from: query.from, to: query.to, resolution: query.resolution,
                        now: current))
            }
        }
        return results
    }

    /// A chart's query from `?bundleId&from&to&resolution&environment` (times in milliseconds; by default
    /// the resolution's range up to now — 30 days by day, 2 days by hour, 3 hours by minute — every
    /// environment).
    func chartQuery(_ parameters: (String) -> String?) throws -> ChartQuery {
        let bundleID = try bundleID(parameters("bundleId"))
        func time(_ name: String) throws -> Date? {
            guard let text = parameters(name), !text.isEmpty else { return nil }
            guard let ms = Int64(text), ms >= 0, ms < 32_503_680_000_000 else {
                throw PurchaseServerError.invalid("\(name) is a time in milliseconds since 1970")
            }
            guard let date = EpochMilliseconds.date(ms) else {
                throw PurchaseServerError.invalid("\(name) is outside the dates this server can carry")
            }
            return date
        }
        var resolution = SubscriptionCharts.Resolution.day
        if let text = parameters("resolution"), !text.isEmpty {
            guard let parsed = SubscriptionCharts.Resolution(rawValue: text) else {
                throw PurchaseServerError.invalid("resolution is day, week, month, hour or minute")
            }
            resolution = parsed
        }
        let to = try time("to") ?? now()
        let from = try time("from") ?? to.addingTimeInterval(-resolution.defaultRange)
        var environment: Environment?
        if let text = parameters("environment"), !text.isEmpty, text != "all" {
            guard let parsed = Environment(name: text, among: Environment.customerEnvironments) else {
                throw PurchaseServerError.invalid("environment is Production, Sandbox or all")
            }
            environment = parsed
        }
        return ChartQuery(bundleID: bundleID, from: from, to: to, resolution: resolution, environment: environment)
    }

    /// A chart value as it is shown and sent: money in units of the currency, counts and percentages as they are.
    static func chartValue(_ chart: SubscriptionCharts.Chart, _ value: Double) -> Double {
        chart.isMoney ? value / 1000 : value
    }

    /// `GET /v1/metrics/{chart}`'s answer.
    static func render(_ result: SubscriptionCharts.Result, query: ChartQuery) -> JSONObject {
        [
            "chart": .string(result.chart.rawValue), "title": .string(result.chart.title),
            "bundleId": .string(query.bundleID),
            "unit": .string(
                result.chart.isMoney
                    ? "currency" : [.churn, .retentionSaveRate].contains(result.chart) ? "percent" : "count"),
            "currency": .string(result.currency), "resolution": .string(query.resolution.rawValue),
            "environment": .string(query.environment?.rawValue ?? "all"), "from": ms(query.from), "to": ms(query.to),
            "values": .array(
                result.points.map { point in
                    .object([
                        "start": ms(point.start), "end": ms(point.end),
                        "value": .double(chartValue(result.chart, point.value)),
                    ])
                }),
            "otherCurrencies": .integer(Int64(result.otherCurrencies)),
        ]
    }
}
