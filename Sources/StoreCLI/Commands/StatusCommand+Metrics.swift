import StoreBase
import StoreControl

/// `storectl status --metrics`: the gauges of `watch --metrics-file`, once, for a cron job that feeds
/// node_exporter's textfile collector.
extension StatusCommand {
    /// Prints every selected store's gauges in Prometheus' text format on stdout. Read from the stores alone: the
    /// cloud is not contacted, and there are no round counters (those belong to a running watcher).
    ///
    /// A store that cannot be read has `storectl_store_up 0`; its error goes to stderr and gives the exit code
    /// (the first such store's), after the metrics of every store are printed.
    static func runMetrics(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        if context.global.json {
            throw UsageError("--metrics prints Prometheus' text format, not JSON: use --metrics or --json, not both",
                             hint: "run '\(context.command("status --metrics"))'")
        }
        if args.flag("check-cloud") {
            throw UsageError("--metrics reads the stores alone and never contacts the cloud: --check-cloud does not "
                             + "apply", hint: "run '\(context.command("status --metrics"))'")
        }
        var gauges: [StoreGauges] = []
        var problems: [any DiagnosedError] = []
        for name in try context.selectedStoreNames() {
            do {
                let store = try context.openStore(name)
                if !store.exists { problems.append(store.missingStoreError()) }
                gauges.append(try store.gauges())
            } catch {
                gauges.append(.down(name))
                problems.append(error as? any DiagnosedError
                                ?? StoreError(.software, "store '\(name)': cannot read its metrics: \(error)"))
            }
        }
        context.console.out(MetricsText.render(gauges: gauges, rounds: nil))
        for problem in problems {
            CommandLineTool.report(problem, context: context, command: StatusCommand.self, path: ["status"])
        }
        return problems.first?.exitCode ?? .ok
    }
}
