import FoundationEssentials
import StoreBase
import StoreControl

/// `storectl status`: the state of each store.
struct StatusCommand: Command {
    static let name = "status"
    static let abstract = "Show mode, history, pending changes, tokens, account and cloud state."
    static let discussion = """
        Reports, per store: the mode (and any disagreement between config.yaml and the store), whether history
        tracking is on and any schema drift, the changes pending export, the last sync time and tokens, the account
        status and the bound account, and whether the cloud is reachable. Without --store, every store is shown
        (in JSON: {"version": 1, "stores": [...]}, whatever the number of stores); with --store, that store's
        object alone. Exits 0 only when sync would work for every store shown; otherwise with the code of the first
        problem (66 store file missing, 69/75 account or container, 75 data migration waited for, the failed last
        sync's code, 65 a record set aside, 78 config), every problem listed (JSON: "problems").
        """
    static let options = [
        OptionSpec("check-cloud", help: "Also check the account and the cloud for stores in local mode."),
        OptionSpec("metrics", help: "Print the stores' gauges in Prometheus' text format instead (see docs/watch.md)."),
    ]
    static let examples = [
        "storectl status",
        "storectl status --check-cloud     # a local store contacts the cloud only when asked",
        "storectl status --json",
        "storectl --store notes status",
        "storectl status --metrics         # the gauges in Prometheus' text format, for cron",
    ]

    /// `{"version": 1, "stores": [...]}`.
    struct Document: Encodable {
        var stores: [StatusEntry]
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        if args.flag("metrics") { return try runMetrics(args, context) }
        var reports: [StatusReport] = []
        var entries: [StatusEntry] = []
        var missing: [StoreHandle] = []
        // A store missing at its configured path is exit 66, said on stderr after the report of every store.
        defer {
            for store in missing {
                let error = store.missingStoreError()
                context.console.err(context.console.paint("error:", "31;1") + " " + error.summary)
                for line in error.details { context.console.err(line) }
                if let hint = error.hint {
                    context.console.err(context.console.paint("hint:", "1") + " "
                                        + context.render(hint, store: store.settings.name))
                }
            }
        }
        for name in try context.selectedStoreNames() {
            // A store whose config section is wrong is listed with its error (exit 78); the others are reported.
            if context.global.storeName == nil, let problem = try context.loadConfig().problem(of: name) {
                let entry = StatusConfigProblem(problem, context: context)
                context.console.err((entry.error.location.map { $0 + ": " } ?? "")
                                    + context.console.paint("error:", "31;1") + " " + entry.error.message)
                for line in problem.error.details { context.console.err(line) }
                entries.append(.configProblem(entry))
                continue
            }
            let store = try context.openStore(name)
            if !store.exists { missing.append(store) }
            var report = try store.status(checkCloud: args.flag("check-cloud"))
            report.disagreements = report.disagreements.map { context.render($0, store: name) }
            if let account = report.account { report.account?.reason = context.render(account.reason, store: name) }
            report.problems = report.problems.map { problem in
                var problem = problem
                problem.message = context.render(problem.message, store: name)
                problem.hint = problem.hint.map { context.render($0, store: name) }
                return problem
            }
            reports.append(report)
            entries.append(.report(report))
        }
        if context.global.json {
            if context.global.storeName != nil, let only = reports.first {
                context.console.json(only)
            } else {
                context.console.json(Document(stores: entries))
            }
            return exitCode(entries, missing: missing)
        }
        let now = Date().timeIntervalSince1970
        context.console.out(entries.map { entry in
            switch entry {
            case .report(let report): return block(report, now: now, console: context.console)
            case .configProblem(let problem): return problem.block(console: context.console)
            }
        }.joined(separator: "\n\n"))
        return exitCode(entries, missing: missing)
    }

    /// 0 only when sync would work for every store reported; otherwise the code of the first problem (the stores in
    /// order, each store's problems in the order `StatusReport.problems` lists them): 66 for a missing store file,
    /// 69 or 75 for the account or the container, 75 for a data migration waited for, the code of a failed last
    /// sync, 65 for records set aside, 78 for the config.
    /// A store whose own config section is wrong counts as its problem, 78, in its place among the others.
    static func exitCode(_ entries: [StatusEntry], missing: [StoreHandle]) -> ExitCode {
        for entry in entries {
            switch entry {
            case .configProblem: return .config
            case .report(let report): if let first = report.problems.first { return ExitCode(first.code) }
            }
        }
        return missing.isEmpty ? .ok : .noInput
    }

    static func exitCode(_ reports: [StatusReport], missing: [StoreHandle]) -> ExitCode {
        if let first = reports.lazy.flatMap(\.problems).first { return ExitCode(first.code) }
        if !missing.isEmpty { return .noInput }
        return .ok
    }

    /// One store as an aligned block of labelled lines, in words.
    static func block(_ r: StatusReport, now: Double, console: Console) -> String {
        var rows: [(String, String)] = []
        var mode = r.mode
        if r.mode != r.configMode { mode += " (config.yaml says \(r.configMode))" }
        rows.append(("mode", mode))
        let historyState: String
        switch r.history.state {
        case "ok": historyState = "on"
        case "drift": historyState = "on, but the schema changed since the triggers were made"
        case "triggers-missing": historyState = console.paintOut("OFF: triggers are missing", "31;1")
        default: historyState = "not set up (the store is not initialised)"
        }
        rows.append(("history", historyState + (r.history.lastSeq > 0 ? ", last change #\(r.history.lastSeq)" : "")))
        for d in r.history.drift { rows.append(("", "drift: " + d)) }
        rows.append(("pending export", Words.count(Int(r.pendingExport), "row")))
        if let last = r.lastSync {
            let when = ISOTimeParser.seconds(last).map { Words.relative(seconds: now - $0) + " (\(last))" } ?? last
            rows.append(("last sync", when))
        } else {
            rows.append(("last sync", "never"))
        }
        rows.append(("export token", "#\(r.tokens.export)"))
        rows.append(("server token", r.tokens.server ?? "none yet"))
        if let a = r.account {
            rows.append(("account", (a.account ?? "(none configured)") + ": " + Words.accountStatus(a.status)))
            if let bound = a.bound { rows.append(("bound to", bound)) }
            if a.status != "available" { rows.append(("", a.reason)) }
        }
        if let c = r.cloud {
            rows.append(("cloud", c.url))
            rows.append(("container", "\(c.container), zone \(c.zone)"))
            rows.append(("reachable", c.reachable.map { $0 ? "yes" : "no" } ?? "not checked (local mode)"))
            if let share = c.share { rows.append(("share", AccountStatusCommand.describe(share))) }
            if let replica = c.replica {
                var text = "\(replica.url): \(replica.state == "not_a_standby" ? "not a standby" : replica.state)"
                if replica.inUse {
                    text += ", fetches read from it"
                    if let lag = replica.lagSeconds { text += ", last replayed \((lag * 10).rounded() / 10) s ago" }
                    if let behind = replica.seqsBehind { text += ", \(behind) seq(s) of the zone behind" }
                } else if let reason = replica.reason {
                    text += "; " + reason
                }
                rows.append(("replica", text))
            }
            rows.append(("first import", r.initialSyncComplete ? "done" : "not yet"))
            rows.append(("last export", r.lastExportAt ?? "never"))
            rows.append(("last import", r.lastImportAt ?? "never"))
            if let e = r.lastError { rows.append(("last error", "\(e.at): \(e.message) (exit \(e.code))")) }
            rows.append(("watched by", r.watcher.map { w in
                "storectl watch (pid \(w.pid.map(String.init) ?? "unknown")"
                    + (w.startedAt.map { ", since \($0)" } ?? "") + ")"
            } ?? "no watch process"))
        }
        var lines = ["store " + console.paintOut(r.store, "1") + "  " + r.path]
        let width = (rows.map(\.0.count).max() ?? 0) + 2
        for (label, value) in rows {
            for (i, piece) in Words.wrap(value, width: 110 - width).enumerated() {
                lines.append("  " + (i == 0 ? label : "").padded(to: width) + piece)
            }
        }
        for d in r.disagreements { lines.append("  " + console.paintOut("!", "33;1") + " " + d) }
        // Each problem and its hint, cut at spaces (a quoted command stays whole on its line).
        for p in r.problems {
            for (i, piece) in Words.wrap("problem (exit \(p.code)): " + p.message, width: 106).enumerated() {
                lines.append((i == 0 ? "  " + console.paintOut("x", "31;1") + " " : "    ") + piece)
            }
            if let hint = p.hint {
                for (i, piece) in Words.wrap("hint: " + hint, width: 106).enumerated() {
                    lines.append((i == 0 ? "    " : "      ") + piece)
                }
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// Words for people: counts with their noun, statuses, times relative to now.
enum Words {
    /// `text` cut at spaces into lines of at most `width` characters (a longer word, or a quoted command, stays
    /// whole).
    static func wrap(_ text: String, width: Int) -> [String] {
        guard text.count > width, width > 20 else { return [text] }
        // A quoted command ('storectl ...') stays on one line, so that it can be copied whole.
        var words: [String] = []
        var open = false
        for word in text.split(separator: " ", omittingEmptySubsequences: false) {
            if open, let last = words.popLast() { words.append(last + " " + word) } else { words.append(String(word)) }
            if word.filter({ $0 == "'" }).count % 2 == 1 { open.toggle() }
        }
        var lines: [String] = []
        var line = ""
        for word in words {
            if !line.isEmpty && line.count + 1 + word.count > width {
                lines.append(line)
                line = String(word)
            } else {
                line += (line.isEmpty ? "" : " ") + word
            }
        }
        if !line.isEmpty { lines.append(line) }
        return lines
    }

    /// `0 rows`, `1 row`, `2 rows`.
    static func count(_ n: Int, _ noun: String, plural: String? = nil) -> String {
        "\(n) " + (n == 1 ? noun : plural ?? noun + "s")
    }

    /// An account status in words: `noAccount` -> `no account`.
    static func accountStatus(_ status: String) -> String {
        switch status {
        case "available": return "available"
        case "noAccount": return "no account"
        case "restricted": return "restricted"
        case "couldNotDetermine": return "could not be determined"
        case "temporarilyUnavailable": return "temporarily unavailable"
        case "notChecked": return "not checked (local mode)"
        default: return status
        }
    }

    /// How long ago, for people: `just now`, `45 s ago`, `3 min ago`, `2 h ago`, `4 days ago`.
    static func relative(seconds: Double) -> String {
        let s = Int(seconds.rounded(.down))
        if s < 0 { return "in the future" }
        if s < 5 { return "just now" }
        if s < 60 { return "\(s) s ago" }
        if s < 3600 { return "\(s / 60) min ago" }
        if s < 86_400 { return "\(s / 3600) h ago" }
        return Words.count(s / 86_400, "day") + " ago"
    }
}

/// Reads the ISO 8601 UTC times storectl writes (`2024-05-01T12:00:00Z`, optionally with `.123`).
enum ISOTimeParser {
    /// Seconds since 1970, or nil when the text is not such a time.
    static func seconds(_ text: String) -> Double? {
        let digits = text.map { $0 }
        guard digits.count >= 20, digits[4] == "-", digits[7] == "-", digits[10] == "T", digits[13] == ":",
              digits[16] == ":", text.hasSuffix("Z") else { return nil }
        func number(_ from: Int, _ count: Int) -> Int? { Int(String(digits[from..<(from + count)])) }
        guard let y = number(0, 4), let m = number(5, 2), let d = number(8, 2), let hh = number(11, 2),
              let mm = number(14, 2), let ss = number(17, 2) else { return nil }
        // Days from the civil date (Howard Hinnant's days_from_civil).
        let yy = m <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return Double(days * 86_400 + hh * 3600 + mm * 60 + ss)
    }
}
