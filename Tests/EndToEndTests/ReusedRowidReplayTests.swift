import Foundation
import TestSupport
import XCTest

/// A row deleted and inserted again at its rowid gets a new record name on its next export. When that export is
/// killed after the new name reached the cloud, the resumed export replays the same history (the export token did
/// not move): it must keep the name it gave, not rename the row a second time, which deleted the record the first
/// rename saved and every child another device added to it meanwhile.
final class ReusedRowidReplayTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS tags(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
            tag TEXT NOT NULL, PRIMARY KEY (note_id, tag));
        """

    private func replay(_ backend: FleetBackend, policy: String, failpoint: String) throws {
        let what = "[\(backend)] \(policy), killed at \(failpoint)"
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      merge_policy: \(policy)",
                          label: "storectl-reused-replay")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two'); "
                  + "INSERT INTO tags SELECT id, 'x' FROM notes")
        try f.syncRounds(1, ["a", "b"])
        // n1 deleted and inserted again at rowid 1, with its tags, in one transaction; the export is killed after
        // part of it reached the cloud.
        try f.sql("a", """
            BEGIN; DELETE FROM notes WHERE uuid = 'n1'; INSERT INTO notes(id, uuid, title) VALUES (1, 'n1', 'one reborn');
            INSERT INTO tags VALUES (1, 'x'), (1, 'y'); UPDATE notes SET title = 'two edited' WHERE uuid = 'n2'; COMMIT;
            """)
        let killed = try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1", "STORECTL_FAILPOINT": failpoint],
                               expect: nil)
        XCTAssertEqual(killed.status, 137, "\(what): the export was not killed\n\(killed)")
        // Another device takes in what arrived and tags both notes; this one edits and goes on.
        try f.run("b", ["sync"])
        try f.sql("b", "INSERT OR IGNORE INTO tags SELECT id, 'by-b' FROM notes")
        try f.sql("a", "UPDATE notes SET title = 'one reborn, edited' WHERE uuid = 'n1'; DELETE FROM tags WHERE tag = 'y'")
        try f.syncRounds(3, ["a", "b"])
        let expected = "n1|one reborn, edited|by-b,x\nn2|two edited|by-b,x\n"
        let query = "SELECT n.uuid, n.title, group_concat(t.tag) FROM notes n LEFT JOIN "
            + "(SELECT * FROM tags ORDER BY tag) t ON t.note_id = n.id GROUP BY n.id ORDER BY 1"
        for store in f.stores {
            XCTAssertEqual(try f.sql(store, query), expected, "\(what): \(store)")
            try f.assertHealthy(store, what)
        }
        try f.joinLate()
        XCTAssertEqual(try f.sql(Fleet.lateStore, query), expected, "\(what): a store that joins later")
    }

    func testAResumedExportKeepsTheNameItGaveOnAContainerFile() throws {
        for policy in ["error", "property-local-wins"] {
            for failpoint in ["export.after-batch-commit:1", "export.after-batch-commit:2", "export.after-save:1",
                              "export.before-commit:1"] {
                try replay(.file, policy: policy, failpoint: failpoint)
            }
        }
    }

    func testAResumedExportKeepsTheNameItGaveOnPostgreSQL() throws {
        guard let pg = FleetBackend.postgres() else { return }
        for failpoint in ["export.after-batch-commit:1", "export.after-save:1"] {
            try replay(pg, policy: "error", failpoint: failpoint)
        }
    }
}
