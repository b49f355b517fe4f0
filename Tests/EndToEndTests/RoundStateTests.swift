import Foundation
import StoreConfig
import StoreControl
import TestSupport
import XCTest

/// What a round keeps from the last one, and what it must still read every time: an export with nothing to send
/// writes nothing but its time; a watcher that keeps its store connection reads the triggers and the tables' maps
/// again when the schema or the store's identity changed under it.
final class RoundStateTests: WatchTestCase {
    private func meta(_ p: E2EProject, _ store: String, _ key: String) throws -> String {
        try p.sql(store, "SELECT coalesce((SELECT value FROM _storectl_meta WHERE key = '\(key)'), '')")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func syncJSON(_ p: E2EProject, _ store: String) throws -> [String: Any] {
        let r = try p.run(["--store", store, "--json", "sync"])
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], r.stdout)
    }

    /// A sync whose export has nothing to send starts no export (its serial stays), yet says the export succeeded
    /// (`last_export_at` moves with `last_sync_at`) and reports every history seq as exported.
    func testAnExportWithNothingToSendWritesOnlyItsTime() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        _ = try syncJSON(p, "a")
        _ = try syncJSON(p, "b")
        let serial = try meta(p, "b", "export_serial")
        let before = try meta(p, "b", "last_export_at")
        Thread.sleep(forTimeInterval: 0.05)
        // b imports a's next change: its export in the same sync has nothing to send.
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n2', 'two')")
        _ = try syncJSON(p, "a")
        let seqBefore = try p.sql("b", "SELECT max(seq) FROM _storectl_history").trimmingCharacters(in: .whitespacesAndNewlines)
        let doc = try syncJSON(p, "b")
        XCTAssertEqual(try notes(p, "b"), "n1|one\nn2|two\n")
        XCTAssertEqual(try meta(p, "b", "export_serial"), serial, "an export with nothing to send starts none")
        let after = try meta(p, "b", "last_export_at")
        XCTAssertNotEqual(after, before)
        XCTAssertEqual(after, try meta(p, "b", "last_sync_at"))
        let exported = try XCTUnwrap(doc["exported"] as? [String: Any], "\(doc)")
        // The export ran before the import: everything up to then counts as exported; the import moved the export
        // token past its own history.
        XCTAssertEqual((exported["token"] as? Int).map(String.init), seqBefore, "\(doc)")
        XCTAssertEqual(try p.sql("b", "SELECT token FROM _storectl_consumers WHERE name = 'cloud-export'"),
                       try p.sql("b", "SELECT max(seq) FROM _storectl_history"))
        XCTAssertEqual(exported["saved"] as? Int, 0)
        // A local change after it is sent as usual, and the export token passed the imported history.
        _ = try p.sql("b", "UPDATE notes SET title = 'two, from b' WHERE uuid = 'n2'")
        let sent = try syncJSON(p, "b")
        XCTAssertEqual((sent["exported"] as? [String: Any])?["saved"] as? Int, 1, "\(sent)")
        XCTAssertNotEqual(try meta(p, "b", "export_serial"), serial)
        _ = try syncJSON(p, "a")
        XCTAssertEqual(try notes(p, "a"), "n1|one\nn2|two, from b\n")
    }

    /// Every read-write connection storectl opens to a store in WAL mode runs with `synchronous=NORMAL`, not only
    /// the one that switched the file to WAL (SQLite keeps the setting per connection; FULL made every commit of a
    /// round wait for fsync).
    func testEveryConnectionToAStoreRunsWithSynchronousNormal() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        for _ in 0..<2 {
            let config = try ConfigLoader.load(path: p.dir.file("config.yaml"), environment: p.environment)
            let handle = try StoreHandle(config: config, storeName: "a", environment: p.environment)
            let db = try handle.database()
            XCTAssertEqual(try db.scalar("PRAGMA journal_mode")?.string, "wal")
            XCTAssertEqual(try db.scalar("PRAGMA synchronous")?.int64, 1)
            handle.close()
        }
    }

    /// A trigger dropped by another process while a watcher holds the store open: the watcher's next round meets
    /// the lost tracking (78) instead of syncing on without it.
    func testAWatcherMeetsATriggerDroppedUnderIt() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let w = try watch(p, ["--store", "b", "--json"])
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(try eventually { try notes(p, "b") == "n1|one\n" }, w.transcript)
        _ = try p.sql("b", "DROP TRIGGER _storectl_notes_ins")
        _ = try p.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n2', 'two')")
        XCTAssertTrue(eventually { w.stdout.contains("\"code\":78") }, w.transcript)
        XCTAssertTrue(w.stdout.contains("history tracking is lost"), w.stdout)
    }

    /// `init --new-identity` on the store a watcher serves: the watcher's next rows are named after the new
    /// identity, so that they never take the names the old one gives on a copy that kept it.
    func testAWatcherFollowsANewIdentity() throws {
        let p = try E2EProject()
        try makeConfig(p, stores: ["a", "c"])
        try p.run(["--store", "a", "mode", "cloud"])
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        try p.run(["--store", "a", "sync"])
        let w = try watch(p, ["--store", "a", "--json"])
        XCTAssertTrue(eventually { w.stderr.contains("watching 1 store(s)") }, w.transcript)
        Thread.sleep(forTimeInterval: 1.5)
        _ = try p.sql("a", "VACUUM INTO '\(p.dir.file("data/c.sqlite"))'")
        try p.run(["--store", "a", "init", "--new-identity"])
        Thread.sleep(forTimeInterval: 1.5)
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('a2', 'from a')")
        XCTAssertTrue(eventually { w.stdout.contains("\"type\":\"export\"") }, w.transcript)
        _ = try p.sql("c", "INSERT INTO notes(uuid, title) VALUES ('c2', 'from c')")
        try p.run(["--store", "c", "sync"], expect: nil)
        XCTAssertTrue(try eventually { try notes(p, "a") == "a2|from a\nc2|from c\nn1|one\n" }, w.transcript)
        try p.run(["--store", "c", "sync"], expect: nil)
        XCTAssertEqual(try notes(p, "c"), "a2|from a\nc2|from c\nn1|one\n")
        let names = try p.sql("a", "SELECT count(DISTINCT record_name), count(*) FROM _storectl_records")
        XCTAssertEqual(names, "3|3\n")
    }
}
