import Foundation
import StoreSQLite
import TestSupport
import XCTest

/// The checks the resilience tests rely on can fail: row dumps tell rowid keys from real ones, keep every byte,
/// and a diff tells lost rows from duplicated and resurrected ones.
final class FleetHarnessTests: XCTestCase {
    func testDumpLeavesOutRowidKeysOnlyAndKeepsEveryByte() throws {
        let dir = try TempDirectory("storectl-harness")
        let path = dir.file("s.sqlite")
        let db = try Connection(path: path, foreignKeys: false)
        try db.execute("""
            CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT);
            CREATE TABLE ranks(id INTEGER PRIMARY KEY DESC, label TEXT);
            CREATE TABLE words(w TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID;
            CREATE TABLE links(note INTEGER REFERENCES notes(id), label TEXT, PRIMARY KEY (note, label));
            CREATE TABLE _storectl_meta(key TEXT PRIMARY KEY, value TEXT);
            INSERT INTO notes(id, title) VALUES (41, CAST(X'610062' AS TEXT));
            INSERT INTO ranks VALUES (7, 'seven');
            INSERT INTO words VALUES ('w', 3);
            INSERT INTO links VALUES (41, 'x'), (99, 'dangling');
            INSERT INTO _storectl_meta VALUES ('k', 'v');
            """)
        try db.run("INSERT INTO words VALUES ('r', ?)", [Value.real(0.30000000000000004)])
        let rows = try StoreDump.rows(path: path)
        XCTAssertEqual(rows, [
            "links|label=t:'dangling'|note=->notes{dangling i:99}",
            "links|label=t:'x'|note=->notes{title=t:x'610062'}",
            "notes|title=t:x'610062'",
            "ranks|id=i:7|label=t:'seven'",
            "words|n=i:3|w=t:'w'",
            "words|n=r:0.30000000000000004|w=t:'r'",
        ])
    }

    func testDiffTellsLostDuplicatedAndResurrectedRows() {
        let diff = RowDiff(expected: ["a", "b", "c"], actual: ["a", "a", "c", "z"])
        XCTAssertEqual(diff.lost, ["b"])
        XCTAssertEqual(diff.duplicated, ["a"])
        XCTAssertEqual(diff.unexpected, ["z"])
        XCTAssertFalse(diff.isEmpty)
        XCTAssertTrue(RowDiff(expected: ["a", "b"], actual: ["b", "a"]).isEmpty)
    }

    func testJSONLookupReadsEitherKeyStyle() {
        let doc = JSONDoc.parse(#"{"pendingExport": 3, "tokens": {"server_token": "x"}, "list": [{"a_b": 1}]}"#)
        XCTAssertEqual(JSONDoc.int(doc, "pending_export"), 3)
        XCTAssertEqual(JSONDoc.get(doc, "tokens", "serverToken") as? String, "x")
        XCTAssertEqual(JSONDoc.int(doc, "list", "0", "aB"), 1)
    }
}
