import Foundation
import TestSupport
import XCTest

/// The record map keeps a fingerprint of each row's last synced fields (12 bytes a field), not the fields: what it
/// kept the values for still works through the real binary, and a store whose map holds the fields is converted in
/// place without losing any.
final class LeanRecordMapTests: XCTestCase {
    /// Two stores in the cloud with five notes that have bodies.
    func synced() throws -> Fleet {
        let s = try Fleet.notes(label: "storectl-lean-map")
        try s.run("a", ["mode", "local"])
        var sql = ""
        for i in 1...5 { sql += "INSERT INTO notes(uuid, title, body) VALUES ('n\(i)', 'note \(i)', 'body \(i)');" }
        try s.sql("a", sql)
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        s.modes = ["a": "cloud", "b": "cloud"]
        return s
    }

    static let dropBody = """
        CREATE TABLE notes_new(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '');
        INSERT INTO notes_new(id, uuid, title) SELECT id, uuid, title FROM notes;
        DROP TABLE notes;
        ALTER TABLE notes_new RENAME TO notes;
        """

    func bodies(_ s: Fleet, _ store: String) throws -> [String] {
        try s.sql(store, "SELECT uuid || '|' || title || '|' || body FROM notes ORDER BY uuid")
            .split(separator: "\n").map(String.init)
    }

    func cloudNotes(_ s: Fleet) throws -> [String] {
        try s.sqlFile(s.dir.file("cloud/shared.container"), """
            SELECT json_extract(fields, '$.uuid') || '|' || json_extract(fields, '$.title') || '|'
                   || coalesce(json_extract(fields, '$.body'), '<none>')
            FROM records WHERE record_type = 'notes' AND deleted = 0 ORDER BY 1
            """).split(separator: "\n").map(String.init)
    }

    /// Each base is a blob of 12 bytes a field, and no base holds a value.
    func assertHashed(_ s: Fleet, _ store: String, fields: Int, file: StaticString = #filePath,
                      line: UInt = #line) throws
    {
        let shapes = try s.sql(store, """
            SELECT DISTINCT typeof(base) || ':' || length(base) FROM _storectl_records
            WHERE entity = 'notes' AND deleted = 0
            """).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(shapes, "blob:\(12 * fields)", "[\(store)] record map bases", file: file, line: line)
        XCTAssertEqual(try s.sql(store, "SELECT value FROM _storectl_meta WHERE key = 'record_map_base'")
            .trimmingCharacters(in: .whitespacesAndNewlines), "hashes", file: file, line: line)
    }

    /// A column dropped on one store keeps its values everywhere: that store's saves carry the value last synced,
    /// which it takes from the cloud's records (its map has only hashes), and an edit there reaches the others.
    func testAColumnDroppedOnOneStoreKeepsItsValuesInTheCloud() throws {
        let s = try synced()
        try assertHashed(s, "b", fields: 3)
        try s.dir.write("0001-drop-body.sql", Self.dropBody)
        try s.run("b", ["migrate", "--sql", "0001-drop-body.sql", "--schema-version", "1"])
        try s.sql("b", "UPDATE notes SET title = 'one by b' WHERE uuid = 'n1'; "
                  + "INSERT INTO notes(uuid, title) VALUES ('n6', 'six by b')")
        try s.run("b", ["sync"])
        try s.run("a", ["sync"])
        let expected = ["n1|one by b|body 1", "n2|note 2|body 2", "n3|note 3|body 3", "n4|note 4|body 4",
                        "n5|note 5|body 5", "n6|six by b|"]
        XCTAssertEqual(try bodies(s, "a"), expected, "a lost bodies to b's saves (b dropped the column)")
        XCTAssertEqual(try cloudNotes(s), expected.map { $0.hasPrefix("n6") ? "n6|six by b|<none>" : $0 })
        XCTAssertEqual(try s.sql("b", "SELECT json_extract(extra, '$.body') FROM _storectl_records r "
                                     + "JOIN notes n ON r.pk = json_array(n.id) WHERE n.uuid = 'n1'")
            .trimmingCharacters(in: .whitespacesAndNewlines), "body 1", "the value travels in extra")
        // An edit of a body on a, then a title on b: both stay.
        try s.sql("a", "UPDATE notes SET body = 'two by a' WHERE uuid = 'n2'")
        try s.run("a", ["sync"])
        try s.run("b", ["sync"])
        try s.sql("b", "UPDATE notes SET title = 'two by b' WHERE uuid = 'n2'")
        try s.run("b", ["sync"])
        try s.run("a", ["sync"])
        XCTAssertEqual(try bodies(s, "a")[1], "n2|two by b|two by a")
        for store in ["a", "b"] { try s.run(store, ["doctor"]) }
    }

    /// A store whose record map holds each row's fields as JSON (made before bases were hashes), with a column
    /// dropped here whose values only the base still holds: the first sync converts the map in place, the dropped
    /// values move into `extra` and keep travelling, nothing unchanged is sent again, and an edit still merges.
    func testARecordMapThatHoldsTheFieldsIsConvertedInPlace() throws {
        let s = try synced()
        try s.dir.write("0001-drop-body.sql", Self.dropBody)
        try s.run("b", ["migrate", "--sql", "0001-drop-body.sql", "--schema-version", "1"])
        // The map as storectl kept it before: the record's fields as the base, no extra, no meta key.
        try s.sql("b", """
            ATTACH '\(s.dir.file("cloud/shared.container"))' AS c;
            UPDATE _storectl_records SET extra = NULL, base = (SELECT fields FROM c.records x
                WHERE x.record_name = _storectl_records.record_name) WHERE deleted = 0;
            DELETE FROM _storectl_meta WHERE key = 'record_map_base';
            """)
        XCTAssertEqual(try s.sql("b", "SELECT count(*) FROM _storectl_records WHERE typeof(base) = 'text'")
            .trimmingCharacters(in: .whitespacesAndNewlines), "5")
        let seqBefore = try s.sqlFile(s.dir.file("cloud/shared.container"), "SELECT max(seq) FROM records")
        try s.run("b", ["sync"])
        try assertHashed(s, "b", fields: 3)  // the records as last synced: uuid, title, body
        XCTAssertEqual(try s.sqlFile(s.dir.file("cloud/shared.container"), "SELECT max(seq) FROM records"), seqBefore,
                       "the conversion sent rows that did not change")
        try s.sql("b", "UPDATE notes SET title = 'three by b' WHERE uuid = 'n3'")
        try s.run("b", ["sync"])
        try s.run("a", ["sync"])
        XCTAssertEqual(try bodies(s, "a"), ["n1|note 1|body 1", "n2|note 2|body 2", "n3|three by b|body 3",
                                            "n4|note 4|body 4", "n5|note 5|body 5"])
        try assertHashed(s, "a", fields: 3)
        for store in ["a", "b"] { try s.run(store, ["doctor"]) }
    }
}
