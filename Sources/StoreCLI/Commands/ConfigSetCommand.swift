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
        A store's mode is not set here: 'storectl mode cloud' and 'storectl mode local' switch it for real (account
        check, export, import), then write it. To add a whole store, use 'storectl store add'.
        """
    static let examples = [
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

        enum CodingKeys: String, CodingKey { case key, old, new, changed, inserted, line, path }

        /// Every key always, `old` null for an inserted key: one shape for scripts.
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(key, forKey: .key)
            try c.encode(old, forKey: .old)
            try c.encode(new, forKey: .new)
            try c.encode(changed, forKey: .changed)
            try c.encode(inserted, forKey: .inserted)
            try c.encode(line, forKey: .line)
            try c.encode(path, forKey: .path)
        }
    }

    /// Changing `stores.<name>.mode` alone would leave the store in its old mode (and sync going on): refused,
    /// with the `mode` command that really switches it.
    static func refuseModeSwitch(key: String, value: String, _ context: CommandContext) throws {
        let parts = key.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, parts[0] == "stores", parts[2] == "mode",
              let config = try? context.loadConfig(), let store = config.stores.first(where: { $0.name == parts[1] })
        else { return }
        guard value != store.mode.rawValue else { return }
        let target = value == "local" || value == "cloud" ? value : "cloud"
        throw StoreError(.usage, "config set does not switch a store's mode: \(key) alone would leave store "
                            + "'\(store.name)' in \(store.mode.rawValue) mode; \(context.configDisplayPath) was not changed",
                         hint: "run '\(context.command("mode \(target)", store: store.name))' to switch it (it checks "
                             + "the account, syncs, and then writes mode: \(target))")
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let key = args.positionals[0]
        let value = args.positionals[1]
        try refuseModeSwitch(key: key, value: value, context)
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
