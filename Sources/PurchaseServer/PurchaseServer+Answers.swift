import AppStoreReceipts
import Foundation
import StoreModel
import StorekeeperHTTP
import StorekeeperJSON

/// The JSON the server's own API answers: dates with their ISO 8601 siblings, pages, app posts, subscribers,
/// entitlements and events.
extension PurchaseServer {
    /// A JSON answer of the server's own API: every epoch-milliseconds date (`…Date`, `…At`, an event's or
    /// attempt's `date`, `nextAttempt`, a chart's `from`, `to`, `start` and `end`) with its ISO 8601 sibling
    /// (`…ISO`), as the command line prints them.
    /// The siblings are written as the answer is (no copy of it).
    static func answer(_ value: JSONValue, status: Int = 200) -> HTTPResponse {
        HTTPResponse(
            status: status, headers: [("Content-Type", "application/json")],
            body: JSONWriter.bytes(value, siblings: dateSiblings))
    }

    static let dateSiblings = ISODates.writerSiblings(
        names: ["date", "nextAttempt", "from", "to", "start", "end"], skipping: ["balances"])

    static func ms(_ date: Date) -> JSONValue { .integer(EpochMilliseconds.milliseconds(date)) }
    static func ms(_ date: Date?) -> JSONValue { date.map(ms) ?? .null }

    /// A list's page from the query: `limit` 1 to 500 (50 when absent) and `cursor`, a position this server
    /// gave; anything else is a 400, not a page of another size or one from the start.
    static func page(_ request: HTTPRequest) throws -> (limit: Int, after: Int64?) {
        var limit = 50
        if let text = request.query["limit"] {
            guard let value = Int(text), (1...500).contains(value) else {
                throw PurchaseServerError.invalid("limit must be a whole number from 1 to 500")
            }
            limit = value
        }
        var after: Int64?
        if let text = request.query["cursor"] {
            guard let value = Int64(text), value >= 0 else {
                throw PurchaseServerError.invalid("cursor must be a nextCursor this server answered")
            }
            after = value
        }
        return (limit, after)
    }

    /// An app post's answer. The developer's backend (secret key) gets the whole subscriber; the app (its
    /// public key, which ships inside the app and is no secret) gets the entitlements, the user's flags and
    /// what became of the purchases its post carried (their records and subscriptions) only — the user's
    /// aliases, other purchases and balances are not for whoever holds a transaction, nor which user an alias
    /// it posted under belongs to (its `appUserId` is the id it sent, `asked`). Either ends with `requestDate`.
    static func render(_ posted: PurchaseServer.Posted, for caller: AppCaller, asked: String, at now: Date)
        -> JSONObject
    {
        var object = render(posted.view)
        if caller == .app {
            let posts = posted.view.purchases.filter { posted.transactionIDs.contains($0.transactionID) }
            let originals = Set(posts.map(\.originalTransactionID))
            var subscriptions = JSONObject()
            for member in object["subscriptions"]?.objectValue?.members ?? []
            where originals.contains(TransactionID(member.key)) {
                subscriptions[member.key] = member.value
            }
            object = [
                "appUserId": .string(asked), "bundleId": object["bundleId"] ?? .null,
                "entitlements": object["entitlements"] ?? .object([:]), "subscriptions": .object(subscriptions),
                "purchases": .array(
                    (object["purchases"]?.arrayValue ?? []).filter { purchase in
                        purchase["transactionId"]?.stringValue.map {
                            posted.transactionIDs.contains(TransactionID($0))
                        } ?? false
                    }),
                "flags": object["flags"] ?? .array([]),
            ]
        }
        object["requestDate"] = ms(now)
        return object
    }

    /// A subscription's commitment (monthly billing over 12 months).
    static func render(_ commitment: CommitmentFacts) -> JSONValue {
        func integer(_ value: Int?) -> JSONValue { value.map { .integer(Int64($0)) } ?? .null }
        return .object([
            "billingPeriodNumber": integer(commitment.billingPeriodNumber),
            "totalBillingPeriods": integer(commitment.totalBillingPeriods), "expiresDate": ms(commitment.expiresDate),
            "price": commitment.price.map(JSONValue.integer) ?? .null,
            "autoRenewStatus": commitment.autoRenewStatus.map(JSONValue.bool) ?? .null,
            "renewalDate": ms(commitment.renewalDate),
        ])
    }

    /// What `GET /v1/entitlements/{user}` answers an app: its user's entitlements, and when; under the id the
    /// app asked for (an alias's user is not the app key's to learn).
    static func renderEntitlements(_ view: SubscriberView, asked: String, now: Date) -> JSONObject {
        [
            "appUserId": .string(asked), "bundleId": .string(view.bundleID),
            "entitlements": .object(render(entitlements: view)), "requestDate": ms(now),
        ]
    }

    static func render(entitlements view: SubscriberView) -> JSONObject {
        var entitlements = JSONObject()
        for (name, entitlement) in view.entitlements.sorted(by: { $0.key < $1.key }) {
            entitlements[name] = .object([
                "active": .bool(entitlement.active), "productId": entitlement.productID.map(JSONValue.string) ?? .null,
                "expiresDate": ms(entitlement.expiresDate), "willRenew": .bool(entitlement.willRenew),
                "periodType": .string(entitlement.periodType), "inGracePeriod": .bool(entitlement.inGracePeriod),
                "inBillingRetry": .bool(entitlement.inBillingRetry), "source": .string(entitlement.source),
            ])
        }
        return entitlements
    }

    static func render(_ view: SubscriberView) -> JSONObject {
        let entitlements = render(entitlements: view)
        var subscriptions = JSONObject()
        for subscription in view.subscriptions {
            subscriptions[subscription.originalTransactionID.rawValue] = .object([
                "productId": .string(subscription.productID.rawValue), "status": .integer(subscription.status),
                "expiresDate": ms(subscription.expiresDate), "autoRenewStatus": .bool(subscription.autoRenewStatus),
                "autoRenewProductId": subscription.autoRenewProductID.map { .string($0.rawValue) } ?? .null,
                "gracePeriodExpiresDate": ms(subscription.gracePeriodExpiresDate),
                "expirationIntent": subscription.expirationIntent.map(JSONValue.integer) ?? .null,
                "environment": .string(subscription.environment.rawValue),
                "ownershipType": .string(subscription.ownership.rawValue),
                "revocationDate": ms(subscription.revocationDate),
                "revocationReason": subscription.revocationReason.map(JSONValue.integer) ?? .null,
                "billingPlanType": subscription.billingPlanType.map(JSONValue.string) ?? .null,
                "renewalBillingPlanType": subscription.renewalBillingPlanType.map(JSONValue.string) ?? .null,
                "commitment": subscription.commitment.map(Self.render) ?? .null,
            ])
        }
        var balances = JSONObject()
        for (product, balance) in view.balances.sorted(by: { $0.key < $1.key }) {
            balances[product] = .integer(Int64(balance))
        }
        return [
            "appUserId": .string(view.appUserID), "aliases": .array(view.aliases.map(JSONValue.string)),
            "bundleId": .string(view.bundleID),
            "entitlements": .object(entitlements),
            "subscriptions": .object(subscriptions),
            "purchases": .array(
                view.purchases.map { purchase in
                    .object([
                        "transactionId": .string(purchase.transactionID.rawValue),
                        "productId": .string(purchase.productID.rawValue),
                        "type": .string(purchase.kind.rawValue), "purchaseDate": ms(purchase.purchaseDate),
                        "quantity": .integer(Int64(purchase.quantity)),
                        // A period an upgrade replaced carries Apple's revocation date but was not refunded.
                        "revoked": .bool(purchase.isRefunded),
                        "expiresDate": ms(purchase.expiresDate), "revocationDate": ms(purchase.revocationDate),
                        "originalTransactionId": .string(purchase.originalTransactionID.rawValue),
                    ])
                }),
            "balances": .object(balances), "flags": .array(view.flags.map(JSONValue.string)),
        ]
    }

    static func render(_ event: ServerEvent) -> JSONObject {
        var object: JSONObject = [
            "id": .string(event.id), "type": .string(event.type.rawValue), "date": ms(event.date),
            "source": .string(event.source.rawValue),
        ]
        if let product = event.productID { object["productId"] = .string(product.rawValue) }
        if let id = event.transactionID { object["transactionId"] = .string(id.rawValue) }
        if let id = event.originalTransactionID { object["originalTransactionId"] = .string(id.rawValue) }
        if let environment = event.environment { object["environment"] = .string(environment.rawValue) }
        if let type = event.appleNotificationType { object["appleNotificationType"] = .string(type) }
        if let subtype = event.appleSubtype { object["appleSubtype"] = .string(subtype) }
        if !event.details.isEmpty {
            var details = JSONObject()
            for (key, value) in event.details.sorted(by: { $0.key < $1.key }) { details[key] = .string(value) }
            object["details"] = .object(details)
        }
        return object
    }
}
