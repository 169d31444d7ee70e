public import Foundation

/// The `storekeeper` command: dispatches to subcommands; every outcome is an exit status.
public enum Storekeeper {
    static let version = "0.1.0"

    static let overview = """
        OVERVIEW: Storekeeper — self-hosted in-app purchase verification, App Store emulation and purchase server.

        USAGE: storekeeper <subcommand>

        OPTIONS:
          --version                   Show the version.
          -h, --help                  Show help information.

        SUBCOMMANDS:
          receipt verify              Verify an App Store receipt (signature, chain, bundle, device, expiry).
          receipt decode              Decode an App Store receipt without verifying it.
          receipt sample              Write a sample receipt and the root that verifies it.
          jws verify                  Verify StoreKit 2 signed data (transactions, renewal info, notifications).
          jws decode                  Decode a JWS without verifying it.
          jws sign                    Sign a JSON payload as ES256 with an x5c chain.
          offer sign                  Sign a promotional offer (V1 signature or V2 JWS).
          appstore serve              Run the App Store emulator (verifyReceipt, /_emulator/v1 API).
          appstore certs              Export the emulator's root certificates.
          appstore account|device|install|buy|transactions|finish|receipt|advance
                                      Drive a running emulator from the shell.
          bench receipt               Measure receipt verification against bare OpenSSL RSA.
          bench jws                   Measure JWS verification against bare OpenSSL ECDSA P-256.
          bench emulator              Measure purchase cost with 100,000 transactions stored against 100.
          fuzz                        Feed mutated receipts, JWS, JSON, .storekit and HTTP to their parsers.
          bench http                  Measure the HTTP layer against bare libmicrohttpd, and under idle and slow clients.

          See 'storekeeper <subcommand> --help' for detailed help.

        """

    /// Runs the command line `arguments` (without the program name) and returns the exit status.
    public static func run(_ arguments: [String], console: Console = .standard, now: @Sendable () -> Date = { Date() })
        -> Int32
    {
        let commands: [(path: [String], spec: Arguments.Spec, run: (Arguments, Console, Date) throws -> Int32)] = [
            (["receipt", "verify"], ReceiptCommands.verifySpec, ReceiptCommands.verify),
            (["receipt", "decode"], ReceiptCommands.decodeSpec, ReceiptCommands.decode),
            (["receipt", "sample"], ReceiptCommands.sampleSpec, ReceiptCommands.sample),
            (["jws", "verify"], JWSCommands.verifySpec, JWSCommands.verify),
            (["jws", "decode"], JWSCommands.decodeSpec, JWSCommands.decode),
            (["jws", "sign"], JWSCommands.signSpec, JWSCommands.sign),
            (["offer", "sign"], JWSCommands.offerSpec, JWSCommands.offer),
            (["appstore", "serve"], AppStoreCommands.serveSpec, AppStoreCommands.serve),
            (["appstore", "certs"], AppStoreCommands.certsSpec, AppStoreCommands.certs),
            (["appstore", "account"], AppStoreCommands.accountSpec, AppStoreCommands.account),
            (["appstore", "device"], AppStoreCommands.deviceSpec, AppStoreCommands.device),
            (["appstore", "install"], AppStoreCommands.installSpec, AppStoreCommands.install),
            (["appstore", "buy"], AppStoreCommands.buySpec, AppStoreCommands.buy),
            (["appstore", "transactions"], AppStoreCommands.transactionsSpec, AppStoreCommands.transactions),
            (["appstore", "finish"], AppStoreCommands.finishSpec, AppStoreCommands.finish),
            (["appstore", "receipt"], AppStoreCommands.receiptSpec, AppStoreCommands.receipt),
            (["appstore", "advance"], AppStoreCommands.advanceSpec, AppStoreCommands.advance),
            (["bench", "receipt"], BenchCommands.receiptSpec, BenchCommands.receipt),
            (["bench", "jws"], BenchCommands.jwsSpec, BenchCommands.jws),
            (["bench", "emulator"], BenchCommands.emulatorSpec, BenchCommands.emulator),
            (["fuzz"], FuzzCommands.spec, FuzzCommands.run),
            (["bench", "http"], BenchCommands.httpSpec, BenchCommands.http),
            (["bench", "hold-connections"], BenchCommands.holdSpec, BenchCommands.hold),
        ]
        if arguments.isEmpty || arguments == ["-h"] || arguments == ["--help"] || arguments == ["help"] {
            console.write(overview)
            return arguments.isEmpty ? 64 : 0
        }
        if arguments == ["--version"] {
            console.write("\(version)\n")
            return 0
        }
        guard let command = commands.first(where: { Array(arguments.prefix($0.path.count)) == $0.path }) else {
            let groups = Set(commands.map { $0.path[0] })
            if let group = arguments.first, groups.contains(group) {
                let names = commands.filter { $0.path[0] == group }.map { $0.path.joined(separator: " ") }
                if arguments.count == 1 || arguments[1] == "--help" || arguments[1] == "-h" {
                    console.write(
                        "USAGE: storekeeper \(group) <subcommand>\n\nSUBCOMMANDS:\n"
                            + names.map { "  \($0)\n" }.joined())
                    return arguments.count == 1 ? 64 : 0
                }
                console.writeError(
                    "Error: Unknown subcommand '\(arguments[1])' of '\(group)'.\nUsage: storekeeper \(group) <subcommand>\n"
                )
                return 64
            }
            console.writeError("Error: Unknown subcommand '\(arguments[0])'.\n\(overview)")
            return 64
        }
        let rest = Array(arguments.dropFirst(command.path.count))
        do {
            switch try Arguments.parse(rest, spec: command.spec) {
            case .help:
                console.write(command.spec.help)
                return 0
            case .parsed(let parsed):
                return try command.run(parsed, console, now())
            }
        } catch let error as UsageError {
            console.writeError(
                "Error: \(error.message)\nUsage: \(command.spec.usage)\n  See 'storekeeper \(command.path.joined(separator: " ")) --help' for more information.\n"
            )
            return 64
        } catch let error as RuntimeError {
            console.writeError("Error: \(error.message)\n")
            return 1
        } catch {
            console.writeError("Error: \(error)\n")
            return 1
        }
    }
}
