/// Builds --help text: usage line, abstract, discussion, subcommands, options and examples. `storectl help`,
/// `storectl man` and `storectl completions` read the same command tree.
public enum HelpFormatter {
    /// The environment variables storectl reads, listed in the root's help and in the man page.
    public static let environment: [(name: String, help: String)] = [
        ("STORECTL_CONFIG", "The config file, when --config is not given."),
        ("XDG_CONFIG_HOME", "$XDG_CONFIG_HOME/storectl/config.yaml is the last place searched (default ~/.config)."),
        ("NO_COLOR", "Set to anything but empty: never colour the output."),
        ("STORECTL_LOG", "debug: print structured debug log lines on stderr (as --verbose does)."),
        ("STORECTL_TRACE", "1: print phase timings on stderr; with STORECTL_TRACE_SQL=1 also each SQL statement."),
        ("STORECTL_BATCH_SIZE", "Records per cloud save (default 1000)."),
        ("STORECTL_PAGE_SIZE", "Records per fetched page (default 1000)."),
        ("STORECTL_CREDENTIAL_CACHE", "off: do not remember verified secrets in ~/.cache/storectl."),
        ("STORECTL_LIBPQ", "Another libpq file to load for postgres:// URLs."),
        ("STORECTL_FAILPOINT", "<name>[:<n>]: die at a named point (crash tests; see 'storectl debug failpoints')."),
    ]

    /// The exit codes, as the root's help and the man page list them.
    public static let exitCodes: [(code: Int32, meaning: String)] = [
        (0, "ok"), (1, "a check found something that is not an error (config get of an unset key)"),
        (64, "usage: unknown command or option, bad argument"), (65, "bad data"), (66, "missing input"),
        (69, "the account or the cloud is unavailable"), (70, "internal error"), (73, "cannot create a file"),
        (74, "I/O error"), (75, "temporary failure: retry"), (77, "permission denied"), (78, "configuration error"),
    ]

    public static func usageLine(for command: any Command.Type, path: [String]) -> String {
        var parts = ["storectl"] + path
        if !command.subcommands.isEmpty && command.positionalRange.upperBound == 0 {
            parts.append(command.runsWithoutSubcommand ? "[<subcommand>]" : "<subcommand>")
        }
        if !command.arguments.isEmpty { parts.append(command.arguments) }
        parts.append("[options]")
        return parts.joined(separator: " ")
    }

    /// `-s, --store <name>` for an option.
    public static func label(_ spec: OptionSpec) -> String {
        var label = spec.short.map { "-\($0), " } ?? ""
        label += "--\(spec.name)"
        if let v = spec.valueName { label += " <\(v.lowercased())>" }
        return label
    }

    public static func help(for command: any Command.Type, path: [String]) -> String {
        var lines: [String] = []
        lines.append("OVERVIEW: " + command.abstract)
        if !command.discussion.isEmpty {
            lines.append("")
            lines.append(command.discussion)
        }
        lines.append("")
        lines.append("USAGE: " + usageLine(for: command, path: path))
        if !command.subcommands.isEmpty {
            lines.append("")
            lines.append("SUBCOMMANDS:")
            let width = (command.subcommands.map { $0.name.count }.max() ?? 0) + 2
            for sub in command.subcommands {
                lines.append("  " + sub.name.padded(to: width) + sub.abstract)
            }
        }
        func render(_ specs: [OptionSpec]) {
            let labels = specs.map(label)
            let width = (labels.map(\.count).max() ?? 0) + 2
            for (spec, label) in zip(specs, labels) {
                lines.append("  " + label.padded(to: width) + spec.help)
            }
        }
        if !command.options.isEmpty {
            lines.append("")
            lines.append("OPTIONS:")
            render(command.options)
        }
        lines.append("")
        lines.append("GLOBAL OPTIONS:")
        render(GlobalOptions.specs)
        if path.isEmpty {
            lines.append("")
            lines.append("ENVIRONMENT:")
            let width = (environment.map(\.name.count).max() ?? 0) + 2
            for variable in environment { lines.append("  " + variable.name.padded(to: width) + variable.help) }
        }
        if !command.examples.isEmpty {
            lines.append("")
            lines.append("EXAMPLES:")
            for example in command.examples { lines.append("  " + example) }
        }
        if !command.subcommands.isEmpty {
            lines.append("")
            lines.append("See 'storectl \((["help"] + path + ["<subcommand>"]).joined(separator: " "))' for details.")
        }
        return lines.joined(separator: "\n")
    }

    /// A command of the tree with the words that name it.
    struct Named {
        var path: [String]
        var command: any Command.Type
    }

    /// Every command of the tree, depth first, in the order help lists them.
    static func walk() -> [Named] {
        var out: [Named] = []
        func visit(_ command: any Command.Type, _ path: [String]) {
            out.append(Named(path: path, command: command))
            for sub in command.subcommands { visit(sub, path + [sub.name]) }
        }
        visit(RootCommand.self, [])
        return out
    }

    /// The command named by `words` (e.g. ["history", "consumer"]).
    /// - Throws: `UsageError` naming the first word that is not a command, with the closest one.
    static func resolve(_ words: [String]) throws -> Named {
        var named = Named(path: [], command: RootCommand.self)
        for word in words {
            let subs: [any Command.Type] = named.command.subcommands
            if let sub = subs.first(where: { $0.name == word }) {
                named = Named(path: named.path + [word], command: sub)
                continue
            }
            let names: [String] = subs.map { $0.name }
            let here = named.path.joined(separator: " ")
            let place = named.path.isEmpty ? "command" : "subcommand of '\(here)'"
            var hint = "the subcommands are: " + names.joined(separator: ", ")
            if names.isEmpty { hint = "'storectl \(here)' has no subcommands" }
            if let near = Suggest.closest(word, in: names) {
                hint = "did you mean 'storectl help \((named.path + [near]).joined(separator: " "))'?"
            }
            throw UsageError("unknown \(place) '\(word)'", hint: hint)
        }
        return named
    }
}

import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
