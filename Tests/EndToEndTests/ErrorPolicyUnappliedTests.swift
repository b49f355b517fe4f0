import Foundation
import TestSupport
import XCTest

/// Under `merge_policy: error`, a record from another store that this store's import does not apply (it waits for a
/// parent deleted here, or it is set aside) still meets this store's local changes to its row: the sync exits 65
/// before anything is saved, nothing is lost, and the next sync after the conflict is resolved sends everything.
final class ErrorPolicyUnappliedTests: XCTestCase {
    /// Folders and notes with a UNIQUE title; a note's folder goes by `action` when the folder is deleted.
    static func folders(_ action: String) -> String {
        """
        CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY,
                                         folder_id INTEGER\(action == "CASCADE" ? " NOT NULL" : "")
                                             REFERENCES folders(id) ON DELETE \(action),
                                         title TEXT NOT NULL UNIQUE, body TEXT);
        """
    }

    /// b edits note n2's body; a moves n2 out of folder F2, deletes F2 and swaps the titles of n1 and n2. b's edit
    /// waits on a for F2, which a deleted: it was never weighed against a's move.
    func parentDeletedHere(_ backend: FleetBackend, action: String) throws {
        let f = try Fleet(backend: backend, schema: Self.folders(action), cloudExtra: "      merge_policy: error",
                          label: "storectl-error-unapplied")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO folders VALUES (1, 'F1'), (2, 'F2'); "
                  + "INSERT INTO notes VALUES (1, 1, 'n1', 'b1'), (2, 2, 'n2', 'b2')")
        try f.syncRounds(2, ["a", "b"])
        try f.sql("b", "UPDATE notes SET body = 'b2 edited by b' WHERE title = 'n2'")
        try f.run("b", ["sync"])
        try f.sql("a", """
            BEGIN; UPDATE notes SET folder_id = 1 WHERE id = 2; DELETE FROM folders WHERE id = 2;
            UPDATE notes SET title = 'tmp' WHERE id = 1; UPDATE notes SET title = 'n1' WHERE id = 2;
            UPDATE notes SET title = 'n2' WHERE id = 1; COMMIT;
            """)
        let env = ["STORECTL_BATCH_SIZE": "1"]
        let refused = try f.run("a", ["sync"], env: env, expect: 65)
        XCTAssertTrue(refused.stdout.contains("conflict") || refused.stderr.contains("conflict"), "\(refused)")
        // Nothing of a's change reached the cloud.
        try f.run("b", ["sync"])
        let before = ["folders|name=t:'F1'", "folders|name=t:'F2'",
                      "notes|body=t:'b1'|folder_id=->folders{name=t:'F1'}|title=t:'n1'",
                      "notes|body=t:'b2 edited by b'|folder_id=->folders{name=t:'F2'}|title=t:'n2'"]
        try f.assertRows(before, stores: ["b"], tables: ["folders", "notes"], "[\(action)] b after a's refused sync")
        XCTAssertEqual(try f.liveCloudCounts()["notes"] ?? 0, 2, "[\(backend) \(action)] one live record per note")
        // The conflict stands until it is resolved: a's sync refuses again.
        try f.run("a", ["sync"], env: env, expect: 65)
        try f.run(nil, ["config", "set", "stores.a.cloud.merge_policy", "property-local-wins"])
        try f.run("a", ["sync"], env: env)
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["folders|name=t:'F1'", "notes|body=t:'b1'|folder_id=->folders{name=t:'F1'}|title=t:'n2'",
                          "notes|body=t:'b2 edited by b'|folder_id=->folders{name=t:'F1'}|title=t:'n1'"],
                         stores: ["a", "b"], tables: ["folders", "notes"], late: false,
                         "[\(action)] a's move, delete and swap, and b's edit, after the conflict was resolved")
        XCTAssertEqual(try f.liveCloudCounts()["notes"] ?? 0, 2, "[\(backend) \(action)] one live record per note")
    }

    func testAnEditWaitingForAParentDeletedHereIsAConflictFile() throws {
        try parentDeletedHere(.file, action: "SET NULL")
        try parentDeletedHere(.file, action: "CASCADE")
    }

    func testAnEditWaitingForAParentDeletedHereIsAConflictPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try parentDeletedHere(pg, action: "SET NULL")
    }

    /// b's edit of y is larger than a's `max_record_size`: a's import sets it aside, and a's swap of x and y must
    /// not land half.
    func testAnEditSetAsideHereIsAConflict() throws {
        let f = try Fleet(backend: .file, schema: LocalWinsUniqueTests.schema, cloudExtra: "      merge_policy: error",
                          label: "storectl-error-set-aside")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO items VALUES (1, 1, 'x'), (2, 2, 'y'), (3, 3, 'z')")
        try f.syncRounds(2, ["a", "b"])
        try f.run(nil, ["config", "set", "stores.a.cloud.max_record_size", "1KiB"])
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try f.sql("b", "UPDATE items SET title = 'y' || printf('%.2000c', '+') WHERE title = 'y'")
        try f.run("b", ["sync"])
        let refused = try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1"], expect: 65)
        XCTAssertTrue(refused.stdout.contains("conflict") || refused.stderr.contains("conflict"), "\(refused)")
        try f.run("b", ["sync"])
        XCTAssertEqual(try f.liveCloudCounts()["items"] ?? 0, 3, "one live record per row")
        XCTAssertEqual(try f.sql("b", "SELECT count(*) FROM items").trimmingCharacters(in: .whitespacesAndNewlines), "3",
                       "b keeps its three rows")
        XCTAssertEqual(try f.sql("b", "SELECT group_concat(pos || substr(title, 1, 1), ' ') FROM "
                                 + "(SELECT * FROM items ORDER BY pos)").trimmingCharacters(in: .whitespacesAndNewlines),
                       "1x 2y 3z", "nothing of a's swap reached b")
        try f.assertRows(["items|pos=i:1|title=t:'y'", "items|pos=i:2|title=t:'x'", "items|pos=i:3|title=t:'z'"],
                         stores: ["a"], late: false, "a keeps its swap")
    }
}
