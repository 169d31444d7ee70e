import AppStoreEmulator
import AppStoreReceipts
import Foundation
import StoreKitCatalog
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

/// `storekeeper appstore serve`: the emulator's options, its apps and catalogues, started and run until a signal.
extension AppStoreCommands {
    static func serve(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        // Before the address is printed: whoever reads it may stop us at once.
        TerminationSignals.hold()
        var rate: TimeRate?
        if let name = arguments.value("rate") {
            guard let parsed = TimeRate(name: name) else {
                throw CommandError.usage(
                    "'\(name)' is not a time rate (one of \(TimeRate.all.map(\.name).joined(separator: ", ")))")
            }
            rate = parsed
        }
        let port = Int(arguments.value("port") ?? "8080") ?? -1
        guard (0...65_535).contains(port) else { throw CommandError.usage("--port must be 0 to 65535") }
        var catalogs: [StoreKitConfiguration] = []
        for path in arguments.all("storekit") {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw CommandError.input("cannot read '\(path)'")
            }
            do {
                catalogs.append(try StoreKitConfiguration(data: Array(data)))
            } catch {
                throw CommandError.input("'\(path)': \(error.description)")
            }
        }
        // A rate this build does not know (a newer Xcode's) is kept in the file; serving needs one it knows.
        if rate == nil, let settings = catalogs.first?.settings, let raw = settings.json["_timeRate"], raw != .null,
            settings.timeRate == nil
        {
            throw CommandError.input(
                "the catalogue's _timeRate \(JSONWriter.string(raw)) is not a time rate Storekeeper knows: give --rate")
        }
        if catalogs.isEmpty { catalogs = [try! StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))] }
        var apps = try loadApps(arguments.value("config"))
        try applyBillingPlans(arguments.value("config"), to: &catalogs)
        for bundleID in arguments.all("bundle-id") where !apps.contains(where: { $0.bundleID == bundleID }) {
            apps.append(AppConfiguration(bundleID: bundleID))
        }
        if apps.isEmpty { apps = [AppConfiguration(bundleID: DefaultCatalog.bundleID)] }
        let limits = try ConnectionOptions.limits(arguments)
        let inFlight = try arguments.value("max-notifications-in-flight").map { text in
            guard let value = Int(text), (1...100_000).contains(value) else {
                throw CommandError.usage("--max-notifications-in-flight must be 1 to 100000")
            }
            return value
        }
        let maxInFlight = inFlight ?? AppStore.defaultMaxNotificationsInFlight
        let realtimeTimeout = try arguments.value("realtime-timeout-ms").map { text -> Duration in
            guard let value = Int64(text), (100...30_000).contains(value) else {
                throw CommandError.usage("--realtime-timeout-ms must be 100 to 30000")
            }
            return .milliseconds(value)
        }
        let retention = try arguments.notificationRetention()
        let logger = try LoggingOptions.logger(arguments, label: "appstore")
        let host = arguments.value("host") ?? "127.0.0.1"
        let token = arguments.value("token") ?? ProcessInfo.processInfo.environment["STOREKEEPER_TOKEN"]
        if let token, token.count < 16 { throw CommandError.usage("--token must be at least 16 characters") }
        if !ControlPlaneGuard.isLoopback(host) && token == nil {
            guard arguments.flag("insecure") else {
                throw CommandError.usage(
                    "--host \(host) exposes the unauthenticated control plane beyond this machine: give --token "
                        + "(or STOREKEEPER_TOKEN), or --insecure to do it anyway")
            }
            console.writeError(
                "WARNING: --insecure: the emulator's control plane on \(host) has no token; anyone who can reach it "
                    + "can drive the store\n")
        }
        let data = URL(fileURLWithPath: dataDirectory(arguments))
        let dataExisted = FileManager.default.fileExists(atPath: data.path)
        let (finalCatalogs, finalApps, finalRate) = (catalogs, apps, rate ?? catalogs.first?.settings.timeRate)
        let store: AppStore
        do {
            store = try await AppStore(
                catalog: finalCatalogs, apps: finalApps, dataDirectory: data, rate: finalRate, logger: logger,
                maxNotificationsInFlight: maxInFlight, notificationRetention: retention,
                realtimeTimeout: realtimeTimeout ?? RetentionLimits.realtimeTimeout)
        } catch let error as EmulatorError {
            // The catalogues, keys or apps given are not usable (cli.md: exit 2); anything else failed to run.
            throw error.code == "configuration"
                ? CommandError.input(error.message) : CommandError.runtime(error.message)
        }
        let controlPlane = ControlPlaneGuard(
            listeningOn: host, extraHosts: arguments.all("allow-host"), token: token)
        let server: HTTPServer
        do {
            server = try HTTPServer(
                host: host, port: port, limits: limits, responder: EmulatorRoutes(store).responder(guard: controlPlane),
                logger: logger)
        } catch let error as HTTPError {
            // A failed start leaves nothing behind.
            store.close()
            if !dataExisted { try? FileManager.default.removeItem(at: data) }
            throw CommandError.runtime(error.message)
        }
        controlPlane.setPort(server.port)
        store.startScheduler()
        let shown = host.contains(":") ? "[\(host)]" : host
        console.write("Storekeeper App Store emulator listening on http://\(shown):\(server.port)\n")
        console.write("  apps: \(apps.map(\.bundleID).joined(separator: ", ")); data: \(data.path)\n")
        await TerminationSignals.received()
        store.stopScheduler()
        server.stop()
        console.write("stopped\n")
        return 0
    }

    /// `--config`'s `billingPlans`: a yearly subscription's monthly plan over a commitment, by product id, for
    /// catalogues that do not carry one (Xcode's `.storekit` key for it is not published).
    static func applyBillingPlans(_ path: String?, to catalogs: inout [StoreKitConfiguration]) throws {
        guard let path, let data = FileManager.default.contents(atPath: path),
            let plans = (try? JSONParser.parse(Array(data)))?["billingPlans"]
        else { return }
        guard let byProduct = plans.objectValue else {
            throw CommandError.input("billingPlans in '\(path)' maps product ids to lists of plans")
        }
        for (productID, list) in byProduct.members {
            var found = false
            for index in catalogs.indices where !found {
                do {
                    found = try catalogs[index].setBillingPlans(productID: productID, list)
                } catch {
                    throw CommandError.input("'\(path)': \(error.description)")
                }
            }
            guard found else {
                throw CommandError.input("billingPlans in '\(path)' names \(productID), which no catalogue sells")
            }
        }
    }

    static func loadApps(_ path: String?) throws -> [AppConfiguration] {
        guard let path else { return [] }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CommandError.input("cannot read '\(path)'")
        }
        let parsed: JSONValue
        do { parsed = try JSONParser.parse(Array(data)) } catch let error as JSONParser.Error {
            throw CommandError.input("'\(path)' is not valid JSON: \(error.location(in: Array(data)))")
        }
        guard let root = parsed.objectValue, let list = root["apps"]?.arrayValue else {
            throw CommandError.input("'\(path)' is not a JSON object with an \"apps\" array")
        }
        return try list.map { item in
            guard let bundleID = item["bundleId"]?.stringValue else {
                throw CommandError.input("an app in '\(path)' has no bundleId")
            }
            var app = AppConfiguration(
                bundleID: bundleID, appAppleID: item["appAppleId"]?.int64Value ?? 1_234_567_890,
                version: item["version"]?.stringValue ?? "1.0", sharedSecret: item["sharedSecret"]?.stringValue)
            if let keys = item["offerKeys"] {
                guard let object = keys.objectValue else {
                    throw CommandError.input("offerKeys of \(bundleID) in '\(path)' must map key ids to keys")
                }
                for (id, value) in object.members {
                    guard let text = value.stringValue else {
                        throw CommandError.input(
                            "offer key \(id) of \(bundleID) in '\(path)' must be a PEM key or a file")
                    }
                    app.offerKeys[id] = try pem(text, configuration: path, name: "offer key \(id) of \(bundleID)")
                }
            }
            for (index, value) in ((item["apiKeys"]?.arrayValue ?? []) + (root["apiKeys"]?.arrayValue ?? []))
                .enumerated()
            {
                guard let keyID = value["keyId"]?.stringValue, let issuerID = value["issuerId"]?.stringValue,
                    let key = value["publicKey"]?.stringValue
                else {
                    throw CommandError.input(
                        "apiKeys entry \(index) of \(bundleID) in '\(path)' needs keyId, issuerId and publicKey")
                }
                app.apiKeys.append(
                    APIKeyConfiguration(
                        keyID: keyID, issuerID: issuerID,
                        publicKey: try pem(key, configuration: path, name: "API key \(keyID)")))
            }
            if let notifications = item["notifications"] {
                do { app.notifications = try AppNotifications(json: notifications) } catch let error as EmulatorError {
                    throw CommandError.input("the notifications of \(bundleID) in '\(path)': \(error.message)")
                }
            }
            return app
        }
    }

    /// A key as the configuration gives it: PEM text, or the path of a PEM file (a `.p8`) relative to the
    /// configuration file.
    static func pem(_ text: String, configuration path: String, name: String) throws -> String {
        guard !text.contains("-----BEGIN") else { return text }
        let file = URL(fileURLWithPath: text, relativeTo: URL(fileURLWithPath: path).deletingLastPathComponent())
        guard let contents = FileManager.default.contents(atPath: file.path) else {
            throw CommandError.input("cannot read \(name) at '\(file.path)'")
        }
        return String(decoding: contents, as: UTF8.self)
    }

    static func dataDirectory(_ arguments: Arguments) -> String {
        arguments.value("data") ?? ProcessInfo.processInfo.environment["STOREKEEPER_DATA"] ?? "storekeeper-data"
    }
}
