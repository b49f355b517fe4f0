import StoreBase
import StoreCloud
import StoreConfig
import StoreMirror
import StoreControl

/// `storectl mode [local|cloud]`: print or switch the store's mode.
struct ModeCommand: Command {
    static let name = "mode"
    static let abstract = "Print the store's mode, or switch it between local and cloud."
    static let arguments = "[local|cloud]"
    static let discussion = """
        Without an argument, prints the mode. `mode cloud` checks the config, checks that the account is available
        (exit 69 or 75 otherwise, with nothing changed anywhere), verifies the history triggers, checks that every
        tracked table can be mirrored, keeps a copy of the store, binds the account, exports (a baseline of all rows
        the first time), imports, verifies that every table matches the zone (if anything differs that no pending
        change explains, it puts the store back as it was and exits 70 with the rows), and finally writes
        `mode: cloud` into the store and into config.yaml (only that value changes; comments stay). `mode local`
        runs a final export, then writes `mode: local`. Data, history, the record map and the tokens all stay, so
        switching back is incremental.

        `mode cloud --dry-run` walks the same steps and prints the plan on stdout: the account status, the rows to
        export, the records to import from other devices, the expected conflicts, a content hash per tracked table
        and a plan id. `mode cloud --expect-plan ID` switches only if the plan is still that one (exit 75 otherwise,
        with nothing changed).
        """
    static let examples = [
        "storectl mode                      # print the mode",
        "storectl mode cloud                # enable sync",
        "storectl mode cloud --dry-run      # print the plan, change nothing",
        "storectl mode cloud --expect-plan 3f2a9c0e1b7d4a56   # switch only if the plan is still that one",
        "storectl mode local --no-final-sync",
        "storectl --store notes --json mode cloud",
    ]
    static let options = [
        OptionSpec("dry-run", short: "n", help: "Print the plan; change nothing."),
        OptionSpec("no-sync", help: "mode cloud: switch without the first export and import."),
        OptionSpec("no-final-sync", help: "mode local: switch without the final export."),
        OptionSpec("rebind", help: "Bind the store to the configured account even if it is bound to another."),
        OptionSpec("accept-owner", value: "ROLE",
                   help: "PostgreSQL: bind to a container owned by ROLE, another role than the configured one."),
        OptionSpec("allow-mass-delete", help: "Let the export delete more than max_delete_fraction of the zone."),
        OptionSpec("expect-plan", value: "ID", help: "mode cloud: refuse (exit 75) unless the plan is still ID, "
                   + "the plan id a --dry-run printed."),
    ]
    static let positionalRange = 0...1

    struct Current: Encodable {
        var store: String
        var mode: String
        var configMode: String
        var storeMode: String?
        var agrees: Bool
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        // The argument is checked before anything is read: a usage error never depends on the files.
        if let target = args.positionals.first, StoreMode(rawValue: target) == nil {
            throw UsageError("mode must be 'local' or 'cloud', got '\(target)'",
                             hint: Suggest.closest(target, in: ["local", "cloud"]).map { "did you mean '\($0)'?" })
        }
        let store = try context.openStore()
        guard let target = args.positionals.first else {
            let stored = try store.storeMode()
            let mode = stored ?? store.settings.mode
            let current = Current(store: store.settings.name, mode: mode.rawValue,
                                  configMode: store.settings.mode.rawValue, storeMode: stored?.rawValue,
                                  agrees: stored == nil || stored == store.settings.mode)
            if context.global.json {
                context.console.json(current)
            } else {
                context.console.out(mode.rawValue)
                if !current.agrees {
                    context.console.err("warning: config.yaml says mode: \(store.settings.mode.rawValue), but the store is in \(mode.rawValue) mode; run 'storectl mode \(store.settings.mode.rawValue)' to switch")
                }
            }
            return .ok
        }
        guard let mode = StoreMode(rawValue: target) else {
            throw UsageError("mode must be 'local' or 'cloud', got '\(target)'",
                             hint: Suggest.closest(target, in: ["local", "cloud"]).map { "did you mean '\($0)'?" })
        }
        var options = SyncOptions()
        options.dryRun = args.flag("dry-run")
        options.noSync = args.flag("no-sync")
        options.noFinalSync = args.flag("no-final-sync")
        options.rebind = args.flag("rebind")
        options.acceptOwner = args.value("accept-owner")
        options.allowMassDelete = args.flag("allow-mass-delete")
        let progress = SyncProgress(context: context)
        let expectPlan = args.value("expect-plan")
        if let expectPlan {
            guard mode == .cloud, !options.dryRun else {
                throw UsageError("--expect-plan goes with 'mode cloud' (without --dry-run)",
                                 hint: "write storectl mode cloud --expect-plan \(expectPlan)")
            }
        }
        // A store in cloud mode, in the store and in config.yaml, has nothing to switch: one line says so (a sync
        // round is 'storectl sync'; --rebind and --accept-owner still walk the whole switch).
        if mode == .cloud, !options.dryRun, expectPlan == nil, !options.rebind, options.acceptOwner == nil,
           store.settings.mode == .cloud, try store.storeMode() == .cloud
        {
            if context.global.json {
                context.console.json(ModeReport(store: store.settings.name, from: "cloud", to: "cloud", dryRun: false,
                                                steps: [], sync: nil, plan: nil, verified: nil))
            } else {
                context.console.out("store '\(store.settings.name)' is already in cloud mode")
            }
            return .ok
        }
        // A dry run's plan is data: it goes to stdout. The steps of a switch are diagnostics, on stderr.
        let log: (String) -> Void = { line in
            progress.finish()
            if context.global.json { return }
            if options.dryRun { context.console.out("  " + line) } else { context.console.note("  " + line) }
        }
        if !context.global.json {
            if options.dryRun {
                context.console.out("plan for mode \(mode.rawValue) of store '\(store.settings.name)':")
            } else {
                context.console.note("switching store '\(store.settings.name)' to \(mode.rawValue) mode:")
            }
        }
        let report: ModeReport
        switch mode {
        case .cloud: report = try store.enableCloud(options, expectPlan: expectPlan, log: log, progress: progress.update)
        case .local: report = try store.disableCloud(options, log: log, progress: progress.update)
        }
        progress.finish()
        if context.global.json {
            context.console.json(report)
        } else if let plan = report.plan, report.dryRun {
            context.console.out(planText(plan))
            context.console.out("dry run: nothing was changed; to switch exactly as planned, run "
                                + "'\(context.command("mode cloud --expect-plan \(plan.planID)"))'")
        } else {
            context.console.out(report.dryRun ? "dry run: nothing was changed" : "mode: \(report.to)")
        }
        // A plan whose account is not available would be refused at its account step.
        if let plan = report.plan, report.dryRun, let status = AccountStatus(rawValue: plan.account.status) {
            return status.exitCode
        }
        return .ok
    }

    /// The plan's figures, for people.
    static func planText(_ p: SwitchPlan) -> String {
        // The account is the plan's account step, printed above it.
        var lines = ["  plan id: \(p.planID)"]
        lines.append("  to export: \(Words.count(p.export.rows, "row"))" + (p.export.baseline ? " (a baseline)" : "")
                     + (p.export.tables.isEmpty ? "" : " - " + p.export.tables.keys.sorted()
                        .map { "\($0) \(p.export.tables[$0] ?? 0)" }.joined(separator: ", ")))
        if p.import.known {
            lines.append("  to import: \(Words.count(p.import.records ?? 0, "record")), "
                         + "\(Words.count(p.import.deletions ?? 0, "deletion")) from other devices")
        } else {
            lines.append("  to import: unknown (the zone could not be read)")
        }
        lines.append("  expected conflicts: \(p.expectedConflicts)"
                     + (p.conflicts.isEmpty ? "" : " - " + p.conflicts.prefix(10)
                        .map { "\($0.table) \($0.key?.display ?? $0.recordName)" }.joined(separator: ", ")))
        for t in p.tables {
            lines.append("  table \(t.table): \(Words.count(t.rows, "row")), content \(t.contentHash)")
        }
        return lines.joined(separator: "\n")
    }
}

/// Draws export and import progress on a terminal.
final class SyncProgress {
    private let context: CommandContext
    private var bars: [String: Progress] = [:]

    init(context: CommandContext) { self.context = context }

    func update(_ phase: String, _ done: Int, _ total: Int?) {
        let bar = bars[phase] ?? Progress(console: context.console, label: phase, json: context.global.json)
        bars[phase] = bar
        bar.update(done: done, total: total)
    }

    func finish() { for bar in bars.values { bar.finish() } }
}
