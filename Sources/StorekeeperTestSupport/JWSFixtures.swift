import AppStoreSignedData
import Foundation
public import StorekeeperCrypto
public import StorekeeperJSON

/// StoreKit 2 payloads and ECDSA chains built in code, signed like the App Store signs them.
public enum JWSFixtures {
    public static let bundleID = "com.example.storekeeper"
    public static let appAppleID: Int64 = 1_234_567_890
    /// 2024-01-01T00:00:00Z in milliseconds.
    public static let signedDateMs: Int64 = 1_704_067_200_000

    /// One shared P-256 chain shaped like Apple's (markers on leaf and intermediate).
    public static let chain: SigningChain = {
        do {
            return try TestPKI(keyKind: .p256).chain
        } catch {
            fatalError("cannot build the ECDSA test chain: \(error)")
        }
    }()

    /// A transaction payload with Apple's keys, plus an unknown key and an unknown enum value when asked.
    public static func transaction(
        environment: String = "Sandbox", bundleID: String = bundleID, extra: JSONObject = [:]
    )
        -> JSONObject
    {
        var payload: JSONObject = [
            "transactionId": .string("2000000335310644"), "originalTransactionId": .string("2000000335310644"),
            "webOrderLineItemId": .string("2000000032361420"), "bundleId": .string(bundleID),
            "productId": .string("com.example.storekeeper.monthly"), "subscriptionGroupIdentifier": .string("21482456"),
            "purchaseDate": .integer(signedDateMs - 60_000), "originalPurchaseDate": .integer(signedDateMs - 60_000),
            "expiresDate": .integer(signedDateMs + 2_592_000_000), "quantity": .integer(1),
            "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
            "signedDate": .integer(signedDateMs), "environment": .string(environment),
            "transactionReason": .string("PURCHASE"), "storefront": .string("USA"), "storefrontId": .string("143441"),
            "price": .integer(9990), "currency": .string("USD"),
        ]
        for member in extra.members { payload[member.key] = member.value }
        return payload
    }

    public static func renewalInfo(environment: String = "Sandbox") -> JSONObject {
        [
            "originalTransactionId": .string("2000000335310644"),
            "autoRenewProductId": .string("com.example.storekeeper.monthly"),
            "productId": .string("com.example.storekeeper.monthly"), "autoRenewStatus": .integer(1),
            "signedDate": .integer(signedDateMs), "environment": .string(environment),
            "recentSubscriptionStartDate": .integer(signedDateMs - 60_000),
            "renewalDate": .integer(signedDateMs + 2_592_000_000),
        ]
    }

    public static func appTransaction(receiptType: String = "Sandbox", appAppleID: Int64? = appAppleID) -> JSONObject {
        var payload: JSONObject = [
            "receiptType": .string(receiptType), "bundleId": .string(bundleID), "applicationVersion": .string("42"),
            "versionExternalIdentifier": .integer(0), "receiptCreationDate": .integer(signedDateMs),
            "originalPurchaseDate": .integer(1_375_340_400_000), "originalApplicationVersion": .string("1.0"),
            "originalPlatform": .string("iOS"),
        ]
        if let appAppleID { payload["appAppleId"] = .integer(appAppleID) }
        return payload
    }

    /// A V2 notification whose `data` holds a signed transaction and renewal info.
    public static func notification(environment: String = "Sandbox", chain: SigningChain = chain) throws -> JSONObject {
        let transaction = try sign(transaction(environment: environment), chain: chain)
        let renewal = try sign(renewalInfo(environment: environment), chain: chain)
        return [
            "notificationType": .string("SUBSCRIBED"), "subtype": .string("INITIAL_BUY"),
            "notificationUUID": .string("002e14d5-51f5-4503-b5a8-c3a1af68eb20"),
            "data": .object([
                "appAppleId": .integer(appAppleID), "bundleId": .string(bundleID), "bundleVersion": .string("42"),
                "environment": .string(environment), "signedTransactionInfo": .string(transaction),
                "signedRenewalInfo": .string(renewal), "status": .integer(1),
            ]),
            "version": .string("2.0"), "signedDate": .integer(signedDateMs),
        ]
    }

    /// Signs `payload` with the chain's leaf, embedding leaf, intermediate and root.
    public static func sign(_ payload: JSONObject, chain: SigningChain = chain) throws -> String {
        try JWSSigner.sign(payload: payload, key: chain.leafKey, chain: [chain.leaf, chain.intermediate, chain.root])
    }

    /// A JWS with a hand-made header and signature bytes (for malformed cases).
    public static func assemble(header: JSONObject, payload: JSONObject, signature: [UInt8]) -> String {
        Base64URL.encode(JSONWriter.bytes(.object(header))) + "." + Base64URL.encode(JSONWriter.bytes(.object(payload)))
            + "."
            + Base64URL.encode(signature)
    }

    /// The `x5c` header value of a chain.
    public static func x5c(_ certificates: [Certificate]) -> JSONValue {
        .array(certificates.map { .string(Data($0.derEncoded).base64EncodedString()) })
    }
}
