import Foundation
import StorekeeperCommandLine
import StorekeeperHTTP
import StorekeeperJSON

/// `storekeeper server …`: read a running purchase server with its secret key.
enum ServerClientCommands {
    static let options: [Arguments.Spec.Option] = [
        .init(name: "server", valueName: "url", help: "The purchase server (default: $STOREKEEPER_SERVER)."),
        .init(
            name: "config", valueName: "file",
            help: "The server's configuration, to read its secret key from (default: $STOREKEEPER_SERVER_CONFIG)."),
        .init(
            name: "secret-key", valueName: "key", help: "The server's secret key (default: $STOREKEEPER_SECRET_KEY)."),
        .init(name: "bundle-id", valueName: "id", help: "The app, when the server serves several."),
        AppStoreCommands.fieldOption,
    ]

    static let subscriberSpec = Arguments.Spec(
        command: "storekeeper server subscriber",
        abstract: "Print an app user's subscriptions, purchases and entitlements as the purchase server holds them.",
        positionals: [(name: "app-user-id", help: "The app's id of the user.")], options: options)

    static let eventsSpec = Arguments.Spec(
        command: "storekeeper server events", abstract: "Print an app user's events, oldest first.",
        positionals: [(name: "app-user-id", help: "The app's id of the user.")], options: options)

    static func subscriber(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        try await get(arguments, console, suffix: "")
    }

    static func events(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        try await get(arguments, console, suffix: "/events")
    }

    static func get(_ arguments: Arguments, _ console: Console, suffix: String) async throws -> Int32 {
        let environment = ProcessInfo.processInfo.environment
        guard let user = arguments.positionals.first else { throw CommandError.usage("Missing the app user id") }
        guard let server = arguments.value("server") ?? environment["STOREKEEPER_SERVER"] else {
            throw CommandError.usage("give --server (or STOREKEEPER_SERVER)")
        }
        let key = try secretKey(arguments, environment)
        var path = "/v1/subscribers/" + (user.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? user)
        path += suffix
        if let bundle = arguments.value("bundle-id") { path += "?bundleId=" + bundle }
        let response: HTTPClient.Response
        do {
            response = try await HTTPClient(timeout: .seconds(30)).send(
                "GET", server + path, headers: [("Authorization", "Bearer " + key)])
        } catch {
            throw CommandError.unavailable("cannot reach the purchase server at \(server): \(error.code)")
        }
        let answer = (try? JSONParser.parse(response.body)) ?? .null
        guard response.status == 200 else {
            throw CommandError.runtime(
                "the purchase server answered HTTP \(response.status) ("
                    + "\(answer["error"]?["code"]?.stringValue ?? "error")): "
                    + (answer["error"]?["message"]?.stringValue ?? "no details"))
        }
        try AppStoreCommands.printAnswer(answer, arguments, console)
        return 0
    }

    /// `--secret-key`, `$STOREKEEPER_SECRET_KEY`, or the `secretKey` of the configuration file named.
    static func secretKey(_ arguments: Arguments, _ environment: [String: String]) throws -> String {
        if let key = arguments.value("secret-key") ?? environment["STOREKEEPER_SECRET_KEY"] { return key }
        guard let path = arguments.value("config") ?? environment["STOREKEEPER_SERVER_CONFIG"] else {
            throw CommandError.usage("give --config (the server's server.json), --secret-key or STOREKEEPER_SECRET_KEY")
        }
        guard let data = FileManager.default.contents(atPath: path),
            let key = (try? JSONParser.parse(Array(data)))?["secretKey"]?.stringValue
        else { throw CommandError.input("'\(path)' is not a server configuration with a secretKey") }
        if key.hasPrefix("${") {
            throw CommandError.input("'\(path)' reads its secretKey from the environment: give --secret-key")
        }
        return key
    }
}
