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
    /// In-App Purchase keys that sign the app's promotional offers, by key id: PEM (public key, or the
    /// `.p8` private key) or base64 PKCS#8.
    public var offerKeys: [String: String] = [:]
    /// App Store Server API keys the app's server may call with (as App Store Connect would list them).
    public var apiKeys: [APIKeyConfiguration] = []

    public init(
        bundleID: String, appAppleID: Int64 = 1_234_567_890, version: String = "1.0", sharedSecret: String? = nil
    ) {
        self.bundleID = bundleID
        self.appAppleID = appAppleID
        self.version = version
        self.sharedSecret = sharedSecret
    }
}

/// An App Store Server API key registered for an app: its id, its issuer and its public key (PEM public key,
/// or the `.p8` private key, whose public half is taken).
public struct APIKeyConfiguration: Codable, Sendable, Hashable {
    public var keyID: String
    public var issuerID: String
    public var publicKey: String

    public init(keyID: String, issuerID: String, publicKey: String) {
        self.keyID = keyID
        self.issuerID = issuerID
        self.publicKey = publicKey
    }
}
