/// A `Duration` in milliseconds (or microseconds): the one conversion the servers, the client and the benchmarks use (access log
/// times, timeouts handed to C libraries, latencies).
extension Duration {
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
}
