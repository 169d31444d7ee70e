public import Foundation
import StorekeeperCLI
public import StorekeeperCommandLine
import Synchronization

/// A ``Console`` that records what a command writes and serves fixed standard input.
public final class CapturedConsole: Sendable {
    private let output = Mutex<(stdout: String, stderr: String)>(("", ""))
    private let input: [UInt8]

    public init(stdin: [UInt8] = []) { self.input = stdin }

    public var stdout: String { output.withLock { $0.stdout } }
    public var stderr: String { output.withLock { $0.stderr } }

    public var console: Console {
        Console(
            readInput: { [input] limit in
                guard input.count <= limit else { throw CocoaError(.fileReadTooLarge) }
                return input
            },
            write: { text in self.output.withLock { $0.stdout += text } },
            writeError: { text in self.output.withLock { $0.stderr += text } })
    }

    /// Runs `storekeeper` with `arguments` in-process.
    public static func run(_ arguments: [String], stdin: [UInt8] = [], now: Date = Date()) async -> (
        status: Int32, stdout: String, stderr: String
    ) {
        let captured = CapturedConsole(stdin: stdin)
        let status = await Storekeeper.run(arguments, console: captured.console, now: { now })
        return (status, captured.stdout, captured.stderr)
    }
}
