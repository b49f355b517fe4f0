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

    /// A note replaced by a new one that takes its UNIQUE uuid: the comments move to the new note, the old note is
    /// deleted. The replies of the moved comments survive everywhere (the old note's cascade reaches only what is
    /// still under it once the new note and the moved comments are in).
    func handOver(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
            CREATE TABLE IF NOT EXISTS comments(id INTEGER PRIMARY KEY, note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE, body TEXT);
            CREATE TABLE IF NOT EXISTS replies(id INTEGER PRIMARY KEY, comment_id INTEGER NOT NULL REFERENCES comments(id) ON DELETE CASCADE, body TEXT);
            """, label: "storectl-unique-move")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            INSERT INTO notes(id, uuid, title) VALUES (1, 'p', 'P');
            INSERT INTO comments(note_id, body) VALUES (1, 'c1'), (1, 'c2');
            INSERT INTO replies(comment_id, body) SELECT id, 'reply to ' || body FROM comments;
            """)
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", """
            INSERT INTO notes(uuid, title) VALUES ('tmp', 'P2');
            UPDATE comments SET note_id = (SELECT id FROM notes WHERE uuid = 'tmp');
            DELETE FROM notes WHERE id = 1;
            UPDATE notes SET uuid = 'p' WHERE uuid = 'tmp';
            """)
        try f.syncRounds(2, ["a", "b"])
        let tree = "SELECT group_concat(x, ' ; ') FROM (SELECT n.uuid || '/' || n.title || '/' || c.body || '/' "
            + "|| coalesce(r.body, '-') AS x FROM notes n JOIN comments c ON c.note_id = n.id "
            + "LEFT JOIN replies r ON r.comment_id = c.id ORDER BY 1)"
        for s in f.stores {
            XCTAssertEqual(try f.sql(s, tree), "p/P2/c1/reply to c1 ; p/P2/c2/reply to c2\n", "\(backend) \(s)")
            try f.assertHealthy(s, "a UNIQUE value handed to a new parent")
        }
        try f.assertSameRows("a UNIQUE value handed to a new parent")
    }

    func testHandOverToANewParentFile() throws { try handOver(.file) }

    func testHandOverToANewParentPostgres() throws {
        if let pg = FleetBackend.postgres() { try handOver(pg) }
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

    /// A CHECK that refuses every placeholder: the rows cannot be freed, and the settle does what it did before
    /// (nothing is left holding a placeholder, nothing is corrupted).
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
        for s in f.stores {
            XCTAssertEqual(try f.sql(s, "SELECT count(*) FROM items WHERE slot NOT BETWEEN 1 AND 100"), "0\n", s)
            XCTAssertEqual(try f.integrity(s), [], s)
        }
        XCTAssertEqual(try f.sql("a", "SELECT k || '=' || slot FROM items ORDER BY k"), "a=2\nb=1\n")
    }
}
