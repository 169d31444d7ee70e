package import Foundation

/// One subcommand: the words that name it, what it accepts, and what it does. A command returns its exit
/// status or throws a ``CommandError`` (or any other error, printed as a sentence, exit status 1).
package typealias Command = (
    path: [String], spec: Arguments.Spec, run: @Sendable (Arguments, Console, Date) async throws -> Int32
)
