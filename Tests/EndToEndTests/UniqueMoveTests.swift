import Foundation
import TestSupport
import XCTest

/// UNIQUE values that move between rows of one store (a swap through a temporary value, a reorder of a position
/// column, a shift along a chain): every other store, and a store restored from an older copy of itself, keeps
/// every row. Only a value two rows really share is a duplicate.
final class UniqueMoveTests: XCTestCase {
    static let notesSchema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
        """

    /// a swaps the uuids of two notes through a temporary value; under every merge policy both rows survive.
    func swap(_ backend: FleetBackend, policy: String?) throws {
        let f = try Fleet(backend: backend, schema: Self.notesSchema,
                          cloudExtra: policy.map { "      merge_policy: \($0)" } ?? "", label: "storectl-unique-move")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'a', 'one'), (2, 'b', 'two')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", """
            UPDATE notes SET uuid = 'tmp' WHERE id = 1; UPDATE notes SET uuid = 'a' WHERE id = 2;
            UPDATE notes SET uuid = 'b' WHERE id = 1;
            """)
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["notes|title=t:'one'|uuid=t:'b'", "notes|title=t:'two'|uuid=t:'a'"],
                         "two rows swapped their UNIQUE values (\(policy ?? "default policy"))")
        for s in f.stores { try f.assertHealthy(s, "swapped UNIQUE values (\(policy ?? "default policy"))") }
    }

    func testSwapFile() throws {
        for policy in [nil, "error", "server-wins", "property-local-wins"] { try swap(.file, policy: policy) }
    }

    func testSwapPostgres() throws {
        if let pg = FleetBackend.postgres() { try swap(pg, policy: nil) }
    }

    /// A UNIQUE key holding a reference (`UNIQUE(list_id, pos)`, `list_id REFERENCES lists`): a swaps two items'
    /// positions; b, which changed nothing, keeps both. Before, the import compared the reference's record name
    /// with the parent's key here, freed nothing, and merged the first item it applied with the other one.
    func swapInAKeyWithAReference(_ backend: FleetBackend, policy: String) throws {
        let what = "[\(backend)] a swap in UNIQUE(list_id, pos), \(policy)"
        let f = try Fleet.pair(backend, schema: """
            CREATE TABLE IF NOT EXISTS lists(id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, list_id INTEGER NOT NULL REFERENCES lists(id),
                                             pos INTEGER NOT NULL, title TEXT, UNIQUE(list_id, pos));
            """, policy: policy, rows: "INSERT INTO lists VALUES (1, 'L1'); "
                + "INSERT INTO items VALUES (1, 1, 1, 'p'), (2, 1, 2, 'q'), (3, 1, 3, 'r')",
            label: "storectl-unique-move-reference")
        try f.sql("a", "BEGIN; UPDATE items SET pos = -1 WHERE title = 'p'; UPDATE items SET pos = 1 WHERE title = 'q'; "
                     + "UPDATE items SET pos = 2 WHERE title = 'p'; COMMIT;")
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["lists|name=t:'L1'", "items|list_id=->lists{name=t:'L1'}|pos=i:1|title=t:'q'",
                          "items|list_id=->lists{name=t:'L1'}|pos=i:2|title=t:'p'",
                          "items|list_id=->lists{name=t:'L1'}|pos=i:3|title=t:'r'"], what)
        _ = try f.settledRows("items", count: 3, what)
    }

    func testASwapInAKeyWithAReferenceFile() throws {
        for policy in ["property-local-wins", "server-wins", "local-wins", "error"] {
            try swapInAKeyWithAReference(.file, policy: policy)
        }
    }

    /// The same key: a swaps p and q; b, before it sees that, makes a list L2 and moves q into it, and syncs first.
    /// a's export meets q's record, which names L2, not here yet: the row waits for the import, which brings L2,
    /// and takes its whole key then. Before, the export gave q the record's position under its old list (the
    /// list could not be set yet), which p held after the swap: every sync of a failed with exit 65 under
    /// `server-wins` (and the stores had differed silently before that).
    func moveToANewList(_ backend: FleetBackend, policy: String) throws {
        let what = "[\(backend)] a move into a list made with it meets a swap, \(policy)"
        let f = try Fleet.pair(backend, schema: """
            CREATE TABLE IF NOT EXISTS lists(id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY,
                                             list_id INTEGER NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
                                             pos INTEGER NOT NULL, title TEXT, UNIQUE(list_id, pos));
            """, policy: policy, rows: "INSERT INTO lists VALUES (1, 'L1'); "
                + "INSERT INTO items VALUES (1, 1, 1, 'p'), (2, 1, 2, 'q'), (3, 1, 3, 'r')",
            label: "storectl-unique-move-new-list")
        try f.sql("a", "BEGIN; UPDATE items SET pos = -1 WHERE title = 'p'; UPDATE items SET pos = 1 WHERE title = 'q'; "
                     + "UPDATE items SET pos = 2 WHERE title = 'p'; COMMIT;")
        try f.sql("b", "INSERT INTO lists VALUES (2, 'L2'); UPDATE items SET list_id = 2 WHERE title = 'q'")
        try f.syncRounds(3, ["b", "a"])
        let rows = try f.settledRows("items", count: 3, what)
        XCTAssertTrue(rows.contains("items|list_id=->lists{name=t:'L1'}|pos=i:2|title=t:'p'"), "\(what): \(rows)")
        // q's key is one value, changed on both sides: the cloud's (L2) under the server policies, a's (its swap
        // in L1) under the local ones.
        let serverWins = policy.hasSuffix("server-wins")
        XCTAssertTrue(rows.contains { serverWins ? $0.hasPrefix("items|list_id=->lists{name=t:'L2'}|") && $0.hasSuffix("|title=t:'q'")
                                                 : $0 == "items|list_id=->lists{name=t:'L1'}|pos=i:1|title=t:'q'" },
                      "\(what): q: \(rows)")
    }

    func testAMoveToANewListMeetingASwapFile() throws {
        for policy in ["server-wins", "property-server-wins", "local-wins", "property-local-wins"] {
            try moveToANewList(.file, policy: policy)
        }
    }

    func testAMoveToANewListMeetingASwapPostgres() throws {
        if let pg = FleetBackend.postgres() { try moveToANewList(pg, policy: "server-wins") }
    }

    func testASwapInAKeyWithAReferencePostgres() throws {
        if let pg = FleetBackend.postgres() { try swapInAKeyWithAReference(pg, policy: "property-local-wins") }
    }

    /// A list with a UNIQUE NOT NULL position column; the last item moves to the front, every other slot shifts
    /// by one (a cycle: each new slot is held by the row whose own record moves it on).
    func reorder(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS items(k TEXT PRIMARY KEY, slot INTEGER NOT NULL UNIQUE, label TEXT);
            """, label: "storectl-unique-move")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO items VALUES ('a', 1, 'A'), ('b', 2, 'B'), ('c', 3, 'C'), ('d', 4, 'D')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "UPDATE items SET slot = -slot; UPDATE items SET slot = 1 WHERE k = 'd'; "
                  + "UPDATE items SET slot = -slot + 1 WHERE slot < 0")
        // b edits a label meanwhile: its own change goes through as well.
        try f.sql("b", "UPDATE items SET label = 'B by b' WHERE k = 'b'")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["items|k=t:'a'|label=t:'A'|slot=i:2", "items|k=t:'b'|label=t:'B by b'|slot=i:3",
                          "items|k=t:'c'|label=t:'C'|slot=i:4", "items|k=t:'d'|label=t:'D'|slot=i:1"],
                         "items reordered under a UNIQUE slot column")
        for s in f.stores { try f.assertHealthy(s, "items reordered") }
    }

    func testReorderFile() throws { try reorder(.file) }

    func testReorderPostgres() throws {
        if let pg = FleetBackend.postgres() { try reorder(pg) }
    }

    /// A shift along a chain (d takes c's value, c takes b's, b takes a's) and a new row that takes the freed
    /// first value; then a real duplicate (a value two stores insert on their own) is still merged into one row.
    func testShiftThenARealDuplicateFile() throws {
        let f = try Fleet(backend: .file, schema: Self.notesSchema, label: "storectl-unique-move")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'a', 'one'), (2, 'b', 'two'), (3, 'c', 'three')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", """
            UPDATE notes SET uuid = 'd' WHERE id = 3; UPDATE notes SET uuid = 'c' WHERE id = 2;
            UPDATE notes SET uuid = 'b' WHERE id = 1; INSERT INTO notes(id, uuid, title) VALUES (4, 'a', 'four');
            """)
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["notes|title=t:'one'|uuid=t:'b'", "notes|title=t:'two'|uuid=t:'c'",
                          "notes|title=t:'three'|uuid=t:'d'", "notes|title=t:'four'|uuid=t:'a'"],
                         "a chain of UNIQUE values shifted by one, and a new row at the start")
        for s in f.stores { try f.assertHealthy(s, "shifted chain") }
        // The same new value on both stores: one row survives, the same on both.
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('shared', 'by a')")
        try f.sql("b", "INSERT INTO notes(uuid, title) VALUES ('shared', 'by b')")
        try f.syncRounds(2, ["a", "b"])
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM notes WHERE uuid = 'shared'"), "1\n")
        try f.assertSameRows("a real duplicate is merged")
        for s in f.stores { try f.assertHealthy(s, "a real duplicate") }
    }

    /// A store put back from a copy taken before its own swap takes back its later self's records: both rows.
    func testRestoredBeforeASwapFile() throws {
        let f = try Fleet(backend: .file, schema: Self.notesSchema, label: "storectl-unique-move")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'a', 'one'), (2, 'b', 'two')")
        try f.syncRounds(1, ["a", "b"])
        try f.backup("a", as: "before-swap")
        try f.sql("a", """
            UPDATE notes SET uuid = 'tmp' WHERE id = 1; UPDATE notes SET uuid = 'a' WHERE id = 2;
            UPDATE notes SET uuid = 'b' WHERE id = 1;
            """)
        try f.syncRounds(1, ["a"])
        try f.restore("a", from: "before-swap")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["notes|title=t:'one'|uuid=t:'b'", "notes|title=t:'two'|uuid=t:'a'"],
                         "a restored store takes back its own swap")
        for s in f.stores { try f.assertHealthy(s, "restored before a swap") }
    }

    /// A CHECK that refuses every placeholder: the rows cannot be freed. The swap waits on the importing store, set
    /// aside and reported, with both rows kept as they were (nothing merged away, nothing left holding a
    /// placeholder); the store that swapped keeps its swap.
    func testAColumnThatRefusesPlaceholdersFile() throws {
        let f = try Fleet(backend: .file, schema: """
            CREATE TABLE IF NOT EXISTS items(k TEXT PRIMARY KEY,
                slot INTEGER NOT NULL UNIQUE CHECK (typeof(slot) = 'integer' AND slot BETWEEN 1 AND 100));
            """, label: "storectl-unique-move")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO items VALUES ('a', 1), ('b', 2)")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "UPDATE items SET slot = 3 WHERE k = 'a'; UPDATE items SET slot = 1 WHERE k = 'b'; "
                  + "UPDATE items SET slot = 2 WHERE k = 'a'")
        try f.syncRounds(2, ["a", "b"])
        for s in f.stores { XCTAssertEqual(try f.integrity(s), [], s) }
        XCTAssertEqual(try f.sql("a", "SELECT k || '=' || slot FROM items ORDER BY k"), "a=2\nb=1\n")
        XCTAssertEqual(try f.sql("b", "SELECT k || '=' || slot FROM items ORDER BY k"), "a=1\nb=2\n")
        try f.assertReported("b", mentions: ["refuses every temporary value"], "a swap no placeholder can free")
        XCTAssertEqual(try f.containerSQL("SELECT count(*) FROM records WHERE deleted = 0"), "2\n",
                       "both rows are still live in the cloud")
    }

    /// A REAL UNIQUE position in a STRICT table (fractional positions, a common reorder column): two rows swap.
    func testARealPositionSwapInAStrictTableFile() throws {
        let f = try Fleet(backend: .file, schema: """
            CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, pos REAL NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '') STRICT;
            """, label: "storectl-unique-move")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO items(id, pos, title) VALUES (1, 1.0, 'one'), (2, 2.0, 'two'), (3, 3.0, 'three')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "UPDATE items SET pos = 9.5 WHERE id = 1; UPDATE items SET pos = 1.0 WHERE id = 2; "
                  + "UPDATE items SET pos = 2.0 WHERE id = 1")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["items|pos=r:2.0|title=t:'one'", "items|pos=r:1.0|title=t:'two'",
                          "items|pos=r:3.0|title=t:'three'"], "a swap of REAL positions in a STRICT table")
        for s in f.stores { try f.assertHealthy(s, "a swap of REAL positions") }
    }

    /// A child that follows its parent through `ON UPDATE CASCADE`, edited on the importing store in another
    /// column: it stays under the parent its record names, with its local edit.
    func testAChildByValueEditedHereFollowsTheSwapFile() throws {
        let f = try Fleet(backend: .file, schema: Self.notesSchema + """

            CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY,
                note_uuid TEXT REFERENCES notes(uuid) ON UPDATE CASCADE ON DELETE CASCADE, label TEXT);
            """, label: "storectl-unique-move")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'a', 'one'), (2, 'b', 'two');"
                  + "INSERT INTO tags(id, note_uuid, label) VALUES (1, 'a', 'tag of one'), (2, 'b', 'tag of two')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "UPDATE notes SET uuid = 't' WHERE id = 1; UPDATE notes SET uuid = 'a' WHERE id = 2; "
                  + "UPDATE notes SET uuid = 'b' WHERE id = 1")
        try f.sql("b", "UPDATE notes SET title = 'one (b)' WHERE id = 1; "
                  + "UPDATE tags SET label = 'tag of one (edited on b)' WHERE id = 1")
        try f.run("a", ["sync"])
        try f.run("b", ["sync"], env: ["STORECTL_BATCH_SIZE": "1"])
        try f.syncRounds(2, ["b", "a"])
        let tree = "SELECT group_concat(x, ' ; ') FROM (SELECT t.label || ' -> ' || coalesce(n.title, '?') AS x "
            + "FROM tags t LEFT JOIN notes n ON n.uuid = t.note_uuid ORDER BY 1)"
        for s in f.stores {
            XCTAssertEqual(try f.sql(s, tree), "tag of one (edited on b) -> one (b) ; tag of two -> two\n", s)
            try f.assertHealthy(s, "an edited child by value after a swap")
        }
    }
}
