import Foundation
import StoreBase

/// One size of the scaling curve.
struct ScalingPoint: Encodable {
    var rows: Int
    var exportSeconds: Double
    var exportReferenceSeconds: Double
    var importSeconds: Double
    var importReferenceSeconds: Double

    enum CodingKeys: String, CodingKey {
        case rows
        case exportSeconds = "export_seconds"
        case exportReferenceSeconds = "export_reference_seconds"
        case importSeconds = "import_seconds"
        case importReferenceSeconds = "import_reference_seconds"
    }
}

/// `storectl-bench scaling`: export and import time at N = 10k, 100k and 1M, so that the growth is visible
/// (linear, not quadratic). `Benchmarks/plot_scaling.py` draws the JSON.
enum ScalingBenchmark {
    static let help = """
        usage: storectl-bench scaling [--sizes 10000,100000,1000000] [--json]

        The export and import of the 'export' and 'import' benchmarks, with their references, at each size
        (default 10k, 100k and --rows). Figures: the time per row at the largest size / at the smallest, for the
        export and the import (1.0 is linear; quadratic growth would be the ratio of the sizes). Plot:
          .build/release/storectl-bench scaling --json > scaling.json && python3 Benchmarks/plot_scaling.py scaling.json
        """

    static func sizes(_ options: BenchOptions) -> [Int] {
        Array(Set(options.sizes ?? [10_000, 100_000, options.rows])).sorted()
    }

    static func main(_ argv: [String]) throws {
        try Runner.main("scaling", argv, help: help) { lab, options, report in
            let points = try self.points(lab, options)
            report.scaling = points
            report.figures = figures(points)
        }
    }

    static func points(_ lab: Lab, _ options: BenchOptions) throws -> [ScalingPoint] {
        try sizes(options).map { rows in
            let p = try lab.pair(rows: rows)
            return ScalingPoint(rows: rows, exportSeconds: p.exportSeconds, exportReferenceSeconds: p.exportReference,
                                importSeconds: p.importSeconds, importReferenceSeconds: p.importReference)
        }
    }

    static func figures(_ points: [ScalingPoint]) -> [Figure] {
        guard let first = points.first, let last = points.last, points.count > 1 else { return [] }
        func figure(_ id: String, _ what: String, _ time: (ScalingPoint) -> Double) -> Figure {
            let perRowLast = time(last) / Double(last.rows), perRowFirst = time(first) / Double(first.rows)
            return Figure(id: id, what: what, value: perRowLast / perRowFirst, unit: .ratio, target: nil,
                          detail: String(format: "%.2f us/row at %d rows, %.2f us/row at %d rows (%dx the rows)",
                                         perRowLast * 1e6, last.rows, perRowFirst * 1e6, first.rows,
                                         last.rows / first.rows),
                          numbers: ["per_row_seconds_largest": perRowLast, "per_row_seconds_smallest": perRowFirst])
        }
        return [
            figure("scaling.export", "export time per row, largest vs smallest N", \.exportSeconds),
            figure("scaling.import", "import time per row, largest vs smallest N", \.importSeconds),
        ]
    }

    static func render(_ points: [ScalingPoint]) -> String {
        var lines = ["scaling (seconds):", "      rows    export  reference    import  reference"]
        for p in points {
            lines.append(String(p.rows).leftPad(10) + String(format: "%10.3f %10.3f %9.3f %10.3f", p.exportSeconds,
                                                              p.exportReferenceSeconds, p.importSeconds,
                                                              p.importReferenceSeconds))
        }
        return lines.joined(separator: "\n")
    }
}
