public import Foundation
import StorekeeperCrypto
public import StorekeeperJSON

/// Why a webhook was refused: a value, never a crash, and never the secret or the body in its text.
public struct WebhookVerificationError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// No `Storekeeper-Signature` header.
        public static let missingSignature = Code(rawValue: "missing_signature")
        /// A header that is not `t=<unix seconds>,v1=<hex>`.
        public static let malformedSignature = Code(rawValue: "malformed_signature")
        /// Signed longer ago (or further ahead) than the tolerance: a replay, or a clock far off.
        public static let staleTimestamp = Code(rawValue: "stale_timestamp")
        /// No `v1` matches the body signed with the secret.
        public static let badSignature = Code(rawValue: "bad_signature")
        /// Signed, but not `{"api_version", "event": {…}}`, or `Storekeeper-Event-Id` names another event.
        public static let invalidBody = Code(rawValue: "invalid_body")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}

/// One event of a Storekeeper purchase server's webhook (`{"api_version": "1.0", "event": {…}}`, RevenueCat's
/// field names), typed. `json` is the event as sent, with every member, known or not.
public struct WebhookEvent: Sendable, Hashable {
    public let json: JSONObject
    public let apiVersion: String

    public init(json: JSONObject, apiVersion: String) {
        self.json = json
        self.apiVersion = apiVersion
    }

    private func string(_ key: String) -> String? { json[key]?.stringValue }
    private func date(_ key: String) -> Date? {
        json[key]?.doubleValue.map { Date(timeIntervalSince1970: $0 / 1000) }
    }

    /// The event's id: the same event delivered again has the same (de-duplicate on it).
    public var id: String { string("id") ?? "" }
    /// `INITIAL_PURCHASE`, `RENEWAL`, `CANCELLATION`, `UNCANCELLATION`, `BILLING_ISSUE`, `EXPIRATION`,
    /// `PRODUCT_CHANGE`, `NON_RENEWING_PURCHASE`, `REFUND`, `REFUND_REVERSED`, `REFUND_REQUEST`,
    /// `SUBSCRIPTION_EXTENDED`, `TRANSFER`, `TEST`; others may come.
    public var type: String { string("type") ?? "" }
    /// The app's bundle id.
    public var appID: String? { string("app_id") }
    public var appUserID: String? { string("app_user_id") }
    /// When it happened, on the store's clock (`event_timestamp_ms`).
    public var eventDate: Date? { date("event_timestamp_ms") }
    /// `PRODUCTION`, `SANDBOX` or `XCODE`.
    public var environment: String? { string("environment") }
    public var productID: String? { string("product_id") }
    public var entitlementIDs: [String] { json["entitlement_ids"]?.arrayValue?.compactMap(\.stringValue) ?? [] }
    public var transactionID: String? { string("transaction_id") }
    public var originalTransactionID: String? { string("original_transaction_id") }
    public var expirationDate: Date? { date("expiration_at_ms") }
    /// `NORMAL`, `TRIAL`, `INTRO`, `PROMOTIONAL`.
    public var periodType: String? { string("period_type") }
    public var cancelReason: String? { string("cancel_reason") }
    public var expirationReason: String? { string("expiration_reason") }
    public var newProductID: String? { string("new_product_id") }
    public var appleNotificationType: String? { string("apple_notification_type") }
    public var appleNotificationSubtype: String? { string("apple_notification_subtype") }
    /// Where the server learned it: `notification`, `app`, `api`, `developer`.
    public var source: String? { string("source") }
}

/// Checks a webhook as a Swift backend receives it: the `Storekeeper-Signature` header
/// (`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` with the webhook's secret; several `v1` while a
/// secret is rotated), within a tolerance of the receiver's clock, compared in constant time; then the body,
/// bounded, decoded into a ``WebhookEvent``.
public struct WebhookVerifier: Sendable {
    /// Five minutes either way, as Stripe-style verifiers default to.
    public static let defaultTolerance: TimeInterval = 300
    /// A larger body is not a webhook of ours.
    public static let maxBodyBytes = 1 << 20

    private let secret: [UInt8]
    private let tolerance: TimeInterval
    private let now: @Sendable () -> Date

    public init(
        secret: String, tolerance: TimeInterval = WebhookVerifier.defaultTolerance,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.secret = Array(secret.utf8)
        self.tolerance = max(0, tolerance)
        self.now = now
    }

    /// The event, when `signature` signs `body` with the secret within the tolerance and the body is a
    /// webhook; `eventID` is the `Storekeeper-Event-Id` header, checked against the body when given.
    public func verify(body: [UInt8], signature: String?, eventID: String? = nil) throws(WebhookVerificationError)
        -> WebhookEvent
    {
        guard let signature else {
            throw WebhookVerificationError(.missingSignature, "no Storekeeper-Signature header")
        }
        guard signature.utf8.count <= 1024 else {
            throw WebhookVerificationError(.malformedSignature, "the signature header is longer than 1024 bytes")
        }
        var stamp: Substring?
        var candidates: [[UInt8]] = []
        for part in signature.split(separator: ",") {
            let pieces = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            guard pieces.count == 2 else { continue }
            switch pieces[0] {
            case "t": stamp = pieces[1]
            case "v1": if let mac = Self.hex(pieces[1]) { candidates.append(mac) }
            default: continue
            }
        }
        guard let stamp, let seconds = Int64(stamp), !candidates.isEmpty else {
            throw WebhookVerificationError(
                .malformedSignature, "the signature header is not t=<unix seconds>,v1=<hex>")
        }
        let signed = Date(timeIntervalSince1970: TimeInterval(seconds))
        guard abs(signed.timeIntervalSince(now())) <= tolerance else {
            throw WebhookVerificationError(
                .staleTimestamp, "signed at \(seconds), more than \(Int(tolerance)) s from this clock")
        }
        guard body.count <= Self.maxBodyBytes else {
            throw WebhookVerificationError(.invalidBody, "the body is larger than \(Self.maxBodyBytes) bytes")
        }
        let expected = HMAC.sha256(key: secret, message: Array(stamp.utf8) + [0x2E] + body)
        // Every candidate is compared in full, in constant time.
        var matched = false
        for candidate in candidates where ConstantTime.equals(candidate, expected) { matched = true }
        guard matched else {
            throw WebhookVerificationError(.badSignature, "no v1 signature matches the body and the secret")
        }
        guard let root = (try? JSONParser.parse(body))?.objectValue, let event = root["event"]?.objectValue,
            event["id"]?.stringValue != nil, event["type"]?.stringValue != nil
        else {
            throw WebhookVerificationError(
                .invalidBody, "the body is not {\"api_version\", \"event\": {\"id\", \"type\", …}}")
        }
        let decoded = WebhookEvent(json: event, apiVersion: root["api_version"]?.stringValue ?? "")
        if let eventID, eventID != decoded.id {
            throw WebhookVerificationError(.invalidBody, "Storekeeper-Event-Id names another event than the body")
        }
        return decoded
    }

    /// Lower- or upper-case hex of a SHA-256 (64 digits); nil otherwise.
    static func hex(_ text: Substring) -> [UInt8]? {
        guard text.utf8.count == 64 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var high: UInt8?
        for character in text.utf8 {
            let value: UInt8
            switch character {
            case 0x30...0x39: value = character - 0x30
            case 0x61...0x66: value = character - 0x61 + 10
            case 0x41...0x46: value = character - 0x41 + 10
            default: return nil
            }
            if let first = high {
                bytes.append(first << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        return bytes
    }
}
