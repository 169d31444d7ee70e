import AppStoreReceipts
public import Foundation
import StorekeeperBench
public import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP

/// The `storekeeper` command: dispatches to subcommands; every outcome is an exit status.
public enum Storekeeper {
    static let version = "0.1.0"

    /// The top-level help, made from the command table (so that it lists every command): one line per
    /// command, the App Store Server API's endpoints on one.
    static var overview: String {
        func row(_ name: String, _ abstract: String) -> String {
            let pad =
                name.count < 28
                ? String(repeating: " ", count: 28 - name.count) : "\n" + String(repeating: " ", count: 30)
            return "  " + name + pad + abstract + "\n"
        }
        var rows = ""
        var listedAPI = false
        for command in commands {
            if command.path[0] == "api" {
                guard !listedAPI else { continue }
                listedAPI = true
                rows += row(
                    "api <endpoint>",
                    "Call the App Store Server API (Apple's or the emulator's): "
                        + ServerAPICommands.endpoints.map(\.name).joined(separator: ", ") + ".")
                continue
            }
            rows += row(command.path.joined(separator: " "), command.spec.abstract)
        }
        return """
            OVERVIEW: Storekeeper — self-hosted in-app purchase verification, App Store emulation and purchase server.

            USAGE: storekeeper <subcommand>

            OPTIONS:
              --version                   Show the version.
              -h, --help                  Show help information.

            SUBCOMMANDS:
            \(rows)
              See 'storekeeper help <subcommand>' for detailed help.

            """
    }

    /// Every subcommand, in the order help lists them.
    static let commands: [Command] = (verbs + BenchCommands.commands + apiCommands + completion).map { command in
        // Every command that prints an answer shortens its JWS for people; `--json` prints it whole.
        guard command.spec.options.contains(where: { $0.name == "field" }),
            !command.spec.flags.contains(where: { $0.name == "json" })
        else { return command }
        var spec = command.spec
        spec.flags.append(("json", "Print the whole answer as JSON, signed data (JWS) in full."))
        return (command.path, spec, command.run)
    }

    static let completion: [Command] = [(["completion"], CompletionCommands.spec, CompletionCommands.run)]

    /// The commands that verify, sign, and run and drive the emulator and the server.
    static let verbs: [Command] =
        [
            (["receipt", "verify"], ReceiptCommands.verifySpec, ReceiptCommands.verify),
            (["receipt", "decode"], ReceiptCommands.decodeSpec, ReceiptCommands.decode),
            (["receipt", "sample"], ReceiptCommands.sampleSpec, ReceiptCommands.sample),
            (["jws", "verify"], JWSCommands.verifySpec, JWSCommands.verify),
            (["jws", "decode"], JWSCommands.decodeSpec, JWSCommands.decode),
            (["jws", "sign"], JWSCommands.signSpec, JWSCommands.sign),
            (["offer", "sign"], JWSCommands.offerSpec, JWSCommands.offer),
            (["appstore", "serve"], AppStoreCommands.serveSpec, AppStoreCommands.serve),
            (["appstore", "certs"], AppStoreCommands.certsSpec, AppStoreCommands.certs),
            (["appstore", "products"], AppStoreCommands.productsSpec, AppStoreCommands.products),
            (["appstore", "account"], AppStoreCommands.accountSpec, AppStoreCommands.account),
            (["appstore", "device"], AppStoreCommands.deviceSpec, AppStoreCommands.device),
            (["appstore", "install"], AppStoreCommands.installSpec, AppStoreCommands.install),
            (["appstore", "buy"], AppStoreCommands.buySpec, AppStoreCommands.buy),
            (["appstore", "transactions"], AppStoreCommands.transactionsSpec, AppStoreCommands.transactions),
            (["appstore", "finish"], AppStoreCommands.finishSpec, AppStoreCommands.finish),
            (["appstore", "receipt"], AppStoreCommands.receiptSpec, AppStoreCommands.receipt),
            (["appstore", "advance"], AppStoreCommands.advanceSpec, AppStoreCommands.advance),
            (
                ["appstore", "expire"], LifecycleCommands.verbSpec(LifecycleCommands.verbs[0]),
                LifecycleCommands.verb("expire")
            ),
            (
                ["appstore", "renew"], LifecycleCommands.verbSpec(LifecycleCommands.verbs[1]),
                LifecycleCommands.verb("renew")
            ),
            (
                ["appstore", "refund-reversal"], LifecycleCommands.verbSpec(LifecycleCommands.verbs[2]),
                LifecycleCommands.verb("refund-reversal")
            ),
            (
                ["appstore", "resolve-issue"], LifecycleCommands.verbSpec(LifecycleCommands.verbs[3]),
                LifecycleCommands.verb("resolve-issue")
            ),
            (
                ["appstore", "auto-renew"], LifecycleCommands.verbSpec(LifecycleCommands.verbs[4]),
                LifecycleCommands.verb("auto-renew")
            ),
            (
                ["appstore", "price-consent"], LifecycleCommands.verbSpec(LifecycleCommands.verbs[5]),
                LifecycleCommands.verb("price-consent")
            ),
            (["appstore", "refund"], LifecycleCommands.refundSpec, LifecycleCommands.refund),
            (["appstore", "refund-request"], LifecycleCommands.refundRequestSpec, LifecycleCommands.refundRequest),
            (["appstore", "refund-decision"], LifecycleCommands.refundDecisionSpec, LifecycleCommands.refundDecision),
            (["appstore", "billing"], LifecycleCommands.billingSpec, LifecycleCommands.billing),
            (["appstore", "price-increase"], LifecycleCommands.priceIncreaseSpec, LifecycleCommands.priceIncrease),
            (["appstore", "availability"], LifecycleCommands.availabilitySpec, LifecycleCommands.availability),
            (
                ["appstore", "notifications", "set"], LifecycleCommands.notificationsSetSpec,
                LifecycleCommands.notificationsSet
            ),
            (
                ["appstore", "notifications", "history"], LifecycleCommands.notificationsHistorySpec,
                LifecycleCommands.notificationsHistory
            ),
            (["appstore", "notifications", "listen"], LifecycleCommands.listenSpec, LifecycleCommands.listen),
            (["appstore", "family", "create"], LifecycleCommands.familyCreateSpec, LifecycleCommands.familyCreate),
            (["appstore", "family", "remove"], LifecycleCommands.familyRemoveSpec, LifecycleCommands.familyRemove),
            (["appstore", "scenario", "run"], ScenarioCommands.runSpec, ScenarioCommands.run),
            (["appstore", "api-key"], ServerAPICommands.apiKeySpec, ServerAPICommands.apiKey),
            (["serve"], ServeCommands.spec, ServeCommands.run),
            (["dev"], DevCommand.spec, DevCommand.run),
            (["server", "subscriber"], ServerClientCommands.subscriberSpec, ServerClientCommands.subscriber),
            (["server", "events"], ServerClientCommands.eventsSpec, ServerClientCommands.events),
        ]

    /// `storekeeper api <endpoint>`, one command per App Store Server API endpoint.
    static let apiCommands: [Command] = ServerAPICommands.endpoints.map { endpoint -> Command in
        (
            path: ["api", endpoint.name], spec: ServerAPICommands.spec(endpoint),
            run: ServerAPICommands.command(endpoint)
        )
    }

    /// The command groups and what they are for.
    static let groups: [(name: String, abstract: String)] = [
        ("receipt", "Verify and decode App Store receipts."),
        ("jws", "Verify, decode and sign StoreKit 2 signed data."),
        ("offer", "Sign promotional offers."),
        ("appstore", "Run the App Store emulator and drive it from the shell."),
        ("api", "Call the App Store Server API, Apple's or the emulator's."),
        ("bench", "Measure throughput against baselines measured in the same run."),
        ("server", "Read a running purchase server: a subscriber's state and events."),
    ]

    static let exitCodes = """
        EXIT CODES:
          0    success
          1    verification failed (a receipt or JWS that does not parse is also 1: malformed), or the
               emulator refused the request
          2    a file cannot be read, or a certificate or key is not one
          64   usage error
          69   the emulator or server cannot be reached

        """

    /// `storekeeper help <group>`: OVERVIEW, USAGE and the subcommands with their abstracts.
    static func groupHelp(_ group: String) -> String {
        let abstract = groups.first { $0.name == group }?.abstract ?? ""
        let members = commands.filter { $0.path.count >= 2 && $0.path[0] == group && $0.path[1] != "hold-connections" }
        let rows = members.map { command -> String in
            let name = command.path.dropFirst().joined(separator: " ")
            return "  " + name + String(repeating: " ", count: max(1, 28 - name.count)) + command.spec.abstract + "\n"
        }
        return "OVERVIEW: \(abstract)\n\nUSAGE: storekeeper \(group) <subcommand>\n\nOPTIONS:\n"
            + "  --version                   Show the version.\n  -h, --help                  Show help information.\n\n"
            + "SUBCOMMANDS:\n" + rows.joined()
            + "\n  See 'storekeeper help \(group) <subcommand>' for detailed help.\n"
    }

    /// Help for a command path (`["receipt", "verify"]`, `["appstore"]`, `[]`); nil when there is none.
    static func help(for path: [String]) -> String? {
        if path.isEmpty { return overview + "\n" + exitCodes }
        if let command = commands.first(where: { $0.path == path }) { return command.spec.help + "\n" + exitCodes }
        if path.count == 1,
            groups.contains(where: { $0.name == path[0] })
                || commands.contains(where: { $0.path.count > 1 && $0.path[0] == path[0] })
        {
            return groupHelp(path[0])
        }
        // A path below a group (`appstore notifications`): the commands under it.
        let below = commands.filter { $0.path.count > path.count && Array($0.path.prefix(path.count)) == path }
        guard !below.isEmpty else { return nil }
        let name = path.joined(separator: " ")
        return "USAGE: storekeeper \(name) <subcommand>\n\nSUBCOMMANDS:\n"
            + below.map { command in
                let sub = command.path.dropFirst(path.count).joined(separator: " ")
                return "  " + sub + String(repeating: " ", count: max(1, 28 - sub.count)) + command.spec.abstract + "\n"
            }.joined() + "\n  See 'storekeeper help \(name) <subcommand>' for detailed help.\n"
    }

    /// The closest of `names` to a mistyped `word` (at most two edits, and fewer than half its letters), if any.
    static func suggestion(_ word: String, among names: Set<String>) -> String? {
        let typed = Array(word.lowercased().utf8.prefix(64))
        func distance(_ other: [UInt8]) -> Int {
            var previous = Array(0...other.count)
            for (i, a) in typed.enumerated() {
                var current = [i + 1] + Array(repeating: 0, count: other.count)
                for (j, b) in other.enumerated() {
                    current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (a == b ? 0 : 1))
                }
                previous = current
            }
            return previous[other.count]
        }
        let scored = names.sorted().map { ($0, distance(Array($0.utf8.prefix(64)))) }
        guard let best = scored.min(by: { $0.1 < $1.1 }), best.1 <= 2, best.1 * 2 < max(typed.count, 1) else {
            return nil
        }
        return best.0
    }

    /// Runs the command line `arguments` (without the program name) and returns the exit status.
    public static func run(
        _ arguments: [String], console: Console = .standard, now: @Sendable () -> Date = { Date() }
    ) async -> Int32 {
        // Help at every level, as swift-argument-parser tools: `storekeeper`, `storekeeper help [path…]`,
        // `storekeeper <group>`, `storekeeper <group> help [sub]`, `… --help`.
        var words = arguments
        if words.first == "help" { words.removeFirst(); words.append("--help") }
        if words.count >= 2, words[1] == "help", groups.contains(where: { $0.name == words[0] }) {
            words.remove(at: 1)
            words.append("--help")
        }
        if words.isEmpty || words == ["--help"] || words == ["-h"] {
            console.write(help(for: [])!)
            return 0
        }
        if words == ["--version"] {
            console.write("\(version)\n")
            return 0
        }
        guard let command = commands.first(where: { Array(words.prefix($0.path.count)) == $0.path }) else {
            let bare = words.filter { $0 != "--help" && $0 != "-h" }
            if bare.count >= 2, let text = help(for: bare) {
                console.write(text)
                return 0
            }
            let group = words[0]
            if groups.contains(where: { $0.name == group })
                || commands.contains(where: { $0.path.count > 1 && $0.path[0] == group })
            {
                let rest = Array(words.dropFirst())
                if rest.isEmpty || rest.allSatisfy({ $0 == "--help" || $0 == "-h" }) {
                    console.write(groupHelp(group))
                    return 0
                }
                if rest == ["--version"] {
                    console.write("\(version)\n")
                    return 0
                }
                // The deepest known prefix is the group the mistyped word belongs to (`appstore notifications`
                // for `appstore notifications sett`).
                var known = [group]
                var next = 0
                while next < rest.count - 1,
                    commands.contains(where: {
                        $0.path.count > known.count + 1
                            && Array($0.path.prefix(known.count + 1)) == known + [rest[next]]
                    })
                {
                    known.append(rest[next])
                    next += 1
                }
                let parent = known.joined(separator: " ")
                let names = commands.filter {
                    $0.path.count > known.count && Array($0.path.prefix(known.count)) == known
                }
                .map { $0.path.dropFirst(known.count).joined(separator: " ") }
                let guess = suggestion(
                    rest[next], among: Set(names.compactMap { $0.split(separator: " ").first.map(String.init) }))
                console.writeError(
                    "Error: Unknown subcommand '\(rest[next])' of '\(parent)' (one of: \(names.joined(separator: ", "))).\n"
                        + (guess.map { "Did you mean '\(parent) \($0)'?\n" } ?? "")
                        + "Usage: storekeeper \(parent) <subcommand>\n  See 'storekeeper help \(parent)' for more information.\n"
                )
                return 64
            }
            let tops = Set(commands.map { $0.path[0] } + ["help"])
            console.writeError(
                "Error: Unknown subcommand '\(group)'.\n"
                    + (suggestion(group, among: tops).map { "Did you mean '\($0)'?\n" } ?? "")
                    + "Usage: storekeeper <subcommand>\n"
                    + "  See 'storekeeper --help' for the list of subcommands.\n")
            return 64
        }
        let rest = Array(words.dropFirst(command.path.count))
        do {
            switch try Arguments.parse(rest, spec: command.spec) {
            case .help:
                console.write(command.spec.help + "\n" + exitCodes)
                return 0
            case .version:
                console.write("\(version)\n")
                return 0
            case .parsed(let parsed):
                return try await command.run(parsed, console, now())
            }
        } catch let error as CommandError where error.kind == .usage {
            console.writeError(
                "Error: \(error.message)\nUsage: \(command.spec.usage)\n  See 'storekeeper help \(command.path.joined(separator: " "))' for more information.\n"
            )
            return error.exitStatus
        } catch let error as CommandError {
            console.writeError("Error: \(error.message)\n")
            return error.exitStatus
        } catch {
            console.writeError("Error: \(sentence(for: error))\n")
            return 1
        }
    }

    /// An unexpected error as a sentence: the module's reason, never a type name or a Foundation dump.
    static func sentence(for error: any Error) -> String {
        switch error {
        case let error as CryptoError: return error.reason
        case let error as ReceiptError: return error.reason
        case let error as HTTPClientError: return "the request failed: \(error.reason)"
        case let error as CocoaError:
            let path = (error.userInfo[NSFilePathErrorKey] as? String).map { " (\($0))" } ?? ""
            return "a file operation failed\(path): code \(error.code.rawValue)"
        default:
            let text = String(describing: error)
            return text.count <= 200 ? text : String(text.prefix(200)) + "…"
        }
    }
}
