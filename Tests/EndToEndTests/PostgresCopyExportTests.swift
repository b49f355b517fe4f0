import Foundation
import TestSupport
import XCTest

/// Exports large enough for their batches to go through `COPY`, through the real binary and a real PostgreSQL
/// container: texts that COPY's format escapes, empty strings and NULLs arrive byte for byte, and a batch of
/// updates that meets a change of another device is merged as a batch of arrays would be.
final class PostgresCopyExportTests: XCTestCase {
    /// 2,500 rows: two full batches of 1,000 (through COPY) and one of 500 (as arrays).
    static let rows = 2500

    func project() throws -> E2EProject? {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (see .ci/run)")
            }
            return nil
        }
        let p = try E2EProject(label: "storectl-copy")
        try p.writeSchema("""
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);
            """)
        let container = "iCloud.com.example.copy\(String(UInt64.random(in: 0...UInt64.max), radix: 16))"
        try p.writeConfig(["a", "b"].map { name in
            E2EProject.Store(name, before: ["mode: local", "history:", "  author: app-\(name)"],
                             cloud: E2EProject.Cloud(container: container, url: url,
                                                     account: env["PGUSER"] ?? "postgres", createIfMissing: false))
        })
        try p.run(["--store", "a", "cloud", "init"])
        return p
    }

    /// Every row's uuid and the exact bytes of its title (`quote` tells NULL from '', `hex` shows every byte).
    func rows(_ p: E2EProject, _ store: String) throws -> String {
        try p.sql(store, "SELECT uuid, quote(title), hex(title) FROM notes ORDER BY uuid")
    }

    func testLargeExportsKeepEveryByteAndMergeConflictsInTheBatch() throws {
        guard let p = try project() else { return }
        try p.run(["--store", "a", "init"])
        // Tabs, newlines, carriage returns, backslashes (also `\N`, COPY's NULL), quotes, unicode, '' and NULL.
        try p.sql("a", """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(Self.rows))
            INSERT INTO notes(uuid, title) SELECT printf('u%05d', i), CASE i % 8
                WHEN 0 THEN NULL
                WHEN 1 THEN ''
                WHEN 2 THEN 'tab' || char(9) || 'nl' || char(10) || 'crlf' || char(13, 10) || 'end'
                WHEN 3 THEN 'back\\slash \\N \\\\ \\t "double" ''single'''
                WHEN 4 THEN 'é😀 ' || i
                WHEN 5 THEN char(9) || char(10) || '\\'
                WHEN 6 THEN '{"json":"in a text","n":[1,2]}'
                ELSE 'plain ' || i END
            FROM n
            """)
        let original = try rows(p, "a")
        XCTAssertEqual(try p.sql("a", "SELECT count(*) FROM notes"), "\(Self.rows)\n")
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "init"])
        try p.run(["--store", "b", "mode", "cloud"])
        XCTAssertEqual(try rows(p, "b"), original, "every byte arrived")
        XCTAssertEqual(try p.sql("b", "SELECT count(*), count(title), sum(title = '') FROM notes"),
                       "\(Self.rows)|\(Self.rows - Self.rows / 8)|\((Self.rows + 7) / 8)\n")

        // b changes five rows and syncs; a then changes every other row, those five among them, and syncs (its
        // export: a batch of 1,000 through COPY, then 250).
        try p.sql("b", "UPDATE notes SET title = 'by b' || char(9) || uuid WHERE uuid IN "
            + "('u00002', 'u00004', 'u00010', 'u01500', 'u02400')")
        try p.run(["--store", "b", "sync"])
        try p.sql("a", "UPDATE notes SET title = coalesce(title, 'was null') || char(10) || 'by a \\' "
            + "WHERE id % 2 = 0")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "b", "sync"])
        let a = try rows(p, "a")
        XCTAssertEqual(try rows(p, "b"), a, "both stores converge")
        // The rows only a changed carry a's change; the five conflicts ended the same on both (checked above).
        XCTAssertEqual(try p.sql("a", """
            SELECT count(*), sum(title LIKE '%' || char(10) || 'by a \\') FROM notes
            WHERE id % 2 = 0 AND uuid NOT IN ('u00002', 'u00004', 'u00010', 'u01500', 'u02400')
            """), "\(Self.rows / 2 - 5)|\(Self.rows / 2 - 5)\n")
        XCTAssertEqual(try p.sql("a", "SELECT count(*) FROM notes"), "\(Self.rows)\n")
    }
}
