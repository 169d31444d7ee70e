import Foundation
import StorekeeperCommandLine
import StorekeeperHTTP
import StorekeeperJSON

/// `storekeeper server …`: read a running purchase server with its secret key.
enum ServerClientCommands {
    static let options: [Arguments.Spec.Option] = [
        .init(
            name: "server", valueName: "url",
            help: "The purchase server (default: $STOREKEEPER_SERVER, else http://127.0.0.1:8090)."),
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
        command: "storekeeper server events",
        abstract: "Print an app user's events, oldest first: up to --limit of them, after --cursor when given.",
        positionals: [(name: "app-user-id", help: "The app's id of the user.")],
        options: options + [
            .init(
                name: "limit", valueName: "n",
                help: "At most this many events, 1 to 100000 (default: 10000; the answer's nextCursor goes on)."),
            .init(name: "cursor", valueName: "cursor", help: "Start after this nextCursor of an earlier answer."),
        ])

    static func subscriber(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        try AppStoreCommands.printAnswer(try await get(arguments, suffix: "", query: []), arguments, console)
        return 0
    }

    /// Events one call holds and prints when not told: a user's whole history can be longer than memory.
    static let defaultEventLimit = 10_000
    /// The most one call takes (`--limit`); `--cursor` goes on from its answer.
    static let maximumEventLimit = 100_000

    /// The server's pages of 500 followed until the user's last event or `--limit`: one answer of the same
    /// shape, its `nextCursor` where a later call would go on (null after the last).
    static func events(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        var limit = defaultEventLimit
        if let text = arguments.value("limit") {
            guard let value = Int(text), (1...maximumEventLimit).contains(value) else {
                throw CommandError.usage("--limit is a whole number from 1 to \(maximumEventLimit)")
            }
            limit = value
        }
        var cursor = arguments.value("cursor")
        var events: [JSONValue] = []
        repeat {
            var query = [("limit", String(min(500, limit - events.count)))]
            if let cursor { query.append(("cursor", cursor)) }
            let page = try await get(arguments, suffix: "/events", query: query)
            let added = page["events"]?.arrayValue ?? []
            let next = page["nextCursor"]?.stringValue
            // A page that adds nothing yet says there is more would be asked for again and again.
            if next != nil, added.isEmpty || next == cursor {
                throw CommandError.runtime("the purchase server answered a page of events that does not move on")
            }
            events += added
            cursor = next
        } while cursor != nil && events.count < limit
        let answer = JSONValue.object(["events": .array(events), "nextCursor": cursor.map(JSONValue.string) ?? .null])
        try AppStoreCommands.printAnswer(answer, arguments, console)
        return 0
    }

    static func get(_ arguments: Arguments, suffix: String, query: [(String, String)]) async throws -> JSONValue {
        let environment = ProcessInfo.processInfo.environment
        guard let user = arguments.positionals.first else { throw CommandError.usage("Missing the app user id") }
        // As the appstore commands find the emulator on 8080, these find serve's default port.
        let server = arguments.value("server") ?? environment["STOREKEEPER_SERVER"] ?? "http://127.0.0.1:8090"
        guard server.hasPrefix("http://") || server.hasPrefix("https://") else {
            throw CommandError.usage("--server must start with http:// or https://, e.g. http://127.0.0.1:8090")
        }
        let key = try secretKey(arguments, environment)
        var path = "/v1/subscribers/" + (user.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? user)
        path += suffix
        var items = query
        if let bundle = arguments.value("bundle-id") { items.insert(("bundleId", bundle), at: 0) }
        if !items.isEmpty {
            path +=
                "?"
                + items.map { $0 + "=" + ($1.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $1) }
                .joined(separator: "&")
        }
        let response: HTTPClient.Response
        do {
            response = try await HTTPClient(timeout: .seconds(30)).send(
                "GET", server + path, headers: [("Authorization", "Bearer " + key)])
        } catch {
            throw CommandError.unavailable(
                "cannot reach the purchase server at \(HTTPClient.printable(server)): \(error.code)")
        }
        let answer = (try? JSONParser.parse(response.body)) ?? .null
        guard response.status == 200 else {
            let message = answer["error"]?["message"]?.stringValue ?? "no details"
            // The emulator has no such route: it answers 404 "no such resource"; the server's own 404 names the user.
            let hint =
                response.status == 404 && message == "no such resource"
                ? " (is --server the emulator? server commands talk to the purchase server, `storekeeper serve`)"
                : response.status == 401 && message.contains("<token>")
                    ? " (that is the emulator: server commands talk to the purchase server, `storekeeper serve`)"
                    : response.status == 401 && message.contains("<secret key>")
                        ? " (the secret key was refused: check --secret-key, or the --config it is read from)" : ""
            throw CommandError.runtime(
                "the purchase server answered HTTP \(response.status) ("
                    + "\(answer["error"]?["code"]?.stringValue ?? "error")): " + message + hint)
        }
        return answer
    }

    /// The server's secret key: the command line's `--secret-key` or `--config` first, then
    /// `$STOREKEEPER_SECRET_KEY`, then `$STOREKEEPER_SERVER_CONFIG` (an option given wins over a variable).
    static func secretKey(_ arguments: Arguments, _ environment: [String: String]) throws -> String {
        if let key = arguments.value("secret-key") { return key }
        if let path = arguments.value("config") { return try secretKey(file: path, environment) }
        if let key = environment["STOREKEEPER_SECRET_KEY"] { return key }
        if let path = environment["STOREKEEPER_SERVER_CONFIG"] { return try secretKey(file: path, environment) }
        throw CommandError.usage("give --config (the server's server.json), --secret-key or STOREKEEPER_SECRET_KEY")
    }

    /// The `secretKey` of a configuration file; one written `"${NAME}"` is the variable's value, as `serve`
    /// reads it.
    static func secretKey(file path: String, _ environment: [String: String]) throws -> String {
        guard let data = FileManager.default.contents(atPath: path),
            let key = (try? JSONParser.parse(Array(data)))?["secretKey"]?.stringValue
        else { throw CommandError.input("'\(path)' is not a server configuration with a secretKey") }
        guard key.contains("${") else { return key }
        guard key.hasPrefix("${"), key.hasSuffix("}"), let value = environment[String(key.dropFirst(2).dropLast())]
        else {
            throw CommandError.input(
                "'\(path)' reads its secretKey from an environment variable this shell does not set: give --secret-key")
        }
        return value
    }
}
