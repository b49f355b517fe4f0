import Foundation
import StoreBase

#if canImport(Glibc)
import Glibc
#endif

/// `storectl-bench SUBCOMMAND [options]`: benchmarks that are measured, not asserted. Each subcommand prints
/// human text, or one JSON document with --json.
let benchmarks: [(name: String, abstract: String, run: ([String]) throws -> Void)] = [
    ("history", "overhead of the history triggers on inserts, updates and deletes", HistoryBenchmark.main),
    ("export", "baseline export to a container file vs one INSERT ... SELECT across ATTACH",
     ExportImportBenchmark.exportMain),
    ("import", "import into an empty store vs one INSERT ... SELECT across ATTACH", ExportImportBenchmark.importMain),
    ("sync", "incremental sync of 1,000 changes on an N-row vs a 1k-row store", SyncBenchmark.main),
    ("mode", "storectl mode cloud --no-sync / mode local processes, N vs 1k rows", ProcessBenchmarks.modeMain),
    ("status", "storectl status --json process vs sqlite3 'select 1'", ProcessBenchmarks.statusMain),
    ("memory", "peak RSS of the storectl process during the N-row export and import", MemoryBenchmark.main),
    ("history-read", "10k changes after a token out of 10 x N history rows", HistoryReadBenchmark.main),
    ("postgres", "PostgreSQL export vs COPY, import vs raw SQLite inserts", PostgresBenchmark.main),
    ("scaling", "export and import time at 10k, 100k and N rows", ScalingBenchmark.main),
    ("storage", "bytes of sync metadata per row after the N-row sync, history pruned", StorageBenchmark.main),
    ("idle", "CPU and memory of 1,000 idle sync rounds (as watch runs them) on the N-row store",
     StorageBenchmark.idleMain),
    ("users", "the users' schema on one pair: export, import, a new store's mode cloud, storage",
     UsersSchemaBenchmark.main),
    ("trigger-cost", "only the inserts of 'history' (plain|floor|tracked), for callgrind", HistoryBenchmark.triggerCostMain),
    ("all", "everything above in one run: one table, one JSON document", AllBenchmark.main),
    ("fleet", "N devices, each a store and a 'storectl watch' process, writing and syncing through PostgreSQL "
        + "(not in 'all')", FleetBenchmark.main),
    ("encryption", "export and import of N rows (default 20k), one column encrypted vs none (not in 'all')",
     EncryptionBenchmark.main),
]

@MainActor
func usage() -> String {
    var lines = ["usage: storectl-bench <benchmark> [options]", "", "benchmarks:"]
    for b in benchmarks { lines.append("  \(b.name.padding(toLength: 14, withPad: " ", startingAt: 0))\(b.abstract)") }
    lines.append("")
    lines.append("Build with: swift build -c release --product storectl-bench")
    lines.append("See 'storectl-bench <benchmark> --help'.")
    return lines.joined(separator: "\n")
}

let argv = Array(CommandLine.arguments.dropFirst())
guard let name = argv.first, name != "--help", name != "-h" else {
    print(usage())
    exit(argv.isEmpty ? 64 : 0)
}
guard let benchmark = benchmarks.first(where: { $0.name == name }) else {
    FileHandle.standardError.write("error: unknown benchmark '\(name)'\n\(usage())\n")
    exit(64)
}
do {
    try benchmark.run(Array(argv.dropFirst()))
} catch let error as any DiagnosedError {
    FileHandle.standardError.write(error.description + "\n")
    exit(error.exitCode.rawValue)
} catch {
    FileHandle.standardError.write("error: \(error)\n")
    exit(70)
}
