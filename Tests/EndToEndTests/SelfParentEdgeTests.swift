import Foundation
import TestSupport
import XCTest

/// A row that is its own parent through a NOT NULL reference, meeting what else a table holds: a UNIQUE value,
/// the largest rowid SQLite can give.
final class SelfParentEdgeTests: XCTestCase {
    /// Two stores make the same root folder (UNIQUE name), each its own parent, each with a child: the roots are
    /// merged as duplicates, and on every store the root stays its own parent (never the parent of a child row, whose
    /// deletion would then take the whole tree with it).
    func sameUniqueRootOnTwoStores(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                parent INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE);
            """, label: "storectl-self-parent-unique")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO folders VALUES (1, 'root', 1), (2, 'a-child', 1)")
        try f.sql("b", "INSERT INTO folders VALUES (1, 'root', 1), (2, 'b-child', 1)")
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["folders|name=t:'a-child'|parent=->folders{name=t:'root'}",
                          "folders|name=t:'b-child'|parent=->folders{name=t:'root'}",
                          "folders|name=t:'root'|parent=->folders{name=t:'root'}"],
                         "the same UNIQUE root, its own parent, on two stores")
        for s in f.stores { try f.assertHealthy(s, "the same UNIQUE root on two stores") }
        // A child deleted on one store takes only itself on every store.
        try f.sql("b", "DELETE FROM folders WHERE name = 'b-child'")
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["folders|name=t:'a-child'|parent=->folders{name=t:'root'}",
                          "folders|name=t:'root'|parent=->folders{name=t:'root'}"],
                         "a child of the merged root deleted")
    }

    func testTheSameUniqueRootThatIsItsOwnParentOnTwoStoresFile() throws { try sameUniqueRootOnTwoStores(.file) }

    /// A store holds a row at the largest rowid (9223372036854775807, a sentinel some apps use) and a row at rowid 1;
    /// a root folder that is its own parent arrives from another store: it gets a rowid of its own, and the rows
    /// that were here stay.
    func selfParentAfterTheLargestRowid(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE);
            """, label: "storectl-self-parent-max")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("b", """
            INSERT INTO folders VALUES (1, 'b-root', 1), (9223372036854775807, 'sentinel', 9223372036854775807)
            """)
        try f.sql("a", "INSERT INTO folders VALUES (50, 'a-root', 50), (60, 'a-child', 50)")
        try f.syncRounds(3, ["b", "a"])
        try f.assertRows(["folders|name=t:'a-child'|parent=->folders{name=t:'a-root'}",
                          "folders|name=t:'a-root'|parent=->folders{name=t:'a-root'}",
                          "folders|name=t:'b-root'|parent=->folders{name=t:'b-root'}",
                          "folders|name=t:'sentinel'|parent=->folders{name=t:'sentinel'}"],
                         "a self-parent row arriving at a store that holds the largest rowid")
        for s in f.stores { try f.assertHealthy(s, "a self-parent row after the largest rowid") }
    }

    func testASelfParentRowArrivingAfterTheLargestRowidFile() throws { try selfParentAfterTheLargestRowid(.file) }

    /// a deletes a root folder that is its own parent (nothing else goes with it) while b renames it: under
    /// `server-wins` and `property-server-wins` the edit wins, as it does for any row whose parent is still there;
    /// the row's reference to itself is no parent that was deleted with it.
    func selfParentDeletedWhileRenamed(_ backend: FleetBackend, schema: String, policy: String) throws {
        let f = try Fleet(backend: backend, schema: schema, cloudExtra: "      merge_policy: \(policy)",
                          label: "storectl-self-parent-revive")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO folders VALUES (1, 'root', 1)")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "DELETE FROM folders WHERE id = 1")
        try f.sql("b", "UPDATE folders SET name = 'renamed' WHERE id = 1")
        try f.syncRounds(3, ["b", "a"])
        try f.assertRows(["folders|name=t:'renamed'|parent=->folders{name=t:'renamed'}"],
                         "a self-parent root deleted while renamed elsewhere (\(policy))")
        for s in f.stores { try f.assertHealthy(s, "a self-parent root deleted while renamed (\(policy))") }
    }

    func testASelfParentRootDeletedWhileRenamedElsewhereServerWinsFile() throws {
        for policy in ["server-wins", "property-server-wins"] {
            try selfParentDeletedWhileRenamed(.file, schema: """
                CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                    parent INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE);
                """, policy: policy)
        }
    }
}
