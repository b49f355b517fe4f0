import Foundation
import StoreBase
import StoreHistory

/// `storectl-bench history-read`: reading the changes after a token costs what the changes cost, not what the
/// history holds: 10,000 changes out of 10,000,000 history rows in under 100 ms.
enum HistoryReadBenchmark {
    static let help = """
        usage: storectl-bench history-read [--rows N] [--history-rows H] [--repeat R] [--json]

        Builds a store whose history holds H rows (default 10 x N; 10 changes per transaction), written with one
        INSERT ... SELECT straight into _storectl_history, then reads the last 10,000 changes after a token:
          library: HistoryTracker.transactions(after: H - 10000)
          process: storectl history --after H-10000 --json (whole process, output to a file)
        Median of R runs each. Target: under 100 ms.
        """

    static let changes = 10_000

    static func main(_ argv: [String]) throws {
        try Runner.main("history-read", argv, help: help) { lab, options, report in
            report.figures = try figures(lab, options)
        }
    }

    static func figures(_ lab: Lab, _ options: BenchOptions) throws -> [Figure] {
        let total = options.historyRows ?? options.rows * 10
        let name = "history-\(total)"
        try lab.remove(name)
        let store = try lab.makeStore(name, url: lab.fileURL("unused.container"), shape: .single)
        try store.ensureInitialized()
        let db = try store.database()
        Output.note("writing \(total) history rows")
        let build = try Clock.seconds {
            try db.transaction {
                try db.run("""
                    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                    INSERT INTO _storectl_history(seq, tx, author, ts, entity, pk, op, changed, tombstone)
                    SELECT i, (i + 9) / 10, 'app', 1700000000000 + i, 'notes', json_array(i % 1000000 + 1), 'U',
                           '["title","updated_at"]', NULL FROM n
                    """, [total])
            }
        }
        Output.note("  \(secs(build))")
        try Lab.checkpoint(db)
        let token = Int64(total - changes)
        let tracker = try store.historyTracker()
        var library: [Double] = []
        for run in -1..<options.repeats {
            var count = 0
            let seconds = try Clock.seconds {
                count = try tracker.transactions(after: token).reduce(0) { $0 + $1.changes.count }
            }
            guard count == min(changes, total) else {
                throw StoreError(.software, "read \(count) changes after token \(token), expected \(changes)")
            }
            if run >= 0 { library.append(seconds) }
        }
        store.close()
        let storectl = try lab.storectl()
        var process: [Double] = []
        for run in -1..<options.repeats {
            let result = try Child.check([storectl, "--config", lab.configPath(name), "history", "--after",
                                          String(token), "--json"], in: lab.dir)
            if run >= 0 { process.append(result.seconds) }
        }
        let lib = median(library), proc = median(process)
        let numbers = ["history_rows": Double(total), "changes": Double(changes), "library_seconds": lib,
                       "process_seconds": proc, "runs": Double(options.repeats)]
        return [
            Figure(id: "history.read.library", what: "history after a token: 10k changes out of \(total) (library)",
                   value: lib * 1000, unit: .milliseconds, target: .atMost(100),
                   detail: "HistoryTracker.transactions(after:), median of \(options.repeats)", numbers: numbers),
            Figure(id: "history.read.process",
                   what: "history after a token: 10k changes out of \(total) (`storectl history --json`)",
                   value: proc * 1000, unit: .milliseconds, target: .atMost(100),
                   detail: "whole process, JSON to a file, median of \(options.repeats)", numbers: numbers),
        ]
    }
}
