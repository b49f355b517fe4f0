import StoreBase
import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// Schema drift is detected, `migrate` repairs it without losing history, and lost tracking is refused.
final class DriftTests: XCTestCase {
    private func makeStore() throws -> Fixture {
        let f = try Fixture("""
            CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT, body TEXT);
            CREATE TABLE tags(name TEXT PRIMARY KEY, color TEXT);
            """)
        try f.tracker.write {
            try f.db.run("INSERT INTO notes VALUES (1, 'a', 'x')")
            try f.db.run("INSERT INTO tags VALUES ('red', '#f00')")
        }
        return f
    }

    /// Migrates, then checks that every history row from before is still there and that tracking works again.
    private func assertMigrateRepairs(_ f: Fixture, _ expectedDrift: [String], file: StaticString = #filePath,
                                      line: UInt = #line) throws
    {
        let before = try f.db.query("SELECT * FROM _storectl_history ORDER BY seq")
        XCTAssertEqual(try f.tracker.verify(), .drift(expectedDrift), file: file, line: line)
        XCTAssertThrowsError(try f.tracker.requireTracking(), file: file, line: line) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode.rawValue, 78, file: file, line: line)
        }
        let report = try f.tracker.migrate()
        XCTAssertTrue(report.regenerated, file: file, line: line)
        XCTAssertEqual(report.repaired, expectedDrift, file: file, line: line)
        XCTAssertNil(report.historyGap, file: file, line: line)
        XCTAssertEqual(try f.tracker.verify(), .ok, file: file, line: line)
        XCTAssertNoThrow(try f.tracker.requireTracking(), file: file, line: line)
        let after = try f.db.query("SELECT * FROM _storectl_history ORDER BY seq")
        XCTAssertEqual(Array(after.prefix(before.count)), before, "history was lost", file: file, line: line)
        XCTAssertNil(try f.tracker.meta(.historyGap), file: file, line: line)
        // A second migrate has nothing to do.
        XCTAssertFalse(try f.tracker.migrate().regenerated, file: file, line: line)
    }

    func testColumnAdded() throws {
        let f = try makeStore()
        try f.db.execute("ALTER TABLE notes ADD COLUMN pinned INTEGER")
        try f.db.run("UPDATE notes SET pinned = 1")  // the old trigger does not know pinned: nothing recorded
        try assertMigrateRepairs(f, [#"table "notes": column "pinned" added"#])
        try f.db.run("UPDATE notes SET pinned = 2")
        XCTAssertEqual(try f.tracker.changes().last?.changed, ["pinned"])
    }

    func testColumnRenamed() throws {
        let f = try makeStore()
        try f.db.execute("ALTER TABLE notes RENAME COLUMN body TO text")
        try f.db.run("UPDATE notes SET text = 'y'")  // SQLite rewrote the trigger: still recorded
        try assertMigrateRepairs(f, [#"table "notes": column "body" renamed to "text""#])
        try f.db.run("UPDATE notes SET text = 'z'")
        XCTAssertEqual(try f.tracker.changes().last?.changed, ["text"])
        XCTAssertEqual(try f.count("SELECT count(*) FROM _storectl_history WHERE op = 'U'"), 2)
    }

    func testTableAddedAndDropped() throws {
        let f = try makeStore()
        try f.db.execute("CREATE TABLE folders(id INTEGER PRIMARY KEY, name TEXT)")
        try assertMigrateRepairs(f, [#"table "folders" added"#])
        try f.db.run("INSERT INTO folders VALUES (1, 'inbox')")
        XCTAssertEqual(try f.tracker.changes().last?.entity, "folders")

        try f.db.execute("DROP TABLE tags")
        try assertMigrateRepairs(f, [#"table "tags" dropped"#])
        XCTAssertEqual(try f.tracker.meta(.tracked), #"["folders","notes"]"#)
    }

    func testAnAddedTableWithoutAPrimaryKeyIsDriftThatMigrateRefusesByName() throws {
        let f = try makeStore()
        try f.db.execute("CREATE TABLE log(line TEXT)")
        XCTAssertEqual(try f.tracker.verify(), .drift([#"table "log" added"#]))
        XCTAssertThrowsError(try f.tracker.migrate()) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode.rawValue, 65)
            XCTAssertEqual((error as? StoreError)?.summary,
                           "table 'log' in \(f.path) has no primary key, so its rows cannot be tracked")
        }
    }

    func testColumnDroppedByRebuildingTheTableNeedsForceAndRecordsAGap() throws {
        let f = try makeStore()
        // SQLite refuses DROP COLUMN while a trigger names the column, so the table is rebuilt, which drops the
        // triggers: changes made until the triggers are back are not recorded, and that is a gap.
        XCTAssertThrowsError(try f.db.execute("ALTER TABLE notes DROP COLUMN body"))
        try f.db.execute("""
            BEGIN;
            CREATE TABLE notes_new(id INTEGER PRIMARY KEY, title TEXT);
            INSERT INTO notes_new SELECT id, title FROM notes;
            DROP TABLE notes;
            ALTER TABLE notes_new RENAME TO notes;
            COMMIT;
            """)
        try f.db.run("INSERT INTO notes VALUES (2, 'lost')")
        let report = try f.tracker.inspect()
        XCTAssertEqual(report.state, .triggersMissing(["notes"]))
        XCTAssertEqual(report.drift, [#"table "notes": column "body" dropped"#])
        XCTAssertThrowsError(try f.tracker.migrate()) { error in
            let e = error as? StoreError
            XCTAssertEqual(e?.exitCode.rawValue, 78)
            XCTAssertEqual(e?.summary, "history tracking is lost in \(f.path): the triggers of 'notes' are missing")
        }
        XCTAssertThrowsError(try f.tracker.install()) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode.rawValue, 78)
        }
        let historyBefore = try f.db.query("SELECT * FROM _storectl_history ORDER BY seq")
        let forced = try f.tracker.migrate(force: true)
        XCTAssertEqual(forced.historyGap, 2)
        XCTAssertEqual(forced.repaired, [#"table "notes": column "body" dropped"#,
                                         #"triggers of table "notes" reinstalled"#])
        XCTAssertEqual(try f.tracker.meta(.historyGap), "2")
        XCTAssertEqual(try f.tracker.inspect().historyGap, 2)
        XCTAssertEqual(try f.tracker.verify(), .ok)
        XCTAssertEqual(try f.db.query("SELECT * FROM _storectl_history ORDER BY seq"), historyBefore)
        try f.db.run("UPDATE notes SET title = 'b' WHERE id = 1")
        XCTAssertEqual(try f.tracker.changes().last?.changed, ["title"])
    }

    func testTriggersDroppedByHandAreLostTrackingRefusedWithTheReason() throws {
        let f = try makeStore()
        try f.db.execute(#"DROP TRIGGER "_storectl_tags_del""#)
        XCTAssertEqual(try f.tracker.verify(), .triggersMissing(["tags"]))
        XCTAssertEqual(TrackingState.triggersMissing(["tags"]).reason,
                       "history tracking is lost: the triggers of 'tags' are missing, so changes to it may not have been recorded")
        XCTAssertThrowsError(try f.tracker.requireTracking()) { error in
            let e = error as? StoreError
            XCTAssertEqual(e?.exitCode.rawValue, 78)
            XCTAssertEqual(e?.description, """
                error: history tracking is lost in \(f.path): the triggers of 'tags' are missing
                  changes made to this table while the triggers were missing were not recorded
                hint: run 'storectl migrate --force' to reinstall them; it records a history gap in the store meta, \
                so that the next cloud enable re-baselines instead of missing those changes
                """)
        }
        let report = try f.tracker.migrate(force: true)
        XCTAssertEqual(report.before, .triggersMissing(["tags"]))
        XCTAssertEqual(try f.tracker.meta(.historyGap), "2")
        XCTAssertEqual(try f.tracker.verify(), .ok)
    }

    func testATriggerEditedByHandIsDrift() throws {
        let f = try makeStore()
        try f.db.execute("""
            DROP TRIGGER "_storectl_tags_ins";
            CREATE TRIGGER "_storectl_tags_ins" AFTER INSERT ON tags BEGIN SELECT 1; END;
            """)
        XCTAssertEqual(try f.tracker.verify(), .drift([#"trigger "_storectl_tags_ins" differs from the one storectl generates"#]))
        try f.tracker.migrate()
        try f.db.run("INSERT INTO tags VALUES ('blue', '#00f')")
        XCTAssertEqual(try f.tracker.changes().last?.pk, #"["blue"]"#)
    }

    func testTheSchemaHashIsStableAndCoversTheUserTables() throws {
        let a = try makeStore()
        let b = try makeStore()
        XCTAssertEqual(try a.tracker.meta(.schemaHash), try b.tracker.meta(.schemaHash))
        // An untracked table (entities narrow the set) still changes the hash: adding one is drift.
        let c = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY)", options: TrackingOptions(entities: ["notes"]))
        try c.db.execute("CREATE TABLE scratch(x)")
        XCTAssertEqual(try c.tracker.verify(), .drift([#"table "scratch" added (not tracked)"#]))
        XCTAssertEqual(try c.tracker.migrate().tables, ["notes"])
        XCTAssertEqual(try c.tracker.verify(), .ok)
    }

    func testMigrateRegeneratesInOneTransaction() throws {
        let f = try makeStore()
        try f.db.execute("ALTER TABLE notes ADD COLUMN pinned INTEGER")
        // Inside an outer transaction that rolls back, nothing of the migration stays.
        struct Stop: Error {}
        let triggers = try f.db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        XCTAssertThrowsError(try f.db.transaction {
            try f.tracker.migrate()
            throw Stop()
        })
        XCTAssertEqual(try f.db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"), triggers)
        XCTAssertEqual(try f.tracker.verify(), .drift([#"table "notes": column "pinned" added"#]))
    }
}
