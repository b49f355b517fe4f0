import Foundation
import TestSupport
import XCTest

/// A UNIQUE key of several columns (`UNIQUE(list, pos)`, or `unique: [list, pos]`) is one value: when one store
/// moves a row to another list and another store moves the same row to another position, no merge policy builds
/// the mix of the two (the new list at the new position), which a third row may hold. Before, the row-level and
/// property policies decided column by column: the mix met the third row, and the two were merged as duplicates
/// (one row lost on every store), or the record was set aside on every sync for good.
final class UniqueKeyOfSeveralColumnsTests: XCTestCase {
    static let constraintSchema = """
        CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, list TEXT NOT NULL, pos INTEGER NOT NULL,
                                         title TEXT, UNIQUE(list, pos));
        """
    static let ruleSchema = """
        CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, list TEXT NOT NULL, pos INTEGER NOT NULL,
                                         title TEXT);
        """
    static let rule = """
            entities:
              items:
                unique: [list, pos]
        """

    /// x at (L1, 1), y at (L1, 2), z at (L2, 5). a moves x to L2; b moves x to position 5 (and renames it);
    /// `first` syncs first. (L2, 5) is z's.
    func splitKeyEdit(_ backend: FleetBackend, policy: String, first: String, byRule: Bool) throws {
        let what = "[\(backend)] \(policy), \(first) first, " + (byRule ? "unique: rule" : "SQL UNIQUE")
        let f = try Fleet.pair(backend, schema: byRule ? Self.ruleSchema : Self.constraintSchema, policy: policy,
                               storeYAML: byRule ? Self.rule : "",
                               rows: "INSERT INTO items VALUES (1, 'L1', 1, 'x'), (2, 'L1', 2, 'y'), (3, 'L2', 5, 'z')",
                               label: "storectl-unique-key-columns")
        try f.sql("a", "UPDATE items SET list = 'L2' WHERE id = 1")
        try f.sql("b", "UPDATE items SET pos = 5, title = 'x renamed' WHERE title = 'x'")
        let second = first == "a" ? "b" : "a"
        try f.syncRounds(3, [first, second])
        let rows = try f.settledRows("items", count: 3, what)
        XCTAssertTrue(rows.contains("items|list=t:'L2'|pos=i:5|title=t:'z'"), "\(what): z kept its place: \(rows)")
        XCTAssertTrue(rows.contains("items|list=t:'L1'|pos=i:2|title=t:'y'"), "\(what): y untouched: \(rows)")
        // x's key comes whole from one side: a's (L2, 1) or b's (L1, 5), never the mix.
        XCTAssertTrue(rows.contains { $0.hasPrefix("items|list=t:'L2'|pos=i:1|") || $0.hasPrefix("items|list=t:'L1'|pos=i:5|") },
                      "\(what): x at a's or b's place: \(rows)")
    }

    /// Two keys that share a column (`UNIQUE(list, pos)`, `UNIQUE(list, title)`): a renames x, b moves x to
    /// (L2, 2). Taking `list` with the rename's key and `pos` with the move's put x at (L1, 2), y's place, and y
    /// was merged into it.
    func overlappingKeys(_ backend: FleetBackend, policy: String, first: String) throws {
        let what = "[\(backend)] overlapping keys, \(policy), \(first) first"
        let f = try Fleet.pair(backend, schema: Self.overlappingSchema, policy: policy,
                               rows: "INSERT INTO items VALUES (1, 'L1', 1, 'x'), (2, 'L1', 2, 'y'), (3, 'L2', 5, 'z')",
                               label: "storectl-overlapping-keys")
        try f.sql("a", "UPDATE items SET title = 'x2' WHERE id = 1")
        try f.sql("b", "UPDATE items SET list = 'L2', pos = 2 WHERE title = 'x'")
        try f.syncRounds(3, first == "a" ? ["a", "b"] : ["b", "a"])
        let rows = try f.settledRows("items", count: 3, what)
        XCTAssertTrue(rows.contains("items|list=t:'L1'|pos=i:2|title=t:'y'"), "\(what): y kept its place: \(rows)")
        XCTAssertTrue(rows.contains { $0.hasPrefix("items|list=t:'L2'|pos=i:2|") || $0.hasPrefix("items|list=t:'L1'|pos=i:1|") },
                      "\(what): x at a's or b's place: \(rows)")
    }

    static let overlappingSchema = """
        CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, list TEXT NOT NULL, pos INTEGER NOT NULL,
                                         title TEXT, UNIQUE(list, pos), UNIQUE(list, title));
        """

    func testKeysThatShareAColumnAreMergedAsOneFile() throws {
        for policy in ["server-wins", "local-wins", "property-local-wins", "property-server-wins"] {
            for first in ["a", "b"] { try overlappingKeys(.file, policy: policy, first: first) }
        }
    }

    /// The same keys: a moves three rows round two lists (r4 to r2's place, r2 to r1's, r1 to r4's); b renames r1
    /// and syncs first. Under the server policies r1 took the cloud's `list` and a's `pos`: r2's new place.
    func testARotationAcrossListsMeetingARenameLosesNoRowFile() throws {
        for policy in ["server-wins", "property-server-wins", "local-wins", "property-local-wins"] {
            let what = "rotation across lists, \(policy)"
            let f = try Fleet.pair(.file, schema: Self.overlappingSchema, policy: policy, rows: """
                INSERT INTO items(id, list, pos, title) VALUES (1, 'L1', 1, 'r1'), (2, 'L1', 2, 'r2'), (3, 'L1', 3, 'r3'),
                  (4, 'L2', 1, 'r4'), (5, 'L2', 2, 'r5'), (6, 'L2', 3, 'r6')
                """, label: "storectl-overlapping-rotation")
            try f.sql("a", """
                BEGIN; UPDATE items SET pos = -100 WHERE id = 4; UPDATE items SET pos = -101 WHERE id = 2;
                UPDATE items SET pos = -102 WHERE id = 1; UPDATE items SET list = 'L1', pos = 2 WHERE id = 4;
                UPDATE items SET list = 'L1', pos = 1 WHERE id = 2; UPDATE items SET list = 'L2', pos = 1 WHERE id = 1;
                COMMIT;
                """)
            try f.sql("b", "UPDATE items SET title = 'r1 by b' WHERE id = 1")
            try f.syncRounds(4, ["b", "a"])
            _ = try f.settledRows("items", count: 6, what)
        }
    }

    /// Three keys in a chain, `UNIQUE(a, b)`, `UNIQUE(b, c)`, `UNIQUE(c, d)`: a changes X's a and b, b changes X's
    /// c and d. (a, b) is a's alone and (c, d) b's alone, so (b, c) can only be a mix, and Y holds that mix. It is
    /// no duplicate of Y: the store that meets it keeps both rows and reports the record (not healthy), rather
    /// than merge Y away. Before, Y was merged into X on every store while `status` said healthy.
    func testAChainOfKeysLosesNoRowFile() throws {
        for policy in ["server-wins", "local-wins", "property-local-wins", "property-server-wins"] {
            for first in ["a", "b"] {
                let what = "chain of keys, \(policy), \(first) first"
                let f = try Fleet.pair(.file, schema: """
                    CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, name TEXT, a TEXT, b TEXT, c TEXT, d TEXT,
                                                 UNIQUE(a, b), UNIQUE(b, c), UNIQUE(c, d));
                    """, policy: policy, rows: "INSERT INTO t VALUES (1, 'X', 'x1', 'B0', 'C0', 'x4'), "
                        + "(2, 'Y', 'y1', 'B1', 'C1', 'y4')", label: "storectl-key-chain")
                try f.sql("a", "UPDATE t SET a = 'xa', b = 'B1' WHERE name = 'X'")
                try f.sql("b", "UPDATE t SET c = 'C1', d = 'xd' WHERE name = 'X'")
                let order = first == "a" ? ["a", "b"] : ["b", "a"]
                var exits: [Int32] = []
                for _ in 0..<3 { for s in order { exits.append(try f.run(s, ["sync"], expect: nil).status) } }
                for s in f.stores {
                    let rows = try f.rows(s, tables: ["t"])
                    XCTAssertEqual(rows.count, 2, "\(what): \(s) keeps both rows: \(rows)")
                    XCTAssertTrue(rows.contains("t|a=t:'y1'|b=t:'B1'|c=t:'C1'|d=t:'y4'|name=t:'Y'"), "\(what): \(s) keeps Y: \(rows)")
                }
                XCTAssertEqual(try f.liveCloudCounts()["t"] ?? 0, 2, "\(what): two live records")
                if exits.suffix(2).allSatisfy({ $0 == 0 }) {
                    XCTAssertEqual(try f.rows("a", tables: ["t"]), try f.rows("b", tables: ["t"]),
                                   "\(what): stores whose syncs pass agree")
                }
                if exits.contains(where: { $0 != 0 }) {
                    // The record that cannot be merged is reported until a user changes one of the rows.
                    let unhealthy = try f.stores.filter { try f.run($0, ["status"], expect: nil).status != 0 }
                    XCTAssertFalse(unhealthy.isEmpty, "\(what): a store that cannot sync is not called healthy")
                }
            }
        }
    }

    /// The same chain, each store moving another row into the place it moved X from: a moves X's (c, d) and gives
    /// W X's old (c, d); b moves X's (a, b) and gives Z X's old (a, b). Each one-sided key stays with its side, so X
    /// never takes back a value W or Z holds now (when the whole chain went by the policy, one was merged away).
    func testAChainOfKeysEachMovedAwayKeepsEveryRowFile() throws {
        for policy in ["server-wins", "local-wins", "property-local-wins", "property-server-wins"] {
            for first in ["a", "b"] {
                let what = "chain of keys with moves, \(policy), \(first) first"
                let f = try Fleet.pair(.file, schema: """
                    CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, name TEXT, a TEXT NOT NULL, b TEXT NOT NULL,
                                                 c TEXT NOT NULL, d TEXT NOT NULL, UNIQUE(a, b), UNIQUE(b, c), UNIQUE(c, d));
                    """, policy: policy, rows: "INSERT INTO t(name, a, b, c, d) VALUES ('X', 'x1', 'B0', 'C0', 'x4'), "
                        + "('W', 'w1', 'BW', 'CW', 'w4'), ('Z', 'z1', 'BZ', 'CZ', 'z4')", label: "storectl-key-chain-moves")
                try f.sql("a", "BEGIN; UPDATE t SET c = 'C1', d = 'xd' WHERE name = 'X'; "
                             + "UPDATE t SET c = 'C0', d = 'x4' WHERE name = 'W'; COMMIT;")
                try f.sql("b", "BEGIN; UPDATE t SET a = 'xa', b = 'B1' WHERE name = 'X'; "
                             + "UPDATE t SET a = 'x1', b = 'B0' WHERE name = 'Z'; COMMIT;")
                try f.syncRounds(3, first == "a" ? ["a", "b"] : ["b", "a"])
                let rows = try f.settledRows("t", count: 3, what)
                for name in ["W", "X", "Z"] {
                    XCTAssertTrue(rows.contains { $0.hasSuffix("|name=t:'\(name)'") }, "\(what): \(name) kept: \(rows)")
                }
            }
        }
    }

    func testKeysThatShareAColumnAreMergedAsOnePostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try overlappingKeys(pg, policy: "property-local-wins", first: "b")
    }

    func testASplitEditOfAKeyOfSeveralColumnsLosesNoRowFile() throws {
        for byRule in [false, true] {
            for policy in ["server-wins", "local-wins", "property-local-wins", "property-server-wins"] {
                for first in ["a", "b"] {
                    try splitKeyEdit(.file, policy: policy, first: first, byRule: byRule)
                }
            }
        }
    }

    func testASplitEditOfAKeyOfSeveralColumnsLosesNoRowPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        for byRule in [false, true] {
            try splitKeyEdit(pg, policy: "server-wins", first: "b", byRule: byRule)
            try splitKeyEdit(pg, policy: "property-local-wins", first: "a", byRule: byRule)
        }
    }
}
