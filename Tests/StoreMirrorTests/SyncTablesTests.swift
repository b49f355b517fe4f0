import Foundation
import StoreCloud
import StoreHistory
@testable import StoreMirror
import StoreSQLite
import TestSupport
import XCTest

/// The sync engine's state lives in one place: every persistent table declared and made by `SyncTables`, and the
/// record map, its aliases and rename marks written by `RecordMap` alone.
final class SyncTablesTests: XCTestCase {
    private static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Sources")

    /// Every Swift source file under Sources/, with its path relative to Sources/.
    private func sourceFiles() throws -> [(path: String, text: String)] {
        let root = Self.sources.path
        var out: [(String, String)] = []
        let walker = FileManager.default.enumerator(atPath: root)
        while let relative = walker?.nextObject() as? String {
            guard relative.hasSuffix(".swift") else { continue }
            out.append((relative, try String(contentsOfFile: root + "/" + relative, encoding: .utf8)))
        }
        XCTAssertGreaterThan(out.count, 50, "the sources were not found at \(root)")
        return out
    }

    /// Where `pattern` matches in the sources, outside `allowed` files, as `path: match` lines.
    private func matches(_ pattern: String, outside allowed: Set<String>) throws -> [String] {
        let regex = try NSRegularExpression(pattern: pattern, options: [.caseInsensitive])
        var found: [String] = []
        for (path, text) in try sourceFiles() where !allowed.contains((path as NSString).lastPathComponent) {
            let range = NSRange(text.startIndex..., in: text)
            for match in regex.matches(in: text, range: range) {
                found.append(path + ": " + (text as NSString).substring(with: match.range))
            }
        }
        return found
    }

    func testOnlyRecordMapWritesTheMapItsAliasesAndItsRenameMarks() throws {
        let tables = "(main\\.)?_storectl_(records|aliases|renamed)\\b"
        let write = "(INSERT(\\s+OR\\s+\\w+)?\\s+INTO|REPLACE\\s+INTO|UPDATE(\\s+OR\\s+\\w+)?|DELETE\\s+FROM)\\s+" + tables
        XCTAssertEqual(try matches(write, outside: ["RecordMap.swift"]), [],
                       "statements that write the record map outside RecordMap")
        // The check itself finds what it looks for: every kind of write, in RecordMap.
        let everywhere = try matches(write, outside: [])
        XCTAssertGreaterThanOrEqual(everywhere.count, 15)
        for needle in ["INSERT INTO _storectl_records", "UPDATE main._storectl_records", "INSERT OR REPLACE INTO _storectl_aliases",
                       "DELETE FROM _storectl_renamed", "INSERT OR IGNORE INTO _storectl_records"]
        {
            XCTAssertTrue(everywhere.contains { $0.hasSuffix(needle) && $0.contains("RecordMap.swift") }, needle)
        }
    }

    func testEveryPersistentEngineTableIsDeclaredInSyncTables() throws {
        // A persistent `_storectl_` table made anywhere else (the history format's own tables are StoreFormat's).
        let made = try matches("CREATE\\s+TABLE\\s+(IF\\s+NOT\\s+EXISTS\\s+)?(main\\.)?_storectl_\\w+",
                               outside: ["SyncTables.swift", "StoreFormat.swift"])
        XCTAssertEqual(made, [], "engine tables made outside SyncTables")
        XCTAssertEqual(Set(SyncTables.names), [
            "_storectl_records", "_storectl_aliases", "_storectl_renamed", "_storectl_inbox", "_storectl_outgoing",
        ])
        // `cloud check` knows each of them as storectl's own, not a user's table.
        XCTAssertTrue(Set(SyncTables.names).isSubset(of: CloudCheck.ownTables))
    }

    func testANewStoreGetsEveryTableInOneInstallAndAnotherIsANoOp() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        try MirrorState.install(db)
        let present = Set(try db.query("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap { $0[0].string })
        XCTAssertTrue(Set(SyncTables.names).isSubset(of: present), "missing: \(Set(SyncTables.names).subtracting(present))")
        XCTAssertEqual(try StoreMeta.value(db, .syncTables), String(SyncTables.version))
        let before = try f.dump(db)
        try MirrorState.install(db)
        XCTAssertEqual(try f.dump(db), before)
    }

    func testAnOlderStoresTablesAreBroughtToThisVersionKeepingTheirRows() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        // The engine tables as a format-1 store had them: no `extra`, no unsent rows nor rename marks, no version.
        try db.execute("""
            CREATE TABLE _storectl_records(entity TEXT NOT NULL, pk TEXT NOT NULL, record_name TEXT NOT NULL,
                change_tag TEXT, base TEXT, deleted INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (entity, pk)) WITHOUT ROWID;
            CREATE UNIQUE INDEX _storectl_records_name ON _storectl_records(record_name);
            INSERT INTO _storectl_records VALUES ('notes', '[1]', 'notes/1', 't1', NULL, 0);
            CREATE TABLE _storectl_outbox(record_name TEXT PRIMARY KEY, record_type TEXT NOT NULL, change_tag TEXT,
                reason TEXT NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID;
            INSERT INTO _storectl_outbox VALUES ('notes/9', 'notes', 't9', 'its parent was deleted', 0);
            """)
        try MirrorState.install(db)
        XCTAssertTrue(try db.columns(of: "_storectl_records").contains { $0.name == "extra" })
        XCTAssertEqual(try db.scalar("SELECT record_name || ' ' || change_tag FROM _storectl_records")?.string,
                       "notes/1 t1")
        XCTAssertEqual(try db.scalar("SELECT record_name || ' ' || kind || ' ' || reason FROM _storectl_outgoing")?.string,
                       "notes/9 delete parent_deleted")
        XCTAssertFalse(try db.tableExists("_storectl_outbox"))
        for name in SyncTables.names { XCTAssertTrue(try db.tableExists(name), name) }
        XCTAssertNotNil(try db.scalar("SELECT 1 FROM sqlite_master WHERE name = '_storectl_records_extra'"))
        XCTAssertEqual(try StoreMeta.value(db, .syncTables), String(SyncTables.version))
    }

    func testSettingANameDetachesItFromTheKeyThatHeldIt() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        try MirrorState.install(db)
        let map = RecordMap(db)
        try map.record(entity: "notes", pk: "[1]", name: "notes/a", tag: "t1", base: .text("{\"title\":\"x\"}"),
                       extra: nil, deleted: false)
        // The same name for another key (a deleted row's rowid reused): the name moves, never held twice.
        try map.record(entity: "notes", pk: "[2]", name: "notes/a", tag: "t2", base: nil, extra: "{\"gone\":1}",
                       deleted: false)
        XCTAssertEqual(try db.query("SELECT pk, change_tag, extra FROM _storectl_records").map { $0.values },
                       [[.text("[2]"), .text("t2"), .text("{\"gone\":1}")]])
        try map.set(entity: "notes", pk: "[3]", name: "notes/a", tag: nil, base: nil, deleted: true)
        XCTAssertEqual(try db.query("SELECT pk, deleted FROM _storectl_records").map { $0.values },
                       [[.text("[3]"), .integer(1)]])
        // The base is a fingerprint of the fields, never their values.
        try map.setSynced(name: "notes/a", tag: "t3", fields: "{\"title\":\"secret words\"}")
        XCTAssertEqual(try db.scalar("SELECT typeof(base) FROM _storectl_records")?.string, "blob")
        XCTAssertEqual(try db.scalar("SELECT instr(CAST(base AS TEXT), 'secret') FROM _storectl_records")?.int64, 0)
    }

    func testAnAliasNeverPointsAtAnotherAlias() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        try MirrorState.install(db)
        let map = RecordMap(db)
        try map.alias("notes/b", to: "notes/c", entity: "notes")
        try map.alias("notes/c", to: "notes/d", entity: "notes")
        XCTAssertEqual(try map.aliasTarget(of: "notes/b"), "notes/d")
        XCTAssertEqual(try map.aliasTarget(of: "notes/c"), "notes/d")
        XCTAssertNil(try map.aliasTarget(of: "notes/d"))
    }

    func testRekeyingAPermutationKeepsEachRecordWithItsRowAndItsExtraFields() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        try MirrorState.install(db)
        let map = RecordMap(db)
        try map.record(entity: "notes", pk: "[1]", name: "n/1", tag: "t1", base: nil, extra: "{\"x\":1}", deleted: false)
        try map.record(entity: "notes", pk: "[2]", name: "n/2", tag: "t2", base: nil, extra: nil, deleted: false)
        try db.execute("""
            CREATE TEMP TABLE pairs(old_pk TEXT PRIMARY KEY, new_pk TEXT UNIQUE);
            INSERT INTO pairs VALUES ('[1]', '[2]'), ('[2]', '[1]');
            CREATE TEMP TABLE was(pk TEXT PRIMARY KEY);
            INSERT INTO was VALUES ('[1]'), ('[2]');
            """)
        try map.rekey(entity: "notes", pairs: "temp.pairs", was: "temp.was")
        XCTAssertEqual(try db.query("SELECT pk, record_name, extra FROM _storectl_records ORDER BY pk").map { $0.values },
                       [[.text("[1]"), .text("n/2"), .null], [.text("[2]"), .text("n/1"), .text("{\"x\":1}")]])
    }

    func testOnlyInboxWritesTheInbox() throws {
        let write = "(INSERT(\\s+OR\\s+\\w+)?\\s+INTO|REPLACE\\s+INTO|UPDATE(\\s+OR\\s+\\w+)?|DELETE\\s+FROM)\\s+"
            + "(main\\.)?_storectl_inbox\\b"
        XCTAssertEqual(try matches(write, outside: ["Inbox.swift"]), [], "statements that write the inbox outside Inbox")
        XCTAssertGreaterThanOrEqual(try matches(write, outside: []).count, 5, "the check finds the writes in Inbox")
        // No other table keeps waiting records: the old ones are only read by the install that moves them.
        XCTAssertEqual(try matches("CREATE\\s+(TEMP\\s+)?TABLE\\s+(IF\\s+NOT\\s+EXISTS\\s+)?(temp\\.|main\\.)?_storectl_(pending|quarantine|deferred)\\b",
                                   outside: []), [])
    }

    func testARecordIsInOneStateAtATimeAndEveryStateDecodesTheSameWay() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        try MirrorState.install(db)
        let inbox = Inbox(db)
        let one = CloudRecord(zone: "z", recordName: "n/1", recordType: "notes", fields: "{\"title\":\"a\"}",
                              changeTag: "t1", seq: 7, deleted: false, modifiedBy: "dev", modifiedAt: 1.5)
        var two = one
        two.recordName = "n/2"; two.fields = "{}"; two.changeTag = "t2"; two.seq = 8; two.deleted = true
        try inbox.put(one, .waiting)
        try inbox.put(two, .setAside, problem: RecordProblem(reason: "r", hint: "h"))
        XCTAssertEqual(try inbox.records(.waiting, zone: "z"), [one])
        XCTAssertEqual(try inbox.records(.setAside, zone: "z"), [two])
        try inbox.put(two, .setAside, problem: RecordProblem(reason: "r2", hint: "h"))
        XCTAssertEqual(try db.scalar("SELECT attempts || reason FROM _storectl_inbox WHERE record_name = 'n/2'")?.string,
                       "2r2")
        // A newer version held back replaces the set-aside one; taking it out of another state leaves it.
        var newer = two
        newer.seq = 9
        try inbox.put(newer, .held)
        try inbox.remove("n/2", from: .setAside)
        XCTAssertEqual(try inbox.counts(), [.waiting: 1, .held: 1])
        XCTAssertEqual(try db.scalar("SELECT attempts FROM _storectl_inbox WHERE record_name = 'n/2'")?.int64, 1)
        XCTAssertEqual(try inbox.take(.held, zone: "z"), [newer])
        XCTAssertFalse(try inbox.has(.held))
        XCTAssertTrue(try inbox.holds("n/1", in: [.waiting]))
        XCTAssertFalse(try inbox.holds("n/1", in: [.setAside, .held]))
        // The state is a closed set.
        XCTAssertThrowsError(try db.execute("""
            INSERT INTO _storectl_inbox(record_name, record_type, fields, change_tag, seq, state, first_seen, last_tried)
            VALUES ('x', 'notes', '{}', '', 1, 'parked', 0, 0)
            """))
    }

    func testAVersion1StoresWaitingRecordsMoveIntoTheInbox() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        // The two tables sync tables version 1 kept waiting records in; 'n/2' is in both, newer when set aside.
        try db.execute("""
            CREATE TABLE _storectl_pending(record_name TEXT PRIMARY KEY, record_type TEXT NOT NULL, fields TEXT NOT NULL,
                change_tag TEXT NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE _storectl_quarantine(record_name TEXT PRIMARY KEY, record_type TEXT NOT NULL,
                fields TEXT NOT NULL, change_tag TEXT NOT NULL, seq INTEGER NOT NULL, deleted INTEGER NOT NULL DEFAULT 0,
                reason TEXT NOT NULL, hint TEXT, first_seen INTEGER NOT NULL, last_tried INTEGER NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 1) WITHOUT ROWID;
            INSERT INTO _storectl_pending VALUES ('n/1', 'notes', '{"a":1}', 't1', 7), ('n/2', 'notes', '{"a":2}', 't2', 8);
            INSERT INTO _storectl_quarantine VALUES ('n/2', 'notes', '{"a":3}', 't3', 9, 0, 'why', 'fix', 5, 6, 4),
                ('n/3', 'notes', '', 't4', 10, 1, 'too large', NULL, 5, 6, 2);
            """)
        try MirrorState.install(db)
        XCTAssertFalse(try db.tableExists("_storectl_pending"))
        XCTAssertFalse(try db.tableExists("_storectl_quarantine"))
        XCTAssertEqual(try db.query("""
            SELECT record_name, fields, change_tag, seq, deleted, state, coalesce(reason, '-'), attempts
            FROM _storectl_inbox ORDER BY record_name
            """).map { $0.values.map(\.description).joined(separator: " ") }, [
            "n/1 {\"a\":1} t1 7 0 waiting - 1",
            "n/2 {\"a\":3} t3 9 0 set_aside why 4",
            "n/3  t4 10 1 set_aside too large 2",
        ])
        let unsettled = try MirrorState.unsettled(db)
        XCTAssertEqual(unsettled.waitingForParent.map(\.recordName), ["n/1"])
        XCTAssertEqual(unsettled.setAside.map(\.recordName), ["n/2", "n/3"])
    }

    func testAnOlderStoreReadWithoutWritingReportsItsWaitingRecords() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        try db.execute("""
            CREATE TABLE _storectl_pending(record_name TEXT PRIMARY KEY, record_type TEXT NOT NULL, fields TEXT NOT NULL,
                change_tag TEXT NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
            INSERT INTO _storectl_pending VALUES ('n/1', 'notes', '{"a":1}', 't1', 7);
            """)
        XCTAssertEqual(try MirrorState.unsettled(db).waitingForParent.map(\.recordName), ["n/1"])
        XCTAssertEqual(try MirrorState.unsettledCounts(db).pending, 1)
        XCTAssertEqual(try MirrorState.unsettledCounts(db).quarantined, 0)
    }

    /// A key holds NULL when a `null` stands outside every string of the JSON array SQLite makes of it.
    func testAKeyHoldsNullOnlyOutsideItsStrings() throws {
        let db = try Connection(path: ":memory:", wal: false)
        for (key, holds) in [("NULL", true), ("'null'", false), ("'x', NULL", true), ("'a\"null'", false),
                             ("'\\', NULL", true), ("'\\\"null'", false), ("1, 2", false), ("'nul', 'l'", false)] {
            let json = try db.scalar("SELECT json_array(\(key))")?.string ?? ""
            XCTAssertEqual(Exporter.keyHoldsNull(json), holds, json)
        }
    }

    func testOutgoingReasonsAreCodesAndAnOlderStoresWordsKeepTheirMeaning() {
        // The words older versions stored: a store's queued tombstones keep their meaning.
        XCTAssertEqual(Outgoing.Reason(storedText: "its row was deleted and its rowid reused by a new row"), .reusedRowid)
        XCTAssertEqual(Outgoing.Reason(storedText: "its parent was deleted"), .parentDeleted)
        XCTAssertEqual(Outgoing.Reason(storedText: "duplicate of 'x' by name"), .leftByCrash)
        XCTAssertTrue(Outgoing.Reason.reusedRowid.isUserDelete)
        XCTAssertFalse(Outgoing.Reason.newParent.isUserDelete)
        XCTAssertFalse(Outgoing.Reason(storedText: "duplicate of 'x' by name").isUserDelete)
        XCTAssertEqual(Outgoing.Reason.allCases.filter { $0.kind == .save }, [.tooLarge, .keyNotUTF8, .keyNull])
    }

    func testOnlyOutgoingWritesTheOutgoingQueue() throws {
        let write = "(INSERT(\\s+OR\\s+\\w+)?\\s+INTO|REPLACE\\s+INTO|UPDATE(\\s+OR\\s+\\w+)?|DELETE\\s+FROM)\\s+"
            + "(main\\.)?_storectl_(outgoing|outbox|unsent)\\b"
        XCTAssertEqual(try matches(write, outside: ["Outgoing.swift"]), [], "statements that write the queue outside Outgoing")
        XCTAssertGreaterThanOrEqual(try matches(write, outside: []).count, 4)
    }

    func testAVersion1StoresOutboxAndUnsentRowsMoveIntoTheQueue() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        try db.execute("""
            CREATE TABLE _storectl_records(entity TEXT NOT NULL, pk TEXT NOT NULL, record_name TEXT NOT NULL,
                change_tag TEXT, base TEXT, deleted INTEGER NOT NULL DEFAULT 0, extra TEXT,
                PRIMARY KEY (entity, pk)) WITHOUT ROWID;
            INSERT INTO _storectl_records VALUES ('notes', '[2]', 'notes/2', 't2', NULL, 0, NULL);
            CREATE TABLE _storectl_outbox(record_name TEXT PRIMARY KEY, record_type TEXT NOT NULL, change_tag TEXT,
                reason TEXT NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID;
            INSERT INTO _storectl_outbox VALUES
                ('notes/8', 'notes', 't8', 'its row was deleted and its rowid reused by a new row', 0),
                ('notes/9', 'notes', 't9', 'some words of an older version', 0);
            CREATE TABLE _storectl_unsent(entity TEXT NOT NULL, pk TEXT NOT NULL, bytes INTEGER, reason TEXT NOT NULL,
                PRIMARY KEY (entity, pk)) WITHOUT ROWID;
            INSERT INTO _storectl_unsent VALUES ('notes', '[2]', 900, 'its record is 900 bytes, more than max_record_size (10)');
            """)
        // Read without writing first: the old tables are reported as they are.
        XCTAssertEqual(try MirrorState.unsettled(db).outbox, 2)
        XCTAssertEqual(try MirrorState.unsettled(db).unsent.map(\.bytes), [900])
        try MirrorState.install(db)
        XCTAssertEqual(try db.query("""
            SELECT record_name, kind, reason, coalesce(pk, '-'), coalesce(bytes, '-') FROM _storectl_outgoing
            ORDER BY record_name
            """).map { $0.values.map(\.description).joined(separator: " ") }, [
            "notes/2 save too_large [2] 900", "notes/8 delete reused_rowid - -", "notes/9 delete left_by_crash - -",
        ])
        let report = try MirrorState.unsettled(db)
        XCTAssertEqual(report.outbox, 2)
        XCTAssertEqual(report.unsent, [RowRef(entity: "notes", key: "[2]", bytes: 900,
                                              reason: "its record is 900 bytes, more than max_record_size (10)")])
        XCTAssertEqual(try Outgoing(db).deletes().map(\.reason), [.reusedRowid, .leftByCrash])
        XCTAssertEqual(try MirrorState.unsettledCounts(db).unsent, 1)
        // A row keeps one save, under the name it has now; sending it takes it out.
        try Outgoing(db).unsent(entity: "notes", pk: "[2]", name: "notes/2b", reason: .tooLarge, bytes: 901, detail: "d")
        XCTAssertEqual(try db.scalar("SELECT group_concat(record_name) FROM _storectl_outgoing WHERE kind = 'save'")?.string,
                       "notes/2b")
        try Outgoing(db).sent(entity: "notes", pks: ["[2]"])
        XCTAssertEqual(try MirrorState.unsettledCounts(db).unsent, 0)
    }
}
