import Foundation
import StorekeeperCommandLine

/// `storekeeper completion bash|zsh`: shell completion scripts generated from the command table.
enum CompletionCommands {
    static let spec = Arguments.Spec(
        command: "storekeeper completion", abstract: "Print a bash or zsh completion script.",
        positionals: [("shell", "bash or zsh.")],
        discussion: """
            bash: source <(storekeeper completion bash)
            zsh:  storekeeper completion zsh > "${fpath[1]}/_storekeeper"
            """)

    static func run(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        switch arguments.positional(0) {
        case "bash": console.write(bash())
        case "zsh": console.write(zsh())
        case let other:
            throw CommandError.usage("'\(other ?? "")' is not a shell this command knows (bash, zsh)")
        }
        return 0
    }

    /// Words that may follow `prefix` (a group, or a command's options).
    static func table() -> [(prefix: String, words: [String])] {
        var rows: [(String, [String])] = [
            (
                "",
                Storekeeper.commands.map { $0.path[0] }.reduce(into: [String]()) { words, word in
                    if !words.contains(word) { words.append(word) }
                } + ["help", "--help", "--version"]
            )
        ]
        // Every intermediate path (`appstore`, `appstore notifications`) completes to the words below it.
        var prefixes: [[String]] = []
        for command in Storekeeper.commands {
            for length in 1..<command.path.count where !prefixes.contains(Array(command.path.prefix(length))) {
                prefixes.append(Array(command.path.prefix(length)))
            }
        }
        for prefix in prefixes {
            var next: [String] = []
            for command in Storekeeper.commands
            where command.path.count > prefix.count && Array(command.path.prefix(prefix.count)) == prefix
                && !next.contains(command.path[prefix.count])
            {
                next.append(command.path[prefix.count])
            }
            rows.append((prefix.joined(separator: " "), next))
        }
        for command in Storekeeper.commands {
            let options = command.spec.options.map { "--\($0.name)" } + command.spec.flags.map { "--\($0.name)" }
            rows.append((command.path.joined(separator: " "), options + ["--help"]))
        }
        return rows
    }

    static func bash() -> String {
        var cases = ""
        for (prefix, words) in table() {
            cases += "        \"\(prefix)\") words=\"\(words.joined(separator: " "))\" ;;\n"
        }
        return """
            # bash completion for storekeeper (storekeeper completion bash)
            _storekeeper() {
                local current="${COMP_WORDS[COMP_CWORD]}" path="" word words
                for word in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
                    case "$word" in -*) break ;; esac
                    path="${path:+$path }$word"
                done
                case "$path" in
            \(cases)        *) words="" ;;
                esac
                COMPREPLY=($(compgen -W "$words" -- "$current"))
            }
            complete -o default -F _storekeeper storekeeper

            """
    }

    static func zsh() -> String {
        var cases = ""
        for (prefix, words) in table() {
            cases += "        \"\(prefix)\") candidates=(\(words.joined(separator: " "))) ;;\n"
        }
        return """
            #compdef storekeeper
            # zsh completion for storekeeper (storekeeper completion zsh)
            _storekeeper() {
                local path="" word
                local -a candidates
                for word in "${(@)words[2,CURRENT-1]}"; do
                    [[ "$word" == -* ]] && break
                    path="${path:+$path }$word"
                done
                case "$path" in
            \(cases)        *) candidates=() ;;
                esac
                _describe 'storekeeper' candidates
            }
            _storekeeper "$@"

            """
    }
}
