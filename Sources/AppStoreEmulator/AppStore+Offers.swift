import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperJSON
import SubscriptionLifecycle

/// An offer a payment asks for (the payments route's `offer`, `offerCode` or `winBackOfferId`). The
/// introductory offer needs no asking: an eligible customer gets it.
public enum OfferRequest: Sendable, Hashable {
    /// A promotional offer signed by the developer's server with an In-App Purchase key, V1
    /// (`Product.PurchaseOption.promotionalOffer(offerID:keyID:nonce:signature:timestamp:)`).
    case promotional(offerID: String, keyID: String, nonce: String, timestamp: Int64, signature: String)
    /// A promotional offer signed as a V2 JWS (`aud` `promotional-offer`).
    case promotionalJWS(String)
    /// An offer code: the code offer's reference name (any case) or internal id.
    case code(String)
    case winBack(String)
}

extension EmulatorError {
    /// An offer the App Store refuses, with StoreKit's name for why (`invalidOfferIdentifier`,
    /// `invalidSignature`, `missingOfferParams`, `ineligibleForOffer`).
    static func offer(_ code: String, _ what: String) -> EmulatorError {
        EmulatorError(status: 400, code: code, message: what)
    }
}

/// Offers: the terms of each kind from the catalogue, who is eligible, and promotional-offer signatures
/// checked against the keys registered for the app (`offerKeys` in `--config`, and the catalogue's
/// `subscriptionOffersKeyPair`).
extension AppStore {
    /// How long a promotional-offer signature is accepted after its timestamp (and before it).
    static let offerSignatureLifetime: TimeInterval = 24 * 3600

    /// Where the customer stands in a subscription group, for offer eligibility.
    enum GroupStanding {
        /// Never subscribed in the group.
        case new
        /// Subscribed now (or in billing retry).
        case existing
        /// Subscribed before; it ended.
        case expired

        init(_ subscription: StoredSubscription?) {
            guard let subscription else {
                self = .new
                return
            }
            self =
                subscription.state.status == .active || subscription.state.isInBillingRetry ? .existing : .expired
        }

        var name: String {
            switch self {
            case .new: "new"
            case .existing: "existing"
            case .expired: "expired"
            }
        }
    }

    /// The terms of an offer in the catalogue.
    static func terms(_ offer: SubscriptionOffer, type: OfferType, identifier: String?) -> OfferTerms? {
        guard let period = offer.period else { return nil }
        let discount: OfferDiscountType? = offer.offerDiscountType.flatMap(OfferDiscountType.init(rawValue:))
        return OfferTerms(
            offer: Offer(type: type, identifier: identifier, discountType: discount, period: period.description),
            period: period, periods: discount == .payAsYouGo ? offer.numberOfPeriods : 1)
    }

    /// The catalogue's offer behind a redeemed `offer` of `productID`.
    func catalogOffer(_ offer: Offer, productID: ProductID) -> SubscriptionOffer? {
        guard let subscription = catalog.entry(productID.rawValue)?.subscription else { return nil }
        switch offer.type {
        case .introductory: return subscription.introductoryOffer
        case .promotional, .retention:
            return subscription.promotionalOffers.first { $0.offerID == offer.identifier }
        case .offerCode:
            return subscription.codeOffers.first {
                ($0.referenceName ?? $0.internalID) == offer.identifier
            }
        case .winBack: return subscription.winBackOffers.first { Self.winBackID($0) == offer.identifier }
        }
    }

    static func winBackID(_ offer: SubscriptionOffer) -> String? {
        offer.offerID ?? offer.referenceName ?? offer.internalID
    }

    /// What a discounted period of `offer` costs: the offer's price, nothing for a free trial.
    func price(of offer: Offer, productID: ProductID) -> Money? {
        if offer.discountType == .freeTrial { return Money(milliunits: 0, currency: "USD") }
        return catalogOffer(offer, productID: productID)?.displayPrice.flatMap { Money(decimal: $0, currency: "USD") }
            ?? listPrice(productID.rawValue)
    }

    /// The offer a purchase of `entry` gets: the one asked for, checked for eligibility (and signature), or
    /// else the introductory offer when the customer has never subscribed in the group.
    func offerTerms(
        _ request: OfferRequest?, entry: Catalog.Entry, standing: GroupStanding, bundleID: String,
        appAccountToken: String?, in store: any EmulatorStore
    ) throws -> OfferTerms? {
        guard let subscription = entry.subscription else {
            guard request == nil else {
                throw EmulatorError.offer(
                    "invalidOfferIdentifier",
                    "\(entry.productID) is not an auto-renewable subscription: it has no offers")
            }
            return nil
        }
        guard let request else {
            // Offers are per billing plan (Xcode 26.5's `billingPlanType` on an offer): one for the monthly
            // plan is not this purchase's, which is billed up front.
            guard standing == .new, let intro = subscription.introductoryOffer, Self.upfront(intro) else { return nil }
            return Self.terms(intro, type: .introductory, identifier: nil)
        }
        switch request {
        case .code(let code):
            guard
                let offer = subscription.codeOffers.first(where: {
                    $0.referenceName?.lowercased() == code.lowercased() || $0.internalID == code
                })
            else {
                throw EmulatorError.offer("invalidOfferIdentifier", "\(entry.productID) has no offer code '\(code)'")
            }
            guard offer.eligibility.contains(standing.name) else {
                throw EmulatorError.offer(
                    "ineligibleForOffer",
                    "offer code '\(code)' is for \(offer.eligibility.joined(separator: ", ")) subscribers; this customer is \(standing.name)"
                )
            }
            guard Self.upfront(offer) else {
                throw EmulatorError.offer("invalidOfferIdentifier", "offer code '\(code)' is for the monthly plan")
            }
            return try Self.required(
                Self.terms(offer, type: .offerCode, identifier: offer.referenceName ?? offer.internalID))
        case .winBack(let id):
            guard let offer = subscription.winBackOffers.first(where: { Self.winBackID($0) == id }) else {
                throw EmulatorError.offer("invalidOfferIdentifier", "\(entry.productID) has no win-back offer '\(id)'")
            }
            guard standing == .expired else {
                throw EmulatorError.offer(
                    "ineligibleForOffer", "win-back offers are for customers whose subscription in the group ended")
            }
            guard Self.upfront(offer) else {
                throw EmulatorError.offer("invalidOfferIdentifier", "win-back offer '\(id)' is for the monthly plan")
            }
            return try Self.required(Self.terms(offer, type: .winBack, identifier: id))
        case .promotional(let offerID, let keyID, let nonce, let timestamp, let signature):
            let offer = try promotionalOffer(offerID, in: subscription, entry: entry)
            let key = try offerKey(keyID, bundleID: bundleID)
            let message = [
                bundleID, keyID, entry.productID, offerID, (appAccountToken ?? "").lowercased(), nonce.lowercased(),
                String(timestamp),
            ].joined(separator: "\u{2063}")
            guard let der = Data(base64Encoded: signature),
                key.verify(signature: Array(der), message: Array(message.utf8), algorithm: .ecdsa(.sha256))
            else {
                throw EmulatorError.offer(
                    "invalidSignature", "the promotional offer's signature does not verify with key \(keyID)")
            }
            try checkFresh(EpochMilliseconds.date(timestamp) ?? .distantPast, nonce: nonce, in: store)
            return try Self.required(Self.terms(offer, type: .promotional, identifier: offerID))
        case .promotionalJWS(let token):
            let jws: CompactJWS
            do { jws = try CompactJWS(token) } catch {
                throw EmulatorError.offer("invalidSignature", "the promotional offer is not a JWS: \(error.reason)")
            }
            guard jws.header["alg"]?.stringValue == "ES256", let keyID = jws.header["kid"]?.stringValue else {
                throw EmulatorError.offer("invalidSignature", "the promotional offer JWS must be ES256 with a kid")
            }
            let key = try offerKey(keyID, bundleID: bundleID)
            guard key.verify(rawECDSASignature: jws.signature, message: jws.signingInput, digest: .sha256) else {
                throw EmulatorError.offer(
                    "invalidSignature", "the promotional offer JWS does not verify with key \(keyID)")
            }
            let claims = jws.payload
            guard claims["aud"]?.stringValue == "promotional-offer", claims["bid"]?.stringValue == bundleID,
                claims["productId"]?.stringValue == entry.productID,
                let offerID = claims["offerIdentifier"]?.stringValue, let nonce = claims["nonce"]?.stringValue,
                let issued = claims["iat"]?.int64Value
            else {
                throw EmulatorError.offer(
                    "missingOfferParams",
                    "the promotional offer JWS needs aud promotional-offer, bid \(bundleID), productId "
                        + "\(entry.productID), offerIdentifier, nonce and iat")
            }
            let offer = try promotionalOffer(offerID, in: subscription, entry: entry)
            try checkFresh(Date(timeIntervalSince1970: Double(issued)), nonce: nonce, in: store)
            return try Self.required(Self.terms(offer, type: .promotional, identifier: offerID))
        }
    }

    /// Whether an offer is for a purchase billed up front (every offer but one marked for the monthly plan).
    static func upfront(_ offer: SubscriptionOffer) -> Bool { offer.json["billingPlanType"]?.stringValue != "MONTHLY" }

    static func required(_ terms: OfferTerms?) throws -> OfferTerms {
        guard let terms else {
            throw EmulatorError.offer("invalidOfferIdentifier", "the offer has no subscriptionPeriod in the catalogue")
        }
        return terms
    }

    func promotionalOffer(_ offerID: String, in subscription: Subscription, entry: Catalog.Entry) throws
        -> SubscriptionOffer
    {
        guard let offer = subscription.promotionalOffers.first(where: { $0.offerID == offerID && Self.upfront($0) })
        else {
            throw EmulatorError.offer(
                "invalidOfferIdentifier", "\(entry.productID) has no promotional offer '\(offerID)' billed up front")
        }
        return offer
    }

    func offerKey(_ keyID: String, bundleID: String) throws -> PublicKey {
        guard let key = offerKeys[bundleID]?[keyID] else {
            throw EmulatorError.offer(
                "invalidSignature", "no offer key '\(keyID)' is registered for \(bundleID) (offerKeys in --config)")
        }
        return key
    }

    /// A signature is good for 24 hours around its time (the real one: the developer's server signs with
    /// the wall clock) and its nonce for one purchase.
    func checkFresh(_ signed: Date, nonce: String, in store: any EmulatorStore) throws {
        guard abs(signed.timeIntervalSince(realNow())) <= Self.offerSignatureLifetime else {
            throw EmulatorError.offer("invalidSignature", "the promotional offer's signature is older than 24 hours")
        }
        guard UUID(uuidString: nonce) != nil else {
            throw EmulatorError.offer("missingOfferParams", "the promotional offer's nonce must be a UUID")
        }
        guard try store.useOfferNonce(nonce.lowercased()) else {
            throw EmulatorError.offer("invalidSignature", "the promotional offer's nonce was used already")
        }
    }

    /// The public keys that sign promotional offers, per app: each app's `offerKeys` (PEM public or
    /// private keys by key id) and every catalogue's `subscriptionOffersKeyPair`.
    static func loadOfferKeys(apps: [AppConfiguration], catalogs: [StoreKitConfiguration]) throws -> [String: [String:
        PublicKey]]
    {
        var shared: [String: PublicKey] = [:]
        for catalog in catalogs {
            guard let pair = catalog.offersKeyPair else { continue }
            shared[pair.id] = try publicKey(pair.privateKey, name: "subscriptionOffersKeyPair \(pair.id)")
        }
        var result: [String: [String: PublicKey]] = [:]
        for app in apps {
            var keys = shared
            for (id, text) in app.offerKeys {
                keys[id] = try publicKey(text, name: "offer key \(id) of \(app.bundleID)")
            }
            result[app.bundleID] = keys
        }
        return result
    }

    /// A P-256 key from PEM (public or PKCS#8 private) or bare base64 PKCS#8.
    static func publicKey(_ text: String, name: String) throws -> PublicKey {
        if text.contains("BEGIN PUBLIC KEY"), let key = try? PublicKey(pem: text), key.isEC { return key }
        if text.contains("PRIVATE KEY"), let key = try? PrivateKey(pem: text), key.isEC { return try key.publicKey }
        let bare = text.filter { !$0.isWhitespace }
        if let der = Data(base64Encoded: bare), let key = try? PrivateKey(pkcs8DER: Array(der)), key.isEC {
            return try key.publicKey
        }
        throw EmulatorError.configuration("\(name) is not a P-256 key (PEM public or private key, or base64 PKCS#8)")
    }
}
