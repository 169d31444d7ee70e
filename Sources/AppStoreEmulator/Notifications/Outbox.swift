import AppStoreSignedData
public import Foundation
public import StoreModel
import StoreTime
import StorekeeperJSON
import StorekeeperLogging

/// How notifications are delivered for one app and environment: where, which version, the retry schedule
/// (store time after the previous attempt), the receiver's time limit and whether a 4xx answer is retried.
public struct NotificationSettings: Sendable, Hashable {
    public var urls: [String]
    public var version: Int
    public var retryDelays: [TimeInterval]
    public var timeout: Duration
    public var retryClientErrors: Bool

    public init(
        urls: [String], version: Int, retryDelays: [TimeInterval], timeout: Duration = .seconds(5),
        retryClientErrors: Bool = true
    ) {
        self.urls = urls
        self.version = version
        self.retryDelays = retryDelays
        self.timeout = timeout
        self.retryClientErrors = retryClientErrors
    }

    /// The receiver's time limit in whole milliseconds.
    public var timeoutMilliseconds: Int {
        Int(timeout.wholeMilliseconds)
    }

    /// Apple's schedules, in hours after the previous attempt: V2 retries 1, 12, 24, 48 and 72, V1 6, 24 and
    /// 48; the sandbox makes one attempt.
    public static func appleRetryHours(version: Int, environment: Environment) -> [Int] {
        guard environment == .production else { return [] }
        return version == 1 ? [6, 24, 48] : [1, 12, 24, 48, 72]
    }
}

/// Where a notification stands.
public enum OutboxState: String, Sendable, Hashable {
    case pending, delivered, failed
}

/// One attempt to send.
public struct SendAttempt: Sendable, Hashable {
    public var date: Date
    public var result: SendAttemptResult
    public init(date: Date, result: SendAttemptResult) {
        self.date = date
        self.result = result
    }
}

/// A notification in the outbox: the exact body posted to one URL, what it is about, and its attempts.
/// Written in the same transaction as the change that caused it.
public struct OutboundNotification: Sendable, Hashable {
    /// `notificationUUID` for V2 (one per URL); a fresh UUID for V1.
    public var id: String
    public var bundleID: BundleID
    public var environment: Environment
    public var version: Int
    public var url: String
    public var body: [UInt8]
    /// V2's `signedPayload` (what the history answers); nil for V1.
    public var signedPayload: String?
    public var notice: Notice
    public var originalTransactionID: TransactionID?
    public var created: Date
    public var state: OutboxState
    public var attempts: [SendAttempt]
    public var retryDelays: [TimeInterval]
    public var retryClientErrors: Bool
    public var timeoutMilliseconds: Int
    /// The outbox's stored form of `signedPayload`, made where it was signed; nil once stored or read.
    var compactPayload: CompactPayload? = nil

    public init(
        id: String, bundleID: BundleID, environment: Environment, version: Int, url: String, body: [UInt8],
        signedPayload: String?, notice: Notice, originalTransactionID: TransactionID?, created: Date,
        state: OutboxState = .pending, attempts: [SendAttempt] = [], retryDelays: [TimeInterval],
        retryClientErrors: Bool, timeoutMilliseconds: Int
    ) {
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
        self.version = version
        self.url = url
        self.body = body
        self.signedPayload = signedPayload
        self.notice = notice
        self.originalTransactionID = originalTransactionID
        self.created = created
        self.state = state
        self.attempts = attempts
        self.retryDelays = retryDelays
        self.retryClientErrors = retryClientErrors
        self.timeoutMilliseconds = timeoutMilliseconds
    }
}

/// A V2 `signedPayload`'s stored form (``StoredJWS``) and the header it names, made on the thread that
/// signed it from the bytes it signed, so that the writer decodes and rewrites nothing. It is derived from
/// `signedPayload`, so it takes no part in a notification's equality or hash.
struct CompactPayload: Sendable, Hashable {
    let header: StoredJWS.Header
    let bytes: [UInt8]

    static func == (_: Self, _: Self) -> Bool { true }
    func hash(into hasher: inout Hasher) {}
}

extension OutboundNotification {
    /// V2's body, `{"signedPayload":"…"}`. A JWS in compact form is base64url and dots, which JSON takes as
    /// they are, so the 14 KB payload is copied rather than scanned by the JSON writer (anything else is).
    /// `signed`: the payload is one this process's signer just made (so compact; not checked again).
    public static func v2Body(signedPayload: String, signed: Bool = false) -> [UInt8] {
        let prefix = Array("{\"signedPayload\":\"".utf8)
        var body = [UInt8]()
        body.reserveCapacity(prefix.count + signedPayload.utf8.count + 2)
        body += prefix
        body += signedPayload.utf8
        if signed {
            body += Array("\"}".utf8)
            return body
        }
        let table = compactJWSBytes  // once: a static read in the loop would check its initialisation per byte
        let plain = table.withUnsafeBufferPointer { allowed in
            body.withUnsafeBufferPointer { bytes in bytes[prefix.count...].allSatisfy { allowed[Int($0)] } }
        }
        guard plain else { return JSONWriter.bytes(.object(["signedPayload": .string(signedPayload)])) }
        body += Array("\"}".utf8)
        return body
    }

    /// The bytes of a JWS in compact form: base64url's alphabet and the dot.
    private static let compactJWSBytes: [Bool] = (0..<256).map { value in
        switch UInt8(value) {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
            true
        default: false
        }
    }
}

/// The outbox's rule, pure: after an attempt, the notification is delivered, waits for its next attempt,
/// or has failed for good.
public enum Outbox {
    public enum Decision: Sendable, Hashable {
        case delivered
        case retry(at: Date)
        case failed
    }

    /// Apple's success rule: HTTP 200–206.
    public static func isSuccess(status: Int) -> Bool { (200...206).contains(status) }

    /// Records `result` (with the HTTP status when there was one) at `date` and decides what follows.
    public static func record(
        _ result: SendAttemptResult, status: Int?, at date: Date, in notification: inout OutboundNotification
    ) -> Decision {
        notification.attempts.append(SendAttempt(date: date, result: result))
        if result == .success {
            notification.state = .delivered
            return .delivered
        }
        let retries = notification.attempts.count - 1
        let clientError = status.map { (400..<500).contains($0) } ?? false
        guard retries < notification.retryDelays.count, !clientError || notification.retryClientErrors else {
            notification.state = .failed
            return .failed
        }
        return .retry(at: date.addingTimeInterval(notification.retryDelays[retries]))
    }
}
