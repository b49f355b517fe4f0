import Foundation
import TestSupport
import XCTest

/// What the `storectl watch` tests share: a config of stores on one container, watchers run in the background,
/// and the JSON-lines contract.
class WatchTestCase: XCTestCase {
    struct Backend {
        var url: String
        var account: String
        var container: String
        var isPostgres: Bool
    }

    func backend() throws -> Backend {
        Backend(url: "file:cloud/shared.container", account: "demo", container: "iCloud.com.example.watch",
                isPostgres: false)
    }

    /// A container of the test's own on the test server (`STORECTL_TEST_PG_URL`).
    static func postgresBackend() throws -> Backend {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (see .ci/run)")
            }
            throw XCTSkip("no PostgreSQL server (set STORECTL_TEST_PG_URL)")
        }
        let suffix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let container = "iCloud.com.example.watch\(suffix)"
        // The test's own sessions carry its container as their application name, so that a test that ends
        // sessions ends only its own (tests run side by side on one server).
        return Backend(url: url + (url.contains("?") ? "&" : "?") + "application_name=\(container)",
                       account: env["PGUSER"] ?? "postgres", container: container, isPostgres: true)
    }

    var cachedBackend: Backend?
    private var watchers: [BackgroundProcess] = []

    override func tearDown() {
        for w in watchers where w.isRunning { w.send(SIGKILL) }
        watchers = []
        super.tearDown()
    }

    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS tags(name TEXT PRIMARY KEY, color TEXT);
        """

    /// A config whose stores share one container; `cloudExtra` adds lines under each store's `cloud:`.
    func makeConfig(_ p: E2EProject, stores: [String] = ["a", "b"], cloudExtra: [String: String] = [:]) throws {
        let b = try cachedBackend ?? backend()
        cachedBackend = b
        try p.writeSchema(Self.schema)
        try p.writeConfig(stores.map { name in
            let extra = (cloudExtra[name] ?? "").split(separator: "\n").map(String.init)
            return E2EProject.Store(name, path: "data/\(name).sqlite", before: ["mode: local"],
                                    cloud: E2EProject.Cloud(container: b.container, url: b.url, account: b.account,
                                                            createIfMissing: !b.isPostgres, extra: extra))
        })
        if b.isPostgres, !FileManager.default.fileExists(atPath: p.dir.file("data")) {
            try p.run(["--store", stores[0], "cloud", "init"])
        }
    }

    func notes(_ p: E2EProject, _ store: String) throws -> String {
        try p.sql(store, "SELECT uuid, title FROM notes ORDER BY uuid")
    }

    /// Starts `storectl watch ARGS` (with `--interval 1` unless given), kept until the test ends.
    func watch(_ p: E2EProject, _ args: [String], env: [String: String] = [:]) throws -> BackgroundProcess {
        var all = ["watch"] + args
        if !args.contains("--interval") { all += ["--interval", "1"] }
        let w = try BackgroundProcess.storectl(all, in: p.dir.path, environment: p.environment.merging(env) { $1 })
        watchers.append(w)
        return w
    }

    /// Waits until `body` returns true, up to `timeout` seconds.
    func eventually(_ timeout: Double = 20, _ body: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try body() { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return try body()
    }

    /// Checks the JSON-lines contract on every line: a JSON object, `"version": 1`, a known `type`, the store,
    /// and snake_case keys all the way down.
    func assertJSONLines(_ w: BackgroundProcess, file: StaticString = #filePath, line: UInt = #line) {
        func keys(_ value: Any) -> [String] {
            if let object = value as? [String: Any] { return object.keys + object.values.flatMap(keys) }
            if let array = value as? [Any] { return array.flatMap(keys) }
            return []
        }
        for text in w.lines {
            guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
                XCTFail("not a JSON object: \(text)", file: file, line: line)
                continue
            }
            XCTAssertEqual(object["version"] as? Int, 1, text, file: file, line: line)
            XCTAssertTrue(["import", "export", "error", "retry", "mode"].contains(object["type"] as? String ?? ""), text,
                          file: file, line: line)
            XCTAssertNotNil(object["store"] as? String, text, file: file, line: line)
            XCTAssertNotNil(object["at"] as? String, text, file: file, line: line)
            for key in keys(object) where key != "$blob" {
                XCTAssertNotNil(key.range(of: "^[a-z][a-z0-9_]*$", options: .regularExpression),
                                "key \(key) is not snake_case in \(text)", file: file, line: line)
            }
        }
    }

    /// Two stores in cloud mode, a in front of b.
    func twoCloudStores(_ p: E2EProject, cloudExtra: [String: String] = [:]) throws {
        try makeConfig(p, cloudExtra: cloudExtra)
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
    }
}

/// `storectl watch` through the real binary: stores that sync by themselves, the events scripts read, the hook,
/// signals, the mode switches and the sync state in `status`. The stores share a container file (and, in the
/// subclass, a PostgreSQL container).
class WatchTests: WatchTestCase {
    // MARK: - The proof

    func testASqliteWriteOnOneStoreReachesTheOtherThroughTwoWatchers() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let a = try watch(p, ["--store", "a", "--json"])
        let b = try watch(p, ["--store", "b", "--json"])
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'from a'); "
                    + "INSERT INTO tags(name, color) VALUES ('red', 'f00')")
        // One import event, or two when the container woke b between the two tables' batches (PostgreSQL).
        func imports(_ w: BackgroundProcess) -> [[String: Any]] { w.jsonLines.filter { $0["type"] as? String == "import" } }
        XCTAssertTrue(b.wait(upTo: 20) { imports(b).reduce(0) { $0 + ($1["count"] as? Int ?? 0) } >= 2 }, b.transcript)
        let events = imports(b)
        let event = try XCTUnwrap(events.last)
        XCTAssertEqual(try notes(p, "b"), "n1|from a\n")
        XCTAssertEqual(event["store"] as? String, "b")
        XCTAssertEqual(event["author"] as? String, "cloud-import")
        XCTAssertEqual(events.reduce(0) { $0 + ($1["count"] as? Int ?? 0) }, 2)
        XCTAssertEqual(Set(events.flatMap { $0["entities"] as? [String] ?? [] }), ["notes", "tags"])
        let changes = events.flatMap { $0["changes"] as? [[String: Any]] ?? [] }
        XCTAssertEqual(changes.compactMap { $0["op"] as? String }, ["insert", "insert"])
        XCTAssertEqual(Set(changes.compactMap { $0["entity"] as? String }), ["notes", "tags"])
        let tagKey = changes.first { $0["entity"] as? String == "tags" }?["key"] as? [String]
        XCTAssertEqual(tagKey, ["red"])
        // The token is a history token: `history --after` the one before lists exactly these changes.
        let token = try XCTUnwrap(event["token"] as? Int)
        let history = try p.run(["--store", "b", "--json", "history", "--author", "cloud-import"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(history.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["latest_seq"] as? Int, token)
        XCTAssertNotNil(a.waitForEvent(upTo: 5) { $0["type"] as? String == "export" && $0["saved"] as? Int == 2 },
                        a.transcript)

        // And back, an update and a delete.
        _ = try p.sql("b", "UPDATE notes SET title = 'edited on b' WHERE uuid = 'n1'; DELETE FROM tags")
        XCTAssertTrue(try eventually {
            try notes(p, "a") == "n1|edited on b\n" && p.sql("a", "SELECT count(*) FROM tags") == "0\n"
        })
        XCTAssertTrue(a.wait(upTo: 5) { imports(a).reduce(0) { $0 + ($1["count"] as? Int ?? 0) } >= 2 }, a.transcript)
        XCTAssertEqual(Set(imports(a).flatMap { $0["changes"] as? [[String: Any]] ?? [] }.compactMap { $0["op"] as? String }),
                       ["update", "delete"], a.transcript)

        for w in [a, b] {
            w.send(SIGTERM)
            XCTAssertEqual(w.waitForExit(upTo: 15), 0, w.transcript)
            assertJSONLines(w)
            XCTAssertTrue(w.stderr.contains(" info [\(w === a ? "a" : "b")] in cloud mode: syncing"), w.stderr)
        }
    }

    func testABurstOfWritesIsOneRound() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let a = try watch(p, ["--store", "a", "--json", "--interval", "30"])
        // Let the first round (at start) pass.
        XCTAssertTrue(a.wait(upTo: 10) { a.stderr.contains("in cloud mode: syncing") })
        Thread.sleep(forTimeInterval: 1)
        var statements: [String] = []
        for i in 0..<50 { statements.append("INSERT INTO notes(uuid) VALUES ('burst\(i)')") }
        _ = try p.sql("a", statements.joined(separator: "; "))
        let export = a.waitForEvent(upTo: 10) { $0["type"] as? String == "export" }
        XCTAssertEqual(export?["saved"] as? Int, 50, a.transcript)
        Thread.sleep(forTimeInterval: 1)
        XCTAssertEqual(a.jsonLines.filter { $0["type"] as? String == "export" }.count, 1, a.transcript)
    }

    func testSigtermInTheMiddleOfARoundFinishesItAndARestartLosesNothing() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        // Paused after the batch was saved to the cloud and before the store records it.
        let a = try watch(p, ["--store", "a", "--json"], env: ["STORECTL_FAILPOINT": "export.after-save:pause"])
        XCTAssertTrue(a.wait(upTo: 20) { a.stderr.contains("failpoint export.after-save paused") }, a.transcript)
        a.send(SIGTERM)
        XCTAssertEqual(a.waitForExit(upTo: 20), 0, a.transcript)
        XCTAssertTrue(a.stderr.contains("failpoint export.after-save goes on"), a.transcript)
        XCTAssertNotNil(a.jsonLines.first { $0["type"] as? String == "export" && $0["saved"] as? Int == 2 },
                        a.transcript)
        XCTAssertEqual(try p.sql("a", "PRAGMA integrity_check"), "ok\n")

        // Keep writing before the restart, then restart both watchers.
        _ = try p.sql("a", "UPDATE notes SET title = 'one again' WHERE uuid = 'n1'; "
                    + "INSERT INTO notes(uuid, title) VALUES ('n3', 'three')")
        _ = try watch(p, ["--store", "a", "--json"])
        _ = try watch(p, ["--store", "b", "--json"])
        let expected = "n1|one again\nn2|two\nn3|three\n"
        XCTAssertTrue(try eventually { try notes(p, "b") == expected })
        XCTAssertEqual(try notes(p, "a"), expected)
        XCTAssertEqual(try p.sql("b", "SELECT count(*) FROM notes"), "3\n")
    }

    func testASecondSignalExitsAtOnceAndTheRoundIsRolledBack() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try p.run(["--store", "a", "sync"])
        // b pauses inside its import transaction, long enough for two signals.
        let b = try watch(p, ["--store", "b", "--json"],
                          env: ["STORECTL_FAILPOINT": "import.before-commit:pause=60"])
        XCTAssertTrue(b.wait(upTo: 20) { b.stderr.contains("failpoint import.before-commit paused") }, b.transcript)
        b.send(SIGTERM)
        XCTAssertTrue(b.wait(upTo: 5) { b.stderr.contains("SIGTERM: finishing the rounds in progress") })
        XCTAssertTrue(b.isRunning, "the first signal waits for the round")
        let start = Date()
        b.send(SIGTERM)
        XCTAssertEqual(b.waitForExit(upTo: 5), 0, b.transcript)
        XCTAssertLessThan(Date().timeIntervalSince(start), 5)
        XCTAssertTrue(b.stderr.contains("SIGTERM again: exiting now"), b.transcript)
        // The import was rolled back: nothing half-applied, the store is consistent, and a restart imports it.
        XCTAssertEqual(try notes(p, "b"), "")
        XCTAssertEqual(try p.sql("b", "PRAGMA integrity_check"), "ok\n")
        XCTAssertEqual(try p.sql("b", "SELECT count(*) FROM _storectl_history"), "0\n")
        let again = try watch(p, ["--store", "b", "--json"])
        XCTAssertNotNil(again.waitForEvent(upTo: 20) { $0["type"] as? String == "import" && $0["count"] as? Int == 2 },
                        again.transcript)
        XCTAssertEqual(try notes(p, "b"), "n1|one\nn2|two\n")
    }

    func testTheHookRunsWithTheImportInItsEnvironment() throws {
        let p = try E2EProject()
        let hook = "on_remote_change: 'env | grep ^STORECTL_ | sort > hook-$STORECTL_TOKEN.env; echo ran for $STORECTL_STORE'"
        try twoCloudStores(p, cloudExtra: ["b": hook])
        let b = try watch(p, ["--store", "b", "--json"], env: ["STORECTL_SECRET": "demo-secret"])
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('x'), ('y'); INSERT INTO tags(name) VALUES ('t')")
        try p.run(["--store", "a", "sync"])
        let event = try XCTUnwrap(b.waitForEvent(upTo: 20) { $0["type"] as? String == "import" }, b.transcript)
        let token = try XCTUnwrap(event["token"] as? Int)
        // The hook runs in the config's folder.
        XCTAssertTrue(b.wait(upTo: 10) { FileManager.default.fileExists(atPath: p.dir.file("hook-\(token).env")) },
                      b.transcript)
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("on_remote_change: done in") }, b.transcript)
        let env = try p.dir.read("hook-\(token).env")
        for expected in ["STORECTL_STORE=b", "STORECTL_TOKEN=\(token)", "STORECTL_COUNT=3",
                         "STORECTL_ENTITIES=notes,tags", "STORECTL_AUTHOR=cloud-import"]
        {
            XCTAssertTrue(env.contains(expected + "\n"), "\(expected) missing in\n\(env)")
        }
        XCTAssertTrue(env.contains("STORECTL_SERVER_TOKEN="), env)
        // Its output is logged, under the store's name; the watcher's own environment is passed on.
        XCTAssertTrue(b.stderr.contains("[b] on_remote_change: ran for b\n"), b.stderr)
        XCTAssertTrue(env.contains("STORECTL_SECRET=demo-secret\n"), "the watcher's environment is passed on")
        XCTAssertFalse(b.stderr.contains("demo-secret"))
    }

    func testAFailingOrHangingHookDoesNotStopSync() throws {
        let p = try E2EProject()
        try twoCloudStores(p, cloudExtra: [
            "b": "on_remote_change: 'if [ $STORECTL_COUNT = 1 ]; then sleep 100; else echo failing; exit 3; fi'\n"
                + "on_remote_change_timeout: 1s",
        ])
        let b = try watch(p, ["--store", "b", "--json"])
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('hang')")
        try p.run(["--store", "a", "sync"])
        XCTAssertNotNil(b.waitForEvent(upTo: 20) { $0["type"] as? String == "import" }, b.transcript)
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('fail1'), ('fail2')")
        try p.run(["--store", "a", "sync"])
        // Sync goes on while the first hook hangs.
        XCTAssertTrue(try eventually { try notes(p, "b") == "fail1|\nfail2|\nhang|\n" }, b.transcript)
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("still running after 1.0s (on_remote_change_timeout), stopped") },
                      b.transcript)
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("on_remote_change: exited with status 3") }, b.transcript)
        XCTAssertTrue(b.stderr.contains("[b] on_remote_change: failing\n"), b.stderr)
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('after')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(try eventually { try notes(p, "b").contains("after|") }, b.transcript)
        b.send(SIGTERM)
        XCTAssertEqual(b.waitForExit(upTo: 15), 0, b.transcript)
        XCTAssertFalse(b.jsonLines.contains { $0["type"] as? String == "error" }, b.transcript)
    }

    func testRemoteChangeNotificationsFalseSilencesImportsAndTheHook() throws {
        let p = try E2EProject()
        try twoCloudStores(p, cloudExtra: [
            "b": "remote_change_notifications: false\non_remote_change: 'touch hook-ran'",
        ])
        let b = try watch(p, ["--store", "b", "--json"])
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('quiet')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(try eventually { try notes(p, "b") == "quiet|\n" })
        Thread.sleep(forTimeInterval: 1.5)
        XCTAssertFalse(b.jsonLines.contains { $0["type"] as? String == "import" }, b.transcript)
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("hook-ran")))
    }

    func testAModeSwitchByAnotherProcessIsPickedUp() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let a = try watch(p, ["--store", "a", "--json"])
        let b = try watch(p, ["--store", "b", "--json"])
        XCTAssertTrue(a.wait(upTo: 10) { a.stderr.contains("in cloud mode: syncing") })
        try p.run(["--store", "a", "mode", "local"])
        let local = a.waitForEvent(upTo: 10) { $0["type"] as? String == "mode" }
        XCTAssertEqual(local?["mode"] as? String, "local", a.transcript)
        XCTAssertEqual(local?["previous"] as? String, "cloud")
        // A store in local mode does not contact the cloud: its writes stay home.
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('offline')")
        Thread.sleep(forTimeInterval: 3)
        XCTAssertEqual(try notes(p, "b"), "")
        XCTAssertFalse(a.jsonLines.contains { $0["type"] as? String == "export" }, a.transcript)
        // Switched back, it syncs again.
        try p.run(["--store", "a", "mode", "cloud"])
        XCTAssertNotNil(a.waitForEvent(upTo: 10) { $0["type"] as? String == "mode" && $0["mode"] as? String == "cloud" },
                        a.transcript)
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('online')")
        XCTAssertTrue(try eventually { try notes(p, "b") == "offline|\nonline|\n" }, b.transcript)
        assertJSONLines(a)
    }

    func testOnceDoesOneRoundForEachStoreAndExits() throws {
        let p = try E2EProject()
        try makeConfig(p, stores: ["a", "b", "c"])
        for s in ["a", "b"] { try p.run(["--store", s, "mode", "cloud"]) }
        try p.run(["--store", "c", "init"])
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('cron')")
        let first = try p.run(["watch", "--all", "--once", "--json"])
        let events = first.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        XCTAssertEqual(events.filter { $0["type"] as? String == "export" }.first?["store"] as? String, "a", first.stdout)
        XCTAssertTrue(first.stderr.contains("[c] in local mode"), first.stderr)
        _ = try p.run(["watch", "--all", "--once"])
        XCTAssertEqual(try notes(p, "b"), "cron|\n")
        XCTAssertEqual(try notes(p, "c"), "", "a store in local mode is left alone")
        // A failing store makes --once exit with its code (78: history tracking was lost), after the others ran.
        _ = try p.sql("b", "DROP TRIGGER _storectl_notes_ins")
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('cron2')")
        let failed = try p.run(["watch", "--all", "--once"], expect: 78)
        XCTAssertTrue(failed.stderr.contains("error [b] sync failed (exit \(failed.status))"), failed.stderr)
        XCTAssertFalse(failed.stderr.contains("retry"), failed.stderr)
        XCTAssertTrue(failed.stdout.contains("[a] exported 1 saved"), failed.stdout)
    }

    func testASecondWatcherIsRefusedAndStatusNamesTheWatcher() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let before = try p.run(["--store", "a", "--json", "status"])
        let idle = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(before.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(idle["watched"] as? Bool, false)
        XCTAssertTrue(idle["watcher"] is NSNull)

        let a = try watch(p, ["--all"])
        XCTAssertTrue(a.wait(upTo: 10) { a.stderr.contains("watching 2 store(s): a, b") }, a.transcript)
        let second = try p.run(["--store", "b", "watch"], expect: 75)
        XCTAssertTrue(second.stderr.contains("error: store 'b' is already served by storectl watch (pid \(a.pid)"),
                      second.stderr)
        XCTAssertTrue(second.stderr.contains("hint: stop that watcher first (kill \(a.pid)), then run this again"))
        let json = try p.run(["--json", "watch", "--all", "--once"], expect: 75)
        let error = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual((error["error"] as? [String: Any])?["code"] as? Int, 75, json.stdout)

        let during = try p.run(["--json", "status"])
        let docs = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(during.stdout.utf8)) as? [String: Any])
        for doc in try XCTUnwrap(docs["stores"] as? [[String: Any]]) {
            XCTAssertEqual(doc["watched"] as? Bool, true)
            XCTAssertEqual((doc["watcher"] as? [String: Any])?["pid"] as? Int, Int(a.pid))
        }
        let text = try p.run(["--store", "a", "status"])
        XCTAssertNotNil(text.stdout.range(of: "watched by +storectl watch \\(pid \(a.pid), since ", options: .regularExpression),
                        text.stdout)

        a.send(SIGINT)
        XCTAssertEqual(a.waitForExit(upTo: 15), 0, a.transcript)
        let after = try p.run(["--store", "a", "--json", "status"])
        let gone = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(after.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(gone["watched"] as? Bool, false)
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("data/a.sqlite.watch.lock")))
        // A watcher killed outright leaves no stale lock behind.
        let killed = try watch(p, ["--store", "a"])
        XCTAssertTrue(killed.wait(upTo: 10) { killed.stderr.contains("watching 1 store(s)") })
        killed.send(SIGKILL)
        _ = killed.waitForExit(upTo: 10)
        let next = try watch(p, ["--store", "a"])
        XCTAssertTrue(next.wait(upTo: 10) { next.stderr.contains("watching 1 store(s)") }, next.transcript)
    }

    func testStatusReportsTheSyncState() throws {
        let p = try E2EProject()
        try makeConfig(p)
        try p.run(["--store", "a", "mode", "cloud", "--no-sync"])
        func status(expect: Int32 = 0) throws -> [String: Any] {
            let r = try p.run(["--store", "a", "--json", "status"], expect: expect)
            return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        }
        var doc = try status()
        XCTAssertEqual(doc["initial_sync_complete"] as? Bool, false)
        XCTAssertTrue(doc["last_export_at"] is NSNull)
        XCTAssertTrue(doc["last_import_at"] is NSNull)
        XCTAssertTrue(doc["last_error"] is NSNull)
        try p.run(["watch", "--store", "a", "--once"])
        doc = try status()
        XCTAssertEqual(doc["initial_sync_complete"] as? Bool, true)
        XCTAssertNotNil(doc["last_export_at"] as? String)
        XCTAssertNotNil(doc["last_import_at"] as? String)
        // A failed round is the last error, until a round succeeds.
        _ = try p.sql("a", "DROP TRIGGER _storectl_notes_ins")
        try p.run(["watch", "--store", "a", "--once"], expect: 78)
        // status exits with the code sync meets (78), the problem listed.
        doc = try status(expect: 78)
        let error = try XCTUnwrap(doc["last_error"] as? [String: Any], "\(doc)")
        XCTAssertEqual(error["code"] as? Int, 78)
        XCTAssertEqual(error["kind"] as? String, "config")
        XCTAssertTrue((error["message"] as? String ?? "").contains("history tracking is lost"), "\(error)")
        XCTAssertEqual(error["hint"] as? String, "run 'storectl migrate --force' to reinstall them; it records a "
                       + "history gap in the store meta, so that the next cloud enable re-baselines instead of missing "
                       + "those changes")
        XCTAssertNotNil(error["at"] as? String)
        let text = try p.run(["--store", "a", "status"], expect: 78)
        XCTAssertNotNil(text.stdout.range(of: "last error +.*history tracking is lost", options: .regularExpression),
                        text.stdout)
        try p.run(["--store", "a", "migrate", "--force"])
        try p.run(["--store", "a", "sync"])
        doc = try status()
        XCTAssertTrue(doc["last_error"] is NSNull, "\(doc)")
    }

    func testSighupReadsTheConfigAgain() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let b = try watch(p, ["--store", "b", "--json"])
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("in cloud mode: syncing") })
        try makeConfig(p, cloudExtra: ["b": "on_remote_change: 'touch reloaded-$STORECTL_COUNT'"])
        b.send(SIGHUP)
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("config reloaded from") }, b.transcript)
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('r')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(b.wait(upTo: 20) { FileManager.default.fileExists(atPath: p.dir.file("reloaded-1")) }, b.transcript)
        // A broken config is refused, and the watcher goes on with the one it has.
        try p.dir.write("config.yaml", "version: 1\nstores: [\n")
        b.send(SIGHUP)
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("cannot reload the config, keeping the one in use") },
                      b.transcript)
        XCTAssertTrue(b.isRunning)
        b.send(SIGTERM)
        XCTAssertEqual(b.waitForExit(upTo: 15), 0, b.transcript)
    }

    func testWatchAllServesEveryStoreFromOneProcess() throws {
        let p = try E2EProject()
        try makeConfig(p, stores: ["a", "b", "c"])
        for s in ["a", "b", "c"] { try p.run(["--store", s, "mode", "cloud"]) }
        let w = try watch(p, ["--all", "--json"])
        for (i, s) in ["a", "b", "c"].enumerated() {
            _ = try p.sql(s, "INSERT INTO notes(uuid, title) VALUES ('from-\(s)', '\(i)')")
        }
        let expected = "from-a|0\nfrom-b|1\nfrom-c|2\n"
        for s in ["a", "b", "c"] {
            XCTAssertTrue(try eventually(30) { try notes(p, s) == expected }, "\(s)\n\(w.transcript)")
        }
        let stores = Set(w.jsonLines.filter { $0["type"] as? String == "import" }.compactMap { $0["store"] as? String })
        XCTAssertEqual(stores, ["a", "b", "c"], w.transcript)
        // Each store has its own connection: the process holds each store file open.
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(w.pid)/fd")) ?? []
        let targets = fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(w.pid)/fd/\($0)") }
        for s in ["a", "b", "c"] {
            XCTAssertTrue(targets.contains { $0.hasSuffix("data/\(s).sqlite") }, "\(targets)")
        }
        w.send(SIGTERM)
        XCTAssertEqual(w.waitForExit(upTo: 15), 0, w.transcript)
        assertJSONLines(w)
    }

    func testManualSyncsWhileTheWatcherRunsLoseAndDuplicateNothing() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let a = try watch(p, ["--store", "a", "--json"])
        let b = try watch(p, ["--store", "b", "--json"])
        for i in 0..<6 {
            _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('a\(i)', 'v1'); "
                        + "UPDATE notes SET title = 'v2' WHERE uuid = 'a\(max(0, i - 1))'")
            _ = try p.sql("b", "INSERT INTO notes(uuid, title) VALUES ('b\(i)', 'v1')")
            // Another process syncs the same stores at the same time as the watchers.
            try p.run(["--store", i % 2 == 0 ? "a" : "b", "sync"], expect: nil)
        }
        _ = try p.sql("a", "DELETE FROM notes WHERE uuid = 'b0'")
        let expected = (0..<6).map { "a\($0)|\($0 == 5 ? "v1" : "v2")" } + (1..<6).map { "b\($0)|v1" }
        XCTAssertTrue(try eventually(30) {
            try notes(p, "a") == expected.joined(separator: "\n") + "\n"
                && notes(p, "b") == expected.joined(separator: "\n") + "\n"
        }, "\(a.transcript)\n\(b.transcript)")
        XCTAssertEqual(try p.sql("a", "SELECT count(*) FROM notes"), "11\n")
        for w in [a, b] { XCTAssertFalse(w.jsonLines.contains { $0["type"] as? String == "error" }, w.transcript) }
    }

    func testBadOptionsAreUsageErrors() throws {
        let p = try E2EProject()
        try makeConfig(p)
        let both = try p.run(["--store", "a", "watch", "--all"], expect: 64)
        XCTAssertTrue(both.stderr.contains("--all and --store a cannot be used together"), both.stderr)
        let ambiguous = try p.run(["watch"], expect: 64)
        XCTAssertTrue(ambiguous.stderr.contains("hint: run 'storectl watch --all', or 'storectl --store a watch'"),
                      ambiguous.stderr)
        for bad in ["0", "-1", "abc", "nan", "1e9"] {
            let r = try p.run(["--store", "a", "watch", "--interval", bad], expect: 64)
            XCTAssertTrue(r.stderr.contains("--interval expects a number of seconds"), r.stderr)
        }
        let help = try p.run(["watch", "--help"])
        XCTAssertTrue(help.stdout.contains("storectl watch --all --once"), help.stdout)
        // A store without a cloud: section has nothing to watch.
        try p.dir.write("config.yaml", try p.dir.read("config.yaml") + "  local-only:\n    path: data/l.sqlite\n")
        let noCloud = try p.run(["--store", "local-only", "watch"], expect: 78)
        XCTAssertTrue(noCloud.stderr.contains("has no cloud: section"), noCloud.stderr)
        // A store file that is not at its path: said so, with the path and the fix (never a new, empty store).
        let fix = "storectl --store a config set stores.a.path NEW_PATH"
        let missing = try p.run(["--store", "a", "watch", "--once"], expect: 66)
        XCTAssertTrue(missing.stderr.contains(fix) && missing.stderr.contains(p.dir.file("data/a.sqlite")), missing.stderr)
        XCTAssertFalse(missing.stderr.contains(" init"), missing.stderr)
        let missingAll = try p.run(["watch", "--all", "--once"], expect: 66)
        XCTAssertTrue(missingAll.stderr.contains(fix), missingAll.stderr)
    }
}

/// The same scenarios with the stores sharing a PostgreSQL container (which also wakes watchers with NOTIFY).
final class PostgresWatchTests: WatchTests {
    override func backend() throws -> Backend { try Self.postgresBackend() }

    override func testASqliteWriteOnOneStoreReachesTheOtherThroughTwoWatchers() throws {
        try super.testASqliteWriteOnOneStoreReachesTheOtherThroughTwoWatchers()
    }
    override func testSigtermInTheMiddleOfARoundFinishesItAndARestartLosesNothing() throws {
        try super.testSigtermInTheMiddleOfARoundFinishesItAndARestartLosesNothing()
    }
    override func testASecondSignalExitsAtOnceAndTheRoundIsRolledBack() throws {
        try super.testASecondSignalExitsAtOnceAndTheRoundIsRolledBack()
    }

    func testNotifyWakesTheOtherWatcherBeforeItsInterval() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let a = try watch(p, ["--store", "a", "--json", "--interval", "60"])
        let b = try watch(p, ["--store", "b", "--json", "--interval", "60"])
        for w in [a, b] { XCTAssertTrue(w.wait(upTo: 10) { w.stderr.contains("in cloud mode: syncing") }) }
        Thread.sleep(forTimeInterval: 1)
        let start = Date()
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('notified')")
        XCTAssertNotNil(b.waitForEvent(upTo: 15) { $0["type"] as? String == "import" }, b.transcript)
        XCTAssertLessThan(Date().timeIntervalSince(start), 15, "well before the 60 s interval")
        XCTAssertEqual(try notes(p, "b"), "notified|\n")
    }

    func testAServerThatStopsAndStartsAgainIsRetriedUntilItAnswers() throws {
        guard let server = try ScratchPostgres.make() else { return }
        let p = try E2EProject()
        try p.writeSchema(Self.schema)
        try p.writeConfig(["a", "b"].map { name in
            E2EProject.Store(name, path: "data/\(name).sqlite",
                             cloud: E2EProject.Cloud(container: "iCloud.com.example.restart", url: server.url,
                                                     account: "postgres", secret: "${STORECTL_SECRET:-x}",
                                                     createIfMissing: false))
        })
        try p.run(["--store", "a", "cloud", "init"])
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        let b = try watch(p, ["--store", "b", "--json", "--max-backoff", "2"])
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("in cloud mode: syncing") })
        Thread.sleep(forTimeInterval: 1.5)
        try server.stop()
        XCTAssertTrue(b.wait(upTo: 30) { b.jsonLines.filter { $0["type"] as? String == "retry" }.count >= 2 },
                      b.transcript)
        let retry = b.jsonLines.first { $0["type"] as? String == "retry" }
        XCTAssertTrue([69, 75].contains(retry?["code"] as? Int ?? 0), "\(String(describing: retry))")
        try server.start()
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('after the restart')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(try eventually(30) { try notes(p, "b") == "after the restart|\n" }, b.transcript)
        XCTAssertTrue(b.wait(upTo: 5) { b.stderr.contains("sync works again after") }, b.stderr)
        b.send(SIGTERM)
        XCTAssertEqual(b.waitForExit(upTo: 15), 0, b.transcript)
    }

    func testALostPostgresConnectionRecoversByItself() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let b = try watch(p, ["--store", "b", "--json", "--max-backoff", "2"])
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("in cloud mode: syncing") })
        Thread.sleep(forTimeInterval: 1.5)
        // The server ends every connection of this test's storectl (the listener's included), as a restart or a
        // network cut would.
        let env = ProcessInfo.processInfo.environment
        let url = try XCTUnwrap(env["STORECTL_TEST_PG_URL"])
        let app = try XCTUnwrap(cachedBackend?.container)
        for _ in 0..<3 {
            _ = try Binary.run("/usr/bin/psql", [url, "-Atc", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                                 + "WHERE application_name = '\(app)' AND pid <> pg_backend_pid()"],
                               in: p.dir.path)
            Thread.sleep(forTimeInterval: 0.3)
        }
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('after the cut')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(try eventually(30) { try notes(p, "b") == "after the cut|\n" }, b.transcript)
        XCTAssertTrue(b.isRunning)
    }
}

/// Recovery from causes that belong to a container file: a lock held by another process, a disabled account.
final class WatchRecoveryTests: WatchTestCase {
    func testBackoffGrowsWhileTheContainerIsLockedAndSyncResumes() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let b = try watch(p, ["--store", "b", "--json", "--max-backoff", "4"])
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("in cloud mode: syncing") })
        Thread.sleep(forTimeInterval: 1.5)
        // Another process holds the container file's write lock until the file `unlock` appears.
        let locker = try BackgroundProcess("/usr/bin/sqlite3", [
            "-cmd", "BEGIN EXCLUSIVE", "-cmd", "INSERT INTO container_meta(key, value) VALUES ('lock-test', 'x')",
            "-cmd", ".shell touch locked", "-cmd", ".shell while [ ! -e unlock ]; do sleep 0.05; done",
            "cloud/shared.container", "DELETE FROM container_meta WHERE key = 'lock-test'; COMMIT;",
        ], in: p.dir.path)
        XCTAssertTrue(locker.wait(upTo: 10) { FileManager.default.fileExists(atPath: p.dir.file("locked")) },
                      locker.stderr)
        XCTAssertTrue(b.wait(upTo: 60) { b.jsonLines.filter { $0["type"] as? String == "retry" }.count >= 3 },
                      b.transcript)
        let retries = b.jsonLines.filter { $0["type"] as? String == "retry" }
        let delays = retries.compactMap { $0["delay_seconds"] as? Double }
        XCTAssertEqual(retries.compactMap { $0["attempt"] as? Int }.prefix(3), [1, 2, 3])
        XCTAssertEqual(delays.count, retries.count)
        for (x, y) in zip(delays, delays.dropFirst()) { XCTAssertLessThanOrEqual(x, y, "\(delays)") }
        XCTAssertLessThan(delays.first ?? 0, delays.dropFirst(2).first ?? 0, "\(delays)")
        XCTAssertTrue(delays.allSatisfy { $0 <= 4 }, "\(delays)")
        for retry in retries {
            XCTAssertEqual(retry["code"] as? Int, 75, "\(retry)")
            XCTAssertNotNil(retry["next_attempt_at"] as? String)
            XCTAssertFalse((retry["reason"] as? String ?? "").isEmpty)
        }
        let errors = b.jsonLines.filter { $0["type"] as? String == "error" }
        XCTAssertEqual((errors.first?["error"] as? [String: Any])?["code"] as? Int, 75, b.transcript)
        XCTAssertEqual((errors.first?["error"] as? [String: Any])?["kind"] as? String, "temporary")
        // Each retry is logged with its reason and the time of the next attempt.
        XCTAssertTrue(b.stderr.contains("warn [b] retry 1 in "), b.stderr)
        // status shows the last error while it lasts, and exits with its code.
        let status = try p.run(["--store", "b", "--json", "status"], expect: 75)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        XCTAssertEqual((doc["last_error"] as? [String: Any])?["code"] as? Int, 75, status.stdout)

        // Writes on a wait for the lock too; once it is released, everything flows again.
        try p.dir.write("unlock", "")
        XCTAssertEqual(locker.waitForExit(upTo: 10), 0, locker.stderr)
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('after the lock')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(try eventually(30) { try notes(p, "b") == "after the lock|\n" }, b.transcript)
        XCTAssertTrue(b.wait(upTo: 5) { b.stderr.contains("sync works again after") }, b.stderr)
        let healed = try p.run(["--store", "b", "--json", "status"])
        let healedDoc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(healed.stdout.utf8)) as? [String: Any])
        XCTAssertTrue(healedDoc["last_error"] is NSNull, healed.stdout)
    }


    func testAnUnavailableAccountRecoversByItself() throws {
        let p = try E2EProject()
        try makeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        // b signs in as bob, a member whom an owner disables, then lets back in.
        let yaml = try p.dir.read("config.yaml")
        let bStart = try XCTUnwrap(yaml.range(of: "  b:\n"))
        try p.dir.write("config.yaml", String(yaml[..<bStart.lowerBound])
            + yaml[bStart.lowerBound...].replacingOccurrences(of: "account: demo", with: "account: bob"))
        try p.run(["--store", "a", "account", "add", "bob", "--secret-env", "BOB_SECRET"],
                env: ["BOB_SECRET": "bob-secret"])
        // demo's zone, shared with bob.
        _ = try Binary.run("/usr/bin/sqlite3", [p.dir.file("cloud/shared.container"),
                                                "INSERT INTO shares VALUES ('default', 'bob', 'read-write', 0, 'demo')"],
                           in: p.dir.path)
        let env = ["STORECTL_SECRET": "bob-secret"]
        try p.run(["--store", "b", "mode", "cloud"], env: env)
        let b = try watch(p, ["--store", "b", "--json", "--max-backoff", "2"], env: env)
        XCTAssertTrue(b.wait(upTo: 10) { b.stderr.contains("in cloud mode: syncing") })
        try p.run(["--store", "a", "account", "disable", "bob"])
        let retry = b.waitForEvent(upTo: 20) { $0["type"] as? String == "retry" }
        XCTAssertNotNil(retry, b.transcript)
        XCTAssertEqual(retry?["code"] as? Int, 69, b.transcript)
        XCTAssertTrue(b.isRunning)
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('while bob was out')")
        try p.run(["--store", "a", "sync"])
        XCTAssertEqual(try notes(p, "b"), "")
        // The owner lets bob back in (as a new account of the same name is not allowed, through the file itself).
        _ = try Binary.run("/usr/bin/sqlite3", [p.dir.file("cloud/shared.container"),
                                                "UPDATE accounts SET disabled = 0 WHERE id = 'bob'"], in: p.dir.path)
        XCTAssertTrue(try eventually(20) { try notes(p, "b") == "while bob was out|\n" }, b.transcript)
    }
}

/// A PostgreSQL server of the test's own (trust logins on a unix socket), which it may stop and start without
/// disturbing any other test.
final class ScratchPostgres {
    let directory: String
    let bin: String
    var url: String { "postgresql://postgres@/postgres?host=\(directory)" }

    /// Nil (after failing the test when PostgreSQL is required) when no server binaries are found.
    static func make(file: StaticString = #filePath, line: UInt = #line) throws -> ScratchPostgres? {
        let env = ProcessInfo.processInfo.environment
        var bin = env["STORECTL_TEST_PG_BIN"] ?? ""
        if bin.isEmpty {
            let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
            if let newest = versions.compactMap({ Int($0) }).max() { bin = "/usr/lib/postgresql/\(newest)/bin" }
        }
        guard FileManager.default.isExecutableFile(atPath: bin + "/initdb") else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but no PostgreSQL server binaries (set STORECTL_TEST_PG_BIN)",
                        file: file, line: line)
            }
            return nil
        }
        return try ScratchPostgres(bin: bin)
    }

    private init(bin: String) throws {
        self.bin = bin
        var template = Array("/tmp/storectl-watchpg-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buf in buf.baseAddress.map { mkdtemp($0) != nil } ?? false }
        guard made else { throw CocoaError(.fileWriteUnknown) }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if getuid() == 0, let pw = getpwnam("postgres") { chown(directory, pw.pointee.pw_uid, pw.pointee.pw_gid) }
        try run(bin + "/initdb", ["-D", directory + "/data", "-U", "postgres", "-A", "trust", "--no-sync"])
        try start()
    }

    deinit {
        try? run(bin + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    func start() throws {
        try run(bin + "/pg_ctl", ["-D", directory + "/data", "-l", directory + "/log", "-w", "-t", "60",
                                  "-o", "-k \(directory) -c listen_addresses='' -c fsync=off", "start"])
    }

    func stop() throws {
        try run(bin + "/pg_ctl", ["-D", directory + "/data", "-m", "fast", "-w", "stop"])
    }

    private func run(_ program: String, _ args: [String]) throws {
        try Self.runServerProgram(program, args, in: directory)
    }

    /// Runs a server program (as `postgres` when the test runs as root), spawned and reaped here: Foundation's
    /// `Process` does not always see the exit of a `pg_ctl start` that leaves a daemon behind. Its output goes to
    /// `directory/commands.log`, shown when it fails.
    static func runServerProgram(_ program: String, _ args: [String], in directory: String) throws {
        var argv = [program] + args
        if getuid() == 0 { argv = ["/usr/sbin/runuser", "-u", "postgres", "--"] + argv }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, directory + "/commands.log", O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cArgs = argv.map { strdup($0) } + [nil]
        defer { for p in cArgs { free(p) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ) == 0 else {
            throw CocoaError(.executableNotLoadable)
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status == 0 else {
            let log = (try? String(contentsOfFile: directory + "/commands.log", encoding: .utf8)) ?? ""
            XCTFail("\(argv.joined(separator: " ")) failed (status \(status)):\n\(log)")
            throw CocoaError(.executableLoad)
        }
    }
}
