import StoreBase
import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// Installing tracking: the format tables, adopting databases with data, refusing what cannot be tracked.
final class InstallTests: XCTestCase {
    func testInstallCreatesTheFormatTablesAndMeta() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT); CREATE TABLE tags(name TEXT PRIMARY KEY)")
        let tables = try f.db.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_storectl\\_%' ESCAPE '\\' ORDER BY name")
            .compactMap { $0[0].string }
        XCTAssertEqual(tables, ["_storectl_consumers", "_storectl_context", "_storectl_history", "_storectl_meta",
                                "_storectl_tokens"])
        XCTAssertEqual(try f.tracker.meta(.formatVersion), StoreFormat.version)
        XCTAssertEqual(try f.tracker.meta(.mode), "local")
        XCTAssertEqual(try f.tracker.meta(.nextTx), "1")
        XCTAssertEqual(try f.tracker.meta(.tracked), #"["notes","tags"]"#)
        let id = try f.tracker.storeID()
        XCTAssertNotNil(UUID(uuidString: id))
        XCTAssertEqual(id, id.lowercased())
        XCTAssertEqual(try f.tracker.meta(.schemaHash)?.count, 16)
        XCTAssertNotNil(Int64(try f.tracker.meta(.createdAt) ?? ""))
        XCTAssertNil(try f.tracker.meta(.historyGap))
        XCTAssertEqual(try f.tracker.verify(), .ok)
        XCTAssertEqual(try f.tracker.trackedTables().map(\.name), ["notes", "tags"])
    }

    func testAdoptingADatabaseWithDataRecordsNoHistoryAndIsIdempotent() throws {
        let f = try Fixture("""
            CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT);
            INSERT INTO notes VALUES (1, 'a'), (2, 'b'), (3, 'c');
            """, install: false)
        XCTAssertEqual(try f.tracker.verify(), .notInitialized)
        let first = try f.tracker.install()
        XCTAssertTrue(first.installed)
        XCTAssertEqual(first.tables, ["notes"])
        XCTAssertEqual(try f.count("SELECT count(*) FROM _storectl_history"), 0)
        let hash = try f.tracker.meta(.schemaHash)
        let triggers = try f.db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        try f.db.run("INSERT INTO notes VALUES (4, 'd')")

        let second = try f.tracker.install()
        XCTAssertFalse(second.installed)
        XCTAssertEqual(second.storeID, first.storeID)
        XCTAssertEqual(try f.tracker.meta(.schemaHash), hash)
        XCTAssertEqual(try f.db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"), triggers)
        XCTAssertEqual(try f.count("SELECT count(*) FROM notes"), 4)
        XCTAssertEqual(try f.rows(), ["I notes [4] external nil"])
        // A fresh connection (another process) sees the same store.
        let other = HistoryTracker(db: try Connection(path: f.path))
        XCTAssertEqual(try other.install().installed, false)
        XCTAssertEqual(try other.verify(), .ok)
    }

    func testATrackedTableWithoutAPrimaryKeyIsRefusedByName() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY); CREATE TABLE log(line TEXT)", install: false)
        XCTAssertThrowsError(try f.tracker.install()) { error in
            let e = error as? StoreError
            XCTAssertEqual(e?.exitCode.rawValue, 65)
            XCTAssertEqual(e?.summary, "table 'log' in \(f.path) has no primary key, so its rows cannot be tracked")
            XCTAssertEqual(e?.hint, "add an explicit PRIMARY KEY to 'log', or narrow entities: so that it is not tracked")
        }
        // Nothing was created.
        XCTAssertFalse(try f.db.tableExists("_storectl_meta"))
        XCTAssertEqual(try f.count("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"), 0)
    }

    func testEntitiesNarrowTheTrackedTables() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY); CREATE TABLE log(line TEXT)",
                            options: TrackingOptions(entities: ["notes"]))
        XCTAssertEqual(try f.tracker.meta(.tracked), #"["notes"]"#)
        try f.db.run("INSERT INTO log VALUES ('x')")
        try f.db.run("INSERT INTO notes VALUES (1)")
        XCTAssertEqual(try f.rows(), ["I notes [1] external nil"])
    }

    func testEntitiesNamingAMissingTableAreAConfigError() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY)", options: TrackingOptions(entities: ["note"]),
                            install: false)
        XCTAssertThrowsError(try f.tracker.install()) { error in
            let e = error as? StoreError
            XCTAssertEqual(e?.exitCode.rawValue, 78)
            XCTAssertEqual(e?.summary, "entities: names table 'note', which \(f.path) does not have")
            XCTAssertEqual(e?.hint, "did you mean 'notes'? create the table (e.g. in the schema: file), or remove it from entities:")
        }
    }

    func testTrackingOffIsRefused() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY)", options: TrackingOptions(tracking: false),
                            install: false)
        XCTAssertThrowsError(try f.tracker.install()) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode.rawValue, 78)
            XCTAssertEqual((error as? StoreError)?.summary, "history tracking cannot be turned off")
        }
        XCTAssertThrowsError(try f.tracker.migrate(force: true)) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode.rawValue, 78)
        }
        XCTAssertFalse(try f.db.tableExists("_storectl_meta"))
    }

    func testVirtualAndShadowTablesAreNotTracked() throws {
        let f = try Fixture("""
            CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);
            CREATE VIRTUAL TABLE notes_fts USING fts5(body);
            """)
        XCTAssertEqual(try f.tracker.trackedTables().map(\.name), ["notes"])
        XCTAssertEqual(try f.tracker.verify(), .ok)
    }

    func testTrackedTablesDescribeKeysAndForeignKeys() throws {
        let f = try Fixture("""
            CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT);
            CREATE TABLE note_tags(note_id INTEGER REFERENCES notes(id), tag TEXT, PRIMARY KEY (note_id, tag));
            """)
        let tables = try f.tracker.trackedTables()
        let link = try XCTUnwrap(tables.first { $0.name == "note_tags" })
        XCTAssertEqual(link.primaryKey, ["note_id", "tag"])
        XCTAssertEqual(link.foreignKeys.map(\.parentTable), ["notes"])
        XCTAssertEqual(link.foreignKeys.first?.columns, ["note_id"])
        XCTAssertEqual(link.tombstone, ["note_id", "tag"])
        XCTAssertEqual(tables.first { $0.name == "notes" }?.nonKeyColumns, ["title"])
    }
}
