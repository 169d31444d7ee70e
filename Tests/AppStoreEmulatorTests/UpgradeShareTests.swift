import Foundation
import Testing

@testable import AppStoreEmulator

/// An upgraded period's refunded share (`revocationPercentage` with `REFUND_PRORATED`).
@Suite("Upgrades: the unused share of the period they end")
struct UpgradeShareTests {
    @Test("The unused share in milliunits: a third used leaves 66,667; none used, all; clamped outside the period")
    func unusedShare() {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let end = start.addingTimeInterval(30 * 86_400)
        #expect(AppStore.unusedShare(of: start, until: end, at: start.addingTimeInterval(10 * 86_400)) == 66_667)
        #expect(AppStore.unusedShare(of: start, until: end, at: start) == 100_000)
        #expect(AppStore.unusedShare(of: start, until: end, at: end) == 0)
        #expect(AppStore.unusedShare(of: start, until: end, at: end.addingTimeInterval(60)) == 0)
        #expect(AppStore.unusedShare(of: start, until: end, at: start.addingTimeInterval(-60)) == 100_000)
        #expect(AppStore.unusedShare(of: start, until: nil, at: start) == nil, "no period to share")
        #expect(AppStore.unusedShare(of: end, until: start, at: start) == nil, "an empty period")
    }
}
