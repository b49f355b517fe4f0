import Foundation
import TestSupport
import XCTest

/// SQLite lets a primary key that is neither a rowid nor WITHOUT ROWID hold NULL, and every row with a NULL there
/// has the same key and record name. One such row syncs as any other. A second one was a second save of that name,
/// which the cloud refuses with the whole batch: the export stopped there on every sync and nothing more was sent.
/// The first row now stands for the record, a second is not sent (reported), and everything else goes through.
final class KeyWithNullTests: XCTestCase {
    func nullKeys(_ backend: FleetBackend) throws {
        let f = try Fleet.pair(backend, schema: """
            CREATE TABLE IF NOT EXISTS tags(name TEXT PRIMARY KEY, color TEXT);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT);
            """, policy: "property-local-wins",
            rows: "INSERT INTO notes VALUES (1, 'n1'); INSERT INTO tags VALUES (NULL, 'solo'), ('x', 'c')",
            label: "storectl-null-keys")
        let tags = { (store: String) in try f.sql(store, "SELECT name, color FROM tags ORDER BY name, color") }
        try f.syncRounds(1, ["a", "b"])
        XCTAssertEqual(try tags("b"), "|solo\nx|c\n", "[\(backend)] one row with a NULL key syncs")
        try f.sql("a", "INSERT INTO tags VALUES (NULL, 'second'), ('null', 'd'); INSERT INTO notes VALUES (2, 'n2')")
        let sync = try f.run("a", ["sync"], expect: 65)
        XCTAssertTrue(sync.stderr.contains("tags [null]: its key holds NULL"), "[\(backend)] \(sync.stderr)")
        let status = try f.run("a", ["status", "--json"], expect: 65)
        XCTAssertTrue(status.stdout.contains("its key holds NULL"), "[\(backend)] \(status.stdout)")
        try f.run("b", ["sync"])
        XCTAssertEqual(try tags("b"), "|solo\nnull|d\nx|c\n", "[\(backend)] every other row is sent")
        XCTAssertEqual(try f.sql("b", "SELECT group_concat(body) FROM notes ORDER BY id"), "n1,n2\n")
        try f.sql("a", "UPDATE tags SET name = 'y' WHERE color = 'second'")
        try f.syncRounds(2, ["a", "b"])
        XCTAssertEqual(try tags("b"), "|solo\nnull|d\nx|c\ny|second\n", "[\(backend)] a row sent once its key is set")
        try f.sql("a", "DELETE FROM tags WHERE name IS NULL")
        try f.syncRounds(2, ["a", "b"])
        XCTAssertEqual(try tags("b"), "null|d\nx|c\ny|second\n", "[\(backend)] the NULL-keyed row's deletion is sent")
        for s in f.stores { try f.assertHealthy(s, "[\(backend)] keys with NULL") }
    }

    func testOneRowWithANullKeySyncsAndASecondIsReportedFile() throws { try nullKeys(.file) }

    func testOneRowWithANullKeySyncsAndASecondIsReportedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try nullKeys(pg)
    }
}
