import Foundation
import StoreCloud
import StoreHistory
import StoreMirror
import StoreSQLite
import XCTest

/// The set-based import (a page applied with a few statements per table) leaves every store exactly as applying
/// each record on its own does: the same rows, the same record map, the same history, the same report.
final class SetBasedImportTests: XCTestCase {
    static let schema = MirrorFixture.notesSchema + """
        CREATE TABLE counters(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, n INTEGER CHECK (n >= 0));
        CREATE TABLE strict_items(id INTEGER PRIMARY KEY, qty INTEGER NOT NULL, label TEXT) STRICT;
        """

    /// Two stores import the same pages, one set-based and one record by record, after the same local changes;
    /// their rows, record maps and history must be equal after each round.
    func testSetBasedImportMatchesRecordByRecord() throws {
        let f = try MirrorFixture(schema: Self.schema)
        let a = try f.store("a")
        let bulk = try f.store("bulk")
        let single = try f.store("single")
        func importBoth(_ round: String) throws {
            var reports: [ImportReport] = []
            for (db, inBulk) in [(bulk, true), (single, false)] {
                var options = MirrorOptions(zone: "default", mergePolicy: .propertyLocalWins)
                options.pageSize = 7  // many pages, so runs break at page ends too
                options.applyPagesInBulk = inBulk
                let mirror = try Mirror(db: db, cloud: try f.cloud(), options: options)
                reports.append(try mirror.importChanges())
            }
            XCTAssertEqual(reports[0].applied, reports[1].applied, round)
            XCTAssertEqual(reports[0].deleted, reports[1].deleted, round)
            XCTAssertEqual(reports[0].skipped, reports[1].skipped, round)
            XCTAssertEqual(reports[0].setAside, reports[1].setAside, round)
            XCTAssertEqual(reports[0].waitingForParent, reports[1].waitingForParent, round)
            XCTAssertEqual(try state(bulk), try state(single), round)
        }

        // Round 1: new rows of every kind, a blob and a non-UTF-8 text (one by one), a row that breaks a CHECK
        // on the importing side (set aside) and a STRICT table.
        try write(a, """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
            INSERT INTO notes(uuid, title, body, updated_at) SELECT 'u' || i, 'title ' || i, 'body ' || i, i FROM n;
            INSERT INTO notes(uuid, title, body, updated_at) VALUES ('blob', 'b', x'00ff10', 1);
            INSERT INTO notes(uuid, title, body, updated_at) VALUES ('json', '{"$ref":"x"}', '[1,2]', 2.5);
            INSERT INTO tags(name) VALUES ('red'), ('green');
            INSERT INTO note_tags VALUES (1, 1), (2, 2);
            INSERT INTO settings VALUES ('theme', 'dark');
            INSERT INTO counters(name, n) VALUES ('c1', 1), ('c2', 2);
            INSERT INTO strict_items(qty, label) VALUES (1, 'one'), (2, NULL);
            """)
        try f.sync(a)
        for db in [bulk, single] {
            // Local rows first, so that imported rows land above them.
            try f.write(db, "INSERT INTO notes(uuid, title) VALUES ('local', 'mine')")
        }
        try importBoth("first import")

        // Round 2: updates, deletes, re-inserts; local edits on the importing side for some of the same rows.
        try write(a, """
            UPDATE notes SET title = 'edited ' || id WHERE id % 3 = 0;
            DELETE FROM notes WHERE id % 5 = 0;
            INSERT INTO notes(uuid, title, body, updated_at) VALUES ('late', 'late', 'late', 99);
            UPDATE counters SET n = n + 10;
            DELETE FROM strict_items WHERE qty = 1;
            UPDATE settings SET value = 'light';
            """)
        try f.sync(a)
        for db in [bulk, single] {
            try f.write(db, "UPDATE notes SET body = 'local edit' WHERE uuid IN ('u3', 'u9', 'u10')")
            try f.write(db, "DELETE FROM notes WHERE uuid = 'u6'")
        }
        try importBoth("second import")

        // Round 3: the same records again (nothing new), then one more change each.
        try importBoth("repeat")
        try f.write(a, "UPDATE notes SET updated_at = updated_at + 1 WHERE id <= 4")
        try f.sync(a)
        try importBoth("third import")
    }

    /// A row from another device that a local CHECK refuses is set aside, and the rest of its page still applies.
    func testARefusedRowIsSetAsideAndItsPageStillApplies() throws {
        let f = try MirrorFixture(schema: Self.schema)
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO counters(name, n) VALUES ('ok1', 1), ('ok2', 2), ('ok3', 3)")
        try f.sync(a)
        // The container's record says -1, which b's CHECK refuses.
        let cloud = try f.cloud()
        let batch = try cloud.fetchChanges(zone: "default", since: nil, limit: 100)
        guard let victim = batch.records.first(where: { $0.fields.contains("ok2") }) else {
            return XCTFail("no record for ok2")
        }
        _ = try cloud.save(zone: "default", [RecordSave(recordName: victim.recordName, recordType: "counters",
                                                        fields: #"{"name":"ok2","n":-1}"#,
                                                        expectedTag: victim.changeTag)], device: "other")
        let report = try f.mirror(b).importChanges()
        XCTAssertEqual(report.applied, 2)
        XCTAssertEqual(report.setAside, 1)
        XCTAssertEqual(try f.rows(b, "SELECT name, n FROM counters"), ["ok1|1", "ok3|3"])
    }

    /// Runs several statements as the app, in one transaction.
    private func write(_ db: Connection, _ sql: String) throws {
        _ = try HistoryTracker(db: db, options: TrackingOptions(author: "app")).write { try db.execute(sql) }
    }

    /// Everything an import leaves in a store that the two paths must agree on. Rows are compared by their
    /// values (their rowids are local), the record map by record name.
    private func state(_ db: Connection) throws -> [String] {
        var out: [String] = []
        out += try rows(db, "SELECT uuid, title, quote(body), updated_at FROM notes", "notes")
        out += try rows(db, "SELECT name, n FROM counters", "counters")
        out += try rows(db, "SELECT qty, label FROM strict_items", "strict_items")
        out += try rows(db, "SELECT * FROM settings", "settings")
        out += try rows(db, """
            SELECT r.record_name, r.entity, r.change_tag, r.base, r.deleted, r.extra,
                   CASE r.entity WHEN 'notes' THEN (SELECT uuid FROM notes WHERE id = json_extract(r.pk, '$[0]'))
                   WHEN 'counters' THEN (SELECT name FROM counters WHERE id = json_extract(r.pk, '$[0]'))
                   ELSE r.pk END
            FROM _storectl_records r WHERE r.record_name NOT LIKE '%' || (SELECT substr(value, 1, 8)
                FROM _storectl_meta WHERE key = 'store_id') || '%'
            """, "map")
        out += try rows(db, "SELECT author, entity, op, changed FROM _storectl_history", "history")
        out += try rows(db, "SELECT record_name, reason FROM _storectl_quarantine", "set aside")
        out += try rows(db, "SELECT record_name FROM _storectl_pending", "pending")
        out += try rows(db, "SELECT name, seq FROM sqlite_sequence", "sequence")
        return out
    }

    private func rows(_ db: Connection, _ sql: String, _ label: String) throws -> [String] {
        try db.query(sql).map { label + ": " + $0.values.map(\.description).joined(separator: "|") }.sorted()
    }
}
