import Foundation
import PurchaseServer
import StoreKitCatalog
import StoreTime
import StorekeeperCommandLine
import StorekeeperLogging
import StorekeeperRehearsal

/// `storekeeper dev`: the emulator and the purchase server, wired for a rehearsal.
enum DevCommand {
    static let spec = Arguments.Spec(
        command: "storekeeper dev",
        abstract: "Run the App Store emulator and the purchase server together, wired as a developer needs them.",
        options: [
            .init(
                name: "data", valueName: "dir",
                help: "Where both keep their state and the server's configuration (default: storekeeper-dev)."),
            .init(name: "port", valueName: "n", help: "The emulator's port; 0 picks a free one (default: 8080)."),
            .init(name: "server-port", valueName: "n", help: "The purchase server's port (default: 8090)."),
            .init(
                name: "host", valueName: "address",
                help: "Address both listen on (default: 127.0.0.1, this machine only)."
            ),
            .init(
                name: "storekit", valueName: "file", help: "An Xcode .storekit catalogue (default: a built-in one).",
                repeatable: true),
            .init(
                name: "bundle-id", valueName: "id", help: "An app to sell for (default: com.example.storekeeper).",
                repeatable: true),
            .init(name: "rate", valueName: "name", help: "Time rate, e.g. monthlyRenewalEveryFiveMinutes or realTime."),
            .init(
                name: "webhook", valueName: "url",
                help: "Send the server's webhooks here too (signed with a secret printed at start).", repeatable: true),
            .init(
                name: "reconcile-every", valueName: "seconds",
                help:
                    "How often the server polls the emulator for news it missed (default: server.json's reconciliation.intervalSeconds, 15 as first written; 0: never)."
            ),
            .init(
                name: "log-level", valueName: "level",
                help: "trace, debug, info, notice, warning (default: requests are not logged), error or critical."),
            LoggingOptions.format,
        ],
        discussion: """
            On its first start in --data it writes the server's configuration, server.json (mode 0600): a \
            secret key, each app's public key, the emulator's roots beside Apple's, a minted App Store Server \
            API key, entitlements from the catalogue's subscription groups and products, and the webhooks. \
            Later starts read it as it is (edit it freely; dev keeps the server's storage in --data, runs it on \
            the emulator's clock and points each appStoreServerAPI at the emulator, whatever database, clock or \
            URLs the file names). The emulator's notifications go to the server, the \
            server reconciles through the emulator's App Store Server API, and the server's purchase state runs \
            on the emulator's store time, so `appstore advance` moves both. Stops both on Ctrl-C.
            """)

    static func run(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        TerminationSignals.hold()
        var options = Rehearsal.Options(
            dataDirectory: URL(fileURLWithPath: arguments.value("data") ?? "storekeeper-dev"))
        func port(_ name: String, _ fallback: Int) throws -> Int {
            guard let text = arguments.value(name) else { return fallback }
            guard let value = Int(text), (0...65_535).contains(value) else {
                throw CommandError.usage("--\(name) must be 0 to 65535")
            }
            return value
        }
        options.emulatorPort = try port("port", 8080)
        options.serverPort = try port("server-port", 8090)
        if let host = arguments.value("host") {
            guard ["127.0.0.1", "::1", "localhost"].contains(host) else {
                throw CommandError.usage(
                    "dev listens on this machine only (127.0.0.1, ::1 or localhost): its control plane has no token")
            }
            options.host = host
        }
        for path in arguments.all("storekit") {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw CommandError.input("cannot read '\(path)'")
            }
            do { options.catalogs.append(try StoreKitConfiguration(data: Array(data))) } catch {
                throw CommandError.input("'\(path)': \(error.description)")
            }
        }
        options.bundleIDs = arguments.all("bundle-id")
        if let name = arguments.value("rate") {
            guard let rate = TimeRate(name: name) else {
                throw CommandError.usage(
                    "'\(name)' is not a time rate (one of \(TimeRate.all.map(\.name).joined(separator: ", ")))")
            }
            options.rate = rate
        }
        for url in arguments.all("webhook") {
            guard url.hasPrefix("http://") || url.hasPrefix("https://"), URL(string: url)?.host != nil else {
                throw CommandError.usage("--webhook takes an http(s) URL, not '\(url)'")
            }
            options.webhooks.append(url)
        }
        if let text = arguments.value("reconcile-every") {
            guard let seconds = Double(text), seconds >= 0, seconds <= 86_400 else {
                throw CommandError.usage("--reconcile-every is 0 to 86400 seconds")
            }
            options.reconcileEvery = seconds
        }
        // The terminal is for the instructions printed below: a line per request only when asked.
        options.logger = try LoggingOptions.logger(arguments, label: "dev", level: .warning)
        let rehearsal: Rehearsal
        do { rehearsal = try await Rehearsal.start(options) } catch let error as Rehearsal.StartError {
            throw error.inConfiguration
                ? CommandError.input(error.description) : CommandError.runtime(error.description)
        }
        let configuration = rehearsal.configuration
        for warning in configuration.warnings { console.writeError("warning: \(warning)\n") }
        let app = configuration.apps[0]
        console.write(
            """
            Storekeeper dev: the App Store emulator and the purchase server, wired together
              emulator         \(rehearsal.emulatorURL)   (dashboard \(rehearsal.emulatorURL)/dashboard)
              purchase server  \(rehearsal.serverURL)   (dashboard \(rehearsal.serverURL)/dashboard)
              configuration    \(rehearsal.configurationFile.path)\(rehearsal.wroteConfiguration ? " (written now)" : "")
              app key          \(app.publicKey)   (what \(app.bundleID) sends; the secret key is in the configuration)
              entitlements     \(app.entitlements.keys.sorted().joined(separator: ", "))

            """)
        for hook in configuration.apps.flatMap(\.webhooks) {
            console.write("  webhook          \(hook.url)   secret \(hook.secret)\n")
        }
        let product =
            rehearsal.catalogs.flatMap(\.subscriptions).first?.productID ?? "com.example.storekeeper.monthly"
        console.write(
            """
            Try, in another terminal:
              export STOREKEEPER_URL=\(rehearsal.emulatorURL) STOREKEEPER_SERVER=\(rehearsal.serverURL) \
            STOREKEEPER_APP_KEY=\(app.publicKey) STOREKEEPER_BUNDLE_ID=\(app.bundleID) \\
                STOREKEEPER_SERVER_CONFIG=\(rehearsal.configurationFile.path)
              device=$(storekeeper appstore device --account \
            "$(storekeeper appstore account --field accountId)" --field deviceId)
              storekeeper appstore install --device "$device"
              storekeeper appstore buy --device "$device" --product \(product) --app-user-id alice \
            --field transaction.transactionIdentifier
              storekeeper appstore advance --by P1M
              storekeeper server subscriber alice

            """)
        await TerminationSignals.received()
        await rehearsal.stop()
        console.write("stopped\n")
        return 0
    }
}
