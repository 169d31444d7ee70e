public import Foundation

/// The emulator's clock: the real clock plus every explicit advance, at a ``TimeRate``.
///
/// A pure value: it reads the real time it is given (tests pass a fake one) and never sleeps. Advancing by a
/// store period moves "now" by that period's length at the current rate, so `advance(P1M)` always covers one
/// monthly renewal, whatever the rate.
public struct VirtualClock: Sendable, Hashable {
    public var rate: TimeRate
    /// Seconds added to the real time by explicit advances.
    public private(set) var offset: TimeInterval = 0

    public init(rate: TimeRate = .realTime, offset: TimeInterval = 0) {
        self.rate = rate
        self.offset = offset
    }

    /// Store time at real time `real`.
    public func now(real: Date) -> Date { real.addingTimeInterval(offset) }

    /// Moves store time forward by `period` at the current rate; returns the new store time.
    @discardableResult
    public mutating func advance(by period: StorePeriod, real: Date) -> Date {
        let start = now(real: real)
        offset += rate.end(of: period, from: start).timeIntervalSince(start)
        return now(real: real)
    }
}

/// Events due at store times, released in order of due time and then of scheduling (deterministic).
public struct EventQueue<Event: Sendable>: Sendable {
    private var entries: [(due: Date, sequence: Int, event: Event)] = []
    private var nextSequence = 0

    public init() {}

    public var isEmpty: Bool { entries.isEmpty }
    public var count: Int { entries.count }
    /// The earliest due time, if any.
    public var nextDue: Date? { entries.map(\.due).min() }

    public mutating func schedule(_ event: Event, at due: Date) {
        entries.append((due, nextSequence, event))
        nextSequence += 1
    }

    /// Removes and returns every event due at or before `time`, earliest first.
    public mutating func popDue(until time: Date) -> [(due: Date, event: Event)] {
        let due = entries.filter { $0.due <= time }.sorted { ($0.due, $0.sequence) < ($1.due, $1.sequence) }
        entries.removeAll { $0.due <= time }
        return due.map { ($0.due, $0.event) }
    }
}
