import AppStoreEmulator
import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON

/// `storekeeper api <endpoint>`: the App Store Server API from the shell, against Apple or the emulator,
/// printing Apple's JSON with every signed field decoded beside it; and `storekeeper appstore api-key`,
/// which mints a key on a running emulator.
enum ServerAPICommands {
    static let connection: [Arguments.Spec.Option] = [
        .init(name: "key", valueName: "file.p8", help: "The API key's private key (default: $STOREKEEPER_API_KEY)."),
        .init(name: "key-id", valueName: "id", help: "The key's id (default: $STOREKEEPER_API_KEY_ID)."),
        .init(name: "issuer-id", valueName: "uuid", help: "The issuer id (default: $STOREKEEPER_API_ISSUER_ID)."),
        .init(name: "bundle-id", valueName: "id", help: "The app (default: $STOREKEEPER_BUNDLE_ID)."),
        .init(
            name: "environment", valueName: "production|sandbox",
            help: "Apple's production or sandbox host (default: sandbox)."),
        .init(
            name: "url", valueName: "url",
            help: "Another base URL instead, e.g. the emulator's http://127.0.0.1:8080 (its sandbox: …/sandbox)."),
        .init(
            name: "verify-root", valueName: "file",
            help: "Verify every signed field against this root (the emulator's jws-root.cer, or Apple's)."),
        AppStoreCommands.fieldOption,
    ]

    struct Endpoint: Sendable {
        var name: String
        var abstract: String
        var positionals: [(name: String, help: String)] = []
        var options: [Arguments.Spec.Option] = []
        var flags: [(name: String, help: String)] = []
        var run: @Sendable (AppStoreServerAPIClient, Arguments) async throws(AppStoreServerAPIError) -> JSONValue
    }

    static func id(_ arguments: Arguments, _ what: String = "transaction id") throws(AppStoreServerAPIError) -> String {
        guard let value = arguments.positional(0) else {
            throw AppStoreServerAPIError(kind: .invalidRequest, message: "give the \(what) as the argument")
        }
        return value
    }

    static func int(_ arguments: Arguments, _ name: String, default value: Int? = nil)
        throws(AppStoreServerAPIError) -> Int
    {
        guard let text = arguments.value(name) ?? value.map(String.init), let number = Int(text) else {
            throw AppStoreServerAPIError(kind: .invalidRequest, message: "--\(name) must be a whole number")
        }
        return number
    }

    static func date(_ arguments: Arguments, _ name: String) throws(AppStoreServerAPIError) -> Date? {
        guard let text = arguments.value(name) else { return nil }
        if let milliseconds = Int64(text), let date = EpochMilliseconds.date(milliseconds) { return date }
        guard let date = try? arguments.date(name) else {
            throw AppStoreServerAPIError(
                kind: .invalidRequest, message: "--\(name) must be an RFC 3339 date or UNIX milliseconds")
        }
        return date
    }

    static let endpoints: [Endpoint] =
        [
            Endpoint(
                name: "transaction", abstract: "Get Transaction Info.", positionals: [("id", "A transaction id.")],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    .object(try await client.transactionInfo(try id(arguments)).json)
                }),
            Endpoint(
                name: "history", abstract: "Get Transaction History (v2; --version 1 for v1).",
                positionals: [("id", "Any transaction id of the customer.")],
                options: [
                    .init(name: "revision", valueName: "token", help: "Continue from a page's revision."),
                    .init(name: "version", valueName: "1|2", help: "The endpoint's version (default 2)."),
                    .init(name: "product-id", valueName: "id", help: "Only this product.", repeatable: true),
                    .init(
                        name: "product-type", valueName: "type",
                        help: "AUTO_RENEWABLE, NON_RENEWABLE, CONSUMABLE or NON_CONSUMABLE.", repeatable: true),
                    .init(name: "sort", valueName: "ASCENDING|DESCENDING", help: "By last change (default ASCENDING)."),
                    .init(name: "start", valueName: "date", help: "Purchased at or after (RFC 3339 or ms)."),
                    .init(name: "end", valueName: "date", help: "Purchased before (RFC 3339 or ms)."),
                    .init(name: "revoked", valueName: "true|false", help: "Only refunded, or only not refunded."),
                    .init(name: "ownership", valueName: "PURCHASED|FAMILY_SHARED", help: "Only this ownership."),
                    .init(name: "group", valueName: "id", help: "Only this subscription group.", repeatable: true),
                ],
                flags: [("all", "Follow revision while hasMore and print every page.")],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    var query = TransactionHistoryQuery()
                    query.productIDs = arguments.all("product-id")
                    query.productTypes = arguments.all("product-type")
                    query.subscriptionGroupIdentifiers = arguments.all("group")
                    query.sort = arguments.value("sort").flatMap(TransactionHistoryQuery.Sort.init(rawValue:))
                    query.startDate = try date(arguments, "start")
                    query.endDate = try date(arguments, "end")
                    query.revoked = arguments.value("revoked").map { $0.lowercased() == "true" }
                    query.inAppOwnershipType = arguments.value("ownership")
                    let version = try int(arguments, "version", default: 2)
                    if arguments.flag("all") {
                        let pages = try await client.allTransactionHistory(
                            try id(arguments), query: query, version: version)
                        return .object(["pages": .array(pages.map { .object($0.json) })])
                    }
                    return .object(
                        try await client.transactionHistory(
                            try id(arguments), query: query, revision: arguments.value("revision"), version: version
                        ).json)
                }),
            Endpoint(
                name: "statuses", abstract: "Get All Subscription Statuses.",
                positionals: [("id", "Any transaction id of the customer.")],
                options: [
                    .init(
                        name: "status", valueName: "1-5", help: "Only subscriptions in this status.", repeatable: true)
                ],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    var statuses: [Int] = []
                    for text in arguments.all("status") {
                        guard let status = Int(text) else {
                            throw AppStoreServerAPIError(kind: .invalidRequest, message: "--status must be 1 to 5")
                        }
                        statuses.append(status)
                    }
                    return .object(try await client.subscriptionStatuses(try id(arguments), status: statuses).json)
                }),
            Endpoint(
                name: "refunds", abstract: "Get Refund History.",
                positionals: [("id", "Any transaction id of the customer.")],
                options: [.init(name: "revision", valueName: "token", help: "Continue from a page's revision.")],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    .object(
                        try await client.refundHistory(try id(arguments), revision: arguments.value("revision")).json)
                }),
            Endpoint(
                name: "order", abstract: "Look Up Order ID.",
                positionals: [("order-id", "The order id of an invoice.")],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    .object(try await client.lookUpOrder(try id(arguments, "order id")).json)
                }),
            Endpoint(
                name: "extend", abstract: "Extend a Subscription Renewal Date.",
                positionals: [("original-id", "The subscription's original transaction id.")],
                options: [
                    .init(name: "days", valueName: "1-90", help: "Days to extend by.", required: true),
                    .init(name: "reason", valueName: "0-3", help: "Extend reason code (default 0, undeclared)."),
                    .init(name: "request-id", valueName: "id", help: "Idempotency key (default: a new UUID)."),
                ],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    .object(
                        try await client.extendRenewalDate(
                            originalTransactionID: try id(arguments, "original transaction id"),
                            ExtendRenewalDateRequest(
                                extendByDays: try int(arguments, "days"),
                                extendReasonCode: try int(arguments, "reason", default: 0),
                                requestIdentifier: arguments.value("request-id") ?? UUID().uuidString.lowercased())
                        ).json)
                }),
            Endpoint(
                name: "mass-extend", abstract: "Extend Subscription Renewal Dates for All Active Subscribers.",
                options: [
                    .init(name: "product-id", valueName: "id", help: "The subscription product.", required: true),
                    .init(name: "days", valueName: "1-90", help: "Days to extend by.", required: true),
                    .init(name: "reason", valueName: "0-3", help: "Extend reason code (default 0)."),
                    .init(name: "request-id", valueName: "id", help: "Request identifier (default: a new UUID)."),
                    .init(name: "storefront", valueName: "ABC", help: "Only this storefront.", repeatable: true),
                ],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    let storefronts = arguments.all("storefront")
                    return .object(
                        try await client.extendRenewalDatesForAllActiveSubscribers(
                            MassExtendRenewalDateRequest(
                                extendByDays: try int(arguments, "days"),
                                extendReasonCode: try int(arguments, "reason", default: 0),
                                requestIdentifier: arguments.value("request-id") ?? UUID().uuidString.lowercased(),
                                productID: arguments.value("product-id") ?? "",
                                storefrontCountryCodes: storefronts.isEmpty ? nil : storefronts)
                        ).json)
                }),
            Endpoint(
                name: "mass-extend-status", abstract: "Get Status of Subscription Renewal Date Extensions.",
                options: [
                    .init(name: "product-id", valueName: "id", help: "The subscription product.", required: true),
                    .init(
                        name: "request-id", valueName: "id", help: "The mass extension's identifier.", required: true),
                ],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    .object(
                        try await client.massExtensionStatus(
                            productID: arguments.value("product-id") ?? "",
                            requestIdentifier: arguments.value("request-id") ?? ""
                        ).json)
                }),
            Endpoint(
                name: "test-notification", abstract: "Request a Test Notification.",
                run: { client, _ throws(AppStoreServerAPIError) in
                    .object(try await client.requestTestNotification().json)
                }),
            Endpoint(
                name: "test-notification-status", abstract: "Get Test Notification Status.",
                positionals: [("token", "The testNotificationToken.")],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    .object(try await client.testNotificationStatus(try id(arguments, "test notification token")).json)
                }),
            Endpoint(
                name: "notification-history", abstract: "Get Notification History.",
                options: [
                    .init(name: "start", valueName: "date", help: "From (RFC 3339 or ms).", required: true),
                    .init(name: "end", valueName: "date", help: "To (RFC 3339 or ms; default now)."),
                    .init(name: "type", valueName: "type", help: "Only this notificationType."),
                    .init(name: "subtype", valueName: "subtype", help: "Only this subtype (with --type)."),
                    .init(name: "transaction", valueName: "id", help: "Only this customer's (not with --type)."),
                    .init(name: "pagination-token", valueName: "token", help: "Continue from a page's token."),
                ],
                flags: [
                    ("only-failures", "Only notifications that never reached the server."), ("all", "Every page."),
                ],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    let request = NotificationHistoryRequest(
                        startDate: try date(arguments, "start") ?? Date(),
                        endDate: try date(arguments, "end") ?? Date(),
                        notificationType: arguments.value("type"), notificationSubtype: arguments.value("subtype"),
                        transactionID: arguments.value("transaction"),
                        onlyFailures: arguments.flag("only-failures") ? true : nil)
                    if arguments.flag("all") {
                        let pages = try await client.allNotificationHistory(request)
                        return .object(["pages": .array(pages.map { .object($0.json) })])
                    }
                    return .object(
                        try await client.notificationHistory(
                            request, paginationToken: arguments.value("pagination-token")
                        )
                        .json)
                }),
            Endpoint(
                name: "consumption", abstract: "Send Consumption Information (v2 body; --v1 for the deprecated one).",
                positionals: [("id", "The transaction id.")],
                options: [.init(name: "body", valueName: "json", help: "The request body as JSON.", required: true)],
                flags: [("v1", "Send to the deprecated v1 endpoint (integer-coded body).")],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    guard let text = arguments.value("body"),
                        let body = (try? JSONParser.parse(Array(text.utf8)))?.objectValue
                    else {
                        throw AppStoreServerAPIError(kind: .invalidRequest, message: "--body must be a JSON object")
                    }
                    let _: EmptyResponse = try await client.call(
                        "PUT",
                        "/inApps/\(arguments.flag("v1") ? "v1" : "v2")/transactions/consumption/\(try id(arguments))",
                        body: body)
                    return .object(["accepted": .bool(true)])
                }),
            Endpoint(
                name: "app-account-token", abstract: "Set App Account Token.",
                positionals: [("original-id", "The purchase's original transaction id.")],
                options: [.init(name: "token", valueName: "uuid", help: "The app account token.", required: true)],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    guard let token = arguments.value("token").flatMap(UUID.init(uuidString:)) else {
                        throw AppStoreServerAPIError(kind: .invalidRequest, message: "--token must be a UUID")
                    }
                    try await client.setAppAccountToken(
                        originalTransactionID: try id(arguments, "original transaction id"), token)
                    return .object(["appAccountToken": .string(token.uuidString.lowercased())])
                }),
            Endpoint(
                name: "finish", abstract: "Finish Transaction: the purchase was delivered (API 1.20).",
                positionals: [("id", "The transaction id.")],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    let transaction = try id(arguments)
                    try await client.finishTransaction(transaction)
                    return .object(["finished": .string(transaction)])
                }),
            Endpoint(
                name: "app-transaction", abstract: "Get App Transaction Info.",
                positionals: [("id", "Any transaction id of the customer.")],
                run: { client, arguments throws(AppStoreServerAPIError) in
                    .object(try await client.appTransactionInfo(try id(arguments)).json)
                }),
        ] + retentionEndpoints

    static func uuid(_ arguments: Arguments, _ what: String) throws(AppStoreServerAPIError) -> UUID {
        guard let value = arguments.positional(0), let uuid = UUID(uuidString: value) else {
            throw AppStoreServerAPIError(kind: .invalidRequest, message: "give the \(what) (a UUID) as the argument")
        }
        return uuid
    }

    static func required(_ arguments: Arguments, _ name: String) throws(AppStoreServerAPIError) -> String {
        guard let value = arguments.value(name) else {
            throw AppStoreServerAPIError(kind: .invalidRequest, message: "--\(name) is required")
        }
        return value
    }

    /// The Retention Messaging API.
    static let retentionEndpoints: [Endpoint] = [
        Endpoint(
            name: "upload-image", abstract: "Retention Messaging: Upload Image (a PNG without transparency).",
            positionals: [("image-id", "A UUID you choose for the image.")],
            options: [
                .init(name: "file", valueName: "image.png", help: "The PNG file.", required: true),
                .init(
                    name: "size", valueName: "FULL_SIZE|BULLET_POINT",
                    help: "3840 wide and 160-2160 high, or 1024 square (default FULL_SIZE)."),
            ],
            run: { client, arguments throws(AppStoreServerAPIError) in
                let image = try uuid(arguments, "image id")
                let path = try required(arguments, "file")
                guard let data = FileManager.default.contents(atPath: path), data.count <= 1 << 20 else {
                    throw AppStoreServerAPIError(
                        kind: .invalidRequest, message: "cannot read '\(path)' (a PNG of at most 1 MB)")
                }
                try await client.uploadImage(image, png: Array(data), size: arguments.value("size"))
                return .object(["imageIdentifier": .string(image.uuidString.lowercased())])
            }),
        Endpoint(
            name: "delete-image", abstract: "Retention Messaging: Delete Image.",
            positionals: [("image-id", "The image's UUID.")],
            run: { client, arguments throws(AppStoreServerAPIError) in
                try await client.deleteImage(try uuid(arguments, "image id"))
                return .object(["deleted": .bool(true)])
            }),
        Endpoint(
            name: "images", abstract: "Retention Messaging: Get Image List.",
            run: { client, _ throws(AppStoreServerAPIError) in .object(try await client.imageList().json) }),
        Endpoint(
            name: "upload-message", abstract: "Retention Messaging: Upload Message.",
            positionals: [("message-id", "A UUID you choose for the message.")],
            options: [
                .init(name: "header", valueName: "text", help: "At most 66 characters.", required: true),
                .init(name: "body", valueName: "text", help: "At most 144 characters.", required: true),
                .init(name: "image", valueName: "uuid", help: "A full-size image shown with it."),
                .init(name: "alt-text", valueName: "text", help: "The image's alternative text (with --image)."),
            ],
            run: { client, arguments throws(AppStoreServerAPIError) in
                let message = try uuid(arguments, "message id")
                var image: RetentionMessageRequest.Image?
                if let text = arguments.value("image") {
                    guard let id = UUID(uuidString: text) else {
                        throw AppStoreServerAPIError(kind: .invalidRequest, message: "--image must be a UUID")
                    }
                    image = .init(imageIdentifier: id, altText: arguments.value("alt-text") ?? "")
                }
                try await client.uploadMessage(
                    message,
                    RetentionMessageRequest(
                        header: try required(arguments, "header"), body: try required(arguments, "body"),
                        image: image))
                return .object(["messageIdentifier": .string(message.uuidString.lowercased())])
            }),
        Endpoint(
            name: "delete-message", abstract: "Retention Messaging: Delete Message.",
            positionals: [("message-id", "The message's UUID.")],
            run: { client, arguments throws(AppStoreServerAPIError) in
                try await client.deleteMessage(try uuid(arguments, "message id"))
                return .object(["deleted": .bool(true)])
            }),
        Endpoint(
            name: "messages", abstract: "Retention Messaging: Get Message List.",
            run: { client, _ throws(AppStoreServerAPIError) in .object(try await client.messageList().json) }),
        Endpoint(
            name: "default-message",
            abstract: "Retention Messaging: Get (or with --set, Configure; with --delete, Delete) Default Message.",
            positionals: [("product-id", "The subscription product.")],
            options: [
                .init(name: "locale", valueName: "locale", help: "Such as en-US.", required: true),
                .init(name: "set", valueName: "message-uuid", help: "Configure this approved message as the default."),
            ],
            flags: [("delete", "Delete the default message.")],
            run: { client, arguments throws(AppStoreServerAPIError) in
                let product = try id(arguments, "product id")
                let locale = try required(arguments, "locale")
                if arguments.flag("delete") {
                    try await client.deleteDefaultMessage(productID: product, locale: locale)
                    return .object(["deleted": .bool(true)])
                }
                if let text = arguments.value("set") {
                    guard let message = UUID(uuidString: text) else {
                        throw AppStoreServerAPIError(kind: .invalidRequest, message: "--set must be a UUID")
                    }
                    try await client.configureDefaultMessage(
                        productID: product, locale: locale, messageIdentifier: message)
                }
                return .object([
                    "messageIdentifier": (try await client.defaultMessage(productID: product, locale: locale))
                        .map(JSONValue.string) ?? .null
                ])
            }),
        Endpoint(
            name: "realtime-url",
            abstract: "Retention Messaging: Get (or with --set, Configure; with --delete, Delete) Realtime URL.",
            options: [.init(name: "set", valueName: "url", help: "Where the App Store asks which message to show.")],
            flags: [("delete", "Delete the realtime URL.")],
            run: { client, arguments throws(AppStoreServerAPIError) in
                if arguments.flag("delete") {
                    try await client.deleteRealtimeURL()
                    return .object(["deleted": .bool(true)])
                }
                if let url = arguments.value("set") { try await client.configureRealtimeURL(url) }
                return .object(["realtimeURL": (try await client.realtimeURL()).map(JSONValue.string) ?? .null])
            }),
        Endpoint(
            name: "performance-test",
            abstract:
                "Retention Messaging: Initiate Performance Test (or with --result, Get Performance Test Results).",
            positionals: [("id", "A sandbox subscription's original transaction id, or with --result the request id.")],
            flags: [("result", "Get the results of the test whose request id is given.")],
            run: { client, arguments throws(AppStoreServerAPIError) in
                let given = try id(arguments, "original transaction id or request id")
                if arguments.flag("result") { return .object(try await client.performanceTestResult(given).json) }
                return .object(try await client.initiatePerformanceTest(originalTransactionID: given).json)
            }),
    ]

    static func spec(_ endpoint: Endpoint) -> Arguments.Spec {
        Arguments.Spec(
            command: "storekeeper api \(endpoint.name)", abstract: endpoint.abstract, positionals: endpoint.positionals,
            options: endpoint.options + connection, flags: endpoint.flags,
            discussion: """
                Calls the App Store Server API with a fresh ES256 token from your In-App Purchase key. Point it at
                Apple (--environment) or at the emulator (--url http://127.0.0.1:8080/sandbox for its Sandbox
                accounts, the default, or http://127.0.0.1:8080 for Production ones; its keys come from
                'storekeeper appstore api-key'). Signed fields are decoded beside Apple's JSON (not verified
                unless --verify-root is given).
                """)
    }

    static func command(_ endpoint: Endpoint) -> @Sendable (Arguments, Console, Date) async throws -> Int32 {
        { arguments, console, _ in
            let client = try makeClient(arguments)
            let answer: JSONValue
            do {
                answer = try await endpoint.run(client, arguments)
            } catch let error as AppStoreServerAPIError {
                switch error.kind {
                case .transport: throw CommandError.unavailable(error.description)
                case .invalidRequest: throw CommandError.usage(error.message)
                default: throw CommandError.runtime(error.description)
                }
            }
            try AppStoreCommands.printAnswer(decoded(answer), arguments, console)
            return 0
        }
    }

    static func makeClient(_ arguments: Arguments) throws -> AppStoreServerAPIClient {
        let environment = ProcessInfo.processInfo.environment
        guard let keyPath = arguments.value("key") ?? environment["STOREKEEPER_API_KEY"] else {
            throw CommandError.usage("give the API key's .p8 file with --key (or $STOREKEEPER_API_KEY)")
        }
        guard let keyText = FileManager.default.contents(atPath: keyPath).map({ String(decoding: $0, as: UTF8.self) })
        else { throw CommandError.input("cannot read the key '\(keyPath)'") }
        let key: PrivateKey
        do { key = try PrivateKey(pem: keyText) } catch {
            throw CommandError.input("'\(keyPath)' is not a PEM private key (.p8)")
        }
        guard let keyID = arguments.value("key-id") ?? environment["STOREKEEPER_API_KEY_ID"],
            let issuerID = arguments.value("issuer-id") ?? environment["STOREKEEPER_API_ISSUER_ID"],
            let bundleID = arguments.value("bundle-id") ?? environment["STOREKEEPER_BUNDLE_ID"]
        else {
            throw CommandError.usage("give --key-id, --issuer-id and --bundle-id (or their $STOREKEEPER_… variables)")
        }
        let target: AppStoreServerAPIClient.Environment
        // Checked with --url too, where the URL chooses the server: a misspelt value is never passed over.
        if let given = arguments.value("environment"), !["production", "sandbox"].contains(given.lowercased()) {
            throw CommandError.usage("--environment must be production or sandbox")
        }
        if let url = arguments.value("url") {
            guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
                throw CommandError.usage("--url must start with http:// or https://")
            }
            target = .custom(url)
        } else {
            switch arguments.value("environment")?.lowercased() ?? "sandbox" {
            case "production": target = .production
            case "sandbox": target = .sandbox
            default: throw CommandError.usage("--environment must be production or sandbox")
            }
        }
        var verifier: SignedDataVerifier?
        if let root = arguments.value("verify-root") {
            verifier = try SignedDataVerifier(
                SignedDataVerifier.Configuration(trustedRoots: try loadCertificates([root]), bundleID: bundleID))
        }
        return AppStoreServerAPIClient(
            key: key, keyID: keyID, issuerID: issuerID, bundleID: bundleID, environment: target, verifier: verifier)
    }

    /// The answer with each `signed…` member's payload decoded beside it (`signedTransactionInfo` →
    /// `transactionInfo`, `signedTransactions` → `transactions`, `signedPayload` → `payload`), nested
    /// signed fields too.
    static func decoded(_ value: JSONValue) -> JSONValue {
        if let array = value.arrayValue { return .array(array.map(decoded)) }
        guard let object = value.objectValue else { return value }
        var result = JSONObject()
        for member in object.members {
            result[member.key] = decoded(member.value)
            guard member.key.hasPrefix("signed"), member.key != "signedDate" else { continue }
            let rest = member.key.dropFirst("signed".count)
            guard let first = rest.first else { continue }
            let name = first.lowercased() + rest.dropFirst()
            if let jws = member.value.stringValue, let payload = AppStoreServerAPIClient.decodedPayload(jws) {
                result[name] = decoded(.object(payload))
            } else if let list = member.value.arrayValue {
                result[name] = .array(
                    list.map { item in
                        item.stringValue.flatMap(AppStoreServerAPIClient.decodedPayload).map { decoded(.object($0)) }
                            ?? .null
                    })
            }
        }
        return .object(result)
    }

    // MARK: - appstore api-key

    static let apiKeySpec = Arguments.Spec(
        command: "storekeeper appstore api-key",
        abstract: "Mint an App Store Server API key for an app on a running emulator.",
        options: [
            AppStoreCommands.urlOption, AppStoreCommands.tokenOption, AppStoreCommands.bundleOption,
            .init(
                name: "out", valueName: "file.p8",
                help: "Write the private key here (mode 0600) instead of printing it."),
            AppStoreCommands.fieldOption,
        ])

    static func apiKey(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let bundle = AppStoreCommands.bundleID(arguments)
        var answer = try await AppStoreCommands.fetch(arguments, "POST", "/_emulator/v1/apps/\(bundle)/api-keys", [:])
        if let out = arguments.value("out"), let key = answer["privateKey"]?.stringValue {
            do { try PrivateFiles.create(out, contents: Array(key.utf8)) } catch {
                throw CommandError.input("cannot write '\(out)' (it must not exist yet): \(error)")
            }
            if var object = answer.objectValue {
                object["privateKey"] = nil
                object["keyFile"] = .string(out)
                answer = .object(object)
            }
        }
        try AppStoreCommands.printAnswer(answer, arguments, console)
        return 0
    }
}
