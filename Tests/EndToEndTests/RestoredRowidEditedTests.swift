import Foundation
import TestSupport
import XCTest

/// A store restored from a backup inserts a new row at a rowid its later self had given another row, which
/// another store edited since. The new row is a row of its own and gets a record name of its own; the later
/// self's row comes back with the other store's edit. Before, the new row took over the record (the restored
/// record map does not know its name): the later self's row and the edit were lost.
final class RestoredRowidEditedTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL);
        """

    /// Stores a and b under `policy`; a backed up empty ("empty"), then its later self writes note u1 at rowid 1 and
    /// syncs.
    func laterSelf(_ backend: FleetBackend, policy: String, label: String) throws -> Fleet {
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      merge_policy: \(policy)", label: label)
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.backup("a", as: "empty")
        try f.sql("a", "INSERT INTO notes VALUES (1, 'u1', 'by a')")
        try f.run("a", ["sync"])
        return f
    }

    func newRowOverAnEditedRecord(_ backend: FleetBackend, policy: String) throws {
        // a's later self's note u1, edited by b.
        let f = try laterSelf(backend, policy: policy, label: "storectl-restored-edited")
        try f.run("b", ["sync"])
        try f.sql("b", "UPDATE notes SET title = 'edited by b' WHERE uuid = 'u1'")
        try f.run("b", ["sync"])
        // The backup comes back; a writes a new note at rowid 1.
        try f.restore("a", from: "empty")
        try f.sql("a", "INSERT INTO notes VALUES (1, 'u2', 'new on a')")
        try f.syncRounds(3, ["a", "b"])
        let what = "[\(backend), \(policy)] a new row at a reused rowid on a restored copy, the old record edited"
        try f.assertRows(["notes|title=t:'edited by b'|uuid=t:'u1'", "notes|title=t:'new on a'|uuid=t:'u2'"], what)
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testANewRowOnARestoredCopyLeavesAnEditedRecordAloneFile() throws {
        for policy in ["property-local-wins", "local-wins", "server-wins", "error"] {
            try newRowOverAnEditedRecord(.file, policy: policy)
        }
    }

    /// On a store restored once, a later row's save killed before the store recorded it, then edited by b: the
    /// resumed sync finds its own save (`Reconciler`) and the row stays one row with b's edit, not two.
    func testAKilledSaveOnAStoreRestoredEarlierStaysOneRowFile() throws {
        let f = try laterSelf(.file, policy: "local-wins", label: "storectl-restored-killed")
        try f.restore("a", from: "empty")
        try f.syncRounds(2, ["a", "b"])
        try f.sql("a", "INSERT INTO notes VALUES (5, 'u5', 'later on a')")
        try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": "export.after-save:1"], expect: 137)
        try f.run("b", ["sync"])
        try f.sql("b", "UPDATE notes SET title = 'edited by b' WHERE uuid = 'u5'")
        try f.run("b", ["sync"])
        try f.syncRounds(3, ["a", "b"])
        let what = "a killed save on a store restored earlier, edited elsewhere before the resume"
        try f.assertRows(["notes|title=t:'by a'|uuid=t:'u1'", "notes|title=t:'edited by b'|uuid=t:'u5'"], what)
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testANewRowOnARestoredCopyLeavesAnEditedRecordAlonePostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try newRowOverAnEditedRecord(pg, policy: "local-wins")
    }
}
