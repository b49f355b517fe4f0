@testable import StoreMirror
import StoreBase
import StoreSQLite
import XCTest

/// Which of a user's triggers are set aside while cloud records are applied.
final class UserTriggersTests: XCTestCase {
    func testTheBodyIsReadForTrackedTablesOnly() {
        let words = UserTriggers.identifiers(inBodyOf: """
            CREATE TRIGGER "stamp notes" AFTER UPDATE OF title ON notes BEGIN
              -- a comment naming tags
              UPDATE "notes" SET updated_at = 'notes audit' WHERE id = NEW.id; /* audit */
              INSERT INTO [audit log](what) VALUES ('it''s notes');
            END
            """)
        XCTAssertEqual(words, ["UPDATE", "notes", "SET", "updated_at", "WHERE", "id", "NEW", "id", "INSERT", "INTO",
                               "audit log", "what", "VALUES", "END"])
    }

    func testTriggersTouchingTrackedTablesAreSetAsideAndComeBackUnchanged() throws {
        let db = try Connection(path: ":memory:")
        try db.execute("""
            CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT, stamp INTEGER DEFAULT 0);
            CREATE TABLE audit(id INTEGER PRIMARY KEY, what TEXT);
            CREATE TABLE cache(id INTEGER PRIMARY KEY, title TEXT);
            CREATE TRIGGER audit_notes AFTER INSERT ON notes BEGIN INSERT INTO audit(what) VALUES (NEW.title); END;
            CREATE TRIGGER cache_notes AFTER INSERT ON notes BEGIN INSERT INTO cache(id, title) VALUES (NEW.id, NEW.title); END;
            """)
        let before = try db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        XCTAssertEqual(try UserTriggers.touching(db, tracked: ["notes", "audit"]).map(\.name), ["audit_notes"])
        try db.transaction {
            try UserTriggers.suspended(db, tracked: ["notes", "audit"]) {
                try db.execute("INSERT INTO notes(title) VALUES ('imported')")
            }
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM audit")?.int64, 0, "the tracked effect did not run")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM cache")?.int64, 1, "the local cache still follows")
        XCTAssertEqual(try db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"), before)
        // A throw inside rolls the drops back with everything else.
        XCTAssertThrowsError(try db.transaction {
            try UserTriggers.suspended(db, tracked: ["notes", "audit"]) {
                throw StoreError(.dataError, "boom")
            }
        })
        XCTAssertEqual(try db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"), before)
    }
}
