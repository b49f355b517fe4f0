import Foundation
import StoreBase

/// `storectl-bench memory`: the peak RSS of the storectl process during the N-row export and import. The engine
/// streams (pages of rows, batches of records), so the peak must stay under 64 MiB and not grow with N.
enum MemoryBenchmark {
    static let help = """
        usage: storectl-bench memory [--rows N] [--json]

        Runs the release storectl binary as a child process, with STORECTL_TRACE=1, and reads its own peak RSS
        (ru_maxrss from wait4):
          export: 'storectl mode cloud' on a copy of an N-row store with a new container (baseline export of N rows)
          import: 'storectl mode cloud' on a new, empty store with that container (import of N records)
        both at N and at N/10. Figures: peak RSS at N (target <= 64 MiB, each) and peak at N / peak at N/10 (flat
        in N: target <= 1.25). The phase totals of the N runs are printed too.
        """

    static func main(_ argv: [String]) throws {
        try Runner.main("memory", argv, help: help) { lab, options, report in
            report.figures = try figures(lab, options)
        }
    }

    struct Run {
        var export: ChildRun
        var `import`: ChildRun
    }

    /// Exports a copy of the `rows`-row template into a new container and imports it into a new store, both by
    /// `storectl mode cloud`.
    static func run(_ lab: Lab, rows: Int) throws -> Run {
        let storectl = try lab.storectl()
        let template = try lab.template(rows: rows)
        let container = "m-\(rows).container"
        try lab.remove(container)
        let exporter = "m-export-\(rows)", importer = "m-import-\(rows)"
        _ = try lab.copyStore(template, to: exporter, url: lab.fileURL(container))
        try lab.remove(importer)
        _ = try lab.makeStore(importer, url: lab.fileURL(container))
        let trace = ["STORECTL_TRACE": "1"]
        Output.note("storectl mode cloud: export of \(rows) rows, as a process")
        let export = try Child.check([storectl, "--config", lab.configPath(exporter), "mode", "cloud"],
                                     environment: trace, in: lab.dir)
        Output.note("  \(secs(export.seconds)), peak RSS \(export.maxRSSKiB / 1024) MiB")
        Output.note("storectl mode cloud: import of \(rows) records into an empty store, as a process")
        let imported = try Child.check([storectl, "--config", lab.configPath(importer), "mode", "cloud"],
                                       environment: trace, in: lab.dir)
        Output.note("  \(secs(imported.seconds)), peak RSS \(imported.maxRSSKiB / 1024) MiB")
        let count = try lab.open(importer).database().scalar(lab.shape.countSQL)?.int64 ?? 0
        guard count == Int64(rows) else {
            throw StoreError(.software, "the import by storectl mode cloud left \(count) rows, expected \(rows)")
        }
        try lab.remove(exporter)
        try lab.remove(importer)
        try lab.remove(container)
        return Run(export: export, import: imported)
    }

    static func figures(_ lab: Lab, _ options: BenchOptions) throws -> [Figure] {
        let small = max(1_000, options.rows / 10)
        let smallRun = try run(lab, rows: small)
        let bigRun = try run(lab, rows: options.rows)
        lab.traces["export of N rows (storectl mode cloud)"] = bigRun.export.trace
        lab.traces["import of N rows (storectl mode cloud)"] = bigRun.import.trace
        func mib(_ r: ChildRun) -> Double { Double(r.maxRSSKiB) / 1024 }
        func figure(_ id: String, _ what: String, _ big: ChildRun, _ small: ChildRun) -> Figure {
            Figure(id: id, what: what, value: mib(big), unit: .mebibytes, target: .atMost(64),
                   detail: String(format: "whole process %@; at N/10: %.1f MiB", secs(big.seconds), mib(small)),
                   numbers: ["peak_rss_mib": mib(big), "peak_rss_mib_tenth": mib(small), "seconds": big.seconds,
                             "seconds_tenth": small.seconds])
        }
        let bigPeak = max(mib(bigRun.export), mib(bigRun.import))
        let smallPeak = max(mib(smallRun.export), mib(smallRun.import))
        return [
            figure("memory.export", "peak RSS, export of N rows", bigRun.export, smallRun.export),
            figure("memory.import", "peak RSS, import of N rows", bigRun.import, smallRun.import),
            Figure(id: "memory.flat", what: "peak RSS at N / at N/10 (flat in N)", value: bigPeak / smallPeak,
                   unit: .ratio, target: .atMost(1.25),
                   detail: String(format: "%.1f MiB at N, %.1f MiB at N/10 = %d rows", bigPeak, smallPeak, small),
                   numbers: ["peak_rss_mib": bigPeak, "peak_rss_mib_tenth": smallPeak]),
        ]
    }
}
