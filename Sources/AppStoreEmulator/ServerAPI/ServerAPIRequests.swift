import AppStoreServerAPI
import Foundation
import StoreModel
import StorekeeperJSON

// The App Store Server API's request bodies, read and checked as Apple checks them (its error codes) at the
// HTTP edge, so that ``ServerAPIService`` takes typed values only.

/// Apple's extension request, checked: 1–90 days, a reason 0–3, a request identifier.
struct ExtensionRequest: Sendable {
    var days: Int
    var reason: Int
    var requestIdentifier: String

    init(days: Int, reason: Int, requestIdentifier: String) {
        (self.days, self.reason, self.requestIdentifier) = (days, reason, requestIdentifier)
    }

    init(json body: JSONObject) throws {
        guard let days = body["extendByDays"]?.int64Value, (1...90).contains(days) else {
            throw EmulatorError.api(.invalidExtendByDays, "Invalid extend by days value.")
        }
        guard let reason = body["extendReasonCode"]?.int64Value, (0...3).contains(reason) else {
            throw EmulatorError.api(.invalidExtendReasonCode, "Invalid extend reason code.")
        }
        guard let identifier = body["requestIdentifier"]?.stringValue, (1...128).contains(identifier.utf8.count)
        else { throw EmulatorError.api(.invalidRequestIdentifier, "Invalid request identifier.") }
        self.days = Int(days)
        self.reason = Int(reason)
        self.requestIdentifier = identifier
    }
}

/// Mass Extend Renewal Date's body: the extension, the product and the storefronts it is limited to.
struct MassExtensionRequest: Sendable {
    var `extension`: ExtensionRequest
    var productID: String
    /// Upper-cased ISO 3166-1 alpha-3 codes; nil for every storefront.
    var storefronts: [String]?

    init(json body: JSONObject) throws {
        self.extension = try ExtensionRequest(json: body)
        guard let productID = body["productId"]?.stringValue else {
            throw EmulatorError.api(.invalidProductId, "Invalid product id.")
        }
        self.productID = productID
        if let value = body["storefrontCountryCodes"], value != .null {
            guard let list = value.arrayValue, !list.isEmpty else {
                throw EmulatorError.api(.invalidEmptyStorefrontCountryCodeList, "Invalid empty storefront list.")
            }
            // Each code once, in the order given: the list is then at most the storefronts there are.
            var seen = Set<String>()
            storefronts = try list.compactMap { item in
                guard let code = item.stringValue, Storefront(countryCode: code) != nil else {
                    throw EmulatorError.api(.invalidStorefrontCountryCode, "Invalid storefront country code.")
                }
                return seen.insert(code.uppercased()).inserted ? code.uppercased() : nil
            }
        }
    }
}

/// Get Notification History's body, checked.
struct NotificationHistoryQuery: Sendable {
    var start: Date
    var end: Date
    var type: NotificationType?
    var subtype: NotificationSubtype?
    var transactionID: String?
    var onlyFailures: Bool
}

extension NotificationHistoryQuery {
    /// Reads and checks the body as Apple does, with `current` the store's now and `environment` the one asked.
    init(json body: JSONObject, now current: Date, environment: Environment) throws {
        guard let startValue = body["startDate"], startValue != .null else {
            throw EmulatorError.api(.invalidStartDate, "Invalid start date.")
        }
        guard let startMs = startValue.doubleValue else {
            throw EmulatorError.api(.invalidStartDate, "Invalid start date.")
        }
        guard let endValue = body["endDate"], endValue != .null, let endMs = endValue.doubleValue else {
            throw EmulatorError.api(.invalidEndDate, "Invalid end date.")
        }
        guard let start = EpochMilliseconds.date(startMs) else {
            throw EmulatorError.api(.invalidStartDate, "Invalid start date.")
        }
        // A future end date reaches now (nothing later exists).
        let end = EpochMilliseconds.date(endMs) ?? (endMs > 0 ? Date.distantFuture : .distantPast)
        // Apple keeps 180 days in Production and 30 in the Sandbox; store time runs at real speed between
        // advances, so these are plain days.
        let kept: TimeInterval = environment == .production ? 180 * 86_400 : 30 * 86_400
        guard start >= current.addingTimeInterval(-kept) else {
            throw EmulatorError.api(.startDateTooFarInPast, "Start date too far in the past.")
        }
        guard start < end else {
            throw EmulatorError.api(.startDateAfterEndDate, "Start date after end date.")
        }
        func text(_ name: String) -> String? {
            guard let value = body[name], value != .null else { return nil }
            return value.stringValue ?? ""
        }
        var type: NotificationType?
        if let name = text("notificationType") {
            guard let parsed = NotificationType(known: name) else {
                throw EmulatorError.api(.invalidNotificationType, "Invalid notification type.")
            }
            type = parsed
        }
        var subtype: NotificationSubtype?
        if let name = text("notificationSubtype") {
            guard let type, let parsed = NotificationSubtype(known: name), type.subtypes.contains(parsed) else {
                throw EmulatorError.api(.invalidNotificationType, "Invalid notification type and subtype.")
            }
            subtype = parsed
        }
        let transactionID = text("transactionId")
        if transactionID != nil, type != nil {
            throw EmulatorError.api(.multipleFiltersSupplied, "Use notificationType or transactionId, not both.")
        }
        if let transactionID, transactionID.isEmpty || !transactionID.utf8.allSatisfy({ (48...57).contains($0) }) {
            throw EmulatorError.api(.invalidTransactionId, "Invalid transaction id.")
        }
        var onlyFailures = false
        if let value = body["onlyFailures"], value != .null {
            guard let flag = value.boolValue else { throw EmulatorError.api(.generalBadRequest, "Bad request.") }
            onlyFailures = flag
        }
        self.init(
            start: start, end: max(start, end), type: type, subtype: subtype, transactionID: transactionID,
            onlyFailures: onlyFailures)
    }
}

/// Send Consumption Information's body (v2's names, or v1's integer codes), checked; kept as sent.
struct ConsumptionInformation: Sendable {
    /// 1 or 2: which endpoint it came to.
    var version: Int
    /// The body as sent, written back as JSON text: what the transaction keeps.
    var stored: String
    /// v2's `consumptionPercentage` was given (Apple refuses it for an auto-renewable subscription).
    var hasPercentage = false

    init(json body: JSONObject, version: Int) throws {
        if version == 2 { try Self.checkV2(body) } else { try Self.checkV1(body) }
        self.version = version
        self.stored = JSONWriter.string(.object(body))
        self.hasPercentage = version == 2 && body["consumptionPercentage"].map { $0 != .null } == true
    }

    static func checkV2(_ body: JSONObject) throws {
        guard body["customerConsented"]?.boolValue == true else {
            throw EmulatorError.api(.invalidCustomerConsented, "The customer has not consented.")
        }
        let deliveries = [
            "DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE",
            "UNDELIVERED_OTHER",
        ]
        guard let delivery = body["deliveryStatus"]?.stringValue, deliveries.contains(delivery) else {
            throw EmulatorError.api(.invalidDeliveryStatus, "Invalid delivery status.")
        }
        guard body["sampleContentProvided"]?.boolValue != nil else {
            throw EmulatorError.api(.invalidSampleContentProvided, "Invalid sample content provided.")
        }
        // Apple names the two percentage errors below (ConsumptionPercentageOutOfRangeError,
        // UndeliveredConsumptionPercentageNonZeroError) without a published code: the general 4000000 here.
        if let value = body["consumptionPercentage"], value != .null {
            guard let share = value.int64Value, (0...100_000).contains(share) else {
                throw EmulatorError.api(
                    .generalBadRequest, "Invalid request. The consumption percentage is outside the valid range.")
            }
            guard share == 0 || delivery == "DELIVERED" else {
                throw EmulatorError.api(
                    .generalBadRequest,
                    "Invalid request. The consumption percentage must be zero for the provided delivery status.")
            }
        }
        if let value = body["refundPreference"], value != .null {
            guard let preference = value.stringValue, ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(preference)
            else {
                throw EmulatorError.api(
                    .invalidRefundPreference, "Invalid request. The refund preference field is invalid.")
            }
        }
    }

    static func checkV1(_ body: JSONObject) throws {
        guard body["customerConsented"]?.boolValue == true else {
            throw EmulatorError.api(.invalidCustomerConsented, "The customer has not consented.")
        }
        guard body["sampleContentProvided"]?.boolValue != nil else {
            throw EmulatorError.api(.invalidSampleContentProvided, "Invalid sample content provided.")
        }
        let ranges: [(String, ClosedRange<Int64>, APIErrorCode)] = [
            ("consumptionStatus", 0...3, .invalidConsumptionStatus), ("platform", 0...2, .invalidPlatform),
            ("deliveryStatus", 0...5, .invalidDeliveryStatus), ("accountTenure", 0...7, .invalidAccountTenure),
            ("playTime", 0...7, .invalidPlayTime), ("lifetimeDollarsRefunded", 0...7, .invalidLifetimeDollarsRefunded),
            ("lifetimeDollarsPurchased", 0...7, .invalidLifetimeDollarsPurchased),
            ("userStatus", 0...4, .invalidUserStatus), ("refundPreference", 0...3, .invalidRefundPreference),
        ]
        for (name, range, code) in ranges {
            guard let value = body[name], value != .null else { continue }
            guard let number = value.int64Value, range.contains(number) else {
                throw EmulatorError.api(code, "Invalid \(name).")
            }
        }
        if let value = body["appAccountToken"], value != .null {
            guard let text = value.stringValue, text.isEmpty || UUID(uuidString: text) != nil else {
                throw EmulatorError.api(.invalidAppAccountToken, "Invalid app account token.")
            }
        }
        // Every member but refundPreference is required (Apple's ConsumptionRequestV1; 0 declares nothing, and an
        // app with no account token sends ""): one left out is refused with its own code, after the values sent.
        for (name, _, code) in ranges where name != "refundPreference" && (body[name] ?? .null) == .null {
            throw EmulatorError.api(code, "Missing \(name).")
        }
        if (body["appAccountToken"] ?? .null) == .null {
            throw EmulatorError.api(.invalidAppAccountToken, "Missing appAccountToken.")
        }
    }
}

/// Set App Account Token's body: the token, a UUID.
enum AppAccountTokenRequest {
    static func token(json body: JSONObject) throws -> UUID {
        guard let text = body["appAccountToken"]?.stringValue, let token = UUID(uuidString: text) else {
            throw EmulatorError.api(.invalidAppAccountTokenUUID, "Invalid app account token: not a UUID.")
        }
        return token
    }
}
