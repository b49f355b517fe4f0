import Foundation
import TestSupport
import XCTest

/// A swap of UNIQUE values made here, not sent yet, meets the import of another store's edit of a swapped row
/// (the export left a row to the import first, or the import runs before the export): the merge policy keeps the
/// swapped value here, and the row meets the other rows with that value, not with the record's old one, which the
/// swap's other row holds now. Before, the import compared the record's whole values: the old value met the
/// other swapped row, and the two rows were merged as duplicates (one lost on every store).
final class SwapMeetsImportTests: XCTestCase {
    /// x, y, z, w at positions 1 to 4. b swaps z and w and renames x, and syncs. a swaps x and y and renames z
    /// (which b moved: a's export leaves it to the import first), then syncs.
    func swapMeetsAnImportedEdit(_ backend: FleetBackend, policy: String) throws {
        let what = "[\(backend)] \(policy)"
        let f = try Fleet.pair(backend, schema: LocalWinsUniqueTests.schema, policy: policy,
                               rows: "INSERT INTO items VALUES (1, 1, 'x'), (2, 2, 'y'), (3, 3, 'z'), (4, 4, 'w')",
                               label: "storectl-swap-meets-import")
        try f.sql("b", "BEGIN; UPDATE items SET pos = -1 WHERE id = 3; UPDATE items SET pos = 3 WHERE id = 4; "
                     + "UPDATE items SET pos = 4 WHERE id = 3; UPDATE items SET title = 'x by b' WHERE id = 1; COMMIT;")
        try f.run("b", ["sync"])
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try f.sql("a", "UPDATE items SET title = 'z by a' WHERE id = 3")
        try f.syncRounds(3, ["a", "b"])
        let rows = try f.settledRows("items", count: 4, what)
        // a's swap and b's swap both stand; the titles go by the policy.
        let positions = rows.compactMap { row -> String? in
            guard let pos = row.split(separator: "|").first(where: { $0.hasPrefix("pos=") }),
                  let title = row.split(separator: "|").first(where: { $0.hasPrefix("title=") }) else { return nil }
            return "\(pos.dropFirst(4)) \(title.dropFirst(6))"
        }.sorted()
        XCTAssertTrue(positions.count == 4 && positions[0].hasPrefix("i:1 t:'y'") && positions[1].hasPrefix("i:2 t:'x")
                      && positions[2].hasPrefix("i:3 t:'w'") && positions[3].hasPrefix("i:4 t:'z"),
                      "\(what): both swaps stand: \(positions)")
    }

    /// Every store picks the same winner of a duplicate. `notes.uuid` is UNIQUE and the `unique:` rule keeps the
    /// newest (or oldest) `updated_at`. b moves note 1 to uuid u9 (updated_at 200) and syncs; a, before it sees
    /// that, inserts note 3 at u9 (150) and edits note 1 (title, updated_at `edit`). a weighs note 1's record, as
    /// b, which meets the duplicate from the other side, weighs note 1's row: both see updated_at 200. Before, a
    /// weighed its own merged row: with `edit` 120 the two stores chose different winners, each deleted the
    /// other's record, and the cloud held no note while `status` said healthy (with a first fix, `edit` 300 did
    /// the same: the rule read the column as NULL).
    func duplicateWinner(_ backend: FleetBackend, policy: String, keep: String, edit: Int) throws {
        let what = "[\(backend)] \(policy), keep: \(keep), a's edit at \(edit)"
        let f = try Fleet.pair(backend, schema: """
                CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT,
                                                 updated_at INTEGER);
                """, policy: policy, storeYAML: """
                    entities:
                      notes:
                        unique: [uuid]
                        keep: \(keep)
                """, rows: "INSERT INTO notes VALUES (1, 'u1', 't1', 100)", label: "storectl-duplicate-winner")
        try f.sql("b", "UPDATE notes SET uuid = 'u9', updated_at = 200 WHERE uuid = 'u1'")
        try f.run("b", ["sync"])
        try f.sql("a", "INSERT INTO notes VALUES (3, 'u9', 'n3', 150); "
                     + "UPDATE notes SET title = 't1 by a', updated_at = \(edit) WHERE id = 1")
        try f.syncRounds(3, ["a", "b"])
        // Note 1 (200 in the cloud) is newer than note 3 (150): it wins under newest, with a's edit merged in.
        let winner = keep.hasPrefix("newest") ? "notes|title=t:'t1 by a'|updated_at=i:\(edit)|uuid=t:'u9'"
            : "notes|title=t:'n3'|updated_at=i:150|uuid=t:'u9'"
        try f.assertRows([winner], what)
        _ = try f.settledRows("notes", count: 1, what)
    }

    func testADuplicatesWinnerIsTheSameOnEveryStoreFile() throws {
        for policy in ["property-local-wins", "local-wins"] {
            for keep in ["newest(updated_at)", "oldest(updated_at)"] {
                for edit in [300, 120] { try duplicateWinner(.file, policy: policy, keep: keep, edit: edit) }
            }
        }
    }

    func testADuplicatesWinnerIsTheSameOnEveryStorePostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try duplicateWinner(pg, policy: "property-local-wins", keep: "newest(updated_at)", edit: 120)
    }

    func testASwapMeetsAnImportedEditFile() throws {
        for policy in ["local-wins", "server-wins", "property-local-wins", "property-server-wins"] {
            try swapMeetsAnImportedEdit(.file, policy: policy)
        }
    }

    func testASwapMeetsAnImportedEditPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try swapMeetsAnImportedEdit(pg, policy: "local-wins")
    }
}
