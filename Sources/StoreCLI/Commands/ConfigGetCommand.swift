import StoreBase
import StoreConfig

/// `storectl config get KEY`: prints one value of the resolved config.
struct ConfigGetCommand: Command {
    static let name = "get"
    static let abstract = "Print one value of the config (defaults resolved, paths absolute, secrets redacted)."
    static let arguments = "<key>"
    static let positionalRange = 1...1
    static let discussion = """
        KEY is dotted, like stores.notes.mode. A scalar prints as plain text; a section prints as YAML (or JSON
        with --json). Values are resolved: defaults filled in, ${VAR} expanded, paths absolute. A key the config
        could hold but does not set exits 1; a key the config cannot hold exits 64 with a suggestion.
        """
    static let examples = [
        "storectl config get stores.notes.mode              # local",
        "storectl config get stores.notes.path              # /srv/app/data/notes.sqlite",
        "storectl config get stores.notes.cloud --json",
        "storectl config get stores.notes.cloud.secret      # ${NOTES_SECRET}: the variable, never its value",
    ]

    struct Document: Encodable {
        var key: String
        var value: ConfigValue
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let key = args.positionals[0]
        let components = key.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard !components.contains(where: \.isEmpty) else {
            throw StoreError(.usage, "'\(key)' is not a key", hint: "write a dotted key, like stores.notes.mode")
        }
        try ConfigKeys.check(components, key: key)
        let loaded = try ConfigCommand.load(context)
        ConfigCommand.printWarnings(loaded.config, context)
        let root = ConfigValue.resolved(loaded.config)
        var current = root
        for (index, component) in components.enumerated() {
            guard let next = current.value(at: [component]) else {
                let parent = components[..<index].joined(separator: ".")
                if let what = ConfigKeys.namedSection(Array(components[..<index])) {
                    let names = current.keys
                    let hint = Suggest.closest(component, in: names).map { "did you mean '\(parent).\($0)'?" }
                        ?? "\(parent) holds: \(names.isEmpty ? "nothing" : names.joined(separator: ", "))"
                    let place = parent == "stores" ? context.configDisplayPath
                        : "\(parent) of \(context.configDisplayPath)"
                    throw StoreError(.usage, "no \(what) named '\(component)' in \(place)", hint: hint)
                }
                context.console.note("\(key) is not set in \(context.configDisplayPath)")
                if context.global.json { context.console.json(Document(key: key, value: .null)) }
                return .failure
            }
            current = next
        }
        if context.global.json {
            context.console.json(Document(key: key, value: current))
        } else if let text = current.scalarText {
            context.console.out(text)
        } else {
            context.console.out(try current.yaml())
        }
        return .ok
    }
}
