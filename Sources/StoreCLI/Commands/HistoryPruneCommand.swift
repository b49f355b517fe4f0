import StoreBase
import StoreHistory
import StoreControl

/// `storectl history prune`: remove history every consumer has processed.
struct HistoryPruneCommand: Command {
    static let name = "prune"
    static let abstract = "Remove old history rows that every consumer has processed."
        static let discussion = """
        Removes history rows before a token, or older than a duration (30d, 12h, 15m, 45s; default: the
        store's history.retention). Only rows at or below the LOWEST consumer token are removed, the sync
        engine's cloud-export token included, and the newest row is always kept so that seq is never reused.
        """
    static let examples = [
        "storectl history prune --older-than 30d",
        "storectl history prune --before 5000 --json",
    ]
    static let options = [
        OptionSpec("before", value: "TOKEN", help: "Remove rows with a seq lower than <token>."),
        OptionSpec("older-than", value: "DURATION", help: "Remove rows older than <duration> (e.g. 30d)."),
    ]

    struct Output: Encodable {
        var removed: Int
        var firstSeq: Int64?
        var lastSeq: Int64?
        var limit: Int64
        var heldBy: String?
        var remaining: Int64

        enum CodingKeys: String, CodingKey {
            case removed, limit, remaining
            case firstSeq = "first_seq"
            case lastSeq = "last_seq"
            case heldBy = "held_by"
        }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(removed, forKey: .removed)
            try c.encode(firstSeq, forKey: .firstSeq)
            try c.encode(lastSeq, forKey: .lastSeq)
            try c.encode(limit, forKey: .limit)
            try c.encode(heldBy, forKey: .heldBy)
            try c.encode(remaining, forKey: .remaining)
        }
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let before = try args.int("before").map(Int64.init)
        var olderThan: DurationSpec?
        if let text = args.value("older-than") {
            guard let d = DurationSpec(text) else {
                throw UsageError("--older-than expects a duration such as 30d, 12h, 15m or 45s, got '\(text)'",
                                 hint: "units: ms, s, m, h, d, w; at most \(DurationSpec.maximumText) (100 years)")
            }
            olderThan = d
        }
        if before != nil && olderThan != nil {
            throw UsageError("give either --before or --older-than, not both")
        }
        let store = try context.openStore()
        if before == nil && olderThan == nil {
            guard let retention = store.settings.history.retention else {
                throw UsageError("prune needs --before <token> or --older-than <duration>, and "
                                 + "stores.\(store.settings.name).history.retention is not set",
                                 hint: "e.g. 'storectl history prune --older-than 30d', or set "
                                     + "stores.\(store.settings.name).history.retention in the config")
            }
            olderThan = retention
        }
        let tracker = try store.historyTracker()
        try tracker.requireInitialized()
        let report = try tracker.prune(before: before, olderThan: olderThan?.seconds)
        if context.global.json {
            context.console.json(Output(removed: report.removed, firstSeq: report.firstSeq, lastSeq: report.lastSeq,
                                        limit: report.limit, heldBy: report.heldBy, remaining: report.remaining))
            return .ok
        }
        if report.removed == 0 {
            context.console.out("Removed no history rows.")
        } else {
            context.console.out("Removed \(report.removed) history \(report.removed == 1 ? "row" : "rows") "
                                + "(seq \(report.firstSeq ?? 0) to \(report.lastSeq ?? 0)).")
        }
        if let heldBy = report.heldBy {
            context.console.out("Rows after seq \(report.limit) were kept: consumer '\(heldBy)' has processed only "
                                + "up to there.")
        }
        context.console.out("\(report.remaining) history \(report.remaining == 1 ? "row remains" : "rows remain").")
        return .ok
    }
}
