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
        var transactions: Int
        var seconds: Double
        var serverCPU: Double?
        var serverTransactions: Double
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

    /// Runs pgbench for `seconds` at `rate` saves a second over `devices` clients, with the server's CPU measured
    /// around it; drops its schema whatever happens.
    static func run(tools: PGTools, pgbench: String, server: ServerTree?, devices: Int, rate: Double,
                    seconds: Int) throws -> Result
    {
        let schema = schemaName()
        try tools.query(setupSQL(schema: schema))
        defer { _ = try? tools.query("DROP SCHEMA IF EXISTS \(schema) CASCADE") }
        let file = (tools.scratch as NSString).appendingPathComponent("floor.pgbench")
        try script(schema: schema, devices: devices).write(toFile: file, atomically: true, encoding: .utf8)
        let argv = [pgbench, "-n", "-c", String(devices), "-j", "1", "-R", String(format: "%g", rate),
                    "-T", String(seconds), "-f", file, tools.url]
        let transactionsBefore = try tools.transactions()
        usleep(200_000)
        let before = server?.sample()
        let run = try Child.run(argv, in: tools.scratch)
        let after = server?.sample()
        guard run.status == 0 else {
            throw StoreError(.software, "pgbench exited \(run.status)", hint: String(run.stderr.suffix(2000)))
        }
        // Its backends have exited, and reported their counts on the way out.
        usleep(500_000)
        let transactionsAfter = try tools.transactions()
        var processed = 0
        var latency: Double?
        for line in run.stdout.split(separator: "\n") {
            if line.hasPrefix("number of transactions actually processed:") {
                let digits = line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces).prefix { $0.isNumber }
                processed = Int(digits) ?? 0
            } else if line.hasPrefix("latency average =") {
                latency = Double(line.split(separator: "=")[1].trimmingCharacters(in: .whitespaces)
                    .split(separator: " ")[0])
            }
        }
        guard processed > 0 else {
            throw StoreError(.software, "pgbench processed no transaction", hint: String(run.stdout.suffix(2000)))
        }
        let cpu = before.flatMap { b in after.map { ServerTree.cpu(from: b, to: $0) } }
        let shown = argv.enumerated().map { i, a in
            i == argv.count - 1 ? "'\(Redaction.connectionString(a))'" : a
        }.joined(separator: " ")
        return Result(transactions: processed, seconds: run.seconds, serverCPU: cpu,
                      serverTransactions: transactionsAfter - transactionsBefore,
                      latencyAverageMilliseconds: latency, command: shown)
    }
}
