import StoreBase
import StoreConfig

/// `storectl config set KEY VALUE`: changes one value in place, keeping comments and layout.
struct ConfigSetCommand: Command {
    static let name = "set"
    static let abstract = "Change one value in the config file, keeping comments, blank lines, order and quoting."
    static let arguments = "<key> <value>"
    static let positionalRange = 2...2
    static let discussion = """
        Only the bytes of that one value change; a key that does not exist yet is added to its section with the
        file's indentation. The new config is validated before it is written: an invalid result is refused (exit 78)
        and the file is not touched. The write is atomic and keeps the file's permissions. What changed is printed
        on stderr (not with --quiet). To keep a secret out of the file, set a reference: '${MY_SECRET}'.
        """
    static let examples = [
        "storectl config set stores.notes.mode cloud",
        "storectl config set stores.notes.cloud.zone shared",
        "storectl config set stores.notes.cloud.secret '${NOTES_SECRET}'",
        "storectl config set stores.notes.history.retention 90d --json",
    ]

    struct Document: Encodable {
        var key: String
        var old: String?
        var new: String
        var changed: Bool
        var inserted: Bool
        var line: Int
        var path: String
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let key = args.positionals[0]
        let value = args.positionals[1]
        let change = try ConfigEditor.set(path: context.configPath, displayPath: context.configDisplayPath, key: key,
                                          value: value, environment: context.environment,
                                          expandEnvironment: !context.global.noExpandEnv)
        func shown(_ text: String?) -> String? { ConfigCommand.shown(text, key: key) }
        let display = context.configDisplayPath
        if change.unchanged {
            context.console.note("\(key) is already '\(shown(value) ?? "")'; \(display) was not changed")
        } else if let old = change.oldValue {
            context.console.note("\(display):\(change.line): \(key): '\(shown(old) ?? "")' -> '\(shown(value) ?? "")'")
        } else {
            context.console.note("\(display):\(change.line): \(key): set to '\(shown(value) ?? "")'"
                                 + (change.inserted ? " (new key)" : ""))
        }
        if let config = try? ConfigCommand.load(context).config { ConfigCommand.printWarnings(config, context) }
        if context.global.json {
            context.console.json(Document(key: key, old: shown(change.oldValue), new: shown(value) ?? "",
                                          changed: !change.unchanged, inserted: change.inserted, line: change.line,
                                          path: context.configPath))
        }
        return .ok
    }
}
