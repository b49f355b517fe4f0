import Foundation
import TestSupport
import XCTest

/// Two stores insert parents with natural keys that hold one UNIQUE value, each with a child: the two records are
/// duplicates and one parent is kept everywhere; the loser's child follows the winner. Before, when the incoming
/// record won on a store whose row it did not map to, the local loser was deleted before its children were
/// re-pointed, and `ON DELETE CASCADE` took them with it.
final class DuplicateParentChildrenTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS tags(name TEXT PRIMARY KEY, code TEXT UNIQUE, color TEXT) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS items(id TEXT PRIMARY KEY, tag TEXT REFERENCES tags(name) ON DELETE CASCADE,
            body TEXT);
        """

    func duplicates(_ backend: FleetBackend, policy: String) throws {
        let f = try Fleet.pair(backend, schema: Self.schema, policy: policy,
                               rows: "INSERT INTO tags VALUES ('later', 'L', 'blue')", label: "storectl-duplicate-parents")
        try f.sql("a", "INSERT INTO tags VALUES ('A', 'x', 'red'); INSERT INTO items VALUES ('i1', 'A', 'x')")
        try f.sql("b", "INSERT INTO tags VALUES ('B', 'x', 'orange'); INSERT INTO items VALUES ('i2', 'B', 'y')")
        try f.syncRounds(3, ["a", "b"])
        let what = "[\(backend), \(policy)] duplicate parents with a child each"
        try f.assertSameRows(what)
        let items = try f.rows("a", tables: ["items"])
        XCTAssertEqual(items.count, 2, "\(what): both children kept: \(items)")
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM items JOIN tags ON tags.name = items.tag"), "2\n",
                       "\(what): both under the parent kept")
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM tags WHERE code = 'x'"), "1\n", "\(what): one parent")
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testTheLosersChildFollowsTheWinnerFile() throws {
        for policy in ["property-local-wins", "server-wins", "local-wins"] { try duplicates(.file, policy: policy) }
    }

    func testTheLosersChildFollowsTheWinnerPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try duplicates(pg, policy: "property-local-wins")
    }

    /// The same with a composite natural key: the children reference both key columns.
    func testTheLosersChildFollowsTheWinnerUnderACompositeKeyFile() throws {
        for policy in ["property-local-wins", "server-wins", "local-wins"] {
            let f = try Fleet.pair(.file, schema: """
                CREATE TABLE IF NOT EXISTS tags(ns TEXT NOT NULL, name TEXT NOT NULL, code TEXT UNIQUE, color TEXT,
                    PRIMARY KEY (ns, name)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS items(id TEXT PRIMARY KEY, ns TEXT, tag TEXT, body TEXT,
                    FOREIGN KEY (ns, tag) REFERENCES tags(ns, name) ON DELETE CASCADE);
                """, policy: policy, rows: "INSERT INTO tags VALUES ('n', 'later', 'L', 'blue')",
                label: "storectl-duplicate-composite")
            try f.sql("a", "INSERT INTO tags VALUES ('n', 'A', 'x', 'red'); INSERT INTO items VALUES ('i1', 'n', 'A', 'x')")
            try f.sql("b", "INSERT INTO tags VALUES ('n', 'B', 'x', 'orange'); INSERT INTO items VALUES ('i2', 'n', 'B', 'y')")
            try f.syncRounds(3, ["a", "b"])
            let what = "[\(policy)] duplicate parents under a composite key, a child each"
            try f.assertSameRows(what)
            XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM items JOIN tags ON tags.ns = items.ns AND tags.name = items.tag"),
                           "2\n", "\(what): both children kept, under the parent kept")
            for s in f.stores { try f.assertHealthy(s, what) }
        }
    }
}
