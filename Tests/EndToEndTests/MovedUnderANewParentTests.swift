import Foundation
import TestSupport
import XCTest

/// Store a moves a note into a new folder and deletes the old folder in one sync, while store b edits the note
/// before it has seen the move. b's export meets a's record, whose folder b does not know yet: the note must end
/// in the new folder with b's edit on every store. Before, b kept the note under the old folder (the new folder's
/// reference could not be put on its row), the old folder's tombstone cascaded it, and its delete went to every
/// store.
final class MovedUnderANewParentTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE,
            folder_id INTEGER REFERENCES folders(id) ON DELETE CASCADE, title TEXT);
        """

    /// `title`: what the note ends with; nil (row-level `local-wins`, under which b's row wins whole, its old
    /// folder included) only asks that every store ends equal and healthy.
    func movedWhileEdited(_ backend: FleetBackend, policy: String, title: String?) throws {
        let f = try Fleet.pair(backend, schema: Self.schema, policy: policy, rows: """
            INSERT INTO folders VALUES (1, 'old');
            INSERT INTO notes VALUES (1, 'n1', 1, 'first'), (2, 'n2', 1, 'stays');
            """, label: "storectl-moved-new-parent")
        try f.sql("a", """
            INSERT INTO folders VALUES (2, 'new'); UPDATE notes SET folder_id = 2 WHERE uuid = 'n1';
            DELETE FROM folders WHERE id = 1;
            """, foreignKeys: true)
        try f.run("a", ["sync"])
        try f.sql("b", "UPDATE notes SET title = 'edited by b' WHERE uuid = 'n1'")
        try f.syncRounds(3, ["b", "a"])
        let what = "[\(backend), \(policy)] a note moved to a new folder whose old folder went, edited meanwhile"
        if let title {
            try f.assertRows(["folders|name=t:'new'",
                              "notes|folder_id=->folders{name=t:'new'}|title=t:'\(title)'|uuid=t:'n1'"], what)
        } else {
            try f.assertSameRows(what)
        }
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testANoteMovedToANewFolderAndEditedElsewhereStaysFile() throws {
        for (policy, title) in [("property-local-wins", "edited by b"), ("property-server-wins", "edited by b"),
                                ("server-wins", "first"), ("local-wins", nil)] as [(String, String?)] {
            try movedWhileEdited(.file, policy: policy, title: title)
        }
    }

    func testANoteMovedToANewFolderAndEditedElsewhereStaysPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try movedWhileEdited(pg, policy: "property-local-wins", title: "edited by b")
    }

    static let treeSchema = """
        CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
            parent INTEGER REFERENCES folders(id) ON DELETE CASCADE);
        CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        """

    /// The new parent never reaches the cloud while b syncs: a's export is killed after it saved the moved row
    /// and before its new parent (a folder tree, rows saved in key order). b's syncs still exit 0 and send b's
    /// other rows (the import cannot bring the parent, so the sync's second export does not wait for it). Known
    /// limit (docs/sync-guarantees.md, "Cases found and not fixed yet"): the moved row can be lost, or end
    /// differently on the two stores; stores that differ are reported by `doctor` (65), never called healthy.
    func testAParentThatNeverArrivesBlocksNothingFile() throws {
        var ran = 0
        for policy in ["property-local-wins", "property-server-wins", "server-wins", "local-wins"] {
            let f = try Fleet(backend: .file, schema: Self.treeSchema, cloudExtra: "      merge_policy: \(policy)",
                              label: "storectl-parent-never-arrives")
            try f.cloudMode("a")
            try f.cloudMode("b")
            try f.sql("a", "INSERT INTO folders VALUES (1, 'r1', NULL), (2, 'r2', NULL), (3, 'c3', 2)")
            try f.syncRounds(2, ["a", "b"])
            try f.sql("a", "INSERT INTO folders VALUES (9, 'new9', NULL); UPDATE folders SET parent = 9 WHERE id = 3; "
                      + "DELETE FROM folders WHERE id = 2", foreignKeys: true)
            try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": "export.before-save:3", "STORECTL_BATCH_SIZE": "1"],
                      expect: nil)
            // The saves overlap the reading of the next page: the kill may come after the parent's save too.
            if try f.cloudRecords().contains(where: { $0.recordName.hasSuffix("000000000009") }) { continue }
            ran += 1
            let what = "[\(policy)] a row moved under a parent that reaches the cloud only later"
            try f.sql("b", "UPDATE folders SET name = 'c3 by b' WHERE name = 'c3'; INSERT INTO tags VALUES (1, 'tag by b')")
            for _ in 0..<2 { try f.run("b", ["sync"]) }
            XCTAssertEqual(try f.liveCloudCounts()["tags"] ?? 0, 1, "\(what): b's other row is sent")
            try f.syncRounds(3, ["a", "b"])
            // Known limit: the row may be lost, or differ between the stores; stores that differ are reported.
            if try f.rows("b") != f.rows("a") {
                let doctors = try ["a", "b"].map { try f.run($0, ["doctor"], expect: nil).status }
                XCTAssertTrue(doctors.contains(65), "\(what): the stores differ and neither is reported: \(doctors)")
            } else {
                for s in f.stores { try f.assertHealthy(s, what) }
            }
        }
        XCTAssertGreaterThan(ran, 0, "the kill never came before the parent's save")
    }
}
