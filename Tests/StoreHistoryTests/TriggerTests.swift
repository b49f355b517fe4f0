import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// What the triggers record: authors, changed columns, composite keys, key changes, blobs, odd names.
final class TriggerTests: XCTestCase {
    func testOwnWritesCarryTheAuthorAndOneTransactionID() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        let tx1 = try f.tracker.write {
            try f.db.run("INSERT INTO notes VALUES (1, 'a', 'x')")
            try f.db.run("INSERT INTO notes VALUES (2, 'b', 'y')")
        }
        let tx2 = try f.tracker.write(author: "importer") {
            try f.db.run("UPDATE notes SET title = 'A' WHERE id = 1")
        }
        XCTAssertEqual(tx1, 1)
        XCTAssertEqual(tx2, 2)
        XCTAssertEqual(try f.rows(), [
            "I notes [1] tester 1",
            "I notes [2] tester 1",
            "U notes [1] importer 2 changed=title",
        ])
        // The context is empty again after each transaction, so the next unnamed write is external.
        XCTAssertEqual(try f.count("SELECT count(*) FROM _storectl_context"), 0)
        try f.db.run("DELETE FROM notes WHERE id = 2")
        XCTAssertEqual(try f.rows(after: 3), [#"D notes [2] external nil tombstone={"id":2}"#])
        XCTAssertEqual(try f.tracker.meta(.nextTx), "3")
    }

    func testAFailedWriteRecordsNothingAndConsumesNoTransactionID() throws {
        struct Boom: Error {}
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT)")
        XCTAssertThrowsError(try f.tracker.write {
            try f.db.run("INSERT INTO notes VALUES (1, 'a')")
            throw Boom()
        })
        XCTAssertEqual(try f.rows(), [])
        XCTAssertEqual(try f.tracker.meta(.nextTx), "1")
        XCTAssertEqual(try f.count("SELECT count(*) FROM _storectl_context"), 0)
    }

    func testNestedWritesRestoreTheOuterAuthor() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT)")
        try f.tracker.write(author: "outer") {
            try f.db.run("INSERT INTO notes VALUES (1, 'a')")
            try f.tracker.write(author: "inner") { try f.db.run("INSERT INTO notes VALUES (2, 'b')") }
            try f.db.run("INSERT INTO notes VALUES (3, 'c')")
        }
        XCTAssertEqual(try f.rows(), ["I notes [1] outer 1", "I notes [2] inner 2", "I notes [3] outer 1"])
    }

    func testUpdatesRecordOnlyTheColumnsThatReallyChanged() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT, body TEXT, n REAL, tag)")
        try f.db.run("INSERT INTO notes VALUES (1, 'a', 'x', 1.5, NULL)")
        try f.db.run("UPDATE notes SET title = 'a', body = 'x'")           // nothing changes: nothing recorded
        try f.db.run("UPDATE notes SET title = 'b', body = 'x'")           // only title
        try f.db.run("UPDATE notes SET body = 'y', n = 2.5, tag = 'red'")  // three columns
        try f.db.run("UPDATE notes SET tag = NULL")                        // to NULL is a change
        try f.db.run("UPDATE notes SET tag = NULL")                        // NULL to NULL is not
        XCTAssertEqual(try f.rows(), [
            "I notes [1] external nil",
            "U notes [1] external nil changed=title",
            "U notes [1] external nil changed=body,n,tag",
            "U notes [1] external nil changed=tag",
        ])
        let raw = try f.db.query("SELECT changed FROM _storectl_history WHERE op = 'U' ORDER BY seq").map { $0[0] }
        XCTAssertEqual(raw, [.text(#"["title"]"#), .text(#"["body","n","tag"]"#), .text(#"["tag"]"#)])
    }

    func testCompositeKeysAreCanonicalJSONArraysInKeyOrder() throws {
        // The key order (b, a) differs from the column order (a, b).
        let f = try Fixture("CREATE TABLE links(a TEXT, b INTEGER, note TEXT, PRIMARY KEY (b, a)) WITHOUT ROWID")
        try f.db.run("INSERT INTO links VALUES ('x', 2, 'n')")
        try f.db.run("UPDATE links SET note = 'm'")
        try f.db.run("DELETE FROM links")
        XCTAssertEqual(try f.rows(), [
            #"I links [2,"x"] external nil"#,
            #"U links [2,"x"] external nil changed=note"#,
            #"D links [2,"x"] external nil tombstone={"b":2,"a":"x"}"#,
        ])
        let change = try XCTUnwrap(try f.tracker.changes().first)
        XCTAssertEqual(change.primaryKey, [.integer(2), .text("x")])
    }

    func testAKeyChangeIsADeleteOfTheOldKeyAndAnInsertOfTheNew() throws {
        let f = try Fixture("CREATE TABLE tags(name TEXT PRIMARY KEY, color TEXT)")
        try f.db.run("INSERT INTO tags VALUES ('red', '#f00')")
        try f.db.run("UPDATE tags SET name = 'rouge', color = '#e00'")
        XCTAssertEqual(try f.rows(), [
            #"I tags ["red"] external nil"#,
            #"D tags ["red"] external nil tombstone={"name":"red"}"#,
            #"I tags ["rouge"] external nil"#,
        ])
    }

    func testTombstonesRecordTheConfiguredColumns() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT, title TEXT)",
                            options: TrackingOptions(tombstones: ["notes": ["uuid", "title"]]))
        try f.db.run("INSERT INTO notes VALUES (7, 'u-7', 'hello')")
        try f.db.run("DELETE FROM notes")
        let delete = try XCTUnwrap(try f.tracker.changes().last)
        XCTAssertEqual(delete.op, .delete)
        XCTAssertEqual(delete.tombstone, ["uuid": .text("u-7"), "title": .text("hello")])
        XCTAssertEqual(delete.primaryKey, [.integer(7)])
    }

    func testBlobKeysNeverMakeTheWriteFail() throws {
        let f = try Fixture("CREATE TABLE files(hash BLOB PRIMARY KEY, size INTEGER)")
        try f.db.run("INSERT INTO files VALUES (?, 1)", [Value.blob([0xde, 0xad])])
        try f.db.run("UPDATE files SET size = 2")
        try f.db.run("DELETE FROM files")
        XCTAssertEqual(try f.rows(), [
            #"I files [{"$blob":"DEAD"}] external nil"#,
            #"U files [{"$blob":"DEAD"}] external nil changed=size"#,
            #"D files [{"$blob":"DEAD"}] external nil tombstone={"hash":{"$blob":"DEAD"}}"#,
        ])
        XCTAssertEqual(try f.tracker.changes().last?.tombstone, ["hash": .blob([0xde, 0xad])])
        XCTAssertEqual(try f.tracker.changes().first?.primaryKey, [.blob([0xde, 0xad])])
    }

    func testNamesWithQuotesSpacesAndSQLWork() throws {
        let table = #"my "notes"; DROP TABLE x; --"#
        let column = #"it's a "col""#
        let f = try Fixture("""
            CREATE TABLE x(id INTEGER PRIMARY KEY);
            CREATE TABLE \(quoteIdentifier(table))(\(quoteIdentifier("key ]["))
              TEXT PRIMARY KEY, \(quoteIdentifier(column)) TEXT, \(quoteIdentifier("a\\b")) TEXT);
            """)
        XCTAssertEqual(try f.tracker.verify(), .ok)
        try f.tracker.write {
            try f.db.run("INSERT INTO \(quoteIdentifier(table)) VALUES ('k''1', 'v', 'w')")
            try f.db.run("UPDATE \(quoteIdentifier(table)) SET \(quoteIdentifier(column)) = 'v2', \(quoteIdentifier("a\\b")) = 'z'")
            try f.db.run("DELETE FROM \(quoteIdentifier(table))")
        }
        XCTAssertTrue(try f.db.tableExists("x"))
        let changes = try f.tracker.changes()
        XCTAssertEqual(changes.map(\.entity), [table, table, table])
        XCTAssertEqual(changes.map(\.primaryKey), [[.text("k'1")], [.text("k'1")], [.text("k'1")]])
        XCTAssertEqual(changes[1].changed, [column, "a\\b"])
        XCTAssertEqual(changes[2].tombstone, ["key ][": .text("k'1")])
        let triggers = try f.db.query("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? ORDER BY name",
                                      [table]).compactMap { $0[0].string }
        XCTAssertEqual(triggers, ["_storectl_\(table)_del", "_storectl_\(table)_ins", "_storectl_\(table)_upd",
                                  "_storectl_\(table)_updpk"])
    }

    func testTimestampsAreUnixMilliseconds() throws {
        let f = try Fixture("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        let before = HistoryTracker.nowMilliseconds()
        try f.db.run("INSERT INTO t VALUES (1)")
        let after = HistoryTracker.nowMilliseconds()
        let ts = try XCTUnwrap(try f.tracker.changes().first?.timestamp)
        XCTAssertGreaterThanOrEqual(ts, before - 1)
        XCTAssertLessThanOrEqual(ts, after + 1)
    }

    func testUpsertAndUpdateWithManyColumnsStayLinear() throws {
        let columns = (1...60).map { "c\($0) TEXT" }.joined(separator: ", ")
        let f = try Fixture("CREATE TABLE wide(id INTEGER PRIMARY KEY, \(columns))")
        let sql = try XCTUnwrap(try f.db.scalar("SELECT sql FROM sqlite_master WHERE name = '_storectl_wide_upd'")?.string)
        // One IS NOT test in WHEN and one CASE term per column: 2 per column, nothing quadratic.
        XCTAssertEqual(sql.components(separatedBy: " IS NOT ").count - 1, 120)
        XCTAssertEqual(sql.components(separatedBy: "CASE WHEN OLD.").count - 1, 60)
        try f.db.run("INSERT INTO wide(id, c1) VALUES (1, 'a') ON CONFLICT(id) DO UPDATE SET c1 = excluded.c1")
        try f.db.run("INSERT INTO wide(id, c1, c60) VALUES (1, 'b', 'z') ON CONFLICT(id) DO UPDATE SET c1 = excluded.c1, c60 = excluded.c60")
        XCTAssertEqual(try f.rows(), ["I wide [1] external nil", "U wide [1] external nil changed=c1,c60"])
    }
}

extension TriggerTests {
    func testOnlyARealRowIDAliasSkipsTheBlobTest() throws {
        let f = try Fixture("""
            CREATE TABLE a(id INTEGER PRIMARY KEY, x);
            CREATE TABLE b(id INTEGER PRIMARY KEY DESC, x);
            CREATE TABLE c(id INT PRIMARY KEY, x);
            """)
        XCTAssertEqual(try f.tracker.trackedTables().map(\.keyIsRowID), [true, false, false])
        // INTEGER PRIMARY KEY DESC is not a rowid alias: it can hold a blob, and the write must still work.
        try f.db.run("INSERT INTO b VALUES (?, 1)", [Value.blob([1])])
        try f.db.run("INSERT INTO c VALUES (?, 1)", [Value.blob([2])])
        try f.db.run("INSERT INTO a VALUES (5, 1)")
        XCTAssertEqual(try f.rows(), [#"I b [{"$blob":"01"}] external nil"#, #"I c [{"$blob":"02"}] external nil"#,
                                      "I a [5] external nil"])
    }

    /// A value is its type and its bytes: in columns without a declared type, a change of type alone (1 -> 1.0,
    /// 2.0 -> 2, 1 -> '1', a blob to a text of the same bytes) is a change, of a column and of a key, although
    /// SQLite's `IS NOT` finds 1 and 1.0 equal; writing the same value of the same type again is none.
    func testAChangeOfTypeAloneIsRecorded() throws {
        let f = try Fixture("CREATE TABLE t(k PRIMARY KEY, v, w)")
        try f.sqlite3("""
            INSERT INTO t VALUES (1, 1, 2.0);
            UPDATE t SET v = 1.0;
            UPDATE t SET w = 2;
            UPDATE t SET v = '1';
            UPDATE t SET v = CAST('1' AS BLOB);
            UPDATE t SET v = CAST('1' AS BLOB), w = 2;
            UPDATE t SET k = 1.0;
            """)
        XCTAssertEqual(try f.rows(), [
            "I t [1] external nil", "U t [1] external nil changed=v", "U t [1] external nil changed=w",
            "U t [1] external nil changed=v", "U t [1] external nil changed=v",
            #"D t [1] external nil tombstone={"k":1}"#, "I t [1.0] external nil",
        ])
        // Only a column that can hold both 1 and 1.0 pays for the type test: SQLite's affinity converts the others.
        let typed = try Fixture("CREATE TABLE t(id INTEGER PRIMARY KEY, i INTEGER, r REAL, s TEXT, n NUMERIC, b BLOB, u)")
        let sql = try XCTUnwrap(try typed.db.scalar("SELECT sql FROM sqlite_master WHERE name = '_storectl_t_upd'")?.string)
        XCTAssertEqual(Set(sql.components(separatedBy: "typeof(OLD.").dropFirst().map { String($0.prefix(3)) }),
                       ["\"b\"", "\"u\""])
        // A STRICT table's ANY column converts nothing: 1 and 1.0 are both kept, and told apart.
        let strict = try Fixture("CREATE TABLE s(id INTEGER PRIMARY KEY, a ANY, r REAL) STRICT")
        try strict.sqlite3("INSERT INTO s VALUES (1, 1, 1); UPDATE s SET a = 1.0; UPDATE s SET r = 1.0;")
        XCTAssertEqual(try strict.rows(), ["I s [1] external nil", "U s [1] external nil changed=a"])
    }
}
