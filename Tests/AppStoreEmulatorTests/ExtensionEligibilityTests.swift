import AppStoreServerAPI
import Foundation
import StoreModel
import StorekeeperJSON
import Testing

@testable import AppStoreEmulator

@Suite("App Store Server API on the emulator: who a renewal-date extension is for")
struct ExtensionEligibilityTests {
    @Test("A subscription in a free offer period is ineligible (4030004), as Apple extends paid periods only")
    func freeOfferPeriod() async throws {
        let fixture = try await OfferTests.fixture()
        let harness = fixture.harness
        let app = try await harness.device()
        let (_, _, free) = try await OfferTests.buy(harness, app, ["offerCode": .string("NEWCOMER")])
        #expect(free["offerDiscountType"] == .string("FREE_TRIAL"), "\(free)")
        let id = try #require(free["originalTransactionId"]?.stringValue)
        let scope = APIScope(bundleID: AppStoreTests.bundleID, environment: .sandbox)
        do {
            _ = try await harness.store.serverAPI.apiExtend(
                originalTransactionID: id, request: ExtensionRequest(days: 1, reason: 0, requestIdentifier: "free"),
                scope: scope)
            Issue.record("a free offer period was extended")
        } catch let error as EmulatorError {
            #expect(error.code == String(APIErrorCode.subscriptionExtensionIneligible.rawValue) && error.status == 403)
        }
    }
}
