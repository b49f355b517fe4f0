import Foundation
import StoreBase

/// `storectl-bench all`: every benchmark in one run, one table and one JSON document.
enum AllBenchmark {
    static let help = """
        usage: storectl-bench all [--rows N] [--repeat R] [--json]

        Runs, in one run and one scratch folder (stores built once and shared): export, import, scaling (10k,
        100k, N), sync, mode, status, memory, history-read, postgres (skipped without STORECTL_TEST_PG_URL) and
        history (trigger overhead, best of 3). At N = 1,000,000 it takes about half an hour and a few GB of disk.
        """

    static func main(_ argv: [String]) throws {
        try Runner.main("all", argv, help: help) { lab, options, report in
            var figures: [Figure] = []
            let pair = try lab.pair(rows: options.rows)
            figures.append(ExportImportBenchmark.exportFigure(pair))
            figures.append(ExportImportBenchmark.importFigure(pair))
            figures += try PostgresBenchmark.figures(lab, options)
            let points = try ScalingBenchmark.points(lab, options)
            report.scaling = points
            figures += ScalingBenchmark.figures(points)
            figures += try SyncBenchmark.figures(lab, options)
            figures += try ProcessBenchmarks.modeFigures(lab, options)
            figures += try ProcessBenchmarks.statusFigures(lab, options)
            figures += try MemoryBenchmark.figures(lab, options)
            figures += try HistoryReadBenchmark.figures(lab, options)

            Output.note("history tracking overhead (storectl-bench history)")
            var history = HistoryBenchmark.Options()
            history.rows = options.rows
            history.updates = min(history.updates, options.rows)
            history.deletes = min(history.deletes, options.rows)
            history.directory = lab.dir
            let overhead = try HistoryBenchmark.run(history)
            report.history = overhead
            figures = overheadFigures(overhead) + figures
            report.figures = figures
        }
    }

    static func overheadFigures(_ report: HistoryBenchmark.Report) -> [Figure] {
        report.phases.map { p in
            Figure(id: "history.\(p.name)", what: "history tracking overhead: \(p.operations) \(p.name)",
                   value: p.ratio, unit: .ratio, target: p.target.map { .atMost($0) },
                   detail: "plain \(secs(p.plainSeconds)), tracked \(secs(p.trackedSeconds)) (best of "
                       + "\(report.repeats))",
                   numbers: ["plain_seconds": p.plainSeconds, "tracked_seconds": p.trackedSeconds])
        }
    }
}
