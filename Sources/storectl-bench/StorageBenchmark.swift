import Foundation
import StoreBase
import StoreControl
import StoreHistory
import StoreMirror
import StoreSQLite

#if canImport(Glibc)
import Glibc
#endif

/// `storectl-bench storage`: the bytes of sync metadata per row after the N-row sync, and `storectl-bench idle`:
/// the CPU and memory of idle sync rounds, as `storectl watch` runs them.
enum StorageBenchmark {
    static let help = """
        usage: storectl-bench storage [--rows N] [--schema realistic|single] [--json]

        After the N-row sync of the 'export' and 'import' benchmarks, copies of both stores with their history
        pruned (every history row deleted): the bytes of storectl's own tables and indexes (_storectl_*, from
        SQLite's dbstat), per row (N rows of all the user's tables together), against the bytes of the user's
        tables and their indexes per row. Target: <= 150 bytes of metadata per row, on each side.
        """

    static let idleHelp = """
        usage: storectl-bench idle [--rows N] [--json]

        On the synced N-row store of the 'export' benchmark, idle sync rounds in one process, as `storectl watch`
        runs them (StoreHandle.sync on one handle): 1,000 quiet rounds (nothing changed in the store or the
        container since the last full round: the state is read, nothing is exported or imported), then 100 full
        rounds, each after another connection committed a write that leaves nothing to sync (PRAGMA user_version),
        which opens the cloud, checks the account, the triggers and the binding, registers the device and exports
        and imports nothing. The figure is the CPU time (user + system, getrusage) per idle round on watch's
        default schedule: a round every 10 s, a full one at least every StoreHandle.quietRoundLimit (300 s), the
        rest quiet. Resident memory after 100 and after 1,000 rounds. Targets: under 1 ms of CPU per idle round
        per store; resident memory at 1,000 / at 100 <= 1.10.
        """

    static func main(_ argv: [String]) throws {
        try Runner.main("storage", argv, help: help) { lab, options, report in
            report.figures = try figures(lab, options)
        }
    }

    static func idleMain(_ argv: [String]) throws {
        try Runner.main("idle", argv, help: idleHelp) { lab, options, report in
            report.figures = try idleFigures(lab, options)
        }
    }

    struct Bytes {
        var metadata: Int64
        var history: Int64
        var table: Int64
        var byObject: [(String, Int64)]
    }

    /// The bytes of a copy of `store` with its history pruned, from dbstat.
    static func bytes(_ lab: Lab, store: String) throws -> Bytes {
        let copy = lab.path("storage-copy.sqlite")
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) }
        let source = try Connection(path: store)
        try source.run("VACUUM INTO ?", [copy])
        let db = try Connection(path: copy)
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) } }
        try db.execute("DELETE FROM _storectl_history")
        var result = Bytes(metadata: 0, history: 0, table: 0, byObject: [])
        for row in try db.query("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC") {
            let name = row[0].string ?? "", size = row[1].int64 ?? 0
            if name.hasPrefix("_storectl_history") {
                result.history += size
            } else if name.hasPrefix("_storectl_") || name.hasPrefix("sqlite_autoindex__storectl_") {
                result.metadata += size
                result.byObject.append((name, size))
            } else if !name.hasPrefix("sqlite_schema") && !name.hasPrefix("sqlite_master")
                        && !name.hasPrefix("sqlite_stat") && name != "sqlite_sequence"
            {
                // The user's tables and their indexes (with the automatic ones of a text key or a UNIQUE column).
                result.table += size
            }
        }
        return result
    }

    static func figures(_ lab: Lab, _ options: BenchOptions) throws -> [Figure] {
        let pair = try lab.pair(rows: options.rows)
        let n = Double(options.rows)
        var figures: [Figure] = []
        for (side, store, what) in [("export", pair.a, "the exporting store"), ("import", pair.b, "the importing store")] {
            Output.note("sync metadata per row of \(what) (\(options.rows) rows, history pruned)")
            let b = try bytes(lab, store: lab.storePath(store))
            let parts = b.byObject.prefix(4).map { "\($0.0) \(String(format: "%.0f", Double($0.1) / n))" }
            figures.append(Figure(
                id: "storage.\(side)", what: "sync metadata per row after the N-row sync, \(what)"
                    + ExportImportBenchmark.label(pair.shape),
                value: Double(b.metadata) / n, unit: .bytes, target: .atMost(150),
                detail: "the user's tables and indexes \(String(format: "%.0f", Double(b.table) / n)) B/row; "
                    + parts.joined(separator: ", ") + " (dbstat, history pruned)",
                numbers: ["metadata_bytes": Double(b.metadata), "table_bytes": Double(b.table), "rows": n]))
        }
        return figures
    }

    /// Seconds of CPU (user + system) this process has used.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func s(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return s(usage.ru_utime) + s(usage.ru_stime)
    }

    /// This process's resident memory now, in MiB (from /proc/self/statm).
    static func residentMiB() -> Double {
        let text = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? ""
        let pages = text.split(separator: " ").dropFirst().first.flatMap { Double($0) } ?? 0
        return pages * Double(sysconf(Int32(_SC_PAGESIZE))) / 1_048_576
    }

    static func idleFigures(_ lab: Lab, _ options: BenchOptions) throws -> [Figure] {
        let pair = try lab.pair(rows: options.rows)
        // The exporting store itself (a copy would be refused as a copy), in cloud mode for the rounds only.
        let handle = try lab.open(pair.a)
        let db = try handle.database()
        try db.transaction { try MirrorState.setMeta(db, .mode, "cloud") }
        defer {
            try? db.transaction { try MirrorState.setMeta(db, .mode, "local") }
            handle.close()
        }
        Output.note("1,000 idle sync rounds on the synced \(options.rows)-row store")
        _ = try handle.sync(SyncOptions())  // the first may take in what the other store exported
        let rounds = 1_000
        var rssAt100 = 0.0
        func idleRound(_ round: Int) throws {
            let report = try handle.sync(SyncOptions())
            guard report.exported.saved == 0, report.imported.applied == 0 else {
                throw StoreError(.software, "idle round \(round) exported \(report.exported.saved) and imported "
                                 + "\(report.imported.applied) records")
            }
        }
        var cpuStart = cpuSeconds()
        let wall = try Clock.seconds {
            for round in 1...rounds {
                try idleRound(round)
                if round == 100 { rssAt100 = residentMiB() }
            }
        }
        let quiet = (cpuSeconds() - cpuStart) / Double(rounds)
        let rssAt1000 = residentMiB()
        // Full rounds: another connection's commit (no history: nothing to export) ends the quiet run each time.
        let other = try Connection(path: handle.settings.path)
        let fullRounds = 100
        var fullCPU = 0.0
        for round in 1...fullRounds {
            try other.execute("PRAGMA user_version = \(round)")
            cpuStart = cpuSeconds()
            try idleRound(rounds + round)
            fullCPU += cpuSeconds() - cpuStart
        }
        try other.execute("PRAGMA user_version = 0")
        let full = fullCPU / Double(fullRounds)
        // Watch's default schedule: one round per interval, a full one at least every quietRoundLimit.
        let interval = WatchOptions().interval
        let perFull = max(1, (StoreHandle.quietRoundLimit / interval).rounded(.down))
        let cpu = (full + quiet * (perFull - 1)) / perFull
        return [
            Figure(id: "idle.cpu", what: "CPU per idle sync round (watch), one \(options.rows)-row store",
                   value: cpu * 1000, unit: .milliseconds, target: .atMost(1.0),
                   detail: "watch's default schedule (a round every \(Int(interval)) s, a full one every "
                       + "\(Int(perFull)) rounds): quiet round \(us(quiet)) of CPU (\(us(wall / Double(rounds))) of wall "
                       + "time, \(rounds) rounds), full round \(ms(full)) of CPU (\(fullRounds) rounds)",
                   numbers: ["cpu_seconds_per_round": cpu, "quiet_cpu_seconds_per_round": quiet,
                             "full_cpu_seconds_per_round": full, "wall_seconds_per_quiet_round": wall / Double(rounds),
                             "rounds_per_full_round": perFull]),
            Figure(id: "idle.rss", what: "resident memory after 1,000 idle rounds / after 100",
                   value: rssAt1000 / rssAt100, unit: .ratio, target: .atMost(1.10),
                   detail: String(format: "%.1f MiB after 100 rounds, %.1f MiB after 1,000", rssAt100, rssAt1000),
                   numbers: ["rss_mib_100": rssAt100, "rss_mib_1000": rssAt1000]),
        ]
    }
}
