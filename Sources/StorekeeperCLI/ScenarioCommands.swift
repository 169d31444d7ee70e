import AppStoreEmulator
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperJSON
import SubscriptionLifecycle
import Synchronization

/// `storekeeper appstore scenario run FILE…`: declarative lifecycle stories run against an embedded emulator
/// (in memory, a fixed start date, identifiers from a seed), each expectation checked against the
/// notifications the emulator wrote (verified with its root) and the subscription's state.
enum ScenarioCommands {
    static let runSpec = Arguments.Spec(
        command: "storekeeper appstore scenario run",
        abstract: "Run lifecycle scenario files against an embedded emulator and report each expectation.",
        positionals: [("file ...", "Scenario files (JSON); several may be given.")],
        options: [.init(name: "format", valueName: "text|json", help: "The report (default: text).")],
        discussion: """
            A scenario: {"name", "seed"?, "environment"?: "Sandbox"|"Production", "storekit"?: file, \
            "steps": [...]}. Steps: {"buy": productId}, {"advance": "P1M"}, {"billing": {"retryOnRenewal", \
            "gracePeriod"}}, {"autoRenew": bool}, {"expire": true}, {"renew": true}, {"refund": "OTHER"|"APP_ISSUE"}, \
            {"refundReversal": true}, {"resolveIssue": true}, {"priceIncrease": {"product", "requiresConsent"}}, \
            {"priceConsent": bool}, {"availability": {"product", "forSale"}}, and {"expect": {"notifications": \
            ["TYPE/SUBTYPE", ...] (exactly those written since the last expect, in order), "status": 1-5, \
            "autoRenew": bool, "expirationIntent": 1-5, "productId": id, "entitled": bool}}. Exit 0 when every \
            expectation holds, 1 otherwise. See examples/scenarios/.
            """)

    /// What a scenario file holds.
    struct Scenario {
        var name: String
        var seed: UInt64
        var environment: Environment
        var steps: [JSONObject]
    }

    static let maxFile = 1 << 20
    static let maxSteps = 1_000

    static func run(_ arguments: Arguments, console: Console, now: Date) throws -> Int32 {
        var paths: [String] = []
        var index = 0
        while let path = arguments.positional(index) {
            paths.append(path)
            index += 1
        }
        guard !paths.isEmpty else { throw UsageError("Missing expected argument '<file>'") }
        let format = arguments.value("format") ?? "text"
        guard ["text", "json"].contains(format) else { throw UsageError("--format must be text or json") }
        var failed = false
        var reports: [JSONValue] = []
        // One data directory for the run: the emulator's certificates are made once, state is in memory.
        let directory = try FileManager.default.url(
            for: .itemReplacementDirectory, in: .userDomainMask, appropriateFor: URL(fileURLWithPath: "/tmp"),
            create: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for path in paths {
            let scenario = try load(path)
            let outcome = try blocking { try await run(scenario, directory: directory) }
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
        return failed ? 1 : 0
    }

    static func load(_ path: String) throws -> Scenario {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw InputError("cannot read '\(path)'") }
        defer { try? handle.close() }
        let bytes = try readLimited(handle, limit: maxFile, name: "'\(path)'")
        let json: JSONValue
        do { json = try JSONParser.parse(bytes) } catch { throw InputError("'\(path)' is not JSON: \(error)") }
        guard let object = json.objectValue, let steps = object["steps"]?.arrayValue else {
            throw InputError("'\(path)' is not a scenario: an object with a \"steps\" array")
        }
        guard steps.count <= maxSteps else { throw InputError("'\(path)' has more than \(maxSteps) steps") }
        let environment: Environment =
            switch object["environment"]?.stringValue {
            case nil, "Sandbox"?: .sandbox
            case "Production"?: .production
            case let other?: throw InputError("'\(path)': environment '\(other)' is not Sandbox or Production")
            }
        return Scenario(
            name: object["name"]?.stringValue ?? URL(fileURLWithPath: path).lastPathComponent,
            seed: UInt64(max(0, object["seed"]?.int64Value ?? 1)), environment: environment,
            steps: try steps.enumerated().map { index, step in
                guard let step = step.objectValue, step.members.count == 1 else {
                    throw InputError("'\(path)': step \(index + 1) must be an object with one member")
                }
                return step
            })
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

    /// Runs one scenario; every step and expectation becomes a report line.
    static func run(_ scenario: Scenario, directory: URL) async throws -> (passed: Bool, lines: [String]) {
        let bytes = SeededBytes(seed: scenario.seed)
        let bundleID = DefaultCatalog.bundleID
        let store = try await AppStore(
            catalog: [try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))],
            apps: [AppConfiguration(bundleID: bundleID)], dataDirectory: directory,
            rate: .monthlyRenewalEveryFiveMinutes, storage: InMemoryEmulatorStorage(), realNow: { start },
            randomBytes: { bytes.next($0) })
        defer { store.close() }
        // Notifications are written to the outbox (and read back from its history); the receiver is nobody.
        let nobody = "http://127.0.0.1:9/scenario"
        try await store.setNotifications(
            bundleID: bundleID, AppNotifications(productionURLs: [nobody], sandboxURLs: [nobody], retrySchedule: []))
        let verifier = try SignedDataVerifier(
            SignedDataVerifier.Configuration(trustedRoots: [store.pki.signedData.root]))
        let account = try await store.createAccount(environment: scenario.environment, storefront: "USA")
        let device = try await store.createDevice(accountID: account.id, deviceID: nil)
        _ = try await store.install(deviceID: device.id.rawValue, bundleID: bundleID, version: "1")
        var lines: [String] = []
        var passed = true
        var seen = 0
        var subscription: String?
        var members: [String: (account: String, device: String)] = [:]
        var familyID: String?
        for (index, step) in scenario.steps.enumerated() {
            let number = index + 1
            let (verb, value) = (step.members[0].key, step.members[0].value)
            do {
                switch verb {
                case "buy":
                    // A product id, or {"product", "offerCode"?, "winBackOfferId"?}.
                    var offer: OfferRequest?
                    if let code = value["offerCode"]?.stringValue { offer = .code(code) }
                    if let id = value["winBackOfferId"]?.stringValue { offer = .winBack(id) }
                    guard let product = value.stringValue ?? value["product"]?.stringValue else {
                        throw ScenarioError(
                            "buy takes a product id, or {\"product\", \"offerCode\" or \"winBackOfferId\"}")
                    }
                    let outcome = try await store.pay(
                        deviceID: device.id.rawValue, bundleID: bundleID, productID: product, quantity: 1,
                        applicationUsername: nil, appAccountToken: nil, offer: offer)
                    if case .purchased(let stored, _) = outcome, stored.transaction.kind == .autoRenewable {
                        subscription = stored.transaction.originalID.rawValue
                    }
                    let with: String =
                        switch offer {
                        case .code(let code)?: " with offer code \(code)"
                        case .winBack(let id)?: " with win-back offer \(id)"
                        default: ""
                        }
                    lines.append("\(number). buy \(product)\(with)")
                case "advance":
                    guard let text = value.stringValue, let period = StorePeriod(text) else {
                        throw ScenarioError("advance takes an ISO 8601 duration such as P1M")
                    }
                    let change = try await store.setClock(advance: period, rate: nil)
                    lines.append(
                        "\(number). advance \(text): \(change.ran.renewals) renewals, \(change.ran.expirations) expirations"
                    )
                case "billing":
                    _ = try await store.configureBilling(
                        account.id.rawValue, retryOnRenewal: value["retryOnRenewal"]?.boolValue,
                        gracePeriod: value["gracePeriod"]?.boolValue)
                    lines.append("\(number). billing \(JSONWriter.string(value))")
                case "priceIncrease":
                    guard let product = value["product"]?.stringValue else {
                        throw ScenarioError("priceIncrease takes {\"product\", \"requiresConsent\"}")
                    }
                    _ = try await store.announcePriceIncrease(
                        productID: product, requiresConsent: value["requiresConsent"]?.boolValue ?? true)
                    lines.append("\(number). price increase for \(product)")
                case "availability":
                    guard let product = value["product"]?.stringValue, let forSale = value["forSale"]?.boolValue else {
                        throw ScenarioError("availability takes {\"product\", \"forSale\"}")
                    }
                    try await store.setAvailability(productID: product, forSale: forSale)
                    lines.append("\(number). \(product) \(forSale ? "back on sale" : "off sale")")
                case "family":
                    guard let names = value.arrayValue?.compactMap(\.stringValue), !names.isEmpty,
                        names.count == value.arrayValue?.count
                    else { throw ScenarioError("family takes the names of the other members, e.g. [\"sister\"]") }
                    var ids: [String] = []
                    for name in names {
                        if members[name] == nil {
                            let other = try await store.createAccount(
                                environment: scenario.environment, storefront: "USA")
                            let otherDevice = try await store.createDevice(accountID: other.id, deviceID: nil)
                            _ = try await store.install(
                                deviceID: otherDevice.id.rawValue, bundleID: bundleID, version: "1")
                            members[name] = (other.id.rawValue, otherDevice.id.rawValue)
                        }
                        ids.append(members[name]!.account)
                    }
                    familyID = try await store.createFamily(organizer: account.id.rawValue, members: ids).id
                    lines.append("\(number). family with \(names.joined(separator: ", "))")
                case "familyLeave":
                    guard let name = value.stringValue, let member = members[name], let familyID else {
                        throw ScenarioError("familyLeave takes the name of a member of the family")
                    }
                    _ = try await store.removeFamilyMember(familyID: familyID, accountID: member.account)
                    lines.append("\(number). \(name) leaves the family")
                case "expect":
                    guard let expected = value.objectValue else { throw ScenarioError("expect takes an object") }
                    let history = try await notices(store, bundleID, scenario.environment, verifier)
                    let fresh = Array(history.dropFirst(seen))
                    seen = history.count
                    var problems: [String] = []
                    if let list = expected["notifications"]?.arrayValue ?? expected["notification"].map({ [$0] }) {
                        let names = list.compactMap(\.stringValue)
                        let got = fresh.map(\.name)
                        if names != got { problems.append("notifications \(got), expected \(names)") }
                    }
                    let state = try await currentState(store, subscription)
                    if let status = expected["status"]?.int64Value, state?.status.rawValue != status {
                        problems.append(
                            "status \(state.map { String($0.status.rawValue) } ?? "none"), expected \(status)")
                    }
                    if let autoRenew = expected["autoRenew"]?.boolValue, state?.autoRenew != autoRenew {
                        problems.append(
                            "autoRenew \(state.map { String($0.autoRenew) } ?? "none"), expected \(autoRenew)")
                    }
                    if let intent = expected["expirationIntent"]?.int64Value,
                        state?.expirationIntent?.rawValue != intent
                    {
                        problems.append(
                            "expirationIntent \(state?.expirationIntent.map { String($0.rawValue) } ?? "none"), expected \(intent)"
                        )
                    }
                    if let product = expected["productId"]?.stringValue, state?.productID.rawValue != product {
                        problems.append("productId \(state?.productID.rawValue ?? "none"), expected \(product)")
                    }
                    if let entitled = expected["entitled"]?.boolValue {
                        let signed = try await store.entitlements(deviceID: device.id.rawValue, bundleID: bundleID)
                        let products = signed.compactMap { try? CompactJWS($0).payload["productId"]?.stringValue }
                        let has = state.map { products.contains($0.productID.rawValue) } ?? !products.isEmpty
                        if has != entitled { problems.append("entitled \(has), expected \(entitled)") }
                    }
                    for (name, wanted) in expected["memberEntitled"]?.objectValue?.members ?? [] {
                        guard let member = members[name], let entitled = wanted.boolValue else {
                            throw ScenarioError("memberEntitled names family members with true or false")
                        }
                        let has = !(try await store.entitlements(deviceID: member.device, bundleID: bundleID)).isEmpty
                        if has != entitled { problems.append("\(name) entitled \(has), expected \(entitled)") }
                    }
                    if problems.isEmpty {
                        lines.append("\(number). ✔ \(JSONWriter.string(value))")
                    } else {
                        passed = false
                        lines.append("\(number). ✘ \(problems.joined(separator: "; "))")
                    }
                default:
                    guard Self.subscriptionVerbs.contains(verb) else {
                        throw ScenarioError(
                            "unknown step '\(verb)' (known: buy, advance, billing, priceIncrease, availability, family, familyLeave, "
                                + "expect, "
                                + Self.subscriptionVerbs.sorted().joined(separator: ", ") + ")")
                    }
                    guard let original = subscription else {
                        throw ScenarioError("'\(verb)' needs a subscription: buy one first")
                    }
                    let event: LifecycleEvent
                    switch verb {
                    case "autoRenew":
                        guard let enabled = value.boolValue else {
                            throw ScenarioError("autoRenew takes true or false")
                        }
                        event = .setAutoRenew(enabled)
                    case "expire": event = .expireNow
                    case "renew": event = .forceRenewal
                    case "refundReversal": event = .refundReversed
                    case "resolveIssue": event = .billingRecovered
                    case "priceConsent":
                        guard let consent = value.boolValue else {
                            throw ScenarioError("priceConsent takes true or false")
                        }
                        event = .priceConsent(consent)
                    case "refundRequest":
                        let reason = ConsumptionRequestReason(rawValue: value.stringValue ?? "OTHER")
                        guard let reason else {
                            throw ScenarioError(
                                "refundRequest takes a reason: "
                                    + ConsumptionRequestReason.allCases.map(\.rawValue).joined(separator: ", "))
                        }
                        _ = try await store.requestRefund(transactionID: original, reason: reason)
                        lines.append("\(number). refund request (\(reason.rawValue))")
                        continue
                    case "refundDecision":
                        guard let approved = value.boolValue else {
                            throw ScenarioError("refundDecision takes true (approved) or false (declined)")
                        }
                        _ = try await store.decideRefund(transactionID: original, approved: approved, reason: .other)
                        lines.append("\(number). refund \(approved ? "approved" : "declined")")
                        continue
                    case "refund":
                        _ = try await store.refund(
                            transactionID: original, reason: value.stringValue == "APP_ISSUE" ? .appIssue : .other)
                        lines.append("\(number). refund")
                        continue
                    default:
                        throw ScenarioError("unknown step '\(verb)'")
                    }
                    _ = try await store.subscriptionVerb(event, transactionID: original)
                    lines.append("\(number). \(verb) \(JSONWriter.string(value))")
                }
            } catch let error as ScenarioError {
                passed = false
                lines.append("\(number). ✘ \(error.message)")
                break
            } catch let error as EmulatorError {
                passed = false
                lines.append("\(number). ✘ \(verb) was refused: \(error.message)")
                break
            }
        }
        return (passed, lines)
    }

    static let subscriptionVerbs: Set<String> = [
        "autoRenew", "expire", "renew", "refundReversal", "resolveIssue", "priceConsent", "refund", "refundRequest",
        "refundDecision",
    ]

    struct ScenarioError: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }

    /// The notifications written so far, verified: their names and the state they carry.
    static func notices(
        _ store: AppStore, _ bundleID: String, _ environment: Environment, _ verifier: SignedDataVerifier
    ) async throws -> [(name: String, status: Int64?)] {
        var result: [(String, Int64?)] = []
        var after: Int64?
        while true {
            let page = try await store.notificationHistory(
                bundleID: bundleID, environment: environment, from: .distantPast, to: .distantFuture, after: after,
                limit: 500)
            for entry in page {
                guard let signed = entry.notification.signedPayload else { continue }
                let verified = verifier.verify(signed, as: .notification, now: start.addingTimeInterval(1))
                let payload = verified.payload ?? [:]
                let type = payload["notificationType"]?.stringValue ?? "?"
                let name = payload["subtype"]?.stringValue.map { "\(type)/\($0)" } ?? type
                result.append(
                    (
                        verified.isOK ? name : "\(name) (\(verified.status.rawValue))",
                        payload["data"]?["status"]?.int64Value
                    ))
            }
            guard page.count == 500, let last = page.last else { break }
            after = last.position
        }
        return result
    }

    static func currentState(_ store: AppStore, _ original: String?) async throws -> SubscriptionState? {
        guard let original else { return nil }
        return try await store.subscriptionState(originalTransactionID: original)
    }
}
