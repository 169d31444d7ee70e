import AppStoreEmulator
import AppStoreReceipts
import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import Synchronization

/// `storekeeper appstore expire|renew|refund|…`: the lifecycle's control verbs, product changes and
/// notification settings, each one route of a running emulator; and `appstore notifications listen`, a
/// receiver that prints what it is sent.
enum LifecycleCommands {
    static let transactionOption = Arguments.Spec.Option(
        name: "transaction", valueName: "id", help: "Any transaction of the subscription.", required: true)
    static let common = [AppStoreCommands.urlOption, AppStoreCommands.tokenOption, AppStoreCommands.fieldOption]

    /// A verb on a transaction: its name, what it does, its body's boolean member (option name, JSON name).
    static let verbs: [(name: String, abstract: String, member: (option: String, json: String)?)] = [
        ("expire", "Expire a subscription now (expireSubscription).", nil),
        ("renew", "End a subscription's period now and renew it (forceRenewalOfSubscription).", nil),
        ("refund-reversal", "Reverse a granted refund.", nil),
        ("resolve-issue", "Clear a billing issue: the subscription recovers and renews now.", nil),
        ("auto-renew", "Turn a subscription's auto-renew on or off.", ("enabled", "enabled")),
        ("price-consent", "Answer a pending price increase.", ("consent", "consent")),
    ]

    static func verbSpec(_ verb: (name: String, abstract: String, member: (option: String, json: String)?))
        -> Arguments.Spec
    {
        var options = common + [transactionOption]
        if let member = verb.member {
            options.append(.init(name: member.option, valueName: "true|false", help: "The answer.", required: true))
        }
        return Arguments.Spec(command: "storekeeper appstore \(verb.name)", abstract: verb.abstract, options: options)
    }

    static func verb(_ name: String) -> @Sendable (Arguments, Console, Date) async throws -> Int32 {
        { arguments, console, _ in
            let verb = verbs.first { $0.name == name }!
            var body = JSONObject()
            if let member = verb.member { body[member.json] = .bool(try bool(arguments, member.option)) }
            return try await AppStoreCommands.call(
                arguments, console, "POST", "/_emulator/v1/transactions/\(try transaction(arguments))/\(name)", body)
        }
    }

    static let refundSpec = Arguments.Spec(
        command: "storekeeper appstore refund", abstract: "Refund a purchase as if granted outside the app.",
        options: common + [
            transactionOption,
            .init(name: "reason", valueName: "OTHER|APP_ISSUE", help: "The revocation reason (default: OTHER)."),
        ])

    static func refund(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var body = JSONObject()
        body["reason"] = try reason(arguments, among: refundReasons, what: "a refund reason").map(JSONValue.string)
        return try await AppStoreCommands.call(
            arguments, console, "POST", "/_emulator/v1/transactions/\(try transaction(arguments))/refund", body)
    }

    static let refundRequestSpec = Arguments.Spec(
        command: "storekeeper appstore refund-request",
        abstract: "A customer asks for a refund (consumables and subscriptions: CONSUMPTION_REQUEST first).",
        options: common + [
            transactionOption,
            .init(
                name: "reason", valueName: "reason",
                help: "UNINTENDED_PURCHASE, FULFILLMENT_ISSUE, UNSATISFIED_WITH_PURCHASE, LEGAL or OTHER (default)."),
        ])

    static func refundRequest(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var body = JSONObject()
        body["reason"] = try reason(
            arguments, among: ConsumptionRequestReason.allCases.map(\.rawValue), what: "a refund request reason"
        ).map(JSONValue.string)
        return try await AppStoreCommands.call(
            arguments, console, "POST", "/_emulator/v1/transactions/\(try transaction(arguments))/refund-request", body)
    }

    static let refundDecisionSpec = Arguments.Spec(
        command: "storekeeper appstore refund-decision",
        abstract: "Apple's decision on a refund request: REFUND or REFUND_DECLINED.",
        options: common + [
            transactionOption,
            .init(name: "approved", valueName: "true|false", help: "Whether the refund is granted.", required: true),
            .init(name: "reason", valueName: "OTHER|APP_ISSUE", help: "The revocation reason (default: OTHER)."),
        ])

    static func refundDecision(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var body: JSONObject = ["approved": .bool(try bool(arguments, "approved"))]
        body["reason"] = try reason(arguments, among: refundReasons, what: "a refund reason").map(JSONValue.string)
        return try await AppStoreCommands.call(
            arguments, console, "POST", "/_emulator/v1/transactions/\(try transaction(arguments))/refund-decision", body
        )
    }

    /// The revocation reasons a refund takes (Apple's `revocationReason` 0 and 1).
    static let refundReasons = ["OTHER", "APP_ISSUE"]

    /// `--reason`, when given, checked against `among`.
    static func reason(_ arguments: Arguments, among reasons: [String], what: String) throws -> String? {
        guard let reason = arguments.value("reason") else { return nil }
        guard reasons.contains(reason) else {
            throw CommandError.usage("'\(reason)' is not \(what) (one of \(reasons.joined(separator: ", ")))")
        }
        return reason
    }

    static let familyCreateSpec = Arguments.Spec(
        command: "storekeeper appstore family create",
        abstract: "Make a Family Sharing group: members get access to one another's family-shareable purchases.",
        options: common + [
            .init(name: "organizer", valueName: "account", help: "The organizer's account.", required: true),
            .init(name: "member", valueName: "account", help: "Another member's account.", repeatable: true),
        ])

    static func familyCreate(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard let organizer = arguments.value("organizer"), !organizer.isEmpty else {
            throw CommandError.usage("Missing expected argument '--organizer <account>'")
        }
        return try await AppStoreCommands.call(
            arguments, console, "POST", "/_emulator/v1/families",
            ["organizer": .string(organizer), "members": .array(arguments.all("member").map(JSONValue.string))])
    }

    static let familyRemoveSpec = Arguments.Spec(
        command: "storekeeper appstore family remove",
        abstract: "Remove a member from a family: their shared access ends, and others' to their purchases (REVOKE).",
        options: common + [
            .init(name: "family", valueName: "id", help: "The family.", required: true),
            .init(name: "account", valueName: "id", help: "The member who leaves.", required: true),
        ])

    static func familyRemove(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard let family = arguments.value("family"), !family.isEmpty else {
            throw CommandError.usage("Missing expected argument '--family <id>'")
        }
        guard let account = arguments.value("account"), !account.isEmpty else {
            throw CommandError.usage("Missing expected argument '--account <id>'")
        }
        return try await AppStoreCommands.call(
            arguments, console, "DELETE", "/_emulator/v1/families/\(family)/members/\(account)", nil)
    }

    static let billingSpec = Arguments.Spec(
        command: "storekeeper appstore billing", abstract: "Make an account's renewals fail (billing retry, grace).",
        options: common + [
            .init(name: "account", valueName: "id", help: "The account.", required: true),
            .init(name: "retry-on-renewal", valueName: "true|false", help: "Renewals fail and enter billing retry."),
            .init(name: "grace-period", valueName: "true|false", help: "A billing grace period comes first."),
        ])

    static func billing(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard let account = arguments.value("account") else {
            throw CommandError.usage("Missing expected argument '--account <id>'")
        }
        var body = JSONObject()
        if arguments.value("retry-on-renewal") != nil {
            body["billingRetryOnRenewal"] = .bool(try bool(arguments, "retry-on-renewal"))
        }
        if arguments.value("grace-period") != nil {
            body["billingGracePeriod"] = .bool(try bool(arguments, "grace-period"))
        }
        return try await AppStoreCommands.call(
            arguments, console, "POST", "/_emulator/v1/accounts/\(account)/settings", body)
    }

    static let priceIncreaseSpec = Arguments.Spec(
        command: "storekeeper appstore price-increase", abstract: "Raise a subscription's price for its subscribers.",
        options: common + [
            .init(name: "product", valueName: "id", help: "The subscription product.", required: true),
            .init(
                name: "requires-consent", valueName: "true|false",
                help: "Whether subscribers must agree (default: true)."),
            .init(
                name: "display-price", valueName: "price",
                help: "The new price, e.g. 3.99: charged from each subscriber's next renewal and to new buyers."),
        ])

    static func priceIncrease(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var body = JSONObject()
        if let price = arguments.value("display-price") { body["displayPrice"] = .string(price) }
        if arguments.value("requires-consent") != nil {
            body["requiresConsent"] = .bool(try bool(arguments, "requires-consent"))
        }
        return try await AppStoreCommands.call(
            arguments, console, "POST", "/_emulator/v1/products/\(try product(arguments))/price-increase", body)
    }

    static let availabilitySpec = Arguments.Spec(
        command: "storekeeper appstore availability", abstract: "Take a product off sale, or put it back.",
        options: common + [
            .init(name: "product", valueName: "id", help: "The product.", required: true),
            .init(name: "for-sale", valueName: "true|false", help: "Whether it is for sale.", required: true),
        ])

    static func availability(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        try await AppStoreCommands.call(
            arguments, console, "POST", "/_emulator/v1/products/\(try product(arguments))/availability",
            ["forSale": .bool(try bool(arguments, "for-sale"))])
    }

    static let notificationsSetSpec = Arguments.Spec(
        command: "storekeeper appstore notifications set",
        abstract: "Set where an app's server notifications go (V2 or V1; several URLs allowed).",
        options: common + [
            AppStoreCommands.bundleOption,
            .init(name: "sandbox-url", valueName: "url", help: "A receiver for the sandbox.", repeatable: true),
            .init(name: "production-url", valueName: "url", help: "A receiver for production.", repeatable: true),
            .init(
                name: "retry-schedule", valueName: "seconds,…",
                help: "Delays between attempts (default: Apple's; \"\" for none: one attempt).", allowsEmpty: true),
            .init(name: "timeout", valueName: "seconds", help: "How long a receiver may take (default: 5)."),
            .init(
                name: "notification-version", valueName: "1|2",
                help: "2: signed JSON (default); 1: Apple's deprecated unsigned JSON with the shared secret."),
        ])

    static func notificationsSet(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var body: JSONObject = [
            "sandboxURL": .array(arguments.all("sandbox-url").map(JSONValue.string)),
            "productionURL": .array(arguments.all("production-url").map(JSONValue.string)),
        ]
        switch arguments.value("notification-version") {
        case nil, "2"?: body["version"] = .integer(2)
        case "1"?: body["version"] = .integer(1)
        case let other?: throw CommandError.usage("'\(other)' is not a value of --notification-version (one of 1, 2)")
        }
        if let schedule = arguments.value("retry-schedule") {
            let delays = schedule.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard !delays.contains(nil) else {
                throw CommandError.usage("--retry-schedule takes seconds, e.g. 60,600,3600")
            }
            body["retrySchedule"] = .array(delays.map { .double($0!) })
        }
        if let timeout = arguments.value("timeout") {
            guard let seconds = Double(timeout) else { throw CommandError.usage("--timeout takes seconds, e.g. 5") }
            body["timeoutSeconds"] = .double(seconds)
        }
        let response = try await AppStoreCommands.fetch(
            arguments, "PUT", "/_emulator/v1/apps/\(AppStoreCommands.bundleID(arguments))/notifications", body)
        try AppStoreCommands.printAnswer(response, arguments, console)
        return 0
    }

    static let notificationsHistorySpec = Arguments.Spec(
        command: "storekeeper appstore notifications history",
        abstract: "List an app's notifications and every attempt to send them.",
        options: common + [
            AppStoreCommands.bundleOption,
            .init(name: "environment", valueName: "Sandbox|Production", help: "Which (default: Sandbox)."),
        ])

    static func notificationsHistory(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let environment =
            try AppStoreCommands.environment(arguments, among: Environment.customerEnvironments)
            ?? Environment.sandbox.rawValue
        return try await AppStoreCommands.call(
            arguments, console, "GET",
            "/_emulator/v1/apps/\(AppStoreCommands.bundleID(arguments))/notifications/history?environment=\(environment)",
            nil)
    }

    static let listenSpec = Arguments.Spec(
        command: "storekeeper appstore notifications listen",
        abstract: "Receive server notifications and print them verified and decoded, one per line.",
        options: [
            .init(name: "port", valueName: "n", help: "Port to listen on; 0 picks a free one (default: 8081)."),
            .init(
                name: "root", valueName: "cert",
                help: "A trusted root (DER or PEM); default: the emulator's, from --url.", repeatable: true),
            AppStoreCommands.urlOption, AppStoreCommands.tokenOption,
            .init(name: "format", valueName: "text|json", help: "One line per notification (default: text)."),
            .init(name: "count", valueName: "n", help: "Stop after this many notifications."),
            .init(
                name: "password", valueName: "secret",
                help:
                    "The app's shared secret: V1 notifications whose password differs are refused "
                    + "(default: $STOREKEEPER_SHARED_SECRET, out of the process list)."),
        ],
        discussion:
            "Prints the address it listens on, then one line per notification: its signed date, type/subtype, UUID, "
            + "status and product. Answers 200 to a notification that verifies and 400 to one that does not. V1 "
            + "notifications (unsigned) are checked against --password (or $STOREKEEPER_SHARED_SECRET) when it is given."
    )

    static func listen(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let password =
            arguments.value("password") ?? ProcessInfo.processInfo.environment["STOREKEEPER_SHARED_SECRET"]
        TerminationSignals.hold()
        let port = Int(arguments.value("port") ?? "8081") ?? -1
        guard (0...65_535).contains(port) else { throw CommandError.usage("--port must be 0 to 65535") }
        let format = arguments.value("format") ?? "text"
        guard ["text", "json"].contains(format) else { throw CommandError.usage("--format must be text or json") }
        let limit = try arguments.value("count").map { text -> Int in
            guard let count = Int(text), count > 0 else {
                throw CommandError.usage("--count must be a positive number")
            }
            return count
        }
        var roots = try loadCertificates(arguments.all("root"))
        if roots.isEmpty {
            let (status, body) = try await AppStoreCommands.request(arguments, "GET", "/_emulator/v1/certificates", nil)
            guard status == 200, let der = body["jwsRoot"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else {
                throw CommandError.runtime("the emulator answered HTTP \(status) without its JWS root; give --root")
            }
            roots = [try Certificate(derEncoded: Array(der))]
        }
        let verifier: SignedDataVerifier
        do {
            verifier = try SignedDataVerifier(SignedDataVerifier.Configuration(trustedRoots: roots))
        } catch { throw CommandError.input("the roots cannot verify anything: \(error)") }
        let received = Atomic<Int>(0)
        var router = Router()
        let handler: Handler = { request, _ in
            let (line, ok) = describe(
                request.body, verifier: verifier, format: format, password: password)
            console.write(line + "\n")
            let count = received.add(1, ordering: .relaxed).newValue
            if let limit, count == limit { TerminationSignals.stop() }
            return HTTPResponse(status: ok ? 200 : 400)
        }
        router.add("POST", "/", handler)
        router.add("POST", "/{path}", handler)
        let server: HTTPServer
        do { server = try HTTPServer(port: port, responder: router.freeze()) } catch let error as HTTPError {
            throw CommandError.runtime(error.message)
        }
        console.write("listening for notifications on http://127.0.0.1:\(server.port)/\n")
        // Until a signal, or until --count notifications have come.
        await TerminationSignals.received()
        server.stop()
        return 0
    }

    /// One line for a received body, and whether it verified.
    static func describe(_ body: [UInt8], verifier: SignedDataVerifier, format: String, password: String? = nil)
        -> (String, Bool)
    {
        let parsed = try? JSONParser.parse(body)
        if let v1Type = parsed?["notification_type"]?.stringValue, let parsed {
            return describeV1(parsed, type: v1Type, format: format, password: password)
        }
        guard let signed = parsed?["signedPayload"]?.stringValue else {
            let line = "not a notification (neither signedPayload nor notification_type): \(body.count) bytes"
            return (format == "json" ? JSONWriter.string(.object(["error": .string(line)])) : line, false)
        }
        let result = verifier.verify(signed, as: .notification, now: Date())
        let payload = result.decodedPayload ?? [:]
        if format == "json" {
            return (
                JSONWriter.string(
                    .object(["verification": .string(result.status.rawValue), "payload": .object(payload)])),
                result.isOK
            )
        }
        let type = payload["notificationType"]?.stringValue ?? "?"
        let name = payload["subtype"]?.stringValue.map { "\(type)/\($0)" } ?? type
        let date = payload["signedDate"]?.int64Value.map { ISODates.string(milliseconds: $0) } ?? "?"
        let data = payload["data"]
        var line = "\(date) \(name) \(payload["notificationUUID"]?.stringValue ?? "?")"
        if let status = data?["status"]?.int64Value { line += " status=\(status)" }
        if let product = data?["transactionInfo"]?["productId"]?.stringValue { line += " product=\(product)" }
        if let id = data?["transactionInfo"]?["transactionId"]?.stringValue { line += " transaction=\(id)" }
        line += " verification=\(result.status.rawValue)"
        return (line, result.isOK)
    }

    /// A V1 notification: unsigned, so the only check is its password (compared in constant time).
    static func describeV1(_ body: JSONValue, type: String, format: String, password: String?) -> (String, Bool) {
        let check: String
        if let password {
            let given = Array((body["password"]?.stringValue ?? "").utf8)
            let expected = Array(password.utf8)
            var difference = given.count ^ expected.count
            for index in 0..<max(given.count, expected.count) {
                let left = index < given.count ? given[index] : 0
                let right = index < expected.count ? expected[index] : 0
                difference |= Int(left ^ right)
            }
            check = difference == 0 ? "ok" : "mismatch"
        } else {
            check = "unchecked"
        }
        if format == "json" {
            var copy = body.objectValue ?? [:]
            copy["password"] = nil
            return (
                JSONWriter.string(
                    .object(["version": .integer(1), "password": .string(check), "payload": .object(copy)])),
                check != "mismatch"
            )
        }
        var line = "V1 \(type) environment=\(body["environment"]?.stringValue ?? "?")"
        if let original = body["original_transaction_id"]?.stringValue { line += " original=\(original)" }
        if let status = body["auto_renew_status"]?.stringValue { line += " autoRenew=\(status)" }
        if let product = body["auto_renew_product_id"]?.stringValue { line += " autoRenewProduct=\(product)" }
        if let latest = body["unified_receipt"]?["latest_receipt_info"]?.arrayValue {
            line += " latestTransactions=\(latest.count)"
        }
        line += " password=\(check)"
        return (line, check != "mismatch")
    }

    static func bool(_ arguments: Arguments, _ name: String) throws -> Bool {
        switch arguments.value(name) {
        case "true"?: return true
        case "false"?: return false
        case nil: throw CommandError.usage("Missing expected argument '--\(name) <true|false>'")
        case let other?: throw CommandError.usage("'\(other)' is not a value of --\(name) (one of true, false)")
        }
    }

    static func transaction(_ arguments: Arguments) throws -> String {
        guard let id = arguments.value("transaction"), !id.isEmpty else {
            throw CommandError.usage("Missing expected argument '--transaction <id>'")
        }
        return id
    }

    static func product(_ arguments: Arguments) throws -> String {
        guard let id = arguments.value("product"), !id.isEmpty else {
            throw CommandError.usage("Missing expected argument '--product <id>'")
        }
        return id
    }
}
