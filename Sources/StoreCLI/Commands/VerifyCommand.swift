import StoreBase
import StoreControl

/// `storectl verify`: is the store in sync with its zone? Compares them table by table and names the rows that
/// differ.
struct VerifyCommand: Command {
    static let name = "verify"
    static let abstract = "Compare the store with its cloud zone, table by table, and name the rows that differ."
    static let discussion = """
        Reads every live record of the store's zone and every row of its tracked tables, encoded exactly as the
        export encodes them, and compares them by record name. A row that differs is named by its table and key,
        with each differing column's value here and in the cloud: a real with every digit it needs (0.1 and
        0.10000000000000002 differ), and the type of each side when the types differ (1 (integer) here, 1.0 (real)
        in the cloud). A difference that a pending change explains is marked: pending_export (changed here, not
        exported yet), pending_import (changed in the cloud, not imported yet) or waiting_for_parent; an unmarked
        difference was made behind storectl's back. With --json, each differing column has local and cloud (the
        values) and local_type and cloud_type (integer, real, text, blob, null or reference).

        Nothing is changed, in the store or in the cloud. Exit 0 when in sync, 1 when anything differs, 69 or 75
        when the account or the cloud cannot be reached.
        """
    static let examples = [
        "storectl verify",
        "storectl verify --json",
        "storectl --store notes verify --limit 20",
    ]
    static let options = [
        OptionSpec("limit", value: "N", help: "List at most N differing rows (all are counted; default 1000)."),
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        var limit = 1000
        if let raw = args.value("limit") {
            guard let n = Int(raw), n >= 0 else {
                throw UsageError("--limit must be a number of rows, got '\(raw)'", hint: "write --limit 20")
            }
            limit = n
        }
        let store = try context.openStore()
        let report = try store.verify(limit: limit)
        if context.global.json {
            context.console.json(report)
        } else {
            context.console.out(text(report))
        }
        return report.inSync ? .ok : .failure
    }

    /// The report in words.
    static func text(_ r: VerifyReport) -> String {
        var lines: [String] = []
        let place = "zone '\(r.zone)' of \(r.container)" + (r.zoneExists ? "" : " (the zone does not exist)")
        if r.inSync {
            lines.append("store \(r.store) is in sync with \(place): "
                         + r.tables.map { "\($0.table) \($0.matching)" }.joined(separator: ", "))
        } else {
            lines.append("store \(r.store) differs from \(place): \(Words.count(r.differenceCount, "row")) "
                         + "(\(r.unexplainedCount) not explained by pending changes)")
        }
        for t in r.tables {
            var parts = ["\(t.localRows) here", "\(t.cloudRecords) in the cloud", "\(t.matching) match"]
            if t.differing > 0 { parts.append("\(t.differing) differ") }
            if t.localOnly > 0 { parts.append("\(t.localOnly) only here") }
            if t.cloudOnly > 0 { parts.append("\(t.cloudOnly) only in the cloud") }
            lines.append("  \(t.table): " + parts.joined(separator: ", "))
        }
        for d in r.differences {
            let key = d.key?.display ?? "(no local row)"
            let why = d.pending.map { " [\($0.replacingText("_", with: " "))]" } ?? " [changed behind storectl's back]"
            lines.append("  - \(d.table) \(key) (\(d.recordName)): \(d.stateInWords)\(why)")
            for c in d.columns {
                lines.append("      \(c.column): \(c.shown(local: true)) here, \(c.shown(local: false)) in the cloud")
            }
        }
        if r.truncated {
            lines.append("  ... \(r.differenceCount - r.differences.count) more (see --limit)")
        }
        if r.untrackedRecords > 0 {
            lines.append("  (\(Words.count(r.untrackedRecords, "record")) of tables this store does not track)")
        }
        return lines.joined(separator: "\n")
    }
}
