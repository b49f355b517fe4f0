import Foundation
import TestSupport
import XCTest

/// A row deleted on one store while another row takes its rowid: the old record's tombstone goes through the
/// outbox, and meets an edit another store made meanwhile. The merge policy decides, as for any local delete;
/// before, the tombstone was sent over the edit under every policy (the edit lost under `server-wins`, no
/// conflict under `error`), so the outcome of an edit depended on whether SQLite reused the rowid.
final class OutboxMergeTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
        """

    private let edited = "notes|title=t:'P edited by a'|uuid=t:'p'"
    private let others = ["notes|title=t:'Q'|uuid=t:'q'", "notes|title=t:'new by b'|uuid=t:'new-b'"]

    /// a and b synced; b deletes P and inserts a new note at P's rowid; a edits P's title, and syncs first.
    private func deleteAtAReusedRowidMeetsAnEdit(_ backend: FleetBackend, policy: String) throws -> Fleet {
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      merge_policy: \(policy)",
                          label: "storectl-outbox")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'p', 'P'), (2, 'q', 'Q')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("b", "BEGIN; DELETE FROM notes WHERE id = 1; "
                  + "INSERT INTO notes(id, uuid, title) VALUES (1, 'new-b', 'new by b'); COMMIT;")
        try f.sql("a", "UPDATE notes SET title = 'P edited by a' WHERE id = 1")
        try f.run("a", ["sync"])
        return f
    }

    private func theEditStands(_ backend: FleetBackend, policy: String) throws {
        let f = try deleteAtAReusedRowidMeetsAnEdit(backend, policy: policy)
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows([edited] + others, "\(policy): the edit made elsewhere stands over the delete")
        for s in f.stores { try f.assertHealthy(s, "\(policy) after the delete met the edit") }
    }

    private func theDeleteStands(_ backend: FleetBackend, policy: String) throws {
        let f = try deleteAtAReusedRowidMeetsAnEdit(backend, policy: policy)
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(others, "\(policy): the delete made here stands over the edit")
        for s in f.stores { try f.assertHealthy(s, "\(policy) after the delete met the edit") }
    }

    func testServerWinsKeepsTheEditFile() throws { try theEditStands(.file, policy: "server-wins") }
    func testPropertyServerWinsKeepsTheEditFile() throws { try theEditStands(.file, policy: "property-server-wins") }
    func testLocalWinsKeepsTheDeleteFile() throws { try theDeleteStands(.file, policy: "local-wins") }
    func testPropertyLocalWinsKeepsTheDeleteFile() throws { try theDeleteStands(.file, policy: "property-local-wins") }

    func testServerWinsKeepsTheEditPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try theEditStands(pg, policy: "server-wins")
    }

    /// A natural-key child of the re-inserted parent: its old record's tombstone meets an edit made elsewhere. The
    /// child goes with the old parent on every store (a delete wins over the children of a deleted parent), under
    /// every policy, with no conflict to report.
    func testAChildOfAReinsertedParentFollowsItsParentFile() throws {
        for policy in ["server-wins", "error"] {
            let f = try Fleet(backend: .file, schema: Self.schema + """
                CREATE TABLE IF NOT EXISTS tags(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                                tag TEXT NOT NULL, color TEXT, PRIMARY KEY (note_id, tag));
                """, cloudExtra: "      merge_policy: \(policy)", label: "storectl-outbox")
            try f.cloudMode("a")
            try f.cloudMode("b")
            try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'n1', 'one'); "
                      + "INSERT INTO tags VALUES (1, 'x', 'plain'), (1, 'y', 'plain')")
            try f.syncRounds(1, ["a", "b"])
            try f.sql("b", "UPDATE tags SET color = 'red by b' WHERE tag = 'x'")
            try f.sql("a", "BEGIN; DELETE FROM notes WHERE id = 1; INSERT INTO notes(id, uuid, title) VALUES (1, 'n1', "
                      + "'one reborn'); INSERT INTO tags VALUES (1, 'x', 'blue by a'); COMMIT;")
            try f.run("b", ["sync"])
            try f.syncRounds(3, ["a", "b"])
            try f.assertRows(["notes|title=t:'one reborn'|uuid=t:'n1'",
                              "tags|color=t:'blue by a'|note_id=->notes{title=t:'one reborn',uuid=t:'n1'}|tag=t:'x'"],
                             stores: ["a", "b"], late: false, "\(policy): a child of a re-inserted parent")
            try f.run(nil, ["--store", "b", "verify"])
        }
    }

    /// The row re-created as itself (the same UNIQUE value at the reused rowid): the new row stands for the old
    /// record, which must never stay live beside it (another store would merge the two): the tombstone goes under
    /// every policy, and the stores agree with one row.
    func testARowReCreatedAsItselfReplacesTheOldRecordFile() throws {
        for policy in ["server-wins", "property-server-wins"] {
            let f = try Fleet(backend: .file, schema: Self.schema, cloudExtra: "      merge_policy: \(policy)",
                              label: "storectl-outbox")
            try f.cloudMode("a")
            try f.cloudMode("b")
            try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'p', 'P')")
            try f.syncRounds(1, ["a", "b"])
            try f.sql("b", "BEGIN; DELETE FROM notes WHERE id = 1; "
                      + "INSERT INTO notes(id, uuid, title) VALUES (1, 'p', 'P again by b'); COMMIT;")
            try f.sql("a", "UPDATE notes SET title = 'P edited by a' WHERE id = 1")
            try f.run("a", ["sync"])
            try f.syncRounds(2, ["b", "a"])
            try f.assertRows(["notes|title=t:'P again by b'|uuid=t:'p'"], "\(policy): the re-created row stands")
            for s in f.stores { try f.assertHealthy(s, "\(policy): a row re-created as itself") }
        }
    }

    func testErrorReportsTheConflictFile() throws {
        let f = try deleteAtAReusedRowidMeetsAnEdit(.file, policy: "error")
        let r = try f.run("b", ["sync"], expect: 65)
        XCTAssertTrue(r.stderr.contains("conflict"), "\(r)")
        // Nothing was lost meanwhile: the edit is in the cloud, b's new row is here; a sees its edit.
        XCTAssertEqual(try f.sql("a", "SELECT title FROM notes WHERE uuid = 'p'")
            .trimmingCharacters(in: .whitespacesAndNewlines), "P edited by a")
        XCTAssertEqual(try f.sql("b", "SELECT title FROM notes WHERE id = 1")
            .trimmingCharacters(in: .whitespacesAndNewlines), "new by b")
        // It stays a conflict until a policy decides it.
        try f.run("b", ["sync"], expect: 65)
        try f.run(nil, ["config", "set", "stores.b.cloud.merge_policy", "server-wins"])
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows([edited] + others, stores: ["a", "b"], late: false, "error, then server-wins on b")
    }
}
