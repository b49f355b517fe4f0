import StoreBase
import StoreConfig

/// `storectl config show`: prints the config, secrets redacted.
struct ConfigShowCommand: Command {
    static let name = "show"
    static let abstract = "Print the config (secrets redacted), as written or with every default resolved."
    static let discussion = """
        Without --resolved, prints the keys the file sets, with ${VAR} references expanded. With --resolved, every
        default is explicit and every path is absolute: exactly what storectl will use. Secrets, and passwords in
        URLs, are always printed as <redacted>. Output is YAML (--yaml, the default) or JSON with --json.
        """
    static let examples = [
        "storectl config show",
        "storectl config show --resolved",
        "storectl config show --resolved --json | jq -r '.stores.notes.path'",
        "storectl config show --no-expand-env     # keep ${VAR} references as written",
    ]
    static let options = [
        OptionSpec("resolved", help: "Make every default explicit and every path absolute."),
        OptionSpec("yaml", help: "Print YAML (the default unless --json is given)."),
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        if args.flag("yaml"), context.global.json {
            throw UsageError("--yaml and --json cannot be used together", hint: "pick one output format")
        }
        let loaded = try ConfigCommand.load(context)
        ConfigCommand.printWarnings(loaded.config, context)
        let value = args.flag("resolved") ? ConfigValue.resolved(loaded.config) : ConfigValue.written(loaded.document)
        if context.global.json {
            context.console.json(value)
        } else {
            context.console.out(try value.yaml())
        }
        return .ok
    }
}
