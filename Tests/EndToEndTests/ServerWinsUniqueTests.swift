import Foundation
import TestSupport
import XCTest

/// Under a row-level `server-wins`, a store whose swap of UNIQUE values meets another store's edit of one of the
/// swapped rows keeps the swap: the cloud's record wins that row's other columns, but not the value the swap moved
/// away from it, which the other half of the swap holds now (and may have saved already). Before, the cloud's
/// record put the old value back on the row, the two rows holding it were merged as duplicates, and one row was
/// lost on every store.
final class ServerWinsUniqueTests: XCTestCase {
    func swapMeetsAnEdit(_ backend: FleetBackend, editorSyncsFirst: Bool, batchSize: String? = nil) throws {
        let f = try LocalWinsUniqueTests.threeItems(backend, policy: "server-wins", label: "storectl-server-wins-unique")
        // a swaps x and y; b, before it sees the swap, renames x.
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try f.sql("b", "UPDATE items SET title = 'x renamed' WHERE title = 'x'")
        let env = batchSize.map { ["STORECTL_BATCH_SIZE": $0] } ?? [:]
        for store in editorSyncsFirst ? ["b", "a"] : ["a", "b"] { try f.run(store, ["sync"], env: env) }
        try f.syncRounds(2, ["a", "b"])
        // The store that syncs last loses its edit of the row's other columns (server-wins); the swap stands.
        let title = editorSyncsFirst ? "x renamed" : "x"
        try f.assertRows(["items|pos=i:1|title=t:'y'", "items|pos=i:2|title=t:'\(title)'",
                          "items|pos=i:3|title=t:'z'"], "a swap under server-wins meets an edit of a swapped row")
        for s in f.stores { try f.assertHealthy(s, "after the swap met the edit") }
        XCTAssertEqual(try f.liveCloudCounts()["items"] ?? 0, 3, "[\(backend)] one live record per row")
    }

    func testASwapSentAfterAnEditOfItsRowStandsFile() throws {
        try swapMeetsAnEdit(.file, editorSyncsFirst: true)
        try swapMeetsAnEdit(.file, editorSyncsFirst: true, batchSize: "1")
    }

    func testAnEditSentAfterASwapOfItsRowLosesToTheSwapFile() throws {
        try swapMeetsAnEdit(.file, editorSyncsFirst: false)
    }

    func testASwapSentAfterAnEditOfItsRowStandsPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try swapMeetsAnEdit(pg, editorSyncsFirst: true)
    }
}
