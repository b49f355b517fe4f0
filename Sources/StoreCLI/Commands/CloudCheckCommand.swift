import StoreBase
import StoreMirror
import StoreControl

/// `storectl cloud check`: can every tracked table be mirrored? The analogue of
/// `initializeCloudKitSchema(options: .dryRun)`.
struct CloudCheckCommand: Command {
    static let name = "check"
    static let abstract = "Check that every tracked table can be mirrored to the cloud (changes nothing)."
    static let discussion = """
        Checks each tracked table: a primary key is present, its column types are supported, and its unique
        constraints, which the cloud cannot enforce, are reported as dedup rules. Exits 65 when it finds problems.
        """
    static let examples = ["storectl cloud check", "storectl cloud check --json"]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let store = try context.openStore()
        let report = try store.cloudCheck()
        if context.global.json {
            context.console.json(report)
        } else {
            for e in report.entities {
                let status = e.problems.isEmpty ? "ok" : "PROBLEM"
                context.console.out("\(e.name): \(status) (key \(e.primaryKey.joined(separator: ", ")): \(e.keyKind))")
                for p in e.problems { context.console.out("  problem: \(p)") }
                for w in e.warnings { context.console.out("  note: \(w)") }
                for r in e.references { context.console.out("  reference: \(r)") }
                for rule in e.dedupRules { context.console.out("  dedup rule: unique (\(rule.joined(separator: ", ")))") }
            }
            context.console.out(report.ok ? "cloud check: ok (\(report.entities.count) table(s))"
                                : "cloud check: \(report.problemCount) problem(s)")
            if !report.ok {
                context.console.err("hint: fix each table as its problem says, or list the tables to sync in "
                                    + "stores.\(store.settings.name).entities; nothing was changed")
            }
        }
        return report.ok ? .ok : .dataError
    }
}
