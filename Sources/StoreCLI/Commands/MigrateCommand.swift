import StoreBase
import StoreHistory
import StoreControl

/// `storectl migrate`: regenerate the history triggers after a schema change; move or copy the store file
/// (`--to`).
struct MigrateCommand: Command {
    static let name = "migrate"
    static let abstract = "Regenerate the triggers after a schema change; move the store file (--to), its sync "
        + "target (--cloud), or run a schema change (--sql)."
    static let discussion = """
        Without options: after a tracked table changes (a column added, renamed or dropped, a table added or
        dropped), the history triggers no longer match the schema: status and history report drift, and sync
        refuses to run. migrate regenerates every trigger and the schema hash in one transaction. History rows are
        not touched, so no history is lost.

        When triggers are missing (dropped by hand, or a table was rebuilt), changes may have gone unrecorded:
        tracking is lost, and migrate refuses (exit 78). --force reinstalls the triggers and records the gap in
        the store meta (history_gap), so that the next cloud enable re-baselines instead of missing changes.

        --to NEW_PATH moves the store file with SQLite's online backup API: history, tokens, consumers, the record
        map and meta come along, and the store keeps its identity. Writers wait while the copy is taken; the copy
        must pass an integrity check; then the old file is fenced (every write to it fails, naming the new path),
        then config.yaml names the new file (stores.NAME.path; comments kept), and only then is the old file
        removed. Killed at any step, the same command finishes the move without losing a write (or refuses, exit
        65, when both files were written). A target that is, or would make, a file of a store (its -wal, -shm or
        -journal companion, a link to it) is refused (exit 64). With --copy, the copy gets a new identity and
        config.yaml is not changed.

        --cloud URL [--container ID] [--zone Z] moves the store's sync target: another backend (file: to
        postgres:// and back), another container or another zone. It syncs a last time with the old target, checks
        the account on the new one (--account and --secret-env VAR name another account; the secret stays in the
        environment and config.yaml gets secret: ${VAR}), takes in what the new target already holds, exports
        every row there, verifies the content, and only then switches cloud.* in config.yaml (one atomic edit) and
        the store's tokens. A failure at any step leaves the old setup working and config.yaml untouched. Every
        other store of the account follows with the same command.

        --sql FILE runs a schema change ALTER TABLE cannot make (a column type change, a table rebuilt by copying
        it into a new one) in ONE transaction, with foreign keys off and checked before the commit, then
        regenerates the triggers and records the schema version (--schema-version N, default: one more than the
        store's; a store at N or later does nothing, so every device can run the same file). Rows of a rebuilt
        table keep their record names, so the cloud sees updates, never a mass delete and re-insert. The file may
        not BEGIN or COMMIT, ATTACH, set pragmas, or touch storectl's own tables. A file that changes values is a
        data migration, applied once per zone: the first device that syncs after running it raises the zone's
        schema version, and a device that has not run it waits (sync and status exit 75 naming the command) until
        it does. A store in cloud mode tries the file, syncs, then runs it.
        """
    static let examples = [
        "storectl migrate                   # after ALTER TABLE notes ADD COLUMN pinned INTEGER",
        "storectl migrate --force           # after triggers were dropped: reinstall, record a history gap",
        "storectl migrate --to /srv/data/notes.sqlite      # move the store; config.yaml follows",
        "storectl migrate --to backup/notes.sqlite --copy  # a copy with its own identity",
        "storectl migrate --cloud postgres://sync@db.example.com/notes --account sync --secret-env NOTES_PG_PASSWORD",
        "storectl migrate --cloud file:cloud/notes.container --zone archive",
        "storectl migrate --sql migrations/0002-price-as-integer.sql --schema-version 2",
    ]
    static let options = [
        OptionSpec("force", help: "Reinstall missing triggers (tracking was lost) and record a history gap."),
        OptionSpec("to", value: "NEW_PATH", help: "Move the store file to NEW_PATH and point config.yaml at it."),
        OptionSpec("copy", help: "With --to: copy instead of moving; the copy gets a new identity."),
        OptionSpec("cloud", value: "URL", help: "Move the store's sync target to URL (file: or postgres://)."),
        OptionSpec("container", value: "ID", help: "With --cloud: the new container (default: the current one)."),
        OptionSpec("zone", value: "ZONE", help: "With --cloud: the new zone (default: the current one)."),
        OptionSpec("account", value: "ID", help: "With --cloud: the account on the new target."),
        OptionSpec("secret-env", value: "VAR", help: "With --cloud: the variable holding the new account's secret."),
        OptionSpec("no-final-sync", help: "With --cloud: skip the last sync with the old target (it is gone)."),
        OptionSpec("allow-mass-delete", help: "With --cloud: let the export through the mass-delete breaker."),
        OptionSpec("sql", value: "FILE", help: "Run the schema change in FILE in one transaction (see above)."),
        OptionSpec("schema-version", value: "N", help: "With --sql: the schema version FILE brings the store to."),
    ]

    struct Output: Encodable {
        var store: String
        var before: String
        var repaired: [String]
        var regenerated: Bool
        var tables: [String]
        var schemaHash: String
        var historyGap: Int64?

        enum CodingKeys: String, CodingKey {
            case store, before, repaired, regenerated, tables
            case schemaHash = "schema_hash"
            case historyGap = "history_gap"
        }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(store, forKey: .store)
            try c.encode(before, forKey: .before)
            try c.encode(repaired, forKey: .repaired)
            try c.encode(regenerated, forKey: .regenerated)
            try c.encode(tables, forKey: .tables)
            try c.encode(schemaHash, forKey: .schemaHash)
            try c.encode(historyGap, forKey: .historyGap)
        }
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        try checkCombination(args)
        if let target = args.value("to") {
            return try move(to: target, args, context)
        }
        if let url = args.value("cloud") {
            return try moveCloud(to: url, args, context)
        }
        if let file = args.value("sql") {
            return try migrateSchema(file, args, context)
        }
        let store = try context.openStore()
        let tracker = try store.historyTracker()
        let report = try tracker.migrate(force: args.flag("force"))
        let filled = report.regenerated ? try store.fillAddedColumns() : 0
        let name = store.settings.name
        if context.global.json {
            context.console.json(Output(store: name, before: report.before.name, repaired: report.repaired,
                                        regenerated: report.regenerated, tables: report.tables,
                                        schemaHash: report.schemaHash, historyGap: report.historyGap))
            return .ok
        }
        if !report.regenerated {
            context.console.out("The history triggers of store '\(name)' are up to date; nothing to do.")
            return .ok
        }
        context.console.out("Regenerated the history triggers of \(report.tables.count) "
                            + "\(report.tables.count == 1 ? "table" : "tables") of store '\(name)' in one transaction; "
                            + "no history was lost.")
        for line in report.repaired { context.console.out("  " + line) }
        if filled > 0 {
            context.console.out("  filled \(filled) value(s) of added columns from what other devices sent for them")
        }
        if let gap = report.historyGap {
            context.console.err("warning: recorded a history gap after seq \(gap): changes made while the triggers "
                                + "were missing were not recorded; the next cloud enable re-baselines")
        }
        return .ok
    }
}

extension MigrateCommand {
    /// Refuses options that do not go together, before anything is read.
    static func checkCombination(_ args: ParsedArguments) throws {
        if args.flag("copy") && args.value("to") == nil {
            throw UsageError("--copy goes with --to", hint: "write storectl migrate --to NEW_PATH --copy")
        }
        if args.flag("force") && args.value("to") != nil {
            throw UsageError("--force regenerates triggers; it does not go with --to")
        }
        let modes = ["to", "cloud", "sql"].filter { args.value($0) != nil }
        if modes.count > 1 {
            throw UsageError("--\(modes[0]) and --\(modes[1]) do not go together", hint: "run one migration at a time")
        }
        for option in ["container", "zone", "account", "secret-env", "no-final-sync", "allow-mass-delete"]
        where (args.value(option) != nil || args.flag(option)) && args.value("cloud") == nil {
            throw UsageError("--\(option) goes with --cloud", hint: "write storectl migrate --cloud URL --\(option) ...")
        }
        if args.value("schema-version") != nil && args.value("sql") == nil {
            throw UsageError("--schema-version goes with --sql", hint: "write storectl migrate --sql FILE --schema-version N")
        }
        if let raw = args.value("schema-version"), Int(raw).map({ $0 > 0 }) != true {
            throw UsageError("--schema-version must be a positive number, got '\(raw)'")
        }
        if args.flag("force") && args.value("sql") != nil {
            throw UsageError("--force regenerates triggers; it does not go with --sql (which regenerates them too)")
        }
        if args.flag("force") && args.value("cloud") != nil {
            throw UsageError("--force regenerates triggers; it does not go with --cloud")
        }
        for option in ["cloud", "container", "zone", "account", "secret-env", "sql"] where args.value(option)?.isEmpty == true {
            throw UsageError("--\(option) needs a value")
        }
        if let to = args.value("to"), to.isEmpty {
            throw UsageError("--to needs a path", hint: "write storectl migrate --to NEW_PATH")
        }
    }

    /// `migrate --to NEW_PATH [--copy]`.
    static func move(to raw: String, _ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let store = try context.openStore()
        let target = raw.hasPrefix("/") || raw.hasPrefix("~") ? raw : Path.join(context.workingDirectory, raw)
        let bar = Progress(console: context.console, label: "copy", json: context.global.json)
        let report = try store.move(to: target, copy: args.flag("copy"), log: { line in
            bar.finish()
            if !context.global.json { context.console.note("  " + line) }
        }, progress: { done, total in bar.update(done: done, total: total) })
        bar.finish()
        if context.global.json {
            context.console.json(report)
            return .ok
        }
        if report.action == "copy" {
            context.console.out("Copied store '\(report.store)' to \(report.to) (new store id \(report.storeID ?? "?")); "
                                + "config.yaml still names \(report.from).")
        } else if report.pages == 0 {
            context.console.out(report.oldFileRemoved ? "Finished moving store '\(report.store)' to \(report.to)."
                                : "Store '\(report.store)' is already at \(report.to); nothing to do.")
        } else {
            context.console.out("Moved store '\(report.store)' to \(report.to); config.yaml now says path: "
                                + "\(report.configPath ?? report.to).")
        }
        return .ok
    }
}

extension MigrateCommand {
    /// `migrate --cloud URL [--container ID] [--zone Z]`.
    static func moveCloud(to url: String, _ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let store = try context.openStore()
        var options = CloudMoveOptions(url: url)
        options.container = args.value("container")
        options.zone = args.value("zone")
        options.account = args.value("account")
        options.secretVariable = args.value("secret-env")
        options.noFinalSync = args.flag("no-final-sync")
        options.allowMassDelete = args.flag("allow-mass-delete")
        let progress = SyncProgress(context: context)
        let report = try store.moveCloud(options, log: { line in
            progress.finish()
            if !context.global.json { context.console.note("  " + line) }
        }, progress: progress.update)
        progress.finish()
        if context.global.json {
            context.console.json(report)
        } else if report.config.isEmpty {
            context.console.out("Store '\(report.store)' already syncs with \(report.to); nothing to do.")
        } else {
            context.console.out("Store '\(report.store)' now syncs with \(report.to) (was \(report.from)).")
        }
        return .ok
    }
}

extension MigrateCommand {
    /// `migrate --sql FILE [--schema-version N]`.
    static func migrateSchema(_ raw: String, _ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let store = try context.openStore()
        let path = raw.hasPrefix("/") ? raw : Path.join(context.workingDirectory, raw)
        let report = try store.migrateSchema(sqlFile: path, version: args.value("schema-version").flatMap { Int($0) },
                                             log: { line in
            if !context.global.json { context.console.note("  " + line) }
        })
        if context.global.json {
            context.console.json(report)
        } else if report.applied {
            context.console.out("Migrated store '\(report.store)' to schema version \(report.version) with \(raw); "
                                + "\(report.keptRecordNames) rebuilt row(s) kept their record names.")
        } else {
            context.console.out("Store '\(report.store)' is at schema version \(report.version) already; nothing to do.")
        }
        return .ok
    }
}
