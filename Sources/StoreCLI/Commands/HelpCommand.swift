import StoreBase

/// `storectl help [<command>...]`: the same text as `storectl <command>... --help`.
struct HelpCommand: Command {
    static let name = "help"
    static let abstract = "Show help for storectl or for a command."
    static let arguments = "[<command>...]"
    static let positionalRange = 0...8
    static let examples = [
        "storectl help",
        "storectl help mode",
        "storectl help history consumer advance",
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let named = try HelpFormatter.resolve(args.positionals)
        let text = HelpFormatter.help(for: named.command, path: named.path)
        if context.global.json {
            context.console.json(["command": (["storectl"] + named.path).joined(separator: " "), "text": text])
        } else {
            context.console.out(text)
        }
        return .ok
    }
}
