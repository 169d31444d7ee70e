import Foundation
package import StorekeeperLogging

/// `--log-level` and `--log-format`, shared by every server command.
package enum LoggingOptions {
    package static let level = Arguments.Spec.Option(
        name: "log-level", valueName: "level",
        help: "trace, debug, info (default), notice, warning, error or critical.")
    package static let format = Arguments.Spec.Option(
        name: "log-format", valueName: "format", help: "text (default) or json lines, on standard error.")

    package static func logger(_ arguments: Arguments, label: String, level defaultLevel: Logger.Level = .info) throws
        -> Logger
    {
        var level = defaultLevel
        if let name = arguments.value("log-level") {
            guard let parsed = Logger.Level(name: name) else {
                throw CommandError.usage(
                    "'\(name)' is not a log level (\(Logger.Level.allCases.map(\.description).joined(separator: ", ")))"
                )
            }
            level = parsed
        }
        var format = StreamLogHandler.Format.text
        if let name = arguments.value("log-format") {
            guard let parsed = StreamLogHandler.Format(rawValue: name) else {
                throw CommandError.usage("'\(name)' is not a log format (text, json)")
            }
            format = parsed
        }
        // How often buffered lines are written (default 100 ms); STOREKEEPER_LOG_FLUSH_MS tunes it (1 to
        // 600000), for a slow disk or a test that shows a clean stop writes what is buffered.
        var interval = Duration.milliseconds(100)
        if let text = ProcessInfo.processInfo.environment["STOREKEEPER_LOG_FLUSH_MS"], let value = Int64(text),
            (1...600_000).contains(value)
        {
            interval = .milliseconds(value)
        }
        return Logger(label: label, level: level, handler: StreamLogHandler(format: format, flushEvery: interval))
    }
}
