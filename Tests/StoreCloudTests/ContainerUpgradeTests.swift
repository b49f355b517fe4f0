import Foundation
import StoreCloud
import StoreSQLite
import TestSupport
import XCTest

/// A container file of format 1 (seqs not unique, no export marks) is upgraded in place after a copy of it.
final class ContainerUpgradeTests: XCTestCase {
    func testAFormat1ContainerIsUpgradedAndItsDuplicatedSeqsAreRenumbered() throws {
        let dir = try TempDirectory("storectl-container-upgrade")
        let path = dir.file("old.container")
        let made = try FileCloudDatabase.create(path: path, container: "c.old", account: "owner", secret: "s3cret-owner",
                                                iterations: 1).database
        try made.ensureZone("z")
        _ = try made.save(zone: "z", [RecordSave(recordName: "a", recordType: "t", fields: "{}", expectedTag: nil)],
                          device: "d1")
        // As format 1 was: a plain seq index, no marks; then two records that share seq 2.
        let raw = try Connection(path: path, mode: .readWrite)
        try raw.execute("""
            DROP INDEX records_by_seq; CREATE INDEX records_by_seq ON records(zone, seq);
            DROP TRIGGER records_superseded; DROP TABLE superseded_saves;
            DROP TABLE export_marks;
            UPDATE container_meta SET value = '1' WHERE key = 'version';
            INSERT INTO records VALUES ('z', 'b', 't', '{"n":2}', 'tag-b', 2, 0, 'd2', 0);
            INSERT INTO records VALUES ('z', 'c', 't', '{"n":3}', 'tag-c', 2, 0, 'd3', 0);
            UPDATE zones SET last_seq = 2 WHERE name = 'z';
            """)
        let db = try FileCloudDatabase.open(path: path, container: "c.old", account: "owner", secret: "s3cret-owner")
        XCTAssertTrue(FileManager.default.fileExists(atPath: path + ".format1.bak"))
        XCTAssertEqual(try raw.scalar("SELECT value FROM container_meta WHERE key = 'version'")?.string,
                       String(FileCloudDatabase.formatVersion))
        XCTAssertEqual(try raw.scalar("SELECT value FROM container_meta WHERE key = 'upgraded_from'")?.string, "1")
        XCTAssertEqual(try raw.query("SELECT record_name, seq FROM records ORDER BY seq").map {
            "\($0[0].string ?? "")=\($0[1].int64 ?? 0)" }, ["a=1", "b=2", "c=3"])
        // Now a reader page by page sees each record once; and the index refuses a second record at one seq.
        var token: ServerChangeToken?
        var seen: [String] = []
        repeat {
            let page = try db.fetchChanges(zone: "z", since: token, limit: 1)
            seen += page.records.map(\.recordName)
            token = page.token
            if !page.moreComing { break }
        } while true
        XCTAssertEqual(seen, ["a", "b", "c"])
        XCTAssertThrowsError(try raw.execute("INSERT INTO records VALUES ('z', 'd', 't', '{}', 'x', 3, 0, 'd', 0)"))
        XCTAssertNil(try db.exportState(zone: "z", device: "d1"))
        // The copy is the container as it was.
        let copy = try Connection(path: path + ".format1.bak", mode: .readOnly)
        XCTAssertEqual(try copy.scalar("SELECT value FROM container_meta WHERE key = 'version'")?.string, "1")
        XCTAssertEqual(try copy.scalar("SELECT count(*) FROM records WHERE seq = 2")?.int64, 2)
    }

    /// Format 2 had no superseded saves: the upgrade adds the table and its trigger, keeps every record and mark,
    /// and from then on a save over another device's marked save keeps that save.
    func testAFormat2ContainerGainsTheSupersededSaves() throws {
        let dir = try TempDirectory("storectl-container-upgrade2")
        let path = dir.file("old.container")
        let made = try FileCloudDatabase.create(path: path, container: "c.old", account: "owner", secret: "s3cret-owner",
                                                iterations: 1).database
        try made.ensureZone("z")
        let saved = try made.save(zone: "z", [RecordSave(recordName: "a", recordType: "t", fields: #"{"n":1}"#,
                                                         expectedTag: nil)],
                                  device: "d1", mark: ExportMark(serial: 1, historySeq: 7, time: 1))
        guard case .saved(let tag, _) = saved.first else { return XCTFail("not saved") }
        let raw = try Connection(path: path, mode: .readWrite)
        try raw.execute("""
            DROP TRIGGER records_superseded; DROP TABLE superseded_saves;
            UPDATE container_meta SET value = '2' WHERE key = 'version';
            """)
        let db = try FileCloudDatabase.open(path: path, container: "c.old", account: "owner", secret: "s3cret-owner")
        XCTAssertTrue(FileManager.default.fileExists(atPath: path + ".format2.bak"))
        XCTAssertEqual(try raw.scalar("SELECT value FROM container_meta WHERE key = 'version'")?.string,
                       String(FileCloudDatabase.formatVersion))
        XCTAssertEqual(try raw.scalar("SELECT value FROM container_meta WHERE key = 'upgraded_from'")?.string, "2")
        XCTAssertEqual(try db.exportState(zone: "z", device: "d1")?.mark.historySeq, 7, "the marks are kept")
        _ = try db.save(zone: "z", [RecordSave(recordName: "a", recordType: "t", fields: #"{"n":2}"#,
                                               expectedTag: tag)], device: "d2")
        let own = try db.fetchDeviceRecords(zone: "z", device: "d1", after: 0, limit: 10).records
        XCTAssertEqual(own.map(\.superseded), [true])
        XCTAssertEqual(own.first?.record.fields, #"{"n":1}"#)
        XCTAssertEqual(own.first?.historySeq, 7)
        let copy = try Connection(path: path + ".format2.bak", mode: .readOnly)
        XCTAssertNil(try copy.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'superseded_saves'"))
    }

    func testAPageNeverEndsInsideARunOfOneSeq() throws {
        // A container damaged by hand (no unique index): the run of seq 2 comes whole.
        let dir = try TempDirectory("storectl-container-run")
        let path = dir.file("run.container")
        let db = try FileCloudDatabase.create(path: path, container: "c.run", account: "owner", secret: "s3cret-owner",
                                              iterations: 1).database
        try db.ensureZone("z")
        let raw = try Connection(path: path, mode: .readWrite)
        try raw.execute("""
            DROP INDEX records_by_seq; CREATE INDEX records_by_seq ON records(zone, seq);
            INSERT INTO records VALUES ('z', 'a', 't', '{}', 'ta', 1, 0, 'd', 0);
            INSERT INTO records VALUES ('z', 'b', 't', '{}', 'tb', 2, 0, 'd', 0);
            INSERT INTO records VALUES ('z', 'c', 't', '{}', 'tc', 2, 0, 'd', 0);
            INSERT INTO records VALUES ('z', 'd', 't', '{}', 'td', 3, 0, 'd', 0);
            UPDATE zones SET last_seq = 3 WHERE name = 'z';
            """)
        let first = try db.fetchChanges(zone: "z", since: nil, limit: 2)
        XCTAssertEqual(first.records.map(\.recordName), ["a", "b", "c"])
        let second = try db.fetchChanges(zone: "z", since: first.token, limit: 2)
        XCTAssertEqual(second.records.map(\.recordName), ["d"])
    }
}
