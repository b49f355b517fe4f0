import Foundation
import TestSupport
import XCTest

/// A row deleted and created again as itself (same UNIQUE key) at the rowid it had, while another store edits it:
/// the old record's tombstone goes over the edit under every policy but `error`, because the new row stands for
/// it; left live, the old record would meet the new one at one key on every store and be merged with it. The same
/// holds when the key holds a reference (`UNIQUE(list_id, pos)`, `list_id REFERENCES lists`): the record's
/// reference is compared as the parent's key here.
final class RecreatedUniqueRowTests: XCTestCase {
    static let plainSchema = """
        CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, list_id INTEGER NOT NULL, pos INTEGER NOT NULL,
                                         title TEXT, UNIQUE(list_id, pos));
        CREATE TABLE IF NOT EXISTS lists(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        """
    static let referenceSchema = """
        CREATE TABLE IF NOT EXISTS lists(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY,
                                         list_id INTEGER NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
                                         pos INTEGER NOT NULL, title TEXT, UNIQUE(list_id, pos));
        """

    func recreated(_ backend: FleetBackend, schema: String, policy: String) throws {
        let f = try Fleet.pair(backend, schema: schema, policy: policy, rows: """
            INSERT INTO lists VALUES (1, 'L');
            INSERT INTO items VALUES (1, 1, 1, 'x'), (2, 1, 2, 'y');
            """, label: "storectl-recreated-unique")
        // b edits y; a deletes y and creates it again at the same place, where it takes y's rowid.
        try f.sql("b", "UPDATE items SET title = 'y edited' WHERE id = 2")
        try f.run("b", ["sync"])
        try f.sql("a", "DELETE FROM items WHERE id = 2; INSERT INTO items(list_id, pos, title) VALUES (1, 2, 'y again')")
        try f.syncRounds(3, ["a", "b"])
        let rows = try f.settledRows("items", count: 2, "[\(policy)] a row created again as itself")
        XCTAssertTrue(rows.contains { $0.contains("title=t:'y again'") }, "[\(backend), \(policy)] \(rows)")
    }

    func testARecreatedRowsTombstoneGoesOverAnEditFile() throws {
        for policy in ["server-wins", "property-server-wins", "local-wins"] {
            try recreated(.file, schema: Self.plainSchema, policy: policy)
        }
    }

    func testARecreatedRowsTombstoneGoesOverAnEditWithAReferenceInTheKeyFile() throws {
        for policy in ["server-wins", "property-server-wins", "local-wins"] {
            try recreated(.file, schema: Self.referenceSchema, policy: policy)
        }
    }

    func testARecreatedRowsTombstoneGoesOverAnEditWithAReferenceInTheKeyPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try recreated(pg, schema: Self.referenceSchema, policy: "server-wins")
    }
}
