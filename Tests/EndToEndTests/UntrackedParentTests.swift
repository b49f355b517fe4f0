import Foundation
import TestSupport
import XCTest

/// A store that tracks a child table but not the table its foreign key references: another store's child rows
/// reference parent rows this store does not have, and no import brings them. The sync says so (exit 65, the
/// foreign key named, the fix), applies nothing and changes nothing; once the parent table is tracked, the next
/// sync brings everything.
final class UntrackedParentTests: XCTestCase {
    func testAChildWhoseParentTableIsNotTrackedIsReportedWithTheFix() throws {
        let schema = """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);
            CREATE TABLE IF NOT EXISTS comments(id INTEGER PRIMARY KEY, note_id INTEGER REFERENCES notes(id), body TEXT);
            """
        let f = try Fleet(backend: .file, schema: schema, storeYAML: "    entities:\n      comments: {}",
                          label: "storectl-untracked-parent")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes VALUES (1, 'u1', 'one'); INSERT INTO comments VALUES (10, 1, 'on one');")
        try f.run("a", ["sync"])
        let r = try f.run("b", ["sync"], expect: 65)
        XCTAssertTrue(r.stderr.contains("comments(note_id) references 'notes', which is not tracked"), r.stderr)
        XCTAssertTrue(r.stderr.contains("entities:"), "the fix is named: \(r.stderr)")
        XCTAssertFalse(r.stderr.contains("SQLite error 787"), "not SQLite's words alone: \(r.stderr)")
        XCTAssertEqual(try f.rows("b", tables: ["comments"]), [], "nothing applied")
        // The parent row given to b (as an app would, outside sync): the next sync applies the child.
        try f.sql("b", "INSERT INTO notes VALUES (1, 'u1', 'one')")
        try f.run("b", ["sync"])
        XCTAssertEqual(try f.rows("b", tables: ["comments"]).count, 1)
    }
}
