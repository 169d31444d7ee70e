public import Foundation
public import StoreModel
public import StorekeeperJSON

/// A decoded signed payload that keeps every member it was given (unknown keys and enum values survive a
/// round trip) and offers typed accessors with Apple's key names (shared/spec/signed-data.md §7).
public protocol SignedPayload: Sendable, Hashable {
    var json: JSONObject { get set }
    init(json: JSONObject)
}

extension SignedPayload {
    public func string(_ key: String) -> String? { json[key]?.stringValue }
    public func int64(_ key: String) -> Int64? { json[key]?.int64Value }
    public func bool(_ key: String) -> Bool? { json[key]?.boolValue }
    /// A `ms` field: integer or fractional milliseconds since 1970, possibly negative (Xcode).
    public func date(_ key: String) -> Date? { json[key]?.doubleValue.flatMap { EpochMilliseconds.date($0) } }
    public func uuid(_ key: String) -> UUID? { string(key).flatMap(UUID.init(uuidString:)) }

    /// The payload serialized back to JSON, members in their original order.
    public var jsonText: String { JSONWriter.string(.object(json)) }
}

/// An enumeration value that keeps the raw value Apple sent, known or not.
public struct AppleEnum<Known: RawRepresentable & Sendable & Hashable>: Sendable, Hashable
where Known.RawValue: Sendable & Hashable {
    public let rawValue: Known.RawValue
    public var known: Known? { Known(rawValue: rawValue) }
    public init(rawValue: Known.RawValue) { self.rawValue = rawValue }
}

/// `JWSTransactionDecodedPayload` (§7.1).
public struct JWSTransaction: SignedPayload {
    public var json: JSONObject
    public init(json: JSONObject) { self.json = json }

    public var transactionID: String? { string("transactionId") }
    public var originalTransactionID: String? { string("originalTransactionId") }
    public var webOrderLineItemID: String? { string("webOrderLineItemId") }
    public var bundleID: String? { string("bundleId") }
    public var productID: String? { string("productId") }
    public var subscriptionGroupIdentifier: String? { string("subscriptionGroupIdentifier") }
    public var purchaseDate: Date? { date("purchaseDate") }
    public var originalPurchaseDate: Date? { date("originalPurchaseDate") }
    public var expiresDate: Date? { date("expiresDate") }
    public var revocationDate: Date? { date("revocationDate") }
    public var signedDate: Date? { date("signedDate") }
    public var quantity: Int64? { int64("quantity") }
    public var type: AppleEnum<ProductKind>? { string("type").map(AppleEnum.init) }
    public var appAccountToken: UUID? { uuid("appAccountToken") }
    public var inAppOwnershipType: AppleEnum<OwnershipType>? { string("inAppOwnershipType").map(AppleEnum.init) }
    public var revocationReason: AppleEnum<RevocationReason>? { int64("revocationReason").map(AppleEnum.init) }
    public var isUpgraded: Bool? { bool("isUpgraded") }
    public var offerType: AppleEnum<OfferType>? { int64("offerType").map(AppleEnum.init) }
    public var offerIdentifier: String? { string("offerIdentifier") }
    /// `BILLED_UPFRONT` or `MONTHLY` (API 1.21), raw.
    public var billingPlanType: String? { string("billingPlanType") }
    /// `commitmentInfo` of a month billed over a commitment.
    public var commitmentInfo: JSONObject? { json["commitmentInfo"]?.objectValue }
    public var environment: AppleEnum<Environment>? { string("environment").map(AppleEnum.init) }
    public var storefront: String? { string("storefront") }
    public var storefrontID: String? { string("storefrontId") }
    public var transactionReason: AppleEnum<TransactionReason>? { string("transactionReason").map(AppleEnum.init) }
    public var currency: String? { string("currency") }
    /// Milliunits: 10990 means 10.99.
    public var price: Int64? { int64("price") }
    public var appTransactionID: String? { string("appTransactionId") }
}

/// `JWSRenewalInfoDecodedPayload` (§7.2).
public struct JWSRenewalInfo: SignedPayload {
    public var json: JSONObject
    public init(json: JSONObject) { self.json = json }

    public var originalTransactionID: String? { string("originalTransactionId") }
    public var productID: String? { string("productId") }
    public var autoRenewProductID: String? { string("autoRenewProductId") }
    public var autoRenewStatus: Int64? { int64("autoRenewStatus") }
    public var expirationIntent: AppleEnum<ExpirationIntent>? { int64("expirationIntent").map(AppleEnum.init) }
    public var isInBillingRetryPeriod: Bool? { bool("isInBillingRetryPeriod") }
    public var gracePeriodExpiresDate: Date? { date("gracePeriodExpiresDate") }
    public var priceIncreaseStatus: Int64? { int64("priceIncreaseStatus") }
    public var renewalDate: Date? { date("renewalDate") }
    public var renewalBillingPlanType: String? { string("renewalBillingPlanType") }
    /// `commitmentInfo`: what happens when the current commitment ends.
    public var commitmentInfo: JSONObject? { json["commitmentInfo"]?.objectValue }
    public var recentSubscriptionStartDate: Date? { date("recentSubscriptionStartDate") }
    public var renewalPrice: Int64? { int64("renewalPrice") }
    public var offerType: AppleEnum<OfferType>? { int64("offerType").map(AppleEnum.init) }
    public var offerIdentifier: String? { string("offerIdentifier") }
    public var eligibleWinBackOfferIDs: [String]? {
        json["eligibleWinBackOfferIds"]?.arrayValue?.compactMap(\.stringValue)
    }
    public var environment: AppleEnum<Environment>? { string("environment").map(AppleEnum.init) }
    public var signedDate: Date? { date("signedDate") }
    public var appAccountToken: UUID? { uuid("appAccountToken") }
}

/// `AppTransaction` (§7.8).
public struct AppTransaction: SignedPayload {
    public var json: JSONObject
    public init(json: JSONObject) { self.json = json }

    public var receiptType: AppleEnum<Environment>? { string("receiptType").map(AppleEnum.init) }
    public var appAppleID: Int64? { int64("appAppleId") }
    public var bundleID: String? { string("bundleId") }
    public var applicationVersion: String? { string("applicationVersion") }
    public var versionExternalIdentifier: Int64? { int64("versionExternalIdentifier") }
    public var receiptCreationDate: Date? { date("receiptCreationDate") }
    public var originalPurchaseDate: Date? { date("originalPurchaseDate") }
    public var originalApplicationVersion: String? { string("originalApplicationVersion") }
    public var deviceVerification: String? { string("deviceVerification") }
    public var deviceVerificationNonce: UUID? { uuid("deviceVerificationNonce") }
    public var preorderDate: Date? { date("preorderDate") }
    public var appTransactionID: String? { string("appTransactionId") }
    public var originalPlatform: String? { string("originalPlatform") }
}

/// `ResponseBodyV2DecodedPayload` (§7.3) with its `data`, `summary`, `externalPurchaseToken` or `appData`.
public struct NotificationPayload: SignedPayload {
    public var json: JSONObject
    public init(json: JSONObject) { self.json = json }

    public var notificationType: NotificationType? { string("notificationType").map(NotificationType.init) }
    public var subtype: NotificationSubtype? { string("subtype").map(NotificationSubtype.init) }
    public var notificationUUID: String? { string("notificationUUID") }
    public var version: String? { string("version") }
    public var signedDate: Date? { date("signedDate") }
    public var data: JSONObject? { json["data"]?.objectValue }
    public var summary: JSONObject? { json["summary"]?.objectValue }
    public var externalPurchaseToken: JSONObject? { json["externalPurchaseToken"]?.objectValue }
    public var appData: JSONObject? { json["appData"]?.objectValue }
    public var status: AppleEnum<SubscriptionStatus>? { data?["status"]?.int64Value.map(AppleEnum.init) }
    public var signedTransactionInfo: String? { data?["signedTransactionInfo"]?.stringValue }
    public var signedRenewalInfo: String? { data?["signedRenewalInfo"]?.stringValue }

    /// The app the notification is about, from `data`, else `summary`, else `externalPurchaseToken` (whose
    /// environment is Sandbox exactly when its `externalPurchaseId` starts with `SANDBOX`), else `appData`.
    public var appMetadata: (bundleID: String?, appAppleID: Int64?, environment: String?) {
        if let data {
            return (data["bundleId"]?.stringValue, data["appAppleId"]?.int64Value, data["environment"]?.stringValue)
        }
        if let summary {
            return (
                summary["bundleId"]?.stringValue, summary["appAppleId"]?.int64Value, summary["environment"]?.stringValue
            )
        }
        if let token = externalPurchaseToken {
            let sandbox = token["externalPurchaseId"]?.stringValue?.hasPrefix("SANDBOX") == true
            return (
                token["bundleId"]?.stringValue, token["appAppleId"]?.int64Value,
                (sandbox ? Environment.sandbox : .production).rawValue
            )
        }
        if let appData {
            return (
                appData["bundleId"]?.stringValue, appData["appAppleId"]?.int64Value, appData["environment"]?.stringValue
            )
        }
        return (nil, nil, nil)
    }
}

/// Retention Messaging's `DecodedRealtimeRequestBody`: a customer is on the page where they can cancel.
public struct RealtimeRequest: SignedPayload {
    public var json: JSONObject
    public init(json: JSONObject) { self.json = json }

    public var originalTransactionID: String? { string("originalTransactionId") }
    public var appAppleID: Int64? { int64("appAppleId") }
    public var productID: String? { string("productId") }
    public var userLocale: String? { string("userLocale") }
    public var requestIdentifier: UUID? { uuid("requestIdentifier") }
    public var signedDate: Date? { date("signedDate") }
    public var environment: AppleEnum<Environment>? { string("environment").map(AppleEnum.init) }
}
