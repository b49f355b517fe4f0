import StoreBase
import Storectl

/// `storectl status`: the state of each store.
struct StatusCommand: Command {
    static let name = "status"
    static let abstract = "Show mode, history, pending changes, tokens, account and cloud state."
    static let discussion = """
        Reports, per store: the mode (and any disagreement between config.yaml and the store), whether history
        tracking is on and any schema drift, the changes pending export, the last sync time and tokens, the account
        status and the bound account, and whether the cloud is reachable. Without --store, every store is shown.
        """
    static let options = [
        OptionSpec("check-cloud", help: "Also check the account and the cloud for stores in local mode."),
    ]
    static let examples = [
        "storectl status",
        "storectl status --check-cloud     # a local store contacts the cloud only when asked",
        "storectl status --json",
        "storectl --store notes status",
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let config = try context.loadConfig()
        let names = context.global.storeName.map { [$0] } ?? config.stores.map(\.name)
        var reports: [StatusReport] = []
        var missing: [StoreHandle] = []
        for name in names {
            let store = try StoreHandle(config: config, storeName: name)
            reports.append(try store.status(checkCloud: args.flag("check-cloud")))
            if !store.exists { missing.append(store) }
        }
        // A store missing at its configured path is exit 66, after the report of every store.
        defer {
            for store in missing { CommandLineTool.report(store.missingStoreError(), console: context.console, json: false) }
        }
        if context.global.json {
            if context.global.storeName != nil || reports.count == 1, let only = reports.first {
                context.console.json(only)
            } else {
                context.console.json(["stores": reports])
            }
            return missing.isEmpty ? .ok : .noInput
        }
        for r in reports {
            var lines = ["store \(r.store) (\(r.path))"]
            lines.append("  mode:            \(r.mode)" + (r.mode != r.configMode ? " (config.yaml says \(r.configMode))" : ""))
            lines.append("  history:         \(r.history.enabled ? "on" : "OFF") (\(r.history.state), last seq \(r.history.lastSeq))")
            for d in r.history.drift { lines.append("    drift: \(d)") }
            lines.append("  pending export:  \(r.pendingExport) row(s)")
            lines.append("  last sync:       \(r.lastSync ?? "never")")
            lines.append("  tokens:          export \(r.tokens.export), server \(r.tokens.server ?? "none")")
            if let a = r.account {
                lines.append("  account:         \(a.account ?? "(none)") is \(a.status): \(a.reason)"
                             + (a.bound.map { " (bound: \($0))" } ?? ""))
            }
            if let c = r.cloud {
                lines.append("  cloud:           \(c.url) container \(c.container) zone \(c.zone), "
                             + (c.reachable.map { $0 ? "reachable" : "not reachable" } ?? "not checked (local mode)"))
            }
            for d in r.disagreements { lines.append("  ! \(d)") }
            context.console.out(lines.joined(separator: "\n"))
        }
        return missing.isEmpty ? .ok : .noInput
    }
}
