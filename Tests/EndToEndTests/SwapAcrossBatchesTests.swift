import Foundation
import TestSupport
import XCTest

/// Rows that move UNIQUE values among themselves in one export (a swap, a value handed from a deleted row to a new
/// one) are saved in one batch, whatever the batch size: the cloud never holds one half of the move. Split over
/// two batches, a sync killed between them left two live records at one value, which another store's import
/// merged as duplicates (a row lost everywhere); under `merge_policy: error`, a conflict in the second batch left
/// the first half saved.
final class SwapAcrossBatchesTests: XCTestCase {
    /// The positions of the live `items` records in the cloud, sorted.
    func cloudPositions(_ f: Fleet) throws -> [Int] {
        try f.cloudRecords().filter { !$0.deleted && $0.recordType == "items" }.compactMap { record in
            JSONDoc.int(JSONDoc.parse(record.fields), "pos")
        }.sorted()
    }

    /// a's sync in batches of one record, killed once the first batch is saved and before the second is: it
    /// pauses before the second save (while the first ends) and is killed there. A sync with one batch ends (0).
    func syncKilledBetweenBatches(_ f: Fleet, _ what: String, file: StaticString = #filePath, line: UInt = #line)
        throws
    {
        let status = try Killer.run(["--store", "a", "sync"], in: f.dir.path, afterMicroseconds: 2_000_000,
                                    environment: ["STORECTL_BATCH_SIZE": "1",
                                                  "STORECTL_FAILPOINT": "export.before-save:2:pause"])
        XCTAssertTrue(status == 0 || status == 137, "\(what): a's sync exited \(status)", file: file, line: line)
    }

    func killedBetweenBatches(_ backend: FleetBackend, policy: String) throws {
        let f = try LocalWinsUniqueTests.threeItems(backend, policy: policy, label: "storectl-swap-batches")
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try syncKilledBetweenBatches(f, "[\(backend), \(policy)] the swap")
        XCTAssertEqual(try cloudPositions(f), [1, 2, 3], "[\(backend), \(policy)] one live record at each position")
        // b imports what the killed sync left in the cloud, then a resumes.
        try f.run("b", ["sync"])
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1"])
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["items|pos=i:1|title=t:'y'", "items|pos=i:2|title=t:'x'", "items|pos=i:3|title=t:'z'"],
                         "[\(policy)] the swap, with a sync killed between its batches")
        XCTAssertEqual(try cloudPositions(f), [1, 2, 3], "[\(backend), \(policy)] one live record at each position")
        for s in f.stores { try f.assertHealthy(s, "[\(policy)] after the swap") }
    }

    func testASwapIsNeverSentHalfFile() throws {
        for policy in ["property-local-wins", "server-wins"] { try killedBetweenBatches(.file, policy: policy) }
    }

    func testASwapIsNeverSentHalfPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try killedBetweenBatches(pg, policy: "property-local-wins")
    }

    /// A value handed from a deleted row to a new one whose key sorts first: without the rule, the new record went
    /// in a batch before the tombstone.
    func handedToANewRow(_ backend: FleetBackend) throws {
        let f = try LocalWinsUniqueTests.threeItems(backend, policy: "property-local-wins", label: "storectl-swap-batches")
        try f.sql("a", "BEGIN; DELETE FROM items WHERE id = 3; INSERT INTO items VALUES (0, 3, 'w'); COMMIT;")
        try syncKilledBetweenBatches(f, "[\(backend)] z's position handed to w")
        XCTAssertEqual(try cloudPositions(f), [1, 2, 3], "[\(backend)] one live record at each position")
        try f.run("b", ["sync"])
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1"])
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["items|pos=i:1|title=t:'x'", "items|pos=i:2|title=t:'y'", "items|pos=i:3|title=t:'w'"],
                         "a value handed from a deleted row to a new one, killed between batches")
        XCTAssertEqual(try cloudPositions(f), [1, 2, 3], "[\(backend)] one live record at each position")
    }

    func testAValueHandedToANewRowTravelsInOneBatchFile() throws { try handedToANewRow(.file) }

    func testAValueHandedToANewRowTravelsInOneBatchPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try handedToANewRow(pg)
    }

    /// Under `merge_policy: error`, batches of one record, the swap's second half conflicting: nothing of the
    /// swap is saved.
    func secondHalfConflicts(_ backend: FleetBackend) throws {
        let f = try LocalWinsUniqueTests.threeItems(backend, policy: "error", label: "storectl-swap-batches")
        try f.sql("a", LocalWinsUniqueTests.swapXY)
        try f.sql("b", "UPDATE items SET title = 'y renamed' WHERE id = 2")
        try f.run("b", ["sync"])
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1"], expect: 65)
        XCTAssertEqual(try cloudPositions(f), [1, 2, 3], "[\(backend)] one live record at each position")
        try f.run("b", ["sync"])
        try f.assertRows(["items|pos=i:1|title=t:'x'", "items|pos=i:2|title=t:'y renamed'", "items|pos=i:3|title=t:'z'"],
                         stores: ["b"], "[\(backend)] b after a's refused sync")
        try f.run(nil, ["config", "set", "stores.a.cloud.merge_policy", "property-local-wins"])
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1"])
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["items|pos=i:1|title=t:'y renamed'", "items|pos=i:2|title=t:'x'", "items|pos=i:3|title=t:'z'"],
                         stores: ["a", "b"], late: false, "[\(backend)] the swap and the rename once resolved")
        XCTAssertEqual(try cloudPositions(f), [1, 2, 3], "[\(backend)] one live record at each position")
    }

    func testTheSecondHalfOfASwapConflictingKeepsTheFirstOutFile() throws { try secondHalfConflicts(.file) }

    func testTheSecondHalfOfASwapConflictingKeepsTheFirstOutPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try secondHalfConflicts(pg)
    }

    /// A swap in a `COLLATE NOCASE` column that also changes the values' case: the values are equal to the ones
    /// the other rows held, though not byte for byte.
    /// With `rule`, the key is a `unique:` rule on a NOCASE column, and the table has no UNIQUE constraint.
    func noCaseSwap(_ backend: FleetBackend, rule: Bool = false) throws {
        let f = try Fleet.pair(backend, schema: """
            CREATE TABLE IF NOT EXISTS users(id INTEGER PRIMARY KEY,
                                             email TEXT NOT NULL \(rule ? "" : "UNIQUE ")COLLATE NOCASE, name TEXT);
            """, policy: "property-local-wins", storeYAML: rule ? """
                    entities:
                      users:
                        unique: [email]
                """ : "",
            rows: "INSERT INTO users VALUES (1, 'x@a', 'x'), (2, 'y@a', 'y'), (3, 'z@a', 'z')",
            label: "storectl-swap-batches")
        try f.sql("a", """
            BEGIN; UPDATE users SET email = 'tmp' WHERE id = 1; UPDATE users SET email = 'X@A' WHERE id = 2;
            UPDATE users SET email = 'Y@A' WHERE id = 1; COMMIT;
            """)
        try syncKilledBetweenBatches(f, "[\(backend)] a swap under NOCASE")
        try f.run("b", ["sync"])
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1"])
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["users|email=t:'X@A'|name=t:'y'", "users|email=t:'Y@A'|name=t:'x'",
                          "users|email=t:'z@a'|name=t:'z'"], "[\(backend)] a swap under NOCASE, killed between batches")
        XCTAssertEqual(try f.liveCloudCounts()["users"] ?? 0, 3, "[\(backend)] one live record per row")
        for s in f.stores { try f.assertHealthy(s, "a swap under NOCASE") }
    }

    func testASwapUnderNoCaseIsNeverSentHalfFile() throws { try noCaseSwap(.file) }

    func testASwapUnderAUniqueRuleOnANoCaseColumnIsNeverSentHalfFile() throws { try noCaseSwap(.file, rule: true) }

    func testASwapUnderNoCaseIsNeverSentHalfPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try noCaseSwap(pg)
    }
}
