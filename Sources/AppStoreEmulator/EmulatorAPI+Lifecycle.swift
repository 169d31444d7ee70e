import Foundation
import StoreModel
import StorekeeperHTTP
import StorekeeperJSON
import SubscriptionLifecycle

/// Apple's refund reasons as the refund verb takes them.
enum RefundReason: String, CaseIterable {
    case other = "OTHER"
    case appIssue = "APP_ISSUE"

    var revocationReason: RevocationReason { self == .appIssue ? .appIssue : .other }
}

extension EmulatorRoutes {
    /// The lifecycle's control verbs (the SKTestSession vocabulary), product-level changes and the
    /// notification settings and history.
    func addLifecycleRoutes(
        to router: inout Router, base: String,
        guarded: (@escaping @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse) -> Handler
    ) {
        let store = self.store
        /// The transaction and its subscription's state; with `latest`, the subscription names the transaction
        /// of its current period too (a refund of any other is of a past period).
        @Sendable func answer(
            _ result: (transaction: StoredTransaction, subscription: SubscriptionState?), latest: TransactionID? = nil
        ) async throws -> HTTPResponse {
            var object: JSONObject = [
                "transaction": .object(Self.render(.transaction(result.transaction, state: "purchased"))),
                "jwsRepresentation": .string(try await store.signedTransaction(result.transaction)),
            ]
            if let state = result.subscription {
                var subscription = Self.render(state)
                if let latest { subscription["latestTransactionId"] = .string(latest.rawValue) }
                object["subscription"] = .object(subscription)
            }
            return .json(.object(object))
        }
        let verbs: [(String, [String], @Sendable (RequestBody) throws -> LifecycleEvent)] = [
            ("expire", [], { _ in .expireNow }),
            ("renew", [], { _ in .forceRenewal }),
            ("resolve-issue", [], { _ in .billingRecovered }),
            (
                "auto-renew", ["enabled"],
                { body in
                    guard let enabled = try body.bool("enabled") else {
                        throw EmulatorError.invalid("member 'enabled' is required (true or false)")
                    }
                    return .setAutoRenew(enabled)
                }
            ),
            (
                "price-consent", ["consent"],
                { body in
                    guard let consent = try body.bool("consent") else {
                        throw EmulatorError.invalid("member 'consent' is required (true or false)")
                    }
                    return .priceConsent(consent)
                }
            ),
        ]
        for (verb, members, event) in verbs {
            router.post(
                base + "/transactions/{transaction}/" + verb,
                guarded { request, context in
                    let body = try RequestBody(request, allowed: Set(members))
                    return try await answer(
                        try await store.subscriptionVerb(
                            try event(body), transactionID: try context.parameter("transaction")))
                })
        }
        router.post(
            base + "/transactions/{transaction}/refund",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["reason"])
                let reason = try body.choice("reason", RefundReason.self) ?? .other
                return try await answer(
                    try await store.refund(
                        transactionID: try context.parameter("transaction"), reason: reason.revocationReason))
            })
        router.get(
            base + "/transactions/{transaction}",
            guarded { _, context in
                let (stored, subscription) = try await store.transactionAndSubscriptionRecord(
                    try context.parameter("transaction"))
                return try await answer((stored, subscription?.state), latest: subscription?.latestTransactionID)
            })
        router.post(
            base + "/transactions/{transaction}/retention-request",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["locale", "accept"])
                return .json(
                    .object(
                        try await store.serverAPI.retentionRequest(
                            transactionID: try context.parameter("transaction"),
                            locale: try body.string("locale", maxBytes: 35), accept: try body.bool("accept") ?? true)))
            })
        router.get(
            base + "/transactions/{transaction}/retention-requests",
            guarded { _, context in
                .json(
                    .object([
                        "requests": .array(
                            try await store.serverAPI.retentionRequests(
                                transactionID: try context.parameter("transaction")
                            ).map(JSONValue.object))
                    ]))
            })
        router.post(
            base + "/apps/{bundle}/retention/{kind}/{id}/review",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["approved", "environment"])
                guard let approved = try body.bool("approved") else {
                    throw EmulatorError.invalid("member 'approved' is required (true or false)")
                }
                let kinds: [String: RetentionItem.Kind] = ["messages": .message, "images": .image]
                guard let kind = kinds[try context.parameter("kind")] else {
                    throw EmulatorError.notFound("App Review looks at messages and images")
                }
                let environment = try body.choice("environment", Environment.self) ?? .production
                return .json(
                    .object(
                        try await store.serverAPI.review(
                            kind, id: try context.parameter("id"), bundle: try context.parameter("bundle"),
                            environment: environment, approved: approved)))
            })
        router.post(
            base + "/transactions/{transaction}/refund-reversal",
            guarded { request, context in
                _ = try RequestBody(request, allowed: [])
                return try await answer(
                    try await store.reverseRefund(transactionID: try context.parameter("transaction")))
            })
        router.post(
            base + "/transactions/{transaction}/refund-request",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["reason"])
                let reason = try body.choice("reason", ConsumptionRequestReason.self) ?? .other
                return try await answer(
                    try await store.requestRefund(transactionID: try context.parameter("transaction"), reason: reason))
            })
        router.post(
            base + "/transactions/{transaction}/refund-decision",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["approved", "reason"])
                guard let approved = try body.bool("approved") else {
                    throw EmulatorError.invalid("member 'approved' is required (true or false)")
                }
                let reason = try body.choice("reason", RefundReason.self) ?? .other
                return try await answer(
                    try await store.decideRefund(
                        transactionID: try context.parameter("transaction"), approved: approved,
                        reason: reason.revocationReason))
            })
        router.post(
            base + "/families",
            guarded { request, _ in
                let body = try RequestBody(request, allowed: ["organizer", "members"])
                let organizer = try body.string("organizer", required: true) ?? ""
                guard let list = body.object["members"]?.arrayValue ?? (body.has("members") ? nil : []),
                    list.count <= AppStore.maxFamilyMembers
                else {
                    throw EmulatorError.invalid(
                        "member 'members' must be an array of at most \(AppStore.maxFamilyMembers) account ids")
                }
                let members = try list.map { value -> String in
                    guard let id = value.stringValue, !id.isEmpty, id.utf8.count <= RequestBody.maxString else {
                        throw EmulatorError.invalid("member 'members' must hold account ids")
                    }
                    return id
                }
                let family = try await store.createFamily(organizer: organizer, members: members)
                return .json(.object(Self.render(family)), status: 201)
            })
        router.get(
            base + "/families/{family}",
            guarded { _, context in
                .json(.object(Self.render(try await store.family(try context.parameter("family")))))
            })
        router.delete(
            base + "/families/{family}/members/{account}",
            guarded { _, context in
                let family = try await store.removeFamilyMember(
                    familyID: try context.parameter("family"), accountID: try context.parameter("account"))
                return .json(.object(Self.render(family)))
            })
        router.post(
            base + "/products/{product}/price-increase",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["requiresConsent", "displayPrice"])
                let count = try await store.announcePriceIncrease(
                    productID: try context.parameter("product"),
                    requiresConsent: try body.bool("requiresConsent") ?? true,
                    displayPrice: try body.string("displayPrice", maxBytes: 32))
                return .json(.object(["subscriptions": .integer(Int64(count))]))
            })
        router.post(
            base + "/products/{product}/availability",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["forSale"])
                guard let forSale = try body.bool("forSale") else {
                    throw EmulatorError.invalid("member 'forSale' is required (true or false)")
                }
                let product = try context.parameter("product")
                try await store.setAvailability(productID: product, forSale: forSale)
                return .json(.object(["productId": .string(product), "forSale": .bool(forSale)]))
            })
        router.get(
            base + "/apps/{bundle}/notifications",
            guarded { _, context in .json(try store.notifications(bundleID: try context.parameter("bundle")).json) })
        router.put(
            base + "/apps/{bundle}/notifications",
            guarded { request, context in
                guard request.body.count <= 16_384 else {
                    throw EmulatorError.invalid("the body is larger than 16 KiB")
                }
                let json: JSONValue
                do { json = try JSONParser.parse(request.body) } catch {
                    throw EmulatorError.invalid("the body is not JSON: \(error)")
                }
                let settings = try AppNotifications(json: json)
                try await store.setNotifications(bundleID: try context.parameter("bundle"), settings)
                return .json(settings.json)
            })
        router.get(
            base + "/apps/{bundle}/notifications/history",
            guarded { request, context in
                let name = request.query["environment"] ?? Environment.sandbox.rawValue
                guard let environment = Environment(name: name, among: Environment.customerEnvironments) else {
                    throw EmulatorError.invalid("environment must be Sandbox or Production")
                }
                let after = try request.query["after"].map { text -> Int64 in
                    guard let value = Int64(text), value >= 0 else {
                        throw EmulatorError.invalid("after must be a position from an earlier page")
                    }
                    return value
                }
                let page = try await store.notificationHistory(
                    bundleID: try context.parameter("bundle"), environment: environment, from: .distantPast,
                    to: .distantFuture, after: after, limit: 100)
                var object: JSONObject = [
                    "notificationHistory": .array(
                        page.map { entry in
                            let notification = entry.notification
                            var item: JSONObject = [
                                "notificationUUID": .string(notification.id),
                                "notificationType": .string(notification.notice.type.rawValue),
                                "subtype": notification.notice.subtype.map { .string($0.rawValue) } ?? .null,
                                "url": .string(notification.url), "state": .string(notification.state.rawValue),
                                "createdDate": AppStore.milliseconds(notification.created),
                                "sendAttempts": .array(
                                    notification.attempts.map {
                                        .object([
                                            "attemptDate": AppStore.milliseconds($0.date),
                                            "sendAttemptResult": .string($0.result.rawValue),
                                        ])
                                    }),
                            ]
                            item["signedPayload"] = notification.signedPayload.map(JSONValue.string) ?? .null
                            item["version"] = .integer(Int64(notification.version))
                            if notification.version == 1 {
                                // The V1 body as sent, less the shared secret.
                                item["v1NotificationType"] =
                                    notification.notice.v1Type.map { .string($0.rawValue) } ?? .null
                                var body = (try? JSONParser.parse(notification.body))?.objectValue ?? [:]
                                body["password"] = nil
                                item["payload"] = .object(body)
                            }
                            return .object(item)
                        })
                ]
                object["hasMore"] = .bool(page.count == 100)
                if let last = page.last { object["after"] = .string(String(last.position)) }
                return .json(.object(object))
            })
    }

    static func render(_ family: Family) -> JSONObject {
        [
            "familyId": .string(family.id), "organizer": .string(family.organizer.rawValue),
            "members": .array(family.members.map { .string($0.rawValue) }),
        ]
    }

    static func render(_ state: SubscriptionState) -> JSONObject {
        var object: JSONObject = [
            "originalTransactionId": .string(state.originalTransactionID.rawValue),
            "status": .integer(state.status.rawValue), "productId": .string(state.productID.rawValue),
            "autoRenewProductId": .string(state.autoRenewProductID.rawValue), "autoRenew": .bool(state.autoRenew),
        ]
        if let expires = state.expiresDate { object["expiresDate"] = AppStore.milliseconds(expires) }
        if let intent = state.expirationIntent { object["expirationIntent"] = .integer(intent.rawValue) }
        if let grace = state.gracePeriodExpiresDate { object["gracePeriodExpiresDate"] = AppStore.milliseconds(grace) }
        if let retry = state.billingRetryEndsDate { object["billingRetryEndsDate"] = AppStore.milliseconds(retry) }
        if let price = state.priceIncreaseStatus { object["priceIncreaseStatus"] = .integer(price.rawValue) }
        if let plan = state.billingPlan { object["billingPlanType"] = .string(plan.rawValue) }
        if let plan = state.renewalBillingPlan { object["renewalBillingPlanType"] = .string(plan.rawValue) }
        if let commitment = state.commitment {
            object["commitment"] = .object([
                "billingPeriodNumber": .integer(Int64(commitment.billingPeriodNumber)),
                "totalBillingPeriods": .integer(Int64(commitment.totalBillingPeriods)),
                "expiresDate": AppStore.milliseconds(commitment.expiresDate),
                "autoRenew": .bool(commitment.autoRenew), "renewalPlan": .string(commitment.renewalPlan.rawValue),
            ])
        }
        return object
    }
}
