/// A small command-line parser in the manner of swift-argument-parser: `--long value`, `--long=value`,
/// repeatable options, flags, positionals, `-h/--help`, and `--` to end options.
package struct Arguments: Sendable {
    /// What a command accepts.
    package struct Spec: Sendable {
        package struct Option: Sendable {
            package var name: String
            package var valueName: String
            package var help: String
            package var repeatable = false
            /// Required options are shown without brackets in the usage line and checked by the parser.
            package var required = false
            /// Whether an empty value means something (an empty list); otherwise the parser refuses it.
            package var allowsEmpty = false

            package init(
                name: String, valueName: String, help: String, repeatable: Bool = false, required: Bool = false,
                allowsEmpty: Bool = false
            ) {
                self.name = name
                self.valueName = valueName
                self.help = help
                self.repeatable = repeatable
                self.required = required
                self.allowsEmpty = allowsEmpty
            }
        }

        package var command: String
        package var abstract: String
        package var positionals: [(name: String, help: String)] = []
        package var options: [Option] = []
        package var flags: [(name: String, help: String)] = []
        package var discussion: String?

        package init(
            command: String, abstract: String, positionals: [(name: String, help: String)] = [],
            options: [Option] = [], flags: [(name: String, help: String)] = [], discussion: String? = nil
        ) {
            self.command = command
            self.abstract = abstract
            self.positionals = positionals
            self.options = options
            self.flags = flags
            self.discussion = discussion
        }

        /// OVERVIEW / USAGE / ARGUMENTS / OPTIONS, as swift-argument-parser prints them.
        package var help: String {
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

        package var usage: String {
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

    package enum Outcome {
        case parsed(Arguments)
        case help
        case version
    }

    package private(set) var values: [String: [String]] = [:]
    package private(set) var setFlags: Set<String> = []
    package private(set) var positionals: [String] = []

    /// Parses `arguments` against `spec`; throws ``UsageError`` for anything it does not accept.
    package static func parse(_ arguments: [String], spec: Spec) throws -> Outcome {
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
            guard argument.hasPrefix("--") else { throw CommandError.usage("Unknown option '\(argument)'") }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if spec.flags.contains(where: { $0.name == name }) {
                guard inlineValue == nil else { throw CommandError.usage("Flag '--\(name)' takes no value") }
                result.setFlags.insert(name)
            } else if let option = spec.options.first(where: { $0.name == name }) {
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    guard index < arguments.count else {
                        throw CommandError.usage("Missing value for '--\(name) <\(option.valueName)>'")
                    }
                    value = arguments[index]
                    index += 1
                }
                // An empty value is never one a command takes: most often a shell variable that is not set.
                guard !value.isEmpty || option.allowsEmpty else {
                    throw CommandError.usage("'--\(name)' was given an empty value (is a shell variable unset?)")
                }
                if !option.repeatable && result.values[name] != nil {
                    throw CommandError.usage("Option '--\(name)' given more than once")
                }
                result.values[name, default: []].append(value)
            } else {
                throw CommandError.usage("Unknown option '--\(name)'")
            }
        }
        // A last positional named `…s ...` (e.g. "files ...") takes any number of arguments.
        let variadic = spec.positionals.last?.name.hasSuffix(" ...") == true
        guard variadic || result.positionals.count <= spec.positionals.count else {
            throw CommandError.usage("Unexpected argument '\(result.positionals[spec.positionals.count])'")
        }
        for option in spec.options where option.required && result.values[option.name] == nil {
            throw CommandError.usage("Missing expected argument '--\(option.name) <\(option.valueName)>'")
        }
        return .parsed(result)
    }

    package func value(_ name: String) -> String? { values[name]?.last }
    package func all(_ name: String) -> [String] { values[name] ?? [] }
    package func flag(_ name: String) -> Bool { setFlags.contains(name) }
    package func positional(_ index: Int) -> String? { index < positionals.count ? positionals[index] : nil }
}
