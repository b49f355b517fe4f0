import StoreBase

/// `storectl man`: the manual page, in roff, generated from the same text as --help.
struct ManCommand: Command {
    static let name = "man"
    static let abstract = "Print the storectl(1) manual page (roff), made from the same text as --help."
    static let examples = [
        "storectl man | man -l -",
        "storectl man > /usr/local/share/man/man1/storectl.1",
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let page = ManPage.render()
        if context.global.json {
            context.console.json(["format": "roff", "page": page])
        } else {
            context.console.out(page)
        }
        return .ok
    }
}

/// The roff source of storectl(1).
enum ManPage {
    static func render() -> String {
        var out: [String] = []
        out.append(".TH STORECTL 1 \"\" \"storectl \(storectlVersion)\" \"User Commands\"")
        out.append(".SH NAME")
        out.append("storectl \\- " + escape(RootCommand.abstract))
        out.append(".SH SYNOPSIS")
        out.append(".B storectl")
        out.append(escape("[--config <path>] [--store <name>] [--json] [--quiet] [--verbose] <command> [options]"))
        out.append(".SH DESCRIPTION")
        out += paragraphs(RootCommand.discussion)
        out.append(".SH GLOBAL OPTIONS")
        out += options(GlobalOptions.specs)
        out.append(".SH COMMANDS")
        for named in HelpFormatter.walk() where !named.path.isEmpty {
            out.append(".SS " + escape(named.path.joined(separator: " ")))
            out.append(".B " + escape(HelpFormatter.usageLine(for: named.command, path: named.path)))
            out.append(".PP")
            out.append(escape(named.command.abstract))
            if !named.command.discussion.isEmpty { out += paragraphs(named.command.discussion) }
            if !named.command.options.isEmpty {
                out.append(".PP")
                out.append("Options:")
                out += options(named.command.options)
            }
            if !named.command.examples.isEmpty {
                out.append(".PP")
                out.append("Examples:")
                out.append(".RS")
                out.append(".nf")
                for example in named.command.examples { out.append(escape(example)) }
                out.append(".fi")
                out.append(".RE")
            }
        }
        out.append(".SH ENVIRONMENT")
        for variable in HelpFormatter.environment {
            out.append(".TP")
            out.append(".B " + escape(variable.name))
            out.append(escape(variable.help))
        }
        out.append(".SH FILES")
        out.append(".TP")
        out.append(".I ./config.yaml")
        out.append("The config, when neither \\-\\-config nor STORECTL_CONFIG names one.")
        out.append(".TP")
        out.append(".I $XDG_CONFIG_HOME/storectl/config.yaml")
        out.append("Searched last (XDG_CONFIG_HOME defaults to ~/.config).")
        out.append(".SH EXIT STATUS")
        for exit in HelpFormatter.exitCodes {
            out.append(".TP")
            out.append(".B \(exit.code)")
            out.append(escape(exit.meaning))
        }
        out.append(".SH EXAMPLES")
        out.append(".nf")
        for example in RootCommand.examples { out.append(escape(example)) }
        out.append(".fi")
        out.append(".SH SEE ALSO")
        out.append("sqlite3(1); the README and the docs of storectl, which make install puts in share/doc/storectl "
                   + "under its prefix (json.md: the JSON documents).")
        return out.joined(separator: "\n")
    }

    static func options(_ specs: [OptionSpec]) -> [String] {
        specs.flatMap { spec in [".TP", ".B " + escape(HelpFormatter.label(spec)), escape(spec.help)] }
    }

    /// Text as roff paragraphs: blank lines start a new one; indented lines are kept as they are.
    static func paragraphs(_ text: String) -> [String] {
        var out = [".PP"]
        var literal = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.trimmingSpaces().isEmpty {
                if literal { out.append(".fi"); literal = false }
                out.append(".PP")
            } else if line.hasPrefix("  ") {
                if !literal { out.append(".nf"); literal = true }
                out.append(escape(String(line)))
            } else {
                if literal { out.append(".fi"); literal = false }
                out.append(escape(String(line)))
            }
        }
        if literal { out.append(".fi") }
        return out
    }

    /// Escapes text for roff: backslashes, hyphens of options, and a leading dot or quote.
    static func escape(_ text: String) -> String {
        var s = text.replacingText("\\", with: "\\e").replacingText("-", with: "\\-")
        if s.hasPrefix(".") || s.hasPrefix("'") { s = "\\&" + s }
        return s
    }
}
