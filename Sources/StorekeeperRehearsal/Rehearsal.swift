public import AppStoreEmulator
import AppStoreServerAPI
public import Foundation
public import PurchaseServer
public import StoreKitCatalog
import StoreModel
public import StoreTime
import StorekeeperCrypto
public import StorekeeperHTTP
import StorekeeperJSON
public import StorekeeperLogging

/// The App Store emulator and the purchase server wired as a developer rehearses with them
/// (`storekeeper dev`): the server trusts the emulator's roots (and Apple's), the emulator's notifications
/// go to the server, an App Store Server API key minted on the emulator lets the server reconcile,
/// entitlements come from the catalogue, and the server's purchase state runs on the emulator's store time.
/// Retention Messaging is wired too: the emulator's sandbox asks the server which retention message to show,
/// and the server answers from rules written on the first start (a promotional offer the first time, a
/// message after), signing offers with a key the emulator knows.
///
/// Everything lives under one folder: the emulator's state in `emulator/`, the server's database
/// `server.sqlite`, and the server's configuration `server.json` (0600) with the files it names (the
/// emulator's roots, the API key), written on the first start and read as it is afterwards, so that it can
/// be edited, and copied into production once the emulator's parts are taken out.
public final class Rehearsal: Sendable {
    public struct Options: Sendable {
        public var dataDirectory: URL
        public var host = "127.0.0.1"
        /// 0 picks a free port.
        public var emulatorPort = 8080
        public var serverPort = 8090
        public var catalogs: [StoreKitConfiguration] = []
        public var bundleIDs: [String] = []
        public var rate: TimeRate?
        /// Webhook receivers, each signed with a secret derived from the server's secret key and the URL.
        public var webhooks: [String] = []
        /// How often the server asks the emulator's App Store Server API about subscriptions whose news is
        /// overdue (wall seconds); nil: the configuration file's `reconciliation.intervalSeconds` (15 in the
        /// file a first start writes).
        public var reconcileEvery: TimeInterval? = nil
        public var logger: Logger = .disabled
        /// How often the emulator's scheduler and the server's webhook sender look for work.
        public var granularity: Duration = .milliseconds(250)
        /// How long the cancellation page waits for the server's retention answer (Apple's 700 ms).
        public var realtimeTimeout: Duration = RetentionLimits.realtimeTimeout

        public init(dataDirectory: URL) { self.dataDirectory = dataDirectory }
    }

    public let store: AppStore
    public let emulator: HTTPServer
    public let server: PurchaseServer
    public let http: HTTPServer
    public let configuration: ServerConfiguration
    /// `server.json`.
    public let configurationFile: URL
    /// True when this start wrote the configuration (the first start on this folder).
    public let wroteConfiguration: Bool
    /// The catalogues the emulator sells from (the built-in one when none was given).
    public let catalogs: [StoreKitConfiguration]

    public var emulatorURL: String { "http://\(Self.shown(options.host)):\(emulator.port)" }
    public var serverURL: String { "http://\(Self.shown(options.host)):\(http.port)" }
    let options: Options

    static func shown(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }

    /// A failure to start, with what to do about it.
    public struct StartError: Error, CustomStringConvertible, Sendable {
        public let description: String
        /// The configuration file is not one the rehearsal can use (the command's exit 2).
        public let inConfiguration: Bool
        init(_ description: String, inConfiguration: Bool = false) {
            self.description = description
            self.inConfiguration = inConfiguration
        }
    }

    private init(
        store: AppStore, emulator: HTTPServer, server: PurchaseServer, http: HTTPServer,
        configuration: ServerConfiguration, configurationFile: URL, wroteConfiguration: Bool,
        catalogs: [StoreKitConfiguration], options: Options
    ) {
        self.store = store
        self.emulator = emulator
        self.server = server
        self.http = http
        self.configuration = configuration
        self.configurationFile = configurationFile
        self.wroteConfiguration = wroteConfiguration
        self.catalogs = catalogs
        self.options = options
    }

    /// Starts both halves and wires them; throws (leaving nothing running) when either cannot start.
    public static func start(_ options: Options) async throws -> Rehearsal {
        let data = options.dataDirectory
        do {
            try FileManager.default.createDirectory(
                at: data, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch { throw StartError("cannot create '\(data.path)'") }
        let catalogs =
            options.catalogs.isEmpty
            ? [try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))] : options.catalogs
        let bundleIDs = options.bundleIDs.isEmpty ? [DefaultCatalog.bundleID] : options.bundleIDs
        let file = data.appendingPathComponent("server.json")
        let existing = FileManager.default.fileExists(atPath: file.path)
        let secrets = existing ? try Self.sharedSecrets(file) : [:]
        var apps: [AppConfiguration] = []
        for bundleID in bundleIDs {
            var app = AppConfiguration(bundleID: bundleID, sharedSecret: secrets[bundleID] ?? Self.random("ss_", 16))
            // The In-App Purchase key the server signs retention offers with, made once.
            app.offerKeys = [Self.offerKeyID: try Self.offerKey(bundleID, in: data)]
            apps.append(app)
        }
        let store = try await AppStore(
            catalog: catalogs, apps: apps, dataDirectory: data.appendingPathComponent("emulator"),
            rate: options.rate ?? catalogs.first?.settings.timeRate, logger: options.logger.with(["half": "emulator"]),
            realtimeTimeout: options.realtimeTimeout)
        var started: [HTTPServer] = []
        do {
            let emulator = try HTTPServer(
                host: options.host, port: options.emulatorPort,
                responder: EmulatorRoutes(store).responder(logger: options.logger), logger: options.logger)
            started.append(emulator)
            let emulatorURL = "http://\(shown(options.host)):\(emulator.port)"
            if !existing {
                try await Self.writeConfiguration(
                    file, store: store, apps: apps, catalogs: catalogs, emulatorURL: emulatorURL, options: options)
            }
            try Self.writeRoots(store, into: data)
            var configuration: ServerConfiguration
            do {
                configuration = try ServerConfiguration.load(
                    path: file.path, variables: ProcessInfo.processInfo.environment)
            } catch let error as PurchaseServerError {
                // Most of the configuration's messages do not name the file: dev's is implicit, so name it.
                let message = error.message.contains(file.path) ? error.message : "'\(file.path)': \(error.message)"
                throw StartError(message, inConfiguration: true)
            }
            // A configuration written for other apps (an earlier start with another --bundle-id) would leave
            // these unwired: their posts refused, their notifications nowhere.
            let missing = bundleIDs.filter { id in !configuration.apps.contains { $0.bundleID == id } }
            if !missing.isEmpty {
                throw StartError(
                    "'\(file.path)' has no app \(missing.joined(separator: ", ")) (it configures "
                        + configuration.apps.map(\.bundleID).joined(separator: ", ")
                        + "): add it there, give another --data, or the --bundle-id it was written for",
                    inConfiguration: true)
            }
            for index in configuration.apps.indices {
                // The emulator's App Store Server API wherever it listens this time.
                configuration.apps[index].serverAPI?.productionURL = emulatorURL
                configuration.apps[index].serverAPI?.sandboxURL = emulatorURL + "/sandbox"
                for url in options.webhooks where !configuration.apps[index].webhooks.contains(where: { $0.url == url })
                {
                    configuration.apps[index].webhooks.append(
                        WebhookTarget(url: url, secret: Self.webhookSecret(url, key: configuration.secretKey)))
                }
            }
            if let every = options.reconcileEvery { configuration.reconcileEverySeconds = every }
            let storage = try await SQLiteServerStorage(path: data.appendingPathComponent("server.sqlite").path)
            let server = try PurchaseServer(
                configuration: configuration, storage: storage, logger: options.logger.with(["half": "server"]),
                now: { store.now })
            let http = try HTTPServer(
                host: options.host, port: options.serverPort, responder: server.responder(), logger: options.logger)
            started.append(http)
            let serverURL = "http://\(shown(options.host)):\(http.port)"
            for app in configuration.apps where apps.contains(where: { $0.bundleID == app.bundleID }) {
                let url = "\(serverURL)/v1/notifications/apple/\(app.bundleID)"
                try await store.setNotifications(
                    bundleID: app.bundleID, AppNotifications(productionURLs: [url], sandboxURLs: [url]))
                // The sandbox's cancellation page asks the server (production would need a passing
                // performance test first, as Apple's does).
                if let api = app.serverAPI {
                    try await Self.client(api, bundleID: app.bundleID, emulatorURL: emulatorURL)
                        .configureRealtimeURL("\(serverURL)/v1/apple/retention/\(app.bundleID)")
                }
            }
            store.startScheduler(granularity: options.granularity)
            server.startDelivery(granularity: options.granularity)
            if configuration.reconcileEverySeconds > 0 {
                server.startReconciliation(every: .milliseconds(Int64(configuration.reconcileEverySeconds * 1000)))
            }
            return Rehearsal(
                store: store, emulator: emulator, server: server, http: http, configuration: configuration,
                configurationFile: file, wroteConfiguration: !existing, catalogs: catalogs, options: options)
        } catch {
            for server in started { server.stop() }
            store.close()
            if let error = error as? HTTPError { throw StartError(error.message) }
            throw error
        }
    }

    /// Stops both halves: the server finishes the requests in flight (up to `grace`), then the emulator stops.
    public func stop(grace: Duration = .seconds(5)) async {
        await http.stop(waitingUpTo: grace)
        server.stopDelivery()
        store.stopScheduler()
        emulator.stop()
        store.close()
    }

    // MARK: - The configuration

    /// The id of the key that signs retention offers (the emulator's `offerKeys`, the server's `offerKey`).
    static let offerKeyID = "STOREKEEPERRETENTION"

    static func offerKeyFile(_ bundleID: String) -> String { "retention-offer-key-\(bundleID).p8" }

    /// The app's retention offer key (PEM), made on the first start and kept (0600) beside the configuration.
    static func offerKey(_ bundleID: String, in data: URL) throws -> String {
        let path = data.appendingPathComponent(offerKeyFile(bundleID)).path
        if let existing = FileManager.default.contents(atPath: path) {
            return String(decoding: existing, as: UTF8.self)
        }
        let pem = try PrivateKey.generateP256().pemPKCS8()
        try PrivateFiles.create(path, contents: Array(pem.utf8))
        return pem
    }

    /// The emulator's sandbox Server API, with the server's key.
    static func client(_ api: ServerAPISettings, bundleID: String, emulatorURL: String) -> AppStoreServerAPIClient {
        AppStoreServerAPIClient(
            key: api.privateKey, keyID: api.keyID, issuerID: api.issuerID, bundleID: bundleID,
            environment: .custom(emulatorURL + "/sandbox"))
    }

    /// Two retention messages uploaded to the emulator's sandbox (approved at once there) and the rules that
    /// use them: the first promotional offer of a subscription that has one, the first time; a message
    /// after (also each product's default message for en-US).
    static func retention(
        client: AppStoreServerAPIClient, catalogs: [StoreKitConfiguration], issuerID: String, bundleID: String
    ) async throws -> JSONObject {
        let (offerMessage, stayMessage) = (UUID(), UUID())
        try await client.uploadMessage(
            offerMessage, RetentionMessageRequest(header: "Before you go", body: "Stay with an offer made for you."))
        try await client.uploadMessage(
            stayMessage, RetentionMessageRequest(header: "Sorry to see you go", body: "Your plan stays until it ends."))
        var rules: [JSONValue] = []
        let subscriptions = catalogs.flatMap(\.subscriptions)
        for subscription in subscriptions {
            try await client.configureDefaultMessage(
                productID: subscription.productID, locale: "en-US", messageIdentifier: stayMessage)
            guard let offer = subscription.promotionalOffers.first?.offerID else { continue }
            rules.append(
                .object([
                    "name": .string("first offer for \(subscription.productID)"),
                    "when": .object([
                        "productIds": .array([.string(subscription.productID)]), "maxPastOffers": .integer(0),
                    ]),
                    "promotionalOffer": .object([
                        "offerId": .string(offer), "message": .string(offerMessage.uuidString.lowercased()),
                    ]),
                ]))
        }
        rules.append(.object(["name": .string("everyone"), "message": .string(stayMessage.uuidString.lowercased())]))
        return [
            "offerKey": .object([
                "keyId": .string(offerKeyID), "issuerId": .string(issuerID),
                "privateKeyFile": .string(offerKeyFile(bundleID)),
            ]),
            "rules": .array(rules),
        ]
    }

    static func random(_ prefix: String, _ bytes: Int) -> String {
        prefix + Digest.hex((try? SecureRandom.bytes(bytes)) ?? [])
    }

    /// A webhook's secret: stable for one server and URL, so a receiver keeps it across starts.
    public static func webhookSecret(_ url: String, key: String) -> String {
        "whsec_" + Digest.hex(HMAC.sha256(key: Array(key.utf8), message: Array(url.utf8)).prefix(16))
    }

    /// The apps' shared secrets in an existing configuration, so the emulator signs V1 with the same.
    static func sharedSecrets(_ file: URL) throws -> [String: String] {
        guard let data = FileManager.default.contents(atPath: file.path) else {
            throw StartError("cannot read '\(file.path)'", inConfiguration: true)
        }
        let root: JSONObject
        do { root = try ServerConfiguration.configurationObject(Array(data), path: file.path) } catch {
            throw StartError((error as? PurchaseServerError)?.message ?? "\(error)", inConfiguration: true)
        }
        var secrets: [String: String] = [:]
        for app in root["apps"]?.arrayValue ?? [] {
            if let bundleID = app["bundleId"]?.stringValue, let secret = app["sharedSecret"]?.stringValue {
                secrets[bundleID] = secret
            }
        }
        return secrets
    }

    /// The emulator's roots as DER files beside the configuration, which names them (written once: the
    /// emulator keeps its certificates in its data).
    static func writeRoots(_ store: AppStore, into data: URL) throws {
        for (name, root) in [
            ("emulator-receipt-root.cer", store.pki.receipts.root),
            ("emulator-jws-root.cer", store.pki.signedData.root),
        ] {
            let path = data.appendingPathComponent(name).path
            if !FileManager.default.fileExists(atPath: path) {
                try PrivateFiles.create(path, contents: root.derEncoded)
            }
        }
    }

    /// Entitlements from the catalogue: one per subscription group (its name, lower case, words joined by
    /// `-`) for every product of the group, and one per non-consumable and non-renewing subscription (the
    /// last part of its product id). Consumables give none: they are counted in the ledger.
    public static func entitlements(_ catalogs: [StoreKitConfiguration]) -> [String: [String]] {
        var result: [String: [String]] = [:]
        for catalog in catalogs {
            for group in catalog.subscriptionGroups {
                let name = slug(group.name ?? group.id ?? "subscription")
                result[name, default: []] += group.subscriptions.map(\.productID)
            }
            for product in catalog.products where product.kind == .nonConsumable || product.kind == .nonRenewing {
                let last = product.productID.split(separator: ".").last.map(String.init) ?? product.productID
                result[slug(last), default: []].append(product.productID)
            }
        }
        return result
    }

    static func slug(_ text: String) -> String {
        let words = text.lowercased().split { !($0.isLetter || $0.isNumber) }
        return words.isEmpty ? "entitlement" : words.joined(separator: "-")
    }

    /// The configuration of a first start: a secret key, each app's key, shared secret, roots (Apple's
    /// and the emulator's), a minted App Store Server API key, entitlements and subscription periods from
    /// the catalogue, and the webhooks asked for.
    static func writeConfiguration(
        _ file: URL, store: AppStore, apps: [AppConfiguration], catalogs: [StoreKitConfiguration],
        emulatorURL: String, options: Options
    ) async throws {
        let secretKey = random("sk_", 16)
        var periods: JSONObject = [:]
        for subscription in catalogs.flatMap(\.subscriptions) {
            if let period = subscription.period { periods[subscription.productID] = .string(period.description) }
        }
        var entitlements: JSONObject = [:]
        for (name, products) in Self.entitlements(catalogs).sorted(by: { $0.key < $1.key }) {
            entitlements[name] = .array(products.map(JSONValue.string))
        }
        var list: [JSONValue] = []
        for app in apps {
            let minted = try await store.serverAPI.mintAPIKey(bundleID: app.bundleID)
            let retention = try await Self.retention(
                client: AppStoreServerAPIClient(
                    key: try PrivateKey(pem: minted.privateKey), keyID: minted.keyID, issuerID: minted.issuerID,
                    bundleID: app.bundleID, environment: .custom(emulatorURL + "/sandbox")),
                catalogs: catalogs, issuerID: minted.issuerID, bundleID: app.bundleID)
            let keyFile = "api-key-\(app.bundleID).p8"
            try PrivateFiles.create(
                file.deletingLastPathComponent().appendingPathComponent(keyFile).path,
                contents: Array(minted.privateKey.utf8))
            list.append(
                .object([
                    "bundleId": .string(app.bundleID), "appAppleId": .integer(app.appAppleID),
                    "publicKey": .string(random("pk_", 8)),
                    "sharedSecret": .string(app.sharedSecret ?? random("ss_", 16)),
                    "receiptRoots": .array([.string("apple"), .string("emulator-receipt-root.cer")]),
                    "jwsRoots": .array([.string("apple"), .string("emulator-jws-root.cer")]),
                    "appStoreServerAPI": .object([
                        "keyId": .string(minted.keyID), "issuerId": .string(minted.issuerID),
                        "privateKeyFile": .string(keyFile), "productionURL": .string(emulatorURL),
                        "sandboxURL": .string(emulatorURL + "/sandbox"),
                    ]),
                    "entitlements": .object(entitlements),
                    "subscriptionPeriods": .object(periods),
                    "retention": .object(retention),
                    "webhooks": .array(
                        options.webhooks.map { url in
                            .object([
                                "url": .string(url), "secret": .string(Self.webhookSecret(url, key: secretKey)),
                            ])
                        }),
                ]))
        }
        let root: JSONObject = [
            "secretKey": .string(secretKey), "apps": .array(list),
            "reconciliation": .object(["intervalSeconds": .double(options.reconcileEvery ?? 15)]),
        ]
        try PrivateFiles.create(file.path, contents: JSONWriter.bytes(.object(root), pretty: true) + [0x0A])
    }
}
