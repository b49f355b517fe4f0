import Foundation
import TestSupport
import XCTest

/// SQLite lets a primary key that is neither a rowid nor WITHOUT ROWID hold NULL, and every row with a NULL there
/// has the same record name. Two such rows were two saves of one name, which the cloud refuses with the whole
/// batch: the export stopped there on every sync and nothing more was sent. Such a row is now not sent (reported),
/// and everything else goes through; once the key is set, the row goes too.
final class KeyWithNullTests: XCTestCase {
    func nullKeys(_ backend: FleetBackend) throws {
        let f = try Fleet.pair(backend, schema: """
            CREATE TABLE IF NOT EXISTS tags(name TEXT PRIMARY KEY, color TEXT);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT);
            """, policy: "property-local-wins", rows: "INSERT INTO notes VALUES (1, 'n1')",
            label: "storectl-null-keys")
        try f.sql("a", "INSERT INTO tags VALUES (NULL, 'a'), (NULL, 'b'), ('x', 'c'), ('null', 'd'); "
                  + "INSERT INTO notes VALUES (2, 'n2')")
        let sync = try f.run("a", ["sync"], expect: 65)
        XCTAssertTrue(sync.stderr.contains("tags [null]: its key holds NULL"), "[\(backend)] \(sync.stderr)")
        let status = try f.run("a", ["status", "--json"], expect: 65)
        XCTAssertTrue(status.stdout.contains("its key holds NULL"), "[\(backend)] \(status.stdout)")
        try f.run("b", ["sync"])
        XCTAssertEqual(try f.sql("b", "SELECT name, color FROM tags ORDER BY name"), "null|d\nx|c\n",
                       "[\(backend)] every other row is sent")
        XCTAssertEqual(try f.sql("b", "SELECT group_concat(body) FROM notes ORDER BY id"), "n1,n2\n")
        try f.sql("a", "UPDATE tags SET name = 'y' WHERE color = 'a'; DELETE FROM tags WHERE color = 'b'")
        try f.syncRounds(2, ["a", "b"])
        XCTAssertEqual(try f.sql("b", "SELECT name, color FROM tags ORDER BY name"), "null|d\nx|c\ny|a\n",
                       "[\(backend)] a row sent once its key is set")
        for s in f.stores { try f.assertHealthy(s, "[\(backend)] keys with NULL") }
    }

    func testRowsWithANullKeyAreReportedAndTheRestIsSentFile() throws { try nullKeys(.file) }

    func testRowsWithANullKeyAreReportedAndTheRestIsSentPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try nullKeys(pg)
    }
}
