import StoreBase
import StoreConfig
import StoreControl

/// `storectl config validate`: checks the config and says which stores it defines.
struct ConfigValidateCommand: Command {
    static let name = "validate"
    static let abstract = "Check the config: YAML syntax, keys, types, values and references."
    static let discussion = """
        Prints '<file>: ok (N stores: ...)' and exits 0 when the config is valid. Otherwise prints the first problem
        as file:line:column with the key path, the source line, a caret and a hint (and a line for each other store
        with a problem), and exits 78 (66 when the file is missing, 77 when it cannot be read). Warnings (a literal
        secret in a file other users can read) go to stderr and do not change the exit code.
        """
    static let examples = [
        "storectl config validate",
        "storectl --config deploy/config.yaml config validate",
        "storectl config validate --json          # {\"ok\": true, \"stores\": [...], ...}",
        "STORECTL_SECRET=s3cret storectl config validate",
    ]

    struct Document: Encodable {
        var ok: Bool
        var path: String
        var stores: [String]
        var warnings: [String]
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        // A store whose section is wrong fails only the commands on it, but the config is not valid: the first
        // problem is the error, and every other one is named after it.
        let config = try ConfigCommand.load(context).config
        ConfigCommand.printWarnings(config, context)
        // Where a store file exists, the columns entities: names are checked against it too (read-only).
        for store in config.stores {
            let handle = try StoreHandle(config: config, storeName: store.name, environment: context.environment)
            handle.readOnly = true
            do {
                try handle.checkEntityColumns()
            } catch let error as StoreError where error.exitCode == .config {
                throw error
            } catch {
                // A store that cannot be read is for the commands that use it to report; this checks the config.
            }
            handle.close()
        }
        let names = config.stores.map(\.name)
        if context.global.json {
            context.console.json(Document(ok: true, path: config.path, stores: names, warnings: config.warnings))
        } else {
            let count = names.count == 1 ? "1 store" : "\(names.count) stores"
            context.console.out("\(context.configDisplayPath): ok (\(count): \(names.joined(separator: ", ")))")
        }
        return .ok
    }
}
