import StoreBase
import StoreMirror
import StoreControl

/// `storectl dedupe`: resolve duplicates of `unique:` keys that already exist.
struct DedupeCommand: Command {
    static let name = "dedupe"
    static let abstract = "Find and resolve rows that share a unique: key, keeping one per key."
    static let discussion = """
        The winner among duplicates is chosen by `keep:` (newest(col), oldest(col) or first), ties broken by the
        lowest record name, so every device keeps the same row. Children that reference a loser by foreign key
        are re-pointed to the winner before the loser is deleted. Imports do this automatically for the rows they
        touch; this command handles duplicates that already exist, e.g. after adopting an old store.
        """
    static let examples = [
        "storectl dedupe --dry-run          # print the groups and winners, change nothing",
        "storectl dedupe --entity notes",
        "storectl dedupe --json",
    ]
    static let options = [
        OptionSpec("entity", short: "e", value: "TABLE", help: "Only this table."),
        OptionSpec("dry-run", short: "n", help: "Print the groups and winners; change nothing."),
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let store = try context.openStore()
        let report = try store.dedupe(entity: args.value("entity"), dryRun: args.flag("dry-run"))
        if context.global.json {
            context.console.json(report)
            return .ok
        }
        // Per group: the table, the key columns and their shared values, the row kept and the rows deleted, by
        // primary key (the record names are in --json).
        for g in report.groups {
            let columns = g.columns.isEmpty ? "" : " (" + g.columns.joined(separator: ", ") + ")"
            context.console.out("\(g.entity)\(columns) = \(g.key): keep row \(g.winnerKey), "
                                + (report.dryRun ? "would delete " : "deleted ")
                                + Words.count(g.loserKeys.count, "row") + " " + g.loserKeys.joined(separator: ", "))
        }
        context.console.out(report.dryRun
            ? "dry run: \(Words.count(report.groups.count, "key")) with duplicates; nothing was changed"
            : "\(Words.count(report.groups.count, "key")) with duplicates: \(Words.count(report.deleted, "row")) "
                + "deleted, \(Words.count(report.repointed, "child row")) re-pointed")
        return .ok
    }
}
