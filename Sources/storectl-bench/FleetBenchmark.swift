import Foundation
import StoreBase
import StoreCloudPostgres
import StoreSQLite

#if canImport(Glibc)
import Glibc
#endif

/// `storectl-bench fleet`: N devices, each its own store and its own `storectl watch` process, syncing through a
/// PostgreSQL container while each device's app writes R changes a second. What a fleet of machines running
/// storectl costs them and the server, and how soon a change made on one is on all the others.
enum FleetBenchmark {
    static let help = """
        usage: storectl-bench fleet [--devices N] [--rate R] [--seconds S] [--references] [--pg-url URL]
                                    [--pg-bin DIR] [--storectl PATH] [--no-pgbench] [--dir PATH] [--keep]
                                    [--json] [--json-file PATH]

        A fleet of N devices on one PostgreSQL server: a throwaway container ('storectl cloud init'), N stores
        (each its own folder, config.yaml and SQLite file, put in cloud mode with 'storectl mode cloud'), and one
        'storectl watch --json' process per device with its default options, as on N machines. Each device
        first writes one row and the run waits until every device has every other's (the warm-up). Then, for S
        seconds, each device's app writes R changes a second into its own store through libsqlite3: one row of
        notes(uuid TEXT PRIMARY KEY, title, body, updated_at) per BEGIN IMMEDIATE ... COMMIT, 70% inserts of new
        rows, 30% updates of one of its rows that every device already has. Then it waits for every change to
        reach every device, checks that every store holds exactly the rows the apps wrote, and stops the watchers.
        --references adds a second table to the schema, note_links(id INTEGER PRIMARY KEY, note TEXT NOT NULL
        REFERENCES notes(uuid) ON DELETE CASCADE, label TEXT NOT NULL), which the apps leave empty: the same
        writes, in stores whose schema declares a foreign key (an import then defers the foreign key checks of
        its transaction, which makes SQLite compile the watcher's prepared statements again).

        Measured:
          latency      from a change's COMMIT on its device until the last other device's watcher printed the
                       'import' event naming its key (events read from each watcher's stdout as they come,
                       timed by this benchmark on arrival): p50, p95, p99, max over the changes of the window
          app writes   BEGIN IMMEDIATE ... COMMIT of the app's transactions, which wait for storectl's write lock
                       (busy timeout 10 s): p50, p99, max
          saved        records saved at the server per second ('saved' of the watchers' export events)
          storectl CPU utime + stime of the watcher processes (/proc/PID/stat), per change and in % of one core
          server CPU   the postmaster and every process it forked (/proc; the server must run on this machine),
                       per change and in % of one core; the same for 5 s before the run, when no client of
                       this benchmark is connected, is the server's background (other clients, housekeeping)
          sessions CPU the server processes of the watchers' sessions only (application_name set through
                       PGAPPNAME, read from pg_stat_activity every 0.05 s by one psql session whose own CPU is
                       taken off the server's; a session shorter than that, and each one's last 0.05 s, can be
                       missed: a floor of what the watchers cost the server, free of other clients' work),
                       and the server processes started per change
          transactions pg_stat_database xact_commit + xact_rollback of the database, from the window's start
                       until the watchers exited, less the background's rate, per change
          convergence  the time from the writers' end until the last change reached its last device, and the rows
                       lost, stale, duplicated or unexpected on any store (exit 65 when any)
          floor        pgbench (from --pg-bin) with N clients at R x N transactions a second for S seconds, each a
                       save (zone row FOR UPDATE, last_seq + 1, one record inserted, pg_notify) and N - 1 reads of
                       the records after a token, in a throwaway schema: the server's CPU per record saved and
                       delivered, and storectl's server CPU per change over it (both less the background's
                       rate); and its sessions' CPU, exact for pgbench, whose sessions last the run
        The CPU figures and the rate are taken over the S-second window of writes (the drain after it is not in
        them, the work of the window's first changes before it is not either).
        --rate 0 measures N idle watchers instead: storectl and server CPU over S seconds, no writes, no floor.

        options:
          --devices N       devices, each a store and a watcher process (default 8)
          --rate R          changes a second each device's app writes (default 2; 0: idle watchers)
          --seconds S       length of the window of writes (default 30)
          --pg-url URL      the PostgreSQL server (default: $STORECTL_TEST_PG_URL); its role needs CREATE on the
                            database; the container and the floor's schema are dropped at the end
          --pg-bin DIR      where psql and pgbench are (default: $STORECTL_TEST_PG_BIN, else PATH)
          --storectl PATH   the storectl binary (default: the one next to storectl-bench)
          --no-pgbench      leave the floor out
          --dir PATH        scratch folder parent (default: the temporary folder)
          --keep            keep the scratch folder (stores, configs, the watchers' events and logs)
          --json            one JSON document on stdout (keys sorted); progress goes to stderr
          --json-file PATH  also write the JSON document to PATH
        """

    struct Options {
        var devices = 8
        var rate = 2.0
        var seconds = 30
        /// The schema declares a foreign key (`note_links`, left empty).
        var references = false
        var pgURL: String?
        var pgBin: String?
        var storectl: String?
        var pgbench = true
        var directory: String?
        var keep = false
        var json = false
        var jsonFile: String?

        /// The options that decide the figures, written out in full (the URL without its password), for the
        /// command that reproduces the run.
        var reproducing: [String] {
            var args = ["--devices", String(devices), "--rate", String(format: "%g", rate), "--seconds",
                        String(seconds)]
            if references { args.append("--references") }
            if let pgURL { args += ["--pg-url", "'\(Redaction.connectionString(pgURL))'"] }
            if let pgBin { args += ["--pg-bin", pgBin] }
            if let storectl { args += ["--storectl", storectl] }
            if !pgbench { args.append("--no-pgbench") }
            return args
        }
    }

    static func parse(_ argv: [String]) throws -> Options? {
        var o = Options()
        var i = 0
        func value() throws -> String {
            i += 1
            guard i < argv.count else { throw StoreError(.usage, "missing value for \(argv[i - 1])") }
            return argv[i]
        }
        func number(_ text: String, min: Double) throws -> Double {
            guard let n = Double(text), n >= min, n.isFinite else {
                throw StoreError(.usage, "\(argv[i - 1]) expects a number >= \(Int(min)), got '\(text)'")
            }
            return n
        }
        while i < argv.count {
            let option = argv[i]
            switch option {
            case "--devices": o.devices = Int(try number(try value(), min: 1))
            case "--rate": o.rate = try number(try value(), min: 0)
            case "--seconds": o.seconds = Int(try number(try value(), min: 1))
            case "--pg-url": o.pgURL = try value()
            case "--pg-bin": o.pgBin = try value()
            case "--storectl": o.storectl = try value()
            case "--references": o.references = true
            case "--no-pgbench": o.pgbench = false
            case "--dir": o.directory = try value()
            case "--keep": o.keep = true
            case "--json": o.json = true
            case "--json-file": o.jsonFile = try value()
            case "--help", "-h":
                print(help)
                return nil
            default:
                throw StoreError(.usage, "unknown option '\(option)'", hint: "see 'storectl-bench fleet --help'")
            }
            i += 1
        }
        if o.devices < 2 && o.rate > 0 {
            throw StoreError(.usage, "--devices must be at least 2 to measure delivery (or use --rate 0)")
        }
        return o
    }

    static func main(_ argv: [String]) throws {
        guard let options = try parse(argv) else { return }
        // A child that dies early must not take the benchmark with it when it writes to the child's pipe.
        signal(SIGPIPE, SIG_IGN)
        let run = try FleetRun(options)
        defer { run.cleanUp() }
        let report = try run.measure()
        try emit(report, options: options)
        if !report.converged {
            throw StoreError(.dataError, "the stores did not end equal: " + report.convergence,
                             hint: options.keep ? "the stores are in \(run.dir)" : "run again with --keep to look at them")
        }
    }

    // MARK: Report

    struct Report: Encodable {
        var benchmark = "fleet"
        /// The command that reproduces the run (the URL without its password).
        var command: String
        var devices: Int
        var rate: Double
        var seconds: Int
        var storectl: String
        var storectlVersion: String
        var server: String
        var serverVersion: String
        var machine: Machine
        var loadAverageAtEnd: String
        var figures: [Figure]
        var converged: Bool
        /// The convergence check in words.
        var convergence: String
        /// How each figure was measured, in words.
        var methods: [String]
        /// Error events of the watchers (first few), and anything else worth reading next to the figures.
        var notes: [String]
        var elapsedSeconds: Double

        enum CodingKeys: String, CodingKey {
            case benchmark, command, devices, rate, seconds, storectl, server, machine, figures, converged
            case convergence, methods, notes
            case storectlVersion = "storectl_version"
            case serverVersion = "server_version"
            case loadAverageAtEnd = "load_average_at_end"
            case elapsedSeconds = "elapsed_seconds"
        }
    }

    static func emit(_ report: Report, options: Options) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let document = try encoder.encode(report)
        if let file = options.jsonFile {
            do {
                try (document + Data("\n".utf8)).write(to: URL(fileURLWithPath: file))
            } catch {
                throw StoreError(.cantCreate, "cannot write \(file): \(error.localizedDescription)")
            }
        }
        if options.json {
            print(String(decoding: document, as: UTF8.self))
        } else {
            print(render(report))
        }
    }

    static func render(_ r: Report) -> String {
        let m = r.machine
        var lines = [
            "storectl-bench fleet: \(r.devices) devices x \(String(format: "%g", r.rate)) changes/s for \(r.seconds) s; "
                + "\(r.storectlVersion), \(r.serverVersion)",
            "\(m.cores) cores, \(m.cpu), load \(m.loadAverage) at the start, \(r.loadAverageAtEnd) at the end, "
                + String(format: "%.0f s in all", r.elapsedSeconds),
            "reproduce: \(r.command)",
            "",
        ]
        lines += Output.table(r.figures)
        lines.append("")
        lines.append("convergence: \(r.convergence)")
        lines.append("")
        lines.append("how:")
        lines += r.methods.map { "  - " + $0 }
        if !r.notes.isEmpty {
            lines.append("")
            lines.append("notes:")
            lines += r.notes.map { "  - " + $0 }
        }
        return lines.joined(separator: "\n")
    }

    /// The value at quantile `q` of `sorted` (nearest rank), or nan when empty.
    static func quantile(_ sorted: [Double], _ q: Double) -> Double {
        guard !sorted.isEmpty else { return .nan }
        let rank = Int((q * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }
}

/// One run of the fleet benchmark: its scratch folder, container, watcher processes, and their clean-up.
final class FleetRun {
    let options: FleetBenchmark.Options
    let dir: String
    let url: String
    let tools: PGTools
    let storectl: String
    let container: String
    /// The role storectl logs in as: the server's answer to `current_user` for the URL.
    private(set) var role = ""
    private var watchers: [WatcherProcess] = []
    private var containerCreated = false
    let tracker: FleetTracker
    private var notes: [String] = []
    static let secretVariable = "STORECTL_FLEET_SECRET"
    let appName = "storectl-fleet-\(getpid())"

    init(_ options: FleetBenchmark.Options) throws {
        self.options = options
        let environment = ProcessInfo.processInfo.environment
        guard let url = options.pgURL ?? environment["STORECTL_TEST_PG_URL"].flatMap({ $0.isEmpty ? nil : $0 }) else {
            throw StoreError(.usage, "no PostgreSQL server: pass --pg-url URL or set STORECTL_TEST_PG_URL",
                             hint: "the fleet benchmark needs a PostgreSQL server it may create a schema in")
        }
        self.url = url
        let base = options.directory ?? NSTemporaryDirectory()
        dir = (base as NSString).appendingPathComponent("storectl-fleet-\(getpid())")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        tools = try PGTools(url: url, bin: options.pgBin ?? environment["STORECTL_TEST_PG_BIN"], scratch: dir)
        storectl = try Lab.storectlBinary(options.storectl)
        container = "bench.fleet.\(getpid()).\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
        tracker = FleetTracker(devices: options.devices)
        // The URL's password, if any, reaches storectl through cloud.secret (it passes it to libpq next to the
        // URL); without one, libpq's own sources (PGPASSWORD, ~/.pgpass) or the server's trust decide.
        let secret = (try? PostgresConnectionString.settings(url))?.first { $0.key == "password" }?.value
        setenv(Self.secretVariable, secret ?? environment["PGPASSWORD"] ?? "unused-without-password", 1)
    }

    func device(_ d: Int) -> String { (dir as NSString).appendingPathComponent(String(format: "d%02d", d)) }
    func config(_ d: Int) -> String { device(d) + "/config.yaml" }
    func store(_ d: Int) -> String { device(d) + "/store.sqlite" }

    /// Runs `storectl ARGS` for device `d` and throws unless it exits 0.
    private func storectl(_ d: Int, _ args: [String]) throws {
        _ = try Child.check([storectl, "--config", config(d), "--quiet"] + args, in: dir)
    }

    /// Stops the watchers still running, drops the container, removes the scratch folder unless --keep.
    func cleanUp() {
        for w in watchers { w.stop(grace: 5) }
        watchers = []
        if containerCreated {
            let schema = PostgresSchemaName.of(container)
            do {
                try tools.query("DROP SCHEMA IF EXISTS \(schema) CASCADE")
            } catch {
                Output.note("could not drop the container's schema \(schema): \(error)")
            }
            containerCreated = false
        }
        if options.keep {
            Output.note("kept the scratch folder \(dir)")
        } else {
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    // MARK: Set-up

    private func writeConfigs() throws {
        let schema = (dir as NSString).appendingPathComponent("schema.sql")
        try ("""
            CREATE TABLE IF NOT EXISTS notes(uuid TEXT PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL,
                                             updated_at INTEGER NOT NULL);

            """ + (options.references ? """
            CREATE TABLE IF NOT EXISTS note_links(id INTEGER PRIMARY KEY,
                                                  note TEXT NOT NULL REFERENCES notes(uuid) ON DELETE CASCADE,
                                                  label TEXT NOT NULL);

            """ : "")).write(toFile: schema, atomically: true, encoding: .utf8)
        let yamlURL = url.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        for d in 0..<options.devices {
            try FileManager.default.createDirectory(atPath: device(d), withIntermediateDirectories: true)
            let yaml = """
                version: 1
                stores:
                  notes:
                    path: store.sqlite
                    schema: \(schema)
                    history:
                      author: app
                    cloud:
                      container: \(container)
                      url: "\(yamlURL)"
                      account: \(role)
                      secret: ${\(Self.secretVariable)}

                """
            try yaml.write(toFile: config(d), atomically: true, encoding: .utf8)
            chmod(config(d), 0o600)
        }
    }

    /// The container, the stores in cloud mode, one seed row each, and the watchers started and warmed up: every
    /// device has every other's seed row.
    private func setUp() throws {
        role = try tools.query("SELECT current_user").first ?? "postgres"
        try writeConfigs()
        Output.note("fleet: container \(container) on \(Redaction.connectionString(url)), \(options.devices) stores")
        try storectl(0, ["cloud", "init"])
        containerCreated = true
        let setup = try Clock.seconds {
            for d in 0..<options.devices {
                try storectl(d, ["init"])
                try storectl(d, ["mode", "cloud"])
            }
        }
        Output.note(String(format: "  %d stores initialised and in cloud mode in %.1f s", options.devices, setup))
        var rng = SystemRandomNumberGenerator()
        for d in 0..<options.devices {
            let db = try Connection(path: store(d), mode: .readWrite, busyTimeout: FleetWriter.busyTimeoutMilliseconds,
                                    foreignKeys: false)
            guard FleetWriter.write(db, tracker: tracker, device: d, measured: false, rng: &rng) else {
                throw StoreError(.software, "device \(d): the seed row could not be written")
            }
        }
        for d in 0..<options.devices {
            // Each watcher's sessions carry this application_name (libpq reads PGAPPNAME), so that their
            // server processes can be told from other clients'.
            watchers.append(try WatcherProcess(device: d, argv: [storectl, "--config", config(d), "watch", "--json"],
                                               environment: ["PGAPPNAME": appName], log: device(d) + "/watch.log"))
        }
        let tracker = self.tracker
        let keep = options.keep
        let eventFiles: [Int32] = keep ? (0..<options.devices).map {
            open(device($0) + "/events.jsonl", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        } : []
        EventPump(watchers) { device, line, at in
            tracker.event(device: device, line: line, at: at)
            if keep, device < eventFiles.count {
                let text = String(line) + "\n"
                _ = text.withCString { write(eventFiles[device], $0, strlen($0)) }
            }
        }.start()
        let warm = Mono.now()
        let warmDeadline = warm + 60 + 2 * Double(options.devices)
        guard tracker.waitDelivered(until: warmDeadline) else {
            throw StoreError(.software, "the warm-up did not converge: \(tracker.undelivered) of \(options.devices) "
                             + "seed rows never reached every device in \(Int(warmDeadline - warm)) s",
                             hint: "run with --keep and read the watchers' logs (dNN/watch.log)")
        }
        Output.note(String(format: "  warm-up: every seed row on every device %.1f s after the watchers started",
                           Mono.now() - warm))
        // Let the warm-up's rounds finish (exports of the import's echo, the listeners' wake-ups).
        tracker.waitQuiet(2, until: Mono.now() + 15)
    }

    // MARK: Measuring

    func measure() throws -> FleetBenchmark.Report {
        let started = Mono.now()
        let machine = Machine.current(sqliteVersion: Connection.libraryVersion)
        let version = (try? Child.run([storectl, "--version"], in: dir).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)) ?? "storectl ?"
        let serverVersion = (try tools.query("SHOW server_version").first).map { "PostgreSQL " + $0 } ?? "PostgreSQL ?"
        let server = try tools.postmaster().map(ServerTree.init)
        if server == nil {
            notes.append("the server is not on this machine (or its processes are not visible): no server CPU")
        }
        // The server's background: its CPU and the database's transactions with none of this benchmark's clients
        // connected (other clients, the server's own housekeeping), as rates.
        let background: Double?
        let backgroundTransactions: Double
        do {
            let x0 = try tools.transactions(), x0At = Mono.now()
            usleep(300_000)
            let b0 = server?.sample()
            Mono.sleep(until: Mono.now() + 5)
            let b1 = server?.sample()
            let x1 = try tools.transactions()
            backgroundTransactions = (x1 - x0) / (Mono.now() - x0At)
            background = b0.flatMap { a in b1.map { ServerTree.cpu(from: a, to: $0) / ($0.at - a.at) } }
        }
        try setUp()

        let zoneSeq = "SELECT coalesce((SELECT last_seq FROM \(PostgresSchemaName.of(container)).zones "
            + "WHERE name = 'default'), 0)"
        let seqBefore = Double(try tools.query(zoneSeq).first ?? "") ?? .nan
        let transactionsBefore = try tools.transactions()
        let transactionsBeforeAt = Mono.now()
        let monitor = try server.map {
            try SessionMonitor(tree: $0, psql: tools.psql, url: url, appName: appName)
        }
        monitor?.start()
        defer { monitor?.stop() }
        usleep(300_000)
        let t0 = Mono.now() + 0.05
        let t1 = t0 + Double(options.seconds)
        Mono.sleep(until: t0)
        let watcherCPU0 = watchers.map { ProcStat.read($0.pid)?.cpu ?? .nan }
        let server0 = server?.sample()
        let group = DispatchGroup()
        let results = WriterResults(options.devices)
        if options.rate > 0 {
            Output.note("fleet: \(options.devices) apps writing \(String(format: "%g", options.rate)) changes/s each "
                        + "for \(options.seconds) s")
            for d in 0..<options.devices {
                let path = store(d), devices = options.devices, rate = options.rate, tracker = self.tracker
                group.enter()
                Thread {
                    let r = FleetWriter.run(store: path, device: d, devices: devices, rate: rate, start: t0, end: t1,
                                            tracker: tracker)
                    results.set(d, r)
                    group.leave()
                }.start()
            }
        } else {
            Output.note("fleet: \(options.devices) idle watchers for \(options.seconds) s")
        }
        Mono.sleep(until: t1)
        let server1 = server?.sample()
        let watcherCPU1 = watchers.map { ProcStat.read($0.pid)?.cpu ?? .nan }
        let window = (server1?.at ?? Mono.now()) - t0
        group.wait()

        // Convergence: every change on every device, then every store's rows against what the apps wrote.
        let stopped = Mono.now()
        let settleLimit = 60.0
        let delivered = options.rate > 0 ? tracker.waitDelivered(until: stopped + settleLimit) : true
        var check = compareStores()
        while !check.equal && Mono.now() < stopped + settleLimit {
            usleep(1_000_000)
            check = compareStores()
        }
        let seqAfter = Double(try tools.query(zoneSeq).first ?? "") ?? .nan
        var exits: [Int32] = []
        for w in watchers { exits.append(w.stop()) }
        watchers = []
        // The monitor's session ends too, so that its counts are in; its own queries are taken off.
        monitor?.stop()
        usleep(500_000)
        let transactionsAfter = try tools.transactions() - Double(monitor?.queries ?? 0)
        let transactionsAfterAt = Mono.now()
        let endedBadly = exits.enumerated().filter { $0.element != 0 }
        if !endedBadly.isEmpty {
            notes.append("watchers that did not exit 0 on SIGTERM: "
                         + endedBadly.map { "d\($0.offset) (\($0.element))" }.joined(separator: ", "))
        }

        var figures: [Figure] = []
        var methods: [String] = []
        let snapshot = tracker.withLock { (changes: tracker.changes, exports: tracker.exports, errors: tracker.errors,
                                           unmatched: tracker.unmatched, truncated: tracker.truncatedEvents,
                                           imports: tracker.imports) }
        let measured = snapshot.changes.filter { $0.measured && $0.missing >= 0 }
        let inWindow = measured.filter { $0.committed >= t0 && $0.committed <= t1 }
        let changes = Double(inWindow.count)
        let storectlCPU = zip(watcherCPU0, watcherCPU1).map { $1 - $0 }.reduce(0, +)
        // The monitor's own session is this benchmark's, not the fleet's: taken off the server's CPU.
        let serverCPU = server0.flatMap { a in
            server1.map { ServerTree.cpu(from: a, to: $0) - (monitor?.ownCPU(from: a, to: $0) ?? 0) }
        }
        let sessionsCPU = server0.flatMap { a in server1.flatMap { monitor?.cpu(from: a, to: $0) } }
        let writes = writerTotals(results)

        if options.rate > 0 {
            // Writes.
            let inserts = inWindow.filter(\.insert).count
            figures.append(Figure(id: "fleet.writes", what: "app writes, all devices", value: changes / window,
                                  unit: .perSecond, target: nil,
                                  detail: "\(inWindow.count) changes in \(String(format: "%.1f", window)) s "
                                      + "(\(inserts) inserts, \(inWindow.count - inserts) updates); "
                                      + "\(writes.failed) failed, \(writes.late) started > 50 ms late",
                                  numbers: ["changes": changes, "inserts": Double(inserts),
                                            "updates": Double(inWindow.count - inserts),
                                            "failed": Double(writes.failed), "late": Double(writes.late),
                                            "window_seconds": window]))
            let writeTimes = inWindow.map(\.writeSeconds).filter { !$0.isNaN }.sorted()
            let w50 = FleetBenchmark.quantile(writeTimes, 0.5), w99 = FleetBenchmark.quantile(writeTimes, 0.99)
            let wmax = writeTimes.last ?? .nan
            figures.append(Figure(id: "fleet.app_write.p50", what: "app write BEGIN IMMEDIATE..COMMIT, p50",
                                  value: w50 * 1000, unit: .milliseconds, target: nil,
                                  detail: "p99 \(ms(w99)), max \(ms(wmax)) over \(writeTimes.count) writes",
                                  numbers: ["p50_ms": w50 * 1000, "p99_ms": w99 * 1000, "max_ms": wmax * 1000,
                                            "writes": Double(writeTimes.count)]))
            figures.append(Figure(id: "fleet.app_write.p99", what: "app write, p99", value: w99 * 1000,
                                  unit: .milliseconds, target: nil, detail: "max \(ms(wmax))",
                                  numbers: ["p99_ms": w99 * 1000, "max_ms": wmax * 1000]))

            // Write to every device.
            let latencies = inWindow.compactMap { c in c.everywhere.map { $0 - c.committed } }.sorted()
            let firsts = inWindow.compactMap { c in c.arrivals.compactMap { $0 }.min().map { $0 - c.committed } }
                .sorted()
            let unseen = inWindow.count - latencies.count
            let q = { (p: Double) in FleetBenchmark.quantile(latencies, p) }
            let numbers: [String: Double] = [
                "p50_ms": q(0.5) * 1000, "p95_ms": q(0.95) * 1000, "p99_ms": q(0.99) * 1000,
                "max_ms": (latencies.last ?? .nan) * 1000, "changes": Double(latencies.count),
                "never_seen_everywhere": Double(unseen),
                "first_device_p50_ms": FleetBenchmark.quantile(firsts, 0.5) * 1000,
            ]
            figures.append(Figure(id: "fleet.latency.p50", what: "write to every other device, p50",
                                  value: q(0.5) * 1000, unit: .milliseconds, target: nil,
                                  detail: "\(latencies.count) changes x \(options.devices - 1) devices"
                                      + (unseen > 0 ? "; \(unseen) never seen arriving everywhere" : "")
                                      + "; first device p50 \(ms(FleetBenchmark.quantile(firsts, 0.5)))",
                                  numbers: numbers))
            figures.append(Figure(id: "fleet.latency.p95", what: "write to every other device, p95",
                                  value: q(0.95) * 1000, unit: .milliseconds, target: nil, detail: "",
                                  numbers: ["p95_ms": q(0.95) * 1000]))
            figures.append(Figure(id: "fleet.latency.p99", what: "write to every other device, p99",
                                  value: q(0.99) * 1000, unit: .milliseconds, target: nil, detail: "",
                                  numbers: ["p99_ms": q(0.99) * 1000]))
            figures.append(Figure(id: "fleet.latency.max", what: "write to every other device, max",
                                  value: (latencies.last ?? .nan) * 1000, unit: .milliseconds, target: nil,
                                  detail: "", numbers: ["max_ms": (latencies.last ?? .nan) * 1000]))
            methods.append("latency: each watcher's stdout (--json) is read as it is written; a change has arrived "
                           + "on a device when an 'import' event naming its key is read there, timed on this "
                           + "machine's monotonic clock against the app's COMMIT; a device writes only its own rows "
                           + "and updates only rows every device already has, so one change per key is in flight")

            // Saved at the server.
            let savedInWindow = snapshot.exports.filter { $0.at >= t0 && $0.at <= t1 }.map(\.saved).reduce(0, +)
            let exportEvents = snapshot.exports.filter { $0.at >= t0 && $0.at <= t1 }.count
            figures.append(Figure(id: "fleet.saved", what: "records saved at the server",
                                  value: Double(savedInWindow) / window, unit: .perSecond, target: nil,
                                  detail: "\(savedInWindow) in \(exportEvents) exports in the window; zone last_seq "
                                      + "+\(Int(seqAfter - seqBefore)) by the end for \(measured.count) changes",
                                  numbers: ["saved": Double(savedInWindow), "export_events": Double(exportEvents),
                                            "zone_seq_delta": seqAfter - seqBefore,
                                            "changes_total": Double(measured.count)]))
        }

        // CPU.
        let perChange = { (cpu: Double) in changes > 0 ? cpu / changes * 1000 : .nan }
        figures.append(Figure(id: "fleet.storectl_cpu.percent", what: "storectl CPU, all watchers",
                              value: storectlCPU / window, unit: .coreShare, target: nil,
                              detail: String(format: "%.2f s CPU in %.1f s", storectlCPU, window)
                                  + String(format: ", %.2f%% of a core per watcher",
                                           storectlCPU / window / Double(options.devices) * 100),
                              numbers: ["cpu_seconds": storectlCPU, "window_seconds": window]))
        if options.rate > 0 {
            figures.append(Figure(id: "fleet.storectl_cpu.per_change", what: "storectl CPU per change",
                                  value: perChange(storectlCPU), unit: .milliseconds, target: nil,
                                  detail: "all \(options.devices) watchers: the export on its device and the "
                                      + "\(options.devices - 1) imports",
                                  numbers: ["cpu_ms_per_change": perChange(storectlCPU)]))
        }
        if let serverCPU, let a = server0, let b = server1 {
            let bg = background ?? .nan
            let parts = ServerTree.breakdown(from: a, to: b)
            figures.append(Figure(id: "fleet.server_cpu.percent", what: "server CPU, postmaster and children",
                                  value: serverCPU / window, unit: .coreShare, target: nil,
                                  detail: String(format: "%.2f s CPU in %.1f s: postmaster %.2f s, server processes "
                                                 + "that exited %.2f s, alive at the end %.2f s; the server's "
                                                 + "background before the run (other clients, housekeeping): %.1f%%",
                                                 serverCPU, window, parts.postmaster, parts.exited, parts.alive,
                                                 bg * 100),
                                  numbers: ["cpu_seconds": serverCPU, "window_seconds": window,
                                            "background_share": bg, "postmaster_seconds": parts.postmaster,
                                            "exited_seconds": parts.exited, "alive_seconds": parts.alive]))
            if options.rate > 0 {
                figures.append(Figure(id: "fleet.server_cpu.per_change", what: "server CPU per change",
                                      value: perChange(serverCPU), unit: .milliseconds, target: nil,
                                      detail: String(format: "the background's rate taken off: %.2f ms",
                                                     perChange(serverCPU - bg * window)),
                                      numbers: ["cpu_ms_per_change": perChange(serverCPU),
                                                "net_cpu_ms_per_change": perChange(serverCPU - bg * window)]))
            }
        }
        if let sessionsCPU {
            figures.append(Figure(id: "fleet.sessions_cpu.percent",
                                  what: "server CPU, the watchers' sessions as seen alive (a floor)",
                                  value: sessionsCPU.cpu / window, unit: .coreShare, target: nil,
                                  detail: String(format: "%.2f s CPU in %d sessions of the %d watchers; %d server "
                                                 + "processes started in the window (by any client)",
                                                 sessionsCPU.cpu, sessionsCPU.sessions, options.devices,
                                                 sessionsCPU.forks),
                                  numbers: ["cpu_seconds": sessionsCPU.cpu, "sessions": Double(sessionsCPU.sessions),
                                            "forks": Double(sessionsCPU.forks)]))
            if options.rate > 0 {
                figures.append(Figure(id: "fleet.sessions_cpu.per_change",
                                      what: "server CPU per change, the watchers' sessions seen alive",
                                      value: perChange(sessionsCPU.cpu), unit: .milliseconds, target: nil,
                                      detail: String(format: "server processes only, not the WAL writer, checkpointer "
                                                     + "or other shared work; %.2f of the watchers' sessions per "
                                                     + "change (%.2f server processes started per change by any "
                                                     + "client)", Double(sessionsCPU.sessions) / changes,
                                                     Double(sessionsCPU.forks) / changes),
                                      numbers: ["cpu_ms_per_change": perChange(sessionsCPU.cpu),
                                                "sessions_per_change": Double(sessionsCPU.sessions) / changes,
                                                "forks_per_change": Double(sessionsCPU.forks) / changes]))
            }
        }
        let transactions = transactionsAfter - transactionsBefore
        let txSpan = transactionsAfterAt - transactionsBeforeAt
        let netTransactions = transactions - backgroundTransactions * txSpan
        if options.rate > 0 {
            let total = Double(measured.count)
            figures.append(Figure(id: "fleet.server_transactions.per_change", what: "server transactions per change",
                                  value: total > 0 ? netTransactions / total : .nan, unit: .number, target: nil,
                                  detail: "\(Int(transactions)) in the database from the window's start until the "
                                      + "watchers exited (\(String(format: "%.0f", txSpan)) s), less the background's "
                                      + String(format: "%.1f/s, for %d changes", backgroundTransactions, measured.count),
                                  numbers: ["transactions": transactions, "changes": total,
                                            "span_seconds": txSpan, "background_per_second": backgroundTransactions,
                                            "raw_per_change": total > 0 ? transactions / total : .nan]))
        } else {
            figures.append(Figure(id: "fleet.server_transactions.rate", what: "server transactions, idle fleet",
                                  value: netTransactions / txSpan, unit: .perSecond, target: nil,
                                  detail: "\(Int(transactions)) in the database from the window's start until the "
                                      + "watchers exited (\(String(format: "%.0f", txSpan)) s), less the background's "
                                      + String(format: "%.1f/s", backgroundTransactions),
                                  numbers: ["transactions": transactions, "span_seconds": txSpan,
                                            "background_per_second": backgroundTransactions]))
        }
        methods.append("CPU: utime + stime from /proc/PID/stat (10 ms ticks) of the \(options.devices) watcher "
                       + "processes, and of the postmaster with every child (exited children through its "
                       + "cutime + cstime), read at the start and end of the \(options.seconds)-s window; per "
                       + "change = CPU in the window / changes committed in it; % = of one core")
        methods.append("sessions: the server processes whose pg_stat_activity.application_name is the watchers' "
                       + "(PGAPPNAME), polled every 0.05 s with their CPU; a session shorter than the poll, and the "
                       + "last stretch of each one that exits, are not seen, so this is a floor")
        methods.append("transactions: pg_stat_database xact_commit + xact_rollback of the database, less the "
                       + "background's rate measured before the run; the span includes the drain and the watchers' "
                       + "exit")

        // Convergence.
        let lastArrival = snapshot.changes.compactMap(\.everywhere).max() ?? stopped
        let convergeSeconds = delivered && check.equal ? max(0, lastArrival - t1) : .nan
        let convergence: String
        if options.rate > 0 {
            convergence = (check.equal ? "every store holds the same \(check.rows) rows, the ones the apps wrote"
                           : check.summary)
                + (delivered ? String(format: "; the last change reached its last device %.2f s after the writers' "
                                      + "end", convergeSeconds)
                    : "; \(tracker.undelivered) change(s) never seen arriving everywhere within \(Int(settleLimit)) s")
            figures.append(Figure(id: "fleet.converge.seconds", what: "converged after the writers' end",
                                  value: convergeSeconds * 1000, unit: .milliseconds, target: nil,
                                  detail: check.equal ? "\(check.rows) rows on each of \(options.devices) stores, equal"
                                      : "NOT EQUAL: " + check.summary,
                                  numbers: ["rows": Double(check.rows), "lost": Double(check.lost),
                                            "stale": Double(check.stale), "duplicated": Double(check.duplicated),
                                            "unexpected": Double(check.unexpected), "equal": check.equal ? 1 : 0]))
            figures.append(Figure(id: "fleet.rows_wrong", what: "rows lost, stale, duplicated or unexpected",
                                  value: Double(check.lost + check.stale + check.duplicated + check.unexpected),
                                  unit: .count, target: .atMost(0),
                                  detail: "lost \(check.lost), stale \(check.stale), duplicated \(check.duplicated), "
                                      + "unexpected \(check.unexpected), summed over the stores",
                                  numbers: ["lost": Double(check.lost), "stale": Double(check.stale),
                                            "duplicated": Double(check.duplicated),
                                            "unexpected": Double(check.unexpected)]))
        } else {
            convergence = check.equal ? "every store holds the same \(check.rows) seed rows" : check.summary
        }

        // The floor.
        if options.rate > 0 && options.pgbench {
            if let pgbench = tools.pgbench {
                Output.note("floor: pgbench, \(options.devices) clients at "
                            + String(format: "%g", options.rate * Double(options.devices)) + " saves/s for "
                            + "\(options.seconds) s")
                let floor = try FleetFloor.run(tools: tools, pgbench: pgbench, server: server, devices: options.devices,
                                               rate: options.rate * Double(options.devices), seconds: options.seconds)
                if floor.sessions != options.devices {
                    notes.append("pgbench: \(floor.sessions) sessions found by their application_name for its "
                                 + "\(options.devices) clients")
                }
                let records = Double(floor.records)
                var numbers: [String: Double] = ["records": records, "window_seconds": floor.window,
                                                 "sessions": Double(floor.sessions),
                                                 "latency_average_ms": floor.latencyAverageMilliseconds ?? .nan]
                if let cpu = floor.serverCPU {
                    numbers["cpu_seconds"] = cpu
                    numbers["cpu_ms_per_record"] = cpu / records * 1000
                }
                if let cpu = floor.sessionsCPU {
                    numbers["sessions_cpu_seconds"] = cpu
                    numbers["sessions_cpu_ms_per_record"] = cpu / records * 1000
                }
                if let cpu = floor.serverCPU, let serverCPU {
                    let floorPer = cpu / records * 1000
                    let ours = perChange(serverCPU)
                    // Both less the background's rate measured before the run: other clients of a shared server
                    // weigh far more on the floor's few milliseconds than on storectl's.
                    let bg = background ?? 0
                    let floorNet = (cpu - bg * floor.window) / records * 1000
                    let oursNet = perChange(serverCPU - bg * window)
                    figures.append(Figure(id: "floor.server_cpu.per_record",
                                          what: "pgbench floor: server CPU per record saved and delivered",
                                          value: floorPer, unit: .milliseconds, target: nil,
                                          detail: String(format: "%d records in %.1f s, %.2f s server CPU (%.1f%% of "
                                                         + "a core)", floor.records, floor.window, cpu,
                                                         cpu / floor.window * 100),
                                          numbers: numbers))
                    // Whole server on both sides, as measured: whatever other clients did in each window is
                    // in it. Less the background's rate (read once, before the run) only when that leaves both
                    // positive: on a busy shared server it can take off more than the floor used.
                    let net = oursNet > 0 && floorNet > 0
                        ? String(format: "; less the background's rate %.2f vs %.2f ms (%.1fx)", oursNet, floorNet,
                                 oursNet / floorNet)
                        : "; less the background's rate: not meaningful, the background varied more than the floor"
                    figures.append(Figure(id: "floor.ratio", what: "server CPU per change, storectl / pgbench floor",
                                          value: ours / floorPer, unit: .ratio, target: nil,
                                          detail: String(format: "%.2f ms vs %.2f ms, whole server", ours, floorPer)
                                              + net,
                                          numbers: ["storectl_ms": ours, "floor_ms": floorPer,
                                                    "storectl_net_ms": oursNet, "floor_net_ms": floorNet]))
                }
                if let cpu = floor.sessionsCPU {
                    let floorPer = cpu / records * 1000
                    figures.append(Figure(id: "floor.sessions_cpu.per_record",
                                          what: "pgbench floor: its sessions' CPU per record (they last the run)",
                                          value: floorPer, unit: .milliseconds, target: nil,
                                          detail: String(format: "%d sessions, %.2f s CPU; %d server processes "
                                                         + "started in the window", floor.sessions, cpu, floor.forks),
                                          numbers: numbers))
                }
                methods.append("floor: " + floor.command + " (script: a save = BEGIN; zone row FOR UPDATE; "
                               + "last_seq + 1; one record inserted; pg_notify; COMMIT; a delivery = "
                               + "\(options.devices - 1) reads of the records after a token by (zone, seq); "
                               + "tables as the container's, in a throwaway schema dropped after)")
            } else {
                figures.append(Figure(id: "floor.server_cpu.per_record",
                                      what: "pgbench floor: server CPU per record saved and delivered",
                                      unit: .milliseconds, target: nil,
                                      skipped: "skipped: no pgbench in \(options.pgBin ?? "PATH")"))
            }
        }

        if snapshot.unmatched > 0 {
            notes.append("\(snapshot.unmatched) imported change(s) named a key with no change in flight")
        }
        if snapshot.truncated > 0 { notes.append("\(snapshot.truncated) import event(s) had their changes cut short") }
        if !snapshot.errors.isEmpty {
            notes.append("\(snapshot.errors.count) error event(s); first: "
                         + snapshot.errors.prefix(3).map { "d\($0.device): \($0.message)" }.joined(separator: "; "))
        }
        if let background, background > 0.05 {
            notes.append(String(format: "the server used %.0f%% of a core for other clients before the run: its "
                                + "whole-server figures carry their work too", background * 100))
        }
        notes.append("the machine's other work shares its cores with the watchers, the apps, this benchmark and "
                     + "the server: the figures are indicative of where the cost is, not of a dedicated machine")
        let command = ([(options.pgURL == nil ? "STORECTL_TEST_PG_URL='\(Redaction.connectionString(url))' " : "")
                        + CommandLine.arguments[0], "fleet"] + options.reproducing).joined(separator: " ")
        return FleetBenchmark.Report(command: command, devices: options.devices, rate: options.rate,
                                     seconds: options.seconds, storectl: storectl, storectlVersion: version,
                                     server: Redaction.connectionString(url), serverVersion: serverVersion,
                                     machine: machine,
                                     loadAverageAtEnd: Machine.current(sqliteVersion: "").loadAverage,
                                     figures: figures, converged: check.equal, convergence: convergence,
                                     methods: methods, notes: notes, elapsedSeconds: Mono.now() - started)
    }

    // MARK: Checking the stores

    struct StoreCheck {
        var equal = true
        var rows = 0
        var lost = 0
        var stale = 0
        var duplicated = 0
        var unexpected = 0
        var problems: [String] = []

        var summary: String {
            equal ? "equal" : "NOT EQUAL: " + problems.prefix(6).joined(separator: "; ")
        }
    }

    /// Every store's rows against the rows the apps last wrote: a row missing (lost), with an older value
    /// (stale), a logical row under two keys (duplicated: the title names the device and the write that made it),
    /// or a key no app wrote (unexpected).
    func compareStores() -> StoreCheck {
        var check = StoreCheck()
        let expected = tracker.withLock { tracker.expected }
        check.rows = expected.count
        for d in 0..<options.devices {
            var rows: [String: FleetTracker.RowValue] = [:]
            do {
                let db = try Connection(path: store(d), mode: .readOnly, busyTimeout: 5000, wal: false,
                                        foreignKeys: false)
                for row in try db.query("SELECT uuid, title, body, updated_at FROM notes") {
                    rows[row[0].string ?? ""] = FleetTracker.RowValue(title: row[1].string ?? "",
                                                                      body: row[2].string ?? "",
                                                                      updatedAt: row[3].int64 ?? -1)
                }
            } catch {
                check.equal = false
                check.problems.append("d\(d): cannot read the store: \(error)")
                continue
            }
            var lost = 0, stale = 0, unexpected = 0
            for (key, value) in expected {
                guard let row = rows[key] else {
                    lost += 1
                    continue
                }
                if row != value { stale += 1 }
            }
            for key in rows.keys where expected[key] == nil { unexpected += 1 }
            var titles: [String: Int] = [:]
            for row in rows.values { titles[row.title, default: 0] += 1 }
            let duplicated = titles.values.filter { $0 > 1 }.map { $0 - 1 }.reduce(0, +)
            if lost + stale + unexpected + duplicated > 0 {
                check.equal = false
                check.problems.append("d\(d): \(rows.count) rows, lost \(lost), stale \(stale), duplicated "
                                      + "\(duplicated), unexpected \(unexpected)")
            }
            check.lost += lost
            check.stale += stale
            check.unexpected += unexpected
            check.duplicated += duplicated
        }
        return check
    }

    private func writerTotals(_ results: WriterResults) -> (written: Int, failed: Int, late: Int) {
        results.all.reduce((0, 0, 0)) { ($0.0 + $1.written, $0.1 + $1.failed, $0.2 + $1.late) }
    }
}

/// The writer threads' counts, one slot per device.
final class WriterResults: @unchecked Sendable {
    private let lock = NSLock()
    private var slots: [(written: Int, failed: Int, late: Int)]

    init(_ devices: Int) { slots = Array(repeating: (0, 0, 0), count: devices) }

    func set(_ device: Int, _ value: (written: Int, failed: Int, late: Int)) { lock.withLock { slots[device] = value } }
    var all: [(written: Int, failed: Int, late: Int)] { lock.withLock { slots } }
}

/// The PostgreSQL schema of a container, quoted for SQL, as `cloud init` names it.
enum PostgresSchemaName {
    static func of(_ container: String) -> String {
        "\"" + PostgresCloudDatabase.schemaName(container: container).replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
