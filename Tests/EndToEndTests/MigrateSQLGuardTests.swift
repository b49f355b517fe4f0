import Foundation
import TestSupport
import XCTest

/// `storectl migrate --sql` never lets the user's SQL reach storectl's own state, now or later, and races with a
/// move are retries, through the real binary.
final class MigrateSQLGuardTests: XCTestCase {
    /// Two stores in the cloud with notes, tags and settings.
    func synced() throws -> Fleet {
        let s = try Fleet.notes(label: "storectl-migrate-guard")
        try s.run("a", ["mode", "local"])
        var sql = "INSERT INTO tags(name) VALUES ('red'), ('blue');"
        for i in 1...5 { sql += "INSERT INTO notes(uuid, title) VALUES ('n\(i)', 'note \(i)');" }
        sql += "INSERT INTO settings VALUES ('size', '12'), ('limit', '40');"
        try s.sql("a", sql)
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        s.modes = ["a": "cloud", "b": "cloud"]
        return s
    }

    /// Everything in the store file, storectl's tables included.
    func dump(_ s: Fleet, _ store: String) throws -> String { try s.sql(store, ".dump") }

    func cloudCounts(_ s: Fleet) throws -> String {
        try s.sqlFile(s.dir.file("cloud/shared.container"),
                      "SELECT record_type, sum(deleted = 0), sum(deleted = 1) FROM records GROUP BY 1 ORDER BY 1")
    }

    func testTriggersTheFileCreatesNeverWriteStorectlsTables() throws {
        let s = try synced()
        try s.sql("a", "UPDATE notes SET title = 'pending' WHERE uuid = 'n1'")
        let cases: [(file: String, sql: String, object: String)] = [
            ("temp.sql", """
                CREATE TEMP TRIGGER wipe AFTER UPDATE ON main.notes BEGIN
                  DELETE FROM _storectl_history; UPDATE _storectl_meta SET value = 'x' WHERE key = 'store_id';
                END;
                """, "wipe"),
            ("main.sql", """
                CREATE TRIGGER later AFTER INSERT ON tags BEGIN DELETE FROM "_storectl_history"; END;
                """, "later"),
            ("fires.sql", """
                CREATE TEMP TRIGGER now_ AFTER UPDATE ON main.settings BEGIN DELETE FROM _storectl_history; END;
                UPDATE settings SET value = '13' WHERE key = 'size';
                """, "now_"),
            ("view.sql", """
                CREATE VIEW tag_names AS SELECT name FROM tags;
                CREATE TRIGGER tag_names_ins INSTEAD OF INSERT ON tag_names BEGIN
                  UPDATE _STORECTL_META SET value = '0' WHERE key = 'next_tx';
                END;
                """, "tag_names_ins"),
            ("tempview.sql", """
                CREATE TEMP VIEW v AS SELECT 1 AS x;
                CREATE TEMP TRIGGER v_ins INSTEAD OF INSERT ON v BEGIN DELETE FROM _storectl_records; END;
                """, "v_ins"),
            ("name.sql", "CREATE TRIGGER _storectl_notes_extra AFTER INSERT ON notes BEGIN SELECT 1; END;",
             "_storectl_notes_extra"),
        ]
        let history = try s.sql("a", "SELECT count(*) || ' ' || max(seq) FROM _storectl_history")
            .split(separator: " ").map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) }
        XCTAssertEqual(history.count, 2)
        for c in cases {
            let before = try dump(s, "a")
            try s.dir.write(c.file, c.sql)
            let r = try s.run("a", ["migrate", "--sql", c.file], expect: 65)
            XCTAssertTrue(r.stderr.contains(c.object), "\(c.file): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("nothing was changed"), "\(c.file): \(r.stderr)")
            XCTAssertEqual(try dump(s, "a"), before, c.file)
            // What the trigger would have done, had it been kept: history keeps every change it had.
            try s.sql("a", "INSERT INTO tags(name) VALUES ('probe'); DELETE FROM tags WHERE name = 'probe';"
                      + "UPDATE notes SET title = title WHERE uuid = 'n2'")
            XCTAssertEqual(try s.sql("a", "SELECT count(*) FROM _storectl_history WHERE seq <= \(history[1])"),
                           history[0] + "\n", c.file)
        }
        let doctor = try s.run("a", ["doctor"])
        XCTAssertTrue(doctor.stdout.contains("healthy"), "\(doctor)")
        try s.run("a", ["sync"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.noteRows("a"), try s.noteRows("b"))
    }

    /// TEMP objects a file makes for its own use are allowed, and gone when it ends; the file's changes sync.
    func testTempObjectsTheFileUsesAreAllowedAndDropped() throws {
        let s = try synced()
        try s.dir.write("scratch.sql", """
            CREATE TEMP TABLE scratch(key TEXT, value TEXT);
            CREATE TEMP VIEW doubled AS SELECT key, CAST(value AS INTEGER) * 2 AS value FROM settings;
            CREATE TEMP TRIGGER log AFTER UPDATE ON main.settings BEGIN
              INSERT INTO scratch VALUES (NEW.key, NEW.value);
            END;
            UPDATE settings SET value = (SELECT value FROM doubled d WHERE d.key = settings.key);
            """)
        let r = try s.run("a", ["--json", "migrate", "--sql", "scratch.sql"])
        XCTAssertEqual(JSONDoc.get(JSONDoc.parse(r.stdout), "applied") as? Bool, true, r.stdout)
        XCTAssertEqual(try s.sql("a", "SELECT key || '=' || value FROM settings ORDER BY key"), "limit=80\nsize=24\n")
        XCTAssertEqual(try s.sql("a", "SELECT count(*) FROM sqlite_master WHERE name IN ('scratch', 'doubled', 'log')"),
                       "0\n")
        try s.run("a", ["sync"])
        // A file that changed values is a data migration: b takes the zone's values once it has run it too.
        try s.run("b", ["sync"], expect: 75)
        try s.run("b", ["migrate", "--sql", "scratch.sql"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.sql("b", "SELECT key || '=' || value FROM settings ORDER BY key"), "limit=80\nsize=24\n")
    }

    /// A TEMP table or view named like a tracked table hides it from unqualified names: if it outlived the file,
    /// the triggers made again after the file would go to it (and vanish with the connection), losing tracking.
    func testATempObjectShadowingATrackedTableDoesNotOutliveTheFile() throws {
        let s = try synced()
        let triggers = try s.sql("a", "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        try s.dir.write("shadow.sql", """
            CREATE TEMP TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT);
            CREATE TEMP VIEW settings AS SELECT 'k' AS key, 'v' AS value;
            """)
        try s.run("a", ["migrate", "--sql", "shadow.sql"])
        XCTAssertEqual(try s.sql("a", "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name"), triggers)
        let doctor = try s.run("a", ["doctor"])
        XCTAssertTrue(doctor.stdout.contains("healthy"), "\(doctor)")
        try s.sql("a", "UPDATE notes SET title = 'tracked' WHERE uuid = 'n1';"
                  + "UPDATE settings SET value = '7' WHERE key = 'size'")
        try s.run("a", ["sync"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.sql("b", "SELECT title FROM notes WHERE uuid = 'n1'"), "tracked\n")
        XCTAssertEqual(try s.sql("b", "SELECT value FROM settings WHERE key = 'size'"), "7\n")
    }

    /// A column dropped with ALTER TABLE in a file (SQLite refuses it while a trigger names the column): only the
    /// altered table's triggers are made again, so what the file changes elsewhere is recorded by them, and syncs.
    func testAFileDropsAColumnOfASyncedTableAndItsOtherChangesSync() throws {
        let s = try synced()
        try s.dir.write("drop.sql", """
            -- the body goes
            ALTER TABLE notes DROP COLUMN body;
            UPDATE settings SET value = '99' WHERE key = 'size';
            """)
        let r = try s.run("a", ["--json", "migrate", "--sql", "drop.sql"])
        XCTAssertEqual(JSONDoc.get(JSONDoc.parse(r.stdout), "applied") as? Bool, true, r.stdout)
        XCTAssertEqual(try s.sql("a", "SELECT group_concat(name, ',') FROM pragma_table_info('notes')"),
                       "id,uuid,title\n")
        XCTAssertEqual(try s.sql("a", """
            SELECT author || ' ' || op || ' ' || changed FROM _storectl_history WHERE entity = 'settings'
            ORDER BY seq DESC LIMIT 1
            """), "migrate U [\"value\"]\n")
        try s.sql("a", "UPDATE notes SET title = 'after the drop' WHERE uuid = 'n1'")
        try s.run("a", ["sync"])
        try s.run("b", ["sync"], expect: 75)
        try s.run("b", ["migrate", "--sql", "drop.sql"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.sql("b", "SELECT value FROM settings WHERE key = 'size'"), "99\n")
        XCTAssertEqual(try s.sql("b", "SELECT title FROM notes WHERE uuid = 'n1'"), "after the drop\n")
        let doctor = try s.run("a", ["doctor"])
        XCTAssertTrue(doctor.stdout.contains("healthy"), "\(doctor)")
    }

    /// Renaming a synced table, or rebuilding it under a new name, would leave its records live in the cloud and
    /// on the other store: refused before anything changes, with the reason and the fix.
    func testRenamingASyncedTableIsRefusedAndTheOtherStoreKeepsItsRows() throws {
        let s = try synced()
        let cloudBefore = try cloudCounts(s)
        let before = try dump(s, "a")
        let cases = [
            ("rename.sql", "ALTER TABLE settings RENAME TO settings2;"),
            ("copy.sql", """
                CREATE TABLE prefs(key TEXT PRIMARY KEY, value TEXT);
                INSERT INTO prefs SELECT key, value FROM settings;
                DROP TABLE settings;
                """),
        ]
        for (file, sql) in cases {
            try s.dir.write(file, sql)
            let r = try s.run("a", ["migrate", "--sql", file], expect: 65)
            XCTAssertTrue(r.stderr.contains("renames or drops the synced table settings"), "\(file): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("RENAME TO settings"), "the fix\n\(r.stderr)")
            XCTAssertEqual(try dump(s, "a"), before, file)
        }
        try s.run("a", ["sync"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try cloudCounts(s), cloudBefore)
        XCTAssertEqual(try s.noteRows("a"), try s.noteRows("b"))
        XCTAssertEqual(try s.sql("b", "SELECT count(*) FROM settings"), "2\n")
    }

    /// `migrate --sql` started while `migrate --to` holds the store: a retry (75, with a hint), never 65; the
    /// same command again works on the moved store.
    func testAMigrateSQLRacingAMoveIsARetry() throws {
        let s = try synced()
        try s.dir.write("touch.sql", "UPDATE settings SET value = value || '0';")
        // The move holds the write lock for 2 s, then fences the old file: the migration waits, then meets the fence.
        let move = try BackgroundProcess.storectl(["--store", "a", "migrate", "--to", "data/a-moved.sqlite"],
                                                  in: s.dir.path,
                                                  environment: ["STORECTL_FAILPOINT": "move.after-copy:pause=2"])
        let deadline = Date().addingTimeInterval(30)
        while !move.stderr.contains("paused"), Date() < deadline { usleep(50_000) }
        XCTAssertTrue(move.stderr.contains("paused"), move.stderr)
        let r = try s.run("a", ["migrate", "--sql", "touch.sql"], expect: 75)
        XCTAssertTrue(r.stderr.contains("moved"), "\(r)")
        XCTAssertTrue(r.stderr.contains("hint: "), "\(r)")
        while move.isRunning, Date() < deadline { usleep(50_000) }
        XCTAssertTrue(s.config.contains("data/a-moved.sqlite"), s.config)
        try s.run("a", ["migrate", "--sql", "touch.sql"])
        XCTAssertEqual(try s.sqlFile(s.dir.file("data/a-moved.sqlite"),
                                     "SELECT value FROM settings WHERE key = 'size'"), "120\n")
        // A move that holds the lock longer than the busy timeout (5 s): a retry as well, the store untouched.
        let dump = try s.sqlFile(s.dir.file("data/a-moved.sqlite"), ".dump")
        let slow = try BackgroundProcess.storectl(["--store", "a", "migrate", "--to", "data/a-third.sqlite"],
                                                  in: s.dir.path,
                                                  environment: ["STORECTL_FAILPOINT": "move.after-copy:pause=8"])
        while !slow.stderr.contains("paused"), Date() < deadline.addingTimeInterval(30) { usleep(50_000) }
        let busy = try s.run("a", ["migrate", "--sql", "touch.sql"], expect: 75)
        XCTAssertTrue(busy.stderr.contains("hint: "), "\(busy)")
        XCTAssertEqual(try s.sqlFile(s.dir.file("data/a-moved.sqlite"), ".dump"), dump)
        while slow.isRunning, Date() < deadline.addingTimeInterval(60) { usleep(50_000) }
    }

    /// A synced table renamed away while a table of its name is made again, and a table renamed into storectl's
    /// prefix: both refused, the store unchanged.
    func testARenameAwayOrIntoStorectlsNamesIsRefused() throws {
        let s = try synced()
        let dump = try s.sql("a", ".dump")
        let cases: [(String, String, String)] = [
            ("away.sql", "ALTER TABLE settings RENAME TO settings_old; CREATE TABLE settings(key TEXT PRIMARY KEY, "
                + "value TEXT);", "renames the synced table settings"),
            ("prefix.sql", "CREATE TABLE audit(x); ALTER TABLE audit RENAME TO _storectl_switch_records;",
             "prefix storectl keeps"),
        ]
        for (file, sql, expected) in cases {
            try s.dir.write(file, sql)
            let r = try s.run("a", ["migrate", "--sql", file], expect: 65)
            XCTAssertTrue(r.stderr.contains(expected), "\(file): \(r.stderr)")
            XCTAssertEqual(try s.sql("a", ".dump"), dump, "\(file) changed the store")
        }
        // The rebuild the README shows still runs.
        try s.dir.write("rebuild.sql", """
            CREATE TABLE settings_new(key TEXT PRIMARY KEY, value TEXT);
            INSERT INTO settings_new SELECT key, value FROM settings;
            DROP TABLE settings;
            ALTER TABLE settings_new RENAME TO settings;
            """)
        try s.run("a", ["migrate", "--sql", "rebuild.sql"])
    }
}
