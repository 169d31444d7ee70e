import StoreTime
import Testing

@Suite("Duration in seconds, milliseconds, microseconds and nanoseconds")
struct DurationUnitsTests {
    @Test("fractional and whole units, the fraction dropped toward zero")
    func conversions() {
        #expect(Duration.milliseconds(1_500).milliseconds == 1_500)
        #expect(Duration.microseconds(2_750).milliseconds == 2.75)
        #expect(Duration.microseconds(2_750).wholeMilliseconds == 2)
        #expect(Duration.seconds(700).wholeMilliseconds == 700_000)
        #expect(Duration.nanoseconds(999_999).wholeMilliseconds == 0)
        #expect(Duration.microseconds(-2_750).wholeMilliseconds == -2)
        #expect(Duration.seconds(2).wholeMicroseconds == 2_000_000)
        #expect(Duration.nanoseconds(2_999).wholeMicroseconds == 2)
        #expect(Duration.milliseconds(1_500).seconds == 1.5)
        #expect(Duration.milliseconds(-250).seconds == -0.25)
        #expect(Duration.milliseconds(1).wholeNanoseconds == 1_000_000)
        #expect(Duration.seconds(3_155_760_000).wholeNanoseconds == 3_155_760_000_000_000_000)
        #expect((Duration.nanoseconds(7) + .seconds(1) / 1_000_000_000_000).wholeNanoseconds == 7)
        #expect(Duration.nanoseconds(-7).wholeNanoseconds == -7)
    }
}
