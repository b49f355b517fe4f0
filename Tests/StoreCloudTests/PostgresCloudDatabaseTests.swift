import Foundation
import StoreBase
import StoreCloud
@testable import StoreCloudPostgres
import XCTest

/// The PostgreSQL backend's own behaviour: schema set-up, saves, the change feed, markers, devices, errors.
final class PostgresCloudDatabaseTests: PostgresTestCase {
    func testInitCreatesAVersionedSchemaAndIsIdempotent() throws {
        guard let url = PostgresTestServer.url() else { return }
        let container = PostgresTestServer.uniqueContainer("init")
        let db = try PostgresCloudDatabase(url: url, container: container)
        dropAfterTest(db)
        XCTAssertThrowsError(try db.zoneInfo("default")) { error in
            let e = error as? CloudError
            XCTAssertEqual(e?.kind, .containerMissing)
            XCTAssertEqual(e?.summary, "container \(container) does not exist in \(db.displayURL) "
                + "(no schema \(db.schemaName))")
            XCTAssertEqual(e?.hint, "run 'storectl cloud init' to create it")
            XCTAssertEqual(e?.exitCode, .unavailable)
        }
        let first = try db.initializeContainer()
        XCTAssertEqual(first, PostgresContainerSetup(schema: db.schemaName, created: true, previousVersion: 0,
                                                     version: PostgresCloudDatabase.schemaVersion))
        let second = try db.initializeContainer()
        let version = PostgresCloudDatabase.schemaVersion
        XCTAssertEqual(second, PostgresContainerSetup(schema: db.schemaName, created: false,
                                                      previousVersion: version, version: version))
        let meta = try PostgresTestServer.superuser(url, "SELECT key, value FROM \"\(db.schemaName)\".meta ORDER BY key")
        XCTAssertEqual((0..<meta.rowCount).map { "\(meta.string($0, 0) ?? "")=\(meta.string($0, 1) ?? "")" },
                       ["container=\(container)", "schema_version=\(version)"])
        let tables = try PostgresTestServer.superuser(url, """
            SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = $1
            """, [db.schemaName])
        XCTAssertEqual(tables.string(0, 0), "devices,export_marks,former_writers,markers,meta,records,shares,superseded_saves,zones")
        let index = try PostgresTestServer.superuser(url, """
            SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'records_zone_seq'
            """, [db.schemaName])
        XCTAssertEqual(index.string(0, 0).map { $0.contains("UNIQUE INDEX") && $0.contains("(zone, seq)") }, true)
        XCTAssertNil(try db.zoneInfo("default"))
    }

    func testAVersion1ContainerIsMigratedWithItsRecords() throws {
        guard let url = PostgresTestServer.url() else { return }
        let db = try PostgresCloudDatabase(url: url, container: PostgresTestServer.uniqueContainer("migrate"))
        dropAfterTest(db)
        let s = "\"\(db.schemaName)\""
        // A container as the first release made it: migration 1 only.
        _ = try PostgresTestServer.superuser(url, "CREATE SCHEMA \(s)")
        _ = try PostgresTestServer.superuser(url, "CREATE TABLE \(s).meta (key text PRIMARY KEY, value text NOT NULL)")
        _ = try PostgresTestServer.superuser(url, "INSERT INTO \(s).meta VALUES ('container', $1), "
            + "('schema_version', '1')", [db.container])
        for statement in PostgresSchema.statements(migration: 0, schema: db.schemaName) {
            _ = try PostgresTestServer.superuser(url, statement)
        }
        _ = try PostgresTestServer.superuser(url, "INSERT INTO \(s).zones VALUES ('z', 'e', 1, 0)")
        _ = try PostgresTestServer.superuser(url, "INSERT INTO \(s).records VALUES ('z', 'old', 'T', '{\"n\":1}', "
            + "'0b6f1c9e-uuid-tag', 1, false, 'dev-0', 0)")
        // The first use by a role that may migrate it migrates it, in one transaction, and keeps its records.
        XCTAssertEqual(try db.zoneInfo("z")?.lastSeq, 1)
        let version = try PostgresTestServer.superuser(url, "SELECT value FROM \(s).meta WHERE key = 'schema_version'")
        XCTAssertEqual(version.string(0, 0), String(PostgresCloudDatabase.schemaVersion))
        XCTAssertEqual(try db.fetchRecord(zone: "z", recordName: "old")?.fields, "{\"n\":1}")
        XCTAssertEqual(try db.initializeContainer(),
                       PostgresContainerSetup(schema: db.schemaName, created: false,
                                              previousVersion: PostgresCloudDatabase.schemaVersion,
                                              version: PostgresCloudDatabase.schemaVersion))
        let constraints = try PostgresTestServer.superuser(url, """
            SELECT string_agg(conname || ':' || contype::text, ',' ORDER BY conname) FROM pg_constraint
            WHERE conrelid = to_regclass($1)
            """, ["\(s).records"])
        XCTAssertEqual(constraints.string(0, 0), "records_fields_object:c,records_pkey:p")
        let collations = try PostgresTestServer.superuser(url, """
            SELECT string_agg(a.attname || ':' || c.collname, ',' ORDER BY a.attname) FROM pg_attribute a
            JOIN pg_collation c ON c.oid = a.attcollation
            WHERE a.attrelid = to_regclass($1) AND a.attname IN ('zone', 'record_name')
            """, ["\(s).records"])
        XCTAssertEqual(collations.string(0, 0), "record_name:C,zone:C")
        // The old record keeps its tag, and a save that names it updates it.
        let old = try XCTUnwrap(db.fetchRecord(zone: "z", recordName: "old"))
        XCTAssertEqual(old.changeTag, "0b6f1c9e-uuid-tag")
        let outcomes = try db.save(zone: "z", [
            RecordSave(recordName: "old", recordType: "T", fields: fields(2), expectedTag: old.changeTag),
            RecordSave(recordName: "new", recordType: "T", fields: fields(3), expectedTag: nil),
        ], device: "dev-1")
        guard case .saved(let tag, 2) = outcomes[0], case .saved(_, 3) = outcomes[1] else {
            return XCTFail("\(outcomes)")
        }
        XCTAssertEqual(try db.fetchRecord(zone: "z", recordName: "old")?.changeTag, tag)
        XCTAssertEqual(try db.fetchRecord(zone: "z", recordName: "old")?.fields, fields(2))
        // Fields are still checked after the migration.
        XCTAssertThrowsError(try db.save(zone: "z", [
            RecordSave(recordName: "old", recordType: "T", fields: "[1]", expectedTag: tag),
        ], device: "dev-1")) { XCTAssertEqual(($0 as? CloudError)?.kind, .invalid) }
    }

    func testACreateBatchThatMeetsAnExistingRecordSavesTheOthersWithoutGaps() throws {
        guard let db = try makeContainer("create") else { return }
        try db.ensureZone("z")
        let first = try db.save(zone: "z", [
            RecordSave(recordName: "b", recordType: "T", fields: fields(1), expectedTag: nil),
        ], device: "dev-1")
        guard case .saved(let bTag, 1) = first[0] else { return XCTFail("\(first)") }
        // Every record of the batch expects to be new; "b" is not.
        let saves = ["a", "b", "c", "d"].map {
            RecordSave(recordName: $0, recordType: "T", fields: fields(9), expectedTag: nil)
        }
        let outcomes = try db.save(zone: "z", saves, device: "dev-2")
        let b = try XCTUnwrap(db.fetchRecord(zone: "z", recordName: "b"))
        XCTAssertEqual(b.changeTag, bTag)
        XCTAssertEqual(b.modifiedBy, "dev-1")
        XCTAssertEqual(outcomes[1], .conflict(server: b))
        var seqs: [Int64] = []
        for (index, outcome) in outcomes.enumerated() where index != 1 {
            guard case .saved(let tag, let seq) = outcome else { return XCTFail("\(outcomes)") }
            let stored = try XCTUnwrap(db.fetchRecord(zone: "z", recordName: saves[index].recordName))
            XCTAssertEqual(stored.changeTag, tag)
            XCTAssertEqual(stored.seq, seq)
            XCTAssertEqual(stored.modifiedBy, "dev-2")
            seqs.append(seq)
        }
        XCTAssertEqual(seqs, [2, 3, 4], "the failed first attempt used no seq")
        XCTAssertEqual(try db.zoneInfo("z")?.lastSeq, 4)
        let feed = try db.fetchChanges(zone: "z", since: nil, limit: 10)
        XCTAssertEqual(feed.records.map(\.recordName), ["b", "a", "c", "d"])
        // Tags are never handed out twice: not across records, not for the same record saved again.
        let again = try db.save(zone: "z", [
            RecordSave(recordName: "b", recordType: "T", fields: fields(5), expectedTag: bTag),
        ], device: "dev-1")
        guard case .saved(let newTag, 5) = again[0] else { return XCTFail("\(again)") }
        let tags = feed.records.map(\.changeTag) + [newTag]
        XCTAssertEqual(Set(tags).count, tags.count, "\(tags)")
    }

    func testASchemaOfSomethingElseIsRefused() throws {
        guard let url = PostgresTestServer.url() else { return }
        let db = try PostgresCloudDatabase(url: url, container: PostgresTestServer.uniqueContainer("foreign"))
        dropAfterTest(db)
        _ = try PostgresTestServer.superuser(url, "CREATE SCHEMA \"\(db.schemaName)\"")
        _ = try PostgresTestServer.superuser(url, "CREATE TABLE \"\(db.schemaName)\".payroll (id int)")
        XCTAssertThrowsError(try db.initializeContainer()) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .notAContainer)
            XCTAssertEqual((error as? CloudError)?.summary, "schema \(db.schemaName) in \(db.displayURL) already "
                + "exists and is not a storectl container")
        }
        let still = try PostgresTestServer.superuser(url, "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
                                                     [db.schemaName])
        XCTAssertEqual(still.string(0, 0), "1")
    }

    func testANewerSchemaVersionIsRefused() throws {
        guard let db = try makeContainer("newer"), let url = PostgresTestServer.url() else { return }
        _ = try PostgresTestServer.superuser(url, "UPDATE \"\(db.schemaName)\".meta SET value = '99' "
            + "WHERE key = 'schema_version'")
        db.close()
        XCTAssertThrowsError(try db.ensureZone("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .notAContainer)
            XCTAssertEqual((error as? CloudError)?.hint, "upgrade storectl")
        }
        XCTAssertThrowsError(try db.initializeContainer()) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .notAContainer)
        }
    }

    func testSchemaNamesAreSafeDistinctAndStable() throws {
        let a = PostgresCloudDatabase.schemaName(container: "iCloud.com.example.notes")
        XCTAssertEqual(a, "storectl_icloud_com_example_notes_028bddc9")
        XCTAssertEqual(a, PostgresCloudDatabase.schemaName(container: "iCloud.com.example.notes"))
        XCTAssertNotEqual(PostgresCloudDatabase.schemaName(container: "a.b"),
                          PostgresCloudDatabase.schemaName(container: "a_b"))
        let long = PostgresCloudDatabase.schemaName(container: String(repeating: "x", count: 500) + "\"; DROP")
        XCTAssertLessThanOrEqual(long.utf8.count, 63)
        XCTAssertTrue(long.allSatisfy { $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_") }, long)

        // A container id full of SQL metacharacters works end to end.
        guard let url = PostgresTestServer.url() else { return }
        let db = try PostgresCloudDatabase(url: url, container: "odd\"; DROP SCHEMA public; --'\\ é")
        dropAfterTest(db)
        try db.initializeContainer()
        try db.ensureZone("z'\"")
        let out = try db.save(zone: "z'\"", [RecordSave(recordName: "r'\"\\", recordType: "T", fields: "{}",
                                                         expectedTag: nil)], device: "d")
        guard case .saved = out.first else { return XCTFail("\(out)") }
    }

    func testSaveFetchAndConflicts() throws {
        guard let db = try makeContainer("save") else { return }
        let zone = try db.ensureZone("default")
        XCTAssertEqual(zone.lastSeq, 0)
        XCTAssertEqual(zone.liveRecords, 0)
        XCTAssertEqual(try db.ensureZone("default").epoch, zone.epoch)

        let first = try db.save(zone: "default", [
            RecordSave(recordName: "a", recordType: "Note", fields: "{\"t\":\"quote \\\" backslash \\\\ é ☃\"}",
                       expectedTag: nil),
            RecordSave(recordName: "b", recordType: "Note", fields: fields(2), expectedTag: nil),
            RecordSave(recordName: "c", recordType: "Note", fields: fields(3), expectedTag: nil),
        ], device: "dev-1")
        let tags = first.map { outcome -> String in
            if case .saved(let tag, _) = outcome { return tag }
            XCTFail("\(outcome)")
            return ""
        }
        XCTAssertEqual(first.map { outcome -> Int64 in if case .saved(_, let seq) = outcome { return seq } else { return -1 } }, [1, 2, 3])
        let a = try XCTUnwrap(db.fetchRecord(zone: "default", recordName: "a"))
        XCTAssertEqual(a.fields, "{\"t\":\"quote \\\" backslash \\\\ é ☃\"}")
        XCTAssertEqual(a.changeTag, tags[0])
        XCTAssertEqual(a.modifiedBy, "dev-1")
        XCTAssertEqual(a.recordType, "Note")
        XCTAssertFalse(a.deleted)
        XCTAssertEqual(a.modifiedAt, Date().timeIntervalSince1970, accuracy: 60)

        // One batch: a good update, a stale tag, a create over an existing record, an update of a missing record,
        // a deletion. The conflicts do not stop the others.
        let second = try db.save(zone: "default", [
            RecordSave(recordName: "a", recordType: "Note", fields: fields(10), expectedTag: tags[0]),
            RecordSave(recordName: "b", recordType: "Note", fields: fields(20), expectedTag: "stale"),
            RecordSave(recordName: "c", recordType: "Note", fields: fields(30), expectedTag: nil),
            RecordSave(recordName: "ghost", recordType: "Note", fields: fields(40), expectedTag: "x"),
            RecordSave(recordName: "c", recordType: "Note", fields: "", deleted: true, expectedTag: tags[2])
                .renamed("c2-missing"),
        ], device: "dev-2")
        guard case .saved(let aTag, 4) = second[0] else { return XCTFail("\(second)") }
        XCTAssertNotEqual(aTag, tags[0])
        XCTAssertEqual(second[1], .conflict(server: try db.fetchRecord(zone: "default", recordName: "b")))
        XCTAssertEqual(second[2], .conflict(server: try db.fetchRecord(zone: "default", recordName: "c")))
        XCTAssertEqual(second[3], .conflict(server: nil))
        XCTAssertEqual(second[4], .conflict(server: nil))
        if case .conflict(let server) = second[1] { XCTAssertEqual(server?.fields, fields(2)) }

        let deleted = try db.save(zone: "default", [
            RecordSave(recordName: "c", recordType: "Note", fields: fields(99), deleted: true, expectedTag: tags[2]),
        ], device: "dev-2")
        guard case .saved(let tombTag, 5) = deleted[0] else { return XCTFail("\(deleted)") }
        let tomb = try XCTUnwrap(db.fetchRecord(zone: "default", recordName: "c"))
        XCTAssertTrue(tomb.deleted)
        XCTAssertEqual(tomb.fields, "{}")
        // Creating over a tombstone needs its tag; the conflict shows the tombstone.
        XCTAssertEqual(try db.save(zone: "default", [RecordSave(recordName: "c", recordType: "Note", fields: "{}",
                                                                expectedTag: nil)], device: "d"),
                       [.conflict(server: tomb)])
        guard case .saved(_, 6) = try db.save(zone: "default", [
            RecordSave(recordName: "c", recordType: "Note", fields: fields(7), expectedTag: tombTag),
        ], device: "d")[0] else { return XCTFail() }

        let info = try XCTUnwrap(db.zoneInfo("default"))
        XCTAssertEqual(info.lastSeq, 6)
        XCTAssertEqual(info.liveRecords, 3)
        XCTAssertEqual(try db.save(zone: "default", [], device: "d"), [])
    }

    func testTheChangeFeedPagesInSeqOrderWithEachRecordOnceAtItsLatestState() throws {
        guard let db = try makeContainer("feed") else { return }
        try db.ensureZone("z")
        let saves = (0..<25).map { RecordSave(recordName: "r\($0)", recordType: "T", fields: fields($0), expectedTag: nil) }
        let outcomes = try db.save(zone: "z", saves, device: "d")
        // Update r3 and delete r5: they move to the end of the feed.
        guard case .saved(let tag3, _) = outcomes[3], case .saved(let tag5, _) = outcomes[5] else { return XCTFail() }
        _ = try db.save(zone: "z", [
            RecordSave(recordName: "r3", recordType: "T", fields: fields(333), expectedTag: tag3),
            RecordSave(recordName: "r5", recordType: "T", fields: "", deleted: true, expectedTag: tag5),
        ], device: "d")

        var token: ServerChangeToken?
        var pages: [[String]] = []
        var more = [Bool]()
        repeat {
            let batch = try db.fetchChanges(zone: "z", since: token, limit: 10)
            pages.append(batch.records.map(\.recordName))
            more.append(batch.moreComing)
            XCTAssertEqual(batch.records.map(\.seq), batch.records.map(\.seq).sorted())
            token = batch.token
        } while more.last == true
        let expected = (0..<25).filter { $0 != 3 && $0 != 5 }.map { "r\($0)" } + ["r3", "r5"]
        XCTAssertEqual(pages.flatMap { $0 }, expected)
        XCTAssertEqual(pages.map(\.count), [10, 10, 5])
        XCTAssertEqual(more, [true, true, false])
        XCTAssertEqual(token?.seq, 27)
        let last = try db.fetchChanges(zone: "z", since: nil, limit: 100)
        XCTAssertEqual(last.records.last?.fields, "{}")
        XCTAssertEqual(last.records.last?.deleted, true)
        XCTAssertEqual(last.records.first(where: { $0.recordName == "r3" })?.fields, fields(333))
        XCTAssertEqual(try db.fetchChanges(zone: "z", since: token, limit: 10).records, [])
        XCTAssertEqual(try db.fetchChanges(zone: "z", since: token, limit: 10).token, token)
        XCTAssertThrowsError(try db.fetchChanges(zone: "z", since: nil, limit: 0)) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .invalid)
        }
    }

    func testPurgeGivesANewEpochAndOldTokensAreRefused() throws {
        guard let db = try makeContainer("purge") else { return }
        let before = try db.ensureZone("z")
        _ = try db.save(zone: "z", [RecordSave(recordName: "a", recordType: "T", fields: "{}", expectedTag: nil)],
                        device: "d")
        _ = try db.createMarker(zone: "z", name: "seed", device: "d", payload: "{}")
        let token = try db.fetchChanges(zone: "z", since: nil, limit: 10).token
        try db.purgeZone("z")
        let after = try XCTUnwrap(db.zoneInfo("z"))
        XCTAssertNotEqual(after.epoch, before.epoch)
        XCTAssertEqual(after.liveRecords, 0)
        XCTAssertEqual(after.lastSeq, 1, "seqs keep counting up; only the epoch starts over")
        XCTAssertNil(try db.marker(zone: "z", name: "seed"))
        XCTAssertNil(try db.fetchRecord(zone: "z", recordName: "a"))
        XCTAssertThrowsError(try db.fetchChanges(zone: "z", since: token, limit: 10)) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .zoneReset)
            XCTAssertEqual((error as? CloudError)?.exitCode, .dataError)
        }
        XCTAssertEqual(try db.fetchChanges(zone: "z", since: nil, limit: 10).records, [])
        XCTAssertThrowsError(try db.purgeZone("nope")) { XCTAssertEqual(($0 as? CloudError)?.kind, .zoneNotFound) }
    }

    func testAMissingZoneIsReported() throws {
        guard let db = try makeContainer("nozone") else { return }
        let save = RecordSave(recordName: "a", recordType: "T", fields: "{}", expectedTag: nil)
        XCTAssertThrowsError(try db.save(zone: "nope", [save], device: "d")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .zoneNotFound)
            XCTAssertEqual((error as? CloudError)?.summary,
                           "zone nope does not exist in container \(db.container) at \(db.displayURL)")
        }
        XCTAssertThrowsError(try db.fetchChanges(zone: "nope", since: nil, limit: 5)) {
            XCTAssertEqual(($0 as? CloudError)?.kind, .zoneNotFound)
        }
        XCTAssertThrowsError(try db.createMarker(zone: "nope", name: "m", device: "d", payload: "")) {
            XCTAssertEqual(($0 as? CloudError)?.kind, .zoneNotFound)
        }
        XCTAssertNil(try db.zoneInfo("nope"))
        XCTAssertNil(try db.fetchRecord(zone: "nope", recordName: "a"))
    }

    func testBadBatchesAreRefusedWhole() throws {
        guard let db = try makeContainer("bad") else { return }
        try db.ensureZone("z")
        let good = RecordSave(recordName: "ok", recordType: "T", fields: "{}", expectedTag: nil)
        for (bad, message) in [
            (RecordSave(recordName: "x", recordType: "T", fields: "[1]", expectedTag: nil), "not a JSON object"),
            (RecordSave(recordName: "x", recordType: "T", fields: "{nope", expectedTag: nil), "not a JSON object"),
            (RecordSave(recordName: "x", recordType: "T", fields: "", expectedTag: nil), "not a JSON object"),
            (RecordSave(recordName: "x", recordType: "T", fields: "{\"a\":\"\u{1e}\"}", expectedTag: nil),
             "not a JSON object"),
            (RecordSave(recordName: "x", recordType: "T", fields: "{}\u{1e}{}", expectedTag: "t"), "not a JSON object"),
            (RecordSave(recordName: "", recordType: "T", fields: "{}", expectedTag: nil), "empty name or type"),
            (RecordSave(recordName: "ok", recordType: "T", fields: "{}", expectedTag: nil), "appears twice"),
        ] {
            XCTAssertThrowsError(try db.save(zone: "z", [good, bad], device: "d")) { error in
                XCTAssertEqual((error as? CloudError)?.kind, .invalid)
                XCTAssertTrue("\(error)".contains(message), "\(error)")
            }
        }
        XCTAssertNil(try db.fetchRecord(zone: "z", recordName: "ok"))
        XCTAssertEqual(try db.zoneInfo("z")?.lastSeq, 0)
        // The connection is still good after the failed pipeline.
        XCTAssertEqual(try db.save(zone: "z", [good], device: "d").count, 1)
    }

    /// A batch of new records large enough to go through COPY keeps every byte COPY's text format escapes
    /// (backslashes, tabs, newlines and carriage returns, inside strings and as JSON whitespace), numbers its
    /// seqs in batch order with the export mark, and falls back to the conditional path when one exists.
    func testABatchThroughCopyKeepsEveryByteAndFallsBackWhenARecordExists() throws {
        guard let db = try makeContainer("copy") else { return }
        try db.ensureZone("z")
        let count = db.copyThreshold * 2 + 1
        let awkward = ["{\"s\":\"back\\\\slash \\\\N tab\\t nl\\n cr\\r\"}", "{\t\"a\" :\n1,\r\n\"b\":[true,null]}",
                       "{\"u\":\"\u{e9}\u{1F600} \\u0000\"}"]
        let saves = (0..<count).map { k in
            RecordSave(recordName: k == 7 ? "name\\with\tweird\nbytes" : "rec-\(k)", recordType: "T\\t",
                       fields: k < awkward.count ? awkward[k] : fields(k), deleted: k == 5, expectedTag: nil)
        }
        let mark = ExportMark(serial: 3, historySeq: 42, time: 1_700_000_000_000)
        XCTAssertNil(db.copyTableConnection, "no batch went through COPY yet")
        let outcomes = try db.save(zone: "z", saves, device: "dev-copy", mark: mark)
        XCTAssertNotNil(db.copyTableConnection, "the batch went through COPY")
        XCTAssertEqual(outcomes.map { o -> Int64 in if case .saved(_, let seq) = o { return seq } else { return -1 } },
                       Array(Int64(1)...Int64(count)))
        let feed = try db.fetchChanges(zone: "z", since: nil, limit: count + 10)
        XCTAssertEqual(feed.records.map(\.recordName), saves.map(\.recordName))
        for (record, save) in zip(feed.records, saves) {
            XCTAssertEqual(record.recordType, save.recordType)
            XCTAssertEqual(record.deleted, save.deleted)
            XCTAssertEqual(record.fields, save.deleted ? "{}" : save.fields, save.recordName)
            XCTAssertEqual(record.modifiedBy, "dev-copy")
        }
        XCTAssertEqual(try db.exportState(zone: "z", device: "dev-copy"),
                       DeviceExportState(mark: mark, lastSeq: Int64(count)))
        // One record of the next batch exists: nothing of the COPY attempt stays, the others are saved once.
        let next = (0..<count).map { k in
            RecordSave(recordName: k == 3 ? "rec-10" : "new-\(k)", recordType: "T", fields: fields(k),
                       expectedTag: nil)
        }
        let again = try db.save(zone: "z", next, device: "dev-copy")
        guard case .conflict(let server?) = again[3] else { return XCTFail("\(again[3])") }
        XCTAssertEqual(server.fields, fields(10))
        let seqs = again.compactMap { o -> Int64? in if case .saved(_, let seq) = o { return seq } else { return nil } }
        XCTAssertEqual(seqs, Array(Int64(count + 1)...Int64(2 * count - 1)), "no gap, no seq used twice")
        XCTAssertEqual(try db.zoneInfo("z")?.lastSeq, Int64(2 * count - 1))
    }

    /// A large batch of updates through COPY is saved on the same conditions as through arrays: a matching tag
    /// updates in place, a stale one or one for a record the server lacks is a conflict with the server's record
    /// (or none), a new record is inserted, and the seqs follow batch order without gaps.
    func testAConditionalBatchThroughCopyKeepsTheConditionsAndTheBytes() throws {
        guard let db = try makeContainer("copycond") else { return }
        try db.ensureZone("z")
        let count = db.copyThreshold + 50
        let first = (0..<count).map { RecordSave(recordName: "r-\($0)", recordType: "T", fields: fields($0),
                                                 expectedTag: nil) }
        // In two halves, each under the threshold: only the batch below goes through COPY.
        let half = count / 2
        let tags = try (db.save(zone: "z", Array(first[..<half]), device: "a")
                        + db.save(zone: "z", Array(first[half...]), device: "a")).map { o -> String? in
            if case .saved(let tag, _) = o { return tag } else { return nil }
        }
        XCTAssertNil(db.copyTableConnection)
        let awkward = #"{"s":"tab\t \\ \"q\" \n\u0009",\#t"n":\#r\#n"\#u{e9}"}"#
        let batch = (0..<count).map { k -> RecordSave in
            switch k % 4 {
            case 0: return RecordSave(recordName: "r-\(k)", recordType: "T\tU", fields: k == 0 ? awkward : fields(-k),
                                      expectedTag: tags[k])
            case 1: return RecordSave(recordName: "r-\(k)", recordType: "T", fields: fields(-k), expectedTag: "1-stale")
            case 2: return RecordSave(recordName: "new-\(k)", recordType: "T", fields: fields(-k), expectedTag: nil)
            default: return RecordSave(recordName: "gone-\(k)", recordType: "T", fields: fields(-k),
                                       expectedTag: "2-missing")
            }
        }
        let outcomes = try db.save(zone: "z", batch, device: "b")
        XCTAssertNotNil(db.copyTableConnection, "the batch went through COPY")
        var seq = Int64(count)
        for (k, outcome) in outcomes.enumerated() {
            switch (k % 4, outcome) {
            case (0, .saved(_, let s)), (2, .saved(_, let s)):
                seq += 1
                XCTAssertEqual(s, seq, "record \(k) in batch order")
            case (1, .conflict(let server?)):
                XCTAssertEqual(server.fields, fields(k))
                XCTAssertEqual(server.changeTag, tags[k])
            case (3, .conflict(nil)):
                break
            default:
                XCTFail("record \(k): \(outcome)")
            }
        }
        XCTAssertEqual(try db.zoneInfo("z")?.lastSeq, seq)
        let feed = try db.fetchChanges(zone: "z", since: ServerChangeToken(epoch: try XCTUnwrap(db.zoneInfo("z")).epoch,
                                                                           seq: Int64(count)), limit: count)
        XCTAssertEqual(feed.records.map(\.recordName), batch.indices.filter { $0 % 4 == 0 || $0 % 4 == 2 }
            .map { batch[$0].recordName })
        XCTAssertEqual(feed.records.first?.fields, awkward)
        XCTAssertEqual(feed.records.first?.recordType, "T\tU")
        XCTAssertEqual(Set(feed.records.map(\.modifiedBy)), ["b"])
    }

    /// A NUL byte, which COPY's text format cannot carry, sends a large batch the arrays way, which refuses it
    /// as it refuses a small one: nothing of either batch is saved, and the next batch through COPY is whole.
    func testABatchWithANulByteIsRefusedAsASmallOneIsAndCopyGoesOnAfterIt() throws {
        guard let db = try makeContainer("copynul") else { return }
        try db.ensureZone("z")
        for count in [3, db.copyThreshold + 5] {
            let saves = (0..<count).map { k in
                RecordSave(recordName: k == 1 ? "nul\u{0}name" : "r\(count)-\(k)", recordType: "T",
                           fields: fields(k), expectedTag: nil)
            }
            XCTAssertThrowsError(try db.save(zone: "z", saves, device: "d"), "\(count)") { error in
                XCTAssertEqual((error as? CloudError)?.kind, .invalid, "\(count): \(error)")
            }
            XCTAssertEqual(try db.zoneInfo("z")?.lastSeq, 0, "\(count)")
        }
        let count = db.copyThreshold
        let good = (0..<count).map { RecordSave(recordName: "ok-\($0)", recordType: "T", fields: fields($0),
                                                expectedTag: nil) }
        XCTAssertEqual(try db.save(zone: "z", good, device: "d").count, count)
        XCTAssertNotNil(db.copyTableConnection)
        XCTAssertEqual(try db.fetchChanges(zone: "z", since: nil, limit: count + 1).records.map(\.recordName),
                       good.map(\.recordName))
    }

    func testALargeBatchIsSavedInOneGo() throws {
        guard let db = try makeContainer("large") else { return }
        try db.ensureZone("z")
        let saves = (0..<20_000).map {
            RecordSave(recordName: "rec-\($0)", recordType: "T", fields: "{\"n\":\($0),\"s\":\"x,y\\\"{}\"}",
                       expectedTag: nil)
        }
        let start = Date()
        let outcomes = try db.save(zone: "z", saves, device: "d")
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertEqual(outcomes.map { o -> Int64 in if case .saved(_, let seq) = o { return seq } else { return -1 } },
                       Array(Int64(1)...20_000))
        XCTAssertLessThan(elapsed, 30, "20,000 records in one batch took \(elapsed) s")
        let r = try XCTUnwrap(db.fetchRecord(zone: "z", recordName: "rec-19999"))
        XCTAssertEqual(r.fields, "{\"n\":19999,\"s\":\"x,y\\\"{}\"}")
    }

    func testMarkersAreCreatedOnceEvenByConcurrentCreators() throws {
        guard let db = try makeContainer("marker"), let url = PostgresTestServer.url() else { return }
        try db.ensureZone("z")
        let container = db.container
        let results = ResultBox<Bool>()
        let group = DispatchGroup()
        for i in 0..<6 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                do {
                    let mine = try PostgresCloudDatabase(url: url, container: container)
                    let (created, marker) = try mine.createMarker(zone: "z", name: "seed", device: "dev-\(i)",
                                                                  payload: "{\"by\":\(i)}")
                    results.append(created)
                    XCTAssertEqual(marker.payload, "{\"by\":\(marker.createdBy.dropFirst(4))}")
                } catch {
                    XCTFail("\(error)")
                }
            }
        }
        group.wait()
        XCTAssertEqual(results.values.filter { $0 }.count, 1)
        XCTAssertEqual(results.values.count, 6)
        let marker = try XCTUnwrap(db.marker(zone: "z", name: "seed"))
        let again = try db.createMarker(zone: "z", name: "seed", device: "late", payload: "other")
        XCTAssertFalse(again.created)
        XCTAssertEqual(again.marker, marker)
        XCTAssertNil(try db.marker(zone: "z", name: "other"))
    }

    func testDevicesAreRegisteredAndSeenAgain() throws {
        guard let db = try makeContainer("devices") else { return }
        XCTAssertEqual(try db.devices(), [])
        try db.registerDevice(storeID: "B-store", name: "laptop")
        try db.registerDevice(storeID: "A-store", name: "phone")
        let first = try db.devices()
        XCTAssertEqual(first.map(\.storeID), ["A-store", "B-store"])
        XCTAssertEqual(first.map(\.account), ["postgres", "postgres"])
        Thread.sleep(forTimeInterval: 0.01)
        try db.registerDevice(storeID: "B-store", name: "laptop 2")
        let second = try db.devices()
        XCTAssertEqual(second[1].name, "laptop 2")
        XCTAssertEqual(second[1].firstSeen, first[1].firstSeen)
        XCTAssertGreaterThan(second[1].lastSeen, first[1].lastSeen)
    }

    func testConnectionsURLsAndPasswordsStayOutOfMessages() throws {
        XCTAssertEqual(Redaction.connectionString("postgres://alice:s3cret@db.example.com:5433/notes?sslmode=require"),
                       "postgres://alice:<redacted>@db.example.com:5433/notes?sslmode=require")
        XCTAssertEqual(Redaction.connectionString("postgresql://db/notes?password=s3cret&sslmode=verify-full"),
                       "postgresql://db/notes?password=<redacted>&sslmode=verify-full")
        XCTAssertEqual(Redaction.connectionString("postgresql://u:p%40ss@[::1]/d?pass%77ord=x"),
                       "postgresql://u:<redacted>@[::1]/d?pass%77ord=<redacted>")
        XCTAssertEqual(Redaction.connectionString("postgresql:///postgres?host=/tmp/x"),
                       "postgresql:///postgres?host=/tmp/x")
        XCTAssertEqual(Redaction.connectionString("host=db user=alice password='s3 cret' sslmode=require"),
                       "host=db user=alice password=<redacted> sslmode=require")
        let db = try PostgresCloudDatabase(url: "postgres://alice:s3cret@127.0.0.1:1/notes", container: "c",
                                           password: "other-secret", timeout: 2)
        XCTAssertEqual(db.displayURL, "postgres://alice:<redacted>@127.0.0.1:1/notes")
        XCTAssertEqual(db.role, "alice")
        XCTAssertThrowsError(try db.ensureZone("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .temporary)
            XCTAssertEqual((error as? CloudError)?.exitCode, .tempFail)
            XCTAssertFalse("\(error)".contains("s3cret"), "\(error)")
            XCTAssertFalse("\(error)".contains("other-secret"), "\(error)")
        }
        XCTAssertThrowsError(try PostgresCloudDatabase(url: "postgres://alice:s3cret@db/x?bogus=1", container: "c"))
        { error in
            XCTAssertEqual((error as? CloudError)?.kind, .invalid)
            XCTAssertEqual((error as? CloudError)?.summary,
                           "postgres://alice:<redacted>@db/x?bogus=1 is not a valid PostgreSQL connection URL")
        }
        XCTAssertThrowsError(try PostgresCloudDatabase(url: "postgres://db/x?bogus=1", container: "c")) { error in
            XCTAssertEqual((error as? CloudError)?.summary, "postgres://db/x?bogus=1 is not a valid PostgreSQL "
                + "connection URL: invalid URI query parameter: \"bogus\"")
        }
    }

    func testSslmodeIsPassedThroughToLibpq() throws {
        guard let url = PostgresTestServer.url() else { return }
        // libpq ignores sslmode on unix sockets, but it still checks the value: a bad one proves it got there.
        let sep = url.contains("?") ? "&" : "?"
        let bogus = try PostgresCloudDatabase(url: url + sep + "sslmode=bogus",
                                              container: PostgresTestServer.uniqueContainer("ssl"))
        XCTAssertThrowsError(try bogus.initializeContainer()) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .invalid)
            XCTAssertTrue("\(error)".contains("invalid sslmode value: \"bogus\""), "\(error)")
        }
        XCTAssertEqual(bogus.accountStatus().status, .couldNotDetermine)
        let disabled = try PostgresCloudDatabase(url: url + sep + "sslmode=disable",
                                                 container: PostgresTestServer.uniqueContainer("ssl"))
        dropAfterTest(disabled)
        XCTAssertTrue(try disabled.initializeContainer().created)
    }

    func testArrayLiteralsAreTheSameAsTheSimpleEncodersAndReadBackExactly() throws {
        let values: [String?] = ["", "plain", "\"", "\\", "\\\"", "a\"b\\c\"", nil, "é ☃ 😀",
                                 "{\"k\":[1,\"x,y\"]}", "NULL", " spaced ", "\u{0}"]
        XCTAssertEqual(PGConnInfo.textArrayLiteral(values), PGConnInfo.textArray(values))
        XCTAssertEqual(PGConnInfo.textArrayLiteral([]), "{}")
        XCTAssertEqual(PGConnInfo.textArrayLiteral([nil]), "{NULL}")
        XCTAssertNil(PGConnInfo.separatedText(["{}", ""]))
        XCTAssertNil(PGConnInfo.separatedText(["{}", "{\"a\":\"\u{1e}\"}"]))
        XCTAssertEqual(PGConnInfo.separatedText(["{}"]), "{}")
        guard let url = PostgresTestServer.url() else { return }
        let sent = Array(values.dropLast())  // PostgreSQL text cannot hold NUL
        let r = try PostgresTestServer.superuser(url, "SELECT v FROM unnest($1::text[]) WITH ORDINALITY AS t(v, o) "
            + "ORDER BY o", [PGConnInfo.textArrayLiteral(sent)])
        XCTAssertEqual((0..<r.rowCount).map { r.string($0, 0) }, sent)
        let texts = ["{\"q\":\"\\\" \\\\ ,{}\"}", "{}", "{\"é\":\"☃\"}", " {\"a\" : [1, 2] } "]
        let split = try PostgresTestServer.superuser(url, "SELECT v FROM unnest(string_to_array($1, chr(30))) "
            + "WITH ORDINALITY AS t(v, o) ORDER BY o", [PGConnInfo.separatedText(texts)])
        XCTAssertEqual((0..<split.rowCount).map { split.string($0, 0) }, texts)
    }

    func testGrantSQL() {
        let schema = PostgresCloudDatabase.schemaName(container: "iCloud.com.example.notes")
        XCTAssertEqual(PostgresCloudDatabase.grantSQL(container: "iCloud.com.example.notes", role: "app\"user"), """
            -- storectl: access for role "app""user" to container iCloud.com.example.notes (schema "\(schema)")
            GRANT USAGE ON SCHEMA "\(schema)" TO "app""user";
            GRANT SELECT ON TABLE "\(schema)"."meta" TO "app""user";
            GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "\(schema)"."zones" TO "app""user";
            GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "\(schema)"."records" TO "app""user";
            GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "\(schema)"."markers" TO "app""user";
            GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "\(schema)"."devices" TO "app""user";
            GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "\(schema)"."export_marks" TO "app""user";
            GRANT SELECT, INSERT, DELETE ON TABLE "\(schema)"."superseded_saves" TO "app""user";
            GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "\(schema)"."shares" TO "app""user";
            GRANT SELECT ON TABLE "\(schema)"."former_writers" TO "app""user";

            """)
    }
}

/// Values gathered from several threads.
final class ResultBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []

    func append(_ value: T) {
        lock.lock()
        items.append(value)
        lock.unlock()
    }

    var values: [T] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }
}

extension RecordSave {
    /// The same save under another record name.
    func renamed(_ name: String) -> RecordSave {
        var copy = self
        copy.recordName = name
        return copy
    }
}
