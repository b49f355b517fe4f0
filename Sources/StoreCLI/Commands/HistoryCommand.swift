import Foundation
import StoreBase
import StoreHistory
import StoreSQLite
import Storectl

/// `storectl history`: print the transactions recorded after a token.
struct HistoryCommand: Command {
    static let name = "history"
    static let abstract = "Print recorded transactions and their changes; manage consumers; prune."
    static let arguments = "[--after TOKEN] [--author A] [--exclude-author A] [--entity E] [--limit N]"
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
        OptionSpec("author", value: "A", help: "Only changes by this author."),
        OptionSpec("exclude-author", value: "A", help: "No changes by this author (e.g. cloud-import)."),
        OptionSpec("entity", value: "E", help: "Only changes to this table."),
        OptionSpec("limit", value: "N", help: "At most about N changes (a transaction is never split)."),
    ]
    static var subcommands: [any Command.Type] { [HistoryConsumerCommand.self, HistoryPruneCommand.self] }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let after = try args.int("after").map(Int64.init) ?? 0
        guard after >= 0 else { throw UsageError("--after expects a token (a history seq, 0 or more), got \(after)") }
        let limit = try args.int("limit")
        if let limit, limit <= 0 { throw UsageError("--limit expects a positive number, got \(limit)") }

        let store = try context.openStore()
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
        // One read transaction: the changes and the newest seq come from the same snapshot.
        let (transactions, latest) = try tracker.db.transaction(.deferred) {
            (try tracker.transactions(after: after, author: args.value("author"),
                                      excludeAuthor: args.value("exclude-author"), entity: args.value("entity"),
                                      limit: limit),
             try tracker.latestSeq())
        }
        let count = transactions.reduce(0) { $0 + $1.changes.count }
        // Without a limit cut, everything up to the newest seq was read, filtered out or not.
        let limited = limit.map { count >= $0 } ?? false
        let next = limited ? (transactions.last?.token ?? after) : max(after, latest)

        if context.global.json {
            context.console.json(HistoryDocument(
                store: store.settings.name, after: after, nextToken: next, latestSeq: latest,
                tracking: .init(state: report.state.name, details: report.drift), historyGap: report.historyGap,
                transactions: transactions.map(HistoryDocument.Transaction.init)))
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

    static func displayValue(_ value: Value) -> String {
        switch value {
        case .text(let s): return quoteLiteral(s)
        case .blob(let b): return "x'" + b.map { String(format: "%02x", $0) }.joined() + "'"
        default: return value.description
        }
    }

    static func isoTime(_ milliseconds: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }
}

/// The `storectl history --json` document. Its shape is documented in docs/history-json.md and is stable.
struct HistoryDocument: Encodable {
    struct Tracking: Encodable {
        var state: String
        var details: [String]
    }

    struct Change: Encodable {
        var seq: Int64
        var entity: String
        var op: String
        var pk: [JSONValue]
        var changed: [String]?
        var tombstone: [String: JSONValue]?
        var timestamp: Int64

        enum CodingKeys: String, CodingKey { case seq, entity, op, pk, changed, tombstone, timestamp }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(seq, forKey: .seq)
            try c.encode(entity, forKey: .entity)
            try c.encode(op, forKey: .op)
            try c.encode(pk, forKey: .pk)
            try c.encode(changed, forKey: .changed)
            try c.encode(tombstone, forKey: .tombstone)
            try c.encode(timestamp, forKey: .timestamp)
        }
    }

    struct Transaction: Encodable {
        var tx: Int64?
        var author: String
        var timestamp: Int64
        var time: String
        var firstSeq: Int64
        var lastSeq: Int64
        var changes: [Change]

        enum CodingKeys: String, CodingKey {
            case tx, author, timestamp, time, changes
            case firstSeq = "first_seq"
            case lastSeq = "last_seq"
        }

        init(_ t: HistoryTransaction) {
            tx = t.tx
            author = t.author
            timestamp = t.timestamp
            time = HistoryCommand.isoTime(t.timestamp)
            firstSeq = t.changes.first?.seq ?? 0
            lastSeq = t.token
            changes = t.changes.map {
                Change(seq: $0.seq, entity: $0.entity, op: $0.op.rawValue, pk: $0.primaryKey.map(JSONValue.init),
                       changed: $0.changed, tombstone: $0.tombstone?.mapValues(JSONValue.init), timestamp: $0.timestamp)
            }
        }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(tx, forKey: .tx)
            try c.encode(author, forKey: .author)
            try c.encode(timestamp, forKey: .timestamp)
            try c.encode(time, forKey: .time)
            try c.encode(firstSeq, forKey: .firstSeq)
            try c.encode(lastSeq, forKey: .lastSeq)
            try c.encode(changes, forKey: .changes)
        }
    }

    var store: String
    var after: Int64
    var nextToken: Int64
    var latestSeq: Int64
    var tracking: Tracking
    var historyGap: Int64?
    var transactions: [Transaction]

    enum CodingKeys: String, CodingKey {
        case store, after, tracking, transactions
        case nextToken = "next_token"
        case latestSeq = "latest_seq"
        case historyGap = "history_gap"
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(store, forKey: .store)
        try c.encode(after, forKey: .after)
        try c.encode(nextToken, forKey: .nextToken)
        try c.encode(latestSeq, forKey: .latestSeq)
        try c.encode(tracking, forKey: .tracking)
        try c.encode(historyGap, forKey: .historyGap)
        try c.encode(transactions, forKey: .transactions)
    }
}

/// An SQLite value as JSON: numbers, strings and null as themselves, a blob as `{"$blob": "HEX"}` (the same
/// encoding the history table uses).
struct JSONValue: Encodable {
    var value: Value

    init(_ value: Value) { self.value = value }

    func encode(to encoder: any Encoder) throws {
        switch value {
        case .null:
            var c = encoder.singleValueContainer()
            try c.encodeNil()
        case .integer(let n):
            var c = encoder.singleValueContainer()
            try c.encode(n)
        case .real(let d):
            var c = encoder.singleValueContainer()
            try c.encode(d)
        case .text(let s):
            var c = encoder.singleValueContainer()
            try c.encode(s)
        case .blob(let bytes):
            var c = encoder.singleValueContainer()
            try c.encode(["$blob": bytes.map { String(format: "%02X", $0) }.joined()])
        }
    }
}
