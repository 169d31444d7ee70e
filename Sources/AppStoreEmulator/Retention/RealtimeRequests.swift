import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import SubscriptionLifecycle
import Synchronization

/// One call of a developer's realtime URL (Get Retention Message): what was sent and how it went.
struct RealtimeExchange: Sendable {
    var url: String
    var result: SendAttemptResult
    var status: Int?
    var milliseconds: Double
    /// The answer's body when it was an HTTP 200 with a JSON object.
    var answer: JSONObject?
}

/// What the App Store makes of a realtime answer: exactly one of a message, an alternate product or a
/// promotional offer (Apple ignores `advancedCommerceInfo` for other subscriptions), each naming a message.
enum RetentionAnswer: Sendable, Hashable {
    case message(String)
    case alternateProduct(message: String, productID: String, billingPlanType: String?)
    /// V1's object names its product and may carry the app account token it was signed with; V2's JWS holds both.
    case promotionalOffer(message: String, OfferRequest, productID: String? = nil, appAccountToken: String? = nil)

    /// Reads an answer; an error says why it is not one (then the default message shows).
    static func parse(_ body: JSONObject) throws -> RetentionAnswer {
        let options = ["message", "alternateProduct", "promotionalOffer", "advancedCommerceInfo"]
        let present = options.filter { body[$0] != nil && body[$0] != .null }
        guard present.count == 1, let which = present.first, let object = body[which]?.objectValue else {
            throw EmulatorError.invalid("the answer must hold exactly one of \(options.joined(separator: ", "))")
        }
        guard let raw = object["messageIdentifier"]?.stringValue else {
            throw EmulatorError.invalid("\(which) needs a messageIdentifier")
        }
        let message = try RetentionID.parse(raw, what: "message identifier")
        switch which {
        case "message": return .message(message)
        case "alternateProduct":
            guard let product = object["productId"]?.stringValue else {
                throw EmulatorError.invalid("alternateProduct needs a productId")
            }
            return .alternateProduct(
                message: message, productID: product, billingPlanType: object["billingPlanType"]?.stringValue)
        case "promotionalOffer":
            if let token = object["promotionalOfferSignatureV2"]?.stringValue {
                return .promotionalOffer(message: message, .promotionalJWS(token))
            }
            guard let v1 = object["promotionalOfferSignatureV1"]?.objectValue,
                let signature = v1["encodedSignature"]?.stringValue, let keyID = v1["keyId"]?.stringValue,
                let nonce = v1["nonce"]?.stringValue, let timestamp = v1["timestamp"]?.int64Value,
                let offerID = v1["offerIdentifier"]?.stringValue, let productID = v1["productId"]?.stringValue
            else {
                throw EmulatorError.invalid(
                    "promotionalOffer needs promotionalOfferSignatureV2, or promotionalOfferSignatureV1 with "
                        + "encodedSignature, productId, keyId, nonce, timestamp and offerIdentifier")
            }
            // null is as absent, as elsewhere in the answer.
            let token = v1["appAccountToken"].flatMap { $0 == .null ? nil : $0 }
            guard token == nil || token?.stringValue != nil else {
                throw EmulatorError.invalid("promotionalOfferSignatureV1's appAccountToken is a UUID string")
            }
            return .promotionalOffer(
                message: message,
                .promotional(offerID: offerID, keyID: keyID, nonce: nonce, timestamp: timestamp, signature: signature),
                productID: productID, appAccountToken: token?.stringValue)
        default:
            throw EmulatorError.invalid("advancedCommerceInfo applies to Advanced Commerce subscriptions only")
        }
    }

    var messageID: String {
        switch self {
        case .message(let id), .alternateProduct(let id, _, _), .promotionalOffer(let id, _, _, _): id
        }
    }

    var kind: String {
        switch self {
        case .message: "message"
        case .alternateProduct: "alternateProduct"
        case .promotionalOffer: "promotionalOffer"
        }
    }
}

extension ServerAPIService {
    /// The signed request of Get Retention Message (`RealtimeRequestBody`'s decoded payload).
    func realtimePayload(
        original: TransactionID, productID: ProductID, bundle: BundleID, environment: Environment, locale: String,
        requestIdentifier: String, signedDate: Date
    ) -> JSONObject {
        [
            "originalTransactionId": .string(original.rawValue),
            "appAppleId": .integer(appStore.apps[bundle.rawValue]?.appAppleID ?? 0),
            "productId": .string(productID.rawValue), "userLocale": .string(locale),
            "requestIdentifier": .string(requestIdentifier),
            "signedDate": .integer(EpochMilliseconds.milliseconds(signedDate)),
            "environment": .string(environment.rawValue),
        ]
    }

    /// Posts `{"signedPayload"}` to `url` and waits at most Apple's time limit.
    func sendRealtime(_ payload: JSONObject, to url: String) async -> RealtimeExchange {
        let body: [UInt8]
        do {
            body = Array(JSONWriter.string(.object(["signedPayload": .string(try appStore.signer.sign(payload))])).utf8)
        } catch {
            return RealtimeExchange(url: url, result: .other, status: nil, milliseconds: 0, answer: nil)
        }
        let client = HTTPClient(
            timeout: appStore.realtimeTimeout, connectTimeout: appStore.realtimeTimeout,
            maxResponseBytes: RetentionLimits.realtimeAnswerBytes)
        let clock = ContinuousClock()
        let start = clock.now
        let outcome: Result<HTTPClient.Response, HTTPClientError>
        do {
            outcome = .success(
                try await client.send("POST", url, headers: [("Content-Type", "application/json")], body: body))
        } catch {
            outcome = .failure(error)
        }
        let elapsed = start.duration(to: clock.now)
        let milliseconds = elapsed.milliseconds
        switch outcome {
        case .success(let response):
            guard response.status == 200 else {
                return RealtimeExchange(
                    url: url, result: .unsuccessfulHTTPResponseCode, status: response.status,
                    milliseconds: milliseconds, answer: nil)
            }
            guard let answer = (try? JSONParser.parse(response.body))?.objectValue else {
                return RealtimeExchange(
                    url: url, result: .invalidResponse, status: 200, milliseconds: milliseconds, answer: nil)
            }
            return RealtimeExchange(url: url, result: .success, status: 200, milliseconds: milliseconds, answer: answer)
        case .failure(let error):
            let result: SendAttemptResult =
                switch error.code {
                case .timedOut: .timedOut
                case .connectFailed, .resolveFailed: .socketIssue
                case .tlsFailed: .tlsIssue
                case .responseTooLarge: .invalidResponse
                default: .other
                }
            return RealtimeExchange(url: url, result: result, status: nil, milliseconds: milliseconds, answer: nil)
        }
    }

    // MARK: - A customer on the cancellation page

    /// A customer opens the subscription's page where they can cancel: the App Store asks the app's realtime
    /// URL what to show, shows it (or the default message of the product and locale when the answer fails or
    /// is not valid), and, when the customer takes it (`accept`), switches to the alternate product or
    /// redeems the promotional offer as a retention offer (`offerType` 5) from the next renewal.
    func retentionRequest(transactionID: String, locale rawLocale: String?, accept: Bool) async throws -> JSONObject {
        try await appStore.catchUp()
        let locale = try RetentionLocale.parse(rawLocale ?? "en-US")
        let now = appStore.now
        let requestIdentifier = appStore.newUUID().lowercased()
        let subject = try await appStore.storage.read { store in
            guard let stored = try store.transaction(TransactionID(transactionID)),
                let subscription = try store.subscription(stored.transaction.originalID),
                let account = try store.account(subscription.accountID)
            else { throw EmulatorError.notFound("no subscription with transaction \(transactionID)") }
            guard subscription.state.status == .active || subscription.state.isInBillingRetry else {
                throw EmulatorError.invalid(
                    "subscription \(subscription.originalTransactionID) has ended: there is nothing to cancel")
            }
            let url = try self.realtimeURL(
                bundle: subscription.bundleID, environment: account.environment, in: store)
            return (subscription, account, url)
        }
        let (subscription, account, url) = subject
        let payload = realtimePayload(
            original: subscription.originalTransactionID, productID: subscription.state.productID,
            bundle: subscription.bundleID, environment: account.environment, locale: locale,
            requestIdentifier: requestIdentifier, signedDate: now)
        let exchange: RealtimeExchange? = if let url { await sendRealtime(payload, to: url) } else { nil }
        let answer: Result<RetentionAnswer, EmulatorError>? = exchange.map { exchange in
            guard exchange.result == .success, let body = exchange.answer else {
                return .failure(EmulatorError.invalid("the realtime URL did not answer: \(exchange.result.rawValue)"))
            }
            do { return .success(try RetentionAnswer.parse(body)) } catch let error as EmulatorError {
                return .failure(error)
            } catch { return .failure(EmulatorError.invalid("\(error)")) }
        }
        let current = appStore.now
        return try await appStore.storage.write { store in
            try self.settleRetention(
                subscriptionID: subscription.originalTransactionID, account: account, payload: payload,
                exchange: exchange, answer: answer, locale: locale, accept: accept, in: store, now: current)
        }
    }

    /// Checks the answer against what the app configured, applies it, records the request; the verb's answer.
    private func settleRetention(
        subscriptionID: TransactionID, account: Account, payload: JSONObject, exchange: RealtimeExchange?,
        answer: Result<RetentionAnswer, EmulatorError>?, locale: String, accept: Bool, in store: any EmulatorStore,
        now: Date
    ) throws -> JSONObject {
        guard let subscription = try store.subscription(subscriptionID) else {
            throw EmulatorError.notFound("no subscription \(subscriptionID)")
        }
        let bundle = subscription.bundleID
        let environment = account.environment
        func approved(_ messageID: String, imagesAllowed: Bool) throws -> Bool {
            guard
                let message = try store.retentionItem(
                    .message, bundle: bundle, environment: environment, id: messageID),
                message.state == RetentionReviewState.approved.rawValue
            else { return false }
            let content = try? RetentionMessage(json: message.object)
            for imageID in content?.imageIDs ?? [] {
                guard imagesAllowed,
                    try store.retentionItem(.image, bundle: bundle, environment: environment, id: imageID)?.state
                        == RetentionReviewState.approved.rawValue
                else { return false }
            }
            return true
        }
        var problem: String?
        var shown: JSONObject = [:]
        var outcome = "none"
        var applied: String?
        var event: LifecycleEvent?
        if case .success(let parsed) = answer {
            do {
                // Promotional-offer and switch-plan messages carry no image.
                guard
                    try approved(
                        parsed.messageID, imagesAllowed: { if case .message = parsed { true } else { false } }())
                else {
                    throw EmulatorError.invalid("message \(parsed.messageID) is not an approved message of the app")
                }
                switch parsed {
                case .message: break
                case .alternateProduct(_, let productID, let plan):
                    var billingPlan: BillingPlanType?
                    if let plan {
                        guard let parsed = BillingPlanType(rawValue: plan) else {
                            throw EmulatorError.invalid("billingPlanType \(plan) is not BILLED_UPFRONT or MONTHLY")
                        }
                        billingPlan = parsed
                    }
                    // Another product of the group, or the same product on another plan (API 1.5).
                    let current = subscription.state.productID.rawValue
                    guard let entry = appStore.catalog.entry(productID), let group = entry.subscription?.groupID,
                        group == appStore.catalog.entry(current)?.subscription?.groupID,
                        productID != current || billingPlan != nil
                    else {
                        throw EmulatorError.invalid(
                            "alternate product \(productID) is neither another product of the subscription's group "
                                + "nor another plan of its own")
                    }
                    if billingPlan == .monthly, entry.monthlyPlan == nil {
                        throw EmulatorError.invalid("\(productID) is not sold with a monthly plan")
                    }
                    shown["productId"] = .string(productID)
                    if let plan { shown["billingPlanType"] = .string(plan) }
                    event =
                        billingPlan.map { .changePlan(ProductID(productID), $0) }
                        ?? .changeProduct(ProductID(productID))
                case .promotionalOffer(_, let request, let namedProduct, let namedToken):
                    let productID: String
                    // The token the offer was signed with: V1's own (Apple signs an empty one when none is
                    // given); the device flow's purchase token does not apply here.
                    var signedToken: String?
                    switch request {
                    case .promotionalJWS(let token):
                        let claims = (try? CompactJWS(token))?.payload
                        productID = claims?["productId"]?.stringValue ?? subscription.state.productID.rawValue
                        // Apple requires the subscription's original transaction id in a retention offer's JWS.
                        guard claims?["transactionId"]?.stringValue == subscription.originalTransactionID.rawValue
                        else {
                            throw EmulatorError.invalid(
                                "the promotional offer JWS needs transactionId "
                                    + "\(subscription.originalTransactionID) (the request's originalTransactionId)")
                        }
                        signedToken = nil
                    default:
                        productID = namedProduct ?? subscription.state.productID.rawValue
                        signedToken = namedToken ?? ""
                    }
                    guard let entry = appStore.catalog.entry(productID), entry.subscription != nil else {
                        throw EmulatorError.invalid(
                            "the promotional offer's product \(productID) is not a subscription")
                    }
                    guard
                        var terms = try appStore.offerTerms(
                            request, entry: entry, standing: .existing, bundleID: bundle.rawValue,
                            appAccountToken: signedToken, in: store)
                    else { throw EmulatorError.invalid("the promotional offer has no terms") }
                    terms.offer.type = .retention
                    shown["productId"] = .string(productID)
                    shown["offerIdentifier"] = terms.offer.identifier.map(JSONValue.string) ?? .null
                    event = .redeemOffer(ProductID(productID), terms)
                }
                shown["messageIdentifier"] = .string(parsed.messageID)
                outcome = parsed.kind
            } catch let error as EmulatorError {
                problem = error.message
                event = nil
                shown = [:]
            }
        } else if case .failure(let error) = answer {
            problem = error.message
        } else {
            problem = "no realtime URL is configured for \(bundle) in \(environment.rawValue)"
        }
        if outcome == "none" {
            // The default message of the product and locale, if one is configured and still approved.
            let key = subscription.state.productID.rawValue + "/" + locale
            if let item = try store.retentionItem(.defaultMessage, bundle: bundle, environment: environment, id: key),
                let messageID = item.object["messageIdentifier"]?.stringValue,
                try approved(messageID, imagesAllowed: true)
            {
                outcome = "defaultMessage"
                shown = ["messageIdentifier": .string(messageID)]
            }
        }
        var subscriptionState = subscription.state
        if accept, let event {
            // The lifecycle refuses before changing anything (a product no longer for sale, say): shown, not taken.
            do {
                let result = try appStore.subscriptionVerb(
                    event, transactionID: subscription.latestTransactionID.rawValue, in: store, now: now)
                subscriptionState = result.subscription ?? subscriptionState
                applied = outcome
            } catch let error as EmulatorError {
                problem = "shown, but it could not be taken: \(error.message)"
            }
        }
        var record: JSONObject = [
            "requestIdentifier": payload["requestIdentifier"] ?? .null, "request": .object(payload),
            "outcome": .string(outcome), "shown": .object(shown), "accepted": .bool(applied != nil),
        ]
        if let exchange {
            record["url"] = .string(exchange.url)
            record["result"] = .string(exchange.result.rawValue)
            record["status"] = exchange.status.map { .integer(Int64($0)) } ?? .null
            record["milliseconds"] = .double((exchange.milliseconds * 10).rounded() / 10)
            record["withinLimit"] = .bool(exchange.result == .success)
            if let body = exchange.answer { record["answer"] = .object(body) }
        }
        if let problem { record["problem"] = .string(problem) }
        try store.insert(
            RetentionRequestRecord(
                requestIdentifier: payload["requestIdentifier"]?.stringValue ?? "",
                originalTransactionID: subscription.originalTransactionID, bundleID: bundle,
                environment: environment, date: now, document: JSONWriter.string(.object(record))))
        record["date"] = .integer(EpochMilliseconds.milliseconds(now))
        record["subscription"] = .object(EmulatorRoutes.render(subscriptionState))
        return record
    }

    /// The latest realtime requests about a subscription, oldest first.
    func retentionRequests(transactionID: String) async throws -> [JSONObject] {
        try await appStore.storage.read { store in
            guard let stored = try store.transaction(TransactionID(transactionID)) else {
                throw EmulatorError.notFound("no transaction \(transactionID)")
            }
            return try store.retentionRequests(
                original: stored.transaction.originalID, limit: RetentionLimits.requestsShown
            )
            .map { record in
                var object = record.object
                object["date"] = .integer(EpochMilliseconds.milliseconds(record.date))
                return object
            }
        }
    }

    // MARK: - App Review

    /// App Review's decision on an uploaded message or image (production uploads wait for it).
    func review(_ kind: RetentionItem.Kind, id rawID: String, bundle: String, environment: Environment, approved: Bool)
        async throws -> JSONObject
    {
        guard appStore.apps[bundle] != nil else { throw EmulatorError.notFound("no app \(bundle)") }
        let id = try RetentionID.parse(rawID, invalid: .generalBadRequest, what: "identifier")
        return try await appStore.storage.write { store in
            guard var item = try store.retentionItem(kind, bundle: BundleID(bundle), environment: environment, id: id)
            else { throw EmulatorError.notFound("no \(kind.rawValue) \(id) for \(bundle) in \(environment.rawValue)") }
            item.state = (approved ? RetentionReviewState.approved : .rejected).rawValue
            try store.save(item)
            return [
                "id": .string(id), "kind": .string(kind.rawValue), "state": .string(item.state),
                "environment": .string(environment.rawValue),
            ]
        }
    }
}
