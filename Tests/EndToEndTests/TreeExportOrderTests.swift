import Foundation
import StoreCloud
import TestSupport
import XCTest

/// A tree's export order (a table that references itself sends new rows first and deleted rows last, the rows
/// that move UNIQUE values together between them) with the export killed between batches, and a natural-key
/// duplicate's children following the winner, on more shapes: chains of new parents, a moved row in the UNIQUE
/// batch, a natural-key tree, children whose key holds the reference, three stores.
final class TreeExportOrderTests: XCTestCase {
    static let policies = ["property-local-wins", "property-server-wins", "server-wins", "local-wins"]

    /// Live cloud records that still reference a record whose tombstone is in the cloud.
    func orphansInCloud(_ f: Fleet, type: String) throws -> [String] {
        let records = try f.cloudRecords().filter { $0.recordType == type }
        let dead = records.filter(\.deleted).map(\.recordName)
        var out: [String] = []
        for r in records where !r.deleted {
            for d in dead where r.fields.contains("\"\(d)\"") { out.append("\(r.recordName) -> \(d) (\(r.fields))") }
        }
        return out
    }

    /// A tree where a row moves under a new parent and its old parent is deleted, a's export killed before each
    /// save in turn while b edits the moved row. `change`: a's SQL; `edit`: b's SQL; `check`: the SQL on a whose
    /// output must be `expected` under the property policies.
    func killedTreeExport(schema: String, rows: String, change: String, edit: String, saves: ClosedRange<Int>,
                          check: String, expected: String, label: String) throws
    {
        for policy in Self.policies {
            for save in saves {
                let f = try Fleet(backend: .file, schema: schema, cloudExtra: "      merge_policy: \(policy)",
                                  label: label)
                try f.cloudMode("a")
                try f.cloudMode("b")
                try f.sql("a", rows, foreignKeys: true)
                try f.syncRounds(2, ["a", "b"])
                try f.sql("a", change, foreignKeys: true)
                try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": "export.before-save:\(save)",
                                               "STORECTL_BATCH_SIZE": "1"], expect: nil)
                let what = "[\(label), \(policy)] killed before save \(save)"
                let orphans = try orphansInCloud(f, type: "folders")
                XCTAssertEqual(orphans, [], "\(what): an old parent's tombstone reached the cloud before a row moved away")
                try f.sql("b", edit)
                for _ in 0..<2 { try f.run("b", ["sync"]) }
                try f.syncRounds(3, ["a", "b"])
                try f.assertSameRows(what)
                if policy.hasPrefix("property-") {
                    let got = try f.sql("a", check)
                    XCTAssertEqual(got, expected, "\(what): the moved row, with b's edit, is under its new parent")
                }
                for s in f.stores { try f.assertHealthy(s, what) }
            }
        }
    }

    // MARK: Export order

    /// A surrogate tree with a UNIQUE name: the moved row swaps its name with another row, so `markMovesTogether`
    /// puts it in the `together` batch, which goes before the table's deleted rows (the old parent's tombstone).
    func testMovedRowInTheTogetherPassFile() throws {
        try killedTreeExport(
            schema: """
                CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                    parent INTEGER REFERENCES folders(id) ON DELETE CASCADE, note TEXT);
                """,
            rows: "INSERT INTO folders VALUES (1, 'r1', NULL, 'x'), (2, 'r2', NULL, 'x'), (3, 'c3', 2, 'x'), "
                + "(4, 'c4', 1, 'x')",
            change: """
                INSERT INTO folders VALUES (9, 'new9', NULL, 'x');
                UPDATE folders SET parent = 9, name = 'tmp' WHERE id = 3;
                UPDATE folders SET name = 'c3' WHERE id = 4; UPDATE folders SET name = 'c4' WHERE id = 3;
                DELETE FROM folders WHERE id = 2;
                """,
            edit: "UPDATE folders SET note = 'by b' WHERE id = 3", saves: 1...3,
            check: "SELECT p.name || '/' || c.name || '/' || c.note FROM folders c JOIN folders p ON p.id = c.parent "
                + "WHERE c.id = 3",
            expected: "new9/c4/by b\n", label: "storectl-tree-together")
    }

    /// Chains of new folders whose child has the lower key ("[10]" < "[9]"), a moved row under the deepest, the old
    /// parent deleted; killed before every save, then resumed.
    func testNewChainWithLowerChildKeysFile() throws {
        try killedTreeExport(
            schema: """
                CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                    parent INTEGER REFERENCES folders(id) ON DELETE CASCADE, note TEXT);
                """,
            rows: "INSERT INTO folders VALUES (1, 'r1', NULL, 'x'), (2, 'r2', NULL, 'x'), (3, 'c3', 2, 'x')",
            change: """
                INSERT INTO folders VALUES (9, 'new9', NULL, 'x'), (10, 'new10', 9, 'x'), (100, 'new100', 10, 'x');
                UPDATE folders SET parent = 100 WHERE id = 3; DELETE FROM folders WHERE id = 2;
                """,
            edit: "UPDATE folders SET note = 'by b' WHERE id = 3", saves: 1...5,
            check: "SELECT p.name || '/' || c.note FROM folders c JOIN folders p ON p.id = c.parent WHERE c.id = 3",
            expected: "new100/by b\n", label: "storectl-tree-chain")
    }

    /// A natural-key tree (the reference travels as the parent's key): a row moved under a new parent, the old
    /// parent deleted, a's export killed before each save while b edits the moved row. b's export meets the moved
    /// record naming a parent b has not imported yet: it leaves the row to its import, which brings the parent
    /// (before, the merge wrote the reference at once and b's sync failed with SQLite's foreign-key error).
    func testNaturalKeyTreeKilledBetweenBatchesFile() throws {
        try killedTreeExport(
            schema: """
                CREATE TABLE IF NOT EXISTS folders(name TEXT PRIMARY KEY,
                    parent TEXT REFERENCES folders(name) ON DELETE CASCADE, note TEXT);
                """,
            rows: "INSERT INTO folders VALUES ('r1', NULL, 'x'), ('r2', NULL, 'x'), ('c3', 'r2', 'x')",
            change: """
                INSERT INTO folders VALUES ('new9', NULL, 'x'), ('new10', 'new9', 'x');
                UPDATE folders SET parent = 'new10' WHERE name = 'c3'; DELETE FROM folders WHERE name = 'r2';
                """,
            edit: "UPDATE folders SET note = 'by b' WHERE name = 'c3'", saves: 1...4,
            check: "SELECT c.parent || '/' || c.note FROM folders c WHERE c.name = 'c3'",
            expected: "new10/by b\n", label: "storectl-tree-natural")
    }

    /// Many rows in small pages, killed after every few saves and resumed: every row once, no endless loop.
    func testRankedPagesKilledAndResumedFile() throws {
        let f = try Fleet(backend: .file, schema: MovedUnderANewParentTests.treeSchema,
                          cloudExtra: "      merge_policy: property-local-wins", label: "storectl-tree-pages")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30) "
                  + "INSERT INTO folders SELECT i, 'f' || i, CASE WHEN i > 1 THEN i - 1 END FROM n", foreignKeys: true)
        try f.syncRounds(2, ["a", "b"])
        try f.sql("a", """
            WITH RECURSIVE n(i) AS (SELECT 90 UNION ALL SELECT i + 1 FROM n WHERE i < 110)
            INSERT INTO folders SELECT i, 'new' || i, CASE WHEN i > 90 THEN i - 1 END FROM n;
            UPDATE folders SET parent = 110 - id WHERE id BETWEEN 2 AND 20 AND id % 2 = 0;
            UPDATE folders SET name = name || '!' WHERE id % 3 = 0;
            DELETE FROM folders WHERE id = 30;
            """, foreignKeys: true)
        for n in [3, 5, 9, 14] {
            try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": "export.after-save:\(n)", "STORECTL_BATCH_SIZE": "2"],
                      expect: nil)
            XCTAssertEqual(try orphansInCloud(f, type: "folders"), [], "after-save \(n)")
        }
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "2"])
        try f.run("b", ["sync"])
        try f.assertSameRows("ranked pages killed and resumed")
        XCTAssertEqual(try f.sql("b", "SELECT count(*) FROM folders"), "50\n")
        XCTAssertEqual(try f.liveCloudCounts()["folders"] ?? 0, 50)
        for s in f.stores { try f.assertHealthy(s, "ranked pages killed and resumed") }
    }

    // MARK: Duplicates

    func dup(_ backend: FleetBackend, schema: String, policy: String, stores: [String] = ["a", "b"],
             inserts: [String: String], expectCount: [String: String], label: String) throws
    {
        let f = try Fleet(stores: stores, backend: backend, schema: schema,
                          cloudExtra: "      merge_policy: \(policy)", label: label)
        for s in stores { try f.cloudMode(s) }
        for s in stores { try f.sql(s, inserts[s] ?? "", foreignKeys: true) }
        try f.syncRounds(3, stores)
        let what = "[\(backend), \(label), \(policy)]"
        try f.assertSameRows(what)
        for (sql, count) in expectCount.sorted(by: { $0.key < $1.key }) {
            let got = try f.sql(stores[0], sql)
            XCTAssertEqual(got, count, "\(what): \(sql)")
        }
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    /// A child whose key holds the reference, with one label on both sides (they collide after the re-point).
    func testDuplicateParentLinkChildrenFile() throws {
        for policy in ["property-local-wins", "property-server-wins", "server-wins", "local-wins"] {
            try dup(.file, schema: """
                CREATE TABLE IF NOT EXISTS tags(name TEXT PRIMARY KEY, code TEXT UNIQUE, color TEXT) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS links(tag TEXT NOT NULL REFERENCES tags(name) ON DELETE CASCADE,
                    label TEXT NOT NULL, body TEXT, PRIMARY KEY (tag, label)) WITHOUT ROWID;
                """, policy: policy,
                inserts: ["a": "INSERT INTO tags VALUES ('A', 'x', 'red'); INSERT INTO links VALUES ('A', 'l1', 'a1'), ('A', 'only-a', 'a')",
                          "b": "INSERT INTO tags VALUES ('B', 'x', 'blue'); INSERT INTO links VALUES ('B', 'l1', 'b1'), ('B', 'only-b', 'b')"],
                expectCount: ["SELECT count(*) FROM links WHERE label LIKE 'only-%'": "2\n",
                              "SELECT count(*) FROM links WHERE label = 'l1'": "1\n",
                              "SELECT count(*) FROM tags": "1\n"],
                label: "storectl-tree-dup-links")
        }
    }

    /// Three stores insert one UNIQUE value under three natural keys, each with children (CASCADE and SET NULL).
    func testThreeDuplicateParentsFile() throws {
        let schema = """
            CREATE TABLE IF NOT EXISTS tags(name TEXT PRIMARY KEY, code TEXT UNIQUE, color TEXT) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS items(id TEXT PRIMARY KEY, tag TEXT REFERENCES tags(name) ON DELETE CASCADE,
                body TEXT);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, tag TEXT REFERENCES tags(name) ON DELETE SET NULL,
                body TEXT);
            """
        for policy in ["property-local-wins", "property-server-wins", "server-wins", "local-wins", "error"] {
            for order in [["a", "b", "c"], ["c", "b", "a"], ["b", "c", "a"]] {
                let f = try Fleet(stores: ["a", "b", "c"], backend: .file, schema: schema,
                                  cloudExtra: "      merge_policy: \(policy)", label: "storectl-tree-dup-three")
                for s in f.stores { try f.cloudMode(s) }
                for (s, k) in [("a", "B"), ("b", "A"), ("c", "C")] {
                    try f.sql(s, "INSERT INTO tags VALUES ('\(k)', 'x', '\(s)'); "
                              + "INSERT INTO items VALUES ('i-\(s)', '\(k)', '\(s)'); "
                              + "INSERT INTO notes(tag, body) VALUES ('\(k)', 'note by \(s)')", foreignKeys: true)
                }
                let what = "[three duplicates, \(policy), \(order)]"
                for _ in 0..<3 { for s in order { try f.run(s, ["sync"], expect: nil) } }
                try f.assertSameRows(what)
                XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM items"), "3\n", "\(what): every item kept")
                XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM items JOIN tags ON tags.name = items.tag"), "3\n",
                               "\(what): every item under the tag kept")
                XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM notes WHERE tag IS NOT NULL"), "3\n",
                               "\(what): every note keeps a tag")
                XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM tags"), "1\n", "\(what): one tag")
                for s in f.stores { try f.assertHealthy(s, what) }
            }
        }
    }

    func testDuplicateParentsPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        for policy in ["property-local-wins", "server-wins"] {
            try dup(pg, schema: DuplicateParentChildrenTests.schema, policy: policy,
                    stores: ["a", "b", "c"],
                    inserts: ["a": "INSERT INTO tags VALUES ('B', 'x', 'a'); INSERT INTO items VALUES ('i1', 'B', 'x')",
                              "b": "INSERT INTO tags VALUES ('A', 'x', 'b'); INSERT INTO items VALUES ('i2', 'A', 'y')",
                              "c": "INSERT INTO tags VALUES ('C', 'x', 'c'); INSERT INTO items VALUES ('i3', 'C', 'z')"],
                    expectCount: ["SELECT count(*) FROM items": "3\n", "SELECT count(*) FROM tags": "1\n"],
                    label: "storectl-tree-dup-pg")
        }
    }

    /// Duplicates in a natural-key tree: the loser's child rows (same table) follow the winner.
    func testDuplicateInNaturalKeyTreeFile() throws {
        for policy in ["property-local-wins", "server-wins", "local-wins", "error"] {
            try dup(.file, schema: """
                CREATE TABLE IF NOT EXISTS cats(name TEXT PRIMARY KEY, code TEXT UNIQUE,
                    parent TEXT REFERENCES cats(name) ON DELETE CASCADE) WITHOUT ROWID;
                """, policy: policy,
                inserts: ["a": "INSERT INTO cats VALUES ('A', 'x', NULL), ('a-kid', 'ak', 'A')",
                          "b": "INSERT INTO cats VALUES ('B', 'x', NULL), ('b-kid', 'bk', 'B'), ('b-grandkid', 'bg', 'b-kid')"],
                expectCount: ["SELECT count(*) FROM cats": "4\n", "SELECT count(*) FROM cats WHERE parent = 'A'": "2\n"],
                label: "storectl-tree-dup-nat-tree")
        }
    }
}
