import Foundation
import TestSupport
import XCTest

/// A store restored from a backup inserts a new row at a rowid its later self had given another row, whose record
/// another store merged (as a duplicate of a UNIQUE value) after the new row was written. The new row is a row of
/// its own: it gets a record name of its own, and is never merged into the winner of the old record's merge.
final class RestoredRowidNameTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS links(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
            label TEXT NOT NULL, PRIMARY KEY (note_id, label));
        """

    func newRowAtAReusedRowid(_ backend: FleetBackend) throws {
        // The merge's winner is b's row, whatever the record names: `keep: newest(title)`.
        let f = try Fleet(backend: backend, schema: Self.schema,
                          storeYAML: "    entities:\n      notes: {unique: [uuid], keep: newest(title)}\n      links: {}",
                          label: "storectl-restored-rowid")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.backup("a", as: "empty")
        // a's later self: note u1 at rowid 1, with a link, synced.
        try f.sql("a", "INSERT INTO notes VALUES (1, 'u1', 'by a'); INSERT INTO links VALUES (1, 'L-a')")
        try f.run("a", ["sync"])
        // The backup comes back; a writes a new note at rowid 1.
        try f.restore("a", from: "empty")
        try f.sql("a", "INSERT INTO notes VALUES (1, 'u2', 'new on a')")
        // b had made u1 too: its sync merges a's u1 into its own (the winner), after a's new row was written.
        try f.sql("b", "INSERT INTO notes VALUES (1, 'u1', 'by b'); INSERT INTO links VALUES (1, 'L-b')")
        try f.run("b", ["sync"])
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["notes|title=t:'by b'|uuid=t:'u1'", "notes|title=t:'new on a'|uuid=t:'u2'",
                          "links|label=t:'L-a'|note_id=->notes{title=t:'by b',uuid=t:'u1'}",
                          "links|label=t:'L-b'|note_id=->notes{title=t:'by b',uuid=t:'u1'}"],
                         "a new row at a reused rowid on a restored copy, the old record merged meanwhile")
        for s in f.stores { try f.assertHealthy(s, "after the restore and the merge") }
    }

    func testANewRowAtAReusedRowidOnARestoredCopyStaysItsOwnFile() throws { try newRowAtAReusedRowid(.file) }

    func testANewRowAtAReusedRowidOnARestoredCopyStaysItsOwnPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try newRowAtAReusedRowid(pg)
    }
}
