import StoreBase
import StoreControl

/// `storectl doctor`: diagnose the stores, changing nothing, and say how to fix each problem.
struct DoctorCommand: Command {
    static let name = "doctor"
    static let abstract = "Diagnose each store and print the command that fixes each problem."
    static let discussion = """
        Checks, per store: the store file; history tracking (off in the config, stale triggers, schema drift);
        the mode in config.yaml against the store's; for a store in cloud mode, the account (noAccount,
        restricted), whether the cloud is reachable, and a zone purged or deleted elsewhere; the bound account
        and container against the config; a store file that is a copy of another (sync refuses it); duplicates
        of unique: keys; history kept beyond history.retention; a last sync that failed; and, when nothing else
        is wrong, the rows against the zone's records as verify compares them (a difference no pending change
        explains is a finding).
        Nothing is changed: not the config, not the store, not the cloud. Without --store, every store is checked.
        Exit 0 when healthy; 65 when any problem is with the data or the store; otherwise 69 (account or cloud).
        """
    static let examples = [
        "storectl doctor",
        "storectl doctor --json",
        "storectl --store notes doctor",
    ]

    struct Document: Encodable {
        var healthy: Bool
        var stores: [DoctorReport]
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        var reports: [DoctorReport] = []
        for name in try context.selectedStoreNames() {
            // A store whose config section is wrong has that as its finding (exit 78); the others are examined.
            if context.global.storeName == nil, let problem = try context.loadConfig().problem(of: name) {
                let error = problem.error
                let fix = error.hint.map { context.render($0, store: name) }
                    ?? "fix stores.\(name) in \(context.configDisplayPath) ('\(context.command("config validate"))' "
                    + "shows where)"
                reports.append(DoctorReport(store: name, path: "", checks: ["config"], findings: [
                    DoctorFinding(check: "config", problem: (error.location.map { $0 + ": " } ?? "") + error.summary,
                                  fix: fix, exitCode: .config),
                ]))
                continue
            }
            let store = try context.openStore(name)
            store.readOnly = true
            var report = try store.doctor()
            for i in report.findings.indices {
                report.findings[i].fix = context.render(report.findings[i].fix, store: name)
            }
            reports.append(report)
        }
        let healthy = reports.allSatisfy(\.healthy)
        if context.global.json {
            context.console.json(Document(healthy: healthy, stores: reports))
        } else {
            for r in reports {
                if r.healthy {
                    context.console.out("store \(r.store): healthy (checked \(r.checks.joined(separator: ", ")))")
                    continue
                }
                context.console.out("store \(r.store): \(r.findings.count) problem(s)")
                for f in r.findings {
                    context.console.out("  \(f.check): \(f.problem)")
                    context.console.out("    fix: \(f.fix)")
                }
            }
        }
        if healthy { return .ok }
        if reports.contains(where: { $0.findings.contains { $0.exitCode == ExitCode.config.rawValue } }) {
            return .config
        }
        let codes = reports.map(\.exitCode)
        if codes.contains(.noInput) { return .noInput }
        return codes.contains(.dataError) ? .dataError : .unavailable
    }
}
