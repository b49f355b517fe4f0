import Foundation
import TestSupport
import XCTest

/// `storectl migrate --sql`: schema changes ALTER TABLE cannot make, through the real binary.
final class MigrateSQLTests: XCTestCase {
    /// Two stores in the cloud with notes, tags, links and settings; `settings.value` holds numbers as text.
    func synced() throws -> Fleet {
        let s = try Fleet.notes(label: "storectl-migrate-sql")
        try s.run("a", ["mode", "local"])
        var sql = "INSERT INTO tags(name) VALUES ('red'), ('blue');"
        for i in 1...30 { sql += "INSERT INTO notes(uuid, title) VALUES ('n\(i)', 'note \(i)');" }
        sql += """
            INSERT INTO note_tags SELECT n.id, t.id FROM notes n, tags t WHERE n.id % 3 = 0 AND t.name = 'red';
            INSERT INTO settings VALUES ('size', '12'), ('limit', '40'), ('ratio', '3'), ('name', 'x');
            """
        try s.sql("a", sql)
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        s.modes = ["a": "cloud", "b": "cloud"]
        return s
    }

    /// Record name of each row by natural value: what other devices know a row by.
    func names(_ s: Fleet, _ store: String) throws -> String {
        try s.sql(store, """
            SELECT 'note|' || n.uuid || '|' || r.record_name FROM notes n JOIN _storectl_records r
              ON r.entity = 'notes' AND r.pk = json_array(n.id) ORDER BY n.uuid;
            SELECT 'setting|' || t.key || '|' || r.record_name FROM settings t JOIN _storectl_records r
              ON r.entity = 'settings' AND r.pk = json_array(t.key) ORDER BY t.key;
            """)
    }

    func cloudCounts(_ s: Fleet) throws -> String {
        try s.sqlFile(s.dir.file("cloud/shared.container"),
                      "SELECT record_type, sum(deleted = 0), sum(deleted = 1) FROM records GROUP BY 1 ORDER BY 1")
    }

    /// The documented rebuild (a new table, a copy, a drop, a rename), changing a column's type and, for notes,
    /// giving every row a new rowid: no row is deleted or re-created in the cloud, every record keeps its name,
    /// the links still join the same notes, and the changed values arrive as updates.
    func testATableRebuildKeepsRecordNamesAndNoMassDeleteReachesTheCloud() throws {
        let s = try synced()
        let namesBefore = try names(s, "a")
        let cloudBefore = try cloudCounts(s)
        try s.dir.write("0001-rebuild.sql", """
            -- settings.value becomes an INTEGER (numbers stored as numbers)
            CREATE TABLE settings_new(key TEXT PRIMARY KEY, value INTEGER);
            INSERT INTO settings_new SELECT key, CASE WHEN value GLOB '[0-9]*' THEN CAST(value AS INTEGER) ELSE value END
              FROM settings;
            DROP TABLE settings;
            ALTER TABLE settings_new RENAME TO settings;
            -- notes are copied in another order: every rowid changes; the links follow them
            CREATE TABLE notes_new(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                   body TEXT NOT NULL DEFAULT '');
            INSERT INTO notes_new(uuid, title, body) SELECT uuid, title, body FROM notes ORDER BY id DESC;
            UPDATE note_tags SET note_id = (SELECT n.id FROM notes_new n JOIN notes o ON o.uuid = n.uuid
                                            WHERE o.id = note_tags.note_id);
            DROP TABLE notes;
            ALTER TABLE notes_new RENAME TO notes;
            """)
        let r = try s.run("a", ["--json", "migrate", "--sql", "0001-rebuild.sql", "--schema-version", "1"])
        let doc = JSONDoc.parse(r.stdout)
        XCTAssertEqual(JSONDoc.int(doc, "version"), 1)
        XCTAssertEqual(JSONDoc.get(doc, "applied") as? Bool, true, r.stdout)
        XCTAssertEqual(JSONDoc.int(doc, "previous_version"), 0)
        XCTAssertEqual(JSONDoc.int(doc, "kept_record_names"), 30 + 10, "every note and every link moved\n\(r.stdout)")
        XCTAssertEqual(JSONDoc.int(doc, "removed_rows"), 0, r.stdout)
        XCTAssertEqual(JSONDoc.int(doc, "new_rows"), 0, r.stdout)
        XCTAssertEqual(try names(s, "a"), namesBefore)
        XCTAssertEqual(try s.sql("a", "SELECT value FROM _storectl_meta WHERE key = 'schema_version'"), "1\n")
        XCTAssertEqual(try s.sql("a", "SELECT typeof(value) FROM settings WHERE key = 'size'"), "integer\n")
        XCTAssertEqual(try s.sql("a", "PRAGMA foreign_key_check"), "")
        try s.run("a", ["status"])
        // The export: the changed values as updates, no deletion at all.
        let sync = try s.run("a", ["--json", "sync"])
        XCTAssertEqual(JSONDoc.int(JSONDoc.parse(sync.stdout), "exported", "deleted"), 0, sync.stdout)
        XCTAssertEqual(JSONDoc.int(JSONDoc.parse(sync.stdout), "exported", "saved"), 3, "the three numbers\n\(sync.stdout)")
        XCTAssertEqual(try cloudCounts(s), cloudBefore)
        try s.run("a", ["verify"])

        // b runs the same file, then syncs: the same rows, the same links, the same names, nothing deleted.
        try s.run("b", ["migrate", "--sql", "0001-rebuild.sql", "--schema-version", "1"])
        for store in ["b", "a", "b"] { try s.run(store, ["sync"]) }
        XCTAssertEqual(try s.noteRows("a"), try s.noteRows("b"))
        XCTAssertEqual(try s.cloudNoteRows(), try s.noteRows("a"))
        XCTAssertEqual(try cloudCounts(s), cloudBefore)
        XCTAssertEqual(try s.sql("b", "SELECT value || typeof(value) FROM settings WHERE key = 'limit'"), "40integer\n")
        try s.run("b", ["verify"])
        // The same file again is nothing to do.
        let again = try s.run("a", ["migrate", "--sql", "0001-rebuild.sql", "--schema-version", "1"])
        XCTAssertTrue(again.stdout.contains("already"), again.stdout)
        // A new row after the rebuild syncs like any other.
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n31', 'after the rebuild')")
        try s.run("a", ["sync"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.sql("b", "SELECT title FROM notes WHERE uuid = 'n31'"), "after the rebuild\n")
    }

    /// A row the file deletes is exported as a deletion; a row it adds, as a new record; a row it edits in
    /// place (a changed value, same key) keeps its name.
    func testRowsTheFileDeletesAddsOrEditsSyncAsSuch() throws {
        let s = try synced()
        try s.dir.write("edit.sql", """
            CREATE TABLE settings_new(key TEXT PRIMARY KEY, value TEXT);
            INSERT INTO settings_new SELECT key, CASE key WHEN 'ratio' THEN 'three' ELSE value END FROM settings
              WHERE key <> 'name';
            INSERT INTO settings_new VALUES ('added', 'by the file');
            DROP TABLE settings;
            ALTER TABLE settings_new RENAME TO settings;
            """)
        let r = try s.run("a", ["--json", "migrate", "--sql", "edit.sql"])
        let doc = JSONDoc.parse(r.stdout)
        XCTAssertEqual(JSONDoc.int(doc, "removed_rows"), 1, r.stdout)
        XCTAssertEqual(JSONDoc.int(doc, "new_rows"), 1, r.stdout)
        XCTAssertEqual(JSONDoc.int(doc, "changed_rows"), 1, r.stdout)
        XCTAssertEqual(JSONDoc.int(doc, "version"), 1, "no --schema-version: one more than before")
        try s.run("a", ["sync"])
        // The zone is at version 1 now: b waits until it runs the same file, then takes the zone's rows.
        try s.run("b", ["sync"], expect: 75)
        try s.run("b", ["migrate", "--sql", "edit.sql"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.sql("b", "SELECT key || '=' || value FROM settings ORDER BY key"),
                       "added=by the file\nlimit=40\nratio=three\nsize=12\n")
        try s.run("a", ["sync"])
        try s.run("a", ["verify"])
        try s.run("b", ["verify"])
        XCTAssertEqual(try s.cloudNoteRows(), try s.noteRows("a"))
    }

    func testStatementsTheFileMayNotRunAreRefusedAndNothingChanges() throws {
        let s = try synced()
        let before = try s.noteRows("a")
        let schema = try s.sql("a", "SELECT group_concat(sql, ';') FROM sqlite_master")
        let cases: [(String, String, String)] = [
            ("tx.sql", "BEGIN; UPDATE settings SET value = 'x'; COMMIT;", "one transaction of its own"),
            ("own.sql", "UPDATE settings SET value = 'x'; DELETE FROM _storectl_records;", "storectl's own table"),
            ("ownddl.sql", "DROP TABLE _storectl_history;", "storectl's own"),
            ("attach.sql", "ATTACH DATABASE 'other.db' AS other;", "attaches"),
            ("pragma.sql", "PRAGMA foreign_keys = ON; UPDATE settings SET value = 'x';", "PRAGMA foreign_keys"),
            ("broken.sql", "UPDATE settings SET value = 'x'; UPDATE nope SET a = 1;", "no such table: nope"),
            ("fk.sql", "DELETE FROM notes WHERE id = 3;", "foreign key violation"),
        ]
        for (file, sql, message) in cases {
            try s.dir.write(file, sql)
            let r = try s.run("a", ["migrate", "--sql", file], expect: 65)
            XCTAssertTrue(r.stderr.contains(message), "\(file): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("nothing was changed"), "\(file): \(r.stderr)")
            XCTAssertEqual(try s.noteRows("a"), before, file)
            XCTAssertEqual(try s.sql("a", "SELECT group_concat(sql, ';') FROM sqlite_master"), schema, file)
            XCTAssertEqual(try s.sql("a", "SELECT count(*) FROM _storectl_meta WHERE key = 'schema_version'"), "0\n")
        }
        try s.run("a", ["migrate", "--sql", "missing.sql"], expect: 66)
        try s.run("a", ["migrate", "--sql", "x.sql", "--to", "y.sqlite"], expect: 64)
        try s.run("a", ["migrate", "--schema-version", "2"], expect: 64)
        try s.run("a", ["sync"])
        try s.run("a", ["verify"])
    }

    func testAKillBeforeTheCommitChangesNothing() throws {
        let s = try synced()
        let before = try s.noteRows("a")
        let schema = try s.sql("a", "SELECT group_concat(sql, ';') FROM sqlite_master")
        try s.dir.write("0001.sql", """
            CREATE TABLE settings_new(key TEXT PRIMARY KEY, value INTEGER);
            INSERT INTO settings_new SELECT key, value FROM settings;
            DROP TABLE settings;
            ALTER TABLE settings_new RENAME TO settings;
            """)
        try s.run("a", ["migrate", "--sql", "0001.sql"], env: ["STORECTL_FAILPOINT": "schema.before-commit"],
                  expect: 137)
        XCTAssertEqual(try s.noteRows("a"), before)
        XCTAssertEqual(try s.sql("a", "SELECT group_concat(sql, ';') FROM sqlite_master"), schema)
        XCTAssertEqual(try s.integrity().values.filter { $0 != "ok" }, [])
        try s.run("a", ["sync"])
        try s.run("a", ["migrate", "--sql", "0001.sql"])
        try s.run("a", ["sync"])
        try s.run("a", ["verify"])
    }
}
