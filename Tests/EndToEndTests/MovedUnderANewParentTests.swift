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

    /// A folder tree (a table that references itself): a moves folder 3 under a new folder 9 and deletes its old
    /// parent 2, and its export is killed after each of its three saves in turn (one row a batch), while b edits
    /// folder 3 and syncs. The new folder is always saved before the row moved under it, and the old parent's
    /// tombstone after it (new rows first, deleted rows last, whatever the keys): every store ends equal and
    /// healthy, and under the property policies folder 3 is under folder 9 with b's edit. Before, rows went in key order (2's tombstone, 3, then 9):
    /// killed before 9's save, the moved row could be lost, or end differently on the two stores.
    func testAMovedRowNeverReachesTheCloudBeforeItsNewParentFile() throws {
        for policy in ["property-local-wins", "property-server-wins", "server-wins", "local-wins"] {
            for save in 1...3 {
                let f = try Fleet(backend: .file, schema: Self.treeSchema,
                                  cloudExtra: "      merge_policy: \(policy)", label: "storectl-parent-first")
                try f.cloudMode("a")
                try f.cloudMode("b")
                try f.sql("a", "INSERT INTO folders VALUES (1, 'r1', NULL), (2, 'r2', NULL), (3, 'c3', 2)")
                try f.syncRounds(2, ["a", "b"])
                try f.sql("a", "INSERT INTO folders VALUES (9, 'new9', NULL); UPDATE folders SET parent = 9 WHERE id = 3; "
                          + "DELETE FROM folders WHERE id = 2", foreignKeys: true)
                try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": "export.before-save:\(save)",
                                               "STORECTL_BATCH_SIZE": "1"], expect: nil)
                let what = "[\(policy)] a row moved under a new parent, the export killed before save \(save)"
                let names = Set(try f.cloudRecords().filter { !$0.deleted }.map(\.recordName))
                if names.contains(where: { $0.hasSuffix("000000000003") }) {
                    // The moved row is in the cloud only with its new parent.
                    let moved = try f.cloudRecords().first { $0.recordName.hasSuffix("000000000003") && !$0.deleted }
                    if moved?.fields.contains("000000000009") == true {
                        XCTAssertTrue(names.contains { $0.hasSuffix("000000000009") },
                                      "\(what): the moved row reached the cloud before its new parent")
                    }
                }
                try f.sql("b", "UPDATE folders SET name = 'c3 by b' WHERE id = 3; INSERT INTO tags VALUES (1, 'tag by b')")
                for _ in 0..<2 { try f.run("b", ["sync"]) }
                XCTAssertEqual(try f.liveCloudCounts()["tags"] ?? 0, 1, "\(what): b's other row is sent")
                try f.syncRounds(3, ["a", "b"])
                try f.assertSameRows(what)
                // Under the row-level policies the row that wins takes its parent with it: b's row (its old parent
                // included) under `local-wins`, and under `server-wins` when b's edit reached the cloud first.
                if policy.hasPrefix("property-") {
                    XCTAssertEqual(try f.sql("a", "SELECT p.name FROM folders c JOIN folders p ON p.id = c.parent "
                                                + "WHERE c.name = 'c3 by b'"), "new9\n",
                                   "\(what): folder 3 is under the new folder")
                }
                XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM folders WHERE name = 'r2'"), "0\n",
                               "\(what): the old parent is deleted")
                for s in f.stores { try f.assertHealthy(s, what) }
            }
        }
    }

    /// A tree's export over many small batches, its new, changed and deleted rows in every order of keys: each page
    /// starts after the last (rank and key), so every row reaches the other store once.
    func testATreeExportsInPagesOfNewChangedAndDeletedRowsFile() throws {
        let f = try Fleet(backend: .file, schema: Self.treeSchema, cloudExtra: "      merge_policy: property-local-wins",
                          label: "storectl-parent-first-pages")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40) "
                  + "INSERT INTO folders SELECT i, 'f' || i, CASE WHEN i > 1 THEN i - 1 END FROM n", foreignKeys: true)
        try f.syncRounds(2, ["a", "b"])
        try f.sql("a", """
            WITH RECURSIVE n(i) AS (SELECT 100 UNION ALL SELECT i + 1 FROM n WHERE i < 130)
            INSERT INTO folders SELECT i, 'new' || i, CASE WHEN i > 100 THEN i - 1 END FROM n;
            UPDATE folders SET parent = 100 + id WHERE id BETWEEN 2 AND 30 AND id % 3 = 0;
            UPDATE folders SET name = name || '!' WHERE id % 5 = 0;
            DELETE FROM folders WHERE id = 40;
            """, foreignKeys: true)
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "7"])
        try f.run("b", ["sync"])
        try f.assertSameRows("a tree exported in pages of 7")
        XCTAssertEqual(try f.sql("b", "SELECT count(*) FROM folders"), "70\n", "39 old folders and 31 new ones")
        for s in f.stores { try f.assertHealthy(s, "a tree exported in pages of 7") }
    }
}
