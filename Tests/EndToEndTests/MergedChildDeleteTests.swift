import Foundation
import TestSupport
import XCTest

/// Children of merged duplicates at one natural key, after the merge.
final class MergedChildDeleteTests: XCTestCase {
    /// a and b each make tag 'x' (UNIQUE) with a child at one natural key; b merges them. a then deletes its child
    /// (or the tag itself) before it saw the merge: the child (and the tag) is deleted on every store, whichever of
    /// the two records won the merge (record names are random: several rounds make each side the loser at least
    /// once, nearly surely).
    func mergedChildDeletedOnTheOtherStore(_ backend: FleetBackend, round: Int, deleteTag: Bool = false) throws {
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
        try f.sql("a", deleteTag ? "DELETE FROM tags" : "DELETE FROM tag_props")
        try f.syncRounds(3, ["a", "b"])
        let what = deleteTag ? "a merged tag deleted" : "a merged child deleted"
        try f.assertRows(deleteTag ? [] : ["tags|name=t:'x'"],
                         "\(what) on the store whose record (maybe) lost (round \(round))")
        for s in f.stores { try f.assertHealthy(s, "\(what) (round \(round))") }
        XCTAssertEqual(try f.liveCloudCounts()["tag_props"] ?? 0, 0, "[\(backend)] \(what): no live child record")
    }

    func testAMergedChildDeletedOnTheOtherStoreStaysDeletedFile() throws {
        for round in 1...6 { try mergedChildDeletedOnTheOtherStore(.file, round: round) }
    }

    func testAMergedTagDeletedOnTheOtherStoreStaysDeletedFile() throws {
        for round in 1...4 { try mergedChildDeletedOnTheOtherStore(.file, round: round, deleteTag: true) }
    }

    func testAMergedChildDeletedOnTheOtherStoreStaysDeletedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        for round in 1...4 { try mergedChildDeletedOnTheOtherStore(pg, round: round) }
        for round in 1...2 { try mergedChildDeletedOnTheOtherStore(pg, round: round, deleteTag: true) }
    }
}
