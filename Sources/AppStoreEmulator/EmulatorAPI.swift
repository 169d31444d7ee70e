import AppStoreReceipts
import Foundation
import StoreModel
import StoreTime
import StorekeeperCrypto
public import StorekeeperHTTP
import StorekeeperJSON
public import StorekeeperLogging

extension AppStore {
    /// The HTTP API: Apple's `verifyReceipt` paths and the emulator's own under `/_emulator/v1`.
    public func responder(logger: Logger? = nil) -> Responder {
        var router = Router()
        router.use(AccessLogMiddleware())
        let store = self
        func guarded(_ body: @escaping @Sendable (HTTPRequest, RequestContext) async throws -> HTTPResponse) -> Handler
        {
            { request, context in
                do {
                    try await store.catchUp()
                    return try await body(request, context)
                } catch let error as EmulatorError {
                    throw HTTPError(status: error.status, code: error.code, message: error.message)
                }
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
                let (now, rate) = (store.now, store.rate)
                return .json(
                    .object([
                        "now": .integer(Int64((now.timeIntervalSince1970 * 1000).rounded(.down))),
                        "rate": .string(rate.name),
                    ]))
            })
        router.post(
            base + "/clock",
            guarded { request, _ in
                let body = try request.jsonObject()
                var period: StorePeriod?
                if let text = body["advance"]?.stringValue {
                    guard let parsed = StorePeriod(text) else {
                        throw EmulatorError.invalid("advance must be an ISO 8601 duration such as P1M")
                    }
                    period = parsed
                }
                var rate: TimeRate?
                if let name = body["rate"]?.stringValue {
                    guard let parsed = TimeRate(name: name) else { throw EmulatorError.invalid("unknown rate \(name)") }
                    rate = parsed
                }
                let clock = try await store.setClock(advance: period, rate: rate)
                return .json(
                    .object([
                        "now": .integer(Int64((clock.now.timeIntervalSince1970 * 1000).rounded(.down))),
                        "rate": .string(clock.rate.name),
                    ]))
            })
        router.post(
            base + "/accounts",
            guarded { request, _ in
                let body = try request.jsonObject()
                let name = body["environment"]?.stringValue ?? Environment.sandbox.rawValue
                guard let environment = Environment(rawValue: name) else {
                    throw EmulatorError.invalid("environment must be Sandbox or Production")
                }
                let account = try await store.createAccount(
                    environment: environment, storefront: body["storefront"]?.stringValue ?? "USA")
                return .json(.object(["accountId": .string(account.id.rawValue)]), status: 201)
            })
        router.post(
            base + "/devices",
            guarded { request, _ in
                let body = try request.jsonObject()
                guard let account = body["accountId"]?.stringValue else {
                    throw EmulatorError.invalid("accountId is required")
                }
                var deviceID: UUID?
                if let text = body["deviceId"]?.stringValue {
                    guard let uuid = UUID(uuidString: text) else {
                        throw EmulatorError.invalid("deviceId must be a UUID")
                    }
                    deviceID = uuid
                }
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
                let body = request.body.isEmpty ? JSONObject() : try request.jsonObject()
                let (install, environment) = try await store.install(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                    version: body["version"]?.stringValue)
                return .json(.object(AppStore.render(install, environment: environment)))
            })
        router.get(
            app + "/products",
            guarded { request, _ in
                let identifiers = request.query.values("ids").flatMap { $0.split(separator: ",").map(String.init) }
                let (products, invalid) = store.products(identifiers)
                return .json(
                    .object([
                        "products": .array(products.map { .object(AppStore.render($0)) }),
                        "invalidProductIdentifiers": .array(invalid.map(JSONValue.string)),
                    ]))
            })
        router.post(
            app + "/payments",
            guarded { request, context in
                let body = try request.jsonObject()
                guard let product = body["productId"]?.stringValue else {
                    throw EmulatorError.invalid("productId is required")
                }
                let quantity = body["quantity"]?.int64Value ?? 1
                let outcome = try await store.pay(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                    productID: product,
                    quantity: Int(clamping: quantity), applicationUsername: body["applicationUsername"]?.stringValue,
                    appAccountToken: body["appAccountToken"]?.stringValue)
                let (transaction, jws): (JSONObject, String?) =
                    switch outcome {
                    case .purchased(let stored, let jws):
                        (AppStore.render(.transaction(stored, state: "purchased")), jws)
                    case .pending(let payment): (AppStore.render(.payment(payment)), nil)
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
                            ).map { .object(AppStore.render($0)) })
                    ]))
            })
        router.post(
            app + "/transactions/{transaction}/finish",
            guarded { _, context in
                try await store.finish(
                    deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                    transactionID: try context.parameter("transaction"))
                return .noContent
            })
        router.post(
            app + "/restore",
            guarded { _, context in
                .json(
                    .object([
                        "transactions": .array(
                            try await store.restore(
                                deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle")
                            ).map { .object(AppStore.render(.transaction($0, state: "restored"))) })
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
                guard
                    let action = (try request.jsonObject()["action"]?.stringValue).flatMap(
                        AppStore.VolumePurchaseAction.init(rawValue:))
                else { throw EmulatorError.invalid("action must be assign or revoke") }
                return .json(
                    .object(
                        AppStore.render(
                            try await store.volumePurchase(
                                deviceID: try context.parameter("device"), bundleID: try context.parameter("bundle"),
                                action: action))))
            })
        router.post(
            base + "/accounts/{account}/settings",
            guarded { request, context in
                let body = try request.jsonObject()
                var failure: PurchaseFailure??
                if let value = body["purchaseFailure"] {
                    if value == .null {
                        failure = .some(nil)
                    } else {
                        guard let parsed = value.stringValue.flatMap(PurchaseFailure.init(rawValue:)) else {
                            throw EmulatorError.invalid("purchaseFailure must be failed, interrupted or null")
                        }
                        failure = .some(parsed)
                    }
                }
                if let value = body["askToBuy"], value.boolValue == nil {
                    throw EmulatorError.invalid("askToBuy must be a boolean")
                }
                return .json(
                    .object(
                        AppStore.render(
                            try await store.configureAccount(
                                try context.parameter("account"), askToBuy: body["askToBuy"]?.boolValue,
                                purchaseFailure: failure))))
            })
        for (action, approve) in [("approve", true), ("decline", false)] {
            router.post(
                base + "/accounts/{account}/requests/{transaction}/" + action,
                guarded { _, context in
                    .json(
                        .object(
                            AppStore.render(
                                try await store.decide(
                                    accountID: try context.parameter("account"),
                                    paymentID: try context.parameter("transaction"),
                                    approve: approve))))
                })
        }
        router.post(
            base + "/accounts/{account}/interruptions/resolve",
            guarded { _, context in
                .json(
                    .object([
                        "transactions": .array(
                            try await store.resolveInterruptions(accountID: try context.parameter("account")).map {
                                .object(AppStore.render(.transaction($0, state: "purchased")))
                            })
                    ]))
            })
        return router.freeze(logger: logger ?? self.logger)
    }
}
