public import Foundation
public import StoreModel
public import StoreTime
public import StorekeeperCrypto
import StorekeeperHTTP
package import StorekeeperJSON

/// What to do when a purchase arrives for another app user than the one that has it.
public enum TransferPolicy: String, Sendable, Hashable, CaseIterable {
    /// The newest poster gets it (a TRANSFER event says so).
    case transfer
    /// The first owner keeps it; the other user is flagged.
    case keep
}

/// A receiver of the server's webhooks.
public struct WebhookTarget: Sendable, Hashable {
    public var url: String
    /// Signs each body: `Storekeeper-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`.
    public var secret: String
    public init(url: String, secret: String) {
        self.url = url
        self.secret = secret
    }
}

/// The App Store Server API key of an app, and where the API is (Apple's hosts by default).
public struct ServerAPISettings: Sendable {
    public var keyID: String
    public var issuerID: String
    public var privateKey: PrivateKey
    public var productionURL: String?
    public var sandboxURL: String?

    public init(
        keyID: String, issuerID: String, privateKey: PrivateKey, productionURL: String? = nil, sandboxURL: String? = nil
    ) {
        self.keyID = keyID
        self.issuerID = issuerID
        self.privateKey = privateKey
        self.productionURL = productionURL
        self.sandboxURL = sandboxURL
    }
}

/// One app the server serves.
public struct AppSettings: Sendable {
    public var bundleID: String
    public var appAppleID: Int64?
    public var environments: Set<Environment>
    /// The key the app's requests carry (`Authorization: Bearer pk_…`).
    public var publicKey: String
    public var sharedSecret: String?
    public var receiptRoots: [Certificate]
    public var jwsRoots: [Certificate]
    public var serverAPI: ServerAPISettings?
    /// Entitlement name → the products that give it.
    public var entitlements: [String: [String]]
    public var webhooks: [WebhookTarget]
    /// The currency charts count money in (ISO 4217; transactions in others are left out). Config:
    /// `"currency"` (default `USD`).
    public var currency = "USD"
    /// Each subscription product's period (`P1M`, `P1Y`, …) for MRR. Config: `"subscriptionPeriods"`.
    public var subscriptionPeriods: [String: String] = [:]
    /// How long each non-renewing subscription gives its entitlements from its purchase date (Apple sends no
    /// expiry for them: the app decides). A non-renewing product missing here gives them for good, as a
    /// non-consumable does. Config: `"nonRenewingDurations"`.
    public var nonRenewingDurations: [String: StorePeriod] = [:]
    /// The certificates Xcode's StoreKit Testing signs with, as Xcode exports them (Editor › Save Public
    /// Certificate) or as a JWS's `x5c` carries them. Config: `"xcode": {"certificates": [files]}`. Empty
    /// (the default): receipts and signed data from Xcode are refused. Otherwise they are accepted when
    /// signed by one of these exactly, and recorded in the environment `Xcode`, apart from Sandbox and
    /// Production; Apple's servers are never asked about them (they do not know them).
    public var xcodeCertificates: [Certificate] = []
    /// Retention Messaging: the rules that answer Apple's realtime request. Config: `"retention"`.
    public var retention: RetentionSettings? = nil

    public init(
        bundleID: String, appAppleID: Int64? = nil, environments: Set<Environment> = [.production, .sandbox],
        publicKey: String, sharedSecret: String? = nil, receiptRoots: [Certificate], jwsRoots: [Certificate],
        serverAPI: ServerAPISettings? = nil, entitlements: [String: [String]] = [:], webhooks: [WebhookTarget] = []
    ) {
        self.bundleID = bundleID
        self.appAppleID = appAppleID
        self.environments = environments
        self.publicKey = publicKey
        self.sharedSecret = sharedSecret
        self.receiptRoots = receiptRoots
        self.jwsRoots = jwsRoots
        self.serverAPI = serverAPI
        self.entitlements = entitlements
        self.webhooks = webhooks
    }
}

/// `storekeeper serve --config server.json`: the secret key, the apps, and how purchases move between
/// users. String values may name environment variables as `"${NAME}"`; paths are relative to the file.
public struct ServerConfiguration: Sendable {
    public var secretKey: String
    public var apps: [AppSettings]
    public var transferPolicy: TransferPolicy
    /// Seconds between webhook attempts (RevenueCat's: 5, 10, 20, 40 and 80 minutes).
    public var webhookRetrySchedule: [TimeInterval]
    /// Seconds a receiver has to answer a webhook (RevenueCat's: 60). A delivery claimed by a process that
    /// died is sent by another after twice this and ten seconds. Config: `"webhookTimeoutSeconds"`.
    public var webhookTimeoutSeconds: TimeInterval = 60
    /// Seconds between reconciliation passes (apps with an App Store Server API key); 0 turns them off.
    /// Config: `"reconciliation": {"intervalSeconds": n}` (or the older `"reconcileEverySeconds"`).
    public var reconcileEverySeconds: TimeInterval = 3_600
    /// Requests an hour the server allows itself per App Store Server API endpoint and app, shared by every
    /// process (nil: Apple's published limits, a tenth of them in Sandbox). Config:
    /// `"reconciliation": {"maxRequestsPerHour": n}`.
    public var maxAPIRequestsPerHour: Double?
    /// Where the state is kept: a `postgres://` URL, or nil for SQLite in the data folder. Config:
    /// `"database"`; `serve --database` overrides it.
    public var database: String?
    /// `"clock"`: an App Store emulator's URL whose store time the purchase state follows (rehearsals only;
    /// ``FollowedClock``); `serve --clock` overrides it. Nil: the wall clock.
    public var clock: String?
    /// Users whose records and rendered answers a process keeps in memory, so that their reads answer
    /// without the storage (about 1.2 KB a user of three purchases); when full, an eighth go. 0 keeps none.
    /// Config: `"cachedUsers"`, 0 to ``maxCachedUsers`` (``defaultCachedUsers`` unless given).
    public var cachedUsers = Self.defaultCachedUsers
    /// Members of the file the server does not know (a typo it would otherwise pass over in silence), each
    /// with the known member it most resembles; `serve` and `dev` print them. Not an error: a newer file's
    /// members are read by an older server too.
    public var warnings: [String] = []
    /// About 240 MiB when full of users of three purchases.
    public static let defaultCachedUsers = 200_000
    public static let maxCachedUsers = 10_000_000

    /// Refuses a ``cachedUsers`` outside 0…``maxCachedUsers`` (read from the file, or set in code).
    static func checkCachedUsers(_ count: Double) throws {
        guard count == count.rounded(), (0...Double(maxCachedUsers)).contains(count) else {
            throw PurchaseServerError.configuration("cachedUsers is a whole number from 0 to \(maxCachedUsers)")
        }
    }

    public init(
        secretKey: String, apps: [AppSettings], transferPolicy: TransferPolicy = .transfer,
        webhookRetrySchedule: [TimeInterval] = [300, 600, 1_200, 2_400, 4_800]
    ) {
        self.secretKey = secretKey
        self.apps = apps
        self.transferPolicy = transferPolicy
        self.webhookRetrySchedule = webhookRetrySchedule
    }

    /// A configuration file's JSON object, or an error saying where it is not one (line and column).
    package static func configurationObject(_ bytes: [UInt8], path: String) throws -> JSONObject {
        guard bytes.count <= 1 << 20 else {
            throw PurchaseServerError.configuration("'\(path)' is larger than 1 MiB")
        }
        let parsed: JSONValue
        do { parsed = try JSONParser.parse(bytes) } catch let error as JSONParser.Error {
            throw PurchaseServerError.configuration("'\(path)' is not valid JSON: \(error.location(in: bytes))")
        }
        guard let root = parsed.objectValue else {
            throw PurchaseServerError.configuration(
                "'\(path)' must hold one JSON object ({…}), not \(Self.kindName(parsed))")
        }
        return root
    }

    static let knownMembers: [String: Set<String>] = [
        "": [
            "secretKey", "apps", "transferPolicy", "webhookRetrySchedule", "webhookTimeoutSeconds", "reconciliation",
            "reconcileEverySeconds", "database", "cachedUsers", "clock",
        ],
        "apps[]": [
            "bundleId", "publicKey", "appAppleId", "environments", "sharedSecret", "receiptRoots", "jwsRoots", "xcode",
            "appStoreServerAPI", "entitlements", "webhooks", "currency", "subscriptionPeriods", "nonRenewingDurations",
            "retention",
        ],
        "reconciliation": ["intervalSeconds", "maxRequestsPerHour"],
        "appStoreServerAPI": ["keyId", "issuerId", "privateKeyFile", "productionURL", "sandboxURL"],
        "webhooks[]": ["url", "secret"],
        "xcode": ["certificates"],
    ]

    /// The members of `root` (a configuration file) that no known member has, with the likeliest meant.
    static func unknownMembers(_ root: JSONObject) -> [String] {
        var warnings: [String] = []
        func check(_ object: JSONObject?, _ place: String, _ shown: String) {
            guard let object, let known = knownMembers[place] else { return }
            for key in object.keys where !known.contains(key) {
                let closest = known.sorted().min { editDistance(key, $0) < editDistance(key, $1) }
                let hint = closest.map {
                    editDistance(key, $0) <= max(2, key.count / 3) ? " (did you mean \"\($0)\"?)" : ""
                }
                warnings.append("\(shown)\"\(key)\" is not a member the server knows; it is ignored\(hint ?? "")")
            }
        }
        check(root, "", "")
        check(root["reconciliation"]?.objectValue, "reconciliation", "reconciliation.")
        for (index, app) in (root["apps"]?.arrayValue ?? []).enumerated() {
            let name = app["bundleId"]?.stringValue ?? "apps[\(index)]"
            check(app.objectValue, "apps[]", "\(name): ")
            check(app["appStoreServerAPI"]?.objectValue, "appStoreServerAPI", "\(name): appStoreServerAPI.")
            check(app["xcode"]?.objectValue, "xcode", "\(name): xcode.")
            for hook in app["webhooks"]?.arrayValue ?? [] {
                check(hook.objectValue, "webhooks[]", "\(name): webhooks[].")
            }
        }
        return warnings
    }

    /// Levenshtein distance, for names of a few dozen characters.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.lowercased().prefix(64)), b = Array(b.lowercased().prefix(64))
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1]
            for (j, y) in b.enumerated() {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
    }

    static func kindName(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool: "a boolean"
        case .integer, .double: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// Reads the configuration file; `variables` resolve `"${NAME}"`.
    public static func load(path: String, variables: [String: String]) throws -> ServerConfiguration {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PurchaseServerError.configuration("cannot read '\(path)'")
        }
        var root = try configurationObject(Array(data), path: path)
        root = try substitute(.object(root), variables).objectValue ?? root
        let base = URL(fileURLWithPath: path).deletingLastPathComponent()
        func file(_ relative: String) throws -> [UInt8] {
            let url = URL(fileURLWithPath: relative, relativeTo: base)
            guard let contents = FileManager.default.contents(atPath: url.path) else {
                throw PurchaseServerError.configuration("cannot read '\(url.path)'")
            }
            return Array(contents)
        }
        guard let secret = root["secretKey"]?.stringValue, secret.utf8.count >= 16 else {
            throw PurchaseServerError.configuration("secretKey is required (at least 16 characters)")
        }
        guard let list = root["apps"]?.arrayValue, !list.isEmpty else {
            throw PurchaseServerError.configuration("apps is required (at least one)")
        }
        var apps: [AppSettings] = []
        for item in list {
            guard let bundleID = item["bundleId"]?.stringValue, !bundleID.isEmpty else {
                throw PurchaseServerError.configuration("an app has no bundleId")
            }
            guard let publicKey = item["publicKey"]?.stringValue, publicKey.utf8.count >= 8 else {
                throw PurchaseServerError.configuration("\(bundleID): publicKey is required (at least 8 characters)")
            }
            func typed<T>(_ name: String, _ expected: String, _ cast: (JSONValue) -> T?) throws -> T? {
                try Self.member(item, name, of: "\(bundleID): ", is: expected, cast)
            }
            var environments: Set<Environment> = [.production, .sandbox]
            if let names = try typed("environments", "a list such as [\"Production\", \"Sandbox\"]", \.arrayValue) {
                guard !names.isEmpty else {
                    throw PurchaseServerError.configuration("\(bundleID): environments names at least one")
                }
                environments = try Set(
                    names.map { name in
                        guard let text = name.stringValue,
                            let environment = Environment(name: text, among: Environment.customerEnvironments)
                        else {
                            throw PurchaseServerError.configuration("\(bundleID): environments are Production, Sandbox")
                        }
                        return environment
                    })
            }
            func roots(_ name: String) throws -> [Certificate] {
                guard
                    let paths = try typed(name, "a list of certificate files (\"apple\": Apple's roots)", \.arrayValue)
                else { return try AppleRoots.certificates() }
                return try paths.flatMap { value -> [Certificate] in
                    guard let path = value.stringValue else {
                        throw PurchaseServerError.configuration("\(bundleID): \(name) holds file paths")
                    }
                    // Apple's two roots, beside others (an emulator's, say).
                    if path == "apple" { return try AppleRoots.certificates() }
                    do { return try Certificate.load(try file(path)) } catch let error as PurchaseServerError {
                        throw error
                    } catch { throw PurchaseServerError.configuration("\(bundleID): '\(path)' is not a certificate") }
                }
            }
            var serverAPI: ServerAPISettings?
            if let api = try typed("appStoreServerAPI", "an object", \.objectValue).map(JSONValue.object) {
                guard let keyID = api["keyId"]?.stringValue, let issuerID = api["issuerId"]?.stringValue,
                    let keyFile = api["privateKeyFile"]?.stringValue
                else {
                    throw PurchaseServerError.configuration(
                        "\(bundleID): appStoreServerAPI needs keyId, issuerId and privateKeyFile")
                }
                let key: PrivateKey
                do { key = try PrivateKey(pem: String(decoding: try file(keyFile), as: UTF8.self)) } catch {
                    throw PurchaseServerError.configuration("\(bundleID): '\(keyFile)' is not a PEM private key")
                }
                let production = try Self.member(
                    api, "productionURL", of: "\(bundleID): appStoreServerAPI.", is: "a URL", \.stringValue)
                let sandbox = try Self.member(
                    api, "sandboxURL", of: "\(bundleID): appStoreServerAPI.", is: "a URL", \.stringValue)
                serverAPI = ServerAPISettings(
                    keyID: keyID, issuerID: issuerID, privateKey: key, productionURL: production, sandboxURL: sandbox)
            }
            var entitlements: [String: [String]] = [:]
            for member in try typed("entitlements", "an object of product id lists", \.objectValue)?.members ?? [] {
                guard let products = member.value.arrayValue?.compactMap(\.stringValue),
                    products.count == member.value.arrayValue?.count
                else {
                    throw PurchaseServerError.configuration(
                        "\(bundleID): entitlements.\(member.key) is a list of product ids")
                }
                entitlements[member.key] = products
            }
            let webhooks = try (typed("webhooks", "a list of {\"url\", \"secret\"}", \.arrayValue) ?? []).map { hook in
                guard let url = hook["url"]?.stringValue, url.hasPrefix("http://") || url.hasPrefix("https://"),
                    let secret = hook["secret"]?.stringValue, secret.utf8.count >= 8
                else {
                    throw PurchaseServerError.configuration(
                        "\(bundleID): a webhook needs an http(s) url and a secret of at least 8 characters")
                }
                return WebhookTarget(url: url, secret: secret)
            }
            // One delivery an event a URL: a URL listed twice would be sent to once, one of its secrets unused.
            if let twice = Dictionary(grouping: webhooks, by: \.url).first(where: { $0.value.count > 1 })?.key {
                throw PurchaseServerError.configuration(
                    "\(bundleID): webhook url '\(HTTPClient.printable(twice))' is listed twice (one secret per receiver)"
                )
            }
            apps.append(
                AppSettings(
                    bundleID: bundleID,
                    appAppleID: try typed("appAppleId", "a number (the app's Apple ID)", \.int64Value),
                    environments: environments, publicKey: publicKey,
                    sharedSecret: try typed("sharedSecret", "a string", \.stringValue),
                    receiptRoots: try roots("receiptRoots"), jwsRoots: try roots("jwsRoots"), serverAPI: serverAPI,
                    entitlements: entitlements, webhooks: webhooks))
            if let xcode = item["xcode"] {
                guard let files = xcode["certificates"]?.arrayValue, !files.isEmpty,
                    xcode.objectValue?.keys == ["certificates"]
                else {
                    throw PurchaseServerError.configuration(
                        "\(bundleID): xcode is {\"certificates\": [files Xcode exports, such as StoreKitTestCertificate.cer]}"
                    )
                }
                apps[apps.count - 1].xcodeCertificates = try files.flatMap { value -> [Certificate] in
                    guard let path = value.stringValue else {
                        throw PurchaseServerError.configuration("\(bundleID): xcode.certificates holds file paths")
                    }
                    do { return try Certificate.load(try file(path)) } catch let error as PurchaseServerError {
                        throw error
                    } catch { throw PurchaseServerError.configuration("\(bundleID): '\(path)' is not a certificate") }
                }
            }
            if let currency = item["currency"] {
                guard let code = currency.stringValue, code.count == 3,
                    code.allSatisfy({ $0.isASCII && $0.isUppercase })
                else {
                    throw PurchaseServerError.configuration("\(bundleID): currency is an ISO 4217 code such as USD")
                }
                apps[apps.count - 1].currency = code
            }
            if let retention = item["retention"] {
                apps[apps.count - 1].retention = try RetentionSettings(
                    json: retention, bundleID: bundleID, file: file)
            }
            for member in try typed("subscriptionPeriods", "an object of periods", \.objectValue)?.members ?? [] {
                guard let period = member.value.stringValue, SubscriptionCharts.days(ofPeriod: period) != nil else {
                    throw PurchaseServerError.configuration(
                        "\(bundleID): subscriptionPeriods.\(member.key) is a period such as P1M or P1Y")
                }
                apps[apps.count - 1].subscriptionPeriods[member.key] = period
            }
            for member in try typed("nonRenewingDurations", "an object of durations", \.objectValue)?.members ?? [] {
                guard let text = member.value.stringValue, let duration = StorePeriod(text),
                    duration != StorePeriod()
                else {
                    throw PurchaseServerError.configuration(
                        "\(bundleID): nonRenewingDurations.\(member.key) is a duration such as P1M, P3M or P1Y")
                }
                apps[apps.count - 1].nonRenewingDurations[member.key] = duration
            }
        }
        var configuration = ServerConfiguration(secretKey: secret, apps: apps)
        let rootValue = JSONValue.object(root)
        if let policy = try Self.member(rootValue, "transferPolicy", is: "transfer or keep", \.stringValue) {
            guard let parsed = TransferPolicy(rawValue: policy) else {
                throw PurchaseServerError.configuration("transferPolicy is transfer or keep")
            }
            configuration.transferPolicy = parsed
        }
        _ = try Self.member(rootValue, "reconciliation", is: "an object", \.objectValue)
        if let every = root["reconciliation"]?["intervalSeconds"] ?? root["reconcileEverySeconds"] {
            guard let seconds = every.doubleValue, (0...31_536_000).contains(seconds) else {
                throw PurchaseServerError.configuration(
                    "reconciliation.intervalSeconds is a number of seconds up to a year, 31536000 (0: off)")
            }
            configuration.reconcileEverySeconds = seconds
        }
        if let limit = root["reconciliation"]?["maxRequestsPerHour"] {
            guard let perHour = limit.doubleValue, perHour >= 1 else {
                throw PurchaseServerError.configuration("reconciliation.maxRequestsPerHour is at least 1")
            }
            configuration.maxAPIRequestsPerHour = perHour
        }
        if let database = root["database"] {
            guard let url = database.stringValue, Self.isPostgresURL(url) else {
                throw PurchaseServerError.configuration("database is a postgres:// URL (leave it out for SQLite)")
            }
            configuration.database = url
        }
        if let clock = root["clock"] {
            guard let url = clock.stringValue, url.hasPrefix("http://") || url.hasPrefix("https://") else {
                throw PurchaseServerError.configuration("clock is an App Store emulator's http(s) URL")
            }
            configuration.clock = url
        }
        if let users = root["cachedUsers"] {
            let count = users.doubleValue ?? -1
            try Self.checkCachedUsers(count)
            configuration.cachedUsers = Int(count)
        }
        if let timeout = root["webhookTimeoutSeconds"] {
            guard let seconds = timeout.doubleValue, (1...300).contains(seconds) else {
                throw PurchaseServerError.configuration("webhookTimeoutSeconds is 1 to 300")
            }
            configuration.webhookTimeoutSeconds = seconds
        }
        let retries = "a list of at most 100 delays in seconds, each 0 to a week (604800)"
        if let schedule = try Self.member(rootValue, "webhookRetrySchedule", is: retries, \.arrayValue) {
            let delays = schedule.compactMap(\.doubleValue).filter { (0...604_800).contains($0) }
            guard delays.count == schedule.count, delays.count <= 100 else {
                throw PurchaseServerError.configuration("webhookRetrySchedule is \(retries)")
            }
            configuration.webhookRetrySchedule = delays
        }
        configuration.warnings = Self.unknownMembers(root)
        return configuration
    }

    /// `name`'s value in `object` as `T`: nil when it is absent or null; an error saying what it should be when
    /// it is there with another type (a member of the wrong type never falls back to its default unsaid).
    static func member<T>(
        _ object: JSONValue, _ name: String, of context: String = "", is expected: String, _ cast: (JSONValue) -> T?
    ) throws -> T? {
        guard let value = object[name], value != .null else { return nil }
        guard let typed = cast(value) else {
            throw PurchaseServerError.configuration("\(context)\(name) is \(expected)")
        }
        return typed
    }

    /// Whether `url` names a PostgreSQL database (`postgres://` or `postgresql://`).
    public static func isPostgresURL(_ url: String) -> Bool {
        url.hasPrefix("postgres://") || url.hasPrefix("postgresql://")
    }

    /// `"${NAME}"` inside string values, replaced by the variable (an unknown one is an error).
    static func substitute(_ value: JSONValue, _ variables: [String: String]) throws -> JSONValue {
        switch value {
        case .string(let text):
            guard text.contains("${") else { return value }
            var result = ""
            var rest = Substring(text)
            while let start = rest.range(of: "${") {
                result += rest[..<start.lowerBound]
                guard let end = rest[start.upperBound...].firstIndex(of: "}") else {
                    throw PurchaseServerError.configuration("an unclosed ${ in a value")
                }
                let name = String(rest[start.upperBound..<end])
                guard let replacement = variables[name] else {
                    throw PurchaseServerError.configuration("the environment variable \(name) is not set")
                }
                result += replacement
                rest = rest[rest.index(after: end)...]
            }
            return .string(result + rest)
        case .array(let items): return .array(try items.map { try substitute($0, variables) })
        case .object(let object):
            var result = JSONObject()
            for member in object.members { result[member.key] = try substitute(member.value, variables) }
            return .object(result)
        default: return value
        }
    }
}

/// Apple's two public roots, shipped as resources and checked against their SHA-256 fingerprints: Apple
/// Inc. Root (receipts) and Apple Root CA - G3 (signed data).
public enum AppleRoots {
    static let fingerprints = [
        "AppleIncRootCertificate": "b0b1730ecbc7ff4505142c49f1295e6eda6bcaed7e2c68c5be91b5a11001f024",
        "AppleRootCA-G3": "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179",
    ]

    public static func certificates() throws -> [Certificate] {
        try fingerprints.keys.sorted().map { name in
            guard let url = Bundle.module.url(forResource: name, withExtension: "cer"),
                let data = FileManager.default.contents(atPath: url.path)
            else { throw PurchaseServerError.configuration("the resource \(name).cer is missing") }
            let hex = Digest.hex(Digest.sha256(Array(data)))
            guard hex == fingerprints[name] else {
                throw PurchaseServerError.configuration("\(name).cer does not have Apple's fingerprint")
            }
            return try Certificate(derEncoded: Array(data))
        }
    }
}
