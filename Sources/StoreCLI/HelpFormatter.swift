/// Builds --help text: usage line, abstract, discussion, subcommands, options and examples.
public enum HelpFormatter {
    public static func usageLine(for command: any Command.Type, path: [String]) -> String {
        var parts = ["storectl"] + path
        if !command.subcommands.isEmpty && command.positionalRange.upperBound == 0 {
            parts.append("<subcommand>")
        }
        if !command.arguments.isEmpty { parts.append(command.arguments) }
        parts.append("[options]")
        return parts.joined(separator: " ")
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
            let labels = specs.map { spec -> String in
                var label = spec.short.map { "-\($0), " } ?? ""
                label += "--\(spec.name)"
                if let v = spec.valueName { label += " <\(v.lowercased())>" }
                return label
            }
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
        if !command.examples.isEmpty {
            lines.append("")
            lines.append("EXAMPLES:")
            for example in command.examples { lines.append("  " + example) }
        }
        if !command.subcommands.isEmpty {
            lines.append("")
            lines.append("See 'storectl \((path + ["<subcommand>", "--help"]).joined(separator: " "))' for details.")
        }
        return lines.joined(separator: "\n")
    }
}

import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
