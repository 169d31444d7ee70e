/// Why a command stopped: what to print after `Error: ` and which exit status that is. One error type for
/// every command, so the dispatcher maps kinds to statuses in one place.
package struct CommandError: Error, CustomStringConvertible {
    package enum Kind: Sendable {
        /// A mistake in how the command was called: printed with the usage, exit status 64.
        case usage
        /// A file that cannot be read, or a certificate or key that is not one: exit status 2.
        case input
        /// The emulator or server cannot be reached: exit status 69 (EX_UNAVAILABLE).
        case unavailable
        /// A failure while running a valid command: exit status 1.
        case runtime
    }

    package let kind: Kind
    package let message: String

    package init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    package static func usage(_ message: String) -> CommandError { CommandError(.usage, message) }
    package static func input(_ message: String) -> CommandError { CommandError(.input, message) }
    package static func unavailable(_ message: String) -> CommandError { CommandError(.unavailable, message) }
    package static func runtime(_ message: String) -> CommandError { CommandError(.runtime, message) }

    package var description: String { message }

    /// The process's exit status for this kind.
    package var exitStatus: Int32 {
        switch kind {
        case .usage: 64
        case .input: 2
        case .unavailable: 69
        case .runtime: 1
        }
    }
}
