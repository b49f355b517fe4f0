import Foundation
import TestSupport
import XCTest

/// An import's own history (author `cloud-import`) is never exported, so the export token moves past it when nothing
/// local waits: `status`, `watch` and the next export then read only what is new. A local change that waits keeps
/// the token where it is, and is exported.
final class ImportedHistoryTokenTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
        """

    private func token(_ f: Fleet, _ store: String) throws -> String {
        try f.sql(store, "SELECT token FROM _storectl_consumers WHERE name = 'cloud-export'")
    }

    private func lastSeq(_ f: Fleet, _ store: String) throws -> String {
        try f.sql(store, "SELECT max(seq) FROM _storectl_history")
    }

    private func pendingExport(_ f: Fleet, _ store: String) throws -> Int? {
        let doc = try f.json(store, ["status"]).doc
        let entry = (JSONDoc.get(doc, "stores") as? [Any])?.first ?? doc
        return JSONDoc.int(entry, "pending_export")
    }

    func testTheTokenPassesAnImportWhenNothingLocalWaits() throws {
        let f = try Fleet(backend: .file, schema: Self.schema, label: "storectl-import-token")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) "
                  + "INSERT INTO notes(uuid, title) SELECT 'n' || i, 'note ' || i FROM n")
        try f.run("a", ["sync"])
        try f.run("b", ["sync"])
        XCTAssertEqual(try f.sql("b", "SELECT count(*) FROM notes"), "50\n")
        XCTAssertEqual(try f.sql("b", "SELECT count(*) FROM _storectl_history WHERE author = 'cloud-import'"), "50\n")
        XCTAssertEqual(try token(f, "b"), try lastSeq(f, "b"), "the token passed the import's history")
        XCTAssertEqual(try pendingExport(f, "b"), 0)
        // What b writes next is exported as before.
        try f.sql("b", "UPDATE notes SET title = 'edited on b' WHERE uuid = 'n7'")
        XCTAssertEqual(try pendingExport(f, "b"), 1)
        try f.syncRounds(2, ["b", "a"])
        XCTAssertEqual(try f.sql("a", "SELECT title FROM notes WHERE uuid = 'n7'"), "edited on b\n")
        for store in f.stores { try f.assertHealthy(store, "after the import") }
    }

    /// A local change written after the export and before the import of the same sync (the export paused there):
    /// the import does not move the token past it, and the export after the import sends it.
    func testALocalChangeBetweenTheExportAndTheImportIsStillExported() throws {
        let f = try Fleet(backend: .file, schema: Self.schema, label: "storectl-import-token-wait")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n3', 'three')")
        try f.run("a", ["sync"])
        let sync = try BackgroundProcess.storectl(["--store", "b", "sync"], in: f.dir.path,
                                                  environment: ["STORECTL_FAILPOINT": "export.after-commit:pause=3"])
        XCTAssertTrue(sync.wait(upTo: 20) { sync.stderr.contains("failpoint export.after-commit paused") }, sync.stderr)
        try f.sql("b", "UPDATE notes SET title = 'one, from b' WHERE uuid = 'n1'")
        XCTAssertEqual(sync.waitForExit(upTo: 30), 0, sync.stderr)
        XCTAssertEqual(try f.sql("b", "SELECT title FROM notes ORDER BY uuid"), "one, from b\ntwo\nthree\n")
        // The same sync exported it after the import (a token moved past it would have left it behind for good).
        XCTAssertEqual(try token(f, "b"), try lastSeq(f, "b"))
        XCTAssertEqual(try pendingExport(f, "b"), 0)
        try f.run("a", ["sync"])
        XCTAssertEqual(try f.sql("a", "SELECT title FROM notes ORDER BY uuid"), "one, from b\ntwo\nthree\n")
        for store in f.stores { try f.assertHealthy(store, "after the paused sync") }
    }

    /// A kill before the import commits leaves the token where it was (one transaction), and the next sync imports.
    func testAKilledImportLeavesTheToken() throws {
        let f = try Fleet(backend: .file, schema: Self.schema, label: "storectl-import-token-kill")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try f.run("a", ["sync"])
        let before = try token(f, "b")
        let killed = try f.run("b", ["sync"], env: ["STORECTL_FAILPOINT": "import.before-commit"], expect: nil)
        XCTAssertEqual(killed.status, 137, "\(killed)")
        XCTAssertEqual(try token(f, "b"), before)
        XCTAssertEqual(try f.sql("b", "SELECT count(*) FROM notes"), "0\n")
        try f.run("b", ["sync"])
        XCTAssertEqual(try f.sql("b", "SELECT title FROM notes ORDER BY uuid"), "one\ntwo\n")
        XCTAssertEqual(try token(f, "b"), try lastSeq(f, "b"))
        for store in f.stores { try f.assertHealthy(store, "after the killed import") }
    }
}
