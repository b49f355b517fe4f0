import Foundation
import TestSupport
import XCTest

/// A row deleted here with its parent while another store edited it, where the reference is not to the parent's
/// primary key.
final class ParentGoneEdgeTests: XCTestCase {
    /// The notes name their folder by a UNIQUE code (`REFERENCES folders(code)`), not by its key. a deletes the
    /// folder (its note goes by ON DELETE CASCADE) while b edits the note: every sync goes through, and a delete wins
    /// on every store, under every merge policy.
    func parentByUniqueCodeDeletedWhileChildEdited(_ backend: FleetBackend, policy: String, order: [String]) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, code TEXT NOT NULL UNIQUE, name TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY,
                folder_code TEXT REFERENCES folders(code) ON DELETE CASCADE, title TEXT NOT NULL);
            """, cloudExtra: "      merge_policy: \(policy)", label: "storectl-parent-by-code")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO folders VALUES (1, 'f1', 'inbox'); INSERT INTO notes VALUES (1, 'f1', 'hello')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "DELETE FROM folders WHERE id = 1")
        try f.sql("b", "UPDATE notes SET title = 'edited'")
        try f.syncRounds(3, order)
        try f.assertRows([], "a parent named by a UNIQUE code deleted while its child was edited (\(policy), \(order))")
        for s in f.stores { try f.assertHealthy(s, "a parent named by a UNIQUE code deleted (\(policy), \(order))") }
    }

    func testAParentNamedByAUniqueCodeDeletedWhileItsChildIsEditedFile() throws {
        for policy in ["server-wins", "property-server-wins", "local-wins", "property-local-wins"] {
            for order in [["b", "a"], ["a", "b"]] {
                try parentByUniqueCodeDeletedWhileChildEdited(.file, policy: policy, order: order)
            }
        }
    }

    func testAParentNamedByAUniqueCodeDeletedWhileItsChildIsEditedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        for policy in ["server-wins", "property-local-wins"] {
            try parentByUniqueCodeDeletedWhileChildEdited(pg, policy: policy, order: ["b", "a"])
        }
    }
}
