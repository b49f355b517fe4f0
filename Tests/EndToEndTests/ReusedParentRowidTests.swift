import Foundation
import TestSupport
import XCTest

/// A parent deleted and another inserted at its rowid on one store, while another store moves a row under it.
final class ReusedParentRowidTests: XCTestCase {
    /// a moves folder r1 under r2; b deletes r2 and inserts r2new, which takes r2's rowid. r2 is deleted everywhere,
    /// and r1, moved into it, goes with it on a (ON DELETE CASCADE): every store ends with r2new alone.
    func movedUnderAParentWhoseRowidIsReused(_ backend: FleetBackend, schema: String, rootParent: (Int) -> String)
        throws
    {
        let f = try Fleet(backend: backend, schema: schema, label: "storectl-moved-under-reused")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO folders VALUES (1, 'r1', \(rootParent(1))), (2, 'r2', \(rootParent(2)))")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "UPDATE folders SET parent = 2 WHERE id = 1")
        try f.sql("b", "DELETE FROM folders WHERE id = 2; INSERT INTO folders VALUES (2, 'r2new', \(rootParent(2)))")
        try f.syncRounds(3, ["a", "b"])
        try f.assertSameRows("a row moved under a parent whose rowid another store reused")
        XCTAssertEqual(try f.rows("a").filter { $0.contains("'r1'") }, [], "r1 went with its deleted parent")
        for s in f.stores { try f.assertHealthy(s, "a row moved under a parent whose rowid another store reused") }
    }

    func testARowMovedUnderAParentWhoseRowidIsReusedFile() throws {
        try movedUnderAParentWhoseRowidIsReused(.file, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER REFERENCES folders(id) ON DELETE CASCADE);
            """, rootParent: { _ in "NULL" })
    }

    func testASelfParentRowMovedUnderAParentWhoseRowidIsReusedFile() throws {
        try movedUnderAParentWhoseRowidIsReused(.file, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE);
            """, rootParent: { "\($0)" })
    }
}

/// A note inserted, deleted and inserted again at its rowid, then linked, all before the first sync; that sync is
/// killed once the link's record is saved and before the store records it. The note is new, not a reused rowid:
/// the name the first export gave it covers that history. Before, the resumed export took it for a reused rowid
/// and renamed it, and sent the link again under the note's old name with a reference to the new one: every
/// store's `doctor` found the link keyed to the note's other identity (and, once the link was renamed with its
/// note, another store's edit of the link made meanwhile was lost).
final class RenamedParentOfAKilledExportTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);
        CREATE TABLE IF NOT EXISTS links(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                         label TEXT NOT NULL, weight INTEGER, PRIMARY KEY (note_id, label));
        """

    /// With `editMeanwhile`, b edits the link between the killed sync and its resume: nothing is renamed, and b's
    /// edit of a column a never changed stays under `property-local-wins`.
    func linkOfANewNote(_ backend: FleetBackend, editMeanwhile: Bool) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-renamed-parent")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            INSERT INTO notes VALUES (1, 'n1', 'first');
            DELETE FROM notes WHERE id = 1;
            INSERT INTO notes VALUES (1, 'n1', 'again');
            INSERT INTO links VALUES (1, 'l1', 1);
            """)
        // The notes' batch is saved and recorded, the links' saved and not recorded.
        try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": "export.after-save:2"], expect: 137)
        try f.run("b", ["sync"])
        if editMeanwhile {
            try f.sql("b", "UPDATE links SET weight = 7 WHERE label = 'l1'")
            try f.run("b", ["sync"])
        }
        try f.run("a", ["sync"])
        try f.syncRounds(2, ["b", "a"])
        let what = "[\(backend)] the link of a new note, \(editMeanwhile ? "edited by b meanwhile" : "no other edit")"
        try f.assertRows(["links|label=t:'l1'|note_id=->notes{title=t:'again',uuid=t:'n1'}|weight=i:\(editMeanwhile ? 7 : 1)",
                          "notes|title=t:'again'|uuid=t:'n1'"], what)
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testTheLinkOfANewNoteSavedByAKilledSyncKeepsMatchingNamesFile() throws { try linkOfANewNote(.file, editMeanwhile: false) }

    func testTheLinkOfANewNoteSavedByAKilledSyncKeepsMatchingNamesPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try linkOfANewNote(pg, editMeanwhile: false)
    }

    func testAnEditOfTheLinkOfANewNoteMeetingAResumedExportStaysFile() throws {
        try linkOfANewNote(.file, editMeanwhile: true)
    }

    func testAnEditOfTheLinkOfANewNoteMeetingAResumedExportStaysPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try linkOfANewNote(pg, editMeanwhile: true)
    }
}

/// A note deleted and inserted again at its rowid in one transaction, its rows that reference it kept (a deferred
/// foreign key without an action): the note gets a new record name, and every row that still references it is
/// sent again, changed or not, under the new name. Before, an unchanged link and an unchanged comment kept
/// records that named the old note, whose tombstone made every store delete them.
final class ChildrenOfARenamedParentTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);
        CREATE TABLE IF NOT EXISTS links(note_id INTEGER NOT NULL REFERENCES notes(id) DEFERRABLE INITIALLY DEFERRED,
                                         label TEXT NOT NULL, weight INTEGER, PRIMARY KEY (note_id, label));
        CREATE TABLE IF NOT EXISTS comments(id INTEGER PRIMARY KEY,
                                            note_id INTEGER REFERENCES notes(id) DEFERRABLE INITIALLY DEFERRED,
                                            body TEXT);
        """

    func childrenStay(_ backend: FleetBackend) throws {
        let f = try Fleet.pair(backend, schema: Self.schema, policy: "property-local-wins", rows: """
            INSERT INTO notes VALUES (1, 'u1', 'one'), (2, 'u2', 'two');
            INSERT INTO links VALUES (1, 'p', 1), (1, 'q', 1), (2, 'r', 1);
            INSERT INTO comments VALUES (10, 1, 'on one');
            """, label: "storectl-children-renamed-parent")
        try f.sql("a", """
            BEGIN; DELETE FROM notes WHERE id = 1; INSERT INTO notes VALUES (1, 'u1', 'one again');
            UPDATE links SET weight = 2 WHERE note_id = 1 AND label = 'p'; COMMIT;
            """, foreignKeys: true)
        try f.syncRounds(3, ["a", "b"])
        let one = "->notes{title=t:'one again',uuid=t:'u1'}"
        try f.assertRows(["comments|body=t:'on one'|note_id=\(one)",
                          "links|label=t:'p'|note_id=\(one)|weight=i:2", "links|label=t:'q'|note_id=\(one)|weight=i:1",
                          "links|label=t:'r'|note_id=->notes{title=t:'two',uuid=t:'u2'}|weight=i:1",
                          "notes|title=t:'one again'|uuid=t:'u1'", "notes|title=t:'two'|uuid=t:'u2'"],
                         "[\(backend)] the rows that still reference a note inserted again at its rowid")
        for s in f.stores { try f.assertHealthy(s, "the rows of a note inserted again at its rowid") }
    }

    func testTheRowsOfANoteInsertedAgainAtItsRowidStayFile() throws { try childrenStay(.file) }

    func testTheRowsOfANoteInsertedAgainAtItsRowidStayPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try childrenStay(pg)
    }
}
