import Foundation
import StoreBase

/// `storectl-bench users`: the figures of the users' schema on one synced pair, without the rest of `all`.
enum UsersSchemaBenchmark {
    static let help = """
        usage: storectl-bench users [--rows N] [--schema realistic|single] [--engine-runs R] [--json]

        On one exported and imported pair of N rows (the 'export' and 'import' benchmarks' pair, --schema
        realistic by default: notes with UUID keys, tags with a UNIQUE name, note_tags with two foreign keys):
          export:  Mirror.exportChanges vs one INSERT ... SELECT per table into a container (target >= 40%)
          import:  Mirror.importChanges into a new tracked store vs one INSERT ... SELECT per table into a
                   tracked store (target >= 60%)
          process: a new store's whole 'storectl mode cloud' (the release binary as a child process) importing
                   the same N records vs the same INSERT ... SELECT (target >= 40%)
          storage: bytes of storectl's own tables per row on both stores, history pruned (target <= 150 B)
        With the realistic schema, the export and import of the one-table shape (--schema single) follow, one
        row each, for comparison.
        """

    static func main(_ argv: [String]) throws {
        try Runner.main("users", argv, help: help) { lab, options, report in
            let pair = try lab.pair(rows: options.rows)
            var figures = [ExportImportBenchmark.exportFigure(pair), ExportImportBenchmark.importFigure(pair)]
            figures.append(try ProcessBenchmarks.cloudImportFigure(lab, options))
            figures += try StorageBenchmark.figures(lab, options)
            if options.shape != .single {
                let single = try lab.pair(rows: options.rows, shape: .single)
                figures.append(ExportImportBenchmark.exportFigure(single, run: options.shape))
                figures.append(ExportImportBenchmark.importFigure(single, run: options.shape))
            }
            report.figures = figures
        }
    }
}
