package import StorekeeperHTTP

/// The connection limits both servers take from the command line (`--max-connections`, `--head-timeout`,
/// `--min-body-rate`, `--per-address-connections`, `--reserved-connections`, `--max-buffered-bytes`), named
/// and ranged once in ``HTTPLimits/settings``.
package enum ConnectionOptions {
    package static let maxConnections = Arguments.Spec.Option(
        name: "max-connections", valueName: "n", help: "Concurrent connections to accept (default: 16384).")

    package static let all: [Arguments.Spec.Option] =
        [maxConnections]
        + HTTPLimits.settings.map { Arguments.Spec.Option(name: $0.option, valueName: "n", help: $0.help) }

    package static func limits(_ arguments: Arguments) throws -> HTTPLimits {
        var limits = HTTPLimits()
        if let text = arguments.value("max-connections") {
            guard let value = Int(text), (1...1_000_000).contains(value) else {
                throw CommandError.usage("--max-connections must be 1 to 1000000")
            }
            limits.maxConnections = value
        }
        for setting in HTTPLimits.settings {
            guard let text = arguments.value(setting.option) else { continue }
            guard let value = Int(text), setting.range.contains(value) else {
                throw CommandError.usage(
                    "--\(setting.option) must be \(setting.range.lowerBound) to \(setting.range.upperBound)")
            }
            setting.apply(&limits, value)
        }
        return limits
    }
}
