import StorekeeperLogging
import Testing

@Suite("Duration in milliseconds")
struct DurationMillisecondsTests {
    @Test("fractional and whole milliseconds, the fraction dropped toward zero")
    func conversions() {
        #expect(Duration.milliseconds(1_500).milliseconds == 1_500)
        #expect(Duration.microseconds(2_750).milliseconds == 2.75)
        #expect(Duration.microseconds(2_750).wholeMilliseconds == 2)
        #expect(Duration.seconds(700).wholeMilliseconds == 700_000)
        #expect(Duration.nanoseconds(999_999).wholeMilliseconds == 0)
        #expect(Duration.microseconds(-2_750).wholeMilliseconds == -2)
        #expect(Duration.seconds(2).wholeMicroseconds == 2_000_000)
        #expect(Duration.nanoseconds(2_999).wholeMicroseconds == 2)
    }
}
