import AppStoreReceipts
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

/// Renewal info (`JWSRenewalInfoDecodedPayload`), as notifications and the Server API sign it.
extension AppStore {
    /// `JWSRenewalInfoDecodedPayload` for a subscription's state.
    /// Prices are in the account's storefront currency, as its transactions are.
    func renewalInfo(
        _ state: SubscriptionState, account: Account, signedDate: Date, started: Date?, latest: Transaction
    ) -> JSONObject {
        let environment = account.environment
        var info: JSONObject = [
            "originalTransactionId": .string(state.originalTransactionID.rawValue),
            "autoRenewProductId": .string(state.autoRenewProductID.rawValue),
            "productId": .string(state.productID.rawValue), "autoRenewStatus": .integer(state.autoRenew ? 1 : 0),
        ]
        // Present while Apple retries billing, as in Apple's renewal info (absent otherwise).
        if state.isInBillingRetry { info["isInBillingRetryPeriod"] = .bool(true) }
        // Ended: the group's win-back offers the customer may redeem now (in the catalogue's order).
        if state.status == .expired, let group = catalog.entry(state.productID.rawValue)?.subscription?.groupID {
            let ids = catalog.winBackOfferIDs(group: group)
            if !ids.isEmpty { info["eligibleWinBackOfferIds"] = .array(ids.map(JSONValue.string)) }
        }
        if let intent = state.expirationIntent { info["expirationIntent"] = .integer(intent.rawValue) }
        if let grace = state.gracePeriodExpiresDate { info["gracePeriodExpiresDate"] = Self.milliseconds(grace) }
        if let status = state.priceIncreaseStatus { info["priceIncreaseStatus"] = .integer(status.rawValue) }
        // The offer the next renewal is made with.
        if state.offerPeriodsLeft > 0, let offer = state.offer {
            info["offerType"] = .integer(offer.type.rawValue)
            if let identifier = offer.identifier { info["offerIdentifier"] = .string(identifier) }
            if let discount = offer.discountType { info["offerDiscountType"] = .string(discount.rawValue) }
            // The offer of the next renewal, of the product it renews to (a downgrade's is that product's).
            if let period = offerPeriod(offer, productID: state.autoRenewProductID) {
                info["offerPeriod"] = .string(period)
            }
        }
        info["signedDate"] = Self.milliseconds(signedDate)
        info["environment"] = .string(environment.rawValue)
        if let app = latest.appTransactionID { info["appTransactionId"] = .string(app.rawValue) }
        if let token = latest.appAccountToken { info["appAccountToken"] = .string(token) }
        if let started = state.runStart ?? started {
            info["recentSubscriptionStartDate"] = Self.milliseconds(started)
        }
        if let expires = state.expiresDate { info["renewalDate"] = Self.milliseconds(expires) }
        let nextOffer = state.offerPeriodsLeft > 0 ? state.offer : nil
        if let price = charged(
            nextOffer.map({ self.price(of: $0, productID: state.autoRenewProductID) })
                ?? listPrice(state.autoRenewProductID.rawValue), account)
        {
            info["currency"] = .string(price.currency)
            info["renewalPrice"] = .integer(price.milliunits)
        }
        if let plan = state.billingPlan {
            let next =
                state.commitment.map { $0.isLastPeriod ? $0.renewalPlan : .monthly } ?? state.renewalBillingPlan ?? plan
            info["renewalBillingPlanType"] = .string(next.rawValue)
        }
        if let commitment = state.commitment, state.status == .active || state.isInBillingRetry {
            // Inside the commitment the next renewal is the next month of the same product, at the plan's price;
            // `commitmentInfo` says what happens when the commitment ends.
            let renewsTo = state.autoRenewProductID
            let entry = catalog.entry(renewsTo.rawValue)
            if !commitment.isLastPeriod {
                info["autoRenewProductId"] = .string(state.productID.rawValue)
                if let monthly = charged(catalog.entry(state.productID.rawValue)?.monthlyPlan?.price, account) {
                    info["currency"] = .string(monthly.currency)
                    info["renewalPrice"] = .integer(monthly.milliunits)
                }
            } else if commitment.renewalPlan == .monthly, let monthly = charged(entry?.monthlyPlan?.price, account) {
                // The next commitment's first month.
                info["currency"] = .string(monthly.currency)
                info["renewalPrice"] = .integer(monthly.milliunits)
            }
            var renewal: JSONObject = [
                "commitmentAutoRenewProductId": .string(renewsTo.rawValue),
                "commitmentAutoRenewStatus": .integer(commitment.autoRenew ? 1 : 0),
                "commitmentRenewalBillingPlanType": .string(commitment.renewalPlan.rawValue),
                "commitmentRenewalDate": Self.milliseconds(commitment.expiresDate),
            ]
            let renewalPrice =
                commitment.renewalPlan == .monthly
                ? entry?.monthlyPlan?.commitmentPrice.milliunits : entry?.price?.milliunits
            if let renewalPrice { renewal["commitmentRenewalPrice"] = .integer(renewalPrice) }
            info["commitmentInfo"] = .object(renewal)
        }
        return info
    }
}
