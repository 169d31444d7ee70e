import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperJSON
import Testing

/// How a revoked transaction says why, as Apple's signed transactions do since API 1.19.
@Suite("Signed transactions: revocation type and percentage")
struct RevocationFieldsTests {
    static func payload(_ change: (inout Transaction) -> Void) -> JSONObject {
        var transaction = Transaction(
            id: "2", originalID: "1", bundleID: "com.example.app", productID: "monthly", kind: .autoRenewable,
            purchaseDate: Date(timeIntervalSince1970: 1_800_000_000),
            revocationDate: Date(timeIntervalSince1970: 1_800_000_060),
            revocationReason: .other)
        change(&transaction)
        return JWSTransaction(
            transaction, environment: .sandbox, signedDate: Date(timeIntervalSince1970: 1_800_000_100),
            storefront: "USA",
            storefrontID: "143441"
        ).json
    }

    @Test("A refund is REFUND_FULL at 100000; a family member's FAMILY_REVOKE; an upgraded period's REFUND_PRORATED")
    func types() {
        let refunded = Self.payload { _ in }
        #expect(refunded["revocationType"] == .string("REFUND_FULL"))
        #expect(refunded["revocationPercentage"] == .integer(100_000))
        let family = Self.payload { $0.ownership = .familyShared }
        #expect(family["revocationType"] == .string("FAMILY_REVOKE") && family["revocationPercentage"] == nil)
        let upgraded = Self.payload {
            $0.isUpgraded = true
            $0.revocationPercentage = 66_667
        }
        #expect(upgraded["revocationType"] == .string("REFUND_PRORATED"))
        #expect(upgraded["revocationPercentage"] == .integer(66_667), "the unused share the upgrade found")
        let unknown = Self.payload { $0.isUpgraded = true }
        #expect(
            unknown["revocationPercentage"] == nil, "a share not known (stored before it was) is not claimed as all")
        let kept = Self.payload { $0.revocationDate = nil }
        #expect(kept["revocationType"] == nil && kept["revocationPercentage"] == nil, "a reversed refund says none")
    }
}
