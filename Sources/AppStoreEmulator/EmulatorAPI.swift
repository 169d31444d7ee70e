import AppStoreReceipts
import Foundation
import StoreModel
import StoreTime
import StorekeeperCrypto
public import StorekeeperHTTP
import StorekeeperJSON
public import StorekeeperLogging

extension RequestBody {
    /// An app version: 1–32 characters of letters, digits, `.`, `-` and `_`.
    func version(_ name: String) throws -> String? {
        guard let text = try string(name, maxBytes: 32) else { return nil }
        guard !text.isEmpty, text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || ".-_".contains($0)) })
        else { throw EmulatorError.invalid("member '\(name)' must be a version such as 1.2.3") }
        return text
    }
}

/// The emulator's HTTP layer: Apple's `verifyReceipt` and App Store Server API paths and the emulator's own
/// under `/_emulator/v1`, the dashboard, and the wire JSON of each; the store answers typed values.
public struct EmulatorRoutes: Sendable {
    public let store: AppStore

    public init(_ store: AppStore) { self.store = store }
}

extension EmulatorRoutes {
    /// The HTTP API: Apple's `verifyReceipt` paths and the emulator's own under `/_emulator/v1`.
    /// The control plane is protected by `guard` (by default: loopback host names, no token).
    public func responder(logger: Logger? = nil, guard controlPlane: ControlPlaneGuard? = nil) -> Responder {
        var router = Router()
        router.use(AccessLogMiddleware())
        let controlPlane = controlPlane ?? ControlPlaneGuard(listeningOn: "127.0.0.1")
        router.use(controlPlane)
        router.limitBodies { method, path, authorization in
            controlPlane.bodyLimit(method: method, path: path, authorization: authorization)
        }
        router.use(store.serverAPI.state.faults)
        let store = self.store
        func guarded(_ body: @escaping @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse) -> Handler
        {
            { request, context in
                try await store.catchUp()
                return try await body(request, context)
            }
        }
        for (path, production) in [("/verifyReceipt", true), ("/sandbox/verifyReceipt", false)] {
            @Sendable func isProduction(_ request: HTTPRequest) -> Bool {
                production && request.header("Host")?.lowercased().hasPrefix("sandbox.") != true
            }
            router.add(
                "POST", path,
                inline: { request, _ in
                    store.verifyReceiptInline(body: request.body, production: isProduction(request)).map {
                        .json(.object(AppStore.render($0)))
                    }
                },
                otherwise: { request, _ in
                    .json(
                        .object(
                            AppStore.render(
                                try await store.verifyReceipt(body: request.body, production: isProduction(request)))))
                })
        }
        for path in ["/verifyReceipt", "/sandbox/verifyReceipt"] {
            router.get(path) { _, _ in .json(.object(["status": .integer(21000)])) }
        }

        let base = "/_emulator/v1"
        router.add(
            "GET", base + "/certificates",
            inline: { _, _ in
                .json(
                    .object([
                        "receiptRoot": .string(Data(store.pki.receipts.root.derEncoded).base64EncodedString()),
                        "jwsRoot": .string(Data(store.pki.signedData.root.derEncoded).base64EncodedString()),
                        "xcodeCompatible": .bool(false),
                    ]))
            })
        router.add(
            "GET", base + "/clock",
            inline: { _, _ in
                let (now, rate, offset) = (store.now, store.rate, store.clockOffset)
                return .json(
                    .object([
                        "now": .integer(EpochMilliseconds.milliseconds(now)),
                        "rate": .string(rate.name),
                        // Store time minus real time: what a server following this clock adds to its own.
                        "offsetMs": .integer(Int64((offset * 1000).rounded())),
                    ]))
            })
        router.post(
            base + "/clock",
            guarded { request, _ in
                let body = try RequestBody(request, allowed: ["advance", "rate"])
                var period: StorePeriod?
                if let text = try body.string("advance", maxBytes: 32) {
                    guard let parsed = StorePeriod(text) else {
                        throw EmulatorError.invalid("advance must be an ISO 8601 duration such as P1M")
                    }
                    period = parsed
                }
                var rate: TimeRate?
                if let name = try body.string("rate", maxBytes: 64) {
                    guard let parsed = TimeRate(name: name) else {
                        throw EmulatorError.invalid(
                            "member 'rate' must be one of \(TimeRate.all.map(\.name).joined(separator: ", "))")
                    }
                    rate = parsed
                }
                let clock = try await store.setClock(advance: period, rate: rate)
                var answer: JSONObject = [
                    "now": .integer(EpochMilliseconds.milliseconds(clock.now)),
                    "rate": .string(clock.rate.name),
                    "ran": .object([
                        "renewals": .integer(Int64(clock.ran.renewals)),
                        "expirations": .integer(Int64(clock.ran.expirations)),
                    ]),
                ]
                // More fell due than one request runs: the scheduler goes on in the background.
                if !clock.caughtUp { answer["caughtUp"] = .bool(false) }
                return .json(.object(answer))
            })
        router.post(
            base + "/accounts",
            guarded { request, _ in
                let body = try RequestBody(request, allowed: ["environment", "storefront"])
                let environment = try body.string("environment").map { name in
                    guard let environment = Environment(name: name, among: Environment.customerEnvironments) else {
                        throw HTTPError.invalidRequest(
                            "member 'environment' must be one of \(Environment.names(Environment.customerEnvironments))"
                        )
                    }
                    return environment
                }
                let account = try await store.createAccount(
                    environment: environment ?? .sandbox,
                    storefront: try body.string("storefront", maxBytes: 3))
                return .json(.object(["accountId": .string(account.id.rawValue)]), status: 201)
            })
        router.post(
            base + "/devices",
            guarded { request, _ in
                let body = try RequestBody(request, allowed: ["accountId", "deviceId"])
                guard let account = try body.uuid("accountId")?.uuidString else {
                    throw EmulatorError.invalid("member 'accountId' is required")
                }
                let deviceID = try body.uuid("deviceId")
                return .json(
                    .object([
                        "deviceId": .string(
                            try await store.createDevice(accountID: AccountID(account), deviceID: deviceID).id.rawValue)
                    ]), status: 201)
            })
        let app = base + "/devices/{device}/apps/{bundle}"
        router.post(
            app + "/install",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["version"])
                let (install, environment) = try await store.install(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                    version: try body.version("version"))
                return .json(.object(Self.render(install, environment: environment)))
            })
        router.get(
            app + "/products",
            guarded { request, context in
                let identifiers = request.query.values("ids").flatMap { $0.split(separator: ",").map(String.init) }
                guard identifiers.count <= 1000 else { throw EmulatorError.invalid("at most 1000 product ids") }
                // Without ids: the whole catalogue, so product ids can be discovered.
                let (products, invalid) = try await store.products(
                    identifiers.isEmpty ? store.catalogEntries.map(\.productID) : identifiers,
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"))
                return .json(
                    .object([
                        "products": .array(
                            products.map { .object(Self.render($0, displayPrice: store.listDisplayPrice($0))) }),
                        "invalidProductIdentifiers": .array(invalid.map(JSONValue.string)),
                    ]))
            })
        router.get(
            base + "/apps/{bundle}/products",
            guarded { request, context in
                _ = try store.app(try context.parameter("bundle"))
                let identifiers = request.query.values("ids").flatMap { $0.split(separator: ",").map(String.init) }
                guard identifiers.count <= 1000 else { throw EmulatorError.invalid("at most 1000 product ids") }
                let (products, invalid) = store.products(
                    identifiers.isEmpty ? store.catalogEntries.map(\.productID) : identifiers)
                return .json(
                    .object([
                        "products": .array(
                            products.map { .object(Self.render($0, displayPrice: store.listDisplayPrice($0))) }),
                        "invalidProductIdentifiers": .array(invalid.map(JSONValue.string)),
                    ]))
            })
        router.post(
            app + "/payments",
            guarded { request, context in
                let body = try RequestBody(
                    request,
                    allowed: [
                        "productId", "quantity", "applicationUsername", "appAccountToken", "offer", "offerCode",
                        "winBackOfferId", "billingPlanType",
                    ])
                let product = try body.string("productId", required: true)!
                let quantity = try body.integer("quantity", in: 1...10) ?? 1
                let outcome = try await store.pay(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                    productID: product, quantity: Int(quantity),
                    applicationUsername: try body.string("applicationUsername", maxBytes: 1024),
                    appAccountToken: try body.uuid("appAccountToken")?.uuidString, offer: try Self.offerRequest(body),
                    billingPlan: try body.choice("billingPlanType", BillingPlanType.self))
                let (transaction, jws): (JSONObject, String?) =
                    switch outcome {
                    case .purchased(let stored, let jws):
                        (Self.render(.transaction(stored, state: "purchased")), jws)
                    case .pending(let payment): (Self.render(.payment(payment)), nil)
                    }
                return .json(
                    .object([
                        "transaction": .object(transaction), "jwsRepresentation": jws.map(JSONValue.string) ?? .null,
                    ]),
                    status: 201)
            })
        router.get(
            app + "/transactions",
            guarded { _, context in
                .json(
                    .object([
                        "transactions": .array(
                            try await store.unfinished(
                                deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle")
                            ).map { .object(Self.render($0)) })
                    ]))
            })
        router.post(
            app + "/transactions/{transaction}/finish",
            guarded { request, context in
                _ = try RequestBody(request, allowed: [])
                try await store.finish(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                    transactionID: try context.parameter("transaction"))
                return .noContent
            })
        router.post(
            app + "/restore",
            guarded { request, context in
                _ = try RequestBody(request, allowed: [])
                return .json(
                    .object([
                        "transactions": .array(
                            try await store.restore(
                                deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle")
                            ).map { .object(Self.render(.transaction($0, state: "restored"))) })
                    ]))
            })
        router.get(
            app + "/receipt",
            guarded { request, context in
                @Sendable func flag(_ name: String) -> Bool {
                    ["1", "true", "yes"].contains(request.query[name]?.lowercased() ?? "")
                }
                let refresh = AppStore.RefreshProperties(
                    volumePurchase: flag("vpp"), expired: flag("expired"), revoked: flag("revoked"))
                let receipt = try await store.receipt(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                    refresh: refresh)
                return .json(.object(["receipt": .string(Data(receipt).base64EncodedString())]))
            })
        router.get(
            app + "/entitlements",
            guarded { _, context in
                let signed = try await store.entitlements(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"))
                return .json(.object(["signedTransactions": .array(signed.map(JSONValue.string))]))
            })
        router.get(
            app + "/app-transaction",
            guarded { _, context in
                let signed = try await store.appTransaction(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"))
                return .json(.object(["signedAppTransaction": .string(signed)]))
            })
        router.post(
            app + "/vpp",
            guarded { request, context in
                let body = try RequestBody(request, allowed: ["action"])
                guard let action = try body.choice("action", AppStore.VolumePurchaseAction.self) else {
                    throw EmulatorError.invalid("member 'action' is required (assign or revoke)")
                }
                return .json(
                    .object(
                        Self.render(
                            try await store.volumePurchase(
                                deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                                action: action))))
            })
        router.post(
            base + "/accounts/{account}/settings",
            guarded { request, context in
                let body = try RequestBody(
                    request, allowed: ["askToBuy", "purchaseFailure", "billingRetryOnRenewal", "billingGracePeriod"])
                let failure = try body.nullableChoice("purchaseFailure", PurchaseFailure.self)
                let account = try context.parameter("account")
                _ = try await store.configureAccount(
                    account, askToBuy: try body.bool("askToBuy"), purchaseFailure: failure)
                return .json(
                    .object(
                        Self.render(
                            try await store.configureBilling(
                                account, retryOnRenewal: try body.bool("billingRetryOnRenewal"),
                                gracePeriod: try body.bool("billingGracePeriod")))))
            })
        for (action, approve) in [("approve", true), ("decline", false)] {
            router.post(
                base + "/accounts/{account}/requests/{transaction}/" + action,
                guarded { request, context in
                    _ = try RequestBody(request, allowed: [])
                    return .json(
                        .object(
                            Self.render(
                                try await store.decide(
                                    accountID: try context.parameter("account"),
                                    paymentID: try context.parameter("transaction"),
                                    approve: approve))))
                })
        }
        router.post(
            base + "/accounts/{account}/interruptions/resolve",
            guarded { request, context in
                _ = try RequestBody(request, allowed: [])
                return .json(
                    .object([
                        "transactions": .array(
                            try await store.resolveInterruptions(accountID: try context.parameter("account")).map {
                                .object(Self.render(.transaction($0, state: "purchased")))
                            })
                    ]))
            })
        addLifecycleRoutes(to: &router, base: base, guarded: guarded)
        store.serverAPI.addServerAPIRoutes(to: &router, base: base, guarded: guarded)
        EmulatorDashboard(store: store).addDashboardRoutes(to: &router, login: controlPlane.login)
        return router.freeze(logger: logger ?? self.store.logger)
    }
}

extension EmulatorRoutes {
    /// The payment's offer: at most one of `offer` (a promotional offer: `{"offerId", "keyId", "nonce",
    /// "timestamp", "signature"}` as StoreKit's V1 purchase option, or `{"jws"}` for V2), `offerCode` and
    /// `winBackOfferId`.
    static func offerRequest(_ body: RequestBody) throws -> OfferRequest? {
        let given = ["offer", "offerCode", "winBackOfferId"].filter(body.has)
        guard given.count <= 1 else {
            throw EmulatorError.invalid(
                "give one of offer, offerCode and winBackOfferId, not \(given.joined(separator: " and "))")
        }
        if let code = try body.string("offerCode") { return .code(code) }
        if let id = try body.string("winBackOfferId") { return .winBack(id) }
        guard let value = body.object["offer"] else { return nil }
        guard let given = value.objectValue else { throw EmulatorError.invalid("member 'offer' must be an object") }
        var offer = given
        func text(_ name: String, maxBytes: Int = RequestBody.maxString) throws -> String {
            guard let text = offer[name]?.stringValue, !text.isEmpty, text.utf8.count <= maxBytes else {
                throw EmulatorError.offer(
                    "missingOfferParams", "member 'offer' needs '\(name)' (a string of at most \(maxBytes) bytes)")
            }
            return text
        }
        if offer["jws"] != nil {
            guard offer.members.count == 1 else {
                throw EmulatorError.invalid("member 'offer' with 'jws' takes nothing else")
            }
            return .promotionalJWS(try text("jws", maxBytes: 8_192))
        }
        // StoreKit's names (`offerIdentifier`, `keyIdentifier`, as 'storekeeper offer sign' prints) also do.
        for (alias, name) in [("offerIdentifier", "offerId"), ("keyIdentifier", "keyId")] {
            if let value = offer[alias], offer[name] == nil {
                offer[name] = value
                offer[alias] = nil
            }
        }
        let known: Set<String> = ["offerId", "keyId", "nonce", "timestamp", "signature"]
        for member in offer.keys where !known.contains(member) {
            throw EmulatorError.invalid(
                "unknown member 'offer.\(member)' (known: jws, or \(known.sorted().joined(separator: ", ")))")
        }
        guard let timestamp = offer["timestamp"]?.int64Value else {
            throw EmulatorError.offer("missingOfferParams", "member 'offer' needs 'timestamp' (milliseconds)")
        }
        return .promotional(
            offerID: try text("offerId"), keyID: try text("keyId"), nonce: try text("nonce"), timestamp: timestamp,
            signature: try text("signature", maxBytes: 1_024))
    }
}
