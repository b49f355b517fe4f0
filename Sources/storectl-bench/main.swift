import Foundation
import StoreBase

#if canImport(Glibc)
import Glibc
#endif

/// `storectl-bench SUBCOMMAND [options]`: benchmarks that are measured, not asserted. Each subcommand prints
/// human text, or one JSON document with --json.
let benchmarks: [(name: String, abstract: String, run: ([String]) throws -> Void)] = [
    ("history", "overhead of the history triggers on inserts, updates and deletes", HistoryBenchmark.main),
]

@MainActor
func usage() -> String {
    var lines = ["usage: storectl-bench <benchmark> [options]", "", "benchmarks:"]
    for b in benchmarks { lines.append("  \(b.name.padding(toLength: 10, withPad: " ", startingAt: 0))\(b.abstract)") }
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
