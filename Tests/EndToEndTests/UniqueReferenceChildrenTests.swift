import Foundation
import TestSupport
import XCTest

/// Children that reference a parent's UNIQUE column rather than its key (`REFERENCES tags(code)`): when two stores
/// hold one UNIQUE value in two rows, the rows are duplicates and one is kept everywhere. The children of the
/// loser reference the value the winner holds too, so they stay, under the winner; the loser's deletion must not
/// take them by `ON DELETE CASCADE` (nor null them by `SET NULL`) on the way.
final class UniqueReferenceChildrenTests: XCTestCase {
    static let policies = ["property-local-wins", "server-wins", "local-wins", "property-server-wins"]

    /// `action`: the children's `ON DELETE` action, and `ON UPDATE` too after a space (`"CASCADE CASCADE"`).
    static func schema(key: String, action: String) -> String {
        let actions = action.split(separator: " ").map(String.init)
        let onUpdate = actions.count > 1 ? " ON UPDATE " + actions[1].replacingOccurrences(of: "_", with: " ") : ""
        return """
            CREATE TABLE IF NOT EXISTS tags(\(key), code TEXT NOT NULL UNIQUE, color TEXT);
            CREATE TABLE IF NOT EXISTS items(id TEXT PRIMARY KEY,
                tag TEXT REFERENCES tags(code) ON DELETE \(actions[0].replacingOccurrences(of: "_", with: " "))\(onUpdate),
                body TEXT);
            """
    }

    /// Both stores insert a tag with one code, each with a child that references the code.
    func bothInsert(_ backend: FleetBackend, key: String, action: String, policy: String) throws {
        let natural = key.hasPrefix("name")
        let f = try Fleet.pair(backend, schema: Self.schema(key: key, action: action), policy: policy,
                               rows: natural ? "INSERT INTO tags VALUES ('later', 'L', 'blue')"
                                             : "INSERT INTO tags(code, color) VALUES ('L', 'blue')",
                               label: "storectl-unique-reference")
        let tag = { (name: String, color: String) in
            natural ? "INSERT INTO tags VALUES ('\(name)', 'x', '\(color)')"
                    : "INSERT INTO tags(code, color) VALUES ('x', '\(color)')"
        }
        try f.sql("a", "\(tag("A", "red")); INSERT INTO items VALUES ('i1', 'x', 'from a')")
        try f.sql("b", "\(tag("B", "orange")); INSERT INTO items VALUES ('i2', 'x', 'from b')")
        try f.syncRounds(3, ["a", "b"])
        let what = "[\(backend), \(key), ON DELETE/UPDATE \(action), \(policy)] one code inserted on two stores, a child each"
        try f.assertSameRows(what)
        XCTAssertEqual(try f.sql("a", "SELECT id || '=' || coalesce(tag, 'NULL') FROM items ORDER BY id"),
                       "i1=x\ni2=x\n", "\(what): both children kept, under the code")
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM tags WHERE code = 'x'"), "1\n", "\(what): one tag")
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testBothChildrenKeptFile() throws {
        for key in ["id INTEGER PRIMARY KEY", "name TEXT PRIMARY KEY"] {
            for action in ["CASCADE", "SET_NULL", "RESTRICT", "CASCADE CASCADE", "SET_NULL SET_NULL"] {
                for policy in Self.policies { try bothInsert(.file, key: key, action: action, policy: policy) }
            }
        }
    }

    func testBothChildrenKeptPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try bothInsert(pg, key: "name TEXT PRIMARY KEY", action: "CASCADE", policy: "property-local-wins")
        try bothInsert(pg, key: "id INTEGER PRIMARY KEY", action: "SET_NULL SET_NULL", policy: "server-wins")
        try changedInto(pg, key: "name TEXT PRIMARY KEY", action: "CASCADE CASCADE", policy: "property-server-wins")
    }

    /// One store changes a synced tag's code to the code of a tag the other store inserted (with a child): the
    /// other store meets the change on a row it maps to while another of its rows holds the value.
    func changedInto(_ backend: FleetBackend, key: String, action: String, policy: String) throws {
        let natural = key.hasPrefix("name")
        let f = try Fleet.pair(backend, schema: Self.schema(key: key, action: action), policy: policy,
                               rows: natural ? "INSERT INTO tags VALUES ('old', 'y', 'blue')"
                                             : "INSERT INTO tags(code, color) VALUES ('y', 'blue')",
                               label: "storectl-unique-reference-change")
        try f.sql("a", "INSERT INTO items VALUES ('i0', 'y', 'on the old code')")
        try f.syncRounds(2, ["a", "b"])
        try f.sql("a", (natural ? "INSERT INTO tags VALUES ('new', 'x', 'red')"
                                : "INSERT INTO tags(code, color) VALUES ('x', 'red')")
                       + "; INSERT INTO items VALUES ('i1', 'x', 'from a')")
        try f.sql("b", "UPDATE tags SET code = 'x' WHERE code = 'y'")
        try f.syncRounds(3, ["b", "a"])
        let what = "[\(backend), \(key), ON DELETE/UPDATE \(action), \(policy)] a synced tag's code changed to a new tag's"
        try f.assertSameRows(what)
        XCTAssertEqual(try f.sql("a", "SELECT id || '=' || coalesce(tag, 'NULL') FROM items ORDER BY id"),
                       "i0=x\ni1=x\n", "\(what): both tags' children kept, under the code")
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM tags WHERE code = 'x'"), "1\n", "\(what): one tag")
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testChangedIntoAnotherRowsCodeFile() throws {
        for key in ["id INTEGER PRIMARY KEY", "name TEXT PRIMARY KEY"] {
            for action in ["CASCADE CASCADE", "SET_NULL CASCADE"] {
                for policy in Self.policies { try changedInto(.file, key: key, action: action, policy: policy) }
            }
        }
    }

    /// A `unique:` rule on another column (`name`): the two stores' tags are duplicates with different codes, and
    /// the loser's children follow the winner's code.
    func ruleDuplicates(_ backend: FleetBackend, key: String, action: String) throws {
        let natural = key.hasPrefix("name")
        let f = try Fleet(backend: backend, schema: Self.schema(key: key, action: action).replacingOccurrences(
                              of: "color TEXT", with: "color TEXT, label TEXT"),
                          storeYAML: """
                              entities:
                                tags: {unique: [label]}
                                items: {}
                          """, cloudExtra: "      merge_policy: property-local-wins", label: "storectl-unique-rule-reference")
        try f.cloudMode("a")
        try f.cloudMode("b")
        let tag = { (name: String, code: String) in
            natural ? "INSERT INTO tags VALUES ('\(name)', '\(code)', 'red', 'shared')"
                    : "INSERT INTO tags(code, color, label) VALUES ('\(code)', 'red', 'shared')"
        }
        try f.sql("a", "\(tag("A", "c1")); INSERT INTO items VALUES ('i1', 'c1', 'from a')")
        try f.sql("b", "\(tag("B", "c2")); INSERT INTO items VALUES ('i2', 'c2', 'from b')")
        try f.syncRounds(3, ["a", "b"])
        let what = "[\(backend), \(key), ON DELETE/UPDATE \(action)] a unique: rule's duplicates, children by code"
        try f.assertSameRows(what)
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM tags"), "1\n", "\(what): one tag")
        XCTAssertEqual(try f.sql("a", "SELECT group_concat(i.id) FROM items i JOIN tags t ON t.code = i.tag"),
                       "i1,i2\n", "\(what): both children kept, under the tag kept")
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testRuleDuplicatesKeepChildrenFile() throws {
        for key in ["id INTEGER PRIMARY KEY", "name TEXT PRIMARY KEY"] {
            for action in ["CASCADE", "SET_NULL", "CASCADE CASCADE"] { try ruleDuplicates(.file, key: key, action: action) }
        }
    }
}
