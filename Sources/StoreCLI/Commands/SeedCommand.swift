import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreControl

/// `storectl seed`: insert the default data once across every device.
struct SeedCommand: Command {
    static let name = "seed"
    static let abstract = "Insert the configured default data exactly once across every device of the account."
    static let discussion = """
        In cloud mode: syncs first (waiting up to --timeout for the import), claims the seed's marker atomically in
        the cloud, inserts the rows with deterministic record names (a UUIDv5 of the seed name and each row's natural
        key), and exports. A device that finds the marker taken does not seed: the rows arrive by sync. In local mode
        the rows are inserted with the same names and the marker is claimed when sync is enabled, so devices that
        seed offline merge their rows instead of duplicating them.
        """
    static let examples = ["storectl seed", "storectl seed --timeout 30 --json"]
    static let options = [
        OptionSpec("timeout", value: "SECONDS", help: "How long to keep retrying the first sync (default 10)."),
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        var timeout = 10.0
        if let raw = args.value("timeout") {
            guard let t = Double(raw.hasSuffix("s") ? String(raw.dropLast()) : raw), t.isFinite, t >= 0, t <= 86_400
            else {
                throw UsageError("--timeout expects seconds from 0 to 86400, got '\(raw)'")
            }
            timeout = t
        }
        let store = try context.openStore()
        let progress = SyncProgress(context: context)
        let report = try store.seed(timeout: timeout, progress: progress.update)
        progress.finish()
        if context.global.json {
            context.console.json(report)
        } else {
            switch report.outcome {
            case "seeded": context.console.out("seed '\(report.seed)': inserted \(report.inserted) row(s) and claimed the marker")
            case "seeded-locally": context.console.out("seed '\(report.seed)': inserted \(report.inserted) row(s) locally; the marker is claimed when sync is enabled")
            case "seeded-elsewhere": context.console.out("seed '\(report.seed)': already seeded by device \(report.markerOwner ?? "?"); nothing inserted")
            default: context.console.out("seed '\(report.seed)': already seeded in this store; nothing inserted")
            }
        }
        return .ok
    }
}
