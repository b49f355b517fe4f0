import StoreBase
import StoreConfig

/// `storectl store`: the stores of the config.
struct StoreCommand: Command {
    static let name = "store"
    static let abstract = "Add a store to the config."
    static let examples = ["storectl store add laptop --like notes --path data/laptop.sqlite"]
    static var subcommands: [any Command.Type] { [StoreAddCommand.self] }
}

/// `storectl store add <name> --like <other> [--path <path>]`.
struct StoreAddCommand: Command {
    static let name = "add"
    static let abstract = "Add a store to the config, with the settings of another store."
    static let arguments = "<name>"
    static let positionalRange = 1...1
    static let discussion = """
        Copies the section of the store named by --like as it is written (comments, ${VAR} references, cloud:,
        entities:, history:), under the new name, after the last store, and sets its path: --path, else a file
        named after the new store in the same folder as the other store's. The new store starts in local mode.
        The whole new config is validated as one edit; an invalid result is refused and the file is not touched.
        Then 'storectl --store <name> init' creates the store file, and 'storectl --store <name> mode cloud' syncs it.
        """
    static let examples = [
        "storectl store add laptop --like notes",
        "storectl store add laptop --like notes --path /srv/app/laptop.sqlite --json",
    ]
    static let options = [
        OptionSpec("like", value: "store", help: "The store whose settings the new one copies (required)."),
        OptionSpec("path", value: "path", help: "The new store's file (default: <name>.sqlite beside the other's)."),
    ]

    struct Output: Encodable {
        var store: String
        var like: String
        var path: String
        var config: String
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let name = args.positionals[0]
        guard let like = args.value("like") else {
            throw UsageError("store add needs --like <store>: the store whose settings to copy",
                             hint: (try? context.loadConfig()).flatMap { $0.stores.first }.map {
                                 "e.g. '\(context.command("store add \(Shell.quoted(name)) --like \($0.name)", store: nil))'"
                             })
        }
        let loaded = try ConfigCommand.load(context, allowingStoreProblems: true)
        guard let other = loaded.document.root?["stores"]?[like]?["path"]?.scalar else {
            throw StoreError(.usage, "no store named '\(like)' in \(context.configDisplayPath)",
                             hint: Suggest.closest(like, in: loaded.config.stores.map(\.name)).map { "did you mean '\($0)'?" }
                                 ?? "the stores are: " + loaded.config.stores.map(\.name).joined(separator: ", "))
        }
        let path = args.value("path") ?? defaultPath(name: name, beside: other)
        try ConfigEditor.edit(path: context.configPath, displayPath: context.configDisplayPath,
                              environment: context.environment, expandEnvironment: !context.global.noExpandEnv) {
            bytes, display in
            try ConfigEditor.addingStore(to: bytes, name: name, like: like, path: path, displayPath: display)
        }
        if context.global.json {
            context.console.json(Output(store: name, like: like, path: path, config: context.configPath))
        } else {
            context.console.out("added store '\(name)' (like '\(like)', path \(path)) to \(context.configDisplayPath)")
            // The config now has at least two stores: the commands name the new one.
            context.loadedConfig = nil
            _ = try? context.loadConfig()
            context.console.note("next: '\(context.command("init", store: name))', then "
                                 + "'\(context.command("mode cloud", store: name))' to sync it")
        }
        return .ok
    }

    /// `<name>.sqlite` (or the other store's extension) in the other store's folder, as written.
    static func defaultPath(name: String, beside other: String) -> String {
        let folder = Path.parent(other)
        let last = Path.lastComponent(other)
        let ext = last.lastIndex(of: ".").map { String(last[$0...]) } ?? ".sqlite"
        let file = name + ext
        return folder.isEmpty || folder == "." ? file : Path.join(folder, file)
    }
}
