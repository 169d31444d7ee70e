import Foundation
import StorekeeperCLITestSupport
import StorekeeperCommandLine
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// The command line behaves like swift-argument-parser tools: help at every level, `--version` everywhere,
/// results on stdout, errors on stderr, and the documented exit codes.
@Suite("storekeeper conventions")
struct ConventionTests {
    /// Every subcommand, as a user types it.
    static let commands: [[String]] = [
        ["receipt", "verify"], ["receipt", "decode"], ["receipt", "sample"], ["jws", "verify"], ["jws", "decode"],
        ["jws", "sign"], ["offer", "sign"], ["appstore", "serve"], ["appstore", "certs"], ["appstore", "products"],
        ["appstore", "account"], ["appstore", "device"], ["appstore", "install"], ["appstore", "buy"],
        ["appstore", "transactions"], ["appstore", "finish"], ["appstore", "receipt"], ["appstore", "advance"],
        ["bench", "receipt"], ["bench", "jws"], ["bench", "emulator"], ["bench", "http"], ["bench", "lifecycle"],
        ["fuzz"], ["completion"],
        ["appstore", "expire"], ["appstore", "renew"], ["appstore", "refund"], ["appstore", "refund-reversal"],
        ["appstore", "refund-request"], ["appstore", "refund-decision"],
        ["appstore", "resolve-issue"], ["appstore", "auto-renew"], ["appstore", "price-consent"],
        ["appstore", "billing"], ["appstore", "price-increase"], ["appstore", "availability"],
        ["appstore", "notifications", "set"], ["appstore", "notifications", "history"],
        ["appstore", "notifications", "listen"], ["appstore", "scenario", "run"], ["appstore", "family", "create"],
        ["appstore", "family", "remove"],
    ]
    static let groups = ["receipt", "jws", "offer", "appstore", "bench"]

    @Test("Bare storekeeper, help and --help print the overview with exit codes to stdout and exit 0")
    func topLevelHelp() async {
        for arguments in [[], ["help"], ["--help"], ["-h"]] {
            let run = await CapturedConsole.run(arguments)
            #expect(run.status == 0, "\(arguments)")
            #expect(run.stderr.isEmpty)
            #expect(run.stdout.contains("USAGE: storekeeper <subcommand>"))
            #expect(run.stdout.contains("EXIT CODES:"))
            #expect(run.stdout.contains("69   the emulator or server cannot be reached"))
            for command in Self.commands {
                #expect(run.stdout.contains(command.last!), "overview lists \(command)")
            }
        }
        #expect(await CapturedConsole.run(["--version"]).stdout == "0.1.0\n")
    }

    @Test("A path below a group lists what is under it: help appstore notifications, and the bare path")
    func nestedGroup() async {
        for arguments in [["help", "appstore", "notifications"], ["appstore", "notifications"]] {
            let run = await CapturedConsole.run(arguments)
            #expect(run.status == 0, "\(arguments): \(run.stderr)")
            for sub in ["set", "history", "listen"] { #expect(run.stdout.contains("  \(sub) ")) }
        }
        let appstore = await CapturedConsole.run(["appstore", "--help"]).stdout
        #expect(appstore.contains("  notifications listen "))
        #expect(!appstore.contains("hold-connections"))
    }

    @Test(
        "Every subcommand: --help, help <path> and <group> help <sub> print the same help; --version works",
        arguments: commands)
    func subcommandHelp(command: [String]) async {
        let direct = await CapturedConsole.run(command + ["--help"])
        #expect(direct.status == 0)
        #expect(direct.stderr.isEmpty)
        #expect(direct.stdout.hasPrefix("OVERVIEW: "))
        #expect(direct.stdout.contains("USAGE: storekeeper \(command.joined(separator: " "))"))
        #expect(direct.stdout.contains("EXIT CODES:"))
        let viaHelp = await CapturedConsole.run(["help"] + command)
        #expect(viaHelp.status == 0 && viaHelp.stdout == direct.stdout)
        if command.count >= 2 {
            let viaGroup = await CapturedConsole.run([command[0], "help"] + command.dropFirst())
            #expect(viaGroup.status == 0 && viaGroup.stdout == direct.stdout)
        }
        let version = await CapturedConsole.run(command + ["--version"])
        if direct.stdout.contains("--version <") {
            // The command's own --version option (the app version) replaces the flag, as in argument-parser.
            #expect(version.status == 64 && version.stderr.contains("--version"))
        } else {
            #expect(version.status == 0 && version.stdout == "0.1.0\n" && version.stderr.isEmpty)
        }
    }

    @Test(
        "Every subcommand: an unknown option is a usage error on stderr with the usage line, exit 64",
        arguments: commands)
    func unknownOption(command: [String]) async {
        let run = await CapturedConsole.run(command + ["--no-such-option"])
        #expect(run.status == 64)
        #expect(run.stdout.isEmpty)
        #expect(run.stderr.hasPrefix("Error: "))
        #expect(run.stderr.contains("Usage: storekeeper \(command.joined(separator: " "))"))
        #expect(run.stderr.contains("See 'storekeeper help \(command.joined(separator: " "))'"))
    }

    @Test(
        "Every group lists its subcommands with one-line descriptions; unknown subcommands name the valid ones",
        arguments: groups)
    func groupHelp(group: String) async {
        let members = Self.commands.filter { $0.count == 2 && $0[0] == group }
        for arguments in [[group], [group, "--help"], ["help", group], [group, "help"]] {
            let run = await CapturedConsole.run(arguments)
            #expect(run.status == 0, "\(arguments)")
            #expect(run.stdout.hasPrefix("OVERVIEW: "))
            for member in members {
                let line = run.stdout.split(separator: "\n").first { $0.hasPrefix("  \(member[1]) ") }
                #expect(line.map { $0.split(separator: " ").count > 2 } == true, "\(member[1]) has a description")
            }
        }
        let unknown = await CapturedConsole.run([group, "bogus"])
        #expect(unknown.status == 64)
        #expect(unknown.stdout.isEmpty)
        #expect(members.allSatisfy { unknown.stderr.contains($0[1]) })
        #expect(await CapturedConsole.run([group, "--version"]).stdout == "0.1.0\n")
    }

    @Test("Required options are unbracketed in usage; optional ones bracketed")
    func requiredOptions() async {
        let verify = await CapturedConsole.run(["receipt", "verify", "--help"]).stdout
        #expect(verify.contains(" --root <cert> ..."))
        #expect(!verify.contains("[--root"))
        #expect(verify.contains("[--bundle-id <id>]"))
        let missing = await CapturedConsole.run(["receipt", "verify"])
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("--root"))
    }

    @Test("Unknown subcommands and refused values are usage errors that list the valid choices")
    func refusedValues() async {
        let unknown = await CapturedConsole.run(["bogus"])
        #expect(unknown.status == 64 && unknown.stdout.isEmpty && unknown.stderr.hasPrefix("Error: "))
        #expect(!unknown.stderr.contains("Did you mean"), "nothing is close to bogus")
        // A typo gets the closest name.
        let typo = await CapturedConsole.run(["appstroe", "products"])
        #expect(typo.status == 64 && typo.stderr.contains("Did you mean 'appstore'?"), "\(typo.stderr)")
        let sub = await CapturedConsole.run(["appstore", "biy"])
        #expect(sub.status == 64 && sub.stderr.contains("Did you mean 'appstore buy'?"), "\(sub.stderr)")
        #expect((await CapturedConsole.run(["serv"])).stderr.contains("Did you mean 'serve'?"))
        // A mistyped third word is named with the group it belongs to.
        let deep = await CapturedConsole.run(["appstore", "notifications", "sett"])
        #expect(deep.status == 64, "\(deep.stderr)")
        #expect(deep.stderr.contains("Unknown subcommand 'sett' of 'appstore notifications'"), "\(deep.stderr)")
        #expect(deep.stderr.contains("Did you mean 'appstore notifications set'?"), "\(deep.stderr)")
        let server = await CapturedConsole.run(["server", "subscrber"])
        #expect(server.stderr.contains("Did you mean 'server subscriber'?"), "\(server.stderr)")
        let rate = await CapturedConsole.run(["appstore", "advance", "--rate", "bogus"])
        #expect(rate.status == 64)
        #expect(rate.stderr.contains("realTime") && rate.stderr.contains("monthlyRenewalEveryFiveMinutes"))
        let url = await CapturedConsole.run(["appstore", "products", "--url", "localhost:8080"])
        #expect(url.status == 64)
        #expect(url.stderr.contains("http://"))
        // An empty value (an unset shell variable) is named as such, not sent on.
        let empty = await CapturedConsole.run(["appstore", "transactions", "--device", ""])
        #expect(empty.status == 64 && empty.stderr.contains("'--device' was given an empty value"), "\(empty.stderr)")
        // Where an empty value means something (no retries), it is taken: the emulator is not there, 69.
        let none = await CapturedConsole.run([
            "appstore", "notifications", "set", "--retry-schedule", "", "--url", "http://127.0.0.1:1",
        ])
        #expect(none.status == 69, "\(none.stderr)")
        // Environments in any case: "sandbox" is Sandbox (the emulator is not there: 69, not a usage error).
        for (environment, status) in [("sandbox", Int32(69)), ("PRODUCTION", 69), ("staging", 64)] {
            let run = await CapturedConsole.run([
                "appstore", "notifications", "history", "--environment", environment, "--url", "http://127.0.0.1:1",
            ])
            #expect(run.status == status, "\(environment): \(run.stderr)")
        }
        for value in ["0", "many"] {
            let inFlight = await CapturedConsole.run(["appstore", "serve", "--max-notifications-in-flight", value])
            #expect(inFlight.status == 64)
            #expect(inFlight.stderr.contains("--max-notifications-in-flight must be 1 to 100000"))
        }
        for value in ["0", "3651", "forever"] {
            let retention = await CapturedConsole.run(["appstore", "serve", "--notification-retention-days", value])
            #expect(retention.status == 64)
            #expect(retention.stderr.contains("--notification-retention-days must be 1 to 3650"))
        }
    }

    @Test("Exit 2 for files that cannot be read or are not certificates or keys; 1 for what does not parse")
    func exitCodes() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        let notACertificate = directory.appendingPathComponent("root.pem")
        try Data("not a certificate".utf8).write(to: notACertificate)
        let garbage = directory.appendingPathComponent("garbage.der")
        try Data("%%%".utf8).write(to: garbage)

        let unreadable = await CapturedConsole.run([
            "receipt", "verify", directory.path + "/none", "--root", garbage.path,
        ])
        #expect(unreadable.status == 2, "\(unreadable.stderr)")
        let badRoot = await CapturedConsole.run(["receipt", "verify", garbage.path, "--root", notACertificate.path])
        #expect(badRoot.status == 2)
        #expect(badRoot.stderr.hasPrefix("Error: ") && badRoot.stdout.isEmpty)
        let badKey = await CapturedConsole.run([
            "offer", "sign", "--key", notACertificate.path, "--key-id", "A",
            "--bundle-id", "b", "--product-id", "p", "--offer-id", "o", "--app-account-token",
            "7E3B1C1A-0000-4000-8000-000000000001",
        ])
        #expect(badKey.status == 2, "\(badKey.stderr)")
        #expect(!badKey.stderr.contains("CryptoError"), "a sentence, not a type name: \(badKey.stderr)")

        let sample = await CapturedConsole.run(["receipt", "sample", "--out", directory.path])
        #expect(sample.status == 0, "\(sample.stderr)")
        let malformed = await CapturedConsole.run(
            ["receipt", "verify", garbage.path, "--root", directory.appendingPathComponent("root.pem").path])
        #expect(malformed.status == 1)
        #expect(try JSONParser.parse(malformed.stdout)["error"]?["code"] == .string("malformed"))
        let decode = await CapturedConsole.run(["jws", "decode", garbage.path])
        #expect(decode.status == 1 && decode.stderr.hasPrefix("Error: "))
        // The emulator's configuration files: a catalogue or --config that is not one is exit 2 too.
        let data = directory.appendingPathComponent("data").path
        let notCatalogue = await CapturedConsole.run(["appstore", "serve", "--data", data, "--storekit", garbage.path])
        #expect(notCatalogue.status == 2, "\(notCatalogue.stderr)")
        let notConfig = await CapturedConsole.run(["appstore", "serve", "--data", data, "--config", garbage.path])
        #expect(notConfig.status == 2 && notConfig.stderr.contains("is not valid JSON: line 1"), "\(notConfig.stderr)")
        let catalogue = directory.appendingPathComponent("one.storekit")
        try Data(#"{"products":[{"productID":"coins","type":"Consumable","displayPrice":"0.99"}]}"#.utf8)
            .write(to: catalogue)
        let twice = await CapturedConsole.run([
            "appstore", "serve", "--data", data, "--storekit", catalogue.path, "--storekit", catalogue.path,
        ])
        #expect(twice.status == 2, "\(twice.stderr)")
        #expect(twice.stderr.contains("product 'coins' is defined in two catalogues"), "\(twice.stderr)")
        let future = directory.appendingPathComponent("future.storekit")
        try Data(#"{"settings":{"_timeRate":99},"products":[]}"#.utf8).write(to: future)
        let unknownRate = await CapturedConsole.run(["appstore", "serve", "--data", data, "--storekit", future.path])
        #expect(unknownRate.status == 2 && unknownRate.stderr.contains("give --rate"), "\(unknownRate.stderr)")
        // A JSON object that is not a catalogue (a scenario given by mistake) is refused, not read as no products.
        let scenario = directory.appendingPathComponent("story.scenario.json")
        try Data(#"{"title": "a story", "steps": []}"#.utf8).write(to: scenario)
        let notStoreKit = await CapturedConsole.run(["appstore", "serve", "--data", data, "--storekit", scenario.path])
        #expect(
            notStoreKit.status == 2 && notStoreKit.stderr.contains("not a .storekit catalogue"), "\(notStoreKit.stderr)"
        )
    }

    @Test("An unreachable emulator is exit 69 with one sentence on stderr, never a Foundation dump")
    func unreachable() async {
        for command in [["appstore", "products"], ["appstore", "account"], ["appstore", "advance", "--by", "P1M"]] {
            let run = await CapturedConsole.run(command + ["--url", "http://127.0.0.1:1"])
            #expect(run.status == 69, "\(command): \(run.stderr)")
            #expect(run.stdout.isEmpty)
            #expect(run.stderr.hasPrefix("Error: cannot reach the emulator at http://127.0.0.1:1"))
            #expect(!run.stderr.contains("Domain") && run.stderr.split(separator: "\n").count == 1)
        }
        // Credentials in a URL are not repeated in the error.
        for command in [
            ["appstore", "products", "--url", "http://user:s3cret@127.0.0.1:1"],
            ["server", "subscriber", "u1", "--server", "http://user:s3cret@127.0.0.1:1", "--secret-key", "sk"],
        ] {
            let run = await CapturedConsole.run(command)
            #expect(run.status == 69 && run.stderr.contains("127.0.0.1:1"), "\(command): \(run.stderr)")
            #expect(!run.stderr.contains("s3cret"), "\(run.stderr)")
        }
    }

    @Test("every group's help answers, and the top-level help and completion list every command")
    func groupsFromTheTable() async {
        for group in ["receipt", "jws", "offer", "appstore", "api", "bench", "server"] {
            let help = await CapturedConsole.run([group, "--help"])
            #expect(help.status == 0 && help.stdout.hasPrefix("OVERVIEW: "), "\(group): \(help.stderr)")
        }
        let top = await CapturedConsole.run(["--help"])
        let bash = await CapturedConsole.run(["completion", "bash"])
        for name in ["bench serve-cluster", "bench dashboard", "bench hold-connections", "server subscriber", "dev"] {
            #expect(top.stdout.contains("  \(name) "), "the help lists \(name)")
        }
        let first = bash.stdout.split(separator: "\n").first { $0.contains("\"\") words=") } ?? ""
        for word in ["serve", "dev", "server", "bench", "api", "appstore"] {
            #expect(first.split(separator: " ").contains { $0.hasSuffix(word) || $0 == Substring(word) }, "\(word)")
        }
    }

    @Test("completion bash and zsh print scripts that know every subcommand and option")
    func completion() async {
        let bash = await CapturedConsole.run(["completion", "bash"])
        #expect(bash.status == 0)
        #expect(bash.stdout.contains("complete -o default -F _storekeeper storekeeper"))
        let zsh = await CapturedConsole.run(["completion", "zsh"])
        #expect(zsh.status == 0)
        #expect(zsh.stdout.hasPrefix("#compdef storekeeper"))
        for script in [bash.stdout, zsh.stdout] {
            for word in ["receipt", "verify", "appstore", "advance", "--bundle-id", "--rate"] {
                #expect(script.contains(word), "\(word)")
            }
        }
        if let bashPath = ExternalTool.find("bash"), let binary = ExecutableTests.binary {
            // The script completes in a real bash: subcommands, then the options of the one chosen.
            let script = """
                source <("$0" completion bash)
                COMP_WORDS=(storekeeper receipt v); COMP_CWORD=2; _storekeeper; echo "${COMPREPLY[*]}"
                COMP_WORDS=(storekeeper appstore advance --r); COMP_CWORD=3; _storekeeper; echo "${COMPREPLY[*]}"
                """
            let run = try? ExternalTool.run(bashPath, ["-c", script, binary])
            #expect(run?.stdout == Array("verify\n--rate\n".utf8), "\(run?.stderrText ?? "")")
        }
        let fish = await CapturedConsole.run(["completion", "fish"])
        #expect(fish.status == 64 && fish.stderr.contains("bash") && fish.stderr.contains("zsh"))
    }

    @Test(
        "Against a live emulator: results on stdout, refusals on stderr with exit 1, STOREKEEPER_URL, advance",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func liveEmulator() async throws {
        let binary = try #require(ExecutableTests.binary)
        let data = try ExternalTool.temporaryDirectory()
        let (process, base, _) = try AppStoreServeTests.start(binary: binary, data: data)
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        // Products are discoverable, through the environment variable as through --url.
        let products = try ExternalTool.run(
            binary, ["appstore", "products", "--json"], environment: ["STOREKEEPER_URL": base])
        #expect(products.status == 0, "\(products.stderrText)")
        let listed = try JSONParser.parse(products.stdout)["products"]?.arrayValue ?? []
        #expect(listed.contains { $0["productId"] == .string("com.example.storekeeper.monthly") })
        let yearly = listed.first { $0["productId"] == .string("com.example.storekeeper.yearly") }
        #expect(yearly?["introductoryOffer"]?["paymentMode"] == .string("freeTrial"))
        #expect(yearly?["billingPlans"]?.arrayValue?.first?["billingPlanType"] == .string("MONTHLY"))
        // For people, a table: a line per product, its offers and plans below it.
        let table = await CapturedConsole.run(["appstore", "products", "--url", base])
        let lines = table.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first { $0.hasPrefix("com.example.storekeeper.yearly ") }?.contains("every P1Y") == true)
        #expect(lines.contains("    introductory offer: freeTrial, free for 1 × P1W"), "\(table.stdout)")
        #expect(lines.contains { $0.hasPrefix("    billing plan MONTHLY: ") })
        #expect(lines.contains { $0.hasPrefix("    winBack offer 'com.example.storekeeper.missyou': payAsYouGo") })

        let refused = await CapturedConsole.run([
            "appstore", "buy", "--url", base, "--device", "nope", "--product", "x",
        ])
        #expect(refused.status == 1)
        #expect(refused.stdout.isEmpty)
        #expect(refused.stderr.hasPrefix("Error: the emulator refused the request (HTTP 404"))

        let account = await CapturedConsole.run(["appstore", "account", "--url", base])
        #expect(account.status == 0 && account.stderr.isEmpty)
        let accountID = try #require(try JSONParser.parse(account.stdout)["accountId"]?.stringValue)
        let device = await CapturedConsole.run(
            ["appstore", "device", "--url", base, "--account", accountID, "--field", "deviceId"])
        let deviceID = device.stdout.trimmingCharacters(in: .newlines)
        #expect(UUID(uuidString: deviceID) != nil, "--field prints the bare value: \(device.stdout)")
        let install = await CapturedConsole.run(["appstore", "install", "--url", base, "--device", deviceID])
        #expect(install.status == 0)
        #expect(install.stderr.contains("no --version"), "says which version it installed")
        let buy = await CapturedConsole.run(
            ["appstore", "buy", "--url", base, "--device", deviceID, "--product", "com.example.storekeeper.monthly"])
        #expect(buy.status == 0, "\(buy.stderr)")
        // The signed transaction is shortened for people, whole with --json.
        #expect(
            try JSONParser.parse(buy.stdout)["jwsRepresentation"]?.stringValue?.wholeMatch(
                of: /<JWS, \d+ bytes: --field jwsRepresentation>/) != nil, "\(buy.stdout)")
        let whole = await CapturedConsole.run([
            "appstore", "buy", "--url", base, "--device", deviceID, "--product", "com.example.storekeeper.coins",
            "--json",
        ])
        let signed = try JSONParser.parse(whole.stdout)["jwsRepresentation"]?.stringValue ?? ""
        #expect(signed.split(separator: ".").count == 3 && signed.count > 500, "\(whole.stdout.prefix(300))")
        let bought = try JSONParser.parse(buy.stdout)["transaction"]
        let milliseconds = try #require(bought?["transactionDate"]?.int64Value)
        let iso = try #require(bought?["transactionDateISO"]?.stringValue)
        #expect(iso.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z/) != nil, "\(iso)")
        let parsed = try #require(
            try? Date(iso, strategy: .iso8601.year().month().day().time(includingFractionalSeconds: iso.contains("."))))
        #expect(Int64((parsed.timeIntervalSince1970 * 1000).rounded()) == milliseconds)
        let field = await CapturedConsole.run(
            ["appstore", "transactions", "--url", base, "--device", deviceID, "--field", "transactions"])
        #expect(field.status == 0 && field.stdout.hasPrefix("[{"), "compact JSON for a member that is not a string")
        let missing = await CapturedConsole.run(["appstore", "account", "--url", base, "--field", "nope"])
        #expect(missing.status == 1 && missing.stderr.contains("accountId"), "names the members there are")

        let advance = await CapturedConsole.run(["appstore", "advance", "--url", base, "--by", "P1M"])
        #expect(advance.status == 0)
        let clock = try JSONParser.parse(advance.stdout)
        #expect(clock["ran"]?["renewals"] == .integer(1))
        #expect(clock["nowISO"]?.stringValue?.hasSuffix("Z") == true)
        #expect(advance.stderr.hasPrefix("store time is now 20"))
        #expect(advance.stderr.contains("ran 1 renewal and 0 expirations"))

        let out = try ExternalTool.temporaryDirectory()
        let certs = await CapturedConsole.run(["appstore", "certs", "--url", base, "--out", out.path])
        #expect(certs.status == 0, "\(certs.stderr)")
        let fromData = try ExternalTool.temporaryDirectory()
        _ = await CapturedConsole.run(["appstore", "certs", "--data", data.path, "--out", fromData.path])
        #expect(
            try Data(contentsOf: out.appendingPathComponent("jws-root.cer"))
                == Data(contentsOf: fromData.appendingPathComponent("jws-root.cer")),
            "the running emulator's roots, the same as in its data directory")
        let nowhere = data.appendingPathComponent("nowhere")
        let wrong = await CapturedConsole.run(["appstore", "certs", "--data", nowhere.path, "--out", out.path])
        #expect(wrong.status == 2)
        #expect(!FileManager.default.fileExists(atPath: nowhere.path), "a wrong --data creates nothing")
    }
}

@Suite("Notes said once")
struct NotesTests {
    @Test("a note is said the first time only, per id, and always where its state cannot be kept")
    func once() throws {
        let folder = try ExternalTool.temporaryDirectory().appendingPathComponent("state")
        let environment = ["STOREKEEPER_STATE_DIR": folder.path]
        #expect(Notes.firstTime("compressed-periods-a", environment: environment))
        #expect(!Notes.firstTime("compressed-periods-a", environment: environment))
        #expect(Notes.firstTime("compressed-periods-b", environment: environment))
        #expect(!Notes.firstTime("compressed-periods-b", environment: environment))
        #expect(Notes.firstTime("x", environment: [:]) && Notes.firstTime("x", environment: [:]))
        let unwritable = ["STOREKEEPER_STATE_DIR": "/proc/storekeeper-cannot-be-here"]
        #expect(Notes.firstTime("y", environment: unwritable) && Notes.firstTime("y", environment: unwritable))
    }

    @Test("Scratch directories made at once, on many threads, are each a new one, this user's alone")
    func scratchDirectories() async throws {
        let made = try await withThrowingTaskGroup(of: URL.self) { group in
            for _ in 0..<64 { group.addTask { try ScratchDirectory.make("storekeeper-test-scratch") } }
            return try await group.reduce(into: [URL]()) { $0.append($1) }
        }
        defer { for url in made { try? FileManager.default.removeItem(at: url) } }
        #expect(Set(made.map(\.path)).count == 64)
        for url in made {
            let attributes = try FileManager.default.attributesOfItem(atPath: url.path)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o700, "\(url.path)")
            #expect(attributes[.type] as? FileAttributeType == .typeDirectory)
        }
    }
}
