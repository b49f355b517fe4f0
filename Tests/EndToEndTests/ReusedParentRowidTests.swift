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

/// Children of merged duplicates at one natural key, after the merge.
final class MergedChildDeleteTests: XCTestCase {
    /// a and b each make tag 'x' (UNIQUE) with a child at one natural key; b merges them. a then deletes its child
    /// before it saw the merge: the child is deleted on every store, whichever of the two records won the merge
    /// (record names are random: several rounds make each side the loser at least once, nearly surely).
    func mergedChildDeletedOnTheOtherStore(_ backend: FleetBackend, round: Int) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
            CREATE TABLE IF NOT EXISTS tag_props(tag INTEGER NOT NULL REFERENCES tags(id) ON DELETE CASCADE,
                key TEXT NOT NULL, value TEXT, PRIMARY KEY (tag, key));
            """, label: "storectl-merged-child-delete")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO tags VALUES (1, 'x'); INSERT INTO tag_props VALUES (1, 'color', 'red')")
        try f.run("a", ["sync"])
        try f.sql("b", "INSERT INTO tags VALUES (1, 'x'); INSERT INTO tag_props VALUES (1, 'color', 'blue')")
        try f.run("b", ["sync"])
        try f.sql("a", "DELETE FROM tag_props")
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["tags|name=t:'x'"], "a merged child deleted on the store whose record (maybe) lost (round \(round))")
        for s in f.stores { try f.assertHealthy(s, "a merged child deleted (round \(round))") }
    }

    func testAMergedChildDeletedOnTheOtherStoreStaysDeletedFile() throws {
        for round in 1...6 { try mergedChildDeletedOnTheOtherStore(.file, round: round) }
    }
}
