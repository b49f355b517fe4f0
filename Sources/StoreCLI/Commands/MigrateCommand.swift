import StoreBase
import StoreHistory
import Storectl

/// `storectl migrate`: regenerate the history triggers after a schema change.
struct MigrateCommand: Command {
    static let name = "migrate"
    static let abstract = "Regenerate the history triggers after a schema change, in one transaction."
    static let discussion = """
        After a tracked table changes (a column added, renamed or dropped, a table added or dropped), the
        history triggers no longer match the schema: status and history report drift, and sync refuses to run.
        migrate regenerates every trigger and the schema hash in one transaction. History rows are not touched,
        so no history is lost.

        When triggers are missing (dropped by hand, or a table was rebuilt), changes may have gone unrecorded:
        tracking is lost, and migrate refuses (exit 78). --force reinstalls the triggers and records the gap in
        the store meta (history_gap), so that the next cloud enable re-baselines instead of missing changes.
        """
    static let examples = [
        "storectl migrate                   # after ALTER TABLE notes ADD COLUMN pinned INTEGER",
        "storectl migrate --force           # after triggers were dropped: reinstall, record a history gap",
    ]
    static let options = [
        OptionSpec("force", help: "Reinstall missing triggers (tracking was lost) and record a history gap."),
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
        let store = try context.openStore()
        let tracker = try store.historyTracker()
        let report = try tracker.migrate(force: args.flag("force"))
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
        if let gap = report.historyGap {
            context.console.err("warning: recorded a history gap after seq \(gap): changes made while the triggers "
                                + "were missing were not recorded; the next cloud enable re-baselines")
        }
        return .ok
    }
}
