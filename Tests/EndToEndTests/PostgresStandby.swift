import Foundation
import TestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A hot standby of the test PostgreSQL server (`STORECTL_TEST_PG_URL`), of the test's own: made with
/// `pg_basebackup -R -X stream`, started on a socket folder of its own, stopped and deleted at the end. A test may
/// pause its replay, stop it or promote it without disturbing any other test.
final class PostgresStandby {
    let directory: String
    let bin: String
    let port = 5433
    /// Where the standby writes its log (every statement with `logStatements`).
    var logPath: String { directory + "/log" }
    var url: String { "postgresql://postgres@/postgres?host=\(directory)&port=\(port)" }
    private let logStatements: Bool
    /// The primary's URL, and the replication slot the standby streams through.
    private let primary: String
    private let slot: String
    /// The primary's settings a standby must not have lower, as `-c name=value` options.
    private let settings: String
    private var running = false

    /// Nil (after failing the test when PostgreSQL is required) without a server or its binaries.
    /// - Parameter logStatements: the standby logs every statement it runs (`log_statement = all`), so that a
    ///   test can tell what was read on it.
    static func make(logStatements: Bool = false, file: StaticString = #filePath, line: UInt = #line) throws
        -> PostgresStandby?
    {
        let env = ProcessInfo.processInfo.environment
        let required = env["STORECTL_REQUIRE_PG"] == "1"
        var bin = env["STORECTL_TEST_PG_BIN"] ?? ""
        if bin.isEmpty {
            let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
            if let newest = versions.compactMap({ Int($0) }).max() { bin = "/usr/lib/postgresql/\(newest)/bin" }
        }
        guard let socket = env["STORECTL_TEST_PG_SOCKET_DIR"], !socket.isEmpty,
              FileManager.default.isExecutableFile(atPath: bin + "/pg_basebackup")
        else {
            if required {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_SOCKET_DIR or the server binaries "
                    + "(STORECTL_TEST_PG_BIN) are missing", file: file, line: line)
            } else {
                print("note: no PostgreSQL server to make a standby of; this test did nothing")
            }
            return nil
        }
        guard let primary = env["STORECTL_TEST_PG_URL"], !primary.isEmpty else {
            if required { XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set", file: file, line: line) }
            return nil
        }
        // A standby refuses to start with a lower setting of these than its primary's (a server started with
        // `-c max_connections=...` does not have it in the postgresql.conf that pg_basebackup copies).
        let names = ["max_connections", "max_worker_processes", "max_wal_senders", "max_prepared_transactions",
                     "max_locks_per_transaction"]
        let values = try psql(url: primary, "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) "
                                  + "FROM pg_settings WHERE name IN ('\(names.joined(separator: "', '"))')",
                              in: "/tmp", file: file, line: line)
        let settings = values.split(separator: " ").map { "-c \($0)" }.joined(separator: " ")
        return try PostgresStandby(bin: bin, primary: primary, primarySocket: socket, settings: settings,
                                   logStatements: logStatements)
    }

    private init(bin: String, primary: String, primarySocket: String, settings: String, logStatements: Bool) throws {
        self.bin = bin
        self.primary = primary
        self.slot = "storectl_standby_" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        self.settings = settings
        self.logStatements = logStatements
        var template = Array("/tmp/storectl-standby-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buf in buf.baseAddress.map { mkdtemp($0) != nil } ?? false }
        guard made else { throw CocoaError(.fileWriteUnknown) }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if getuid() == 0, let pw = getpwnam("postgres") { chown(directory, pw.pointee.pw_uid, pw.pointee.pw_gid) }
        // A replication slot of its own keeps the primary's WAL until the standby has it: a standby stopped while
        // other tests write much WAL catches up when started again, rather than finding its segments recycled.
        // The slot is made and reserves WAL before the backup starts: `pg_basebackup -C` makes it only once the
        // backup is under way, and a checkpoint in between (other tests writing) can recycle the segment the
        // backup starts in ("requested WAL segment ... has already been removed").
        _ = try Self.psql(url: primary, "SELECT 1 FROM pg_create_physical_replication_slot('\(slot)', true)", in: "/tmp")
        try run(bin + "/pg_basebackup", ["-D", directory + "/data", "-R", "-X", "stream", "-c", "fast",
                                         "-S", slot, "-h", primarySocket, "-U", "postgres"])
        try start()
    }

    deinit {
        if running { try? run(bin + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "stop"]) }
        // The primary's sender may still hold the slot for a moment after the standby stopped.
        let psql = (ProcessInfo.processInfo.environment["STORECTL_TEST_PG_BIN"] ?? "/usr/bin") + "/psql"
        for _ in 0..<50 {
            let r = try? Binary.run(psql, ["-X", "-q", "-d", primary, "-c", "SELECT pg_drop_replication_slot(slot_name) "
                                           + "FROM pg_replication_slots WHERE slot_name = '\(slot)'"], in: "/tmp")
            if r?.status == 0 { break }
            usleep(100_000)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    func start() throws {
        let logging = logStatements ? " -c log_statement=all" : ""
        try run(bin + "/pg_ctl", ["-D", directory + "/data", "-l", logPath, "-w", "-t", "60", "-o",
                                  "-k \(directory) -c listen_addresses='' -c port=\(port) -c fsync=off \(settings)\(logging)",
                                  "start"])
        running = true
    }

    func stop() throws {
        try run(bin + "/pg_ctl", ["-D", directory + "/data", "-m", "fast", "-w", "stop"])
        running = false
    }

    /// Runs SQL on the standby; returns its rows (unaligned, tuples only).
    @discardableResult
    func psql(_ sql: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        try Self.psql(url: url, sql, in: directory, file: file, line: line)
    }

    /// Runs SQL on a server with `psql`; returns its rows (unaligned, tuples only), trimmed.
    static func psql(url: String, _ sql: String, in directory: String, file: StaticString = #filePath,
                     line: UInt = #line) throws -> String
    {
        let bin = (ProcessInfo.processInfo.environment["STORECTL_TEST_PG_BIN"] ?? "/usr/bin") + "/psql"
        let r = try Binary.run(bin, ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                               in: directory)
        if r.status != 0 { XCTFail("psql: \(sql)\n\(r)", file: file, line: line) }
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Waits until the standby has replayed everything the primary at `primaryURL` has written so far.
    func waitForReplay(of primaryURL: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let target = try Self.psql(url: primaryURL, "SELECT pg_current_wal_lsn()", in: directory)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if try psql("SELECT pg_last_wal_replay_lsn() >= '\(target)'::pg_lsn") == "t" { return }
            usleep(50_000)
        }
        XCTFail("the standby did not replay up to \(target) within 30 s", file: file, line: line)
    }

    /// Pauses the standby's replay: it keeps answering, with what it had replayed.
    func pauseReplay() throws {
        try psql("SELECT pg_wal_replay_pause()")
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, try psql("SELECT pg_get_wal_replay_pause_state()") != "paused" { usleep(20_000) }
    }

    func resumeReplay() throws { try psql("SELECT pg_wal_replay_resume()") }

    /// Promotes the standby to a server of its own (`pg_promote()`), and waits until it takes writes.
    func promote() throws {
        try psql("SELECT pg_promote(true, 30)")
    }

    /// How many pages of a change feed the standby was asked for (with `logStatements`): the lines of its log
    /// that start storectl's change-feed statement.
    func changeFeedReads() -> Int {
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return log.split(separator: "\n").filter { $0.contains("pg_is_in_recovery(), r.record_name") }.count
    }

    private func run(_ program: String, _ args: [String]) throws {
        try ScratchPostgres.runServerProgram(program, args, in: directory)
    }
}
