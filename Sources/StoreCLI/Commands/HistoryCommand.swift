import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreHistory
import StoreSQLite
import StoreControl

/// `storectl history`: print the transactions recorded after a token.
struct HistoryCommand: Command {
    static let name = "history"
    static let abstract = "Print recorded transactions and their changes; manage consumers; prune."
    static let runsWithoutSubcommand = true
    static let discussion = """
        Every change to a tracked table is recorded by triggers in the store file, whoever makes it: storectl,
        your app, the sqlite3 shell. A token is a history seq: --after TOKEN prints what came after it, and the
        output ends with the next token to pass. Reading after a token costs the number of changes after it.

        Writers that do not name themselves are recorded with author 'external' and no transaction id, and
        each of their changes is printed as its own transaction. To name a transaction, run inside it first
          INSERT OR REPLACE INTO _storectl_context(id, author, tx) VALUES (1, 'my-app', <tx>);
        and, before COMMIT,
          DELETE FROM _storectl_context;

        --limit counts changes but never splits a transaction. The --json form is documented in
        docs/history-json.md. Schema drift is reported on stderr (and under "tracking" in JSON); lost tracking
        (missing triggers) is refused with exit 78.
        """
    static let examples = [
        "storectl history --after 120 --exclude-author cloud-import",
        "storectl history --entity notes --limit 50 --json",
        "storectl history consumer add search-indexer",
        "storectl history prune --older-than 30d",
    ]
    static let options = [
        OptionSpec("after", value: "TOKEN", help: "Only changes after this token (a history seq; default 0)."),
        OptionSpec("author", value: "author", help: "Only changes by this author."),
        OptionSpec("exclude-author", value: "author", help: "No changes by this author (e.g. cloud-import)."),
        OptionSpec("entity", value: "table", help: "Only changes to this table."),
        OptionSpec("limit", value: "n", help: "At most about <n> changes (a transaction is never split)."),
    ]
    static var subcommands: [any Command.Type] { [HistoryConsumerCommand.self, HistoryPruneCommand.self] }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let after = try args.int("after").map(Int64.init) ?? 0
        guard after >= 0 else { throw UsageError("--after expects a token (a history seq, 0 or more), got \(after)") }
        let limit = try args.int("limit")
        if let limit, limit <= 0 { throw UsageError("--limit expects a positive number, got \(limit)") }

        let store = try context.openStore()
        store.readOnly = true
        let tracker = try store.historyTracker()
        let report = try tracker.inspect()
        switch report.state {
        case .notInitialized:
            try tracker.requireInitialized()
        case .triggersMissing:
            try tracker.requireTracking()
        case .drift(let details):
            context.console.err("warning: the schema of store '\(store.settings.name)' changed since the history "
                                + "triggers were generated; run 'storectl migrate':")
            for line in details { context.console.err("  " + line) }
        case .ok:
            break
        }
        if let entity = args.value("entity") { try checkEntity(entity, tracker: tracker, store: store.settings.name) }
        // One read transaction: the changes and the newest seq come from the same snapshot.
        // The JSON form copies the stored JSON as it is: nothing needs decoding.
        let (transactions, latest) = try tracker.db.transaction(.deferred) {
            (try tracker.transactions(after: after, author: args.value("author"),
                                      excludeAuthor: args.value("exclude-author"), entity: args.value("entity"),
                                      limit: limit, decode: !context.global.json),
             try tracker.latestSeq())
        }
        let count = transactions.reduce(0) { $0 + $1.changes.count }
        // Without a limit cut, everything up to the newest seq was read, filtered out or not.
        let limited = limit.map { count >= $0 } ?? false
        let next = limited ? (transactions.last?.token ?? after) : max(after, latest)

        if context.global.json {
            HistoryDocument(
                store: store.settings.name, after: after, nextToken: next, latestSeq: latest,
                trackingState: report.state.name, trackingDetails: report.drift, historyGap: report.historyGap,
                transactions: transactions).write { context.console.out($0) }
            return .ok
        }
        if transactions.isEmpty {
            context.console.out("No changes after token \(after).")
        }
        for t in transactions {
            let seqs = t.changes.count == 1 ? "seq \(t.token)" : "seq \(t.changes.first?.seq ?? 0)-\(t.token)"
            let txText = t.tx.map { "tx \($0)" } ?? "no tx"
            context.console.out("\(txText)  \(t.author)  \(isoTime(t.timestamp))  (\(seqs))")
            for c in t.changes {
                var line = "  \(c.op.rawValue) \(c.entity) \(c.pk)"
                if let changed = c.changed { line += "  " + changed.joined(separator: ", ") }
                if let tombstone = c.tombstone, tombstone.keys.sorted() != [] , c.op == .delete {
                    let text = tombstone.keys.sorted().map { "\($0)=\(tombstone[$0].map(displayValue) ?? "NULL")" }
                    line += "  tombstone " + text.joined(separator: ", ")
                }
                context.console.out(line)
            }
        }
        if report.historyGap != nil {
            context.console.err("note: the store meta records a history gap (history_gap): some changes before it "
                                + "were not recorded")
        }
        context.console.out("next token: \(next)")
        return .ok
    }

    /// --entity names a tracked table, or a table the history still holds changes of: otherwise "No changes"
    /// would hide a typo.
    /// - Throws: `UsageError` with the closest tracked table.
    static func checkEntity(_ entity: String, tracker: HistoryTracker, store: String) throws {
        let tracked = try tracker.trackedTables().map(\.name)
        if tracked.contains(entity) { return }
        let recorded = try tracker.db.scalar("SELECT 1 FROM _storectl_history WHERE entity = ? LIMIT 1", [entity])
        if recorded != nil { return }
        let hint = Suggest.closest(entity, in: tracked).map { "did you mean '--entity \($0)'?" }
            ?? "the tracked tables are: " + (tracked.isEmpty ? "none" : tracked.joined(separator: ", "))
        throw UsageError("store '\(store)' tracks no table '\(entity)', and its history has no change to it", hint: hint)
    }

    static func displayValue(_ value: Value) -> String {
        switch value {
        case .text(let s): return quoteLiteral(s)
        case .blob(let b): return "x'" + Hex.string(b) + "'"
        default: return value.description
        }
    }

    /// Unix milliseconds as an ISO 8601 UTC time with milliseconds, e.g. `2024-05-01T10:00:00.123Z`.
    static func isoTime(_ milliseconds: Int64) -> String {
        ISOTime.string(unixMilliseconds: milliseconds, fractional: true)
    }
}

/// The `storectl history --json` document. Its shape is documented in docs/history-json.md and is stable.
///
/// It is written as text rather than through `JSONEncoder`: a read of 10,000 changes spent most of its time
/// encoding them value by value. Keys are written sorted; a change's key, changed columns and tombstone are the
/// JSON the history triggers stored (SQLite's `json_array`/`json_object`), copied as they are, one change per line.
struct HistoryDocument {
    var store: String
    var after: Int64
    var nextToken: Int64
    var latestSeq: Int64
    var trackingState: String
    var trackingDetails: [String]
    var historyGap: Int64?
    var transactions: [HistoryTransaction]

    /// Writes the document in pieces of about 64 KiB, each ending with a line break, so that a large history is
    /// never held as one string.
    func write(_ emit: (String) -> Void) {
        var out = "{\n"
        out += "  \"after\" : \(after),\n"
        out += "  \"history_gap\" : \(historyGap.map(String.init) ?? "null"),\n"
        out += "  \"latest_seq\" : \(latestSeq),\n"
        out += "  \"next_token\" : \(nextToken),\n"
        out += "  \"store\" : \(JSONText.quoted(store)),\n"
        out += "  \"tracking\" : {\n"
        out += "    \"details\" : [" + trackingDetails.map(JSONText.quoted).joined(separator: ", ") + "],\n"
        out += "    \"state\" : \(JSONText.quoted(trackingState))\n"
        out += "  },\n"
        out += "  \"transactions\" : ["
        for (i, t) in transactions.enumerated() {
            out += i == 0 ? "\n" : ",\n"
            out += "    {\n"
            out += "      \"author\" : \(JSONText.quoted(t.author)),\n"
            out += "      \"changes\" : [\n"
            for (j, c) in t.changes.enumerated() {
                out += "        {\"changed\": \(c.changedJSON ?? "null"), \"entity\": \(JSONText.quoted(c.entity)), "
                out += "\"op\": \"\(c.op.rawValue)\", \"pk\": \(c.pk), \"seq\": \(c.seq), "
                out += "\"timestamp\": \(c.timestamp), \"tombstone\": \(c.tombstoneJSON ?? "null")}"
                out += j == t.changes.count - 1 ? "\n" : ",\n"
                if out.utf8.count >= 65_536 {
                    emit(out)
                    out = ""
                }
            }
            out += "      ],\n"
            out += "      \"first_seq\" : \(t.changes.first?.seq ?? 0),\n"
            out += "      \"last_seq\" : \(t.token),\n"
            out += "      \"time\" : \"\(HistoryCommand.isoTime(t.timestamp))\",\n"
            out += "      \"timestamp\" : \(t.timestamp),\n"
            out += "      \"tx\" : \(t.tx.map(String.init) ?? "null")\n"
            out += "    }"
        }
        out += transactions.isEmpty ? "],\n" : "\n  ],\n"
        out += "  \"version\" : \(JSONContract.version)\n"
        out += "}\n"
        emit(out)
    }
}
