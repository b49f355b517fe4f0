import Foundation
import TestSupport
import XCTest

/// Under a row-level `local-wins`, a store that edits a row another store moved to a new UNIQUE value (a swap of
/// positions) wins with its edit, never with the value the row had before the move: that value is another row's
/// now, and putting it back would leave it on two records, which every store then merges as duplicates.
final class LocalWinsUniqueTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, pos INTEGER NOT NULL UNIQUE, title TEXT);
        """
    /// Swaps the positions of items 1 and 2 in one transaction.
    static let swapXY = "BEGIN; UPDATE items SET pos = -1 WHERE id = 1; UPDATE items SET pos = 1 WHERE id = 2; "
        + "UPDATE items SET pos = 2 WHERE id = 1; COMMIT;"

    /// Stores a and b in the cloud under `policy`, both holding x, y and z at positions 1, 2 and 3.
    static func threeItems(_ backend: FleetBackend, policy: String, label: String) throws -> Fleet {
        try Fleet.pair(backend, schema: schema, policy: policy,
                       rows: "INSERT INTO items VALUES (1, 1, 'x'), (2, 2, 'y'), (3, 3, 'z')", label: label)
    }

    func swapMeetsAnEdit(_ backend: FleetBackend, editorSyncsFirst: Bool) throws {
        let f = try Self.threeItems(backend, policy: "local-wins", label: "storectl-local-wins-unique")
        // a swaps x and y; b, before it sees the swap, renames x.
        try f.sql("a", Self.swapXY)
        try f.sql("b", "UPDATE items SET title = 'x renamed' WHERE title = 'x'")
        let order = editorSyncsFirst ? ["b", "a"] : ["a", "b"]
        try f.syncRounds(3, order)
        // The store that syncs last wins with its row (local-wins); the swap stands either way.
        let title = editorSyncsFirst ? "x" : "x renamed"
        try f.assertRows(["items|pos=i:1|title=t:'y'", "items|pos=i:2|title=t:'\(title)'",
                          "items|pos=i:3|title=t:'z'"], "a swap under local-wins meets an edit of a swapped row")
        for s in f.stores { try f.assertHealthy(s, "after the swap met the edit") }
        XCTAssertEqual(try f.liveCloudCounts()["items"] ?? 0, 3, "[\(backend)] one live record per row")
    }

    func testAnEditOfASwappedRowKeepsTheSwapFile() throws { try swapMeetsAnEdit(.file, editorSyncsFirst: false) }
    func testAnEditOfASwappedRowSentFirstKeepsTheSwapFile() throws { try swapMeetsAnEdit(.file, editorSyncsFirst: true) }
    func testAnEditOfASwappedRowKeepsTheSwapPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try swapMeetsAnEdit(pg, editorSyncsFirst: false)
    }
}
