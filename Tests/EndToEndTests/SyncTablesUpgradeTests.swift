import Foundation
import TestSupport
import XCTest

/// A store of store format 3 kept its waiting records in `_storectl_pending` and `_storectl_quarantine`, and what
/// its exports could not send in `_storectl_outbox` and `_storectl_unsent`. Format 4 keeps them in one inbox and
/// one outgoing queue: the store is read as it is by commands that do not write, and the next command that writes
/// moves every one of them, so that each still settles as it would have.
final class SyncTablesUpgradeTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT);
        CREATE TABLE IF NOT EXISTS comments(id INTEGER PRIMARY KEY, note_id INTEGER REFERENCES notes(id)
            ON DELETE CASCADE, body TEXT);
        """

    /// Puts store `store`'s engine tables back to their format-3 shape, keeping every row.
    private func makeFormat3(_ f: Fleet, _ store: String) throws {
        try f.sql(store, """
            BEGIN;
            CREATE TABLE _storectl_pending(record_name TEXT PRIMARY KEY, record_type TEXT NOT NULL,
                fields TEXT NOT NULL, change_tag TEXT NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE _storectl_quarantine(record_name TEXT PRIMARY KEY, record_type TEXT NOT NULL,
                fields TEXT NOT NULL, change_tag TEXT NOT NULL, seq INTEGER NOT NULL, deleted INTEGER NOT NULL DEFAULT 0,
                reason TEXT NOT NULL, hint TEXT, first_seen INTEGER NOT NULL, last_tried INTEGER NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 1) WITHOUT ROWID;
            CREATE TABLE _storectl_outbox(record_name TEXT PRIMARY KEY, record_type TEXT NOT NULL, change_tag TEXT,
                reason TEXT NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE _storectl_unsent(entity TEXT NOT NULL, pk TEXT NOT NULL, bytes INTEGER, reason TEXT NOT NULL,
                PRIMARY KEY (entity, pk)) WITHOUT ROWID;
            INSERT INTO _storectl_pending SELECT record_name, record_type, fields, change_tag, seq
                FROM _storectl_inbox WHERE state = 'waiting';
            INSERT INTO _storectl_quarantine SELECT record_name, record_type, fields, change_tag, seq, deleted,
                reason, hint, first_seen, last_tried, attempts FROM _storectl_inbox WHERE state = 'set_aside';
            INSERT INTO _storectl_unsent SELECT record_type, pk, bytes, detail FROM _storectl_outgoing
                WHERE kind = 'save';
            DROP TABLE _storectl_inbox;
            DROP TABLE _storectl_outgoing;
            UPDATE _storectl_meta SET value = '3' WHERE key = 'format_version';
            UPDATE _storectl_meta SET value = '1' WHERE key = 'sync_tables';
            COMMIT;
            """)
    }

    func upgrade(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      max_record_size: 2KiB",
                          label: "storectl-tables")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(id, title) VALUES (1, 'small')")
        try f.run("a", ["sync"])
        // What another machine saved: a record too large for this store (set aside), and a comment whose note has
        // not arrived yet (waiting for its parent).
        let parent = "notes/0123456789abcdef000000000042"
        let large = "notes/0123456789abcdef000000000043"
        let child = "comments/0123456789abcdef000000000044"
        var planted = [
            PlantedRecord(name: large, type: "notes", fieldsSQL: Fleet.sqlLiteral(
                "{\"title\":\"large\",\"body\":\"" + String(repeating: "z", count: 5000) + "\"}"), bad: true, why: ""),
            PlantedRecord(name: child, type: "comments", fieldsSQL: Fleet.sqlLiteral(
                "{\"body\":\"first!\",\"note_id\":{\"$ref\":\"\(parent)\"}}"), bad: false, why: ""),
        ]
        try f.plant(&planted)
        // A local row too large to send.
        try f.sql("a", "INSERT INTO notes(id, title, body) VALUES (2, 'mine', printf('%.5000c', 'y'))")
        try f.run("a", ["sync"], expect: 65)
        let mentions = [large, child, "[2]"]
        try f.assertReported("a", mentions: mentions, "before the store is put back to format 3")

        try makeFormat3(f, "a")
        // Read as it is, without writing (`doctor` never writes).
        let (doctor, healthy) = try f.doctor("a")
        XCTAssertFalse(healthy, "[\(backend)] \(doctor)")
        for m in [large, child, "[2]"] {
            XCTAssertTrue(doctor.stdout.contains(m.replacingOccurrences(of: "/", with: "\\/")) || doctor.stdout.contains(m),
                          "[\(backend)] doctor of a format-3 store does not name \(m)\n\(doctor.stdout.prefix(3000))")
        }
        XCTAssertEqual(try f.sql("a", "SELECT value FROM _storectl_meta WHERE key = 'format_version'"), "3\n")
        // The next command that writes moves everything into the inbox and the outgoing queue.
        let sync = try f.run("a", ["sync"], expect: 65)
        XCTAssertTrue((sync.stdout + sync.stderr).contains("from store format 3 to 6"), "[\(backend)] \(sync)")
        XCTAssertEqual(try f.sql("a", """
            SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE type = 'table'
                AND name IN ('_storectl_pending', '_storectl_quarantine', '_storectl_outbox', '_storectl_unsent',
                             '_storectl_inbox', '_storectl_outgoing') ORDER BY name)
            """), "_storectl_inbox,_storectl_outgoing\n")
        XCTAssertEqual(try f.sql("a", "SELECT record_name || ' ' || state FROM _storectl_inbox ORDER BY 1"),
                       "\(child) waiting\n\(large) set_aside\n")
        XCTAssertEqual(try f.sql("a", "SELECT kind || ' ' || reason || ' ' || pk FROM _storectl_outgoing"),
                       "save too_large [2]\n")
        try f.assertReported("a", mentions: mentions, "after the upgrade to format 4")

        // Each settles as it would have: the parent arrives, the limit is raised.
        var more = [PlantedRecord(name: parent, type: "notes", fieldsSQL: Fleet.sqlLiteral("{\"title\":\"parent\"}"),
                                  bad: false, why: "")]
        try f.plant(&more)
        let config = try f.dir.read("config.yaml").replacingOccurrences(of: "max_record_size: 2KiB",
                                                                        with: "max_record_size: 1MiB")
        _ = try f.dir.write("config.yaml", config)
        try f.syncRounds(2, ["a", "b"])
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM _storectl_inbox"), "0\n")
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM _storectl_outgoing"), "0\n")
        XCTAssertEqual(try f.sql("b", "SELECT length(body) FROM notes WHERE id = 2"), "5000\n",
                       "[\(backend)] the row not sent before the upgrade reached the other store")
        XCTAssertEqual(try f.sql("b", "SELECT n.title || ':' || c.body FROM comments c JOIN notes n ON n.id = c.note_id"),
                       "parent:first!\n")
        XCTAssertEqual(try f.sql("b", "SELECT length(body) FROM notes WHERE title = 'large'"), "5000\n")
        for s in f.stores { try f.assertHealthy(s, "after everything settled") }
    }

    func testAFormat3StoresWaitingRecordsAndUnsentRowsMoveAndSettleFile() throws { try upgrade(.file) }
    func testAFormat3StoresWaitingRecordsAndUnsentRowsMoveAndSettlePostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try upgrade(pg)
    }
}
