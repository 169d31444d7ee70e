import Foundation
import PurchaseServer
import StoreModel
import Testing

/// The chart definitions (shared/spec/backends.md §1.5) on hand-made transactions with a fixed clock.
@Suite("Subscription charts")
struct SubscriptionChartsTests {
    static let day: TimeInterval = 86_400
    /// 2026-11-01T00:00:00Z.
    static let start = Date(timeIntervalSince1970: 1_793_491_200)

    static func at(_ days: Double) -> Date { start.addingTimeInterval(days * day) }

    static func period(
        _ original: String, _ id: String, from: Double, to: Double, price: Int64 = 9_990, product: String = "monthly",
        trial: Bool = false, revoked: Double? = nil, currency: String = "USD", kind: ProductKind = .autoRenewable
    ) -> PurchaseRecord {
        PurchaseRecord(
            transactionID: TransactionID(id), originalTransactionID: TransactionID(original), bundleID: "app",
            productID: ProductID(product), kind: kind,
            purchaseDate: at(from), expiresDate: kind == .autoRenewable ? at(to) : nil, environment: .production,
            revocationDate: revoked.map(at), offerType: trial ? 1 : nil, offerDiscountType: trial ? "FREE_TRIAL" : nil,
            price: trial ? 0 : price, currency: currency, signedDate: at(from))
    }

    let charts = SubscriptionCharts(currency: "USD", periods: ["monthly": "P1M", "yearly": "P1Y", "weekly": "P1W"])

    func values(_ chart: SubscriptionCharts.Chart, _ records: [PurchaseRecord], days: Int = 4, now: Double = 100)
        -> [Double]
    {
        charts.compute(
            chart, records: records.map(SubscriptionCharts.Record.init), from: Self.at(0), to: Self.at(Double(days)),
            resolution: .day, now: Self.at(now)
        ).points.map(\.value)
    }

    @Test("Periods are whole UTC days, weeks from Monday, calendar months; at most 400")
    func periods() {
        let days = SubscriptionCharts.periods(from: Self.at(0.5), to: Self.at(3), resolution: .day)
        #expect(days.map(\.0) == [Self.at(0), Self.at(1), Self.at(2)])
        let months = SubscriptionCharts.periods(from: Self.at(0), to: Self.at(70), resolution: .month)
        #expect(months.count == 3)
        #expect(months[1].0 == Self.at(30))  // November has 30 days
        let weeks = SubscriptionCharts.periods(from: Self.at(0), to: Self.at(14), resolution: .week)
        // 2026-11-01 is a Sunday: its week began on Monday 26 October.
        #expect(weeks.first?.0 == Self.at(-6))
        #expect(SubscriptionCharts.periods(from: Self.at(0), to: Self.at(5000), resolution: .day).count == 400)
        // Hours and minutes, for compressed store time: a long range shows its last 400 periods.
        let hours = SubscriptionCharts.periods(from: Self.at(0.5), to: Self.at(1), resolution: .hour)
        #expect(hours.count == 12 && hours.first?.0 == Self.at(0.5) && hours.last?.1 == Self.at(1))
        let minutes = SubscriptionCharts.periods(from: Self.at(0), to: Self.at(30), resolution: .minute)
        #expect(minutes.count == 400 && minutes.last?.1 == Self.at(30))
        #expect(minutes.first?.0 == Self.at(30).addingTimeInterval(-400 * 60))
    }

    @Test("Actives: paid and unexpired at each period's end; cancelled-but-unexpired counts; a refund ends it")
    func actives() {
        let records = [
            Self.period("a", "a1", from: 0.5, to: 2.5),  // active at ends of days 0 and 1
            Self.period("b", "b1", from: 1.2, to: 9),  // active from day 1's end on
            Self.period("c", "c1", from: 0.1, to: 9, revoked: 2.2),  // refunded on day 2
            Self.period("t", "t1", from: 0.2, to: 3.5, trial: true),  // a trial is not a paid active
        ]
        #expect(values(.actives, records) == [2, 3, 1, 1])
        #expect(values(.trials, records) == [1, 1, 1, 0])
    }

    @Test("The current period's snapshot is now, not its end")
    func snapshotNow() {
        let records = [Self.period("a", "a1", from: 0.1, to: 1.5)]
        // Now is 1.2: day 1 has not ended, and the subscription is active now.
        #expect(values(.actives, records, now: 1.2) == [1, 1, 1, 1])
        #expect(values(.actives, records, now: 100) == [1, 0, 0, 0])
    }

    @Test("New subscriptions: the first paid period of each original; a trial's conversion counts when it pays")
    func newSubscriptions() {
        let records = [
            Self.period("a", "a1", from: 0.5, to: 1.5), Self.period("a", "a2", from: 1.5, to: 2.5),  // a renewal
            Self.period("b", "b0", from: 0.2, to: 2.2, trial: true), Self.period("b", "b1", from: 2.2, to: 9),
        ]
        #expect(values(.activesNew, records) == [1, 0, 1, 0])
    }

    @Test("Churn: actives at a period's start not active at its end, over actives at its start, in percent")
    func churn() {
        let records = [
            Self.period("a", "a1", from: -1, to: 1.5),  // expires in day 1: churned
            Self.period("b", "b1", from: -1, to: 9),
            Self.period("c", "c1", from: -1, to: 1.2), Self.period("c", "c2", from: 1.4, to: 9),  // back before the end
            Self.period("d", "d1", from: -1, to: 2.5),
        ]
        // Day 0: four active at start, none lost. Day 1: four at start, a lost (25 %). Day 2: three, d lost.
        #expect(values(.churn, records) == [0, 25, 33.33, 0])
    }

    @Test("Revenue: purchases in the period minus refunds in it, in the app's currency; others counted apart")
    func revenue() {
        let records = [
            Self.period("a", "a1", from: 0.5, to: 1.5, price: 9_990),
            Self.period("a", "a2", from: 1.5, to: 2.5, price: 9_990, revoked: 3.5),
            Self.period("p", "p1", from: 2.5, to: 0, price: 4_990, product: "pro", kind: .nonConsumable),
            Self.period("e", "e1", from: 0.5, to: 1.5, price: 8_000, currency: "EUR"),
        ]
        let result = charts.compute(
            .revenue, records: records.map(SubscriptionCharts.Record.init), from: Self.at(0), to: Self.at(4),
            resolution: .day, now: Self.at(100))
        #expect(result.points.map(\.value) == [9_990, 9_990, 4_990, -9_990])
        #expect(result.otherCurrencies == 1)
    }

    @Test("MRR: the normalised monthly value of paid actives at each period's end (the spec's table)")
    func mrr() {
        let records = [
            Self.period("m", "m1", from: 0.5, to: 30, price: 9_990, product: "monthly"),
            Self.period("y", "y1", from: 0.5, to: 365, price: 120_000, product: "yearly"),
            Self.period("w", "w1", from: 1.5, to: 8, price: 2_000, product: "weekly"),
            // No configured period: normalised by the length bought (3 days: ×10).
            Self.period("x", "x1", from: 2.5, to: 5.5, price: 1_000, product: "unknown"),
        ]
        // Monthly 9.99; yearly 120/12 = 10; weekly 2 × 4 = 8; three days 1 × 10 = 10.
        let expected: [Double] = [19_990, 27_990, 37_990, 37_990]
        #expect(values(.mrr, records) == expected)
    }

    @Test("MRR: a yearly product billed monthly over a commitment counts what is billed each month")
    func mrrOfCommitment() {
        var month = Self.period("c", "c1", from: 0.5, to: 30, price: 2_490, product: "yearly")
        month.billingPlanType = "MONTHLY"
        let upfront = Self.period("y", "y1", from: 0.5, to: 365, price: 24_990, product: "yearly")
        // 2.49 a month, against 24.99 / 12 = 2.0825 for the year bought up front.
        #expect(values(.mrr, [month], days: 1) == [2_490])
        #expect(values(.mrr, [upfront], days: 1) == [2_083])
        #expect(values(.mrr, [month, upfront], days: 1) == [4_573])
    }

    @Test("Period lengths: ISO 8601 periods parse; anything else is refused")
    func periodLengths() {
        #expect(SubscriptionCharts.days(ofPeriod: "P1M") == 30)
        #expect(SubscriptionCharts.days(ofPeriod: "P1Y") == 365)
        #expect(SubscriptionCharts.days(ofPeriod: "P2W") == 14)
        for bad in ["", "P", "1M", "PXM", "P1H", "P1M2"] {
            #expect(SubscriptionCharts.days(ofPeriod: bad) == nil, "\(bad)")
        }
    }
}
