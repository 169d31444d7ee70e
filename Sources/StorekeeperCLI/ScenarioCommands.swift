import AppStoreEmulator
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import Synchronization

/// `storekeeper appstore scenario run FILE…`: declarative lifecycle stories run against an embedded emulator
/// (in memory, a fixed start date, identifiers from a seed) or a running one (`--url`), each step a route of
/// the control plane, each expectation checked against the notifications the emulator wrote (verified with
/// its root) and the subscription's state.
enum ScenarioCommands {
    static let runSpec = Arguments.Spec(
        command: "storekeeper appstore scenario run",
        abstract: "Run lifecycle scenario files against an embedded emulator and report each expectation.",
        positionals: [("file ...", "Scenario files (JSON); several may be given.")],
        options: [
            .init(name: "format", valueName: "text|json", help: "The report (default: text)."),
            .init(
                name: "url", valueName: "url",
                help: "Run against this running emulator instead of an embedded one (it needs a notification URL set)."),
            AppStoreCommands.tokenOption, AppStoreCommands.bundleOption,
            .init(
                name: "max-seconds", valueName: "s",
                help: "Stop a scenario that runs longer than this, as failed (default: 60; at most 3600)."),
            .init(
                name: "max-events", valueName: "n",
                help:
                    "Stop a scenario whose advance steps run more renewals and expirations than this, as failed (default: 20000; at most 1000000)."
            ),
        ],
        discussion: """
            A scenario: {"name", "seed"?, "environment"?: "Sandbox"|"Production", "storekit"?: file, \
            "steps": [...]}. Steps: {"buy": productId}, {"advance": "P1M"}, {"billing": {"retryOnRenewal", \
            "gracePeriod"}}, {"autoRenew": bool}, {"expire": true}, {"renew": true}, {"refund": "OTHER"|"APP_ISSUE"}, \
            {"refundReversal": true}, {"resolveIssue": true}, {"priceIncrease": {"product", "requiresConsent", "displayPrice"}}, \
            {"priceConsent": bool}, {"availability": {"product", "forSale"}}, {"retentionRequest": true or {"locale", \
            "accept"}} (a customer on the cancellation page), and {"expect": {"notifications": \
            ["TYPE/SUBTYPE", ...] (exactly those written since the last expect, in order), "status": 1-5, \
            "autoRenew": bool, "expirationIntent": 1-5, "productId": id, "entitled": bool, "billingPlanType", \
            "billingPeriodNumber", "commitmentAutoRenew", "retentionOutcome"}}. Exit 0 when every \
            expectation holds, 1 otherwise. The embedded emulator sells from the scenario's "storekit" (a path \
            relative to the scenario; default: the built-in catalogue). With --url, the steps go to a running \
            emulator (its catalogue, its clock, its notification settings: expectations on notifications need a \
            receiver URL set). See examples/scenarios/ and examples/Products.scenario.json.
            """)

    /// What a scenario file holds.
    struct Scenario {
        var name: String
        var seed: UInt64
        var environment: Environment
        var steps: [JSONObject]
        /// The scenario's own catalogue (`"storekit"`, a path relative to the scenario), which the embedded
        /// emulator sells from; nil: the built-in one.
        var catalog: StoreKitConfiguration? = nil
    }

    static let maxFile = 1 << 20
    static let maxSteps = 1_000
    /// A run is bounded like the control plane it drives: at most this long, and at most this many renewals
    /// and expirations run by its `advance` steps (what the store grows by); past either it stops and fails.
    static let maxRunTime = 60
    static let maxRunEvents = 20_000

    /// A run's bounds: `--max-seconds` and `--max-events`, within their ranges.
    struct Bounds {
        var seconds = maxRunTime
        var events = maxRunEvents

        init() {}

        init(_ arguments: Arguments) throws {
            if let text = arguments.value("max-seconds") {
                guard let value = Int(text), (1...3_600).contains(value) else {
                    throw CommandError.usage("--max-seconds must be 1 to 3600")
                }
                seconds = value
            }
            if let text = arguments.value("max-events") {
                guard let value = Int(text), (1...1_000_000).contains(value) else {
                    throw CommandError.usage("--max-events must be 1 to 1000000")
                }
                events = value
            }
        }
    }

    static func run(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var paths: [String] = []
        var index = 0
        while let path = arguments.positional(index) {
            paths.append(path)
            index += 1
        }
        guard !paths.isEmpty else { throw CommandError.usage("Missing expected argument '<file>'") }
        let format = arguments.value("format") ?? "text"
        guard ["text", "json"].contains(format) else { throw CommandError.usage("--format must be text or json") }
        let bounds = try Bounds(arguments)
        var failed = false
        var skipped = 0
        var reports: [JSONValue] = []
        // One data directory for the run: the emulator's certificates are made once, state is in memory.
        let directory = try ScratchDirectory.make("storekeeper-scenario")
        defer { try? FileManager.default.removeItem(at: directory) }
        for path in paths {
            let scenario = try load(path)
            let outcome: (passed: Bool, lines: [String])
            if arguments.value("url") == nil, scenario.steps.contains(where: { $0["retentionRequest"] != nil }) {
                // Nothing in an embedded emulator answers the cancellation page: storekeeper dev's server does.
                let reason = "needs --url of a running storekeeper dev (its purchase server answers retentionRequest)"
                if format == "json" {
                    reports.append(
                        .object([
                            "file": .string(path), "name": .string(scenario.name), "passed": .null,
                            "skipped": .string(reason), "lines": .array([]),
                        ]))
                } else {
                    console.write("SKIP \(scenario.name) (\(path)): \(reason)\n")
                }
                skipped += 1
                continue
            }
            if let url = arguments.value("url") {
                guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
                    throw CommandError.usage("--url must start with http:// or https://, e.g. http://127.0.0.1:8080")
                }
                let target = remote(
                    base: url,
                    token: arguments.value("token") ?? ProcessInfo.processInfo.environment["STOREKEEPER_TOKEN"],
                    bundleID: arguments.value("bundle-id") ?? ProcessInfo.processInfo.environment[
                        "STOREKEEPER_BUNDLE_ID"]
                        ?? DefaultCatalog.bundleID)
                outcome = try await run(scenario, target: target, bounds: bounds)
            } else {
                let (target, store) = try await embedded(scenario, directory: directory)
                defer { store.close() }
                outcome = try await run(scenario, target: target, bounds: bounds)
            }
            failed = failed || !outcome.passed
            if format == "json" {
                reports.append(
                    .object([
                        "file": .string(path), "name": .string(scenario.name), "passed": .bool(outcome.passed),
                        "lines": .array(outcome.lines.map(JSONValue.string)),
                    ]))
            } else {
                console.write("\(outcome.passed ? "PASS" : "FAIL") \(scenario.name) (\(path))\n")
                for line in outcome.lines { console.write("  \(line)\n") }
            }
        }
        if format == "json" { console.write(JSONWriter.string(.array(reports), pretty: true) + "\n") }
        // Nothing run at all (every file skipped) is not a pass.
        return failed || skipped == paths.count ? 1 : 0
    }

    static func load(_ path: String) throws -> Scenario {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw CommandError.input("cannot read '\(path)'") }
        defer { try? handle.close() }
        let bytes = try readLimited(handle, limit: maxFile, name: "'\(path)'")
        let json: JSONValue
        do { json = try JSONParser.parse(bytes) } catch { throw CommandError.input("'\(path)' is not JSON: \(error)") }
        guard let object = json.objectValue, let steps = object["steps"]?.arrayValue else {
            throw CommandError.input("'\(path)' is not a scenario: an object with a \"steps\" array")
        }
        guard steps.count <= maxSteps else { throw CommandError.input("'\(path)' has more than \(maxSteps) steps") }
        let name = object["environment"]?.stringValue ?? Environment.sandbox.rawValue
        guard let environment = Environment(name: name, among: Environment.customerEnvironments) else {
            throw CommandError.input("'\(path)': environment '\(name)' is not Sandbox or Production")
        }
        var catalog: StoreKitConfiguration?
        if let member = object["storekit"] {
            guard let relative = member.stringValue, !relative.isEmpty else {
                throw CommandError.input("'\(path)': \"storekit\" is the path of a .storekit file")
            }
            let file = URL(
                fileURLWithPath: relative, relativeTo: URL(fileURLWithPath: path).deletingLastPathComponent())
            guard let handle = FileHandle(forReadingAtPath: file.path) else {
                throw CommandError.input(
                    "'\(path)': cannot read its storekit '\(relative)' (\(file.standardized.path))")
            }
            defer { try? handle.close() }
            let bytes = try readLimited(handle, limit: 8 << 20, name: "'\(file.path)'")
            do { catalog = try StoreKitConfiguration(data: bytes) } catch {
                throw CommandError.input(
                    "'\(path)': its storekit '\(relative)' is not a catalogue: \(error.description)")
            }
        }
        return Scenario(
            name: object["name"]?.stringValue ?? URL(fileURLWithPath: path).lastPathComponent,
            seed: UInt64(max(0, object["seed"]?.int64Value ?? 1)), environment: environment,
            steps: try steps.enumerated().map { index, step in
                guard let step = step.objectValue, step.members.count == 1 else {
                    throw CommandError.input("'\(path)': step \(index + 1) must be an object with one member")
                }
                return step
            }, catalog: catalog)
    }

    /// A deterministic source of bytes for the emulator's identifiers.
    final class SeededBytes: Sendable {
        private let state: Mutex<UInt64>
        init(seed: UInt64) { state = Mutex(seed) }
        func next(_ count: Int) -> [UInt8] {
            state.withLock { state in
                (0..<count).map { _ in
                    state &+= 0x9E37_79B9_7F4A_7C15
                    var z = state
                    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                    return UInt8(truncatingIfNeeded: z ^ (z >> 31))
                }
            }
        }
    }

    static let start = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z

    /// Where the steps go: an emulator's control plane, in-process (its responder, no socket) or at `--url`.
    /// One path for both: every step is a route of `/_emulator/v1`.
    struct Target: Sendable {
        let send: @Sendable (String, String, JSONObject?) async throws -> (Int, JSONValue)
        let bundleID: String

        /// The answer of a route that succeeded; a refusal is thrown with the emulator's message.
        @discardableResult
        func call(_ method: String, _ path: String, _ body: JSONObject? = nil) async throws -> JSONValue {
            let (status, answer) = try await send(method, path, body)
            guard (200..<300).contains(status) else {
                throw Refused(message: answer["error"]?["message"]?.stringValue ?? "HTTP \(status)")
            }
            return answer
        }
    }

    /// A step the emulator refused.
    struct Refused: Error { let message: String }

    static func parse(_ body: [UInt8]) -> JSONValue {
        body.isEmpty ? .null : ((try? JSONParser.parse(body)) ?? .string(String(decoding: body, as: UTF8.self)))
    }

    /// A count an `advance` answer says it ran (`ran.renewals`, `ran.expirations`), within 0 and a billion:
    /// more than any run's bound, and never a sum that overflows.
    static func ranCount(_ answer: JSONValue, _ name: String) -> Int64 {
        min(max(answer["ran"]?[name]?.int64Value ?? 0, 0), 1_000_000_000)
    }

    /// An emulator of the run's own: in memory, from a fixed date, identifiers from the scenario's seed;
    /// notifications are written (and read back from the history) for a receiver that is nobody.
    static func embedded(_ scenario: Scenario, directory: URL) async throws -> (Target, AppStore) {
        let bytes = SeededBytes(seed: scenario.seed)
        let bundleID = DefaultCatalog.bundleID
        let catalog = try scenario.catalog ?? StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: bundleID)], dataDirectory: directory,
            rate: catalog.settings.timeRate ?? .monthlyRenewalEveryFiveMinutes, storage: InMemoryEmulatorStorage(),
            realNow: { start },
            randomBytes: { bytes.next($0) })
        let nobody = "http://127.0.0.1:9/scenario"
        try await store.setNotifications(
            bundleID: bundleID, AppNotifications(productionURLs: [nobody], sandboxURLs: [nobody], retrySchedule: []))
        let responder = EmulatorRoutes(store).responder()
        let target = Target(
            send: { method, path, body in
                var headers: [(name: String, value: String)] = [("Host", "127.0.0.1:8080")]
                if method != "GET" { headers.append(("Content-Type", "application/json")) }
                let response = await responder.respond(
                    to: HTTPRequest(
                        method: method, target: path, headers: headers,
                        body: body.map { JSONWriter.bytes(.object($0)) } ?? []))
                return (response.status, parse(response.body))
            }, bundleID: bundleID)
        return (target, store)
    }

    /// A running emulator at `base` (`--url`, with `--token`).
    static func remote(base: String, token: String?, bundleID: String) -> Target {
        Target(
            send: { method, path, body in
                var headers: [(name: String, value: String)] = [("Accept", "application/json")]
                if method != "GET" { headers.append(("Content-Type", "application/json")) }
                if let token { headers.append(("Authorization", "Bearer " + token)) }
                do {
                    let response = try await HTTPClient(timeout: .seconds(60)).send(
                        method, base + path, headers: headers, body: body.map { JSONWriter.bytes(.object($0)) } ?? [])
                    return (response.status, parse(response.body))
                } catch let error as HTTPClientError {
                    throw CommandError.unavailable(
                        "cannot reach the emulator at \(HTTPClient.printable(base)): \(error.code) (\(error.reason))")
                }
            }, bundleID: bundleID)
    }

    /// A customer: an account in the scenario's environment, a device, the app installed.
    static func customer(_ target: Target, _ environment: Environment) async throws -> (account: String, device: String)
    {
        let account = try await target.call(
            "POST", "/_emulator/v1/accounts",
            ["environment": .string(environment.rawValue), "storefront": .string("USA")])
        let accountID = account["accountId"]?.stringValue ?? ""
        let device = try await target.call("POST", "/_emulator/v1/devices", ["accountId": .string(accountID)])
        let deviceID = device["deviceId"]?.stringValue ?? ""
        try await target.call("POST", "/_emulator/v1/devices/\(deviceID)/apps/\(target.bundleID)/install", [:])
        return (accountID, deviceID)
    }

    /// The routes behind the subscription verbs, and the member of the body each takes (nil: none).
    static let verbRoutes: [String: (route: String, member: String?)] = [
        "autoRenew": ("auto-renew", "enabled"), "expire": ("expire", nil), "renew": ("renew", nil),
        "refundReversal": ("refund-reversal", nil), "resolveIssue": ("resolve-issue", nil),
        "priceConsent": ("price-consent", "consent"), "refund": ("refund", "reason"),
        "refundRequest": ("refund-request", "reason"), "refundDecision": ("refund-decision", "approved"),
    ]

    static var subscriptionVerbs: Set<String> { Set(verbRoutes.keys) }

    /// Runs one scenario; every step and expectation becomes a report line.
    static func run(_ scenario: Scenario, target: Target, bounds: Bounds = Bounds()) async throws -> (
        passed: Bool, lines: [String]
    ) {
        let certificates = try await target.call("GET", "/_emulator/v1/certificates")
        guard let rootText = certificates["jwsRoot"]?.stringValue, let rootDER = Data(base64Encoded: rootText) else {
            throw CommandError.runtime("the emulator did not give its JWS root")
        }
        let verifier = try SignedDataVerifier(
            SignedDataVerifier.Configuration(trustedRoots: [try Certificate(derEncoded: Array(rootDER))]))
        let app = "/_emulator/v1/devices/{device}/apps/\(target.bundleID)"
        let buyer = try await customer(target, scenario.environment)
        // A running emulator writes other customers' notifications too: the scenario's are those of its own
        // purchases (their original transactions) and of its family members' access.
        var ours: Set<String> = []
        let history = History()
        var seen = 0
        var lines: [String] = []
        var passed = true
        var subscription: String?
        /// The transaction of the last refund or refund request.
        var refunded: String?
        /// What the last retentionRequest step showed (`message`, `alternateProduct`, `promotionalOffer`,
        /// `defaultMessage`, `none`).
        var retentionOutcome: JSONValue?
        var members: [String: (account: String, device: String)] = [:]
        var familyID: String?
        func entitledProducts(_ device: String) async throws -> [String] {
            let answer = try await target.call(
                "GET", app.replacingOccurrences(of: "{device}", with: device) + "/entitlements")
            return (answer["signedTransactions"]?.arrayValue ?? []).compactMap {
                $0.stringValue.flatMap { try? CompactJWS($0).payload["productId"]?.stringValue }
            }
        }
        let deadline = ContinuousClock.now + .seconds(bounds.seconds)
        var eventsRun: Int64 = 0
        for (index, step) in scenario.steps.enumerated() {
            let number = index + 1
            let (verb, value) = (step.members[0].key, step.members[0].value)
            guard ContinuousClock.now < deadline, eventsRun <= bounds.events else {
                passed = false
                lines.append(
                    "\(number). ✘ stopped: a scenario runs for at most \(bounds.seconds) s and \(bounds.events) "
                        + "renewals and expirations (--max-seconds, --max-events; this one reached \(eventsRun))")
                break
            }
            do {
                switch verb {
                case "buy":
                    // A product id, or {"product", "offerCode"?, "winBackOfferId"?, "billingPlanType"?}.
                    guard let product = value.stringValue ?? value["product"]?.stringValue else {
                        throw ScenarioError(
                            "buy takes a product id, or {\"product\", \"offerCode\" or \"winBackOfferId\"}")
                    }
                    var body: JSONObject = ["productId": .string(product)]
                    var with = ""
                    if let code = value["offerCode"]?.stringValue {
                        body["offerCode"] = .string(code)
                        with = " with offer code \(code)"
                    }
                    if let id = value["winBackOfferId"]?.stringValue {
                        body["winBackOfferId"] = .string(id)
                        with = " with win-back offer \(id)"
                    }
                    if let plan = value["billingPlanType"]?.stringValue {
                        body["billingPlanType"] = .string(plan)
                        with += " on the \(plan) plan"
                    }
                    let answer = try await target.call(
                        "POST", app.replacingOccurrences(of: "{device}", with: buyer.device) + "/payments", body)
                    if let jws = answer["jwsRepresentation"]?.stringValue,
                        let payload = try? CompactJWS(jws).payload,
                        payload["type"]?.stringValue == ProductKind.autoRenewable.rawValue
                    {
                        let original = payload["originalTransactionId"]?.stringValue
                        if original != subscription { refunded = nil }
                        subscription = original
                    }
                    if let jws = answer["jwsRepresentation"]?.stringValue,
                        let original = (try? CompactJWS(jws).payload)?["originalTransactionId"]?.stringValue
                    {
                        ours.insert(original)
                    }
                    lines.append("\(number). buy \(product)\(with)")
                case "advance":
                    guard let text = value.stringValue, StorePeriod(text) != nil else {
                        throw ScenarioError("advance takes an ISO 8601 duration such as P1M")
                    }
                    let answer = try await target.call("POST", "/_emulator/v1/clock", ["advance": .string(text)])
                    // Counts as the target says them, each bounded (a target is another process).
                    let (renewals, expirations) = (ranCount(answer, "renewals"), ranCount(answer, "expirations"))
                    eventsRun += renewals + expirations
                    lines.append("\(number). advance \(text): \(renewals) renewals, \(expirations) expirations")
                case "billing":
                    var body = JSONObject()
                    if let retry = value["retryOnRenewal"]?.boolValue { body["billingRetryOnRenewal"] = .bool(retry) }
                    if let grace = value["gracePeriod"]?.boolValue { body["billingGracePeriod"] = .bool(grace) }
                    try await target.call("POST", "/_emulator/v1/accounts/\(buyer.account)/settings", body)
                    lines.append("\(number). billing \(JSONWriter.string(value))")
                case "priceIncrease":
                    guard let product = value["product"]?.stringValue else {
                        throw ScenarioError("priceIncrease takes {\"product\", \"requiresConsent\", \"displayPrice\"}")
                    }
                    var body: JSONObject = ["requiresConsent": .bool(value["requiresConsent"]?.boolValue ?? true)]
                    if let price = value["displayPrice"]?.stringValue { body["displayPrice"] = .string(price) }
                    try await target.call("POST", "/_emulator/v1/products/\(product)/price-increase", body)
                    lines.append("\(number). price increase for \(product)")
                case "availability":
                    guard let product = value["product"]?.stringValue, let forSale = value["forSale"]?.boolValue else {
                        throw ScenarioError("availability takes {\"product\", \"forSale\"}")
                    }
                    try await target.call(
                        "POST", "/_emulator/v1/products/\(product)/availability", ["forSale": .bool(forSale)])
                    lines.append("\(number). \(product) \(forSale ? "back on sale" : "off sale")")
                case "family":
                    guard let names = value.arrayValue?.compactMap(\.stringValue), !names.isEmpty,
                        names.count == value.arrayValue?.count
                    else { throw ScenarioError("family takes the names of the other members, e.g. [\"sister\"]") }
                    for name in names where members[name] == nil {
                        members[name] = try await customer(target, scenario.environment)
                    }
                    let family = try await target.call(
                        "POST", "/_emulator/v1/families",
                        [
                            "organizer": .string(buyer.account),
                            "members": .array(names.compactMap { members[$0].map { .string($0.account) } }),
                        ])
                    familyID = family["familyId"]?.stringValue
                    lines.append("\(number). family with \(names.joined(separator: ", "))")
                case "familyLeave":
                    guard let name = value.stringValue, let member = members[name], let familyID else {
                        throw ScenarioError("familyLeave takes the name of a member of the family")
                    }
                    try await target.call("DELETE", "/_emulator/v1/families/\(familyID)/members/\(member.account)")
                    lines.append("\(number). \(name) leaves the family")
                case "retentionRequest":
                    // The customer opens the cancellation page: the App Store asks the app's realtime URL.
                    guard let original = subscription else {
                        throw ScenarioError("'retentionRequest' needs a subscription: buy one first")
                    }
                    var body = JSONObject()
                    if let locale = value["locale"]?.stringValue { body["locale"] = .string(locale) }
                    if let accept = value["accept"]?.boolValue { body["accept"] = .bool(accept) }
                    guard value.boolValue == true || value.objectValue != nil else {
                        throw ScenarioError("retentionRequest takes true, or {\"locale\"?, \"accept\"?}")
                    }
                    let answer = try await target.call(
                        "POST", "/_emulator/v1/transactions/\(original)/retention-request", body)
                    retentionOutcome = answer["outcome"]
                    lines.append(
                        "\(number). retention request: \(answer["outcome"]?.stringValue ?? "?")"
                            + (answer["milliseconds"]?.doubleValue.map { " in \($0) ms" } ?? ""))
                case "expect":
                    guard let expected = value.objectValue else { throw ScenarioError("expect takes an object") }
                    for member in members.values {
                        let queue = try await target.call(
                            "GET", app.replacingOccurrences(of: "{device}", with: member.device) + "/transactions")
                        for entry in queue["transactions"]?.arrayValue ?? [] {
                            if let original = entry["originalTransactionIdentifier"]?.stringValue {
                                ours.insert(original)
                            }
                        }
                    }
                    try await history.update(target, scenario.environment, verifier)
                    let mine = history.notices.filter { $0.original.map(ours.contains) ?? false }.map(\.name)
                    let fresh = Array(mine.dropFirst(seen))
                    seen = mine.count
                    var problems: [String] = []
                    if let list = expected["notifications"]?.arrayValue ?? expected["notification"].map({ [$0] }) {
                        let names = list.compactMap(\.stringValue)
                        if names != fresh { problems.append("notifications \(fresh), expected \(names)") }
                    }
                    let state = try await subscription.asyncMap { original in
                        try await target.call("GET", "/_emulator/v1/transactions/\(original)")["subscription"]
                    }.flatMap { $0 }
                    func compare(_ name: String, _ actual: JSONValue?, as key: String) {
                        guard let wanted = expected[name] else { return }
                        if actual != wanted {
                            problems.append(
                                "\(name) \(actual.map { JSONWriter.string($0) } ?? "none"), expected \(JSONWriter.string(wanted))"
                            )
                        }
                    }
                    compare("status", state?["status"], as: "status")
                    compare("autoRenew", state?["autoRenew"], as: "autoRenew")
                    compare("expirationIntent", state?["expirationIntent"], as: "expirationIntent")
                    compare("productId", state?["productId"], as: "productId")
                    compare("billingPlanType", state?["billingPlanType"], as: "billingPlanType")
                    compare(
                        "billingPeriodNumber", state?["commitment"]?["billingPeriodNumber"], as: "billingPeriodNumber")
                    compare("commitmentAutoRenew", state?["commitment"]?["autoRenew"], as: "commitmentAutoRenew")
                    compare("retentionOutcome", retentionOutcome, as: "retentionOutcome")
                    if let entitled = expected["entitled"]?.boolValue {
                        let products = try await entitledProducts(buyer.device)
                        let has = state?["productId"]?.stringValue.map { products.contains($0) } ?? !products.isEmpty
                        if has != entitled { problems.append("entitled \(has), expected \(entitled)") }
                    }
                    for (name, wanted) in expected["memberEntitled"]?.objectValue?.members ?? [] {
                        guard let member = members[name], let entitled = wanted.boolValue else {
                            throw ScenarioError("memberEntitled names family members with true or false")
                        }
                        let has = !(try await entitledProducts(member.device)).isEmpty
                        if has != entitled { problems.append("\(name) entitled \(has), expected \(entitled)") }
                    }
                    if problems.isEmpty {
                        lines.append("\(number). ✔ \(JSONWriter.string(value))")
                    } else {
                        passed = false
                        lines.append("\(number). ✘ \(problems.joined(separator: "; "))")
                    }
                default:
                    guard let (route, member) = verbRoutes[verb] else {
                        throw ScenarioError(
                            "unknown step '\(verb)' (known: buy, advance, billing, priceIncrease, availability, family, familyLeave, "
                                + "retentionRequest, "
                                + "expect, " + verbRoutes.keys.sorted().joined(separator: ", ") + ")")
                    }
                    guard let original = subscription else {
                        throw ScenarioError("'\(verb)' needs a subscription: buy one first")
                    }
                    var body = JSONObject()
                    if let member {
                        switch value {
                        case .bool, .string: body[member] = value
                        default: throw ScenarioError("\(verb) takes true or false, or a reason")
                        }
                    }
                    // `"expire": true` and the like take no body; a reason defaults to the emulator's.
                    if member == "reason", value.stringValue == nil { body = [:] }
                    // A refund, or a refund request, is of the current period (a past one's leaves the
                    // subscription as it is); the decision and the reversal are of the period refunded.
                    var transaction = original
                    switch verb {
                    case "refund", "refundRequest":
                        let answer = try await target.call("GET", "/_emulator/v1/transactions/\(original)")
                        guard let latest = answer["subscription"]?["latestTransactionId"]?.stringValue else {
                            throw ScenarioError(
                                "'\(verb)' needs the subscription's current period: the emulator did not name it "
                                    + "(latestTransactionId; an older emulator?)")
                        }
                        transaction = latest
                        refunded = latest
                    case "refundDecision", "refundReversal": transaction = refunded ?? original
                    default: break
                    }
                    try await target.call("POST", "/_emulator/v1/transactions/\(transaction)/\(route)", body)
                    lines.append("\(number). \(verb) \(JSONWriter.string(value))")
                }
            } catch let error as ScenarioError {
                passed = false
                lines.append("\(number). ✘ \(error.message)")
                break
            } catch let error as Refused {
                passed = false
                lines.append("\(number). ✘ \(verb) was refused: \(error.message)")
                break
            }
        }
        return (passed, lines)
    }

    struct ScenarioError: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }

    /// The app's notifications in `environment`, read and verified once each: every `expect` reads only
    /// the pages written since the previous one (the history's `after` cursor).
    final class History {
        private(set) var notices: [(name: String, original: String?)] = []
        private var cursor: String?

        func update(_ target: Target, _ environment: Environment, _ verifier: SignedDataVerifier) async throws {
            for _ in 0..<1_000 {
                var path =
                    "/_emulator/v1/apps/\(target.bundleID)/notifications/history?environment=\(environment.rawValue)"
                if let cursor { path += "&after=\(cursor)" }
                let page = try await target.call("GET", path)
                for entry in page["notificationHistory"]?.arrayValue ?? [] {
                    guard let signed = entry["signedPayload"]?.stringValue else { continue }
                    let verified = verifier.verify(signed, as: .notification, now: start.addingTimeInterval(1))
                    let payload = verified.decodedPayload ?? [:]
                    let type = payload["notificationType"]?.stringValue ?? "?"
                    let name = payload["subtype"]?.stringValue.map { "\(type)/\($0)" } ?? type
                    notices.append(
                        (
                            verified.isOK ? name : "\(name) (\(verified.status.rawValue))",
                            payload["data"]?["transactionInfo"]?["originalTransactionId"]?.stringValue
                        ))
                }
                if let next = page["after"]?.stringValue { cursor = next }
                guard page["hasMore"]?.boolValue == true else { break }
            }
        }
    }
}

extension Optional {
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let value = self else { return nil }
        return try await transform(value)
    }
}
