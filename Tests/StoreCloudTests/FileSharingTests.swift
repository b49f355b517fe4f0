import Foundation
@testable import StoreCloud
import StoreSQLite
import TestSupport
import XCTest

/// Shares in a container file: the upgrade of a format-3 container (zones without owners), and records forged into
/// the file by an account that may not write the zone.
final class FileSharingTests: XCTestCase {
    /// The container file format 3, as that release created it: zones without an owner, no shares.
    static let format3SQL = """
        CREATE TABLE container_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE accounts(id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('owner', 'member')), disabled INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL) WITHOUT ROWID;
        CREATE TABLE zones(name TEXT PRIMARY KEY, epoch TEXT NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL) WITHOUT ROWID;
        CREATE TABLE records(zone TEXT NOT NULL, record_name TEXT NOT NULL, record_type TEXT NOT NULL,
            fields TEXT NOT NULL CHECK (CASE WHEN json_valid(fields) THEN json_type(fields) = 'object' ELSE 0 END),
            change_tag TEXT NOT NULL, seq INTEGER NOT NULL, deleted INTEGER NOT NULL DEFAULT 0,
            modified_by TEXT NOT NULL, modified_at REAL NOT NULL, PRIMARY KEY (zone, record_name)) WITHOUT ROWID;
        CREATE UNIQUE INDEX records_by_seq ON records(zone, seq);
        CREATE TABLE export_marks(zone TEXT NOT NULL, device TEXT NOT NULL, last_seq INTEGER NOT NULL,
            first_seq INTEGER NOT NULL, serial INTEGER NOT NULL, history_seq INTEGER NOT NULL,
            saved_at INTEGER NOT NULL, PRIMARY KEY (zone, device, last_seq)) WITHOUT ROWID;
        CREATE TABLE superseded_saves(zone TEXT NOT NULL, device TEXT NOT NULL, seq INTEGER NOT NULL,
            serial INTEGER NOT NULL, record_name TEXT NOT NULL, record_type TEXT NOT NULL, fields TEXT NOT NULL,
            change_tag TEXT NOT NULL, deleted INTEGER NOT NULL, modified_at REAL NOT NULL,
            PRIMARY KEY (zone, device, seq)) WITHOUT ROWID;
        CREATE TRIGGER records_superseded AFTER UPDATE ON records
        WHEN old.modified_by <> new.modified_by
        BEGIN
            INSERT OR IGNORE INTO superseded_saves(zone, device, seq, serial, record_name, record_type, fields,
                                                   change_tag, deleted, modified_at)
            SELECT old.zone, old.modified_by, old.seq, m.serial, old.record_name, old.record_type, old.fields,
                   old.change_tag, old.deleted, old.modified_at
            FROM export_marks m
            WHERE m.zone = old.zone AND m.device = old.modified_by AND m.last_seq >= old.seq
              AND m.first_seq <= old.seq;
        END;
        CREATE TABLE markers(zone TEXT NOT NULL, name TEXT NOT NULL, created_by TEXT NOT NULL,
            created_at REAL NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (zone, name)) WITHOUT ROWID;
        CREATE TABLE devices(store_id TEXT PRIMARY KEY, name TEXT NOT NULL, account TEXT, first_seen REAL NOT NULL,
            last_seen REAL NOT NULL) WITHOUT ROWID;
        INSERT INTO container_meta VALUES ('format', 'storectl-cloud-container'), ('version', '3'),
            ('container', 'c.old'), ('created_at', '1'), ('hash_iterations', '1');
        INSERT INTO zones VALUES ('notes', 'e1', 2, 1), ('todo', 'e2', 0, 1);
        INSERT INTO records VALUES ('notes', 'a', 't', '{"n":1}', '1-e1', 1, 0, 'alice-laptop', 1),
            ('notes', 'b', 't', '{"n":2}', '2-e1', 2, 0, 'bob-phone', 1);
        INSERT INTO devices VALUES ('alice-laptop', 'laptop', 'alice', 1, 1), ('bob-phone', 'phone', 'bob', 1, 1),
            ('carol-pc', 'pc', 'carol', 1, 1), ('old-device', 'old', NULL, 1, 1);
        """

    /// A format-3 container at `path` with `accounts` (id, role, created_at), each with the secret `<id>-secret`.
    private func makeFormat3(_ path: String, accounts: [(String, String, Double)]) throws {
        let raw = try Connection(path: path, mode: .readWriteCreate)
        try raw.execute(Self.format3SQL)
        for (id, role, created) in accounts {
            try raw.run("INSERT INTO accounts VALUES (?, ?, ?, 0, ?)",
                        [id, try PasswordHash.make(secret: id + "-secret", iterations: 1), role, created])
        }
    }

    private func open(_ path: String, _ account: String) throws -> FileCloudDatabase {
        try FileCloudDatabase.open(path: path, container: "c.old", account: account, secret: account + "-secret")
    }

    func testAFormat3ContainerGivesItsZonesToItsOwnerAndItsSyncingAccountsAShare() throws {
        let dir = try TempDirectory("storectl-share-upgrade")
        let path = dir.file("old.container")
        // olga became an owner later; dave never synced; zoe is the first owner but disabled.
        try makeFormat3(path, accounts: [("zoe", "owner", 0.5), ("alice", "owner", 1), ("olga", "owner", 2),
                                         ("bob", "member", 3), ("carol", "member", 4), ("dave", "member", 5)])
        let raw = try Connection(path: path, mode: .readWrite)
        try raw.run("UPDATE accounts SET disabled = 1 WHERE id = 'zoe'")
        let alice = try open(path, "alice")
        XCTAssertTrue(FileManager.default.fileExists(atPath: path + ".format3.bak"))
        XCTAssertEqual(try raw.scalar("SELECT value FROM container_meta WHERE key = 'version'")?.string,
                       String(FileCloudDatabase.formatVersion))
        XCTAssertEqual(try raw.scalar("SELECT value FROM container_meta WHERE key = 'upgraded_from'")?.string, "3")
        for zone in ["notes", "todo"] {
            let shares = try alice.shareParticipants(zone: zone)
            XCTAssertEqual(shares.owner, "alice")
            XCTAssertEqual(shares.participants.map(\.account), ["bob", "carol"])
            XCTAssertEqual(Set(shares.participants.map(\.permission)), [.readWrite])
            XCTAssertEqual(Set(shares.participants.map(\.addedBy)), ["upgrade"])
        }
        // Whoever synced keeps syncing; the others need a share.
        XCTAssertEqual(try open(path, "bob").fetchChanges(zone: "notes", since: nil, limit: 10).records.count, 2)
        let carol = try open(path, "carol")
        _ = try carol.save(zone: "notes", [RecordSave(recordName: "c", recordType: "t", fields: "{}",
                                                      expectedTag: nil)], device: "carol-pc")
        for account in ["dave", "olga"] {
            XCTAssertThrowsError(try open(path, account).zoneInfo("notes")) { error in
                XCTAssertEqual((error as? CloudError)?.kind, .permission, "\(account): \(error)")
            }
        }
        // An owner of the container still purges (and records nothing else of another's zone).
        try open(path, "olga").purgeZone("todo")
    }

    func testAFormat3ContainerWithoutAccountsKeepsItsZonesOpen() throws {
        let dir = try TempDirectory("storectl-share-anonymous")
        let path = dir.file("old.container")
        try makeFormat3(path, accounts: [])
        let first = try FileCloudDatabase.open(path: path, container: "c.old", account: nil, secret: nil)
        // The container's first account may come from anyone, as before; the old zones have no owner.
        try first.addAccount(id: "erin", secret: "erin-secret", role: .member)
        let erin = try open(path, "erin")
        let info = try XCTUnwrap(try erin.zoneInfo("notes"))
        XCTAssertNil(info.owner)
        XCTAssertEqual(info.access, .owner)
        XCTAssertEqual(try erin.fetchChanges(zone: "notes", since: nil, limit: 10).records.map(\.rejection), [nil, nil])
        _ = try erin.save(zone: "notes", [RecordSave(recordName: "e", recordType: "t", fields: "{}",
                                                     expectedTag: nil)], device: "erin-device")
        XCTAssertThrowsError(try erin.addShare(zone: "notes", account: "erin", permission: .readOnly)) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .invalid, "\(error)")
        }
        // A new zone is its creator's.
        XCTAssertEqual(try erin.ensureZone("fresh").owner, "erin")
    }

    /// A record written straight into the file, as saved by an account that may not write the zone, comes back with
    /// a rejection; records of the owner and of read-write participants do not. A record no account is recorded to
    /// have saved (no `saved_by` range holds its seq) is rejected too.
    func testARecordForgedByAnAccountThatMayNotWriteIsRejected() throws {
        let dir = try TempDirectory("storectl-share-forged")
        let path = dir.file("shared.container")
        let alice = try FileCloudDatabase.create(path: path, container: "c.old", account: "alice",
                                                 secret: "alice-secret", iterations: 1).database
        try alice.ensureZone("notes")
        for id in ["bob", "carol", "eve"] { try alice.addAccount(id: id, secret: id + "-secret", role: .member) }
        try alice.addShare(zone: "notes", account: "bob", permission: .readOnly)
        try alice.addShare(zone: "notes", account: "carol", permission: .readWrite)
        try alice.registerDevice(storeID: "alice-laptop", name: "laptop")
        for id in ["bob", "carol", "eve"] { try open(path, id).registerDevice(storeID: id + "-device", name: id) }
        let raw = try Connection(path: path, mode: .readWrite)
        try raw.execute("""
            INSERT INTO records VALUES ('notes', 'by-alice', 't', '{}', 't1', 1, 0, 'alice-laptop', 0),
                ('notes', 'by-carol', 't', '{}', 't2', 2, 0, 'carol-device', 0),
                ('notes', 'by-bob', 't', '{}', 't3', 3, 0, 'bob-device', 0),
                ('notes', 'by-eve', 't', '{"evil":1}', 't4', 4, 1, 'eve-device', 0),
                ('notes', 'by-unknown', 't', '{}', 't5', 5, 0, 'unknown-device', 0);
            INSERT INTO saved_by(zone, last_seq, first_seq, account) VALUES ('notes', 1, 1, 'alice'),
                ('notes', 2, 2, 'carol'), ('notes', 3, 3, 'bob'), ('notes', 4, 4, 'eve');
            UPDATE zones SET last_seq = 5 WHERE name = 'notes';
            """)
        let page = try alice.fetchChanges(zone: "notes", since: nil, limit: 10)
        XCTAssertEqual(page.records.map(\.recordName), ["by-alice", "by-carol", "by-bob", "by-eve", "by-unknown"])
        XCTAssertEqual(page.records.map(\.rejection), [
            nil, nil,
            "saved by device bob-device of account 'bob', who may not write zone 'notes'",
            "saved by device eve-device of account 'eve', who may not write zone 'notes'",
            "saved by device unknown-device (registered to no account) without a saving account on record (written "
                + "outside storectl); not applied to zone 'notes'",
        ])
        XCTAssertEqual(try open(path, "carol").fetchRecord(zone: "notes", recordName: "by-eve")?.rejection,
                       "saved by device eve-device of account 'eve', who may not write zone 'notes'")
        XCTAssertNil(try alice.fetchRecord(zone: "notes", recordName: "by-carol")?.rejection)
        // A page of one record is checked the same way.
        let small = try alice.fetchChanges(zone: "notes", since: ServerChangeToken(epoch: page.token.epoch, seq: 3),
                                           limit: 1)
        XCTAssertEqual(small.records.first?.rejection,
                       "saved by device eve-device of account 'eve', who may not write zone 'notes'")
        // Given read-write access, eve's saves stand.
        try alice.addShare(zone: "notes", account: "eve", permission: .readWrite)
        XCTAssertNil(try alice.fetchRecord(zone: "notes", recordName: "by-eve")?.rejection)
    }

    /// The change feed stays a walk of the (zone, seq) index with the check of the saver's account.
    func testTheCheckedChangeFeedWalksTheSeqIndex() throws {
        let dir = try TempDirectory("storectl-share-plan")
        let path = dir.file("shared.container")
        _ = try FileCloudDatabase.create(path: path, container: "c.plan", account: "alice", secret: "alice-secret",
                                         iterations: 1)
        let raw = try Connection(path: path, mode: .readOnly)
        let plan = try raw.query("""
            EXPLAIN QUERY PLAN SELECT \(FileCloudDatabase.checkedRecordSQL)
            WHERE r.zone = ?1 AND r.seq > ?2 AND r.modified_by IS NOT ?4 ORDER BY r.seq LIMIT ?3
            """, ["notes", 0, 10, nil as String?, "alice"]).map { $0[3].string ?? "" }.joined(separator: "\n")
        XCTAssertTrue(plan.contains("records_by_seq"), plan)
        XCTAssertFalse(plan.contains("TEMP B-TREE"), plan)
        XCTAssertTrue(plan.contains("SEARCH d USING PRIMARY KEY (store_id=?)"), plan)
        XCTAssertTrue(plan.contains("SEARCH s USING PRIMARY KEY (zone=? AND account=?)"), plan)
    }
}
