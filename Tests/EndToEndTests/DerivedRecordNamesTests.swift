import Foundation
import StoreSQLite
import TestSupport
import XCTest

/// The record map keeps a record's name only when it is not `entity:pk` (store format 6): a UUID-keyed row's entry
/// no longer holds its key again as a name, in the table and in the name index. Every store names every record as
/// before, an older map is read as it is by a command that does not write and rebuilt by the upgrade, and a name
/// that no longer matches its row's key is kept, so that a new row at the old key gets a record of its own.
final class DerivedRecordNamesTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(uuid TEXT PRIMARY KEY, title TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
        CREATE TABLE IF NOT EXISTS note_tags(id INTEGER PRIMARY KEY,
            note TEXT NOT NULL REFERENCES notes(uuid) ON DELETE CASCADE,
            tag INTEGER NOT NULL REFERENCES tags(id) ON DELETE CASCADE);
        """

    func synced(_ backend: FleetBackend) throws -> Fleet {
        let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-names")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            INSERT INTO notes VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three');
            INSERT INTO tags(id, name) VALUES (1, 'red');
            INSERT INTO note_tags(note, tag) VALUES ('n1', 1), ('n2', 1);
            """)
        try f.sql("b", "INSERT INTO notes VALUES ('b1', 'from b')")
        try f.syncRounds(2, ["a", "b"])
        return f
    }

    /// Each entry of a store's map: table, record name, and whether the name is derived (not kept).
    func entries(_ f: Fleet, _ store: String) throws -> [String] {
        try f.sql(store, """
            SELECT entity || ' ' || record_name || ' ' || CASE WHEN stored_name IS NULL THEN 'derived' ELSE 'kept' END
            FROM _storectl_records WHERE deleted = 0 ORDER BY 1
            """).split(separator: "\n").map(String.init)
    }

    /// The store's live record names are the cloud's, none twice; natural-keyed rows' names are derived, the
    /// others kept.
    func assertNamedAsTheCloud(_ f: Fleet, _ store: String, _ what: String, file: StaticString = #filePath,
                               line: UInt = #line) throws
    {
        let cloud = try f.cloudRecords().filter { !$0.deleted }.map(\.recordName).sorted()
        let map = try entries(f, store)
        XCTAssertEqual(map.map { $0.split(separator: " ")[1] }.map(String.init).sorted(), cloud,
                       "[\(what)] \(store)'s record map against the cloud", file: file, line: line)
        for entry in map {
            let parts = entry.split(separator: " ")
            XCTAssertEqual(parts[2], parts[0] == "notes" ? "derived" : "kept", "[\(what)] \(store): \(entry)",
                           file: file, line: line)
        }
        XCTAssertEqual(try f.sql(store, "SELECT count(*) - count(DISTINCT record_name) FROM _storectl_records"), "0\n",
                       "[\(what)] \(store) holds a name twice", file: file, line: line)
    }

    /// Every store holds `notes` (uuid=title lines, when given), is named as the cloud and is healthy.
    func assertSettled(_ f: Fleet, notes: String? = nil, _ what: String, file: StaticString = #filePath,
                       line: UInt = #line) throws
    {
        for s in f.stores {
            if let notes {
                XCTAssertEqual(try f.sql(s, "SELECT uuid || '=' || title FROM notes ORDER BY uuid"), notes,
                               "[\(what)] \(s)", file: file, line: line)
            }
            try assertNamedAsTheCloud(f, s, what, file: file, line: line)
            try f.assertHealthy(s, what, file: file, line: line)
        }
    }

    func namesAsTheCloud(_ backend: FleetBackend) throws {
        let f = try synced(backend)
        try assertSettled(f, "\(backend)")
        XCTAssertEqual(try f.rows("a"), try f.rows("b"))
        let a = try entries(f, "a")
        XCTAssertTrue(a.contains("notes notes:[\"n1\"] derived"), a.joined(separator: "\n"))
    }

    func testANaturalKeysNameIsDerivedAndEveryStoreNamesItAsTheCloudFile() throws {
        try namesAsTheCloud(.file)
    }

    func testANaturalKeysNameIsDerivedAndEveryStoreNamesItAsTheCloudPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try namesAsTheCloud(pg)
    }

    /// A note's key changes here and a new note takes the old key before the next sync: the two are two records on
    /// every store, nothing is lost or doubled.
    func testAKeyChangedHereAndTakenAgainIsTwoRecordsFile() throws {
        let f = try synced(.file)
        try f.sql("a", "UPDATE notes SET uuid = 'n9' WHERE uuid = 'n3'; INSERT INTO notes VALUES ('n3', 'again');")
        XCTAssertEqual(try f.sql("a", "SELECT count(*) - count(DISTINCT record_name) FROM _storectl_records"), "0\n")
        try f.syncRounds(2, ["a", "b"])
        try assertSettled(f, notes: "b1=from b\nn1=one\nn2=two\nn3=again\nn9=three\n", "a key changed and taken again")
        // A key changed again on the other store, to one the map of this store named once.
        try f.sql("b", "UPDATE notes SET uuid = 'n4' WHERE uuid = 'n9'")
        try f.syncRounds(2, ["b", "a"])
        try assertSettled(f, notes: "b1=from b\nn1=one\nn2=two\nn3=again\nn4=three\n", "a key changed on the other store")
    }

    /// A store whose record map keeps every name (sync tables version 2, store format 5): `doctor` reads it
    /// without writing, the next sync rebuilds it with the same names, and it keeps syncing.
    func testAnOlderRecordMapIsReadAsItIsAndRebuiltByTheUpgradeFile() throws {
        let f = try synced(.file)
        let before = try f.sql("a", "SELECT entity || ' ' || pk || ' ' || record_name || ' ' || coalesce(change_tag, '-') "
                                  + "|| ' ' || hex(base) || ' ' || deleted FROM _storectl_records ORDER BY 1")
        try f.sql("a", """
            BEGIN;
            CREATE TABLE old(entity TEXT NOT NULL, pk TEXT NOT NULL, record_name TEXT NOT NULL, change_tag TEXT,
                base TEXT, deleted INTEGER NOT NULL DEFAULT 0, extra TEXT, PRIMARY KEY (entity, pk)) WITHOUT ROWID;
            INSERT INTO old SELECT entity, pk, record_name, change_tag, base, deleted, extra FROM _storectl_records;
            DROP TABLE _storectl_records;
            ALTER TABLE old RENAME TO _storectl_records;
            CREATE UNIQUE INDEX _storectl_records_name ON _storectl_records(record_name);
            CREATE INDEX _storectl_records_extra ON _storectl_records(entity) WHERE extra IS NOT NULL;
            UPDATE _storectl_meta SET value = '2' WHERE key = 'sync_tables';
            COMMIT;
            """)
        _ = try f.putBackStoreFormat("a", 5)
        // An app's own view and trigger that read the map keep working through the upgrade.
        try f.sql("a", """
            CREATE VIEW note_names AS SELECT n.uuid, r.record_name FROM notes n
                JOIN _storectl_records r ON r.entity = 'notes' AND r.pk = json_array(n.uuid);
            CREATE TRIGGER notes_mapped AFTER UPDATE ON notes BEGIN
                SELECT RAISE(ABORT, 'the record map is empty') WHERE (SELECT count(*) FROM _storectl_records) = 0;
            END;
            """)
        let (doctor, healthy) = try f.doctor("a")
        XCTAssertTrue(healthy, "doctor of a format-5 store\n\(doctor)")
        XCTAssertEqual(try f.sql("a", "SELECT value FROM _storectl_meta WHERE key = 'format_version'"), "5\n",
                       "a command that does not write upgraded the store")
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM pragma_table_xinfo('_storectl_records') "
                                      + "WHERE name = 'stored_name'"), "0\n")

        try f.sql("b", "UPDATE notes SET title = 'one, from b' WHERE uuid = 'n1'")
        try f.run("b", ["sync"])
        let sync = try f.run("a", ["sync"])
        XCTAssertTrue((sync.stdout + sync.stderr).contains("from store format 5 to 6"), "\(sync)")
        XCTAssertEqual(try f.sql("a", "SELECT title FROM notes WHERE uuid = 'n1'"), "one, from b\n")
        let after = try f.sql("a", "SELECT entity || ' ' || pk || ' ' || record_name || ' ' || coalesce(change_tag, '-') "
                                 + "|| ' ' || hex(base) || ' ' || deleted FROM _storectl_records WHERE NOT "
                                 + "(entity = 'notes' AND pk = '[\"n1\"]') ORDER BY 1")
        XCTAssertEqual(after, before.split(separator: "\n").filter { !$0.hasPrefix("notes [\"n1\"]") }
            .map { $0 + "\n" }.joined(), "the names, tags and bases of the rebuilt map")
        try assertNamedAsTheCloud(f, "a", "after the upgrade")
        XCTAssertEqual(try f.sql("a", "SELECT record_name FROM note_names WHERE uuid = 'n2'"), "notes:[\"n2\"]\n")
        try f.sql("a", "UPDATE notes SET title = 'two, edited' WHERE uuid = 'n2'")
        XCTAssertEqual(try f.sql("a", "SELECT title FROM notes WHERE uuid = 'n2'"), "two, edited\n")
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%before_v3%'"), "0\n")
        try f.sql("a", "INSERT INTO notes VALUES ('n5', 'after the upgrade'); DELETE FROM notes WHERE uuid = 'n3';")
        try f.syncRounds(2, ["a", "b"])
        XCTAssertEqual(try f.rows("a"), try f.rows("b"))
        try assertSettled(f, "after the upgrade and a sync")
    }

    /// A store of a format newer than this storectl's is refused by every command, read or write, and not changed.
    func testAStoreOfANewerFormatIsRefusedByEveryCommandUnchangedFile() throws {
        let f = try synced(.file)
        try f.sql("a", "INSERT INTO notes VALUES ('n8', 'not sent'); UPDATE _storectl_meta SET value = '7' WHERE key = 'format_version';")
        let dump = "SELECT (SELECT group_concat(key || '=' || value) FROM _storectl_meta), "
            + "(SELECT group_concat(uuid || title) FROM notes), (SELECT count(*) FROM _storectl_history), "
            + "(SELECT group_concat(record_name || coalesce(change_tag, '-')) FROM _storectl_records)"
        let before = try f.sql("a", dump)
        let config = f.config
        for command in [["sync"], ["status"], ["doctor"], ["mode", "local"], ["verify"], ["history"]] {
            let r = try f.run("a", command, expect: nil)
            XCTAssertEqual(r.status, 65, "\(command): \(r)")
            XCTAssertTrue(r.stderr.contains("has store format version 7") && r.stderr.contains("upgrade storectl"),
                          "\(command): \(r.stderr)")
        }
        XCTAssertEqual(try f.sql("a", dump), before)
        XCTAssertEqual(f.config, config)
    }
}
