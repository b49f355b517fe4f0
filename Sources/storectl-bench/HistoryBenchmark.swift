import Foundation
import StoreBase
import StoreHistory
import StoreSQLite

extension FileHandle {
    func write(_ text: String) { write(Data(text.utf8)) }
}

/// `storectl-bench history`: the same workload on the same table, once without triggers and once with history
/// tracking installed, in one run; the ratios are what matters.
///
/// Workload (each phase in one transaction, with prepared statements):
/// - `--rows` inserts (default 1,000,000) into notes(id INTEGER PRIMARY KEY, uuid TEXT, title TEXT, body TEXT,
///   updated_at INTEGER);
/// - `--updates` single-row updates (default 100,000) of title and updated_at;
/// - `--deletes` single-row deletes (default 100,000);
/// - then, for each width in `--widths` (default 5,50,100), `--updates` single-row updates of one column of a
///   table with that many columns: the trigger's cost per update must grow linearly with the width, not
///   quadratically.
enum HistoryBenchmark {
    struct Options {
        var rows = 1_000_000
        var updates = 100_000
        var deletes = 100_000
        var widths = [5, 50, 100]
        var repeats = 3
        var json = false
        var directory: String?
    }

    struct Phase: Encodable {
        var name: String
        var operations: Int
        var plainSeconds: Double
        var trackedSeconds: Double
        /// tracked / plain.
        var ratio: Double
        /// Inserts only: the same inserts with a trigger that inserts a row of constants into the same history
        /// table (the trigger mechanism's floor), and tracked / that.
        var floorSeconds: Double?
        var floorRatio: Double?
        /// The bound on `floorRatio` for inserts, on `ratio` for updates and deletes.
        var target: Double?
        var met: Bool?

        enum CodingKeys: String, CodingKey {
            case name, operations, ratio, target, met
            case plainSeconds = "plain_seconds"
            case trackedSeconds = "tracked_seconds"
            case floorSeconds = "floor_seconds"
            case floorRatio = "floor_ratio"
        }
    }

    /// Instructions per inserted row inside `sqlite3_step` (callgrind), for the three kinds of table.
    struct Instructions: Encodable {
        var rows: Int
        var plain: Double
        var floor: Double
        var tracked: Double

        var floorRatio: Double { tracked / floor }
        var plainRatio: Double { tracked / plain }

        enum CodingKeys: String, CodingKey {
            case rows, plain, floor, tracked
        }
    }

    struct Width: Encodable {
        var columns: Int
        var updates: Int
        var plainSeconds: Double
        var trackedSeconds: Double
        var ratio: Double
        /// (tracked - plain) / updates, in microseconds.
        var overheadMicroseconds: Double

        enum CodingKeys: String, CodingKey {
            case columns, updates, ratio
            case plainSeconds = "plain_seconds"
            case trackedSeconds = "tracked_seconds"
            case overheadMicroseconds = "overhead_us_per_update"
        }
    }

    struct Report: Encodable {
        var sqliteVersion: String
        var repeats: Int
        var phases: [Phase]
        var widths: [Width]
        /// Nil when valgrind is not installed.
        var instructions: Instructions?

        enum CodingKeys: String, CodingKey {
            case phases, widths, repeats, instructions
            case sqliteVersion = "sqlite_version"
        }
    }

    static let help = """
        usage: storectl-bench history [--rows N] [--updates N] [--deletes N] [--widths 5,50,100] [--repeat N]
                                      [--dir PATH] [--json]

        Measures, in one run, the cost of history tracking: the same inserts, updates and deletes on a table
        without triggers and on one with storectl's history triggers, and the inserts once more on a table whose
        trigger inserts a row of constants into the same history table: the floor of any trigger that writes a
        history row. Each figure is the best of --repeat runs (default 3). With valgrind installed, the inserts
        are also counted in instructions inside sqlite3_step (callgrind, 20,000 rows, exact whatever the load).
        Targets: tracked / floor <= 1.10 for inserts (time and instructions; tracked / plain shown beside), and
        tracked / plain <= 1.7 for updates and deletes.
        """

    /// The trigger of the floor: one row of constants into the history table, whatever the row inserted.
    static let floorTrigger = """
        CREATE TRIGGER bench_floor AFTER INSERT ON notes BEGIN
            INSERT INTO _storectl_history(tx, author, ts, entity, pk, op) VALUES (1, 'a', 0, 'notes', '[1]', 'I');
        END;
        """

    enum Kind: String, CaseIterable {
        case plain, floor, tracked
    }

    static func main(_ argv: [String]) throws {
        var options = Options()
        var i = 0
        func value() throws -> String {
            i += 1
            guard i < argv.count else { throw StoreError(.usage, "missing value for \(argv[i - 1])") }
            return argv[i]
        }
        func int() throws -> Int {
            let text = try value()
            guard let n = Int(text.replacingOccurrences(of: "_", with: "")), n > 0 else {
                throw StoreError(.usage, "\(argv[i - 1]) expects a positive integer, got '\(text)'")
            }
            return n
        }
        while i < argv.count {
            switch argv[i] {
            case "--rows": options.rows = try int()
            case "--updates": options.updates = try int()
            case "--deletes": options.deletes = try int()
            case "--repeat": options.repeats = try int()
            case "--widths":
                let text = try value()
                options.widths = text.split(separator: ",").compactMap { Int($0) }.filter { $0 >= 2 }
                guard !options.widths.isEmpty else { throw StoreError(.usage, "--widths expects e.g. 5,50,100") }
            case "--dir": options.directory = try value()
            case "--json": options.json = true
            case "--help", "-h":
                print(help)
                return
            default:
                throw StoreError(.usage, "unknown option '\(argv[i])'", hint: "see 'storectl-bench history --help'")
            }
            i += 1
        }
        options.updates = min(options.updates, options.rows)
        options.deletes = min(options.deletes, options.rows)
        let report = try run(options)
        if options.json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            print(render(report))
        }
    }

    static func run(_ options: Options) throws -> Report {
        let base = options.directory ?? NSTemporaryDirectory()
        let dir = (base as NSString).appendingPathComponent("storectl-bench-\(getpid())")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }

        var best: [String: (plain: Double, tracked: Double)] = [:]
        func keep(_ name: String, plain: Double, tracked: Double) {
            let old = best[name] ?? (.infinity, .infinity)
            best[name] = (min(old.plain, plain), min(old.tracked, tracked))
        }
        for round in 0..<options.repeats {
            note("round \(round + 1)/\(options.repeats): notes table")
            // Alternate which mode goes first, so neither always gets the warmer cache.
            let order = round % 2 == 0 ? [false, true] : [true, false]
            var results: [Bool: [Double]] = [:]
            for tracked in order {
                results[tracked] = try notesWorkload(dir: dir, kind: tracked ? .tracked : .plain, options: options)
            }
            for (index, name) in ["inserts", "updates", "deletes"].enumerated() {
                keep(name, plain: results[false]?[index] ?? .infinity, tracked: results[true]?[index] ?? .infinity)
            }
            note("round \(round + 1)/\(options.repeats): notes table with the constant trigger")
            let floor = try notesWorkload(dir: dir, kind: .floor, options: options)[0]
            keep("floor", plain: floor, tracked: floor)
            for width in options.widths {
                note("round \(round + 1)/\(options.repeats): \(width)-column table")
                var seconds: [Bool: Double] = [:]
                for tracked in order {
                    seconds[tracked] = try wideWorkload(dir: dir, columns: width, tracked: tracked,
                                                        updates: options.updates)
                }
                keep("width-\(width)", plain: seconds[false] ?? .infinity, tracked: seconds[true] ?? .infinity)
            }
        }
        let targets: [String: Double] = ["inserts": 1.10, "updates": 1.7, "deletes": 1.7]
        let floor = best["floor"]?.plain
        let counts = ["inserts": options.rows, "updates": options.updates, "deletes": options.deletes]
        let phases = ["inserts", "updates", "deletes"].map { name -> Phase in
            let (p, t) = best[name] ?? (0, 0)
            let ratio = t / p
            let floorSeconds = name == "inserts" ? floor : nil
            let floorRatio = floorSeconds.map { t / $0 }
            let judged = floorRatio ?? ratio
            return Phase(name: name, operations: counts[name] ?? 0, plainSeconds: p, trackedSeconds: t, ratio: ratio,
                         floorSeconds: floorSeconds, floorRatio: floorRatio, target: targets[name],
                         met: targets[name].map { judged <= $0 })
        }
        let widths = options.widths.map { w -> Width in
            let (p, t) = best["width-\(w)"] ?? (0, 0)
            return Width(columns: w, updates: options.updates, plainSeconds: p, trackedSeconds: t, ratio: t / p,
                         overheadMicroseconds: (t - p) / Double(options.updates) * 1_000_000)
        }
        return Report(sqliteVersion: Connection.libraryVersion, repeats: options.repeats, phases: phases,
                      widths: widths, instructions: try instructions(dir: dir))
    }

    static let instructionRows = 20_000

    /// Counts the instructions per inserted row inside `sqlite3_step` for each kind of table, running
    /// `storectl-bench trigger-cost KIND` under callgrind; nil when valgrind is not installed.
    static func instructions(dir: String) throws -> Instructions? {
        guard let valgrind = ProcessBenchmarks.which("valgrind") else {
            note("valgrind is not installed (apt-get install valgrind): no instruction counts")
            return nil
        }
        var perRow: [Kind: Double] = [:]
        for kind in Kind.allCases {
            note("instructions per insert, \(kind.rawValue) (callgrind)")
            let run = try Child.check([valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null",
                                       "--toggle-collect=sqlite3_step", CommandLine.arguments[0], "trigger-cost",
                                       kind.rawValue, "--rows", String(instructionRows), "--dir", dir], in: dir)
            // callgrind's summary on stderr: "==PID== Collected : 123456789".
            guard let line = run.stderr.split(separator: "\n").first(where: { $0.contains("Collected :") }),
                  let count = line.split(separator: " ").last.flatMap({ Double($0) })
            else {
                throw StoreError(.software, "callgrind printed no instruction count", hint: String(run.stderr.suffix(500)))
            }
            perRow[kind] = count / Double(instructionRows)
        }
        return Instructions(rows: instructionRows, plain: perRow[.plain] ?? 0, floor: perRow[.floor] ?? 0,
                            tracked: perRow[.tracked] ?? 0)
    }

    /// `storectl-bench trigger-cost plain|floor|tracked [--rows N] [--dir PATH]`: only the inserts, for callgrind.
    static func triggerCostMain(_ argv: [String]) throws {
        guard let kind = argv.first.flatMap(Kind.init(rawValue:)) else {
            throw StoreError(.usage, "usage: storectl-bench trigger-cost plain|floor|tracked [--rows N] [--dir PATH]")
        }
        var options = Options()
        options.rows = instructionRows
        var dir = NSTemporaryDirectory()
        var i = 1
        while i + 1 < argv.count {
            switch argv[i] {
            case "--rows": options.rows = Int(argv[i + 1]) ?? options.rows
            case "--dir": dir = argv[i + 1]
            default: throw StoreError(.usage, "unknown option '\(argv[i])'")
            }
            i += 2
        }
        options.updates = 0
        options.deletes = 0
        let folder = (dir as NSString).appendingPathComponent("trigger-cost-\(getpid())")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        _ = try notesWorkload(dir: folder, kind: kind, options: options)
    }

    static func note(_ text: String) {
        FileHandle.standardError.write(text + "\n")
    }

    /// Opens a fresh store in `dir`; with `tracked`, installs history tracking.
    static func freshStore(_ dir: String, _ name: String, schema: String, tracked: Bool, floor: Bool = false)
        throws -> (Connection, HistoryTracker?)
    {
        let suffix = tracked ? "-tracked" : floor ? "-floor" : "-plain"
        let path = (dir as NSString).appendingPathComponent(name + suffix + ".sqlite")
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        let db = try Connection(path: path)
        try db.execute(schema)
        if floor {
            // storectl's own history table, written by the constant trigger.
            try db.execute(StoreFormat.createTablesSQL)
            try db.execute(floorTrigger)
        }
        guard tracked else { return (db, nil) }
        let tracker = HistoryTracker(db: db, options: TrackingOptions(author: "bench"))
        try tracker.install()
        return (db, tracker)
    }

    /// Runs `body` in one transaction: a named storectl transaction when tracked, a plain one otherwise.
    static func timed(_ db: Connection, _ tracker: HistoryTracker?, _ body: () throws -> Void) throws -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        if let tracker {
            try tracker.write(body)
        } else {
            try db.transaction(.immediate, body)
        }
        let elapsed = clock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    static let body = String(repeating: "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", count: 4)

    /// Seconds for the inserts, the updates and the deletes.
    static func notesWorkload(dir: String, kind: Kind, options: Options) throws -> [Double] {
        let tracked = kind == .tracked
        let (db, tracker) = try freshStore(dir, "notes", schema: """
            CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL, body TEXT,
                               updated_at INTEGER NOT NULL)
            """, tracked: tracked, floor: kind == .floor)
        let insert = try db.prepare("INSERT INTO notes(id, uuid, title, body, updated_at) VALUES (?, ?, ?, ?, ?)")
        let inserts = try timed(db, tracker) {
            for i in 1...options.rows {
                let n = Int64(i)
                try insert.bind(.integer(n), at: 1)
                try insert.bind(.text("6f1c2a4e-0000-4000-8000-\(100_000_000_000 + i)"), at: 2)
                try insert.bind(.text("Note number \(i)"), at: 3)
                try insert.bind(.text(body), at: 4)
                try insert.bind(.integer(1_700_000_000_000 + n), at: 5)
                try insert.step()
            }
        }
        if kind == .floor || (options.updates == 0 && options.deletes == 0) { return [inserts] }
        // Spread the updated and deleted rows over the table with a fixed stride.
        let stride = max(1, options.rows / max(options.updates, options.deletes))
        let update = try db.prepare("UPDATE notes SET title = ?, updated_at = ? WHERE id = ?")
        let updates = try timed(db, tracker) {
            for k in 0..<options.updates {
                let id = Int64(1 + (k * stride) % options.rows)
                try update.bind(.text("Edited \(k)"), at: 1)
                try update.bind(.integer(1_800_000_000_000 + Int64(k)), at: 2)
                try update.bind(.integer(id), at: 3)
                try update.step()
            }
        }
        let delete = try db.prepare("DELETE FROM notes WHERE id = ?")
        let deletes = try timed(db, tracker) {
            for k in 0..<options.deletes {
                try delete.bind(.integer(Int64(1 + (k * stride) % options.rows)), at: 1)
                try delete.step()
            }
        }
        if let tracker {
            let expected = Int64(options.rows + options.updates + options.deletes)
            let recorded = try db.scalar("SELECT count(*) FROM _storectl_history")?.int64 ?? 0
            guard recorded == expected else {
                throw StoreError(.software, "the tracked run recorded \(recorded) history rows, expected \(expected)")
            }
            _ = tracker
        }
        return [inserts, updates, deletes]
    }

    /// Seconds for `updates` single-row updates of one column of a table with `columns` columns.
    static func wideWorkload(dir: String, columns: Int, tracked: Bool, updates: Int) throws -> Double {
        let names = (1..<columns).map { "c\($0)" }
        let (db, tracker) = try freshStore(dir, "wide\(columns)", schema: """
            CREATE TABLE wide(id INTEGER PRIMARY KEY, \(names.map { "\($0) TEXT" }.joined(separator: ", ")))
            """, tracked: tracked)
        let rows = 10_000
        try db.transaction {
            let values = String(repeating: ", 'value'", count: names.count)
            let insert = try db.prepare("INSERT INTO wide(id, \(names.joined(separator: ", "))) VALUES (?\(values))")
            for i in 1...rows {
                try insert.bind(.integer(Int64(i)), at: 1)
                try insert.step()
            }
        }
        let column = names[names.count / 2]
        let update = try db.prepare("UPDATE wide SET \(column) = ? WHERE id = ?")
        return try timed(db, tracker) {
            for k in 0..<updates {
                try update.bind(.text("v\(k)"), at: 1)
                try update.bind(.integer(Int64(1 + k % rows)), at: 2)
                try update.step()
            }
        }
    }

    static func render(_ report: Report) -> String {
        func f(_ x: Double, _ digits: Int = 3) -> String { String(format: "%.\(digits)f", x) }
        var lines = ["History tracking overhead (SQLite \(report.sqliteVersion), best of \(report.repeats))", ""]
        lines.append("phase      operations   plain s  tracked s   ratio   floor s  / floor  target")
        for p in report.phases {
            let target = p.target.map { "<= \(f($0, 2)) " + (p.met == true ? "ok" : "MISSED") } ?? ""
            lines.append(p.name.padding(toLength: 10, withPad: " ", startingAt: 0)
                         + String(p.operations).leftPad(11) + f(p.plainSeconds).leftPad(10)
                         + f(p.trackedSeconds).leftPad(11) + f(p.ratio, 2).leftPad(8)
                         + (p.floorSeconds.map { f($0) } ?? "").leftPad(10)
                         + (p.floorRatio.map { f($0, 2) } ?? "").leftPad(9) + "  " + target)
        }
        if let i = report.instructions {
            lines.append("")
            lines.append("instructions per insert inside sqlite3_step (callgrind, \(i.rows) rows): plain "
                         + "\(Int(i.plain)), constant trigger \(Int(i.floor)), storectl's trigger \(Int(i.tracked)): "
                         + "\(f(i.floorRatio, 2))x the floor (target <= 1.10), \(f(i.plainRatio, 2))x plain")
        }
        lines.append("")
        lines.append("single-column updates by table width (trigger cost must grow linearly):")
        lines.append("columns    updates   plain s  tracked s   ratio  overhead us/update")
        for w in report.widths {
            lines.append(String(w.columns).leftPad(7) + String(w.updates).leftPad(11) + f(w.plainSeconds).leftPad(10)
                         + f(w.trackedSeconds).leftPad(11) + f(w.ratio, 2).leftPad(8)
                         + f(w.overheadMicroseconds, 2).leftPad(20))
        }
        return lines.joined(separator: "\n")
    }
}

extension String {
    func leftPad(_ width: Int) -> String {
        count >= width ? " " + self : String(repeating: " ", count: width - count) + self
    }
}
