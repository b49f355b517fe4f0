import StoreBase
import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// Consumers hold history: prune removes only what every consumer has processed, and never the newest row.
final class ConsumerPruneTests: XCTestCase {
    private func makeStore(rows: Int) throws -> Fixture {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT)")
        for i in 1...rows { try f.db.run("INSERT INTO notes VALUES (?, 't')", [i]) }
        return f
    }

    func testConsumersAddListDropAndTokens() throws {
        let f = try makeStore(rows: 3)
        let (added, created) = try f.tracker.addConsumer("indexer")
        XCTAssertTrue(created)
        XCTAssertEqual(added.token, 3)  // starts at the newest seq
        XCTAssertFalse(try f.tracker.addConsumer("indexer", token: 0).created)
        try f.tracker.addConsumer("backup", token: 0)
        XCTAssertEqual(try f.tracker.consumers().map(\.name), ["backup", "indexer"])
        try f.tracker.setConsumerToken("backup", 2)
        XCTAssertEqual(try f.tracker.consumer("backup")?.token, 2)
        XCTAssertTrue(try f.tracker.dropConsumer("backup"))
        XCTAssertFalse(try f.tracker.dropConsumer("backup"))
        XCTAssertEqual(try f.tracker.consumers().map(\.name), ["indexer"])
    }

    func testReservedNamesBelongToTheSyncEngine() throws {
        let f = try makeStore(rows: 1)
        XCTAssertThrowsError(try f.tracker.addConsumer("cloud-export")) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode.rawValue, 64)
            XCTAssertEqual((error as? StoreError)?.summary,
                           "consumer names starting with 'cloud-' are reserved for the sync engine")
        }
        XCTAssertThrowsError(try f.tracker.dropConsumer("cloud-export"))
        // The sync engine sets its export token directly, which creates the consumer.
        try f.tracker.setConsumerToken(StoreFormat.cloudExportConsumer, 0)
        XCTAssertEqual(try f.tracker.consumer("cloud-export")?.token, 0)
    }

    func testPruneRespectsTheLowestConsumerIncludingTheCloudExport() throws {
        let f = try makeStore(rows: 10)
        try f.tracker.addConsumer("indexer", token: 8)
        try f.tracker.setConsumerToken("cloud-export", 4)
        let report = try f.tracker.prune(before: 100)
        XCTAssertEqual(report.removed, 4)
        XCTAssertEqual(report.firstSeq, 1)
        XCTAssertEqual(report.lastSeq, 4)
        XCTAssertEqual(report.heldBy, "cloud-export")
        XCTAssertEqual(report.remaining, 6)
        XCTAssertEqual(try f.tracker.changes().map(\.seq), Array(5...10))

        try f.tracker.setConsumerToken("cloud-export", 10)
        let second = try f.tracker.prune(before: 100)
        XCTAssertEqual(second.removed, 4)  // 5...8: now the indexer, at 8, holds the rest
        XCTAssertEqual(second.heldBy, "indexer")
        XCTAssertEqual(try f.tracker.changes().map(\.seq), [9, 10])
    }

    func testPruneNeverRemovesTheNewestRowSoSeqIsNeverReused() throws {
        let f = try makeStore(rows: 5)
        let report = try f.tracker.prune(before: 1000)
        XCTAssertEqual(report.removed, 4)
        XCTAssertEqual(try f.tracker.changes().map(\.seq), [5])
        try f.db.run("INSERT INTO notes VALUES (100, 'new')")
        XCTAssertEqual(try f.tracker.changes().map(\.seq), [5, 6])
    }

    func testPruneBeforeAToken() throws {
        let f = try makeStore(rows: 10)
        let report = try f.tracker.prune(before: 4)
        XCTAssertEqual(report.removed, 3)
        XCTAssertEqual(try f.tracker.changes().first?.seq, 4)
    }

    func testPruneOlderThanAnAge() throws {
        let f = try makeStore(rows: 6)
        let now = HistoryTracker.nowMilliseconds()
        try f.db.run("UPDATE _storectl_history SET ts = ? WHERE seq <= 3", [now - 40 * 86_400_000])
        let report = try f.tracker.prune(olderThan: 30 * 86400)
        XCTAssertEqual(report.removed, 3)
        XCTAssertEqual(try f.tracker.changes().map(\.seq), [4, 5, 6])
        XCTAssertEqual(try f.tracker.prune(olderThan: 30 * 86400).removed, 0)
    }

    func testPruneWithoutALimitIsAUsageError() throws {
        let f = try makeStore(rows: 2)
        XCTAssertThrowsError(try f.tracker.prune()) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode.rawValue, 64)
        }
    }

    func testOpaqueTokensAndMeta() throws {
        let f = try makeStore(rows: 1)
        XCTAssertNil(try f.tracker.token("server"))
        try f.tracker.setToken("server", "abc")
        XCTAssertEqual(try f.tracker.token("server"), "abc")
        try f.tracker.setToken("server", nil)
        XCTAssertNil(try f.tracker.token("server"))
        try f.tracker.setMeta(.mode, "cloud")
        XCTAssertEqual(try f.tracker.meta(.mode), "cloud")
    }
}
