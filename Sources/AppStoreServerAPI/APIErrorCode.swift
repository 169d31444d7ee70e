/// An App Store Server API error code (`errorCode` of `{"errorCode", "errorMessage"}`,
/// shared/spec/server-api.md §A.3). Unknown codes are kept as they came; the HTTP status is the first three
/// digits.
public struct APIErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
    public init(_ rawValue: Int64) { self.rawValue = rawValue }

    public var description: String { String(rawValue) }
    /// The HTTP status Apple answers this code with.
    public var httpStatus: Int { Int(rawValue / 10_000) }

    /// Apple advises retrying these (with back-off); 4290000 after its `Retry-After`.
    public var isRetryable: Bool {
        [
            Self.accountNotFoundRetryable, .appNotFoundRetryable, .originalTransactionIdNotFoundRetryable,
            .generalInternalRetryable, .rateLimitExceeded,
        ].contains(self)
    }

    public static let generalBadRequest = Self(4_000_000)
    public static let invalidAppIdentifier = Self(4_000_002)
    public static let invalidRequestRevision = Self(4_000_005)
    public static let invalidTransactionId = Self(4_000_006)
    public static let invalidOriginalTransactionId = Self(4_000_008)
    public static let invalidExtendByDays = Self(4_000_009)
    public static let invalidExtendReasonCode = Self(4_000_010)
    public static let invalidRequestIdentifier = Self(4_000_011)
    public static let startDateTooFarInPast = Self(4_000_012)
    public static let startDateAfterEndDate = Self(4_000_013)
    public static let invalidPaginationToken = Self(4_000_014)
    public static let invalidStartDate = Self(4_000_015)
    public static let invalidEndDate = Self(4_000_016)
    public static let paginationTokenExpired = Self(4_000_017)
    public static let invalidNotificationType = Self(4_000_018)
    public static let multipleFiltersSupplied = Self(4_000_019)
    public static let invalidTestNotificationToken = Self(4_000_020)
    public static let invalidSort = Self(4_000_021)
    public static let invalidProductType = Self(4_000_022)
    public static let invalidProductId = Self(4_000_023)
    public static let invalidSubscriptionGroupIdentifier = Self(4_000_024)
    public static let invalidExcludeRevoked = Self(4_000_025)
    public static let invalidInAppOwnershipType = Self(4_000_026)
    public static let invalidEmptyStorefrontCountryCodeList = Self(4_000_027)
    public static let invalidStorefrontCountryCode = Self(4_000_028)
    public static let invalidRevoked = Self(4_000_030)
    public static let invalidStatus = Self(4_000_031)
    public static let invalidAccountTenure = Self(4_000_032)
    public static let invalidAppAccountToken = Self(4_000_033)
    public static let invalidConsumptionStatus = Self(4_000_034)
    public static let invalidCustomerConsented = Self(4_000_035)
    public static let invalidDeliveryStatus = Self(4_000_036)
    public static let invalidLifetimeDollarsPurchased = Self(4_000_037)
    public static let invalidLifetimeDollarsRefunded = Self(4_000_038)
    public static let invalidPlatform = Self(4_000_039)
    public static let invalidPlayTime = Self(4_000_040)
    public static let invalidSampleContentProvided = Self(4_000_041)
    public static let invalidUserStatus = Self(4_000_042)
    /// InvalidRefundPreferenceError (v2's names and v1's codes alike).
    public static let invalidRefundPreference = Self(4_000_044)
    public static let invalidTransactionTypeNotSupported = Self(4_000_047)
    public static let appTransactionIdNotSupported = Self(4_000_048)
    public static let invalidAppAccountTokenUUID = Self(4_000_183)
    public static let familyTransactionNotSupported = Self(4_000_185)
    public static let transactionIdNotOriginalTransactionId = Self(4_000_187)
    /// ConsumptionPercentageAutoRenewableSubscriptionError (API 1.19).
    public static let consumptionPercentageAutoRenewableSubscription = Self(4_000_209)
    public static let subscriptionExtensionIneligible = Self(4_030_004)
    public static let subscriptionMaxExtension = Self(4_030_005)
    public static let familySharedSubscriptionExtensionIneligible = Self(4_030_007)
    public static let accountNotFound = Self(4_040_001)
    public static let accountNotFoundRetryable = Self(4_040_002)
    public static let appNotFound = Self(4_040_003)
    public static let appNotFoundRetryable = Self(4_040_004)
    public static let originalTransactionIdNotFound = Self(4_040_005)
    public static let originalTransactionIdNotFoundRetryable = Self(4_040_006)
    public static let serverNotificationUrlNotFound = Self(4_040_007)
    public static let testNotificationNotFound = Self(4_040_008)
    public static let statusRequestNotFound = Self(4_040_009)
    public static let transactionIdNotFound = Self(4_040_010)
    public static let appTransactionDoesNotExist = Self(4_040_019)
    public static let rateLimitExceeded = Self(4_290_000)
    public static let generalInternal = Self(5_000_000)
    public static let generalInternalRetryable = Self(5_000_001)

    // Retention Messaging API (same body and statuses).
    public static let invalidImage = Self(4_000_161)
    public static let headerTooLong = Self(4_000_162)
    public static let bodyTooLong = Self(4_000_163)
    public static let invalidLocale = Self(4_000_164)
    public static let altTextTooLong = Self(4_000_175)
    public static let invalidPerformanceTestRequest = Self(4_000_211)
    public static let invalidRequestId = Self(4_000_212)
    public static let existingPerformanceTestRun = Self(4_000_213)
    public static let badRequestRealtimeUrl = Self(4_000_215)
    public static let badRequestImageSize = Self(4_000_216)
    public static let tooManyBulletPoints = Self(4_000_218)
    public static let bulletPointTextTooLong = Self(4_000_219)
    public static let aboveImageRequiresAnImage = Self(4_000_224)
    public static let maxImages = Self(4_030_014)
    public static let maxMessages = Self(4_030_016)
    public static let messageNotApproved = Self(4_030_017)
    public static let imageNotApproved = Self(4_030_018)
    public static let imageInUse = Self(4_030_019)
    public static let forbiddenNoPassingTest = Self(4_030_026)
    public static let imageNotFound = Self(4_040_014)
    public static let messageNotFound = Self(4_040_015)
    public static let performanceTestRunNotFound = Self(4_040_018)
    public static let defaultMessageNotFound = Self(4_040_020)
    public static let realtimeUrlNotFound = Self(4_040_021)
    public static let imageAlreadyExists = Self(4_090_000)
    public static let messageAlreadyExists = Self(4_090_001)
}
