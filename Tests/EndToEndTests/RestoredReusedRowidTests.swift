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

    /// How the old row left rowid 3 before b inserted its own there.
    enum OldRowGone: String {
        /// b deleted it, in the same history as the insert.
        case deletedHere = "b deleted u3"
        /// a deleted it, and b imported the deletion.
        case deletedElsewhere = "a deleted u3"
    }

    /// - Parameters:
    ///   - editedElsewhere: whether a edits b's row after b's later self sent it (else the cloud holds the later
    ///     self's version when the copy syncs).
    ///   - laterSelfEdits: whether b's later self edits its row after the backup was taken, and syncs.
    ///   - policy: b's `merge_policy` (nil: the default).
    /// - Returns: the fleet, synced, for the caller's checks of what it holds.
    private func scenario(_ backend: FleetBackend, after: AfterRestore, oldRow: OldRowGone = .deletedHere,
                          editedElsewhere: Bool = true, laterSelfEdits: Bool = false, policy: String? = nil) throws
        -> Fleet
    {
        let f = try Fleet(stores: ["a", "b"], backend: backend, schema: Self.schema,
                          cloudExtraByStore: policy.map { ["b": "      merge_policy: \($0)"] } ?? [:],
                          label: "storectl-restored-reused")
        try f.initialise("a")
        try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'u1', 'one'), (2, 'u2', 'two'), (3, 'u3', 'three')")
        try f.cloudMode("a")
        try f.cloudMode("b")
        switch oldRow {
        case .deletedHere: try f.sql("b", "DELETE FROM notes WHERE uuid = 'u3'")
        case .deletedElsewhere:
            try f.sql("a", "DELETE FROM notes WHERE uuid = 'u3'")
            try f.syncRounds(1, ["a", "b"])
        }
        // b's new row takes the rowid of the deleted row with the largest one.
        try f.sql("b", "INSERT INTO notes(uuid, title) VALUES ('c1', 'carol one')")
        XCTAssertEqual(try f.sql("b", "SELECT id FROM notes WHERE uuid = 'c1'").trimmingCharacters(in: .whitespacesAndNewlines),
                       "3", "the rowid was not reused")
        try f.backup("b", as: "reused")
        try f.run("b", ["sync"])
        if laterSelfEdits {
            try f.sql("b", "UPDATE notes SET title = 'carol one, edited by the later self' WHERE uuid = 'c1'")
            try f.run("b", ["sync"])
        }
        if editedElsewhere {
            try f.syncRounds(1, ["a"])
            try f.sql("a", "UPDATE notes SET title = 'carol one, edited on a' WHERE uuid = 'c1'")
            try f.run("a", ["sync"])
        }
        try f.restore("b", from: "reused")
        switch after {
        case .nothing: break
        case .edit: try f.sql("b", "UPDATE notes SET title = 'carol one, edited on the copy' WHERE uuid = 'c1'")
        case .delete: try f.sql("b", "DELETE FROM notes WHERE uuid = 'c1'")
        case .reinsert:
            try f.sql("b", "DELETE FROM notes WHERE uuid = 'c1'; INSERT INTO notes(uuid, title) VALUES ('c2', 'new on the copy')")
        }
        return f
    }

    private static let kept = ["notes|title=t:'one'|uuid=t:'u1'", "notes|title=t:'two'|uuid=t:'u2'"]

    private func converges(_ f: Fleet, on rows: [String], _ what: String) throws {
        try f.syncRounds(3, ["b", "a"])
        try f.assertRows((Self.kept + rows).sorted(), what)
        for s in f.stores {
            try f.assertHealthy(s, what)
            try f.run(s, ["verify"])
        }
    }

    /// The default policy, a edits the row after b's later self sent it: what the copy did since the restore is
    /// weighed against that edit.
    private func afterAnEditElsewhere(_ backend: FleetBackend) throws {
        for after in AfterRestore.allCases {
            let what = "[\(backend)] a edited the row, \(after.rawValue)"
            let f = try scenario(backend, after: after)
            switch after {
            case .nothing: try converges(f, on: ["notes|title=t:'carol one, edited on a'|uuid=t:'c1'"], what)
            // Both changed the title: the copy's change wins under property-local-wins.
            case .edit: try converges(f, on: ["notes|title=t:'carol one, edited on the copy'|uuid=t:'c1'"], what)
            case .delete: try converges(f, on: [], what)
            case .reinsert: try converges(f, on: ["notes|title=t:'new on the copy'|uuid=t:'c2'"], what)
            }
        }
    }

    /// No other store changed the row: the cloud holds the later self's version, which the copy takes as the base
    /// of what it changed since. Under `merge_policy: error` an edit or a deletion made on the copy is no conflict.
    private func withNoOtherChange(_ backend: FleetBackend) throws {
        for after in AfterRestore.allCases {
            let what = "[\(backend)] merge_policy error, no other change, \(after.rawValue)"
            let f = try scenario(backend, after: after, editedElsewhere: false, policy: "error")
            switch after {
            case .nothing: try converges(f, on: ["notes|title=t:'carol one'|uuid=t:'c1'"], what)
            case .edit: try converges(f, on: ["notes|title=t:'carol one, edited on the copy'|uuid=t:'c1'"], what)
            case .delete: try converges(f, on: [], what)
            case .reinsert: try converges(f, on: ["notes|title=t:'new on the copy'|uuid=t:'c2'"], what)
            }
        }
        let f = try scenario(backend, after: .nothing, oldRow: .deletedElsewhere, editedElsewhere: false)
        try converges(f, on: ["notes|title=t:'carol one'|uuid=t:'c1'"], "[\(backend)] u3 deleted on a, imported by b")
    }

    /// The copy deletes the row a edited after b's later self sent it: a deletion meeting an edit, which the merge
    /// policy decides as for any row (it went through whatever the policy, the copy's deletion sent over the edit).
    private func aDeletionMeetsAnEdit(_ backend: FleetBackend) throws {
        let error = try scenario(backend, after: .delete, policy: "error")
        try error.run("b", ["sync"], expect: 65)
        XCTAssertEqual(try error.status("b").result.status, 65, "[\(backend)] merge_policy error: the conflict is reported")
        XCTAssertEqual(try error.rows("a").filter { $0.contains("'c1'") },
                       ["notes|title=t:'carol one, edited on a'|uuid=t:'c1'"], "[\(backend)] the edit stays until resolved")
        let server = try scenario(backend, after: .delete, policy: "server-wins")
        try converges(server, on: ["notes|title=t:'carol one, edited on a'|uuid=t:'c1'"], "[\(backend)] server-wins")
        let local = try scenario(backend, after: .delete, policy: "local-wins")
        try converges(local, on: [], "[\(backend)] local-wins")
    }

    /// b's later self edits its row after the backup was taken: the copy never saw that edit, and what the copy
    /// changes since meets it as a conflict, as on any row the later self changed (it was overwritten, or the row
    /// deleted, with no conflict when the copy took the later version as the one its row stood on).
    private func anEditOfTheLaterSelf(_ backend: FleetBackend) throws {
        let edited = "notes|title=t:'carol one, edited by the later self'|uuid=t:'c1'"
        for after in [AfterRestore.edit, .delete] {
            let what = "[\(backend)] merge_policy error, the later self edited the row, \(after.rawValue)"
            let f = try scenario(backend, after: after, editedElsewhere: false, laterSelfEdits: true, policy: "error")
            try f.run("b", ["sync"], expect: 65)
            XCTAssertEqual(try f.status("b").result.status, 65, "\(what): the conflict is reported")
            try f.run("a", ["sync"])
            XCTAssertEqual(try f.rows("a").filter { $0.contains("'c1'") }, [edited], "\(what): the edit stays until resolved")
        }
        let server = try scenario(backend, after: .edit, editedElsewhere: false, laterSelfEdits: true, policy: "server-wins")
        try converges(server, on: [edited], "[\(backend)] server-wins, the later self edited the row, the copy too")
        let plain = try scenario(backend, after: .nothing, editedElsewhere: false, laterSelfEdits: true)
        try converges(plain, on: [edited], "[\(backend)] the later self edited the row, nothing written on the copy")
    }

    func testARestoredCopyTakesItsLaterSelfsRecordForARowAtAReusedRowidFile() throws {
        try afterAnEditElsewhere(.file)
        try withNoOtherChange(.file)
        try aDeletionMeetsAnEdit(.file)
        try anEditOfTheLaterSelf(.file)
    }

    func testARestoredCopyTakesItsLaterSelfsRecordForARowAtAReusedRowidPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try afterAnEditElsewhere(pg)
        try withNoOtherChange(pg)
        try aDeletionMeetsAnEdit(pg)
        try anEditOfTheLaterSelf(pg)
    }
}
