import StoreBase
import StoreMirror
import Storectl

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
        for g in report.groups {
            context.console.out("\(g.entity) \(g.key): keep \(g.winner) (key \(g.winnerKey)), "
                                + (report.dryRun ? "would delete " : "deleted ") + g.losers.joined(separator: ", "))
        }
        context.console.out(report.dryRun
            ? "dry run: \(report.groups.count) group(s) of duplicates; nothing was changed"
            : "\(report.groups.count) group(s): \(report.deleted) row(s) deleted, \(report.repointed) child row(s) re-pointed")
        return .ok
    }
}
