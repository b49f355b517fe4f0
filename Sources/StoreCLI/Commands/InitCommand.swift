import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreHistory
import StoreMirror
import StoreSQLite
import StoreControl

/// `storectl init`: create or adopt the store file and install history tracking.
struct InitCommand: Command {
    static let name = "init"
    static let abstract = "Create or adopt the store file and install history tracking."
    static let discussion = """
        If the store file is missing, it is created, and the store's schema: SQL file (if any) runs. If the file is
        an existing SQLite database, it is adopted: its rows are kept and are not recorded as history. The schema:
        file runs only while the database has no tables of its own.

        init creates the _storectl_* tables (meta, history, context, consumers, tokens) and AFTER INSERT, UPDATE
        and DELETE triggers on every tracked table: every user table, or those named under entities:. A tracked
        table must have an explicit PRIMARY KEY. Running init again changes nothing.
        """
    static let examples = [
        "storectl init                      # the only store in ./config.yaml",
        "storectl init --store notes --json",
        "storectl init --new-identity       # after copying a store file: give the copy its own store id",
    ]
    static let options = [
        OptionSpec("new-identity", help: "Give an initialised store a new store id (for a copied store file)."),
    ]

    struct Output: Encodable {
        var store: String
        var path: String
        var createdFile: Bool
        var schema: String?
        var schemaApplied: Bool
        var installed: Bool
        var storeID: String
        var tracked: [String]
        var schemaHash: String

        enum CodingKeys: String, CodingKey {
            case store, path, schema, installed, tracked
            case createdFile = "created_file"
            case schemaApplied = "schema_applied"
            case storeID = "store_id"
            case schemaHash = "schema_hash"
        }
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let store = try context.openStore()
        let settings = store.settings
        if args.flag("new-identity") {
            guard store.exists, try store.historyTracker().isInitialized() else {
                throw StoreError(.usage, "store '\(settings.name)' is not initialised, so it has no identity to renew",
                                 hint: "run 'storectl init' first")
            }
            let id = try store.newIdentity()
            if context.global.json {
                context.console.json(["store": settings.name, "store_id": id])
            } else {
                context.console.out("Store '\(settings.name)' has the new store id \(id).")
            }
            return .ok
        }
        let createdFile = !store.exists
        var schemaApplied = false
        // A refusal leaves nothing behind: the file (and its folder) did not exist before this command.
        let report: InstallReport = try store.leavingNothingBehind(container: false) {
            let tracker = try store.historyTracker(create: true)
            return try tracker.db.transaction(.immediate) {
                schemaApplied = try store.runSchema(on: tracker.db)
                let installed = try tracker.install()
                try MirrorState.recordStorePath(tracker.db)
                return installed
            }
        }
        let output = Output(store: settings.name, path: settings.path, createdFile: createdFile,
                            schema: settings.schema, schemaApplied: schemaApplied, installed: report.installed,
                            storeID: report.storeID, tracked: report.tables, schemaHash: report.schemaHash)
        if context.global.json {
            context.console.json(output)
            return .ok
        }
        if !report.installed {
            context.console.out("Store '\(settings.name)' is already initialized (\(settings.path)); nothing to do.")
        } else if createdFile {
            context.console.out("Created store '\(settings.name)' at \(settings.path).")
        } else {
            context.console.out("Adopted the existing database \(settings.path) as store '\(settings.name)'; "
                                + "its rows were kept and not recorded as history.")
        }
        if let schema = settings.schema {
            if schemaApplied {
                context.console.out("Ran the schema \(schema).")
            } else if report.installed {
                context.console.out("Did not run the schema \(schema): the database already has tables.")
            }
        }
        let names = report.tables.isEmpty ? "none" : report.tables.joined(separator: ", ")
        context.console.out("Tracking \(report.tables.count) \(report.tables.count == 1 ? "table" : "tables"): \(names).")
        context.console.out("Store id: \(report.storeID)")
        return .ok
    }
}
