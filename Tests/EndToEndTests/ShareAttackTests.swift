import Foundation
import StoreCloudPostgres
import TestSupport
import XCTest

/// Attacks on shared zones, end to end. In extensions of `SharingTests`, so that each runs on a container file
/// and on PostgreSQL (`PostgresSharingEndToEndTests`), or on PostgreSQL only.
extension SharingTests {
    /// A copy of the owner's store, given to a read-only participant who syncs it under its own account on another
    /// machine (pasting the `--rebind` hint it is shown), must not make other stores set the owner's records aside:
    /// the copy keeps the owner's store id, and its registration moved the owner's device to the participant's
    /// account, which may not write the zone.
    func testAParticipantSyncingACopyOfTheOwnersStoreDoesNotDiscreditTheOwnersRecords() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        // alice edits; bob then starts from a copy of alice's store (the owner handed it over), on his own machine
        // (a config of his own that names only his store), under his own account; carol syncs next.
        try p.sql("alice", "UPDATE notes SET title = 'alice after the copy' WHERE id = 1")
        try p.run(["-s", "alice", "sync"])
        let home = try TempDirectory("storectl-share-bob")
        try FileManager.default.copyItem(atPath: p.storePath("alice"), toPath: home.file("notes.sqlite"))
        var bob = try XCTUnwrap(p.stores.first { $0.name == "bob" })
        bob.path = home.file("notes.sqlite")
        if serverURL == nil { bob.cloud?.url = "file:" + p.dir.file("cloud/shared.container") }
        _ = try home.write("config.yaml", E2EProject.yaml([bob]))
        // On bob's machine the path the copy recorded does not exist.
        let moved = try Binary.run("/usr/bin/sqlite3", [home.file("notes.sqlite"),
                                   "UPDATE _storectl_meta SET value = '/home/alice/notes.sqlite' WHERE key = 'store_path'"],
                                   in: home.path)
        XCTAssertEqual(moved.status, 0, "\(moved)")
        // The first sync is refused (the copy is bound to alice's account); bob pastes the hint it prints.
        let refused = try Binary.storectl(["sync"], in: home.path, environment: p.environment)
        XCTAssertTrue(refused.stderr.contains("'storectl sync --rebind'"), "\(refused)")
        let rebound = try Binary.storectl(["sync", "--rebind"], in: home.path, environment: p.environment)
        XCTAssertEqual(rebound.status, 0, "\(rebound)")
        let sync = try p.run(["-s", "carol", "sync", "--json"])
        XCTAssertEqual((json(sync)["imported"] as? [String: Any])?["set_aside"] as? Int ?? 0, 0, sync.stdout)
        let carol = try rows(p, "carol")
        XCTAssertTrue(carol.contains("alice after the copy"), carol)
    }

    /// The `--discard-local` note of a read-only participant's sync, pasted as printed on this four-store config,
    /// runs: it names the store.
    func testTheNotSentNoteNamesTheStore() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        try p.sql("bob", "UPDATE notes SET title = 'bob' WHERE id = 1")
        let sync = try p.run(["-s", "bob", "sync"])
        let commands = HintPasteTests.commands(in: sync.stderr)
        XCTAssertFalse(commands.isEmpty, sync.stderr)
        for command in commands {
            let words = command.split(separator: " ").dropFirst().map(String.init)
            let r = try p.run(words, expect: nil)
            XCTAssertNotEqual(r.status, 64, "pasted '\(command)': \(r)")
        }
    }

    /// The no-share hint tells the participant what to ask the owner for; the command it quotes must not be one
    /// that runs as the participant's own store (refused, exit 77, whoever pastes it).
    func testTheNoShareHintDoesNotNameTheParticipantsStore() throws {
        let p = try project()
        try p.run(["-s", "dave", "init"])
        let refused = try p.run(["-s", "dave", "mode", "cloud"], expect: 77)
        XCTAssertFalse(refused.stderr.contains("--store dave share add"), refused.stderr)
    }

    /// A read-only participant's changes held back, then the share upgraded to read-write: what is still changed
    /// here is sent once, and a row the cloud's value overwrote meanwhile is not sent back with stale values.
    func testHeldBackChangesAreSentOnceAfterAnUpgradeToReadWrite() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        try p.sql("bob", "UPDATE notes SET title = 'bob edit' WHERE id = 1; DELETE FROM notes WHERE id = 2; "
                      + "UPDATE notes SET title = 'bob loses' WHERE id = 3; "
                      + "INSERT INTO notes(id, uuid, title) VALUES (9, 'u9', 'bob new')")
        try p.run(["-s", "bob", "sync"])
        try p.sql("alice", "UPDATE notes SET title = 'alice wins' WHERE id = 3")
        try p.run(["-s", "alice", "sync"])
        try p.run(["-s", "bob", "sync"])
        try p.run(["-s", "alice", "share", "add", account("bob"), "--permission", "read-write"])
        try p.run(["-s", "bob", "sync"])
        try p.run(["-s", "alice", "sync"])
        try p.run(["-s", "carol", "sync"])
        XCTAssertEqual(try rows(p, "alice"), "u1|bob edit\nu3|alice wins\nu9|bob new\n")
        XCTAssertEqual(try rows(p, "bob"), try rows(p, "alice"))
        XCTAssertEqual(try rows(p, "carol"), try rows(p, "alice"))
        for store in ["alice", "bob", "carol"] { try p.run(["-s", store, "status"]) }
    }

    /// A record saved by a read-write participant stays the zone's after the participant's share ends: a store
    /// that imports it later must not set it aside.
    func testARecordSavedByAReadWriteParticipantIsNotSetAsideAfterItsShareEnds() throws {
        let p = try project()
        try p.run(["-s", "alice", "share", "add", account("carol"), "--permission", "read-write"])
        try p.run(["-s", "carol", "init"])
        try p.run(["-s", "carol", "mode", "cloud"])
        try p.sql("carol", "UPDATE notes SET title = 'carol, legitimately' WHERE id = 1")
        try p.run(["-s", "carol", "sync"])
        try p.run(["-s", "alice", "share", "remove", account("carol")])
        try p.run(["-s", "alice", "share", "add", account("bob"), "--permission", "read-only"])
        try p.run(["-s", "bob", "init"])
        try p.run(["-s", "bob", "mode", "cloud"])
        try p.run(["-s", "alice", "sync"])
        XCTAssertTrue(try rows(p, "alice").contains("carol, legitimately"))
        XCTAssertEqual(try rows(p, "bob"), try rows(p, "alice"))
    }

    /// `--discard-local` on a read-only participant that deleted a parent whose children went with it (ON DELETE
    /// CASCADE): the parent and its children come back, nothing else changes.
    func testDiscardLocalBringsBackCascadedChildren() throws {
        let p = try project(schema: E2EProject.notesSchema + """
            CREATE TABLE folders(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE);
            CREATE TABLE items(folder TEXT NOT NULL REFERENCES folders(id) ON DELETE CASCADE, pos INTEGER NOT NULL,
                               body TEXT, PRIMARY KEY (folder, pos)) WITHOUT ROWID;

            """)
        try p.sql("alice", "PRAGMA foreign_keys = ON; INSERT INTO folders VALUES ('f1', 'inbox'), ('f2', 'later'); "
                      + "INSERT INTO items VALUES ('f1', 1, 'a'), ('f1', 2, 'b'), ('f2', 1, 'c')")
        try p.run(["-s", "alice", "sync"])
        try shareWithBobAndCarol(p)
        try p.sql("bob", "PRAGMA foreign_keys = ON; DELETE FROM folders WHERE id = 'f1'; "
                      + "INSERT INTO folders VALUES ('f3', 'inbox'); UPDATE items SET body = 'z' WHERE folder = 'f2'")
        try p.run(["-s", "bob", "sync"])
        try p.run(["-s", "bob", "sync", "--discard-local"])
        let items = "SELECT folder, pos, body FROM items ORDER BY 1, 2"
        let folders = "SELECT id, name FROM folders ORDER BY 1"
        XCTAssertEqual(try p.sql("bob", items), try p.sql("alice", items))
        XCTAssertEqual(try p.sql("bob", folders), try p.sql("alice", folders))
        try p.run(["-s", "bob", "status"])
        try p.run(["-s", "bob", "doctor"])
    }

    /// A record forged over row 1's record by a device of an account without a share is set aside on import; a
    /// read-only participant that changed row 1 and runs `sync --discard-local` must not take the forged values.
    func testDiscardLocalNeverAppliesARecordThatIsSetAside() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        try p.sql("bob", "UPDATE notes SET title = 'bob edit' WHERE id = 1")
        let schema = serverURL == nil ? "" : PostgresCloudDatabase.schemaName(container: container) + "."
        let forge = """
            INSERT INTO \(schema)devices(store_id, name, account, first_seen, last_seen)
                VALUES ('dave-device', 'dave', '\(account("dave"))', 0, 0);
            UPDATE \(schema)zones SET last_seq = last_seq + 1 WHERE name = 'default';
            UPDATE \(schema)records SET fields = replace(fields, '"one"', '"forged"'), modified_by = 'dave-device',
                seq = (SELECT last_seq FROM \(schema)zones WHERE name = 'default'), change_tag = 'tag-forged'
            WHERE zone = 'default' AND fields LIKE '%"one"%';
            """
        if serverURL != nil {
            try psql("BEGIN; " + forge + " COMMIT;")
        } else {
            let r = try Binary.run("/usr/bin/sqlite3", [p.dir.file("cloud/shared.container"), forge], in: p.dir.path)
            XCTAssertEqual(r.status, 0, "\(r)")
        }
        let sync = try p.run(["-s", "bob", "sync", "--json"])
        XCTAssertEqual((json(sync)["imported"] as? [String: Any])?["set_aside"] as? Int, 1, sync.stdout)
        _ = try p.run(["-s", "bob", "sync", "--discard-local"], expect: nil)
        XCTAssertFalse(try rows(p, "bob").contains("forged"), "--discard-local applied a record that is set aside")
    }

    /// A record forged into the container file under a device id no account registered (or under the owner's own
    /// device id) is not told apart from the owner's: the file's permissions are the only boundary. Documented as
    /// detection: this records how far it goes.
    func testARecordForgedUnderAnUnregisteredDeviceIsSetAside() throws {
        guard serverURL == nil else { return }
        let p = try project()
        try shareWithBobAndCarol(p)
        let forge = """
            UPDATE zones SET last_seq = last_seq + 1 WHERE name = 'default';
            INSERT INTO records(zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by,
                                modified_at)
            SELECT 'default', 'forged-2', 'notes', '{"id":67,"uuid":"u67","title":"forged"}', 'tag-forged', last_seq, 0,
                   'no-such-device', 0 FROM zones WHERE name = 'default';
            """
        let r = try Binary.run("/usr/bin/sqlite3", [p.dir.file("cloud/shared.container"), forge], in: p.dir.path)
        XCTAssertEqual(r.status, 0, "\(r)")
        try p.run(["-s", "bob", "sync"])
        XCTAssertFalse(try rows(p, "bob").contains("forged"), "a record of no registered device was applied")
    }

    /// The owner purges the zone; a read-only participant pastes the `--reupload` hint it is shown. It can send
    /// nothing, so the zone stays empty while its store holds three rows: `status` must not then say all is well.
    func testAReadOnlyParticipantAfterAPurgeIsNotReportedHealthyWhileTheZoneIsEmpty() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        try p.run(["-s", "alice", "cloud", "purge", "--yes"])
        let reset = try p.run(["-s", "bob", "sync"], expect: 65)
        XCTAssertTrue(reset.stderr.contains("sync --reupload"), reset.stderr)
        _ = try p.run(["-s", "bob", "sync", "--reupload"], expect: nil)
        let verify = try p.run(["-s", "bob", "verify"], expect: nil)
        let status = try p.run(["-s", "bob", "status"], expect: nil)
        XCTAssertFalse(verify.status != 0 && status.status == 0,
                       "status exits 0 while verify finds the store differs:\n\(verify)\n\(status)")
        let doctor = try p.run(["-s", "bob", "doctor"], expect: nil)
        XCTAssertFalse(verify.status != 0 && doctor.status == 0, "doctor exits 0 while the store differs:\n\(doctor)")
    }

    /// A participant's refused purge tells it to ask the owner; the command it quotes must not be one that runs
    /// as the participant's own store again.
    func testTheRefusedPurgeHintDoesNotNameTheParticipantsStore() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        let refused = try p.run(["-s", "bob", "cloud", "purge", "--yes"], expect: 77)
        XCTAssertFalse(refused.stderr.contains("--store bob cloud purge"), refused.stderr)
    }
}

extension PostgresSharingEndToEndTests {
    var schema: String { PostgresCloudDatabase.schemaName(container: container) }

    /// Runs SQL as `role` with psql, whatever it exits with.
    @discardableResult
    func attempt(_ sql: String, as role: String) throws -> ProcessResult {
        try Binary.run("/usr/bin/psql", [(serverURL ?? "") + "&user=\(role)", "-X", "-Atq", "-v", "ON_ERROR_STOP=1",
                                         "-c", sql], in: FileManager.default.temporaryDirectory.path)
    }

    /// A read-only role rewrites the `devices` table with psql: the owner's device now says it belongs to the
    /// read-only role, and every store would set the owner's records aside.
    func testAReadOnlyRoleCannotReassignTheOwnersDevice() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        try p.sql("alice", "UPDATE notes SET title = 'alice after the attack' WHERE id = 1")
        try p.run(["-s", "alice", "sync"])
        _ = try attempt("UPDATE \(schema).devices SET account = '\(account("bob"))' WHERE account = '\(account("alice"))'",
                        as: account("bob"))
        let sync = try p.run(["-s", "carol", "sync", "--json"])
        XCTAssertEqual((json(sync)["imported"] as? [String: Any])?["set_aside"] as? Int ?? 0, 0, sync.stdout)
        let carol = try rows(p, "carol")
        XCTAssertTrue(carol.contains("alice after the attack"), carol)
    }

    /// A role without any share of the zone deletes every device row, or registers the owner's device under itself.
    func testANonParticipantRoleCannotRewriteDevices() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        _ = try attempt("UPDATE \(schema).devices SET account = '\(account("dave"))'", as: account("dave"))
        XCTAssertEqual(try psql("SELECT count(*) FROM \(schema).devices WHERE account = '\(account("dave"))'").stdout,
                       "0\n", "a role without a share rewrote other roles' devices")
        _ = try attempt("DELETE FROM \(schema).devices", as: account("dave"))
        XCTAssertNotEqual(try psql("SELECT count(*) FROM \(schema).devices").stdout, "0\n",
                          "a role without a share deleted other roles' devices")
    }

    /// A read-write participant may save records and tombstones, never purge: not with psql either.
    func testAReadWriteRoleCannotPurgeTheZoneWithPsql() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        _ = try attempt("DELETE FROM \(schema).records WHERE record_name <> ''", as: account("carol"))
        XCTAssertEqual(try psql("SELECT count(*) FROM \(schema).records").stdout, "3\n",
                       "a read-write role deleted the zone's records outright (a purge)")
        _ = try attempt("UPDATE \(schema).zones SET epoch = 'carol-reset'", as: account("carol"))
        XCTAssertEqual(try psql("SELECT count(*) FROM \(schema).zones WHERE epoch = 'carol-reset'").stdout, "0\n",
                       "a read-write role reset the zone's epoch (a purge)")
        // Taking last_seq back makes every store refuse the zone as an older copy of itself.
        _ = try attempt("UPDATE \(schema).zones SET last_seq = 0", as: account("carol"))
        XCTAssertEqual(try psql("SELECT last_seq FROM \(schema).zones").stdout, "3\n",
                       "a read-write role took the zone's last seq back")
    }

    /// The SECURITY DEFINER functions answer for the role named in their argument: a role without a share must not
    /// learn another role's zones, or a zone's epoch and last seq, by naming another role.
    func testANonParticipantCannotAskTheFunctionsAsAnotherRole() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        let zones = try attempt("SELECT * FROM \(schema).readable_zones('\(account("alice"))')", as: account("dave"))
        XCTAssertFalse(zones.stdout.contains("default"), "dave listed alice's zones: \(zones.stdout)")
        let access = try psql("SELECT epoch, last_seq FROM \(schema).zone_access('default', '\(account("alice"))')",
                              as: account("dave"))
        XCTAssertFalse(access.stdout.contains("|3"), "dave read the zone's epoch and last seq: \(access.stdout)")
    }
}
