import Foundation
import TestSupport
import XCTest

/// A tombstone sent through the outbox for a row deleted here while another row took its rowid, against edits made
/// elsewhere: the stores must agree, hold no duplicate, and be healthy, under every policy.
final class OutboxAttackTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
        """
    static let uniqueYAML = "    entities:\n      notes:\n        unique: [uuid]"

    private func dump(_ f: Fleet, _ s: String) throws -> String {
        try f.sql(s, "SELECT id || '|' || uuid || '|' || title FROM notes ORDER BY uuid, id")
    }

    private func agree(_ f: Fleet, _ what: String) throws {
        let a = try f.rows("a")
        for s in f.stores.dropFirst() {
            let da = try dump(f, "a"), ds = try dump(f, s)
            XCTAssertEqual(try f.rows(s), a, "\(what): \(s) differs from a\na:\n\(da)\n\(s):\n\(ds)")
        }
        for s in f.stores {
            let p = try f.sql(s, "SELECT count(*) FROM notes WHERE uuid = 'p'").trimmingCharacters(in: .whitespacesAndNewlines)
            let ds = try dump(f, s)
            XCTAssertEqual(p, "1", "\(what): \(s) holds \(p) rows with uuid p\n\(ds)")
        }
        try f.joinLate()
        let dl = try dump(f, Fleet.lateStore)
        XCTAssertEqual(try f.rows(Fleet.lateStore), a, "\(what): a store that joins last differs\n\(dl)")
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    /// b deletes P and inserts it again at the same rowid under the same UNIQUE value (a re-created note); a edits P.
    private func sameKeyAtTheReusedRowid(policy: String, unique: Bool, aFirst: Bool) throws {
        let what = "\(policy) unique=\(unique) aFirst=\(aFirst)"
        let f = try Fleet(backend: .file, schema: Self.schema, storeYAML: unique ? Self.uniqueYAML : "",
                          cloudExtra: "      merge_policy: \(policy)", label: "storectl-outbox-attack")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'p', 'P'), (2, 'q', 'Q')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("b", "BEGIN; DELETE FROM notes WHERE id = 1; "
                  + "INSERT INTO notes(id, uuid, title) VALUES (1, 'p', 'P re-created by b'); COMMIT;")
        try f.sql("a", "UPDATE notes SET title = 'P edited by a' WHERE id = 1")
        let order = aFirst ? ["a", "b"] : ["b", "a"]
        for s in order {
            let r = try f.run(s, ["sync"], expect: nil)
            if r.status != 0 {
                XCTAssertEqual(policy, "error", "\(what): sync of \(s)\n\(r)")
                try f.run(nil, ["config", "set", "stores.\(s).cloud.merge_policy", "server-wins"])
            }
        }
        for _ in 0..<3 {
            for s in ["b", "a"] {
                let r = try f.run(s, ["sync"], expect: nil)
                if r.status != 0 {
                    XCTAssertEqual(policy, "error", "\(what): sync of \(s)\n\(r)")
                    try f.run(nil, ["config", "set", "stores.\(s).cloud.merge_policy", "server-wins"])
                }
            }
        }
        try agree(f, what)
    }

    func testSameKeyAtTheReusedRowid() throws {
        for policy in ["server-wins", "property-server-wins", "local-wins", "error"] {
            for unique in [false, true] {
                try sameKeyAtTheReusedRowid(policy: policy, unique: unique, aFirst: true)
            }
        }
    }

    func testSameKeyAtTheReusedRowidBFirst() throws {
        for policy in ["server-wins", "local-wins"] {
            for unique in [false, true] {
                try sameKeyAtTheReusedRowid(policy: policy, unique: unique, aFirst: false)
            }
        }
    }

    /// b's sync is killed after its outbox was sent (the tombstone dropped under server-wins, or sent), before the
    /// rest of its export; b keeps writing at the same rowid (deletes the new row, inserts another there), then
    /// syncs again. A third store edited P too.
    func testKilledAfterTheOutboxThenKeepWriting() throws {
        for policy in ["server-wins", "property-server-wins", "local-wins"] {
            for point in ["export.before-save", "export.after-save", "export.before-commit", "import.before-commit"] {
                let what = "\(policy) killed at \(point)"
                let f = try Fleet(stores: ["a", "b", "c"], backend: .file, schema: Self.schema,
                                  cloudExtra: "      merge_policy: \(policy)", label: "storectl-outbox-kill")
                for s in f.stores { try f.cloudMode(s) }
                try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'p', 'P'), (2, 'q', 'Q')")
                try f.syncRounds(1, ["a", "b", "c"])
                try f.sql("b", "BEGIN; DELETE FROM notes WHERE id = 1; "
                          + "INSERT INTO notes(id, uuid, title) VALUES (1, 'new-b', 'new by b'); COMMIT;")
                try f.sql("a", "UPDATE notes SET title = 'P edited by a' WHERE id = 1")
                try f.sql("c", "UPDATE notes SET uuid = 'p', title = 'P edited by c' WHERE id = 1")
                try f.run("a", ["sync"])
                try f.run("c", ["sync"])
                let killed = try f.run("b", ["sync"], env: ["STORECTL_FAILPOINT": point], expect: nil)
                XCTAssertNotEqual(killed.status, 0, "\(what): the failpoint did not fire\n\(killed)")
                try f.sql("b", "BEGIN; DELETE FROM notes WHERE id = 1; "
                          + "INSERT INTO notes(id, uuid, title) VALUES (1, 'new-b2', 'newer by b'); COMMIT;")
                try f.syncRounds(3, ["b", "a", "c"])
                        let a = try f.rows("a")
                for s in ["b", "c"] {
                    let ds = try dump(f, s), da = try dump(f, "a")
                    XCTAssertEqual(try f.rows(s), a, "\(what): \(s) differs from a\na:\n\(da)\n\(s):\n\(ds)")
                }
                let newB = try f.sql("a", "SELECT group_concat(uuid) FROM notes WHERE uuid LIKE 'new-b%'")
                XCTAssertEqual(newB.trimmingCharacters(in: .whitespacesAndNewlines), "new-b2", "\(what)")
                let p = try f.sql("a", "SELECT count(*) FROM notes WHERE uuid = 'p'").trimmingCharacters(in: .whitespacesAndNewlines)
                XCTAssertEqual(p, policy == "local-wins" ? "0" : "1", "\(what): P on a")
                for s in f.stores { try f.assertHealthy(s, what) }
            }
        }
    }

    /// The parent re-inserted at its rowid (same UNIQUE value) and its natural-key child re-created, while another
    /// store edited both the old parent and the old child: every store must agree, with one parent and one child.
    func testParentAndChildBothEditedElsewhere() throws {
        for policy in ["server-wins", "property-server-wins", "local-wins", "error"] {
            for unique in [false, true] {
                let what = "\(policy) unique=\(unique)"
                let f = try Fleet(backend: .file, schema: Self.schema + """
                    CREATE TABLE IF NOT EXISTS tags(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                                    tag TEXT NOT NULL, color TEXT, PRIMARY KEY (note_id, tag));
                    """, storeYAML: unique ? Self.uniqueYAML + "\n      tags: {}" : "",
                    cloudExtra: "      merge_policy: \(policy)", label: "storectl-outbox-parent")
                try f.cloudMode("a")
                try f.cloudMode("b")
                try f.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'p', 'one'); "
                          + "INSERT INTO tags VALUES (1, 'x', 'plain')")
                try f.syncRounds(1, ["a", "b"])
                try f.sql("b", "UPDATE notes SET title = 'one edited by b'; UPDATE tags SET color = 'red by b'")
                try f.sql("a", "BEGIN; DELETE FROM notes WHERE id = 1; INSERT INTO notes(id, uuid, title) VALUES (1, 'p', "
                          + "'one reborn'); INSERT INTO tags VALUES (1, 'x', 'blue by a'); COMMIT;")
                try f.run("b", ["sync"])
                for _ in 0..<4 {
                    for s in ["a", "b"] {
                        let r = try f.run(s, ["sync"], expect: nil)
                        if r.status != 0 {
                            XCTAssertEqual(policy, "error", "\(what): sync of \(s)\n\(r)")
                            try f.run(nil, ["config", "set", "stores.\(s).cloud.merge_policy", "server-wins"])
                        }
                    }
                }
                let da = try f.sql("a", "SELECT n.uuid || '|' || n.title || '|' || coalesce(t.tag || '=' || t.color, '-') "
                                   + "FROM notes n LEFT JOIN tags t ON t.note_id = n.id ORDER BY 1")
                let db = try f.sql("b", "SELECT n.uuid || '|' || n.title || '|' || coalesce(t.tag || '=' || t.color, '-') "
                                   + "FROM notes n LEFT JOIN tags t ON t.note_id = n.id ORDER BY 1")
                XCTAssertEqual(try f.rows("a"), try f.rows("b"), "\(what)\na:\n\(da)b:\n\(db)")
                let n = try f.sql("a", "SELECT count(*) FROM notes").trimmingCharacters(in: .whitespacesAndNewlines)
                XCTAssertEqual(n, "1", "\(what): one note with uuid p\n\(da)")
                for s in f.stores { try f.assertHealthy(s, what) }
                let differ = try f.rows("a") != f.rows("b")
                for s in f.stores {
                    let v = try f.run(nil, ["--store", s, "verify"], expect: nil)
                    XCTAssertEqual(v.status, 0, "\(what): verify of \(s)\n\(v)")
                    if differ {
                        let (doctor, healthy) = try f.doctor(s)
                        XCTAssertFalse(healthy, "\(what): doctor calls \(s) healthy while the stores differ\n\(doctor)")
                    }
                }
            }
        }
    }
}
