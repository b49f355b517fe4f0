@testable import StoreSQLite
import TestSupport
import XCTest

/// What a long-lived connection (`storectl watch`) keeps prepared, and the pragma that would make it compile
/// everything again.
final class StatementCacheTests: XCTestCase {
    /// A database with no foreign key has nothing to defer: the pragma, which expires every prepared statement,
    /// is not set. One that declares a foreign key (read again after the schema changed) gets it, and a child
    /// written before its parent in one transaction commits.
    func testForeignKeysAreDeferredOnlyWhereOneIsDeclared() throws {
        let dir = try TempDirectory()
        let db = try Connection(path: dir.file("a.sqlite"))
        try db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY)")
        try db.transaction {
            try db.deferForeignKeys()
            XCTAssertEqual(try db.scalar("PRAGMA defer_foreign_keys")?.int64, 0)
        }
        XCTAssertFalse(try db.declaresForeignKeys())
        try db.execute("CREATE TABLE links(id INTEGER PRIMARY KEY, note INTEGER NOT NULL REFERENCES notes(id))")
        XCTAssertTrue(try db.declaresForeignKeys())
        try db.transaction {
            try db.deferForeignKeys()
            XCTAssertEqual(try db.scalar("PRAGMA defer_foreign_keys")?.int64, 1)
            try db.run("INSERT INTO links(id, note) VALUES (1, 7)")
            try db.run("INSERT INTO notes(id) VALUES (7)")
        }
        // Without it the child is refused at once.
        XCTAssertThrowsError(try db.transaction { try db.run("INSERT INTO links(id, note) VALUES (2, 8)") })
        try db.execute("DROP TABLE links")
        XCTAssertFalse(try db.declaresForeignKeys())
    }

    /// A caller that puts a changing value into a cached statement's text cannot make the cache grow for ever.
    func testTheCacheIsBounded() throws {
        let dir = try TempDirectory()
        let db = try Connection(path: dir.file("a.sqlite"))
        for i in 0..<(Connection.statementCacheLimit + 10) {
            XCTAssertEqual(try db.scalar("SELECT \(i)")?.int64, Int64(i))
            XCTAssertLessThanOrEqual(db.cachedStatementCount, Connection.statementCacheLimit)
        }
        // A statement a caller still holds outlives the cache's clearing.
        let held = try db.cached("SELECT 42")
        for i in 0..<Connection.statementCacheLimit { _ = try db.scalar("SELECT \(i) + 1") }
        XCTAssertTrue(try held.step())
        XCTAssertEqual(held.column(0).int64, 42)
    }
}
