import Foundation
import StoreBase

/// `storectl-bench all`: every benchmark in one run, one table and one JSON document.
enum AllBenchmark {
    static let help = """
        usage: storectl-bench all [--rows N] [--schema realistic|single] [--repeat R] [--json]

        Runs, in one run and one scratch folder (stores built once and shared): export, import, scaling (10k,
        100k, N), sync, mode, status, memory, history-read, storage, idle, postgres (skipped without
        STORECTL_TEST_PG_URL) and history (trigger overhead against plain and against the constant trigger, best
        of 3, with callgrind instruction counts when valgrind is installed). At N = 1,000,000 it takes about half an hour and a few GB of disk.
        """

    static func main(_ argv: [String]) throws {
        try Runner.main("all", argv, help: help) { lab, options, report in
            var figures: [Figure] = []
            let pair = try lab.pair(rows: options.rows)
            figures.append(ExportImportBenchmark.exportFigure(pair))
            figures.append(ExportImportBenchmark.importFigure(pair))
            if options.shape != .single {
                // The one-table shape, kept as one row each for comparison (its pair also serves sync and postgres).
                let single = try lab.pair(rows: options.rows, shape: .single)
                figures.append(ExportImportBenchmark.exportFigure(single, run: options.shape))
                figures.append(ExportImportBenchmark.importFigure(single, run: options.shape))
            }
            figures += try PostgresBenchmark.figures(lab, options)
            let points = try ScalingBenchmark.points(lab, options)
            report.scaling = points
            figures += ScalingBenchmark.figures(points)
            figures += try SyncBenchmark.figures(lab, options)
            figures += try ProcessBenchmarks.modeFigures(lab, options)
            if options.shape != .single {
                figures.append(try ProcessBenchmarks.cloudImportFigure(lab, options, shape: .single))
            }
            figures += try ProcessBenchmarks.statusFigures(lab, options)
            figures += try MemoryBenchmark.figures(lab, options)
            figures += try HistoryReadBenchmark.figures(lab, options)
            figures += try StorageBenchmark.figures(lab, options)
            figures += try StorageBenchmark.idleFigures(lab, options)

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
        var figures = report.phases.map { p -> Figure in
            if let floor = p.floorSeconds, let floorRatio = p.floorRatio {
                return Figure(id: "history.\(p.name)", what: "history insert overhead vs the constant trigger: "
                                  + "\(p.operations) \(p.name)",
                              value: floorRatio, unit: .ratio, target: p.target.map { .atMost($0) },
                              detail: "tracked \(secs(p.trackedSeconds)), constant trigger \(secs(floor)), plain "
                                  + "\(secs(p.plainSeconds)) (best of \(report.repeats)); tracked / plain "
                                  + String(format: "%.2fx", p.ratio),
                              numbers: ["plain_seconds": p.plainSeconds, "tracked_seconds": p.trackedSeconds,
                                        "floor_seconds": floor, "plain_ratio": p.ratio])
            }
            return Figure(id: "history.\(p.name)", what: "history tracking overhead: \(p.operations) \(p.name)",
                          value: p.ratio, unit: .ratio, target: p.target.map { .atMost($0) },
                          detail: "plain \(secs(p.plainSeconds)), tracked \(secs(p.trackedSeconds)) (best of "
                              + "\(report.repeats))",
                          numbers: ["plain_seconds": p.plainSeconds, "tracked_seconds": p.trackedSeconds])
        }
        if let i = report.instructions {
            figures.insert(Figure(id: "history.inserts.instructions",
                                  what: "history insert overhead vs the constant trigger, instructions",
                                  value: i.floorRatio, unit: .ratio, target: .atMost(1.10),
                                  detail: "per insert inside sqlite3_step (callgrind, \(i.rows) rows): tracked "
                                      + "\(Int(i.tracked)), constant trigger \(Int(i.floor)), plain \(Int(i.plain)); "
                                      + "tracked / plain " + String(format: "%.2fx", i.plainRatio),
                                  numbers: ["plain": i.plain, "floor": i.floor, "tracked": i.tracked]), at: 1)
        }
        return figures
    }
}
