import AppStoreEmulator
import AppStoreReceipts
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `storekeeper appstore …`: the emulator server, its certificates, and a small client to drive it.
enum AppStoreCommands {
    static let serveSpec = Arguments.Spec(
        command: "storekeeper appstore serve", abstract: "Run the App Store emulator.",
        options: [
            .init(
                name: "storekit", valueName: "file", help: "An Xcode .storekit catalogue (default: a built-in one).",
                repeatable: true),
            .init(
                name: "config", valueName: "file",
                help:
                    "Apps as JSON: {\"apps\": [{\"bundleId\", \"appAppleId\", \"version\", \"sharedSecret\"}], \"billingPlans\"?: {productId: [{\"billingPlanType\": \"MONTHLY\", \"displayPrice\", \"commitmentDisplayPrice\"?}]}} (12 months)."
            ),
            .init(
                name: "bundle-id", valueName: "id", help: "An app to sell for (default: com.example.storekeeper).",
                repeatable: true),
            .init(
                name: "data", valueName: "dir",
                help: "Where state and certificates are kept (default: $STOREKEEPER_DATA or storekeeper-data)."),
            .init(
                name: "host", valueName: "address",
                help: "Address to listen on: 127.0.0.1 (default), ::1, localhost, 0.0.0.0 or ::."),
            .init(name: "port", valueName: "n", help: "Port to listen on; 0 picks a free one (default: 8080)."),
            .init(name: "rate", valueName: "name", help: "Time rate, e.g. monthlyRenewalEveryFiveMinutes or realTime."),
            .init(
                name: "max-notifications-in-flight", valueName: "n",
                help:
                    "Notifications sent at once at most, 3/4 of them to one URL; the rest wait in the outbox's queue (default: 1024)."
            ),
            .init(
                name: "realtime-timeout-ms", valueName: "ms",
                help:
                    "How long Retention Messaging's realtime request waits for the app's answer, and the performance test's threshold (default: Apple's 700)."
            ),
            .init(
                name: "notification-retention-days", valueName: "n",
                help:
                    "Delete delivered and failed notifications n days after they were made, at the time rate, as Apple's 180-day history does (default: keep all)."
            ),
            .init(
                name: "token", valueName: "secret",
                help: "Require Authorization: Bearer <secret> on /_emulator (default: $STOREKEEPER_TOKEN)."),
            .init(
                name: "allow-host", valueName: "name",
                help: "Another host name the control plane answers to (a proxy's).", repeatable: true),
            LoggingOptions.level, LoggingOptions.format,
        ] + ConnectionOptions.all,
        flags: [("insecure", "Allow a non-loopback --host without --token (the control plane is then open).")],
        discussion: "Prints the address it listens on, then serves until SIGINT or SIGTERM.")

    static let certsSpec = Arguments.Spec(
        command: "storekeeper appstore certs",
        abstract: "Export the emulator's root certificates (DER and PEM), from a running emulator or its data.",
        options: [
            .init(
                name: "url", valueName: "url",
                help: "A running emulator to ask (GET /_emulator/v1/certificates); otherwise --data is read."),
            .init(
                name: "data", valueName: "dir",
                help: "The emulator's data directory (default: $STOREKEEPER_DATA or storekeeper-data)."),
            .init(
                name: "out", valueName: "dir", help: "Where to write receipt-root.{cer,pem} and jws-root.{cer,pem}.",
                required: true),
            tokenOption,
        ])

    static let productsSpec = Arguments.Spec(
        command: "storekeeper appstore products", abstract: "List the products a running emulator sells for an app.",
        options: [urlOption, tokenOption, bundleOption, fieldOption])

    static let urlOption = Arguments.Spec.Option(
        name: "url", valueName: "url",
        help: "The running emulator (default: $STOREKEEPER_URL or http://127.0.0.1:8080).")
    static let tokenOption = Arguments.Spec.Option(
        name: "token", valueName: "secret", help: "The emulator's control-plane token (default: $STOREKEEPER_TOKEN).")

    static let fieldOption = Arguments.Spec.Option(
        name: "field", valueName: "path",
        help: "Print only this member of the answer (a dotted path: transaction.transactionIdentifier, transactions.0)."
    )
    static let bundleOption = Arguments.Spec.Option(
        name: "bundle-id", valueName: "id",
        help: "The app (default: $STOREKEEPER_BUNDLE_ID or com.example.storekeeper).")

    static let clientOptions: [Arguments.Spec.Option] = [
        urlOption, tokenOption,
        .init(name: "device", valueName: "uuid", help: "The device.", required: true),
        bundleOption, fieldOption,
    ]

    static let accountSpec = Arguments.Spec(
        command: "storekeeper appstore account", abstract: "Create a test account.",
        options: [
            urlOption, tokenOption,
            .init(name: "environment", valueName: "name", help: "Sandbox (default) or Production."),
            .init(
                name: "storefront", valueName: "code",
                help: "ISO 3166-1 alpha-3 storefront (default: the catalogue's, else USA)."),
            fieldOption,
        ])
    static let deviceSpec = Arguments.Spec(
        command: "storekeeper appstore device", abstract: "Create a device for an account.",
        options: [
            urlOption, tokenOption,
            .init(name: "account", valueName: "id", help: "The account.", required: true), fieldOption,
        ])
    static let installSpec = Arguments.Spec(
        command: "storekeeper appstore install", abstract: "Install or update the app on a device.",
        options: clientOptions + [.init(name: "version", valueName: "v", help: "The app version.")])
    static let buySpec = Arguments.Spec(
        command: "storekeeper appstore buy", abstract: "Buy a product on a device.",
        options: clientOptions + [
            .init(
                name: "product", valueName: "id", help: "The product (see 'storekeeper appstore products').",
                required: true),
            .init(name: "quantity", valueName: "n", help: "How many (consumables only)."),
            .init(name: "app-account-token", valueName: "uuid", help: "The appAccountToken."),
            .init(name: "offer-code", valueName: "code", help: "Redeem an offer code (its reference name)."),
            .init(
                name: "billing-plan", valueName: "plan",
                help:
                    "MONTHLY: a yearly subscription billed monthly over a 12-month commitment (BILLED_UPFRONT: the default)."
            ),
            .init(name: "win-back-offer", valueName: "id", help: "Redeem a win-back offer."),
            .init(
                name: "promotional-offer", valueName: "id", help: "Redeem a promotional offer (with --offer-signature)."
            ),
            .init(
                name: "offer-signature", valueName: "json|jws",
                help: "What 'storekeeper offer sign' printed: V1 JSON, or a V2 JWS."),
            .init(
                name: "app-user-id", valueName: "id",
                help:
                    "Then post the purchase to the purchase server for this user, as the app would (POST "
                    + "/v1/transactions; needs --server and --app-key)."),
            .init(
                name: "server", valueName: "url",
                help: "The purchase server (default: $STOREKEEPER_SERVER; 'storekeeper dev' prints it)."),
            .init(name: "app-key", valueName: "key", help: "The app's public key (default: $STOREKEEPER_APP_KEY)."),
        ])
    static let transactionsSpec = Arguments.Spec(
        command: "storekeeper appstore transactions", abstract: "List the device's unfinished transactions.",
        options: clientOptions)
    static let finishSpec = Arguments.Spec(
        command: "storekeeper appstore finish", abstract: "Finish a transaction.",
        options: clientOptions + [.init(name: "transaction", valueName: "id", help: "The transaction.", required: true)]
    )
    static let receiptSpec = Arguments.Spec(
        command: "storekeeper appstore receipt", abstract: "Print the device's app receipt (base64).",
        options: clientOptions.filter { $0.name != "field" })
    static let advanceSpec = Arguments.Spec(
        command: "storekeeper appstore advance", abstract: "Advance the store clock and run what falls due.",
        options: [
            urlOption, tokenOption,
            .init(name: "by", valueName: "period", help: "ISO 8601 duration of store time, e.g. P1M."),
            .init(name: "rate", valueName: "name", help: "Switch to this time rate first."),
            fieldOption,
        ])

    static func certs(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let out = arguments.value("out")!
        var roots: [(String, Certificate)] = []
        if arguments.value("url") != nil {
            let (status, body) = try await request(arguments, "GET", "/_emulator/v1/certificates", nil)
            guard status == 200, let receipt = body["receiptRoot"]?.stringValue.flatMap({ Data(base64Encoded: $0) }),
                let jws = body["jwsRoot"]?.stringValue.flatMap({ Data(base64Encoded: $0) })
            else { throw CommandError.runtime("the emulator answered HTTP \(status) without its certificates") }
            roots = [
                ("receipt-root", try Certificate(derEncoded: Array(receipt))),
                ("jws-root", try Certificate(derEncoded: Array(jws))),
            ]
        } else {
            let data = URL(fileURLWithPath: dataDirectory(arguments))
            let pkiDirectory = data.appendingPathComponent("pki")
            guard FileManager.default.fileExists(atPath: pkiDirectory.path) else {
                throw CommandError.input(
                    "'\(data.path)' holds no emulator certificates (no pki folder); give the emulator's --data, or "
                        + "--url of a running emulator")
            }
            let pki: EmulatorPKI
            do { pki = try EmulatorPKI.loadOrCreate(in: pkiDirectory) } catch let error as EmulatorError {
                throw CommandError.input(error.message)
            }
            roots = [("receipt-root", pki.receipts.root), ("jws-root", pki.signedData.root)]
        }
        let directory = URL(fileURLWithPath: out)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for (name, certificate) in roots {
            try Data(certificate.derEncoded).write(to: directory.appendingPathComponent(name + ".cer"))
            try Data(certificate.pemEncoded.utf8).write(to: directory.appendingPathComponent(name + ".pem"))
        }
        console.write("Wrote receipt-root.cer/.pem and jws-root.cer/.pem to \(directory.path)\n")
        return 0
    }

    static func products(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let bundle = bundleID(arguments)
        let response = try await fetch(arguments, "GET", "/_emulator/v1/apps/\(bundle)/products", nil)
        if arguments.flag("json") || arguments.value("field") != nil {
            try printAnswer(response, arguments, console)
        } else {
            console.write(productTable(response))
        }
        return 0
    }

    // MARK: - Client

    static func account(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var body: JSONObject = [
            "environment": .string(try environment(arguments, among: Environment.customerEnvironments) ?? "Sandbox")
        ]
        if let storefront = arguments.value("storefront") { body["storefront"] = .string(storefront) }
        return try await call(arguments, console, "POST", "/_emulator/v1/accounts", body)
    }

    static func device(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard let account = arguments.value("account") else {
            throw CommandError.usage("Missing expected argument '--account <id>'")
        }
        return try await call(arguments, console, "POST", "/_emulator/v1/devices", ["accountId": .string(account)])
    }

    static func install(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var body = JSONObject()
        if let version = arguments.value("version") {
            body["version"] = .string(version)
        } else {
            console.writeError("note: no --version: the app's configured version is installed\n")
        }
        return try await call(arguments, console, "POST", try appPath(arguments) + "/install", body)
    }

    static func buy(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard let product = arguments.value("product") else {
            throw CommandError.usage("Missing expected argument '--product <id>'")
        }
        var body: JSONObject = ["productId": .string(product)]
        if let quantity = arguments.value("quantity") {
            guard let number = Int64(quantity) else { throw CommandError.usage("'\(quantity)' is not a quantity") }
            body["quantity"] = .integer(number)
        }
        if let token = arguments.value("app-account-token") { body["appAccountToken"] = .string(token) }
        if let code = arguments.value("offer-code") { body["offerCode"] = .string(code) }
        if let id = arguments.value("win-back-offer") { body["winBackOfferId"] = .string(id) }
        if let plan = arguments.value("billing-plan") { body["billingPlanType"] = .string(plan.uppercased()) }
        switch (arguments.value("promotional-offer"), arguments.value("offer-signature")) {
        case (nil, nil): break
        case (let offerID?, let signature?):
            let text = signature.trimmingCharacters(in: .whitespacesAndNewlines)
            if text.hasPrefix("{") {
                guard var object = (try? JSONParser.parse(Array(text.utf8)))?.objectValue else {
                    throw CommandError.usage("--offer-signature is not the JSON 'storekeeper offer sign' prints")
                }
                object["offerId"] = .string(offerID)
                body["offer"] = .object(object)
            } else {
                body["offer"] = .object(["jws": .string(text)])
            }
        case (_, nil): throw CommandError.usage("--promotional-offer needs --offer-signature")
        case (nil, _): throw CommandError.usage("--offer-signature needs --promotional-offer")
        }
        // Where the purchase goes is checked before anything is bought: a purchase is not undone, and run
        // again with the flags mended the command would buy twice.
        let post = try arguments.value("app-user-id").map { (user: $0, server: try purchaseServer(arguments)) }
        let answer = try await fetch(arguments, "POST", try appPath(arguments) + "/payments", body)
        // Printed first: the purchase is made whatever the server then answers.
        try printAnswer(answer, arguments, console)
        if let post {
            try await postToServer(answer, user: post.user, server: post.server, arguments, console)
        }
        return 0
    }

    /// `--server` and `--app-key` (or their variables), which `--app-user-id` needs.
    static func purchaseServer(_ arguments: Arguments) throws -> (url: String, key: String) {
        let environment = ProcessInfo.processInfo.environment
        guard let server = arguments.value("server") ?? environment["STOREKEEPER_SERVER"],
            let key = arguments.value("app-key") ?? environment["STOREKEEPER_APP_KEY"]
        else {
            throw CommandError.usage(
                "--app-user-id posts to the purchase server: give --server and --app-key (or STOREKEEPER_SERVER and "
                    + "STOREKEEPER_APP_KEY, which 'storekeeper dev' prints)")
        }
        return (server, key)
    }

    /// The app's part after a purchase: its signed transaction to the purchase server, for `user`.
    static func postToServer(
        _ answer: JSONValue, user: String, server target: (url: String, key: String), _ arguments: Arguments,
        _ console: Console
    ) async throws {
        let (server, key) = target
        guard let jws = answer["jwsRepresentation"]?.stringValue else {
            console.writeError("the purchase is not complete (no signed transaction yet): nothing posted\n")
            return
        }
        let body: JSONObject = [
            "bundleId": .string(bundleID(arguments)), "appUserId": .string(user), "signedTransaction": .string(jws),
        ]
        let response: HTTPClient.Response
        do {
            response = try await HTTPClient(timeout: .seconds(30)).send(
                "POST", server + "/v1/transactions",
                headers: [("Content-Type", "application/json"), ("Authorization", "Bearer " + key)],
                body: JSONWriter.bytes(.object(body)))
        } catch {
            throw CommandError.unavailable(
                "bought, not posted: cannot reach the purchase server at \(HTTPClient.printable(server)): "
                    + "\(error.code) (buying again buys twice; the app posts it again from Transaction.updates)")
        }
        guard (200..<300).contains(response.status) else {
            let parsed = try? JSONParser.parse(response.body)
            throw CommandError.runtime(
                "bought, not posted: the purchase server refused the transaction (HTTP \(response.status), "
                    + "\(parsed?["error"]?["code"]?.stringValue ?? "error")): "
                    + (parsed?["error"]?["message"]?.stringValue ?? "no details"))
        }
        console.writeError("posted to the purchase server for '\(user)'\n")
    }

    static func transactions(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        try await call(arguments, console, "GET", try appPath(arguments) + "/transactions", nil)
    }

    static func finish(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard let transaction = arguments.value("transaction") else {
            throw CommandError.usage("Missing expected argument '--transaction <id>'")
        }
        return try await call(
            arguments, console, "POST", try appPath(arguments) + "/transactions/\(transaction)/finish", nil)
    }

    static func receipt(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let (status, body) = try await request(arguments, "GET", try appPath(arguments) + "/receipt", nil)
        guard status == 200, let receipt = body["receipt"]?.stringValue else {
            let message = body["error"]?["message"]?.stringValue ?? "no details"
            throw CommandError.runtime("the emulator refused the request (HTTP \(status)): \(message)")
        }
        console.write(receipt + "\n")
        return 0
    }

    static func advance(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var body = JSONObject()
        if let period = arguments.value("by") {
            guard StorePeriod(period) != nil else {
                throw CommandError.usage("'\(period)' is not an ISO 8601 duration such as P1M")
            }
            body["advance"] = .string(period)
        }
        if let rate = arguments.value("rate") {
            guard TimeRate(name: rate) != nil else {
                throw CommandError.usage(
                    "'\(rate)' is not a time rate (one of \(TimeRate.all.map(\.name).joined(separator: ", ")))")
            }
            body["rate"] = .string(rate)
        }
        let response = try await fetch(arguments, "POST", "/_emulator/v1/clock", body)
        try printAnswer(response, arguments, console)
        console.writeError(advanceSummary(response, by: arguments.value("by")))
        return 0
    }

    static func bundleID(_ arguments: Arguments) -> String {
        arguments.value("bundle-id") ?? ProcessInfo.processInfo.environment["STOREKEEPER_BUNDLE_ID"]
            ?? DefaultCatalog.bundleID
    }

    /// `--environment`'s value as Apple spells it (any case: "sandbox" is Sandbox), among `allowed`.
    static func environment(_ arguments: Arguments, among allowed: [Environment]) throws -> String? {
        guard let given = arguments.value("environment") else { return nil }
        guard let known = allowed.first(where: { $0.rawValue.lowercased() == given.lowercased() }) else {
            throw CommandError.usage(
                "'\(given)' is not an environment; use \(allowed.map(\.rawValue).joined(separator: ", "))")
        }
        return known.rawValue
    }

    static func appPath(_ arguments: Arguments) throws -> String {
        guard let device = arguments.value("device") else {
            throw CommandError.usage("Missing expected argument '--device <uuid>'")
        }
        return "/_emulator/v1/devices/\(device)/apps/\(bundleID(arguments))"
    }

    static func call(_ arguments: Arguments, _ console: Console, _ method: String, _ path: String, _ body: JSONObject?)
        async throws -> Int32
    {
        let response = try await fetch(arguments, method, path, body)
        try printAnswer(response, arguments, console)
        return 0
    }

    static func fetch(_ arguments: Arguments, _ method: String, _ path: String, _ body: JSONObject?) async throws
        -> JSONValue
    {
        let (status, response) = try await request(arguments, method, path, body)
        guard (200..<300).contains(status) else {
            let code = response["error"]?["code"]?.stringValue ?? "error"
            let message = response["error"]?["message"]?.stringValue ?? "no details"
            throw CommandError.runtime(
                "the emulator refused the request (HTTP \(status), \(code)): \(message)"
                    + Self.refusalHint(status: status, message: message))
        }
        return response
    }

    /// What a refusal most likely means, when its words say: the purchase server answering in the emulator's
    /// place, or an emulator started with a control-plane token.
    static func refusalHint(status: Int, message: String) -> String {
        guard status == 401 else { return "" }
        if message.contains("<secret key>") || message.contains("<the app's public key>") {
            return " (that is a purchase server: appstore commands talk to the emulator, --url or STOREKEEPER_URL)"
        }
        if message.contains("<token>") {
            return " (the emulator was started with a control-plane token: give --token or set STOREKEEPER_TOKEN)"
        }
        return ""
    }

    static func request(_ arguments: Arguments, _ method: String, _ path: String, _ body: JSONObject?) async throws -> (
        Int, JSONValue
    ) {
        let base =
            arguments.value("url") ?? ProcessInfo.processInfo.environment["STOREKEEPER_URL"] ?? "http://127.0.0.1:8080"
        guard base.hasPrefix("http://") || base.hasPrefix("https://") else {
            throw CommandError.usage("--url must start with http:// or https://, e.g. http://127.0.0.1:8080")
        }
        var headers: [(name: String, value: String)] = [("Accept", "application/json")]
        // The control plane wants JSON for every state change, body or not.
        if method != "GET" { headers.append(("Content-Type", "application/json")) }
        if let token = arguments.value("token") ?? ProcessInfo.processInfo.environment["STOREKEEPER_TOKEN"] {
            headers.append(("Authorization", "Bearer " + token))
        }
        let bytes = body.map { JSONWriter.bytes(.object($0)) } ?? []
        let url = base + path
        let sent = headers
        let answer: HTTPClient.Response
        do {
            answer = try await HTTPClient(timeout: .seconds(30)).send(method, url, headers: sent, body: bytes)
        } catch {
            throw CommandError.unavailable(
                "cannot reach the emulator at \(HTTPClient.printable(base)): \(error.code) (\(error.reason))")
        }
        return (
            answer.status,
            answer.body.isEmpty
                ? .null
                : ((try? JSONParser.parse(answer.body)) ?? .string(String(decoding: answer.body, as: UTF8.self)))
        )
    }
}
