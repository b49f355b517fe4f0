import Foundation
import StoreBase

/// `storectl-bench export` and `storectl-bench import`: the engine's baseline export of N rows to a container
/// file, and its import of them into an empty store, each against one SQL statement that does the same work
/// across `ATTACH` in the same run (the engine's own limit for this work). Target: at least 40% of that rate.
enum ExportImportBenchmark {
    static let exportHelp = """
        usage: storectl-bench export [--rows N] [--schema realistic|single] [--json]

        Baseline export of N rows to a container file (Mirror.exportChanges), against the same rows turned into
        records by one statement per table across ATTACH into a container with the engine's records schema
        (with --schema realistic, a tag reference is written as the tag's record name):
          INSERT INTO c.records SELECT ..., json_object(...) FROM notes
        Figure: reference seconds / engine seconds, i.e. the engine's rate as a share of the reference's.
        Target: >= 40%.
        """

    static let importHelp = """
        usage: storectl-bench import [--rows N] [--schema realistic|single] [--json]

        Import of N records from a container file into an empty store (Mirror.importChanges), against one
        statement across ATTACH into an empty store with history tracking installed (the triggers fire on each
        row, as they do in the import, whose changes are history by author cloud-import), one statement per
        table, parents first (with --schema realistic, the tag of a link is found through its parent record and
        the tag's UNIQUE name):
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

    /// ` (realistic schema)` or ` (single table)`: the figures of both shapes can sit in one table.
    static func label(_ shape: Shape) -> String {
        shape == .single ? " (single table)" : " (realistic schema)"
    }

    /// The id of a figure measured on `shape`: the plain id for the run's own shape.
    static func id(_ base: String, _ shape: Shape, run: Shape) -> String {
        shape == run ? base : base + "." + shape.rawValue
    }

    static func exportFigure(_ p: Lab.Pair, run: Shape? = nil) -> Figure {
        Figure(id: id("export.file", p.shape, run: run ?? p.shape),
               what: "baseline export to the file container" + label(p.shape),
               value: p.exportReference / p.exportSeconds, unit: .percent, target: .atLeast(0.4),
               detail: "engine \(secs(p.exportSeconds)) (\(rate(p.rows, p.exportSeconds))), one statement "
                   + "\(secs(p.exportReference)) (\(rate(p.rows, p.exportReference)))",
               numbers: ["rows": Double(p.rows), "engine_seconds": p.exportSeconds,
                         "reference_seconds": p.exportReference, "engine_runs": Double(p.engineRuns),
                         "reference_runs": Double(p.referenceRuns)])
    }

    static func importFigure(_ p: Lab.Pair, run: Shape? = nil) -> Figure {
        Figure(id: id("import.file", p.shape, run: run ?? p.shape),
               what: "import from the file container vs INSERT ... SELECT into a tracked store" + label(p.shape),
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
