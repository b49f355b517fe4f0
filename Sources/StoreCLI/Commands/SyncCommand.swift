import StoreBase
import StoreMirror
import StoreControl

/// `storectl sync`: one round of export and import.
struct SyncCommand: Command {
    static let name = "sync"
    static let abstract = "Run one sync round: export local changes, then import the cloud's."
    static let discussion = """
        Requires the store to be in cloud mode (a store in local mode never contacts the cloud) and the account to
        be available. Conflicts are resolved by cloud.merge_policy. Prints a summary: exported, imported, conflicts.
        """
    static let examples = [
        "storectl sync",
        "storectl sync --json",
        "storectl sync --reupload            # after the zone was purged on another device",
        "storectl verify && storectl sync --discard-local   # a read-only participant drops its local edits",
    ]
    static let options = [
        OptionSpec("rebind", help: "Sync into the configured account even though the store is bound to another."),
        OptionSpec("accept-owner", value: "ROLE",
                   help: "PostgreSQL: sync into a container owned by ROLE, another role than the configured one."),
        OptionSpec("allow-mass-delete", help: "Let the export delete more than max_delete_fraction of the zone."),
        OptionSpec("reupload", help: "Forget record names and tokens and upload every row again."),
        OptionSpec("discard-local",
                   help: "Send nothing; put every row changed here and not sent back to the cloud's values."),
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let store = try context.openStore()
        var options = SyncOptions()
        options.rebind = args.flag("rebind")
        options.acceptOwner = args.value("accept-owner")
        options.allowMassDelete = args.flag("allow-mass-delete")
        options.reupload = args.flag("reupload")
        options.discardLocal = args.flag("discard-local")
        if options.discardLocal, options.reupload || options.rebind {
            throw UsageError("--discard-local cannot be combined with --reupload or --rebind")
        }
        let progress = SyncProgress(context: context)
        let report = try store.sync(options, progress: progress.update)
        progress.finish()
        // A read replica that could not be used: the round went through on the primary, and says so.
        for warning in report.warnings ?? [] {
            context.console.err(context.console.paint("warning:", "33;1") + " " + warning)
        }
        if context.global.json {
            context.console.json(report)
        } else {
            let e = report.exported
            let i = report.imported
            context.console.out("exported: \(e.saved) saved, \(e.deleted) deleted\(e.baseline ? " (baseline)" : "")")
            context.console.out("imported: \(i.applied) applied, \(i.deleted) deleted, \(i.skipped) skipped"
                                + (i.waitingForParent > 0 ? ", \(i.waitingForParent) waiting for a parent" : ""))
            context.console.out("conflicts: \(e.conflictsResolved) resolved by \(store.settings.cloud?.mergePolicy.rawValue ?? "")")
            if let notSent = report.notSent, notSent > 0 {
                context.console.err(context.render("note: \(notSent) row(s) changed here are not sent: the store's "
                                                   + "account has a read-only share of the zone; 'storectl status' "
                                                   + "lists them, 'storectl sync --discard-local' puts them back to "
                                                   + "the cloud's values", store: store.settings.name))
            }
            if let d = report.discarded {
                context.console.out("discarded: \(d.restored) row(s) put back to the cloud's values, \(d.deleted) "
                                    + "deleted, \(d.kept) kept (changed again meanwhile)"
                                    + (d.savedTo.map { "; their local values are kept in \($0)" } ?? ""))
            }
            for record in i.setAsideRecords {
                context.console.err("warning: record \(record.recordName) (table '\(record.recordType)', seq \(record.seq)) "
                                    + "is set aside: \(record.reason)")
                context.console.err("  fix: \(record.hint)")
            }
            for record in i.waitingRecords {
                context.console.err("note: record \(record.recordName) (table '\(record.recordType)', seq \(record.seq)) "
                                    + "waits for a parent record that has not arrived; it is applied when it does")
            }
        }
        return .ok
    }
}
