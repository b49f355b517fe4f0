import Foundation
import TestSupport
import XCTest

/// Under `merge_policy: error`, a swap of UNIQUE values whose one half meets another store's edit: the sync exits 65
/// and saves neither half (a batch is saved whole or not at all under this policy), so no store ever sees two
/// records with one value, and no row is deleted anywhere. Once the conflict is resolved, both edits land.
final class ErrorPolicySwapTests: XCTestCase {
    func halfASwapConflicts(_ backend: FleetBackend, batchSize: String? = nil) throws {
        let f = try LocalWinsUniqueTests.threeItems(backend, policy: "error", label: "storectl-error-swap")
        // a swaps x and y; b, before it sees the swap, renames x, and syncs first.
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try f.sql("b", "UPDATE items SET title = 'x renamed' WHERE id = 1")
        try f.run("b", ["sync"])
        var env: [String: String] = [:]
        if let batchSize { env["STORECTL_BATCH_SIZE"] = batchSize }
        let refused = try f.run("a", ["sync"], env: env, expect: 65)
        XCTAssertTrue(refused.stdout.contains("conflict") || refused.stderr.contains("conflict"), "\(refused)")
        // Nothing of the swap reached the cloud: b and a new store see three rows, at three positions.
        try f.run("b", ["sync"])
        let before = ["items|pos=i:1|title=t:'x renamed'", "items|pos=i:2|title=t:'y'", "items|pos=i:3|title=t:'z'"]
        try f.assertRows(before, stores: ["b"], "b after a's refused sync")
        try f.joinLate()
        try f.assertRows(before, stores: [Fleet.lateStore], late: false, "a new store after a's refused sync")
        XCTAssertEqual(try f.liveCloudCounts()["items"] ?? 0, 3, "[\(backend)] one live record per row")
        // a keeps its swap, and its sync still says why it cannot send it.
        try f.assertRows(["items|pos=i:1|title=t:'y'", "items|pos=i:2|title=t:'x'", "items|pos=i:3|title=t:'z'"],
                         stores: ["a"], late: false, "a keeps its swap")
        try f.run("a", ["sync"], env: env, expect: 65)
        // Resolved by a per-property policy: the swap and the rename both land, everywhere.
        try f.run(nil, ["config", "set", "stores.a.cloud.merge_policy", "property-local-wins"])
        try f.run("a", ["sync"], env: env)
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["items|pos=i:1|title=t:'y'", "items|pos=i:2|title=t:'x renamed'",
                          "items|pos=i:3|title=t:'z'"], stores: ["a", "b"], late: false,
                         "the swap and the rename after the conflict was resolved")
        XCTAssertEqual(try f.liveCloudCounts()["items"] ?? 0, 3, "[\(backend)] one live record per row")
    }

    func testHalfASwapConflictsAndNothingOfItIsSavedFile() throws { try halfASwapConflicts(.file) }

    func testHalfASwapConflictsAndNothingOfItIsSavedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try halfASwapConflicts(pg)
    }

    /// Batches of one record: the swap's two halves still go in one batch (`Exporter.markMovesTogether`), so the
    /// half that conflicts keeps the other half out of the cloud.
    func testHalfASwapConflictsInBatchesOfOneFile() throws { try halfASwapConflicts(.file, batchSize: "1") }

    func testHalfASwapConflictsInBatchesOfOnePostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try halfASwapConflicts(pg, batchSize: "1")
    }
}
