import Foundation
import PurchaseServer
import StorekeeperCommandLine
import StorekeeperHTTP
import StorekeeperLogging
import StorekeeperPostgres

/// `storekeeper serve`: the purchase server.
enum ServeCommands {
    static let spec = Arguments.Spec(
        command: "storekeeper serve",
        abstract: "Run the purchase server: receipts, transactions and Apple's notifications in; entitlements out.",
        options: [
            .init(
                name: "config", valueName: "file",
                help: "The server's JSON configuration (secretKey, apps; \"${NAME}\" reads the environment).",
                required: true),
            .init(
                name: "data", valueName: "dir",
                help:
                    "Where the SQLite database is kept (default: $STOREKEEPER_SERVER_DATA or storekeeper-server-data)."),
            .init(
                name: "database", valueName: "url",
                help:
                    "A postgres:// URL: the state in PostgreSQL, shared by every server process on it (default: the "
                    + "config's \"database\", else SQLite in --data)."),
            .init(
                name: "host", valueName: "address", help: "Address to listen on (default: 127.0.0.1; 0.0.0.0 for all)."),
            .init(
                name: "tls-cert", valueName: "file",
                help: "Serve HTTPS with this PEM certificate chain (Apple sends notifications to https URLs only)."),
            .init(name: "tls-key", valueName: "file", help: "The certificate's PEM private key (with --tls-cert)."),
            .init(name: "port", valueName: "n", help: "Port to listen on; 0 picks a free one (default: 8090)."),
            .init(
                name: "clock", valueName: "url",
                help:
                    "Follow this App Store emulator's store time for purchase state, charts and reconciliation "
                    + "(rehearsals; default: the config's \"clock\", else the wall clock)."),
            LoggingOptions.level, LoggingOptions.format,
        ] + ConnectionOptions.all,
        discussion: """
            Several processes started with one --database behave as one: each input is applied once, each \
            webhook is sent by one process, and one process at a time runs reconciliation. Prints the address \
            it listens on, then serves until SIGINT or SIGTERM, finishing requests in \
            flight. Routes: POST /v1/receipts and /v1/transactions (the app's public key), POST \
            /v1/notifications/apple/{bundleId} (Apple's, verified by signature), GET /v1/subscribers/{appUserId} \
            and …/events, POST …/entitlements/{name}/grant|revoke and …/aliases, GET /v1/webhooks/deliveries (the \
            secret key), \
            GET /healthz and /metrics. With --clock, purchase state, entitlements, charts and reconciliation run \
            on the emulator's store time (read every quarter second; a token from $STOREKEEPER_TOKEN), while \
            webhooks, leases and Apple's rate limits stay on the wall clock.
            """)

    static func run(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        TerminationSignals.hold()
        let port = Int(arguments.value("port") ?? "8090") ?? -1
        guard (0...65_535).contains(port) else { throw CommandError.usage("--port must be 0 to 65535") }
        let configuration: ServerConfiguration
        do {
            configuration = try ServerConfiguration.load(
                path: arguments.value("config")!, variables: ProcessInfo.processInfo.environment)
        } catch let error as PurchaseServerError {
            throw CommandError.input(error.message)
        }
        for warning in configuration.warnings { console.writeError("warning: \(warning)\n") }
        let logger = try LoggingOptions.logger(arguments, label: "serve")
        let storage: any ServerStorage
        let database = arguments.value("database") ?? configuration.database
        if let database {
            guard ServerConfiguration.isPostgresURL(database) else {
                throw CommandError.usage("--database is a postgres:// URL (leave it out for SQLite in --data)")
            }
            if let given = arguments.value("database"), PostgresDatabase.redacted(given) != given {
                console.writeError(
                    "warning: --database carries a password, which every user of this machine can read (ps, "
                        + "/proc): give it in the configuration's \"database\" as ${VARIABLE}, or in PGPASSWORD\n")
            }
            do { storage = try await PostgresServerStorage(url: database) } catch {
                throw CommandError.runtime("cannot open the PostgreSQL database: \(error)")
            }
        } else {
            let data = URL(
                fileURLWithPath: arguments.value("data")
                    ?? ProcessInfo.processInfo.environment["STOREKEEPER_SERVER_DATA"] ?? "storekeeper-server-data")
            do {
                try FileManager.default.createDirectory(
                    at: data, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch { throw CommandError.input("cannot create '\(data.path)'") }
            let path = data.appendingPathComponent("server.sqlite").path
            storage = try await SQLiteServerStorage(path: path)
        }
        var tls: TLSCredentials?
        switch (arguments.value("tls-cert"), arguments.value("tls-key")) {
        case (nil, nil): tls = nil
        case (let certificate?, let key?):
            do { tls = try TLSCredentials(certificateFile: certificate, keyFile: key) } catch let error as HTTPError {
                throw CommandError.input(error.message)
            }
        default: throw CommandError.usage("--tls-cert and --tls-key go together")
        }
        var followed: FollowedClock?
        if let url = arguments.value("clock") ?? configuration.clock {
            guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
                throw CommandError.usage("--clock (or the configuration's clock) is an http:// or https:// URL")
            }
            do {
                followed = try await FollowedClock(
                    url: url, token: ProcessInfo.processInfo.environment["STOREKEEPER_TOKEN"])
            } catch { throw CommandError.unavailable(error.message) }
        }
        let clock = followed
        let server = try PurchaseServer(
            configuration: configuration, storage: storage, logger: logger, now: { clock?.now() ?? Date() })
        let http: HTTPServer
        do {
            http = try HTTPServer(
                host: arguments.value("host") ?? "127.0.0.1", port: port,
                limits: try ConnectionOptions.limits(arguments),
                tls: tls, responder: server.responder(secureCookies: tls != nil), logger: logger)
        } catch let error as HTTPError {
            throw CommandError.runtime(error.message)
        }
        followed?.start()
        server.startDelivery()
        if configuration.reconcileEverySeconds > 0, configuration.apps.contains(where: { $0.serverAPI != nil }) {
            server.startReconciliation(every: .milliseconds(Int64(configuration.reconcileEverySeconds * 1000)))
        }
        let scheme = tls == nil ? "http" : "https"
        console.write(
            "purchase server listening on \(scheme)://\(arguments.value("host") ?? "127.0.0.1"):\(http.port)\n")
        console.write(
            "  apps: \(configuration.apps.map(\.bundleID).joined(separator: ", ")); data: \(storage.location)\n")
        if let followed { console.write("  store time followed from \(HTTPClient.printable(followed.url))\n") }
        let host = arguments.value("host") ?? "127.0.0.1"
        if tls == nil, !HTTPAddress.isLoopback(host) {
            console.write(
                "  WARNING: plain HTTP on \(host): the secret key, the dashboard's sign-in and its cookie cross the "
                    + "network unencrypted; give --tls-cert and --tls-key, or listen on 127.0.0.1 behind a TLS proxy "
                    + "(docs/operations.md)\n")
        }
        await TerminationSignals.received()
        // Requests in flight finish (up to ten seconds) before the server stops.
        await http.stop(waitingUpTo: .seconds(10))
        server.stopDelivery()
        await server.leave()
        followed?.stop()
        console.write("stopped\n")
        return 0
    }
}
