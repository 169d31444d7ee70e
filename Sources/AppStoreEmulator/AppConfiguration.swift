import Foundation

/// An app the emulator sells for (`--config` JSON or `--bundle-id`).
public struct AppConfiguration: Codable, Sendable, Hashable {
    public var bundleID: String
    public var appAppleID: Int64
    /// The version a fresh install gets when the install request names none.
    public var version: String
    /// verifyReceipt's `password`; nil accepts any.
    public var sharedSecret: String?
    /// Where server notifications go (App Store Server Notifications), if anywhere.
    public var notifications: AppNotifications?

    public init(
        bundleID: String, appAppleID: Int64 = 1_234_567_890, version: String = "1.0", sharedSecret: String? = nil
    ) {
        self.bundleID = bundleID
        self.appAppleID = appAppleID
        self.version = version
        self.sharedSecret = sharedSecret
    }
}
