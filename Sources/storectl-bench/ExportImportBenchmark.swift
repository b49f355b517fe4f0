import Foundation
import StoreBase

/// `storectl-bench export` and `storectl-bench import`: the engine's baseline export of N rows to a container
/// file, and its import of them into an empty store, each against one SQL statement that does the same work
/// across `ATTACH` in the same run (the engine's own limit for this work). Target: at least 40% of that rate.
enum ExportImportBenchmark {
    static let exportHelp = """
        usage: storectl-bench export [--rows N] [--json]

        Baseline export of N rows to a container file (Mirror.exportChanges), against the same rows turned into
        records by one statement across ATTACH into a container with the engine's records schema:
          INSERT INTO c.records SELECT ..., json_object(...) FROM notes
        Figure: reference seconds / engine seconds, i.e. the engine's rate as a share of the reference's.
        Target: >= 40%.
        """

    static let importHelp = """
        usage: storectl-bench import [--rows N] [--json]

        Import of N records from a container file into an empty store (Mirror.importChanges), against one
        statement across ATTACH into an empty store with history tracking installed (the triggers fire on each
        row, as they do in the import, whose changes are history by author cloud-import):
          INSERT INTO notes SELECT json_extract(fields, ...) FROM c.records
        Figure: reference seconds / engine seconds. Target: >= 60%. The detail also shows the same statement into
        a store without triggers.
        """

    static func exportMain(_ argv: [String]) throws {
        try Runner.main("export", argv, help: exportHelp) { lab, options, report in
            report.figures = [exportFigure(try lab.pair(rows: options.rows))]
        }
        Trace.report()
    }

    static func importMain(_ argv: [String]) throws {
        try Runner.main("import", argv, help: importHelp) { lab, options, report in
            report.figures = [importFigure(try lab.pair(rows: options.rows))]
        }
        Trace.report()
    }

    static func exportFigure(_ p: Lab.Pair) -> Figure {
        Figure(id: "export.file", what: "baseline export to the file container",
               value: p.exportReference / p.exportSeconds, unit: .percent, target: .atLeast(0.4),
               detail: "engine \(secs(p.exportSeconds)) (\(rate(p.rows, p.exportSeconds))), one statement "
                   + "\(secs(p.exportReference)) (\(rate(p.rows, p.exportReference)))",
               numbers: ["rows": Double(p.rows), "engine_seconds": p.exportSeconds,
                         "reference_seconds": p.exportReference, "engine_runs": Double(p.engineRuns),
                         "reference_runs": Double(p.referenceRuns)])
    }

    static func importFigure(_ p: Lab.Pair) -> Figure {
        Figure(id: "import.file", what: "import from the file container vs INSERT ... SELECT into a tracked store",
               value: p.importReferenceTracked / p.importSeconds, unit: .percent, target: .atLeast(0.6),
               detail: "engine \(secs(p.importSeconds)) (\(rate(p.rows, p.importSeconds))), one statement into a "
                   + "tracked store \(secs(p.importReferenceTracked)) (\(rate(p.rows, p.importReferenceTracked))); "
                   + "the same into a store without triggers \(secs(p.importReference))",
               numbers: ["rows": Double(p.rows), "engine_seconds": p.importSeconds,
                         "reference_seconds": p.importReference,
                         "reference_tracked_seconds": p.importReferenceTracked,
                         "engine_runs": Double(p.engineRuns), "reference_runs": Double(p.referenceRuns)])
    }
}
