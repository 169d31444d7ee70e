public import Foundation
public import StoreTime

/// What a run of due events did: how many renewals and expiries, and whether anything is still due
/// (a request does a bounded amount of work; the scheduler does the rest).
public struct DueWork: Sendable {
    public internal(set) var renewals = 0
    public internal(set) var expirations = 0
    /// Events handled, including those that found nothing to do (a subscription already gone).
    public internal(set) var events = 0
    public internal(set) var caughtUp = true

    /// Notification attempts claimed by the run, sent after it commits.
    var sends: [OutboundNotification] = []

    enum Outcome {
        case renewed(nextDue: Date)
        case expired
        case send(OutboundNotification)
        case nothing
    }

    mutating func record(_ outcome: Outcome) {
        events += 1
        switch outcome {
        case .renewed: renewals += 1
        case .expired: expirations += 1
        case .send(let notification): sends.append(notification)
        case .nothing: break
        }
    }

    /// A notification made and claimed by the run itself, to send after it commits.
    mutating func claimed(_ notification: OutboundNotification) { sends.append(notification) }

    /// Adds another run's counts (not its sends: each run's are sent when it commits, and a long catch-up
    /// kept every payload it had sent until it returned).
    mutating func add(_ other: DueWork) {
        renewals += other.renewals
        expirations += other.expirations
        events += other.events
    }
}

/// The clock after a change, and the work that the change made due.
public struct ClockChange: Sendable {
    public let now: Date
    public let rate: TimeRate
    public let ran: DueWork
    public var caughtUp: Bool { ran.caughtUp }
}
