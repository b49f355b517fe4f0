import Foundation
import TestSupport
import XCTest

/// Attacks on fields encrypted on the device (`entities.<table>.encrypted`, `cloud.encryption_key`), end to end:
/// the real binary, real store files, one container file written by hand where the attack is the server's.
final class EncryptionAttackTests: XCTestCase {
    /// Two stores, `a` and `b`, on one container file, each encrypting `encrypted` of `notes` with the passphrase in
    /// `KEY_A` / `KEY_B`; `a` holds two rows and both are in cloud mode.
    func project(encrypted: [String] = ["title"], schema: String = E2EProject.notesSchema) throws -> E2EProject {
        let p = try E2EProject(label: "storectl-encattack")
        try p.writeSchema(schema)
        try p.writeConfig(["a", "b"].map { name in
            var cloud = E2EProject.Cloud.file("iCloud.com.example.enc")
            cloud.extra = ["encryption_key: ${KEY_\(name.uppercased())}"]
            return E2EProject.Store(name, before: ["entities:", "  notes:",
                                                   "    encrypted: [\(encrypted.joined(separator: ", "))]"],
                                    cloud: cloud)
        })
        p.environment["STORECTL_SCRYPT_LOG_N"] = "10"
        p.environment["KEY_A"] = "correct horse"
        p.environment["KEY_B"] = "correct horse"
        try p.run(["-s", "a", "init"])
        try p.run(["-s", "b", "init"])
        try p.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'u1', 'first secret'), (2, 'u2', 'second secret')")
        try p.run(["-s", "a", "mode", "cloud"])
        try p.run(["-s", "b", "mode", "cloud"])
        return p
    }

    var container: String { "cloud/shared.container" }

    /// Runs SQL on the container file, as a server (or anyone who can write the file) would.
    @discardableResult
    func server(_ p: E2EProject, _ statement: String) throws -> String {
        let r = try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 10000", p.dir.file(container), statement],
                               in: p.dir.path)
        XCTAssertEqual(r.status, 0, "\(statement)\n\(r)")
        return r.stdout
    }

    /// Replaces the fields of the record of `id` with `fields` (a SQL expression over the current `fields`) as a new
    /// change of the zone, by a device of the server's own.
    func forge(_ p: E2EProject, uuid: String, _ fields: String) throws {
        try server(p, """
            UPDATE zones SET last_seq = last_seq + 1 WHERE name = 'default';
            UPDATE records SET fields = \(fields), seq = (SELECT last_seq FROM zones WHERE name = 'default'),
                change_tag = 'forged-' || (SELECT last_seq FROM zones WHERE name = 'default'), modified_by = 'intruder'
            WHERE zone = 'default' AND record_type = 'notes' AND json_extract(fields, '$.uuid') = '\(uuid)';
            """)
    }

    func title(_ p: E2EProject, _ store: String, id: Int) throws -> String {
        try p.sql(store, "SELECT quote(title) FROM notes WHERE uuid = 'u\(id)'").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func json(_ r: ProcessResult) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], r.stdout)
    }

    // MARK: Held

    /// The server never holds an encrypted value in clear, of any type, and every device reads it back as it was.
    func testValuesOfEveryTypeTravelSealedAndComeBackExact() throws {
        let p = try project(encrypted: ["title", "extra"],
                            schema: "CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT, extra);\n")
        try p.sql("a", """
            INSERT INTO notes(id, uuid, title, extra) VALUES
              (10, 'n10', 'zzclear0', 0.1), (11, 'n11', NULL, 9007199254740993), (12, 'n12', X'00FF7A7A', -0.0),
              (13, 'n13', 'zz' || char(0) || 'clear1', 'zzclear2'), (14, 'n14', CAST(X'7A7AC328' AS TEXT), 1e308),
              (15, 'n15', printf('%.*c', 300000, 'z'), X'7A7A');
            """)
        try p.run(["-s", "a", "sync"])
        try p.run(["-s", "b", "sync"])
        let held = try server(p, "SELECT fields FROM records WHERE record_type = 'notes'")
        for clear in ["zzclear", "secret", "9007199254740993", "zzzzzzzzzz", "0.1", "$blob"] {
            XCTAssertFalse(held.contains(clear), "the server holds '\(clear)' in clear: \(held.prefix(2000))")
        }
        let dump = "SELECT uuid, typeof(title), hex(title), typeof(extra), hex(extra), quote(extra) FROM notes ORDER BY uuid"
        XCTAssertEqual(try p.sql("a", dump), try p.sql("b", dump))
    }

    /// A ciphertext moved to another record or to another field, bytes flipped, or a clear value where the zone
    /// encrypts: set aside (sync exits 0; status and doctor 65), never applied.
    func testForgedCiphertextsAreSetAsideNotApplied() throws {
        let p = try project(encrypted: ["title", "body"],
                            schema: "CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT, body TEXT);\n")
        try p.sql("a", "UPDATE notes SET title = 'edit', body = 'two' WHERE uuid = 'u2'; "
                      + "UPDATE notes SET body = 'one' WHERE uuid = 'u1'")
        try p.run(["-s", "a", "sync"])
        try p.run(["-s", "b", "sync"])
        let one = "(SELECT fields FROM records WHERE record_type = 'notes' AND json_extract(fields, '$.uuid') = 'u1')"
        // u2 gets u1's title; u1 its own body as title.
        try forge(p, uuid: "u2", "json_set(fields, '$.title', json_extract(\(one), '$.title'))")
        try forge(p, uuid: "u1", "json_set(fields, '$.title', json_extract(fields, '$.body'))")
        try p.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (3, 'u3', 'third')")
        try p.run(["-s", "a", "sync"])
        try forge(p, uuid: "u3", "json_set(fields, '$.title', json_object('$enc', "
                  + "substr(json_extract(fields, '$.title.$enc'), 1, 20) || 'AAAA' "
                  + "|| substr(json_extract(fields, '$.title.$enc'), 25)))")
        let sync = try p.run(["-s", "b", "sync", "--json"])
        XCTAssertEqual((try json(sync)["imported"] as? [String: Any])?["set_aside"] as? Int, 3, sync.stdout)
        XCTAssertEqual(try title(p, "b", id: 1), "'first secret'")
        XCTAssertEqual(try title(p, "b", id: 2), "'edit'")
        XCTAssertEqual(try p.sql("b", "SELECT count(*) FROM notes WHERE uuid = 'u3'"), "0\n")
        try p.run(["-s", "b", "status"], expect: 65)
        try p.run(["-s", "b", "doctor"], expect: 65)
    }

    /// A wrong passphrase, or none, is refused with 77 by sync, watch and status, and leaves the store file and the
    /// container byte for byte as they were; the passphrase is never printed, not in a debug trace either.
    func testAWrongOrMissingPassphraseIsRefusedBeforeAnythingIsWritten() throws {
        let p = try project()
        try p.sql("b", "UPDATE notes SET title = 'b edit' WHERE id = 1")
        let before = try [Data(contentsOf: URL(fileURLWithPath: p.storePath("b"))),
                          Data(contentsOf: URL(fileURLWithPath: p.dir.file(container)))]
        let wrong = ["KEY_B": "Wrong-Passphrase-42", "STORECTL_LOG": "debug"]
        for args in [["-s", "b", "sync"], ["-s", "b", "sync", "--json", "-v"], ["-s", "b", "status", "--json"],
                     ["-s", "b", "cloud", "rekey", "--new-key-env", "KEY_A"]]
        {
            let r = try p.run(args, expect: 77, env: wrong)
            XCTAssertFalse((r.stdout + r.stderr).contains("Wrong-Passphrase-42"), "\(r)")
            XCTAssertFalse((r.stdout + r.stderr).contains("correct horse"), "\(r)")
            XCTAssertTrue(r.stderr.contains("zone 'default'") || r.stdout.contains("zone 'default'"), "\(r)")
        }
        let after = try [Data(contentsOf: URL(fileURLWithPath: p.storePath("b"))),
                         Data(contentsOf: URL(fileURLWithPath: p.dir.file(container)))]
        XCTAssertEqual(before, after, "a refused command wrote the store or the container")
        // No key at all for an encrypted zone: the same refusal.
        var stores = p.stores
        stores[1].cloud?.extra = []
        stores[1].before = []
        try p.writeConfig(stores)
        try p.run(["-s", "b", "sync"], expect: 77)
        XCTAssertEqual(try title(p, "b", id: 1), "'b edit'")
        for args in [["config", "show"], ["config", "show", "--json"], ["config", "get", "stores.a.cloud"]] {
            let r = try p.run(args)
            XCTAssertFalse((r.stdout + r.stderr).contains("correct horse"), "\(r)")
        }
    }

    /// `cloud rekey` (no rotation) changes the passphrase: a device on the old one is refused (77), nothing written,
    /// keeps its changes, and sends them once it has the new one.
    func testADeviceOnTheOldPassphraseAfterARekeyKeepsItsChanges() throws {
        let p = try project()
        try p.sql("b", "UPDATE notes SET title = 'b offline' WHERE id = 2")
        try p.run(["-s", "a", "cloud", "rekey", "--new-key-env", "NEW_KEY"], env: ["NEW_KEY": "battery staple"])
        try p.run(["-s", "b", "sync"], expect: 77)
        XCTAssertEqual(try title(p, "b", id: 2), "'b offline'")
        p.environment["KEY_A"] = "battery staple"
        p.environment["KEY_B"] = "battery staple"
        try p.run(["-s", "b", "sync"])
        try p.run(["-s", "a", "sync"])
        XCTAssertEqual(try title(p, "a", id: 2), "'b offline'")
        XCTAssertFalse(try server(p, "SELECT fields FROM records").contains("offline"))
    }

    /// A column added to `encrypted:` on a synced store: its next sync seals the values the zone holds in clear,
    /// the other device takes them unchanged, and a rotation after it sets nothing aside.
    func testAColumnAddedLaterIsSealedAndARotationAfterItKeepsEveryRecord() throws {
        let p = try project()
        var stores = p.stores
        stores[0].before = ["entities:", "  notes:", "    encrypted: [title, uuid]"]
        try p.writeConfig(stores)
        let sync = try p.run(["-s", "a", "sync", "--json"])
        XCTAssertEqual(try json(sync)["resealed"] as? Int, 2, sync.stdout)
        XCTAssertFalse(try server(p, "SELECT fields FROM records WHERE record_type = 'notes'").contains("\"u1\""))
        try p.run(["-s", "a", "cloud", "rekey", "--rotate", "--new-key-env", "NEW_KEY"],
                  env: ["NEW_KEY": "battery staple"])
        p.environment["KEY_A"] = "battery staple"
        p.environment["KEY_B"] = "battery staple"
        let b = try p.run(["-s", "b", "sync", "--json"])
        XCTAssertEqual((try json(b)["imported"] as? [String: Any])?["set_aside"] as? Int, 0, b.stdout)
        XCTAssertEqual(try p.sql("b", "SELECT uuid, title FROM notes ORDER BY uuid"), "u1|first secret\nu2|second secret\n")
        try p.run(["-s", "b", "status"])
    }

    // MARK: Defects

    /// `cloud rekey --rotate` seals again every record of the zone: a clear value that the server (or anyone who
    /// can write the container) put in a field the zone already encrypts must stay set aside, not be sealed with
    /// the new key and so applied by every device.
    func testRotationDoesNotSealAClearValueForgedIntoAnEncryptedField() throws {
        let p = try project()
        try forge(p, uuid: "u1", "json_set(fields, '$.title', 'forged by the server')")
        try p.run(["-s", "b", "sync"])
        try p.run(["-s", "b", "status"], expect: 65)
        try p.run(["-s", "a", "cloud", "rekey", "--rotate", "--new-key-env", "NEW_KEY"],
                  env: ["NEW_KEY": "battery staple"])
        p.environment["KEY_A"] = "battery staple"
        p.environment["KEY_B"] = "battery staple"
        try p.run(["-s", "b", "sync"])
        try p.run(["-s", "a", "sync"])
        XCTAssertEqual(try title(p, "b", id: 1), "'first secret'")
        XCTAssertEqual(try title(p, "a", id: 1), "'first secret'")
    }

    /// A column added to `encrypted:` on a store already in cloud mode is checked like `cloud check` checks it: a
    /// name the table does not have (a typo, another case) is refused (65) before the zone's list of encrypted
    /// fields takes it for good, and the real column is not left to travel in clear unnoticed.
    func testSyncRefusesAnEncryptedColumnTheTableDoesNotHave() throws {
        let p = try project()
        var stores = p.stores
        stores[0].before = ["entities:", "  notes:", "    encrypted: [title, Uuid_]"]
        try p.writeConfig(stores)
        let keyBefore = try server(p, "SELECT fields FROM records WHERE record_name = '_storectl_zone_key'")
        let r = try p.run(["-s", "a", "sync"], expect: 65)
        XCTAssertTrue(r.stderr.contains("Uuid_"), "\(r)")
        XCTAssertEqual(try server(p, "SELECT fields FROM records WHERE record_name = '_storectl_zone_key'"), keyBefore)
        try p.run(["-s", "a", "watch", "--once"], expect: 65)
    }

    /// A store whose own config encrypts nothing, moved to another target without a last sync with the old one
    /// (`migrate --cloud --no-final-sync`, the old target gone): the fields the old zone encrypted are sealed in the
    /// new zone too, from the list the store kept, never sent in clear.
    func testAMoveWithoutAFinalSyncSealsTheFieldsTheOldZoneEncrypted() throws {
        let p = try project(encrypted: ["title"])
        // b keeps the passphrase but lists nothing to encrypt: the zone's list still seals `title` for it.
        try p.writeConfig(["a", "b"].map { name in
            var cloud = E2EProject.Cloud.file("iCloud.com.example.enc")
            cloud.extra = ["encryption_key: ${KEY_\(name.uppercased())}"]
            return E2EProject.Store(name, before: name == "a" ? ["entities:", "  notes:", "    encrypted: [title]"] : [],
                                    cloud: cloud)
        })
        try p.run(["-s", "b", "sync"])
        try p.sql("b", "UPDATE notes SET title = 'moved secret' WHERE uuid = 'u1'")
        try p.run(["-s", "b", "migrate", "--cloud", "file:cloud/new.container", "--zone", "z2", "--no-final-sync"])
        let r = try Binary.run("/usr/bin/sqlite3", [p.dir.file("cloud/new.container"),
                                                    "SELECT json_type(fields, '$.title') FROM records "
                                                        + "WHERE record_type = 'notes' ORDER BY record_name"],
                               in: p.dir.path)
        XCTAssertEqual(r.stdout.split(separator: "\n"), ["object", "object"], "\(r)")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: p.dir.file("cloud/new.container")))
        for title in ["first secret", "second secret", "moved secret"] {
            XCTAssertNil(bytes.range(of: Data(title.utf8)), "'\(title)' reached the new container in clear")
        }
    }

    /// Edits that meet in the export (a conflict resolved by the merge policy) save the merged record sealed: the
    /// values of both sides, the merged record's and the losing side's, never reach the container in clear.
    func testAConflictResolvedInTheExportSavesTheMergedRecordSealed() throws {
        let schema = "CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT, body TEXT);\n"
        let p = try project(encrypted: ["title", "body"], schema: schema)
        try p.sql("a", "UPDATE notes SET title = 'title from a', body = 'body from a' WHERE uuid = 'u1'")
        try p.sql("b", "UPDATE notes SET title = 'title from b' WHERE uuid = 'u1'")
        try p.run(["-s", "a", "sync"])
        let merged = try json(try p.run(["--json", "-s", "b", "sync"]))
        let exported = try XCTUnwrap(merged["exported"] as? [String: Any])
        XCTAssertEqual(exported["conflicts_resolved"] as? Int, 1, "\(merged)")
        try p.run(["-s", "a", "sync"])
        // property-local-wins: b's title, a's body, on both stores.
        for store in ["a", "b"] {
            XCTAssertEqual(try p.sql(store, "SELECT title || '|' || body FROM notes WHERE uuid = 'u1'")
                               .trimmingCharacters(in: .whitespacesAndNewlines), "title from b|body from a")
        }
        let types = try server(p, "SELECT json_type(fields, '$.title') || json_type(fields, '$.body') FROM records "
                                   + "WHERE record_type = 'notes' AND json_extract(fields, '$.uuid') = 'u1'")
        XCTAssertEqual(types.trimmingCharacters(in: .whitespacesAndNewlines), "objectobject")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: p.dir.file(container)))
        for value in ["title from a", "body from a", "title from b", "first secret", "second secret"] {
            XCTAssertNil(bytes.range(of: Data(value.utf8)), "'\(value)' reached the container in clear")
        }
        try p.run(["-s", "a", "doctor"])
        try p.run(["-s", "b", "doctor"])
    }
}
