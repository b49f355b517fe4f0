import Foundation
import StoreBase

/// `storectl-bench mode` and `storectl-bench status`: whole `storectl` processes, as scripts call them in loops.
enum ProcessBenchmarks {
    static let modeHelp = """
        usage: storectl-bench mode [--rows N] [--schema realistic|single] [--repeat R] [--json]

        First, a new store's whole 'storectl mode cloud' process (the release binary as a child process; it
        creates the store, imports the N records of the 'import' benchmark's container and checks the result),
        against the 'import' benchmark's reference: one INSERT ... SELECT per table of the same rows into a
        tracked store. Figure: reference seconds / median process seconds (--engine-runs; default 1 run at
        N > 100,000, else 3).
        Target: >= 40%.
        Then: runs the release storectl binary as a process, R times each, on a synced store of N rows and on one of
        1,000 rows, alternating: 'storectl mode cloud --no-sync', then 'storectl mode local' (which makes its final
        export, of no pending change). Figures: median N-row time / median 1k-row time (target <= 1.2) and the
        median N-row time (target < 50 ms), for each command.
        """

    static let statusHelp = """
        usage: storectl-bench status [--rows N] [--repeat R] [--json]

        Runs 'storectl status --json' and 'sqlite3 STORE "select 1"' as processes, R times each, alternating, on a
        synced store of N rows. Figure: median storectl time / median sqlite3 time. Target: <= 3x.
        """

    static func modeMain(_ argv: [String]) throws {
        try Runner.main("mode", argv, help: modeHelp) { lab, options, report in
            report.figures = try modeFigures(lab, options)
        }
    }

    static func statusMain(_ argv: [String]) throws {
        try Runner.main("status", argv, help: statusHelp) { lab, options, report in
            report.figures = try statusFigures(lab, options)
        }
    }

    static func modeFigures(_ lab: Lab, _ options: BenchOptions) throws -> [Figure] {
        var figures = [try cloudImportFigure(lab, options)]
        let storectl = try lab.storectl()
        let sizes = [options.rows, SyncBenchmark.changes]
        var stores: [Int: String] = [:]
        for size in sizes { stores[size] = try lab.pair(rows: size).a }
        let commands: [(id: String, args: [String])] = [("cloud", ["mode", "cloud", "--no-sync"]),
                                                         ("local", ["mode", "local"])]
        var times: [String: [Double]] = [:]
        // One warm-up cycle each, so that the first run does not pay for loading the binary from disk.
        for run in -1..<options.repeats {
            for size in run % 2 == 0 ? sizes : sizes.reversed() {
                guard let store = stores[size] else { continue }
                for command in commands {
                    let result = try Child.check([storectl, "--config", lab.configPath(store)] + command.args,
                                                 in: lab.dir)
                    if run >= 0 { times["\(command.id)-\(size)", default: []].append(result.seconds) }
                }
            }
        }
        for command in commands {
            let big = median(times["\(command.id)-\(options.rows)"] ?? [])
            let small = median(times["\(command.id)-\(SyncBenchmark.changes)"] ?? [])
            let label = "storectl " + command.args.joined(separator: " ")
            let numbers = ["large_seconds": big, "small_seconds": small, "runs": Double(options.repeats)]
            figures.append(Figure(id: "mode.\(command.id).ratio", what: "`\(label)`, N vs 1k rows",
                                  value: big / small, unit: .ratio, target: .atMost(1.2),
                                  detail: "N rows \(ms(big)), 1k rows \(ms(small)) (median of \(options.repeats))",
                                  numbers: numbers))
            figures.append(Figure(id: "mode.\(command.id).time", what: "`\(label)` on N rows, whole process",
                                  value: big * 1000, unit: .milliseconds, target: .atMost(50),
                                  detail: "median of \(options.repeats) processes", numbers: numbers))
        }
        return figures
    }

    /// A new store's `storectl mode cloud` process importing the N records of the pair's container, against the
    /// pair's INSERT ... SELECT reference into a tracked store.
    static func cloudImportFigure(_ lab: Lab, _ options: BenchOptions, shape: Shape? = nil) throws -> Figure {
        let storectl = try lab.storectl()
        let pair = try lab.pair(rows: options.rows, shape: shape)
        let name = "mode-import-\(pair.shape.rawValue)-\(pair.rows)"
        var times: [Double] = []
        for run in 0..<lab.engineRuns(pair.rows) {
            Output.note("storectl mode cloud: a new store importing \(pair.rows) records, as a process (run \(run + 1))")
            try lab.remove(name)
            _ = try lab.makeStore(name, url: lab.fileURL(pair.container), shape: pair.shape)
            let result = try Child.check([storectl, "--config", lab.configPath(name), "mode", "cloud"], in: lab.dir)
            let store = try lab.open(name)
            let count = try store.database().scalar(pair.shape.countSQL)?.int64 ?? 0
            store.close()
            guard count == Int64(pair.rows) else {
                throw StoreError(.software, "storectl mode cloud left \(count) rows, expected \(pair.rows)")
            }
            Output.note("  \(secs(result.seconds))")
            times.append(result.seconds)
        }
        try lab.remove(name)
        let process = median(times)
        return Figure(id: ExportImportBenchmark.id("mode.cloud.import", pair.shape, run: lab.shape),
                      what: "a new store's `storectl mode cloud` importing N records, whole process, vs INSERT ... "
                          + "SELECT into a tracked store" + ExportImportBenchmark.label(pair.shape),
                      value: pair.importReferenceTracked / process, unit: .percent, target: .atLeast(0.4),
                      detail: "process \(secs(process)) (\(rate(pair.rows, process)), median of \(times.count)), one "
                          + "statement per table into a tracked store \(secs(pair.importReferenceTracked)); the "
                          + "library import alone \(secs(pair.importSeconds))",
                      numbers: ["rows": Double(pair.rows), "process_seconds": process,
                                "reference_tracked_seconds": pair.importReferenceTracked,
                                "library_seconds": pair.importSeconds, "runs": Double(times.count)])
    }

    static func statusFigures(_ lab: Lab, _ options: BenchOptions) throws -> [Figure] {
        let storectl = try lab.storectl()
        let store = try lab.pair(rows: options.rows).a
        let small = try lab.pair(rows: SyncBenchmark.changes).a
        guard let sqlite3 = which("sqlite3") else {
            return [Figure(id: "status.process", what: "`storectl status --json`, whole process",
                           unit: .ratio, target: .atMost(3), skipped: "skipped: no sqlite3 command in PATH")]
        }
        var statusTimes: [Double] = [], sqliteTimes: [Double] = [], smallTimes: [Double] = []
        for run in -1..<options.repeats {
            let s = try Child.check([storectl, "--config", lab.configPath(store), "status", "--json"], in: lab.dir)
            let q = try Child.check([sqlite3, lab.storePath(store), "select 1"], in: lab.dir)
            let t = try Child.check([storectl, "--config", lab.configPath(small), "status", "--json"], in: lab.dir)
            if run >= 0 {
                statusTimes.append(s.seconds)
                sqliteTimes.append(q.seconds)
                smallTimes.append(t.seconds)
            }
        }
        // Where a status process spends its time: the same binary doing more and more. `--version` is the cost of
        // starting the process at all (loading the Swift runtime and Foundation), which no command can go below.
        let config = lab.configPath(store)
        let steps: [(key: String, args: [String])] = [
            ("version", ["--version"]),
            ("help", ["--help"]),
            ("config_validate", ["--config", config, "config", "validate"]),
            ("account_status", ["--config", config, "account", "status"]),
        ]
        var stepTimes: [String: [Double]] = [:]
        for run in -1..<options.repeats {
            for step in steps {
                let result = try Child.check([storectl] + step.args, in: lab.dir)
                if run >= 0 { stepTimes[step.key, default: []].append(result.seconds) }
            }
        }
        let status = median(statusTimes), sqlite = median(sqliteTimes), statusSmall = median(smallTimes)
        var numbers = ["status_seconds": status, "sqlite3_seconds": sqlite, "status_small_seconds": statusSmall,
                       "runs": Double(options.repeats)]
        for (key, times) in stepTimes { numbers[key + "_seconds"] = median(times) }
        let breakdown = steps.map { step in
            let words = step.args.filter { !$0.hasPrefix("/") && $0 != "--config" }.joined(separator: " ")
            return "`\(words)` " + ms(median(stepTimes[step.key] ?? []))
        }.joined(separator: ", ")
        return [Figure(id: "status.process",
                       what: "`storectl status --json` whole process vs `sqlite3 store 'select 1'`",
                       value: status / sqlite, unit: .ratio, target: .atMost(3),
                       detail: "status \(ms(status)) (1k-row store \(ms(statusSmall))), sqlite3 \(ms(sqlite)); "
                           + "storectl \(breakdown) (medians of \(options.repeats))",
                       numbers: numbers)]
    }

    /// The path of `name` in PATH, if any.
    static func which(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for dir in path.split(separator: ":") {
            let candidate = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
