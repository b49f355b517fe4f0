import Foundation
import StoreCloud
import StoreHistory
import StoreMirror
import StoreSQLite
import TestSupport
import XCTest

final class SyncEngineTests: XCTestCase {
    let notesSQL = "SELECT uuid, title, body FROM notes"

    /// Values that need escaping in JSON come back exactly, both on export (the record map's base must equal the
    /// fields, so an unchanged row is not sent again) and on import.
    func testAwkwardTextRoundTripsThroughTheRecordMap() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        let awkward = "q\"uote \\ back\u{1}ctl\ttab\nnl é 日本 \u{1F600} \\u0041"
        for i in 0..<30 {
            try f.write(a, "INSERT INTO notes(uuid, title, body) VALUES (?, ?, ?)", ["u\(i)", awkward + "\(i)", awkward])
        }
        XCTAssertEqual(try f.sync(a).exported.saved, 30)
        let bases = try a.query("SELECT count(*) FROM _storectl_records WHERE base IS NOT NULL AND change_tag IS NOT NULL")
        XCTAssertEqual(bases.first?[0].int64, 30)
        // Nothing changed: a second export sends nothing (each base equals the row's fields exactly).
        XCTAssertEqual(try f.mirror(a).exportChanges(baseline: true).saved, 0)
        XCTAssertEqual(try f.sync(b).imported.applied, 30)
        XCTAssertEqual(try f.rows(b, notesSQL + " ORDER BY uuid"), try f.rows(a, notesSQL + " ORDER BY uuid"))
        XCTAssertEqual(try b.scalar("SELECT count(*) FROM notes WHERE title = ?", [awkward + "7"])?.int64, 1)
        // B's record map holds each record's fields exactly as the container does (as their hashes, FieldHashes).
        let cloud = try f.cloud()
        for row in try b.query("SELECT record_name, base FROM _storectl_records") {
            let record = try XCTUnwrap(try cloud.fetchRecord(zone: "default", recordName: row[0].string ?? ""))
            let hashed = try b.scalar("SELECT \(FieldHashes.sql("?1"))", [record.fields])
            guard case .blob(let bytes) = row[1] else { return XCTFail("base is not hashed: \(row[1])") }
            XCTAssertEqual(bytes.count, 4 * FieldHashes.entrySize)  // uuid, title, body, updated_at
            XCTAssertEqual(hashed, row[1])
        }
        // B exports nothing back: its bases match what it holds.
        XCTAssertEqual(try f.sync(b).exported.saved, 0)
    }

    /// A real changed only in its 17th digit is a change: the record map's base hashes each real with every digit
    /// (SQLite's JSON renders 15), so the export does not take the row for unchanged.
    func testARealChangedInItsLastDigitIsSent() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO notes(uuid, updated_at) VALUES ('u1', 0.3)")
        try f.sync(a)
        try f.sync(b)
        try f.write(a, "UPDATE notes SET updated_at = 0.1 + 0.2")
        XCTAssertEqual(try f.sync(a).exported.saved, 1)
        try f.sync(b)
        XCTAssertEqual(try b.scalar("SELECT printf('%!.17g', updated_at) FROM notes")?.string, "0.30000000000000004")
    }

    /// An empty blob stays an empty blob on the other store, not NULL, on the set-based import and on the merge of a
    /// record into a row with a local change, and its row is not sent again.
    func testAnEmptyBlobArrivesAsAnEmptyBlob() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO settings VALUES ('empty', x''), ('null', NULL)")
        try f.write(a, "INSERT INTO notes(uuid, title, body) VALUES ('u1', 'one', 'text')")
        try f.sync(a)
        try f.sync(b)
        XCTAssertEqual(try f.rows(b, "SELECT key, typeof(value), length(value) FROM settings"),
                       ["empty|blob|0", "null|null|NULL"])
        try f.write(a, "UPDATE notes SET body = x''")
        try f.write(b, "UPDATE notes SET title = 'one by b'")
        try f.sync(a)
        try f.sync(b)
        XCTAssertEqual(try f.rows(b, "SELECT title, typeof(body), length(body) FROM notes"), ["one by b|blob|0"])
        try f.sync(a)
        XCTAssertEqual(try f.rows(a, "SELECT title, typeof(body), length(body) FROM notes"), ["one by b|blob|0"])
        XCTAssertEqual(try f.mirror(a).exportChanges(baseline: true).saved, 0)
        XCTAssertEqual(try f.mirror(b).exportChanges(baseline: true).saved, 0)
    }

    func testRowsTravelBetweenStoresAndDeletesFlowBothWays() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u1', 'from a'), ('u2', 'second')")
        let first = try f.sync(a)
        XCTAssertTrue(first.exported.baseline)
        XCTAssertEqual(first.exported.saved, 2)
        let second = try f.sync(b)
        XCTAssertEqual(second.imported.applied, 2)
        XCTAssertEqual(try f.rows(b, notesSQL), try f.rows(a, notesSQL))

        try f.write(b, "UPDATE notes SET title = 'edited on b' WHERE uuid = 'u1'")
        try f.write(b, "DELETE FROM notes WHERE uuid = 'u2'")
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u3', 'third')")
        try f.sync(b)
        try f.sync(a)
        try f.sync(b)
        XCTAssertEqual(try f.rows(a, notesSQL), ["u1|edited on b|", "u3|third|"])
        XCTAssertEqual(try f.rows(b, notesSQL), try f.rows(a, notesSQL))
    }

    func testOwnEchoesAreIgnoredAndASecondSyncDoesNothing() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u1', 'x')")
        let first = try f.sync(a)
        XCTAssertEqual(first.imported.applied, 0)
        let again = try f.sync(a)
        XCTAssertEqual(again.exported.saved, 0)
        XCTAssertEqual(again.imported.applied, 0)
        XCTAssertEqual(try a.scalar("SELECT count(*) FROM _storectl_history WHERE author = 'cloud-import'")?.int64, 0)
    }

    func testImportIsRecordedWithTheCloudImportAuthorAndNotExportedBack() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u1', 'x')")
        try f.sync(a)
        try f.sync(b)
        XCTAssertEqual(try b.scalar("SELECT author FROM _storectl_history ORDER BY seq DESC LIMIT 1")?.string, "cloud-import")
        let again = try f.sync(b)
        XCTAssertEqual(again.exported.saved, 0)
    }

    func testSurrogateKeysDoNotCollideAndRelationshipsSurvive() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        // Both stores use rowid 1 for different rows.
        try f.write(a, "INSERT INTO notes(id, uuid, title) VALUES (1, 'note-a', 'A')")
        try f.write(a, "INSERT INTO tags(id, name) VALUES (1, 'work')")
        try f.write(a, "INSERT INTO note_tags(note_id, tag_id) VALUES (1, 1)")
        try f.write(b, "INSERT INTO notes(id, uuid, title) VALUES (1, 'note-b', 'B')")
        try f.write(b, "INSERT INTO tags(id, name) VALUES (1, 'home'), (2, 'work-b')")
        try f.write(b, "INSERT INTO note_tags(note_id, tag_id) VALUES (1, 1)")
        try f.sync(a)
        try f.sync(b)
        try f.sync(a)
        let links = """
            SELECT n.uuid, t.name FROM note_tags nt JOIN notes n ON n.id = nt.note_id JOIN tags t ON t.id = nt.tag_id
            """
        XCTAssertEqual(try f.rows(a, links), ["note-a|work", "note-b|home"])
        XCTAssertEqual(try f.rows(b, links), try f.rows(a, links))
        XCTAssertEqual(try f.rows(a, notesSQL).count, 2)
        XCTAssertEqual(try f.rows(b, "SELECT name FROM tags"), ["home", "work", "work-b"])
        XCTAssertEqual(try a.scalar("PRAGMA foreign_key_check")?.isNull ?? true, true)
    }

    func testChildArrivingBeforeItsParentIsResolvedWhenTheParentArrives() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO notes(id, uuid, title) VALUES (7, 'n', 'parent')")
        try f.write(a, "INSERT INTO tags(id, name) VALUES (9, 't')")
        try f.write(a, "INSERT INTO note_tags(note_id, tag_id) VALUES (7, 9)")
        try f.sync(a)
        // Touch the parent so that its newest seq comes after the child's.
        try f.write(a, "UPDATE notes SET title = 'parent, edited' WHERE id = 7")
        try f.sync(a)
        // Fetch one record per page: the child arrives before the re-saved parent.
        let report = try f.mirror(b, pageSize: 1).sync()
        XCTAssertEqual(report.imported.waitingForParent, 0)
        XCTAssertEqual(try f.rows(b, "SELECT n.title, t.name FROM note_tags nt JOIN notes n ON n.id = nt.note_id JOIN tags t ON t.id = nt.tag_id"),
                       ["parent, edited|t"])
    }

    func testTextAndCompositeKeysSync() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO settings(key, value) VALUES ('theme', 'dark'), ('lang', 'fr')")
        try f.sync(a)
        try f.write(b, "INSERT INTO settings(key, value) VALUES ('font', 'mono')")
        try f.sync(b)
        try f.write(b, "UPDATE settings SET value = 'light' WHERE key = 'theme'")
        try f.write(b, "DELETE FROM settings WHERE key = 'lang'")
        try f.sync(b)
        try f.sync(a)
        XCTAssertEqual(try f.rows(a, "SELECT key, value FROM settings"), ["font|mono", "theme|light"])
        XCTAssertEqual(try f.rows(b, "SELECT key, value FROM settings"), try f.rows(a, "SELECT key, value FROM settings"))
    }

    func testLocalPeriodThenReenableLosesNothing() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u1', 'one')")
        try f.sync(a)
        try f.sync(b)
        // A goes local (no sync); both write.
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('a-offline', 'written while local')")
        try f.write(a, "UPDATE notes SET body = 'body from a' WHERE uuid = 'u1'")
        try f.write(b, "INSERT INTO notes(uuid, title) VALUES ('b-online', 'b')")
        try f.write(b, "UPDATE notes SET title = 'title from b' WHERE uuid = 'u1'")
        try f.sync(b)
        // A comes back: incremental export, then import.
        let back = try f.sync(a)
        XCTAssertFalse(back.exported.baseline)
        try f.sync(b)
        XCTAssertEqual(try f.rows(a, notesSQL), ["a-offline|written while local|", "b-online|b|", "u1|title from b|body from a"])
        XCTAssertEqual(try f.rows(b, notesSQL), try f.rows(a, notesSQL))
    }

    func testPagingAndBatchingMoveManyRows() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        _ = try HistoryTracker(db: a, options: TrackingOptions(author: "app")).write {
            for i in 0..<1234 { try a.run("INSERT INTO notes(uuid, title) VALUES (?, ?)", ["u\(i)", "t\(i)"]) }
        }
        let out = try f.mirror(a, batchSize: 100).sync()
        XCTAssertEqual(out.exported.saved, 1234)
        let incoming = try f.mirror(b, pageSize: 97).sync()
        XCTAssertEqual(incoming.imported.applied, 1234)
        XCTAssertEqual(try b.scalar("SELECT count(DISTINCT uuid) FROM notes")?.int64, 1234)
    }
}

final class SafetyTests: XCTestCase {
    func testMassDeleteBreakerStopsAndAllowsWithTheFlag() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        _ = try HistoryTracker(db: a, options: TrackingOptions(author: "app")).write {
            for i in 0..<10 { try a.run("INSERT INTO notes(uuid) VALUES (?)", ["u\(i)"]) }
        }
        try f.sync(a)
        try f.write(a, "DELETE FROM notes WHERE uuid IN ('u0', 'u1', 'u2', 'u3', 'u4', 'u5')")
        var strict = MirrorOptions()
        strict.maxDeleteCount = 5  // the floor: more than 5 deletes and more than half of the zone trips it
        XCTAssertThrowsError(try Mirror(db: a, cloud: try f.cloud(), options: strict).sync()) { error in
            XCTAssertTrue(error is MassDeleteError, "\(error)")
            XCTAssertEqual((error as? MassDeleteError)?.exitCode.rawValue, 65)
        }
        XCTAssertEqual(try f.cloud().zoneInfo("default")?.liveRecords, 10)
        strict.allowMassDelete = true
        _ = try Mirror(db: a, cloud: try f.cloud(), options: strict).sync()
        XCTAssertEqual(try f.cloud().zoneInfo("default")?.liveRecords, 4)
    }

    func testDeletingAHandfulOfRowsNeverTripsTheBreaker() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        try f.write(a, "INSERT INTO notes(uuid) VALUES ('u0'), ('u1'), ('u2')")
        try f.sync(a)
        // Two of three notes, then the only one left: under the default floor (100 records).
        try f.write(a, "DELETE FROM notes WHERE uuid IN ('u0', 'u1')")
        try f.sync(a)
        XCTAssertEqual(try f.cloud().zoneInfo("default")?.liveRecords, 1)
        try f.write(a, "DELETE FROM notes")
        try f.sync(a)
        XCTAssertEqual(try f.cloud().zoneInfo("default")?.liveRecords, 0)
        // Above the floor, an emptied store over a full zone still stops.
        try f.write(a, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150) "
                       + "INSERT INTO notes(uuid) SELECT 'v' || i FROM n")
        try f.sync(a)
        try f.write(a, "DELETE FROM notes")
        XCTAssertThrowsError(try f.sync(a)) { error in
            XCTAssertEqual((error as? MassDeleteError)?.emptyStore, true, "\(error)")
        }
        XCTAssertEqual(try f.cloud().zoneInfo("default")?.liveRecords, 150)
    }

    func testZonePurgedElsewhereNeverDeletesLocalRows() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        try f.write(a, "INSERT INTO notes(uuid) VALUES ('u1'), ('u2')")
        try f.sync(a)
        try f.cloud().purgeZone("default")
        XCTAssertThrowsError(try f.sync(a)) { error in
            XCTAssertTrue(error is ZoneResetError, "\(error)")
        }
        XCTAssertEqual(try a.scalar("SELECT count(*) FROM notes")?.int64, 2)
        // Re-upload on request.
        try a.transaction { try MirrorState.resetSyncState(a, zone: "default") }
        let again = try f.sync(a)
        XCTAssertTrue(again.exported.baseline)
        XCTAssertEqual(try f.cloud().zoneInfo("default")?.liveRecords, 2)
    }

    func testCrashReplayRecognisesTheDevicesOwnWrite() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u1', 'x')")
        try f.sync(a)
        try f.write(a, "UPDATE notes SET title = 'y'")
        // Simulate a crash after the cloud save and before the local commit: save by hand with the same fields.
        let mirror = try f.mirror(a)
        let row = try XCTUnwrap(try a.query("SELECT record_name, change_tag, base FROM _storectl_records").first)
        let fields = try XCTUnwrap(try a.scalar("SELECT json_object('uuid', uuid, 'title', title, 'body', body, 'updated_at', updated_at) FROM notes")?.string)
        let outcome = try f.cloud().save(zone: "default", [RecordSave(recordName: row[0].string ?? "", recordType: "notes",
                                                                  fields: fields, expectedTag: row[1].string)],
                                         device: mirror.device)
        guard case .saved = outcome.first else { return XCTFail("\(outcome)") }
        let report = try mirror.sync()
        XCTAssertEqual(report.exported.conflictsResolved, 0)
        XCTAssertEqual(report.exported.saved, 1)
        XCTAssertEqual(try a.scalar("SELECT title FROM notes")?.string, "y")
    }
}
