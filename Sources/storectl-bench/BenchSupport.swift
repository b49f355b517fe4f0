import Foundation
import StoreBase
import StoreSQLite

#if canImport(Glibc)
import Glibc
#endif

/// The options every benchmark subcommand except `history` takes.
struct BenchOptions {
    /// N, the store size the targets are stated for.
    var rows = 1_000_000
    /// The store's tables: the users' realistic schema (default) or the one plain table.
    var shape = Shape.realistic
    var json = false
    /// Also write the JSON document to this file.
    var jsonFile: String?
    /// How many times the quick measurements (whole-process runs, references) are repeated; the median is kept.
    var repeats = 7
    /// How many times the engine's export and import (and a new store's `mode cloud`) run at each size; the median
    /// is kept (default: 3 up to 100,000 rows, 1 above).
    var engineRuns: Int?
    /// Where the scratch folder goes (default: the system's temporary folder).
    var directory: String?
    /// The `storectl` binary the whole-process benchmarks run (default: the one next to this benchmark).
    var storectl: String?
    /// Keep the scratch folder (for looking at the stores afterwards).
    var keep = false
    /// `scaling` only: the sizes.
    var sizes: [Int]?
    /// `history-read` only: the history size (default 10 x rows).
    var historyRows: Int?

    static let common = """
        options:
          --rows N          store size N (default 1000000), rows of all tables together
          --schema S        realistic (default): notes with UUID keys (60% of N), tags with a UNIQUE name (2%)
                            and note_tags with two foreign keys (38%), the shape users' apps sync;
                            single: one table notes(id INTEGER PRIMARY KEY, ...) with no references, the one
                            shape the engine's set-based import path takes
          --repeat N        runs of each quick measurement; the median is kept (default 7)
          --engine-runs N   runs of the engine's export and import and of a new store's 'mode cloud' at each
                            size; the median is kept (default 3 up to 100000 rows, 1 above)
          --dir PATH        scratch folder parent (default: the temporary folder); needs a few GB at N = 1M
          --storectl PATH   the storectl binary (default: the one next to storectl-bench)
          --keep            keep the scratch folder
          --json            one JSON document on stdout (keys sorted); progress goes to stderr
          --json-file PATH  also write the JSON document to PATH (for Benchmarks/plot_scaling.py)
        """

    /// Parses `argv`; prints `help` and returns nil for --help.
    /// - Throws: `StoreError` (64) for unknown options or bad values.
    static func parse(_ argv: [String], help: String, name: String) throws -> BenchOptions? {
        var options = BenchOptions()
        var i = 0
        func value() throws -> String {
            i += 1
            guard i < argv.count else { throw StoreError(.usage, "missing value for \(argv[i - 1])") }
            return argv[i]
        }
        func int(_ text: String) throws -> Int {
            guard let n = Int(text.replacingOccurrences(of: "_", with: "")), n > 0 else {
                throw StoreError(.usage, "\(argv[i - 1]) expects a positive integer, got '\(text)'")
            }
            return n
        }
        while i < argv.count {
            switch argv[i] {
            case "--rows": options.rows = try int(try value())
            case "--repeat": options.repeats = try int(try value())
            case "--schema":
                let text = try value()
                guard let shape = Shape(rawValue: text) else {
                    throw StoreError(.usage, "--schema expects realistic or single, got '\(text)'")
                }
                options.shape = shape
            case "--engine-runs": options.engineRuns = try int(try value())
            case "--history-rows": options.historyRows = try int(try value())
            case "--sizes": options.sizes = try value().split(separator: ",").map { try int(String($0)) }
            case "--dir": options.directory = try value()
            case "--storectl": options.storectl = try value()
            case "--keep": options.keep = true
            case "--json": options.json = true
            case "--json-file": options.jsonFile = try value()
            case "--help", "-h":
                print(help + "\n\n" + common)
                return nil
            default:
                throw StoreError(.usage, "unknown option '\(argv[i])'", hint: "see 'storectl-bench \(name) --help'")
            }
            i += 1
        }
        return options
    }
}

/// A target: the measured value must be at least or at most a bound.
enum Target: Encodable {
    case atLeast(Double)
    case atMost(Double)

    func met(_ value: Double) -> Bool {
        switch self {
        case .atLeast(let bound): return value >= bound
        case .atMost(let bound): return value <= bound
        }
    }

    func text(_ unit: Unit) -> String {
        switch self {
        case .atLeast(let bound): return ">= " + unit.format(bound)
        case .atMost(let bound): return "<= " + unit.format(bound)
        }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .atLeast(let bound):
            try c.encode("at_least", forKey: .kind)
            try c.encode(bound, forKey: .bound)
        case .atMost(let bound):
            try c.encode("at_most", forKey: .kind)
            try c.encode(bound, forKey: .bound)
        }
    }

    enum CodingKeys: String, CodingKey { case kind, bound }
}

/// How a figure's value reads.
enum Unit: String, Encodable {
    /// A fraction of the reference's rate, shown as a percentage.
    case percent
    /// A time ratio, shown as `1.23x`.
    case ratio
    case milliseconds = "ms"
    case mebibytes = "MiB"
    case bytes = "B"
    /// Events a second.
    case perSecond = "/s"
    /// A share of one CPU core (CPU seconds / wall seconds), shown as a percentage with a decimal: an idle
    /// process's share is well under 1%.
    case coreShare = "core"
    /// A plain count.
    case count
    /// A plain number with two decimals (a mean per event).
    case number

    func format(_ value: Double) -> String {
        switch self {
        case .percent: return String(format: "%.0f%%", value * 100)
        case .ratio: return String(format: "%.2fx", value)
        case .milliseconds: return String(format: "%.1f ms", value)
        case .mebibytes: return String(format: "%.1f MiB", value)
        case .bytes: return String(format: "%.0f B", value)
        case .perSecond: return String(format: "%.1f/s", value)
        case .coreShare: return String(format: "%.2f%% core", value * 100)
        case .count: return String(format: "%.0f", value)
        case .number: return String(format: "%.2f", value)
        }
    }
}

/// One row of the results table: what was measured, the figure, its target, and whether it was met.
struct Figure: Encodable {
    /// A stable id, e.g. `export.file`.
    var id: String
    /// What was measured, for the table.
    var what: String
    var value: Double?
    var unit: Unit
    var target: Target?
    var met: Bool?
    /// Why there is no value (e.g. no PostgreSQL server).
    var skipped: String?
    /// The measurements behind the figure, for the table's last column.
    var detail: String
    /// The raw numbers behind the figure (seconds, rows/s, KiB...).
    var numbers: [String: Double]

    init(id: String, what: String, value: Double, unit: Unit, target: Target?, detail: String,
         numbers: [String: Double])
    {
        self.id = id
        self.what = what
        self.value = value
        self.unit = unit
        self.target = target
        self.met = target.map { $0.met(value) }
        self.detail = detail
        self.numbers = numbers
    }

    init(id: String, what: String, unit: Unit, target: Target?, skipped: String) {
        self.id = id
        self.what = what
        self.unit = unit
        self.target = target
        self.skipped = skipped
        self.detail = ""
        self.numbers = [:]
    }

    var valueText: String { value.map(unit.format) ?? "skipped" }
    var targetText: String { target?.text(unit) ?? "" }
    var verdict: String {
        if skipped != nil { return "skipped" }
        switch met {
        case .some(true): return "met"
        case .some(false): return "MISSED"
        case .none: return ""
        }
    }
}

/// What the figures were measured on.
struct Machine: Encodable {
    var cores: Int
    var cpu: String
    var sqliteVersion: String
    var loadAverage: String
    var kernel: String

    enum CodingKeys: String, CodingKey {
        case cores, cpu, kernel
        case sqliteVersion = "sqlite_version"
        case loadAverage = "load_average_at_start"
    }

    static func current(sqliteVersion: String) -> Machine {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model = cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { $0.split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) } ?? "" }
            ?? "unknown"
        let load = ((try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? "")
            .split(separator: " ").prefix(3).joined(separator: " ")
        var names = utsname()
        uname(&names)
        let release = withUnsafeBytes(of: &names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return Machine(cores: sysconf(Int32(_SC_NPROCESSORS_ONLN)), cpu: model, sqliteVersion: sqliteVersion,
                       loadAverage: load, kernel: "Linux " + release)
    }
}

/// The JSON document of a run.
struct BenchReport: Encodable {
    var benchmark: String
    var rows: Int
    /// `--schema`: the shape the measurements ran on, unless a figure says otherwise.
    var schema: String
    var machine: Machine
    /// /proc/loadavg when the run ended (the machine's load at its start is in `machine`).
    var loadAverageAtEnd: String?
    var figures: [Figure]
    var scaling: [ScalingPoint]?
    /// STORECTL_TRACE=1 phase totals (seconds) of the whole-process export and import runs.
    var traces: [String: [String: Double]]?
    var history: HistoryBenchmark.Report?
    var seconds: Double

    enum CodingKeys: String, CodingKey {
        case benchmark, rows, schema, machine, figures, scaling, traces, history, seconds
        case loadAverageAtEnd = "load_average_at_end"
    }
}

// MARK: Output

enum Output {
    static func note(_ text: String) {
        FileHandle.standardError.write(text + "\n")
    }

    static func emit(_ report: BenchReport, json: Bool, file: String? = nil) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let document = try encoder.encode(report)
        if let file {
            do {
                try (document + Data("\n".utf8)).write(to: URL(fileURLWithPath: file))
            } catch {
                throw StoreError(.cantCreate, "cannot write \(file): \(error.localizedDescription)")
            }
        }
        if json {
            print(String(decoding: document, as: UTF8.self))
        } else {
            print(render(report))
        }
    }

    /// The figures as a table: what, figure, target, verdict, and the measurements behind the figure.
    static func table(_ figures: [Figure]) -> [String] {
        let header = ["what", "figure", "target", "", "measured"]
        var rows = figures.map { f in
            [f.what, f.valueText, f.targetText, f.verdict, f.skipped ?? f.detail]
        }
        rows.insert(header, at: 0)
        let widths = (0..<4).map { c in rows.map { $0[c].count }.max() ?? 0 }
        return rows.map { row in
            var line = ""
            for c in 0..<4 {
                let cell = row[c]
                let pad = String(repeating: " ", count: widths[c] - cell.count)
                line += (c == 1 ? pad + cell : cell + pad) + "  "
            }
            return line + row[4]
        }
    }

    static func render(_ report: BenchReport) -> String {
        var lines: [String] = []
        let m = report.machine
        lines.append("storectl-bench \(report.benchmark), N = \(report.rows), schema \(report.schema): \(m.cores) "
                     + "cores, \(m.cpu), SQLite \(m.sqliteVersion), load \(m.loadAverage) at the start, "
                     + "\(report.loadAverageAtEnd ?? "?") at the end, \(String(format: "%.0f", report.seconds)) s")
        lines.append("")
        lines += table(report.figures)
        if let scaling = report.scaling, !scaling.isEmpty {
            lines.append("")
            lines.append(ScalingBenchmark.render(scaling))
        }
        if let traces = report.traces, !traces.isEmpty {
            lines.append("")
            lines.append("phase totals of the whole-process runs (STORECTL_TRACE=1), seconds:")
            for (run, phases) in traces.sorted(by: { $0.key < $1.key }) {
                let text = phases.sorted { $0.key < $1.key }.map { String(format: "%@ %.2f", $0.key, $0.value) }
                lines.append("  \(run): " + text.joined(separator: ", "))
            }
        }
        if let history = report.history {
            lines.append("")
            lines.append(HistoryBenchmark.render(history))
        }
        return lines.joined(separator: "\n")
    }
}

// MARK: Timing

enum Clock {
    /// Seconds `body` took.
    static func seconds(_ body: () throws -> Void) rethrows -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        try body()
        return (clock.now - start).seconds
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    let mid = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

func rate(_ rows: Int, _ seconds: Double) -> String {
    let r = Double(rows) / seconds
    return r >= 1e6 ? String(format: "%.2fM rows/s", r / 1e6) : String(format: "%.0fk rows/s", r / 1e3)
}

func secs(_ s: Double) -> String { s >= 10 ? String(format: "%.1f s", s) : String(format: "%.3f s", s) }
func ms(_ s: Double) -> String { String(format: "%.1f ms", s * 1000) }

// MARK: Child processes

/// One finished child process: its exit status, wall time, peak RSS, and what it printed.
struct ChildRun {
    var status: Int32
    var seconds: Double
    /// `ru_maxrss` of this child alone (from wait4), in KiB.
    var maxRSSKiB: Int
    var stdout: String
    var stderr: String

    /// The `trace:` lines of STORECTL_TRACE=1, as phase -> seconds.
    var trace: [String: Double] {
        var phases: [String: Double] = [:]
        for line in stderr.split(separator: "\n") where line.hasPrefix("trace: ") {
            let parts = line.dropFirst("trace: ".count).split(separator: " ", omittingEmptySubsequences: true)
            if parts.count >= 2, let s = Double(parts[1]) { phases[String(parts[0])] = s }
        }
        return phases
    }
}

enum Child {
    /// Runs `argv` (argv[0] is a path, or a name looked up in PATH) with `environment` added, stdout and stderr
    /// captured to files in `scratch`. The peak RSS comes from `wait4`, so it is this child's alone.
    /// - Throws: `StoreError` (71-ish 70) when the process cannot be started.
    static func run(_ argv: [String], environment: [String: String] = [:], in scratch: String) throws -> ChildRun {
        let out = (scratch as NSString).appendingPathComponent("child.stdout")
        let err = (scratch as NSString).appendingPathComponent("child.stderr")
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)

        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        let cEnv: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in cArgs { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let clock = ContinuousClock()
        let start = clock.now
        // posix_spawnp(3): "the file to be executed is searched for in PATH as in execvp".
        let rc = posix_spawnp(&pid, argv[0], &actions, nil, cArgs, cEnv)
        guard rc == 0 else {
            throw StoreError(.software, "cannot start \(argv[0]): \(String(cString: strerror(rc)))",
                             hint: "build it first: swift build -c release --product storectl")
        }
        var status: Int32 = 0
        var usage = rusage()
        // wait4(2): "returns resource usage information about the child in the structure pointed to by rusage".
        while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
        let elapsed = (clock.now - start).seconds
        let exitStatus = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        let stdout = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        let stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        return ChildRun(status: exitStatus, seconds: elapsed, maxRSSKiB: usage.ru_maxrss, stdout: stdout,
                        stderr: stderr)
    }

    /// Runs `argv` and throws unless it exits 0.
    static func check(_ argv: [String], environment: [String: String] = [:], in scratch: String) throws -> ChildRun {
        let result = try run(argv, environment: environment, in: scratch)
        guard result.status == 0 else {
            throw StoreError(.software, "\(argv.joined(separator: " ")) exited \(result.status)",
                             hint: String(result.stderr.suffix(2000)))
        }
        return result
    }
}

// MARK: Running a subcommand

enum Runner {
    /// Parses the options, runs `body` in a fresh scratch folder, and prints the table or the JSON document.
    /// - Throws: whatever `body` throws; `StoreError` (64) for bad options.
    static func main(_ name: String, _ argv: [String], help: String,
                     _ body: (Lab, BenchOptions, inout BenchReport) throws -> Void) throws
    {
        guard let options = try BenchOptions.parse(argv, help: help, name: name) else { return }
        let lab = try Lab(options: options)
        defer { lab.finish() }
        var report = BenchReport(benchmark: name, rows: options.rows, schema: options.shape.rawValue,
                                 machine: .current(sqliteVersion: Connection.libraryVersion), figures: [],
                                 seconds: 0)
        let clock = ContinuousClock()
        let start = clock.now
        try body(lab, options, &report)
        report.seconds = (clock.now - start).seconds
        report.loadAverageAtEnd = Machine.current(sqliteVersion: "").loadAverage
        if !lab.traces.isEmpty { report.traces = lab.traces }
        try Output.emit(report, json: options.json, file: options.jsonFile)
    }
}

/// Seconds as microseconds, for steps too short for `ms`.
func us(_ s: Double) -> String { String(format: "%.0f us", s * 1_000_000) }
