import Foundation
import TestSupport
import XCTest

/// A store deletes a row and inserts another at its rowid, a backup of the store is taken, the store syncs (its
/// export sends the new row under a fresh record name and the old record's deletion), and the backup is put back.
/// The restored copy holds the same new row at the same rowid: its next sync must take the record its later self
/// sent as that row, not send the row again under another name (the row then stood twice on every store, with
/// `status`, `doctor` and `verify` all exiting 0). A table without UNIQUE columns: nothing but the name ties the
/// record to the row. (A read-only participant that did the same and was given write access before its backup came
/// back: `SharingTests`.)
final class RestoredReusedRowidTests: XCTestCase {
    static let schema = "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL);"

    enum AfterRestore: String, CaseIterable {
        case nothing = "nothing written on the copy"
        case edit = "the copy edits the row"
        case delete = "the copy deletes the row"
        case reinsert = "the copy deletes the row and inserts another at its rowid"
    }

    private func scenario(_ backend: FleetBackend, after: AfterRestore) throws {
        let what = "[\(backend)] \(after.rawValue)"
        let f = try Fleet(stores: ["a", "b"], backend: backend, schema: Self.schema, label: "storectl-restored-reused")
        try f.initialise("a")
        try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'u1', 'one'), (2, 'u2', 'two'), (3, 'u3', 'three')")
        try f.cloudMode("a")
        try f.cloudMode("b")
        // b deletes the row with the largest rowid; its new row takes that rowid.
        try f.sql("b", "DELETE FROM notes WHERE uuid = 'u3'; INSERT INTO notes(uuid, title) VALUES ('c1', 'carol one')")
        XCTAssertEqual(try f.sql("b", "SELECT id FROM notes WHERE uuid = 'c1'").trimmingCharacters(in: .whitespacesAndNewlines),
                       "3", what)
        try f.backup("b", as: "reused")
        try f.run("b", ["sync"])
        // The later self's row is edited on a after it reached the cloud.
        try f.syncRounds(1, ["a"])
        try f.sql("a", "UPDATE notes SET title = 'carol one, edited on a' WHERE uuid = 'c1'")
        try f.run("a", ["sync"])
        try f.restore("b", from: "reused")
        var expected = ["notes|title=t:'one'|uuid=t:'u1'", "notes|title=t:'two'|uuid=t:'u2'"]
        switch after {
        case .nothing:
            expected.append("notes|title=t:'carol one, edited on a'|uuid=t:'c1'")
        case .edit:
            try f.sql("b", "UPDATE notes SET title = 'carol one, edited on the copy' WHERE uuid = 'c1'")
            expected.append("notes|title=t:'carol one, edited on the copy'|uuid=t:'c1'")
        case .delete:
            try f.sql("b", "DELETE FROM notes WHERE uuid = 'c1'")
        case .reinsert:
            try f.sql("b", "DELETE FROM notes WHERE uuid = 'c1'; INSERT INTO notes(uuid, title) VALUES ('c2', 'new on the copy')")
            expected.append("notes|title=t:'new on the copy'|uuid=t:'c2'")
        }
        try f.syncRounds(3, ["b", "a"])
        try f.assertRows(expected.sorted(), what)
        for s in f.stores {
            try f.assertHealthy(s, what)
            try f.run(s, ["verify"])
        }
    }

    private func all(_ backend: FleetBackend) throws {
        for after in AfterRestore.allCases { try scenario(backend, after: after) }
    }

    func testARestoredCopyTakesItsLaterSelfsNameForARowAtAReusedRowidFile() throws { try all(.file) }

    func testARestoredCopyTakesItsLaterSelfsNameForARowAtAReusedRowidPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try all(pg)
    }
}
