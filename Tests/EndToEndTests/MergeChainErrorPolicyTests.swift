import Foundation
import TestSupport
import XCTest

/// Three stores insert the same UNIQUE note, each with a child linked to its own copy, under `merge_policy: error`.
/// A store that merges its copy into another store's copy re-points its child there (storectl's own change, not a
/// user's); when that copy in turn loses to a third, another store re-points the same child further. The two
/// re-points are no conflict between users' edits: every store must keep syncing and end with every child on the
/// one winner. (Before, the store that re-pointed first failed every sync with exit 65.)
final class MergeChainErrorPolicyTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS links(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
            label TEXT NOT NULL, PRIMARY KEY (note_id, label));
        """
    static let entities = """
            entities:
              notes:
                unique: [uuid]
              links: {}
        """

    /// - Parameter deleteElsewhere: a user on b deletes L-c before b re-points it: the delete wins everywhere.
    private func chain(_ backend: FleetBackend, deleteElsewhere: Bool = false) throws {
        let f = try Fleet(stores: ["a", "b", "c"], backend: backend, schema: Self.schema, storeYAML: Self.entities,
                          cloudExtra: "      merge_policy: error", label: "storectl-merge-chain")
        // Record names of rowid tables begin with the store id: these make a's copy the winner of all three and
        // b's the winner over c's, so that c merges into b's copy first.
        for (store, id) in [("a", "0a"), ("b", "0b"), ("c", "0c")] {
            try f.initialise(store)
            try f.sql(store, "UPDATE _storectl_meta SET value = '\(id)000000-0000-4000-8000-000000000000' "
                      + "WHERE key = 'store_id'")
            try f.cloudMode(store)
            try f.sql(store, "INSERT INTO notes(uuid, title) VALUES ('shared', 'by \(store)'); "
                      + "INSERT INTO links(note_id, label) SELECT id, 'L-\(store)' FROM notes WHERE uuid = 'shared'")
        }
        try f.run("c", ["sync"])
        try f.run("b", ["sync"])  // b's copy wins over c's: L-c follows it
        // c merges its copy into b's while the re-point of L-c cannot be exported yet (mode cloud imports last).
        try f.run("c", ["mode", "local", "--no-final-sync"])
        try f.run("c", ["mode", "cloud"])
        XCTAssertEqual(JSONDoc.int(try f.status("c").doc, "pending_export"), 1, "[\(backend)] the re-point waits")
        try f.run("a", ["sync"])  // a's copy wins over both
        if deleteElsewhere { try f.sql("b", "DELETE FROM links WHERE label = 'L-c'") }
        try f.run("b", ["sync"])  // b's copy loses too: b re-points L-c at a's copy and saves it
        try f.run("c", ["sync"])  // c's own re-point (at b's copy) meets b's: no user's edit on either side
        try f.syncRounds(2, ["c", "b", "a"])
        let query = "SELECT n.uuid, n.title, group_concat(l.label) FROM notes n LEFT JOIN "
            + "(SELECT * FROM links ORDER BY label) l ON l.note_id = n.id GROUP BY n.id ORDER BY 1"
        let expected = deleteElsewhere ? "shared|by a|L-a,L-b\n" : "shared|by a|L-a,L-b,L-c\n"
        for store in f.stores {
            XCTAssertEqual(try f.sql(store, query), expected, "[\(backend)] \(store)")
            try f.assertHealthy(store, "[\(backend)] after the merges")
        }
        try f.joinLate()
        XCTAssertEqual(try f.sql(Fleet.lateStore, query), expected, "[\(backend)] a store that joins later")
    }

    func testAChainOfMergesIsNoConflictOnAContainerFile() throws {
        try chain(.file)
        try chain(.file, deleteElsewhere: true)
    }

    func testAChainOfMergesIsNoConflictOnPostgreSQL() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try chain(pg)
    }
}
