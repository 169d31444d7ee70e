import AppStoreSignedData
import Foundation
import StoreModel
public import StorekeeperCrypto
public import StorekeeperJSON

/// Retention Messaging on the purchase server: the rules that answer Apple's realtime request (a customer on
/// the page where they can cancel), first match wins. Config, per app:
///
///     "retention": {
///       "offerKey": {"keyId": "…", "issuerId": "…", "privateKeyFile": "SubscriptionKey_….p8"},
///       "rules": [
///         {"name": "in billing retry", "when": {"billingRetry": true}, "message": "<uuid>"},
///         {"name": "new monthly", "when": {"productIds": ["…monthly"], "maxTenureDays": 60},
///          "alternateProduct": {"productId": "…yearly", "message": "<uuid>", "billingPlanType": "MONTHLY"}},
///         {"name": "loyal", "when": {"minTenureDays": 180, "maxPastOffers": 0},
///          "promotionalOffer": {"offerId": "…", "message": "<uuid>"}}
///       ]
///     }
///
/// With no rule matching, the server answers 204 and Apple shows the app's default message.
public struct RetentionSettings: Sendable {
    /// The In-App Purchase key that signs promotional offers (V2 signatures).
    public struct OfferKey: Sendable {
        public var keyID: String
        public var issuerID: String
        public var key: PrivateKey

        public init(keyID: String, issuerID: String, key: PrivateKey) {
            self.keyID = keyID
            self.issuerID = issuerID
            self.key = key
        }
    }

    /// What a rule looks at; every condition given must hold.
    public struct Conditions: Sendable, Hashable {
        public var productIDs: Set<String> = []
        public var minTenureDays: Double?
        public var maxTenureDays: Double?
        public var billingRetry: Bool?
        public var maxPastOffers: Int?
        public var billingPlanType: String?

        public init() {}

        public func hold(for subject: RetentionSubject) -> Bool {
            if !productIDs.isEmpty, !productIDs.contains(subject.productID) { return false }
            if let minTenureDays, subject.tenureDays < minTenureDays { return false }
            if let maxTenureDays, subject.tenureDays > maxTenureDays { return false }
            if let billingRetry, subject.inBillingRetry != billingRetry { return false }
            if let maxPastOffers, subject.pastOffers > maxPastOffers { return false }
            if let billingPlanType, subject.billingPlanType != billingPlanType { return false }
            return true
        }
    }

    public enum Answer: Sendable, Hashable {
        case message(String)
        case alternateProduct(message: String, productID: String, billingPlanType: String?)
        case promotionalOffer(message: String, offerID: String)

        /// Apple's name of the answer's option.
        public var kind: String {
            switch self {
            case .message: "message"
            case .alternateProduct: "alternateProduct"
            case .promotionalOffer: "promotionalOffer"
            }
        }
    }

    public struct Rule: Sendable, Hashable {
        public var name: String
        public var conditions: Conditions
        public var answer: Answer

        public init(name: String, conditions: Conditions = Conditions(), answer: Answer) {
            self.name = name
            self.conditions = conditions
            self.answer = answer
        }
    }

    public var rules: [Rule]
    public var offerKey: OfferKey?

    /// The first rule whose conditions hold.
    public func match(_ subject: RetentionSubject) -> Rule? { rules.first { $0.conditions.hold(for: subject) } }

    /// Reads the configuration's `"retention"` member; errors name the app and the member.
    init(json: JSONValue, bundleID: String, file: (String) throws -> [UInt8]) throws {
        func refuse(_ what: String) -> PurchaseServerError {
            PurchaseServerError.configuration("\(bundleID): retention \(what)")
        }
        guard let object = json.objectValue, object.keys.allSatisfy(["rules", "offerKey"].contains) else {
            throw refuse("is {\"rules\": [...], \"offerKey\"?: {...}}")
        }
        var signingKey: OfferKey?
        if let key = object["offerKey"] {
            guard let keyID = key["keyId"]?.stringValue, let issuerID = key["issuerId"]?.stringValue,
                let path = key["privateKeyFile"]?.stringValue
            else { throw refuse("offerKey needs keyId, issuerId and privateKeyFile") }
            let pem = try file(path)
            guard let parsed = try? PrivateKey(pem: String(decoding: pem, as: UTF8.self)) else {
                throw refuse("offerKey: '\(path)' is not a PEM private key")
            }
            signingKey = OfferKey(keyID: keyID, issuerID: issuerID, key: parsed)
        }
        let hasKey = signingKey != nil
        func message(_ value: JSONValue?, _ where_: String) throws -> String {
            guard let text = value?.stringValue, let uuid = UUID(uuidString: text) else {
                throw refuse("\(where_) needs a message: the UUID of an uploaded message")
            }
            return uuid.uuidString.lowercased()
        }
        guard let items = object["rules"]?.arrayValue, items.count <= 1_000 else {
            throw refuse("rules is an array (at most 1,000)")
        }
        rules = try items.enumerated().map { index, item in
            let name = item["name"]?.stringValue ?? "rule \(index + 1)"
            var conditions = Conditions()
            if let when = item["when"] {
                guard let given = when.objectValue else { throw refuse("\(name): when is an object") }
                let known = [
                    "productIds", "minTenureDays", "maxTenureDays", "billingRetry", "maxPastOffers", "billingPlanType",
                ]
                if let unknown = given.keys.first(where: { !known.contains($0) }) {
                    throw refuse("\(name): unknown condition '\(unknown)' (known: \(known.joined(separator: ", ")))")
                }
                conditions.productIDs = Set(given["productIds"]?.arrayValue?.compactMap(\.stringValue) ?? [])
                conditions.minTenureDays = given["minTenureDays"]?.doubleValue
                conditions.maxTenureDays = given["maxTenureDays"]?.doubleValue
                conditions.billingRetry = given["billingRetry"]?.boolValue
                conditions.maxPastOffers = given["maxPastOffers"]?.int64Value.map { Int(clamping: $0) }
                conditions.billingPlanType = given["billingPlanType"]?.stringValue
            }
            let options = ["message", "alternateProduct", "promotionalOffer"].filter { item[$0] != nil }
            guard options.count == 1 else {
                throw refuse("\(name): give exactly one of message, alternateProduct, promotionalOffer")
            }
            let answer: Answer
            switch options[0] {
            case "message": answer = .message(try message(item["message"], name))
            case "alternateProduct":
                guard let product = item["alternateProduct"]?["productId"]?.stringValue else {
                    throw refuse("\(name): alternateProduct needs a productId")
                }
                let plan = item["alternateProduct"]?["billingPlanType"]?.stringValue
                if let plan, BillingPlanType(rawValue: plan) == nil {
                    throw refuse("\(name): billingPlanType is BILLED_UPFRONT or MONTHLY")
                }
                answer = .alternateProduct(
                    message: try message(item["alternateProduct"]?["message"], name), productID: product,
                    billingPlanType: plan)
            default:
                guard let offer = item["promotionalOffer"]?["offerId"]?.stringValue else {
                    throw refuse("\(name): promotionalOffer needs an offerId")
                }
                guard hasKey else { throw refuse("\(name): a promotionalOffer needs the offerKey to sign it") }
                answer = .promotionalOffer(
                    message: try message(item["promotionalOffer"]?["message"], name), offerID: offer)
            }
            return Rule(name: name, conditions: conditions, answer: answer)
        }
        offerKey = signingKey
    }

    public init(rules: [Rule], offerKey: OfferKey? = nil) {
        self.rules = rules
        self.offerKey = offerKey
    }
}

/// What the rules see of the subscriber the request is about.
public struct RetentionSubject: Sendable, Hashable {
    public var productID: String
    /// Days since the subscription's first purchase.
    public var tenureDays: Double
    public var inBillingRetry: Bool
    /// Offers redeemed in the subscription (promotional, offer codes, win-back, retention) and promotional
    /// offers answered to earlier requests.
    public var pastOffers: Int
    public var billingPlanType: String?

    public init(
        productID: String, tenureDays: Double, inBillingRetry: Bool, pastOffers: Int, billingPlanType: String? = nil
    ) {
        self.productID = productID
        self.tenureDays = tenureDays
        self.inBillingRetry = inBillingRetry
        self.pastOffers = pastOffers
        self.billingPlanType = billingPlanType
    }
}

/// What `POST /v1/apple/retention/{bundleId}` answers: Apple's `RealtimeResponseBody`, or nothing (204).
public struct RetentionReply: Sendable {
    public var body: JSONObject?
    public var answer: RetentionAnswer
}

extension PurchaseServer {
    /// A cancellation this long after a retention answer counts against it (not a save).
    static let retentionSaveWindow: TimeInterval = 86_400

    /// Answers Apple's realtime request: verified like a notification, the subscriber's state read, the
    /// first matching rule's answer (a promotional offer signed here), and the request and answer recorded as
    /// a subscriber event before the answer goes back.
    public func answerRetention(bundleID: String, body: [UInt8]) async throws -> RetentionReply {
        let app = try app(bundleID)
        guard let object = (try? JSONParser.parse(body))?.objectValue,
            let signed = object["signedPayload"]?.stringValue
        else { throw PurchaseServerError.invalid("the body is not {\"signedPayload\": …}") }
        let result = app.signedData.verify(signed, as: .realtimeRequest, now: now())
        metrics.count("storekeeper_verifications_total", ["kind": "retention", "outcome": result.status.rawValue])
        guard result.isOK, let payload = result.payload else {
            throw PurchaseServerError.verification(
                "the retention request did not verify: \(result.status.rawValue) (\(result.reason ?? ""))"
                    + Self.trustHint(result.status))
        }
        let request = RealtimeRequest(json: payload)
        guard let original = request.originalTransactionID, let requestID = request.requestIdentifier,
            let environment = request.environment?.known
        else {
            throw PurchaseServerError.invalid(
                "the retention request has no originalTransactionId, requestIdentifier or environment")
        }
        guard app.settings.environments.contains(environment) else {
            throw PurchaseServerError.invalid("requests from \(environment.rawValue) are not accepted for \(bundleID)")
        }
        // Apple: answer no request whose appAppleId is not the app's (the sandbox may leave it out).
        if let expected = app.settings.appAppleID,
            request.appAppleID.map({ $0 != expected }) ?? (environment == .production)
        {
            throw PurchaseServerError.verification("the retention request is for another app (appAppleId)")
        }
        let originalID = TransactionID(original)
        let current = now()
        let (subscription, purchases, earlier) = try await storage.read { store in
            (
                try store.subscription(originalID), try store.purchases(original: originalID),
                try store.retentionAnswers(original: originalID, limit: 100)
            )
        }
        let first = purchases.map(\.purchaseDate).min() ?? current
        let subject = RetentionSubject(
            productID: subscription?.productID.rawValue ?? request.productID ?? "",
            tenureDays: max(0, current.timeIntervalSince(first) / 86_400),
            inBillingRetry: subscription.map { [3, 4].contains($0.status) } ?? false,
            pastOffers: purchases.filter { [2, 3, 4, 5].contains($0.offerType ?? 0) }.count
                + earlier.filter { $0.answer == "promotionalOffer" }.count,
            billingPlanType: subscription?.billingPlanType)
        let rule = app.settings.retention?.match(subject)
        var reply: JSONObject?
        switch rule?.answer {
        case .message(let message)?:
            reply = ["message": .object(["messageIdentifier": .string(message)])]
        case .alternateProduct(let message, let product, let plan)?:
            var alternate: JSONObject = ["messageIdentifier": .string(message), "productId": .string(product)]
            if let plan { alternate["billingPlanType"] = .string(plan) }
            reply = ["alternateProduct": .object(alternate)]
        case .promotionalOffer(let message, let offer)?:
            guard let key = app.settings.retention?.offerKey else { break }
            // Apple checks the signature's time against its own clock: wall time, not a followed one.
            let signature = try OfferSignature.promotionalOfferV2(
                keyID: key.keyID, issuerID: key.issuerID, bundleID: bundleID, productID: subject.productID,
                offerID: offer, transactionID: original, nonce: UUID(), issuedAt: wallClock(), key: key.key)
            reply = [
                "promotionalOffer": .object([
                    "messageIdentifier": .string(message), "promotionalOfferSignatureV2": .string(signature),
                ])
            ]
        case nil: break
        }
        let answer = RetentionAnswer(
            requestIdentifier: requestID.uuidString.lowercased(), bundleID: BundleID(bundleID),
            originalTransactionID: originalID, environment: environment, date: request.signedDate ?? current,
            answer: reply == nil ? "none" : (rule?.answer.kind ?? "none"), rule: rule?.name)
        var details = ["answer": answer.answer, "requestIdentifier": answer.requestIdentifier]
        if let name = rule?.name { details["rule"] = name }
        if let locale = request.userLocale { details["userLocale"] = locale }
        let event = ServerEvent(
            id: "\(ServerEventType.retentionRequest):\(answer.requestIdentifier)", type: .retentionRequest,
            bundleID: BundleID(bundleID), appUserID: subscription?.owner, date: answer.date, environment: environment,
            productID: ProductID(subject.productID), originalTransactionID: originalID, source: .notification,
            details: details)
        let owner = subscription?.owner
        try await storage.write { store in
            // Under the subscription's lock, as a cancellation is applied: one recorded since the read above
            // (or told late) is found here, one recorded after finds this answer.
            try store.lock(original: originalID)
            guard try store.insert(answer) else { return }
            if let cancelled = try store.cancellation(
                original: originalID, from: answer.date,
                through: answer.date.addingTimeInterval(Self.retentionSaveWindow))
            {
                try store.markRetentionCancelled(
                    original: originalID, since: answer.date, until: answer.date, at: cancelled)
            }
            _ = try store.append(event)
        }
        if let owner { cache.invalidate(bundleID, owner) }
        metrics.count("storekeeper_retention_requests_total", ["answer": answer.answer])
        return RetentionReply(body: reply, answer: answer)
    }

    /// The save rate of each period: the share of retention requests not followed by a cancellation within
    /// a day, in percent (0 for a period without requests).
    public func retentionSaveRate(_ query: ChartQuery) async throws -> SubscriptionCharts.Result {
        _ = try app(query.bundleID)
        let answers = try await storage.read { store in
            try store.retentionAnswers(
                bundle: query.bundleID, from: query.from, to: query.to, limit: Self.maxChartRecords)
        }
        let buckets = SubscriptionCharts.periods(from: query.from, to: query.to, resolution: query.resolution)
        var requests = [Double](repeating: 0, count: buckets.count)
        var saved = [Double](repeating: 0, count: buckets.count)
        let (starts, end) = (buckets.map(\.0), buckets.last?.1 ?? query.from)
        for answer in answers where query.environment.map({ $0 == answer.environment }) ?? true {
            guard let index = SubscriptionCharts.period(of: answer.date, starts: starts, end: end) else { continue }
            requests[index] += 1
            if answer.cancelled == nil { saved[index] += 1 }
        }
        return SubscriptionCharts.Result(
            chart: .retentionSaveRate,
            points: buckets.indices.map { index in
                SubscriptionCharts.Point(
                    start: buckets[index].0, end: buckets[index].1,
                    value: requests[index] > 0 ? (saved[index] / requests[index] * 10_000).rounded() / 100 : 0)
            }, currency: try app(query.bundleID).settings.currency, otherCurrencies: 0)
    }
}
