/// A `Duration` in seconds, milliseconds, microseconds or nanoseconds: the one conversion the servers, the
/// client, the group commit and the benchmarks use (access log times, timeouts handed to C libraries, waits,
/// latencies, rates).
extension Duration {
    /// Seconds, with their fraction.
    package var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// Milliseconds, with their fraction.
    package var milliseconds: Double {
        Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15
    }

    /// Whole milliseconds, the fraction dropped (toward zero).
    package var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }

    /// Whole microseconds, the fraction dropped (toward zero).
    package var wholeMicroseconds: Int64 {
        components.seconds * 1_000_000 + components.attoseconds / 1_000_000_000_000
    }

    /// Whole nanoseconds, the fraction dropped (toward zero); traps past ±292 years, so bound it first.
    package var wholeNanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}
