/// A small command-line parser in the manner of swift-argument-parser: `--long value`, `--long=value`,
/// repeatable options, flags, positionals, `-h/--help`, and `--` to end options.
struct Arguments {
    /// What a command accepts.
    struct Spec: Sendable {
        struct Option: Sendable {
            var name: String
            var valueName: String
            var help: String
            var repeatable = false
            /// Required options are shown without brackets in the usage line and checked by the parser.
            var required = false
        }

        var command: String
        var abstract: String
        var positionals: [(name: String, help: String)] = []
        var options: [Option] = []
        var flags: [(name: String, help: String)] = []
        var discussion: String?

        /// OVERVIEW / USAGE / ARGUMENTS / OPTIONS, as swift-argument-parser prints them.
        var help: String {
            var text = "OVERVIEW: \(abstract)\n\nUSAGE: \(usage)\n"
            if let discussion { text += "\n\(discussion)\n" }
            if !positionals.isEmpty {
                text += "\nARGUMENTS:\n"
                for positional in positionals { text += Self.row("<\(positional.name)>", positional.help) }
            }
            text += "\nOPTIONS:\n"
            for option in options {
                text += Self.row(
                    "--\(option.name) <\(option.valueName)>", option.help + (option.repeatable ? " (repeatable)" : ""))
            }
            for flag in flags { text += Self.row("--\(flag.name)", flag.help) }
            if !options.contains(where: { $0.name == "version" }) { text += Self.row("--version", "Show the version.") }
            text += Self.row("-h, --help", "Show help information.")
            return text
        }

        var usage: String {
            var parts = [command]
            parts += positionals.map { "[<\($0.name)>]" }
            parts += options.map { option in
                let text = "--\(option.name) <\(option.valueName)>"
                return (option.required ? text : "[\(text)]") + (option.repeatable ? " ..." : "")
            }
            parts += flags.map { "[--\($0.name)]" }
            return parts.joined(separator: " ")
        }

        private static func row(_ left: String, _ right: String) -> String {
            let padded =
                left.count < 28
                ? left + String(repeating: " ", count: 28 - left.count)
                : left + "\n" + String(repeating: " ", count: 30)
            return "  \(padded)\(right)\n"
        }
    }

    enum Outcome {
        case parsed(Arguments)
        case help
        case version
    }

    private(set) var values: [String: [String]] = [:]
    private(set) var setFlags: Set<String> = []
    private(set) var positionals: [String] = []

    /// Parses `arguments` against `spec`; throws ``UsageError`` for anything it does not accept.
    static func parse(_ arguments: [String], spec: Spec) throws -> Outcome {
        var result = Arguments()
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if optionsEnded || argument == "-" || !argument.hasPrefix("-") {
                result.positionals.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }
            if argument == "-h" || argument == "--help" { return .help }
            // As in swift-argument-parser, a command's own --version option replaces the version flag.
            if argument == "--version", !spec.options.contains(where: { $0.name == "version" }) { return .version }
            guard argument.hasPrefix("--") else { throw UsageError("Unknown option '\(argument)'") }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if spec.flags.contains(where: { $0.name == name }) {
                guard inlineValue == nil else { throw UsageError("Flag '--\(name)' takes no value") }
                result.setFlags.insert(name)
            } else if let option = spec.options.first(where: { $0.name == name }) {
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    guard index < arguments.count else {
                        throw UsageError("Missing value for '--\(name) <\(option.valueName)>'")
                    }
                    value = arguments[index]
                    index += 1
                }
                if !option.repeatable && result.values[name] != nil {
                    throw UsageError("Option '--\(name)' given more than once")
                }
                result.values[name, default: []].append(value)
            } else {
                throw UsageError("Unknown option '--\(name)'")
            }
        }
        // A last positional named `…s ...` (e.g. "files ...") takes any number of arguments.
        let variadic = spec.positionals.last?.name.hasSuffix(" ...") == true
        guard variadic || result.positionals.count <= spec.positionals.count else {
            throw UsageError("Unexpected argument '\(result.positionals[spec.positionals.count])'")
        }
        for option in spec.options where option.required && result.values[option.name] == nil {
            throw UsageError("Missing expected argument '--\(option.name) <\(option.valueName)>'")
        }
        return .parsed(result)
    }

    func value(_ name: String) -> String? { values[name]?.last }
    func all(_ name: String) -> [String] { values[name] ?? [] }
    func flag(_ name: String) -> Bool { setFlags.contains(name) }
    func positional(_ index: Int) -> String? { index < positionals.count ? positionals[index] : nil }
}

/// A mistake in how the command was called: printed with the usage, exit status 64.
struct UsageError: Error, CustomStringConvertible {
    let message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}

/// A file that cannot be read, or a certificate or key that is not one: `Error: …`, exit status 2.
struct InputError: Error, CustomStringConvertible {
    let message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}

/// The emulator or server cannot be reached: `Error: …`, exit status 69 (EX_UNAVAILABLE).
struct UnavailableError: Error, CustomStringConvertible {
    let message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}

/// A failure while running a valid command: printed as `Error: …`, exit status 1.
struct RuntimeError: Error, CustomStringConvertible {
    let message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}
