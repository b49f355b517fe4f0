import Foundation
import StoreBase

#if canImport(Glibc)
import Glibc
#endif

/// The PostgreSQL client programs the fleet benchmark uses: `psql` for its few reads of the server's counters and
/// its set-up and clean-up statements, `pgbench` for the server's floor. Both come from the server's bin folder
/// (`--pg-bin`, else STORECTL_TEST_PG_BIN, else PATH).
struct PGTools {
    let url: String
    let psql: String
    let pgbench: String?
    let scratch: String

    init(url: String, bin: String?, scratch: String) throws {
        self.url = url
        self.scratch = scratch
        func find(_ name: String) -> String? {
            if let bin, FileManager.default.isExecutableFile(atPath: "\(bin)/\(name)") { return "\(bin)/\(name)" }
            return ProcessBenchmarks.which(name)
        }
        guard let psql = find("psql") else {
            throw StoreError(.noInput, "no psql in \(bin ?? "PATH")",
                             hint: "install postgresql-client, or pass --pg-bin /usr/lib/postgresql/15/bin")
        }
        self.psql = psql
        pgbench = find("pgbench")
    }

    /// Runs `sql` in one psql process (unaligned, tuples only) and returns its output lines.
    /// - Throws: `StoreError` (69) when psql fails.
    @discardableResult
    func query(_ sql: String) throws -> [String] {
        let result = try Child.run([psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                                   environment: ["PGOPTIONS": "-c client_min_messages=warning"], in: scratch)
        guard result.status == 0 else {
            throw StoreError(.unavailable, "psql failed on \(Redaction.connectionString(url)): "
                             + result.stderr.trimmingCharacters(in: .whitespacesAndNewlines),
                             hint: "check --pg-url / STORECTL_TEST_PG_URL")
        }
        return result.stdout.split(separator: "\n").map(String.init)
    }

    /// Transactions committed and rolled back in the URL's database (`pg_stat_database`), by every client. A
    /// backend reports its counts when it goes idle (at most once a second, or on exit), so a reading lags by
    /// about that.
    func transactions() throws -> Double {
        Double(try query("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
            .first ?? "") ?? .nan
    }

    /// The postmaster's pid, when the server runs on this machine: the parent of the server's checkpointer.
    func postmaster() throws -> Int32? {
        guard let line = try query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'").first,
              let checkpointer = Int32(line), let stat = ProcStat.read(checkpointer),
              let parent = ProcStat.read(stat.ppid), parent.command.hasPrefix("postgres") || parent.command == "postmaster"
        else { return nil }
        return parent.pid
    }
}

/// The server's floor: pgbench running only what a fleet needs of PostgreSQL, with no storectl in the way.
///
/// A save is one transaction that locks the zone's row (`SELECT ... FOR UPDATE`), bumps its `last_seq`, inserts one
/// record and sends `pg_notify`; a delivery is the N - 1 other devices each reading the records after their token
/// through the `(zone, seq)` index. The tables are the container's `zones` and `records` as `cloud init` makes them
/// (keys with collation "C", the unique change-feed index, the JSON check), in a throwaway schema of their own.
/// pgbench runs N clients (one per device) at the fleet's total rate (`--rate` x N transactions a second), for
/// the same seconds. No session LISTENs, so the notifications cost the server their queueing only.
enum FleetFloor {
    struct Result {
        /// Records saved (and delivered) within the measured window.
        var records: Int
        var window: Double
        /// The whole server's CPU in the window.
        var serverCPU: Double?
        /// The CPU of pgbench's own sessions in the window.
        var sessionsCPU: Double?
        var sessions: Int
        /// Server processes started in the window, by any client.
        var forks: Int
        var latencyAverageMilliseconds: Double?
        var command: String
    }

    static func schemaName() -> String { "storectl_fleet_floor_\(getpid())" }

    /// The pgbench script of one record saved and delivered to `devices - 1` others.
    static func script(schema s: String, devices: Int) -> String {
        var lines = [
            "-- one record saved by this device",
            "BEGIN;",
            "SELECT last_seq FROM \(s).zones WHERE name = 'default' FOR UPDATE;",
            "UPDATE \(s).zones SET last_seq = last_seq + 1 WHERE name = 'default' RETURNING last_seq AS seq \\gset",
            """
            INSERT INTO \(s).records (zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by,
                modified_at)
              VALUES ('default', 'notes:["' || md5(:seq::text) || '"]', 'notes',
                json_build_object('uuid', md5(:seq::text), 'title', 'd' || :client_id || ' new ' || :seq,
                  'body', '\(Shape.body)', 'updated_at', :seq)::text,
                :seq || '-floor', :seq, false, 'device-' || :client_id, extract(epoch FROM now()));
            """,
            "SELECT pg_notify('\(s)', :seq::text);",
            "COMMIT;",
            "-- delivered: each other device reads what is after its token",
        ]
        for _ in 0..<max(0, devices - 1) {
            lines.append("SELECT record_name, record_type, fields, change_tag, seq, deleted FROM \(s).records "
                         + "WHERE zone = 'default' AND seq > :seq - 1 ORDER BY seq LIMIT 1000;")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static func setupSQL(schema s: String) -> String {
        """
        DROP SCHEMA IF EXISTS \(s) CASCADE;
        CREATE SCHEMA \(s);
        CREATE TABLE \(s).zones (name text PRIMARY KEY, epoch text NOT NULL, last_seq bigint NOT NULL DEFAULT 0,
                                 created_at double precision NOT NULL);
        CREATE TABLE \(s).records (zone text COLLATE "C" NOT NULL, record_name text COLLATE "C" NOT NULL,
            record_type text NOT NULL, fields text NOT NULL CHECK (json_typeof(fields::json) = 'object'),
            change_tag text NOT NULL, seq bigint NOT NULL, deleted boolean NOT NULL, modified_by text NOT NULL,
            modified_at double precision NOT NULL, PRIMARY KEY (zone, record_name));
        CREATE UNIQUE INDEX records_zone_seq ON \(s).records (zone, seq);
        INSERT INTO \(s).zones VALUES ('default', 'floor', 0, extract(epoch FROM now()));
        """
    }

    /// Runs pgbench at `rate` saves a second over `devices` clients, and measures the server over `seconds` of it:
    /// from 1 s after its start (its connections are made first) for `seconds`, counting the records whose
    /// transaction ended in that window (from pgbench's per-transaction log). Its sessions are found by their
    /// application_name. Drops its schema whatever happens.
    static func run(tools: PGTools, pgbench: String, server: ServerTree?, devices: Int, rate: Double,
                    seconds: Int) throws -> Result
    {
        let schema = schemaName()
        try tools.query(setupSQL(schema: schema))
        defer { _ = try? tools.query("DROP SCHEMA IF EXISTS \(schema) CASCADE") }
        let file = (tools.scratch as NSString).appendingPathComponent("floor.pgbench")
        try script(schema: schema, devices: devices).write(toFile: file, atomically: true, encoding: .utf8)
        let logPrefix = (tools.scratch as NSString).appendingPathComponent("floor-log")
        let appName = "storectl-fleet-floor-\(getpid())"
        let argv = [pgbench, "-n", "-c", String(devices), "-j", "1", "-R", String(format: "%g", rate),
                    "-T", String(seconds + 2), "-l", "--log-prefix=" + logPrefix, "-f", file, tools.url]
        let output = (tools.scratch as NSString).appendingPathComponent("floor.out")
        let process = try WatcherProcess(device: -1, argv: argv, environment: ["PGAPPNAME": appName],
                                         log: (tools.scratch as NSString).appendingPathComponent("floor.err"),
                                         stdoutFile: output)
        let monitor = try server.map { try SessionMonitor(tree: $0, psql: tools.psql, url: tools.url, appName: appName) }
        monitor?.start()
        defer { monitor?.stop() }
        Mono.sleep(until: Mono.now() + 1)
        let before = server?.sample()
        let from = Date().timeIntervalSince1970
        Mono.sleep(until: Mono.now() + Double(seconds))
        let after = server?.sample()
        let to = Date().timeIntervalSince1970
        let status = process.wait()
        let stdout = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0 else {
            let stderr = (try? String(contentsOfFile: (tools.scratch as NSString).appendingPathComponent("floor.err"),
                                      encoding: .utf8)) ?? ""
            throw StoreError(.software, "pgbench exited \(status)", hint: String((stdout + stderr).suffix(2000)))
        }
        var latency: Double?
        for line in stdout.split(separator: "\n") where line.hasPrefix("latency average =") {
            latency = Double(line.split(separator: "=")[1].trimmingCharacters(in: .whitespaces)
                .split(separator: " ")[0])
        }
        // pgbench's log: "client_id transaction_no time script_no time_epoch time_us [schedule_lag]", one line
        // per transaction, written when it ends ("skipped" or "failed" in the time column otherwise).
        var records = 0
        let logs = (try? FileManager.default.contentsOfDirectory(atPath: tools.scratch))?
            .filter { $0.hasPrefix("floor-log") } ?? []
        for name in logs {
            let text = (try? String(contentsOfFile: (tools.scratch as NSString).appendingPathComponent(name),
                                    encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n") {
                let f = line.split(separator: " ")
                guard f.count >= 6, Int(f[2]) != nil, let s = Double(f[4]), let us = Double(f[5]) else { continue }
                let end = s + us / 1e6
                if end >= from && end <= to { records += 1 }
            }
        }
        guard records > 0 else {
            throw StoreError(.software, "pgbench ended no transaction in the measured window",
                             hint: String(stdout.suffix(2000)))
        }
        let cpu = before.flatMap { b in
            after.map { ServerTree.cpu(from: b, to: $0) - (monitor?.ownCPU(from: b, to: $0) ?? 0) }
        }
        let sessions = before.flatMap { b in after.flatMap { monitor?.cpu(from: b, to: $0) } }
        let shown = argv.enumerated().map { i, a in
            i == argv.count - 1 ? "'\(Redaction.connectionString(a))'" : a
        }.joined(separator: " ")
        return Result(records: records, window: to - from, serverCPU: cpu, sessionsCPU: sessions?.cpu,
                      sessions: sessions?.sessions ?? 0, forks: sessions?.forks ?? 0,
                      latencyAverageMilliseconds: latency, command: shown)
    }
}
