import AppStoreReceipts
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperLogging
import SubscriptionLifecycle
import Synchronization

extension AppTransaction {
    /// The app transaction of an install (`AppTransaction`, shared/spec/signed-data.md §7.8).
    init(
        app: AppConfiguration, install: Install, environment: Environment, created: Date, deviceVerification: String,
        nonce: UUID
    ) {
        func milliseconds(_ date: Date) -> JSONValue {
            .integer(EpochMilliseconds.milliseconds(date))
        }
        self.init(json: [
            "receiptType": .string(environment.rawValue), "appAppleId": .integer(app.appAppleID),
            "bundleId": .string(app.bundleID), "applicationVersion": .string(install.version),
            "versionExternalIdentifier": .integer(0), "receiptCreationDate": milliseconds(created),
            "originalPurchaseDate": milliseconds(install.originalPurchaseDate),
            "originalApplicationVersion": .string(install.originalVersion),
            "deviceVerification": .string(deviceVerification),
            "deviceVerificationNonce": .string(nonce.uuidString.lowercased()), "originalPlatform": .string("iOS"),
        ])
    }
}

extension UUID {
    /// A time-ordered (version 7, RFC 9562) UUID: `milliseconds` since 1970 (clamped to the 48 bits the
    /// layout has) then 74 bits from 10 injected random bytes.
    init(milliseconds: Int64, bytes: [UInt8]) {
        let time = UInt64(clamping: max(0, min(milliseconds, (1 << 48) - 1)))
        let prefix = (0..<6).map { UInt8(truncatingIfNeeded: time >> (8 * (5 - $0))) }
        self.init(version: 7, prefix + bytes.prefix(10))
    }

    /// A random (version 4) UUID from 16 injected random bytes.
    init(bytes: [UInt8]) { self.init(version: 4, bytes) }

    /// 16 bytes (zero-filled when fewer) with the version nibble and the RFC 9562 variant set.
    private init(version: UInt8, _ bytes: [UInt8]) {
        var value = Array(bytes.prefix(16)) + [UInt8](repeating: 0, count: max(0, 16 - bytes.count))
        value[6] = value[6] & 0x0f | version << 4
        value[8] = value[8] & 0x3f | 0x80
        self = UUID(
            uuid: (
                value[0], value[1], value[2], value[3], value[4], value[5], value[6], value[7], value[8], value[9],
                value[10], value[11], value[12], value[13], value[14], value[15]
            ))
    }
}
