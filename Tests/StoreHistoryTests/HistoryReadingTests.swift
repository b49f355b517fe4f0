import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// Reading history after a token: filters, limits, transactions, and the cost of a read.
final class HistoryReadingTests: XCTestCase {
    private func makeStore() throws -> Fixture {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT); CREATE TABLE tags(name TEXT PRIMARY KEY)")
        try f.tracker.write(author: "app") {                                   // seq 1, 2 (tx 1)
            try f.db.run("INSERT INTO notes VALUES (1, 'a')")
            try f.db.run("INSERT INTO tags VALUES ('red')")
        }
        try f.tracker.write(author: "cloud-import") {                          // seq 3, 4, 5 (tx 2)
            try f.db.run("INSERT INTO notes VALUES (2, 'b'), (3, 'c'), (4, 'd')")
        }
        try f.db.run("UPDATE notes SET title = 'z' WHERE id = 1")              // seq 6, external
        try f.db.run("DELETE FROM tags")                                       // seq 7, external
        return f
    }

    func testFiltersAndTokens() throws {
        let f = try makeStore()
        XCTAssertEqual(try f.tracker.changes().map(\.seq), [1, 2, 3, 4, 5, 6, 7])
        XCTAssertEqual(try f.tracker.changes(after: 5).map(\.seq), [6, 7])
        XCTAssertEqual(try f.tracker.changes(author: "app").map(\.seq), [1, 2])
        XCTAssertEqual(try f.tracker.changes(excludeAuthor: "cloud-import").map(\.seq), [1, 2, 6, 7])
        XCTAssertEqual(try f.tracker.changes(entity: "tags").map(\.seq), [2, 7])
        XCTAssertEqual(try f.tracker.changes(after: 1, limit: 2).map(\.seq), [2, 3])
        XCTAssertEqual(try f.tracker.latestSeq(), 7)
    }

    func testTransactionsGroupNamedWritesAndNeverSplitOne() throws {
        let f = try makeStore()
        let all = try f.tracker.transactions()
        XCTAssertEqual(all.map(\.tx), [1, 2, nil, nil])
        XCTAssertEqual(all.map(\.author), ["app", "cloud-import", "external", "external"])
        XCTAssertEqual(all.map { $0.changes.map(\.seq) }, [[1, 2], [3, 4, 5], [6], [7]])
        XCTAssertEqual(all.map(\.token), [2, 5, 6, 7])
        // A limit of 3 changes ends inside tx 2, which is completed.
        let limited = try f.tracker.transactions(limit: 3)
        XCTAssertEqual(limited.map { $0.changes.map(\.seq) }, [[1, 2], [3, 4, 5]])
        XCTAssertEqual(try f.tracker.transactions(after: 5, limit: 1).map(\.token), [6])
    }

    func testChangesDecodeOperationsAndValues() throws {
        let f = try makeStore()
        let changes = try f.tracker.changes()
        XCTAssertEqual(changes.map(\.op), [.insert, .insert, .insert, .insert, .insert, .update, .delete])
        XCTAssertEqual(changes[5].changed, ["title"])
        XCTAssertEqual(changes[6].tombstone, ["name": .text("red")])
        XCTAssertEqual(changes[6].primaryKey, [.text("red")])
        XCTAssertNil(changes[0].changed)
        XCTAssertNil(changes[0].tombstone)
    }

    func testReadingAfterATokenIsARangeScanOnSeq() throws {
        let f = try makeStore()
        let plan = try f.db.query("""
            EXPLAIN QUERY PLAN SELECT seq, tx, author, ts, entity, pk, op, changed, tombstone FROM _storectl_history
            WHERE seq > ? AND author IS NOT ? AND entity = ? ORDER BY seq
            """, [Int64(3), "x", "notes"]).compactMap { $0["detail"].string }
        XCTAssertEqual(plan, ["SEARCH _storectl_history USING INTEGER PRIMARY KEY (rowid>?)"])
    }
}
