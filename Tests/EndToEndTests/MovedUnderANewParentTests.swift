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
}
