import Foundation
import StoreTime
import Testing

@Suite("Store periods")
struct StorePeriodTests {
    @Test(
        "ISO 8601 periods parse and print back",
        arguments: ["P1W", "P1M", "P2M", "P3M", "P6M", "P1Y", "P3D", "P2W", "PT5M", "P1Y2M3DT4H5M6S"])
    func roundTrip(text: String) throws {
        let period = try #require(StorePeriod(text))
        #expect(period.description == text)
    }

    @Test(
        "Malformed periods are rejected",
        arguments: ["", "P", "1M", "PM", "P1", "P1X", "PT1D", "P1MT", "P-1M", "P1.5M", "PTT1M"])
    func malformed(text: String) {
        #expect(StorePeriod(text) == nil)
    }

    @Test("Calendar addition in UTC: a month from 31 January ends on the last day of February")
    func calendar() throws {
        let january31 = Date(timeIntervalSince1970: 1_706_659_200)  // 2024-01-31T00:00:00Z
        #expect(StorePeriod.oneMonth.added(to: january31) == Date(timeIntervalSince1970: 1_709_164_800))  // 2024-02-29
        #expect(StorePeriod.oneYear.added(to: january31) == Date(timeIntervalSince1970: 1_738_281_600))  // 2025-01-31
    }
}

@Suite("Time rates")
struct TimeRateTests {
    let start = Date(timeIntervalSince1970: 1_704_067_200)

    func seconds(_ rate: TimeRate, _ period: String) -> TimeInterval {
        rate.end(of: StorePeriod(period)!, from: start).timeIntervalSince(start)
    }

    @Test("Scaled renewal lengths follow Apple's table (shared/spec/test-environment.md §2.2)")
    func renewalTable() {
        let table: [(TimeRate, [Double])] = [
            // 1 week, 1 month, 2 months, 3 months, 6 months, 1 year (seconds)
            (.monthlyRenewalEveryHour, [900, 3600, 7200, 10_800, 21_600, 43_200]),
            (.monthlyRenewalEveryThirtyMinutes, [600, 1800, 3600, 5400, 10_800, 21_600]),
            (.monthlyRenewalEveryFifteenMinutes, [300, 900, 1800, 2700, 5400, 10_800]),
            (.monthlyRenewalEveryFiveMinutes, [180, 300, 600, 900, 1800, 3600]),
            (.monthlyRenewalEveryThirtySeconds, [10, 30, 60, 90, 180, 360]),
            (.monthlyRenewalEveryThreeMinutes, [180, 180, 360, 540, 1080, 2160]),
        ]
        for (rate, expected) in table {
            let measured = ["P1W", "P1M", "P2M", "P3M", "P6M", "P1Y"].map { seconds(rate, $0) }
            #expect(measured == expected, "\(rate)")
        }
    }

    @Test("Real time uses the calendar; fixed rates make every period N long")
    func realAndFixed() {
        #expect(seconds(.realTime, "P1M") == 31 * 86_400)  // January 2024
        #expect(seconds(.realTime, "P1W") == 7 * 86_400)
        for period in ["P1W", "P1M", "P1Y", "P3D"] { #expect(seconds(.oneRenewalEveryTenSeconds, period) == 10) }
        #expect(seconds(.oneMinuteIsOneDay, "P1M") == 30 * 60)
    }

    @Test("Grace and billing retry follow the Xcode table")
    func graceAndRetry() {
        let rate = TimeRate.monthlyRenewalEveryHour
        #expect(rate.gracePeriod(forSubscriptionOf: .oneMonth, from: start) == 1800)
        #expect(abs(rate.gracePeriod(forSubscriptionOf: .oneWeek, from: start) - 771.43) < 0.01)  // 12 min 51 s
        #expect(rate.billingRetryPeriod(from: start) == 7200)
        #expect(TimeRate.realTime.gracePeriod(forSubscriptionOf: .oneMonth, from: start) == 16 * 86_400)
        #expect(TimeRate.realTime.billingRetryPeriod(from: start) == 60 * 86_400)
        #expect(TimeRate.oneRenewalEveryTwoSeconds.billingRetryPeriod(from: start) == 4)
    }

    @Test("Rates are found by Apple's case name and by the raw value in .storekit files")
    func lookup() {
        #expect(TimeRate(name: "monthlyRenewalEveryFiveMinutes") == .monthlyRenewalEveryFiveMinutes)
        #expect(TimeRate(rawValue: 13) == .monthlyRenewalEveryFiveMinutes)
        #expect(TimeRate(rawValue: 15) == .monthlyRenewalEveryThirtySeconds)
        #expect(TimeRate(rawValue: 1005) == .oneRenewalEveryTwoSeconds)
        #expect(TimeRate(rawValue: 14) == nil)
        #expect(TimeRate(name: "warpSpeed") == nil)
        #expect(Set(TimeRate.all.map(\.name)).count == TimeRate.all.count)
    }
}

@Suite("Virtual clock and event queue")
struct VirtualClockTests {
    @Test("The clock follows the real time it is given plus every advance, scaled by the rate")
    func clock() {
        var clock = VirtualClock(rate: .monthlyRenewalEveryFiveMinutes)
        let real = Date(timeIntervalSince1970: 1_704_067_200)
        #expect(clock.now(real: real) == real)
        clock.advance(by: .oneMonth, real: real)
        #expect(clock.now(real: real) == real.addingTimeInterval(300))
        #expect(clock.now(real: real.addingTimeInterval(10)) == real.addingTimeInterval(310))
        clock.rate = .realTime
        clock.advance(by: StorePeriod(days: 1), real: real)
        #expect(clock.now(real: real) == real.addingTimeInterval(300 + 86_400))
    }

    @Test("Due events come out earliest first, ties in scheduling order, each once")
    func queue() {
        var queue = EventQueue<String>()
        let t0 = Date(timeIntervalSince1970: 0)
        queue.schedule("renewal B", at: t0.addingTimeInterval(300))
        queue.schedule("renewal A", at: t0.addingTimeInterval(60))
        queue.schedule("expiry", at: t0.addingTimeInterval(300))
        queue.schedule("later", at: t0.addingTimeInterval(900))
        #expect(queue.nextDue == t0.addingTimeInterval(60))
        #expect(queue.popDue(until: t0.addingTimeInterval(30)).isEmpty)
        #expect(queue.popDue(until: t0.addingTimeInterval(300)).map(\.event) == ["renewal A", "renewal B", "expiry"])
        #expect(queue.popDue(until: t0.addingTimeInterval(300)).isEmpty)
        #expect(queue.count == 1)
    }

    @Test("Advancing a month at a time releases twelve monthly renewals a year")
    func renewals() {
        var clock = VirtualClock(rate: .monthlyRenewalEveryFiveMinutes)
        var queue = EventQueue<Int>()
        let real = Date(timeIntervalSince1970: 1_704_067_200)
        var next = clock.rate.end(of: .oneMonth, from: clock.now(real: real))
        queue.schedule(1, at: next)
        var fired: [Int] = []
        for _ in 0..<12 {
            let now = clock.advance(by: .oneMonth, real: real)
            for (_, number) in queue.popDue(until: now) {
                fired.append(number)
                next = clock.rate.end(of: .oneMonth, from: next)
                queue.schedule(number + 1, at: next)
            }
        }
        #expect(fired == Array(1...12))
    }
}
