import Foundation
import TestSupport
import XCTest

/// Sharing a zone with other accounts, end to end on a container file: the real binary, real store files, one
/// container, four accounts. alice owns the zone; bob has a read-only share, carol a read-write one; dave none.
final class SharingTests: XCTestCase {
    static let secrets = ["alice": "alice-S3cret-11", "bob": "bob-S3cret-22", "carol": "carol-S3cret-33",
                          "dave": "dave-S3cret-44"]

    /// A project whose config has one store per account, all on `cloud/shared.container`, zone `default`.
    func project() throws -> E2EProject {
        let p = try E2EProject(label: "storectl-share")
        try p.writeSchema()
        var stores: [E2EProject.Store] = []
        for name in ["alice", "bob", "carol", "dave"] {
            let cloud = E2EProject.Cloud(container: "iCloud.com.example.notes", url: "file:cloud/shared.container",
                                         account: name, secret: "${\(name.uppercased())_SECRET}",
                                         createIfMissing: false)
            stores.append(E2EProject.Store(name, cloud: cloud))
        }
        try p.writeConfig(stores)
        for (name, secret) in Self.secrets { p.environment[name.uppercased() + "_SECRET"] = secret }
        try p.run(["-s", "alice", "cloud", "init"])
        for name in ["bob", "carol", "dave"] {
            try p.run(["-s", "alice", "account", "add", name, "--secret-env", name.uppercased() + "_SECRET"])
        }
        try p.run(["-s", "alice", "init"])
        try p.sql("alice", "INSERT INTO notes(id, uuid, title) VALUES (1, 'u1', 'one'), (2, 'u2', 'two'), "
                      + "(3, 'u3', 'three')")
        try p.run(["-s", "alice", "mode", "cloud"])
        return p
    }

    func json(_ r: ProcessResult) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any] ?? [:]
    }

    func rows(_ p: E2EProject, _ store: String) throws -> String {
        // INTEGER PRIMARY KEY is a surrogate key: the uuid names a note on every device.
        try p.sql(store, "SELECT uuid, coalesce(title, 'NULL') FROM notes ORDER BY uuid")
    }

    /// Shares bob read-only and carol read-write, and switches both to cloud mode.
    func shareWithBobAndCarol(_ p: E2EProject) throws {
        try p.run(["-s", "alice", "share", "add", "bob", "--permission", "read-only"])
        try p.run(["-s", "alice", "share", "add", "carol", "--permission", "read-write"])
        for name in ["bob", "carol"] {
            try p.run(["-s", name, "init"])
            try p.run(["-s", name, "mode", "cloud"])
        }
    }

    func testTheOwnerSharesAndListsParticipants() throws {
        let p = try project()
        let added = try p.run(["-s", "alice", "share", "add", "bob", "--permission", "read-only", "--json"])
        let doc = json(added)
        XCTAssertEqual(doc["account"] as? String, "bob")
        XCTAssertEqual(doc["permission"] as? String, "read-only")
        XCTAssertEqual(doc["owner"] as? String, "alice")
        XCTAssertEqual(doc["zone"] as? String, "default")
        XCTAssertEqual(doc["action"] as? String, "added")
        try p.run(["-s", "alice", "share", "add", "carol", "--permission", "read-write"])
        let list = json(try p.run(["-s", "alice", "share", "list", "--json"]))
        XCTAssertEqual(list["owner"] as? String, "alice")
        let participants = list["participants"] as? [[String: Any]] ?? []
        XCTAssertEqual(participants.map { $0["account"] as? String }, ["bob", "carol"])
        XCTAssertEqual(participants.map { $0["permission"] as? String }, ["read-only", "read-write"])
        XCTAssertTrue(participants.allSatisfy { ($0["since"] as? String)?.hasSuffix("Z") == true }, "\(participants)")
        // A participant may list too, never change the share.
        XCTAssertEqual(json(try p.run(["-s", "bob", "share", "list", "--json"]))["owner"] as? String, "alice")
        let refused = try p.run(["-s", "bob", "share", "add", "dave"], expect: 77)
        XCTAssertTrue(refused.stderr.contains("dave") || refused.stderr.contains("owner"), refused.stderr)
        try p.run(["-s", "carol", "share", "remove", "bob"], expect: 77)
        // An account the container does not know: exit 67. A bad permission: usage.
        try p.run(["-s", "alice", "share", "add", "mallory"], expect: 67)
        try p.run(["-s", "alice", "share", "add", "bob", "--permission", "admin"], expect: 64)
        // The non-participant can neither list nor add.
        try p.run(["-s", "dave", "share", "list"], expect: 77)
    }

    func testAReadOnlyParticipantReceivesEverythingAndSendsNothing() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        XCTAssertEqual(try rows(p, "bob"), try rows(p, "alice"))
        // bob's edits stay on bob's device, reported with their rows.
        try p.sql("bob", "UPDATE notes SET title = 'bob was here' WHERE id = 2; "
                      + "INSERT INTO notes(id, uuid, title) VALUES (9, 'u9', 'bob only')")
        let sync = try p.run(["-s", "bob", "sync", "--json"])
        XCTAssertEqual(json(sync)["not_sent"] as? Int, 2, sync.stdout)
        try p.run(["-s", "alice", "sync"])
        XCTAssertFalse(try rows(p, "alice").contains("bob"), "a read-only participant's edit reached the cloud")
        let status = try p.run(["-s", "bob", "status", "--json"], expect: 65)
        let unsettled = json(status)["unsettled"] as? [String: Any] ?? [:]
        let unsent = unsettled["unsent"] as? [[String: Any]] ?? []
        XCTAssertEqual(Set(unsent.compactMap { $0["key"] as? String }), ["[2]", "[9]"], status.stdout)
        XCTAssertTrue(unsent.allSatisfy { $0["share"] as? String == "read-only" }, status.stdout)
        let share = (json(status)["cloud"] as? [String: Any])?["share"] as? [String: Any]
        XCTAssertEqual(share?["permission"] as? String, "read-only", status.stdout)
        XCTAssertEqual(share?["owner"] as? String, "alice", status.stdout)
        let doctor = try p.run(["-s", "bob", "doctor"], expect: 65)
        XCTAssertTrue(doctor.stdout.contains("not sent") && doctor.stdout.contains("discard-local"), doctor.stdout)
        let account = json(try p.run(["-s", "bob", "account", "status", "--json"]))
        XCTAssertEqual((account["share"] as? [String: Any])?["permission"] as? String, "read-only")
        // The owner's change to the row bob edited wins on bob's device; bob's other row stays, not sent.
        try p.sql("alice", "UPDATE notes SET title = 'two, by alice' WHERE id = 2")
        try p.run(["-s", "alice", "sync"])
        try p.run(["-s", "bob", "sync"])
        let bobRows = try rows(p, "bob")
        XCTAssertTrue(bobRows.contains("u2|two, by alice"), bobRows)
        XCTAssertTrue(bobRows.contains("u9|bob only"), bobRows)
        let after = json(try p.run(["-s", "bob", "status", "--json"], expect: 65))
        let left = ((after["unsettled"] as? [String: Any])?["unsent"] as? [[String: Any]] ?? []).compactMap {
            $0["key"] as? String
        }
        XCTAssertEqual(left, ["[9]"])
        // After a look at verify, --discard-local puts the rows back to the cloud's values.
        try p.sql("bob", "DELETE FROM notes WHERE id = 3")
        try p.run(["-s", "bob", "verify"], expect: nil)
        let discard = json(try p.run(["-s", "bob", "sync", "--discard-local", "--json"]))
        let discarded = discard["discarded"] as? [String: Any] ?? [:]
        XCTAssertEqual(discarded["deleted"] as? Int, 1, "\(discard)")
        XCTAssertEqual(discarded["restored"] as? Int, 1, "\(discard)")
        XCTAssertEqual(try rows(p, "bob"), try rows(p, "alice"))
        try p.run(["-s", "bob", "status"])
        try p.run(["-s", "bob", "doctor"])
        // The discarded local values are kept in a file beside the store, with the store file's permissions.
        let saved = try XCTUnwrap(discarded["saved_to"] as? String)
        let kept = try String(contentsOfFile: saved, encoding: .utf8)
        XCTAssertTrue(kept.contains("bob only") && kept.contains("\"action\":\"deleted\""), kept)
        XCTAssertEqual(kept.split(separator: "\n").count, 2, kept)
    }

    func testAReadWriteParticipantsEditsMerge() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        try p.sql("carol", "UPDATE notes SET title = 'carol edit' WHERE id = 1; "
                      + "INSERT INTO notes(id, uuid, title) VALUES (7, 'u7', 'from carol')")
        try p.run(["-s", "carol", "sync"])
        try p.sql("alice", "UPDATE notes SET title = 'alice edit' WHERE id = 3")
        try p.run(["-s", "alice", "sync"])
        try p.run(["-s", "carol", "sync"])
        try p.run(["-s", "bob", "sync"])
        let alice = try rows(p, "alice")
        XCTAssertTrue(alice.contains("carol edit") && alice.contains("from carol"), alice)
        XCTAssertEqual(try rows(p, "carol"), alice)
        XCTAssertEqual(try rows(p, "bob"), alice)
        // A participant can never purge.
        try p.run(["-s", "carol", "cloud", "purge", "--yes"], expect: 77)
        try p.run(["-s", "carol", "status"])
    }

    func testAnAccountWithoutAShareIsRefusedBeforeAnythingIsWritten() throws {
        let p = try project()
        try p.run(["-s", "dave", "init"])
        try p.sql("dave", "INSERT INTO notes(id, uuid, title) VALUES (5, 'u5', 'dave')")
        let before = try Data(contentsOf: URL(fileURLWithPath: p.dir.file("cloud/shared.container")))
        let refused = try p.run(["-s", "dave", "mode", "cloud"], expect: 77)
        XCTAssertTrue(refused.stderr.contains("'default'") && refused.stderr.contains("'alice'"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("share add dave"), refused.stderr)
        XCTAssertEqual(json(try p.run(["-s", "dave", "status", "--json"], expect: nil))["mode"] as? String, "local")
        XCTAssertEqual(try rows(p, "dave"), "u5|dave\n")
        _ = before
        XCTAssertFalse(try rows(p, "alice").contains("dave"))
        let account = json(try p.run(["-s", "dave", "account", "status", "--json"]))
        XCTAssertEqual((account["share"] as? [String: Any])?["permission"] as? String, "none")
    }

    func testARemovedShareKeepsTheParticipantsDataAndResumesWhenAddedAgain() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        try p.run(["-s", "alice", "share", "remove", "bob"])
        try p.sql("bob", "INSERT INTO notes(id, uuid, title) VALUES (8, 'u8', 'kept by bob')")
        let refused = try p.run(["-s", "bob", "sync"], expect: 77)
        XCTAssertTrue(refused.stderr.contains("'default'") && refused.stderr.contains("'alice'"), refused.stderr)
        XCTAssertTrue(try rows(p, "bob").contains("kept by bob"))
        XCTAssertEqual(try p.sql("bob", "SELECT count(*) FROM notes"), "4\n")
        try p.run(["-s", "bob", "status"], expect: 77)
        try p.run(["-s", "bob", "mode", "local"])
        XCTAssertTrue(try rows(p, "bob").contains("kept by bob"))
        // Added again: bob resumes where it stopped, and the owner's changes meanwhile arrive.
        try p.sql("alice", "UPDATE notes SET title = 'while bob was out' WHERE id = 1")
        try p.run(["-s", "alice", "sync"])
        try p.run(["-s", "alice", "share", "add", "bob", "--permission", "read-only"])
        let back = json(try p.run(["-s", "bob", "mode", "cloud", "--json"]))
        let imported = ((back["sync"] as? [String: Any])?["imported"] as? [String: Any])?["applied"] as? Int
        XCTAssertEqual(imported, 1, "\(back)")
        XCTAssertTrue(try rows(p, "bob").contains("while bob was out"))
    }

    func testAParticipantLeaves() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        try p.run(["-s", "alice", "share", "leave"], expect: 65)
        let left = json(try p.run(["-s", "carol", "share", "leave", "--json"]))
        XCTAssertEqual(left["action"] as? String, "left")
        try p.run(["-s", "carol", "sync"], expect: 77)
        try p.run(["-s", "carol", "share", "leave"], expect: nil)
        let list = json(try p.run(["-s", "alice", "share", "list", "--json"]))
        XCTAssertEqual((list["participants"] as? [[String: Any]])?.compactMap { $0["account"] as? String }, ["bob"])
    }

    func testARecordForgedByANonParticipantIsSetAside() throws {
        let p = try project()
        try shareWithBobAndCarol(p)
        let container = p.dir.file("cloud/shared.container")
        // Someone who can write the file forges a record as dave's device; dave has no share.
        let forge = """
            INSERT INTO devices(store_id, name, account, first_seen, last_seen) VALUES ('dave-device', 'dave', 'dave', 0, 0);
            UPDATE zones SET last_seq = last_seq + 1 WHERE name = 'default';
            INSERT INTO records(zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at)
            SELECT 'default', 'forged-1', 'notes', '{"id":66,"uuid":"u66","title":"forged"}', 'tag-forged', last_seq, 0,
                   'dave-device', 0 FROM zones WHERE name = 'default';
            """
        let r = try Binary.run("/usr/bin/sqlite3", [container, forge], in: p.dir.path)
        XCTAssertEqual(r.status, 0, "\(r)")
        let sync = try p.run(["-s", "bob", "sync", "--json"])
        XCTAssertEqual((json(sync)["imported"] as? [String: Any])?["set_aside"] as? Int, 1, sync.stdout)
        XCTAssertFalse(try rows(p, "bob").contains("forged"))
        let status = try p.run(["-s", "bob", "status", "--json"], expect: 65)
        XCTAssertTrue(status.stdout.contains("forged-1") && status.stdout.contains("dave"), status.stdout)
        // Set aside for good: the next sync does not apply it either.
        try p.run(["-s", "bob", "sync"])
        XCTAssertFalse(try rows(p, "bob").contains("forged"))
    }
}
