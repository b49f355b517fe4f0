import StoreBase
import StoreConfig

/// `storectl completions bash|zsh|fish`: a completion script for commands, options and store names.
struct CompletionsCommand: Command {
    static let name = "completions"
    static let abstract = "Print a shell completion script (bash, zsh or fish)."
    static let arguments = "<shell>"
    static let positionalRange = 0...1
    static let discussion = """
        The script completes commands, subcommands and options from the same command tree as --help, and store
        names after --store, read from the config at completion time (the --config on the line, else the usual
        search). --list-stores prints those names, one per line; the scripts call it.
        """
    static let examples = [
        "storectl completions bash > /etc/bash_completion.d/storectl",
        "storectl completions zsh > \"${fpath[1]}/_storectl\"",
        "storectl completions fish > ~/.config/fish/completions/storectl.fish",
        "source <(storectl completions bash)",
    ]
    static let options = [
        OptionSpec("list-stores", hidden: true,
                   help: "Print the store names of the config, one per line (for the scripts)."),
    ]
    static let shells = ["bash", "zsh", "fish"]

    /// The top-level command names, which `help` takes.
    static var commandNames: [String] { CommandLineTool.commands.map { $0.name } }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        if args.flag("list-stores") {
            // For completion: no error output, no exit code to worry a shell. Every store is listed, those whose
            // section is wrong too (a command on one of them says what is wrong).
            let names = (try? context.loadConfig())?.storeNames ?? []
            if context.global.json {
                context.console.json(["stores": names])
            } else if !names.isEmpty {
                context.console.out(names.joined(separator: "\n"))
            }
            return .ok
        }
        guard let shell = args.positionals.first else {
            throw UsageError("completions needs a shell: bash, zsh or fish",
                             hint: "run '\(context.command("completions bash", store: nil))'")
        }
        guard shells.contains(shell) else {
            throw UsageError("unknown shell '\(shell)'; storectl has completions for bash, zsh and fish",
                             hint: Suggest.closest(shell, in: shells).map {
                                 "did you mean '\(context.command("completions \($0)", store: nil))'?"
                             })
        }
        let script = Completions.script(shell)
        if context.global.json {
            context.console.json(["shell": shell, "script": script])
        } else {
            context.console.out(script)
        }
        return .ok
    }
}

/// The completion scripts, generated from the command tree.
enum Completions {
    static func script(_ shell: String) -> String {
        switch shell {
        case "zsh": return zsh()
        case "fish": return fish()
        default: return bash()
        }
    }

    /// A command path with its subcommand names and its option words.
    struct Row {
        var path: String
        var words: [String]
    }

    /// Every command path with the words that may follow it, deepest first.
    static var table: [Row] {
        let globals = GlobalOptions.specs.map { "--" + $0.name }
        var rows: [Row] = []
        for named in HelpFormatter.walk() {
            let command: any Command.Type = named.command
            var words: [String] = []
            for sub in command.subcommands { words.append(sub.name) }
            for spec in command.options where !spec.hidden { words.append("--" + spec.name) }
            words += globals
            if named.path == ["completions"] { words += CompletionsCommand.shells }
            // `help <command>`: the command names.
            if named.path == ["help"] { words = CompletionsCommand.commandNames + words }
            if named.path == ["mode"] { words += ["local", "cloud"] }
            rows.append(Row(path: named.path.joined(separator: " "), words: words))
        }
        return rows.sorted { $0.path.count > $1.path.count }
    }

    /// Options that take a value (their value is not a command word).
    static var valueOptions: [String] {
        var names = Set<String>()
        for named in HelpFormatter.walk() {
            let command: any Command.Type = named.command
            for spec in command.options where !spec.isFlag {
                names.insert("--\(spec.name)")
                if let s = spec.short { names.insert("-\(s)") }
            }
        }
        for spec in GlobalOptions.specs where !spec.isFlag {
            names.insert("--\(spec.name)")
            if let s = spec.short { names.insert("-\(s)") }
        }
        return names.sorted()
    }

    static var commandWords: [String] {
        var words = Set<String>()
        for named in HelpFormatter.walk() { words.formUnion(named.path) }
        return words.sorted()
    }

    static func bash() -> String {
        var cases = ""
        for row in table {
            let pattern = row.path.isEmpty ? "\"\"" : "\"\(row.path)\"|\"\(row.path) \"*"
            cases += "        \(pattern)) words=\"\(row.words.joined(separator: " "))\" ;;\n"
        }
        return """
            # bash completion for storectl (generated by 'storectl completions bash')
            _storectl_stores() {
                storectl ${_storectl_config:+--config "$_storectl_config"} completions --list-stores 2>/dev/null
            }
            _storectl() {
                local cur prev path="" w i words
                local _storectl_config=""
                cur="${COMP_WORDS[COMP_CWORD]}"
                prev="${COMP_WORDS[COMP_CWORD-1]}"
                for ((i = 1; i < COMP_CWORD; i++)); do
                    w="${COMP_WORDS[i]}"
                    case "$w" in
                        --config|-c) _storectl_config="${COMP_WORDS[i+1]}"; ((i++)) ;;
                        \(valueOptions.joined(separator: "|"))) ((i++)) ;;
                        -*) ;;
                        *) case " \(commandWords.joined(separator: " ")) " in
                               *" $w "*) path="${path:+$path }$w" ;;
                           esac ;;
                    esac
                done
                case "$prev" in
                    --store|-s) COMPREPLY=($(compgen -W "$(_storectl_stores)" -- "$cur")); return 0 ;;
                    --config|-c) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
                    \(valueOptions.filter { $0 != "--store" && $0 != "-s" && $0 != "--config" && $0 != "-c" }
                        .joined(separator: "|"))) return 0 ;;
                esac
                case "$path" in
            \(cases)        *) words="" ;;
                esac
                COMPREPLY=($(compgen -W "$words" -- "$cur"))
                return 0
            }
            complete -F _storectl storectl
            """
    }

    static func zsh() -> String {
        var cases = ""
        for row in table {
            let pattern = row.path.isEmpty ? "''" : "'\(row.path)'|'\(row.path) '*"
            cases += "        \(pattern)) candidates=(\(row.words.joined(separator: " "))) ;;\n"
        }
        return """
            #compdef storectl
            # zsh completion for storectl (generated by 'storectl completions zsh')
            _storectl() {
                local path_words="" w config="" i
                local -a candidates
                for ((i = 2; i < CURRENT; i++)); do
                    w="${words[i]}"
                    case "$w" in
                        --config|-c) config="${words[i+1]}"; ((i++)) ;;
                        \(valueOptions.joined(separator: "|"))) ((i++)) ;;
                        -*) ;;
                        *) if [[ " \(commandWords.joined(separator: " ")) " == *" $w "* ]]; then
                               path_words="${path_words:+$path_words }$w"
                           fi ;;
                    esac
                done
                case "${words[CURRENT-1]}" in
                    --store|-s)
                        candidates=(${(f)"$(storectl ${config:+--config "$config"} completions --list-stores 2>/dev/null)"})
                        compadd -a candidates
                        return ;;
                    --config|-c) _files; return ;;
                esac
                case "$path_words" in
            \(cases)        *) candidates=() ;;
                esac
                compadd -a candidates
            }
            if [[ "$funcstack[1]" == "_storectl" ]]; then
                _storectl "$@"
            else
                compdef _storectl storectl
            fi
            """
    }

    static func fish() -> String {
        var lines = [
            "# fish completion for storectl (generated by 'storectl completions fish')",
            "complete -c storectl -f",
            "function __storectl_path",
            "    set -l words (commandline -opc)",
            "    set -l path",
            "    set -l skip 0",
            "    for w in $words[2..-1]",
            "        if test $skip -eq 1",
            "            set skip 0",
            "            continue",
            "        end",
            "        switch $w",
            "            case " + valueOptions.joined(separator: " "),
            "                set skip 1",
            "            case '-*'",
            "            case " + commandWords.joined(separator: " "),
            "                set -a path $w",
            "        end",
            "    end",
            "    echo (string join ' ' -- $path)",
            "end",
            "function __storectl_at",
            "    test (__storectl_path) = \"$argv\"",
            "end",
            "function __storectl_stores",
            "    set -l words (commandline -opc)",
            "    set -l i (contains -i -- --config $words)",
            "    if test -n \"$i\"",
            "        storectl --config $words[(math $i + 1)] completions --list-stores 2>/dev/null",
            "    else",
            "        storectl completions --list-stores 2>/dev/null",
            "    end",
            "end",
            "complete -c storectl -l store -s s -x -a '(__storectl_stores)' -d 'The store to act on'",
            "complete -c storectl -l config -s c -r -F -d 'The config file'",
        ]
        func quoted(_ s: String) -> String { "'" + s.replacingText("'", with: "\\'") + "'" }
        for spec in GlobalOptions.specs where spec.name != "store" && spec.name != "config" {
            lines.append("complete -c storectl -l \(spec.name)" + (spec.short.map { " -s \($0)" } ?? "")
                         + " -d \(quoted(spec.help))")
        }
        for named in HelpFormatter.walk() {
            let command: any Command.Type = named.command
            let at = "-n " + quoted("__storectl_at " + named.path.joined(separator: " "))
            for sub in command.subcommands {
                lines.append("complete -c storectl \(at) -a \(sub.name) -d \(quoted(sub.abstract))")
            }
            for spec in command.options where !spec.hidden {
                lines.append("complete -c storectl \(at) -l \(spec.name)" + (spec.short.map { " -s \($0)" } ?? "")
                             + (spec.isFlag ? "" : " -r") + " -d \(quoted(spec.help))")
            }
            if named.path == ["completions"] {
                lines.append("complete -c storectl \(at) -a 'bash zsh fish'")
            }
            if named.path == ["mode"] { lines.append("complete -c storectl \(at) -a 'local cloud'") }
            if named.path == ["help"] {
                let names = CompletionsCommand.commandNames.joined(separator: " ")
                lines.append("complete -c storectl \(at) -a " + quoted(names))
            }
        }
        return lines.joined(separator: "\n")
    }
}
