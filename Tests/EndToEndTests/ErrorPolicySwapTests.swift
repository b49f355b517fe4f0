import Foundation
import TestSupport
import XCTest

/// Under `merge_policy: error`, a swap of UNIQUE values whose one half meets another store's edit: the sync exits 65
/// and saves neither half (a batch is saved whole or not at all under this policy), so no store ever sees two
/// records with one value, and no row is deleted anywhere. Once the conflict is resolved, both edits land.
final class ErrorPolicySwapTests: XCTestCase {
    /// Stores a and b in the cloud under `merge_policy: error`, holding x, y and z at positions 1, 2 and 3.
    func threeItems(_ backend: FleetBackend, label: String) throws -> Fleet {
        let f = try Fleet(backend: backend, schema: LocalWinsUniqueTests.schema, cloudExtra: "      merge_policy: error",
                          label: label)
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO items VALUES (1, 1, 'x'), (2, 2, 'y'), (3, 3, 'z')")
        try f.syncRounds(2, ["a", "b"])
        return f
    }

    /// - Parameters:
    ///   - batchSize: `STORECTL_BATCH_SIZE` of a's syncs: with "1", each half of the swap is a batch of its own.
    ///   - renamed: the item b renames (x, the first batch's row, or y, the second's).
    func halfASwapConflicts(_ backend: FleetBackend, batchSize: String? = nil, renamed: String = "x") throws {
        let f = try threeItems(backend, label: "storectl-error-swap")
        // a swaps x and y; b, before it sees the swap, renames one of them, and syncs first.
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try f.sql("b", "UPDATE items SET title = '\(renamed) renamed' WHERE title = '\(renamed)'")
        try f.run("b", ["sync"])
        let x = renamed == "x" ? "x renamed" : "x"
        let y = renamed == "y" ? "y renamed" : "y"
        var env: [String: String] = [:]
        if let batchSize { env["STORECTL_BATCH_SIZE"] = batchSize }
        let refused = try f.run("a", ["sync"], env: env, expect: 65)
        XCTAssertTrue(refused.stdout.contains("conflict") || refused.stderr.contains("conflict"), "\(refused)")
        // Nothing of the swap reached the cloud: b and a new store see three rows, at three positions.
        try f.run("b", ["sync"])
        let before = ["items|pos=i:1|title=t:'\(x)'", "items|pos=i:2|title=t:'\(y)'", "items|pos=i:3|title=t:'z'"]
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
        try f.assertRows(["items|pos=i:1|title=t:'\(y)'", "items|pos=i:2|title=t:'\(x)'",
                          "items|pos=i:3|title=t:'z'"], stores: ["a", "b"], late: false,
                         "the swap and the rename after the conflict was resolved")
        XCTAssertEqual(try f.liveCloudCounts()["items"] ?? 0, 3, "[\(backend)] one live record per row")
    }

    func testHalfASwapConflictsAndNothingOfItIsSavedFile() throws { try halfASwapConflicts(.file) }

    func testHalfASwapConflictsAndNothingOfItIsSavedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try halfASwapConflicts(pg)
    }

    /// Each half of the swap in a batch of its own, the second one meeting b's rename: the first batch must not
    /// land alone.
    func testHalfASwapInTwoBatchesConflictsAndNothingOfItIsSavedFile() throws {
        try halfASwapConflicts(.file, batchSize: "1", renamed: "y")
        try halfASwapConflicts(.file, batchSize: "1", renamed: "x")
    }

    func testHalfASwapInTwoBatchesConflictsAndNothingOfItIsSavedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try halfASwapConflicts(pg, batchSize: "1", renamed: "y")
    }

    /// `mode local`'s final export under `error` sends no half of a swap either: it refuses, and the store stays in
    /// cloud mode with its swap.
    func testAFinalExportSendsNoHalfOfASwap() throws {
        let f = try threeItems(.file, label: "storectl-error-swap-final")
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try f.sql("b", "UPDATE items SET title = 'y renamed' WHERE title = 'y'")
        try f.run("b", ["sync"])
        let refused = try f.run("a", ["mode", "local"], env: ["STORECTL_BATCH_SIZE": "1"], expect: 65)
        XCTAssertTrue(refused.stdout.contains("conflict") || refused.stderr.contains("conflict"), "\(refused)")
        XCTAssertTrue(f.config.contains("  a:\n    path: data/a.sqlite   # the store file\n    schema: schema.sql\n"
                                        + "    mode: cloud\n"), f.config)
        try f.run("b", ["sync"])
        try f.assertRows(["items|pos=i:1|title=t:'x'", "items|pos=i:2|title=t:'y renamed'",
                          "items|pos=i:3|title=t:'z'"], stores: ["b"], "b after a's refused final export")
        XCTAssertEqual(try f.liveCloudCounts()["items"] ?? 0, 3, "one live record per row")
        try f.assertRows(["items|pos=i:1|title=t:'y'", "items|pos=i:2|title=t:'x'", "items|pos=i:3|title=t:'z'"],
                         stores: ["a"], late: false, "a keeps its swap")
    }

    /// `mode cloud` of a store that swapped while local sends no half of the swap under `error` either.
    func testAReturnToTheCloudSendsNoHalfOfASwap() throws {
        let f = try threeItems(.file, label: "storectl-error-swap-return")
        try f.run("a", ["mode", "local"])
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try f.sql("b", "UPDATE items SET title = 'y renamed' WHERE title = 'y'")
        try f.run("b", ["sync"])
        let refused = try f.run("a", ["mode", "cloud"], env: ["STORECTL_BATCH_SIZE": "1"], expect: nil)
        XCTAssertNotEqual(refused.status, 0, "\(refused)")
        XCTAssertTrue(refused.stdout.contains("conflict") || refused.stderr.contains("conflict"), "\(refused)")
        try f.run("b", ["sync"])
        try f.assertRows(["items|pos=i:1|title=t:'x'", "items|pos=i:2|title=t:'y renamed'",
                          "items|pos=i:3|title=t:'z'"], stores: ["b"], "b after a's refused return")
        XCTAssertEqual(try f.liveCloudCounts()["items"] ?? 0, 3, "one live record per row")
        try f.assertRows(["items|pos=i:1|title=t:'y'", "items|pos=i:2|title=t:'x'", "items|pos=i:3|title=t:'z'"],
                         stores: ["a"], late: false, "a keeps its swap")
    }
}
