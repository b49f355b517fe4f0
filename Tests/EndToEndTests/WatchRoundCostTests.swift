import Foundation
import StoreCloudPostgres
import TestSupport
import XCTest

/// What a `storectl watch` round costs a PostgreSQL server: the account is checked once per session, the device row
/// written once per session, a notification that brings nothing new starts no round, and an idle watcher asks the
/// server nothing between notifications. Read from the server itself: `pg_stat_activity` (a session that runs a
/// statement moves its `state_change`, and shows its last statement) and the `devices` row's `xmin` (a write gives it
/// a new one).
final class WatchRoundCostTests: WatchTestCase {
    override func backend() throws -> Backend { try Self.postgresBackend() }

    private var serverURL: String { ProcessInfo.processInfo.environment["STORECTL_TEST_PG_URL"] ?? "" }

    @discardableResult
    private func psql(_ p: E2EProject, _ sql: String) throws -> String {
        let r = try Binary.run("/usr/bin/psql", [serverURL, "-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql],
                               in: p.dir.path)
        XCTAssertEqual(r.status, 0, "\(sql)\n\(r.stderr)")
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private var container: String { cachedBackend?.container ?? "" }
    private var account: String { cachedBackend?.account ?? "postgres" }
    private var schema: String { PostgresCloudDatabase.schemaName(container: container) }

    /// The last activity of the watcher's sessions on the server, the `LISTEN` session apart: one line per session,
    /// `pid|state_change`. A statement run on a session changes its line.
    private func activity(_ p: E2EProject) throws -> String {
        try psql(p, """
            SELECT string_agg(pid || '|' || state_change, ',' ORDER BY pid) FROM pg_stat_activity
            WHERE application_name = '\(container)' AND query NOT LIKE 'LISTEN %'
            """)
    }

    /// A watcher on b (polling every `interval` seconds), settled: its first round done and its listener up.
    private func settledWatcher(_ p: E2EProject, interval: String = "1") throws -> BackgroundProcess {
        let b = try watch(p, ["--store", "b", "--json", "--interval", interval])
        XCTAssertTrue(b.wait(upTo: 15) { b.stderr.contains("in cloud mode: syncing") }, b.transcript)
        Thread.sleep(forTimeInterval: 3)
        return b
    }

    /// The watcher's sessions (the `LISTEN` session apart), each with its last statement: `pid|query`.
    private func sessions(_ p: E2EProject) throws -> [String] {
        try psql(p, """
            SELECT pid || '|' || left(query, 25) FROM pg_stat_activity
            WHERE application_name = '\(container)' AND query NOT LIKE 'LISTEN %' ORDER BY pid
            """).split(separator: "\n").map(String.init)
    }

    func testAnIdleWatcherPollsWithOneStatementOnItsSession() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let b = try settledWatcher(p)
        let first = try sessions(p)
        XCTAssertEqual(first.count, 1, "the watcher keeps one session: \(first) \(b.transcript)")
        let pid = first.first?.split(separator: "|").first.map(String.init)
        // Eight polls pass (--interval 1): each is the one statement that asks whether the session's check still
        // stands and reads the zone; no new session, no account check, no device row.
        var seen = Set<String>()
        for _ in 0..<16 {
            Thread.sleep(forTimeInterval: 0.5)
            for line in try sessions(p) {
                XCTAssertEqual(line.split(separator: "|").first.map(String.init), pid, "a new session: \(line)")
                seen.insert(String(line.split(separator: "|", maxSplits: 1).last ?? ""))
            }
        }
        XCTAssertEqual(seen, ["SELECT (SELECT value FROM"], "\(seen)")
        // A save by another device is heard and fetched at once.
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('heard')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(try eventually(15) { try notes(p, "b") == "heard|\n" }, b.transcript)
    }

    func testAPurgeWhileTheWatcherIdlesIsReportedAtItsNextPoll() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let b = try settledWatcher(p)
        // A purge sends no notification: the poll finds the zone's new epoch.
        try p.run(["--store", "a", "cloud", "purge", "--yes"])
        let error = b.waitForEvent(upTo: 15) { $0["type"] as? String == "error" }
        XCTAssertNotNil(error, b.transcript)
        XCTAssertTrue(b.stderr.contains("purged") || b.stderr.contains("reupload"), b.transcript)
    }

    func testALoginTakenAwayMidSessionIsMetAtTheNextRound() throws {
        let p = try E2EProject()
        let (role, b) = try watcherOfAGrantedRole(p)
        Thread.sleep(forTimeInterval: 1.5)
        try psql(p, "ALTER ROLE \(role) NOLOGIN")
        _ = try p.sql("b", "INSERT INTO notes(uuid) VALUES ('after')")
        let error = b.waitForEvent(upTo: 15) { $0["type"] as? String == "error" }
        XCTAssertEqual((error?["error"] as? [String: Any])?["code"] as? Int, 69, b.transcript)
        try p.run(["--store", "a", "sync"])
        XCTAssertEqual(try notes(p, "a"), "", "nothing was saved by a role that may not log in")
        try psql(p, "ALTER ROLE \(role) LOGIN")
        XCTAssertTrue(try eventually(20) {
            _ = try p.run(["--store", "a", "sync"])
            return try notes(p, "a") == "after|\n"
        }, b.transcript)
    }

    /// Store a in cloud mode as the test server's account; store b in cloud mode as a role of the test's own
    /// (`grantedRole`, dropped when the test ends), and its watcher, syncing.
    private func watcherOfAGrantedRole(_ p: E2EProject) throws -> (role: String, watcher: BackgroundProcess) {
        try makeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        let role = try grantedRole(p)
        addTeardownBlock { [self] in
            _ = try? psql(p, "DROP OWNED BY \(role) CASCADE; DROP ROLE IF EXISTS \(role)")
        }
        let b = try watch(p, ["--store", "b", "--json", "--max-backoff", "2"])
        XCTAssertTrue(b.wait(upTo: 15) { b.stderr.contains("in cloud mode: syncing") }, b.transcript)
        return (role, b)
    }

    /// A role of the test's own, granted on the container, that store b signs in as (`--accept-owner`).
    private func grantedRole(_ p: E2EProject) throws -> String {
        let role = "cost_\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
        try psql(p, "CREATE ROLE \(role) LOGIN")
        let grants = try p.run(["--store", "a", "cloud", "init", "--print-grants"])
        try psql(p, grants.stdout.replacingOccurrences(of: "\"\(account)\"", with: role)
            .replacingOccurrences(of: " TO \(account)", with: " TO \(role)"))
        // Store a's account owns the zone; b's role syncs it through a read-write share.
        try PostgresCloudDatabase(url: serverURL, container: container, account: account)
            .addShare(zone: "default", account: role, permission: .readWrite)
        let yaml = try p.dir.read("config.yaml")
        let bStart = try XCTUnwrap(yaml.range(of: "  b:\n"))
        try p.dir.write("config.yaml", String(yaml[..<bStart.lowerBound]) + yaml[bStart.lowerBound...]
            .replacingOccurrences(of: "account: \(account)", with: "account: \(role)"))
        try p.run(["--store", "b", "mode", "cloud", "--accept-owner", account])
        return role
    }

    func testANotificationThatBringsNothingNewStartsNoRound() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('one')")
        try p.run(["--store", "a", "sync"])
        // No poll in the test's time: what the session runs is what the notifications started.
        let b = try settledWatcher(p, interval: "60")
        XCTAssertEqual(try notes(p, "b"), "one|\n", b.transcript)
        let zone = try psql(p, "SELECT epoch || '|' || last_seq FROM \"\(schema)\".zones WHERE name = 'default'")
        let parts = zone.split(separator: "|").map(String.init)
        let (epoch, seq) = (parts[0], try XCTUnwrap(Int(parts[1])))
        let own = try p.sql("b", "SELECT value FROM _storectl_meta WHERE key = 'store_id'")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        func notify(zone: String, device: String, epoch: String, seq: Int) throws {
            try psql(p, """
                SELECT pg_notify('\(schema)', json_build_object('zone', '\(zone)', 'device', '\(device)',
                                                                'epoch', '\(epoch)', 'seq', \(seq))::text)
                """)
        }
        let before = try activity(p)
        // A seq b has fetched already, a zone b does not sync, b's own save: nothing to fetch.
        try notify(zone: "default", device: "another-device", epoch: epoch, seq: seq)
        try notify(zone: "elsewhere", device: "another-device", epoch: epoch, seq: seq + 5)
        try notify(zone: "default", device: own, epoch: epoch, seq: seq + 5)
        Thread.sleep(forTimeInterval: 1.5)
        XCTAssertEqual(try activity(p), before, "a notification with nothing new started a round")
        // A seq after b's token is news: b asks the server (and finds nothing it lacks).
        try notify(zone: "default", device: "another-device", epoch: epoch, seq: seq + 1)
        XCTAssertTrue(try eventually(10) { try activity(p) != before }, "a notification of news started no round")
        // Another epoch is news too (the zone was purged or restored).
        Thread.sleep(forTimeInterval: 1.5)
        let after = try activity(p)
        try notify(zone: "default", device: "another-device", epoch: "another-epoch", seq: 1)
        XCTAssertTrue(try eventually(10) { try activity(p) != after }, "a notification of another epoch started no round")
        XCTAssertTrue(b.isRunning, b.transcript)
    }

    func testTheDeviceRowIsWrittenOncePerSession() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let b = try settledWatcher(p)
        let id = try p.sql("b", "SELECT value FROM _storectl_meta WHERE key = 'store_id'")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        func row() throws -> String {
            try psql(p, "SELECT xmin || '|' || last_seen FROM \"\(schema)\".devices WHERE store_id = '\(id)'")
        }
        let first = try row()
        XCTAssertFalse(first.isEmpty, "b is registered")
        // Rounds that export and rounds that import.
        for i in 0..<3 {
            _ = try p.sql("b", "INSERT INTO notes(uuid) VALUES ('b\(i)')")
            XCTAssertNotNil(b.waitForEvent(upTo: 15) { $0["type"] as? String == "export" && ($0["saved"] as? Int ?? 0) > 0
                && b.jsonLines.filter { $0["type"] as? String == "export" }.count > i }, b.transcript)
            _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('a\(i)')")
            try p.run(["--store", "a", "sync"])
            XCTAssertTrue(try eventually(15) { try notes(p, "b").contains("a\(i)|") }, b.transcript)
        }
        XCTAssertEqual(try row(), first, "the device row was written again in the same session")
        // A new session registers again.
        b.send(SIGTERM)
        XCTAssertEqual(b.waitForExit(upTo: 15), 0, b.transcript)
        try p.run(["--store", "b", "sync"])
        XCTAssertNotEqual(try row(), first)
    }

    func testAPrivilegeRevokedMidSessionIsNoticedAtTheNextSave() throws {
        let p = try E2EProject()
        let (role, b) = try watcherOfAGrantedRole(p)
        _ = try p.sql("b", "INSERT INTO notes(uuid) VALUES ('before')")
        XCTAssertNotNil(b.waitForEvent(upTo: 15) { $0["type"] as? String == "export" }, b.transcript)
        // The owner takes the right to write records away in the middle of b's session.
        try psql(p, "REVOKE INSERT, UPDATE ON \"\(schema)\".records FROM \(role)")
        _ = try p.sql("b", "INSERT INTO notes(uuid) VALUES ('after')")
        let error = b.waitForEvent(upTo: 15) { $0["type"] as? String == "error" }
        // The refused save (77), or the account check of the session that follows it (69: restricted).
        XCTAssertTrue([69, 77].contains((error?["error"] as? [String: Any])?["code"] as? Int ?? 0), b.transcript)
        try p.run(["--store", "a", "sync"])
        XCTAssertEqual(try notes(p, "a"), "before|\n", "nothing was saved without the right")
        // Granted again: the retry checks the account again, and the row goes through.
        try psql(p, "GRANT INSERT, UPDATE ON \"\(schema)\".records TO \(role)")
        XCTAssertTrue(try eventually(20) {
            _ = try p.run(["--store", "a", "sync"])
            return try notes(p, "a") == "after|\nbefore|\n"
        }, b.transcript)
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("sync works again after") }, b.stderr)
    }
}
