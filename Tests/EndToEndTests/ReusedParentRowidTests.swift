import Foundation
import TestSupport
import XCTest

/// A parent deleted and another inserted at its rowid on one store, while another store moves a row under it.
final class ReusedParentRowidTests: XCTestCase {
    /// a moves folder r1 under r2; b deletes r2 and inserts r2new, which takes r2's rowid. r2 is deleted everywhere,
    /// and r1, moved into it, goes with it on a (ON DELETE CASCADE): every store ends with r2new alone.
    func movedUnderAParentWhoseRowidIsReused(_ backend: FleetBackend, schema: String, rootParent: (Int) -> String)
        throws
    {
        let f = try Fleet(backend: backend, schema: schema, label: "storectl-moved-under-reused")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO folders VALUES (1, 'r1', \(rootParent(1))), (2, 'r2', \(rootParent(2)))")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "UPDATE folders SET parent = 2 WHERE id = 1")
        try f.sql("b", "DELETE FROM folders WHERE id = 2; INSERT INTO folders VALUES (2, 'r2new', \(rootParent(2)))")
        try f.syncRounds(3, ["a", "b"])
        try f.assertSameRows("a row moved under a parent whose rowid another store reused")
        XCTAssertEqual(try f.rows("a").filter { $0.contains("'r1'") }, [], "r1 went with its deleted parent")
        for s in f.stores { try f.assertHealthy(s, "a row moved under a parent whose rowid another store reused") }
    }

    func testARowMovedUnderAParentWhoseRowidIsReusedFile() throws {
        try movedUnderAParentWhoseRowidIsReused(.file, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER REFERENCES folders(id) ON DELETE CASCADE);
            """, rootParent: { _ in "NULL" })
    }

    func testASelfParentRowMovedUnderAParentWhoseRowidIsReusedFile() throws {
        try movedUnderAParentWhoseRowidIsReused(.file, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE);
            """, rootParent: { "\($0)" })
    }
}
