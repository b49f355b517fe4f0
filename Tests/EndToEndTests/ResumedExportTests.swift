import Foundation
import TestSupport
import XCTest

/// An export killed after the cloud saved its batch (before the store recorded it), resumed after another store
/// imported that batch and edited the same rows: the resume is a replay, not a concurrent edit. The other store's
/// later edits stand under every merge policy, and the edits made here after the kill are still sent.
final class ResumedExportTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(uuid TEXT PRIMARY KEY NOT NULL, title TEXT, body TEXT);
        """

    func resumeAfterALaterEdit(_ backend: FleetBackend, policy: String) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      merge_policy: \(policy)",
                          label: "storectl-resumed-export")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes VALUES ('n1', 'one', 'b1'), ('n2', 'two', 'b2'), ('n3', 'three', 'b3')")
        try f.syncRounds(2, ["a", "b"])
        // a edits two notes; its sync saves them and is killed before it records the save.
        try f.sql("a", "UPDATE notes SET title = 'one by a' WHERE uuid = 'n1'; "
                  + "UPDATE notes SET title = 'two by a' WHERE uuid = 'n2'")
        try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": "export.after-save"], expect: 137)
        // b receives a's edits and edits the same notes again, after them.
        try f.run("b", ["sync"])
        try f.assertRows(["notes|body=t:'b1'|title=t:'one by a'|uuid=t:'n1'",
                          "notes|body=t:'b2'|title=t:'two by a'|uuid=t:'n2'",
                          "notes|body=t:'b3'|title=t:'three'|uuid=t:'n3'"], stores: ["b"], late: false,
                         "b received a's saved batch")
        try f.sql("b", "UPDATE notes SET title = 'one by b' WHERE uuid = 'n1'; DELETE FROM notes WHERE uuid = 'n2'")
        try f.run("b", ["sync"])
        // a, meanwhile, edits another column of n1 and a third note: those edits are newer than b's view.
        try f.sql("a", "UPDATE notes SET body = 'b1 by a' WHERE uuid = 'n1'; "
                  + "UPDATE notes SET title = 'three by a' WHERE uuid = 'n3'")
        try f.syncRounds(3, ["a", "b"])
        // b's later title and delete stand: a's resumed export is its old batch again, not an edit after b's.
        // a's body edit of n1, made after the kill, is a concurrent edit of another column: property-level
        // policies keep both; row-level policies pick one side of n1 whole.
        var n1 = "notes|body=t:'b1 by a'|title=t:'one by b'|uuid=t:'n1'"
        switch policy {
        case "local-wins": n1 = "notes|body=t:'b1 by a'|title=t:'one by a'|uuid=t:'n1'"
        case "server-wins": n1 = "notes|body=t:'b1'|title=t:'one by b'|uuid=t:'n1'"
        default: break
        }
        try f.assertRows([n1, "notes|body=t:'b3'|title=t:'three by a'|uuid=t:'n3'"],
                         "[\(policy)] b's edits after a's saved batch, then a's resume")
        for s in f.stores { try f.assertHealthy(s, "[\(policy)] after the resume") }
    }

    func testALaterEditStandsOverAResumedExportFile() throws {
        for policy in ["property-local-wins", "local-wins", "property-server-wins"] {
            try resumeAfterALaterEdit(.file, policy: policy)
        }
    }

    func testALaterEditStandsOverAResumedExportPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try resumeAfterALaterEdit(pg, policy: "property-local-wins")
    }
}

/// The same replay when the resumed sync must import first: the newer version another store saved gives a row a
/// UNIQUE value a row here still holds, so the import runs before the export. The import, like the export, counts
/// no adopted column as a change of this store: the other store's later edits and deletes stand.
final class ResumedExportImportFirstTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(uuid TEXT PRIMARY KEY NOT NULL, title TEXT UNIQUE, body TEXT, mood TEXT);
        """

    func resumeThroughAnImport(_ backend: FleetBackend, policy: String) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      merge_policy: \(policy)",
                          label: "storectl-resumed-import-first")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes VALUES ('n1', 'one', 'b1', NULL), ('n2', 'two', 'b2', NULL), "
                  + "('n3', 'three', 'b3', NULL)")
        try f.syncRounds(2, ["a", "b"])
        try f.sql("a", "UPDATE notes SET body = 'b1 by a' WHERE uuid = 'n1'; "
                  + "UPDATE notes SET body = 'b2 by a' WHERE uuid = 'n2'")
        try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": "export.after-save"], expect: 137)
        // a, after the kill, edits another column of n1: its resume has a change of n1 to send.
        try f.sql("a", "UPDATE notes SET mood = 'calm' WHERE uuid = 'n1'")
        try f.run("b", ["sync"])
        // b, after a's batch: n1 takes n3's title (n3 gives it up), and n2 goes.
        try f.sql("b", "UPDATE notes SET title = 'three, gone' WHERE uuid = 'n3'; "
                  + "UPDATE notes SET title = 'three', body = 'b1 by b' WHERE uuid = 'n1'; DELETE FROM notes WHERE uuid = 'n2'")
        try f.run("b", ["sync"])
        try f.syncRounds(3, ["a", "b"])
        // a's mood of n1, set after the kill, is a concurrent edit of another column: property-level policies keep
        // both sides; row-level ones pick one side of n1 whole (the UNIQUE title b moved stays b's).
        var n1 = "notes|body=t:'b1 by b'|mood=t:'calm'|title=t:'three'|uuid=t:'n1'"
        switch policy {
        case "local-wins": n1 = "notes|body=t:'b1 by a'|mood=t:'calm'|title=t:'three'|uuid=t:'n1'"
        case "server-wins": n1 = "notes|body=t:'b1 by b'|mood=null|title=t:'three'|uuid=t:'n1'"
        default: break
        }
        try f.assertRows([n1,
                          "notes|body=t:'b3'|mood=null|title=t:'three, gone'|uuid=t:'n3'"],
                         "[\(policy)] b's edits after a's saved batch, then a's resume through an import")
        for s in f.stores { try f.assertHealthy(s, "[\(policy)] after the resume through an import") }
    }

    func testALaterEditStandsOverAResumedExportThatImportsFirstFile() throws {
        for policy in ["property-local-wins", "local-wins", "property-server-wins", "server-wins"] {
            try resumeThroughAnImport(.file, policy: policy)
        }
    }

    func testALaterEditStandsOverAResumedExportThatImportsFirstPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try resumeThroughAnImport(pg, policy: "property-local-wins")
    }
}
