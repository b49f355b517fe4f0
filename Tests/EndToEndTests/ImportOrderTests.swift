import Foundation
import TestSupport
import XCTest

// The order in which the cloud hands records over is not an order any store passed through: a child saved before
// its parent (a kill between batches), a child moved away from a parent whose deletion cascades, a row deleted and
// inserted again under a UNIQUE value, duplicates merged while a store was away. Each case on both backends.

extension ResilienceCaseTests {
    /// A child can be in the cloud before its parent: a self-referencing table exports in key order, and a kill
    /// between two batches leaves rows that point at a parent saved only by the resume. A store that syncs in
    /// between must wait for the parent, not apply the orphan rule to rows whose parent was never deleted.
    func childBeforeItsParent(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, name TEXT NOT NULL, parent INTEGER REFERENCES nodes(id));
            """, label: "storectl-case6")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO nodes(id, name) VALUES (1, 'c1'), (2, 'c2')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "INSERT INTO nodes(id, name) VALUES (3, 'p'); UPDATE nodes SET parent = 3 WHERE id IN (1, 2)")
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1", "STORECTL_FAILPOINT": "export.after-batch-commit:1"],
                  expect: 137)
        let early = try f.run("b", ["sync"], expect: nil)
        XCTAssertEqual(early.status, 0, "[\(backend)] b's sync while a's parent is not in the cloud yet\n\(early)")
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1"])
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["nodes|name=t:'c1'|parent=->nodes{name=t:'p'}", "nodes|name=t:'c2'|parent=->nodes{name=t:'p'}",
                          "nodes|name=t:'p'|parent=null"], "children saved before their parent (a kill between batches)")
        for s in f.stores { try f.assertHealthy(s, "children saved before their parent") }
    }

    func testCase6ChildArrivesBeforeItsParentFile() throws { try childBeforeItsParent(.file) }
    func testCase6ChildArrivesBeforeItsParentPostgres() throws { try onPostgres(childBeforeItsParent) }
}

extension KeyConstraintCaseTests {
    /// The same collision, with storectl killed in the middle of the sync that meets it (exporting its own copy,
    /// or importing the other's), writes on the colliding rows before the resume, and the winner's store
    /// deduplicating in between: the children of the losing copy (exported or not yet) move to the winner.
    func uniqueCollisionWithAKill(_ backend: FleetBackend) throws {
        for (failpoint, policy) in [("export.after-save:1", "server-wins"), ("export.after-save:3", "server-wins"),
                                    ("export.after-save:3", "property-local-wins"),
                                    ("export.after-batch-commit:1", "property-server-wins"),
                                    ("import.before-commit", "server-wins"), ("import.after-commit", "local-wins")]
        {
            for firstSync in ["a", "b", "b between the kill and the resume"] {
                let what = "a UNIQUE collision, \(failpoint) on a, \(firstSync) synced first, merge_policy \(policy)"
                // `keep: newest(title)` makes b's copy ("by b") the winner, so a's copy and its children lose.
                let f = try Fleet(backend: backend, schema: Self.uniqueSchema, storeYAML: """
                        entities:
                          notes:
                            unique: [uuid]
                            keep: newest(title)
                          tags: {}
                          settings: {}
                    """, cloudExtra: "      merge_policy: \(policy)", label: "storectl-case4")
                for s in f.stores { try f.cloudMode(s) }
                for s in f.stores {
                    try f.sql(s, """
                        INSERT INTO notes(uuid, title) VALUES ('shared', 'by \(s)'), ('own-\(s)', 'only \(s)');
                        INSERT INTO tags SELECT id, 'tag-\(s)' FROM notes WHERE uuid = 'shared';
                        """)
                }
                if firstSync == "b" { try f.run("b", ["sync"]) }
                try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": failpoint, "STORECTL_BATCH_SIZE": "2"], expect: nil)
                try f.sql("a", "INSERT INTO tags SELECT id, 'after-kill' FROM notes WHERE uuid = 'shared';"
                          + "UPDATE notes SET title = 'own-a after the kill' WHERE uuid = 'own-a'")
                if firstSync.hasSuffix("resume") { try f.run("b", ["sync"]) }
                try f.syncRounds(3)
                let rows = try f.assertSameRows(late: true, what)
                XCTAssertEqual(rows.filter { $0.hasPrefix("notes|") && $0.contains("uuid=t:'shared'") }.count, 1,
                               "[\(backend)] \(what):\n" + rows.joined(separator: "\n"))
                for tag in ["tag-a", "tag-b", "after-kill"] {
                    XCTAssertTrue(rows.contains { $0.hasPrefix("tags|") && $0.contains("uuid=t:'shared'")
                        && $0.contains("tag=t:'\(tag)'") }, "[\(backend)] \(what): \(tag) was lost:\n"
                                  + rows.joined(separator: "\n"))
                }
                XCTAssertTrue(rows.contains { $0.contains("'own-a after the kill'") }, "[\(backend)] \(what)")
                for s in f.stores { try f.assertHealthy(s, what) }
            }
        }
    }

    func testCase4UniqueCollisionWithAKillFile() throws { try uniqueCollisionWithAKill(.file) }
    func testCase4UniqueCollisionWithAKillPostgres() throws { try onPostgres(uniqueCollisionWithAKill) }
}

extension ResilienceCaseTests {
    /// A child moved away from its parent, then the parent deleted, in one sync: the other stores must not let
    /// ON DELETE CASCADE take the moved child (and its own children) with the parent.
    func childMovedThenParentDeleted(_ backend: FleetBackend, policy: String) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                                             parent INTEGER REFERENCES nodes(id) ON DELETE CASCADE);
            """, cloudExtra: "      merge_policy: \(policy)", label: "storectl-case5")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO nodes(id, name, parent) VALUES (1, 'p', NULL), (2, 'c', 1), (3, 'g', 2), (4, 'other', 1)")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "UPDATE nodes SET parent = NULL WHERE name = 'c'; DELETE FROM nodes WHERE name = 'p'")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["nodes|name=t:'c'|parent=null", "nodes|name=t:'g'|parent=->nodes{name=t:'c'}"],
                         "a child moved away, then its old parent deleted (merge_policy \(policy))")
        for s in f.stores { try f.assertHealthy(s, "a child moved away, then its old parent deleted") }
    }

    func testCase5ChildMovedThenParentDeletedFile() throws {
        try childMovedThenParentDeleted(.file, policy: "property-local-wins")
        try childMovedThenParentDeleted(.file, policy: "error")
    }

    func testCase5ChildMovedThenParentDeletedPostgres() throws {
        try onPostgres { try childMovedThenParentDeleted($0, policy: "property-local-wins") }
        try onPostgres { try childMovedThenParentDeleted($0, policy: "error") }
    }
}

extension KeyConstraintCaseTests {
    /// The collision met by `mode cloud`: a store that was local while the others merged their copies comes back
    /// with its own copy and its own tag, in every order; the switch completes and every tag ends on the winner.
    func uniqueCollisionMetByModeCloud(_ backend: FleetBackend) throws {
        // `keep: newest(title)` makes c's copy ("by c") the winner, `oldest(title)` a's; nil: the SQL constraint only.
        for (policy, keep) in [("local-wins", "newest(title)"), ("local-wins", "oldest(title)"),
                               ("property-local-wins", "newest(title)"), ("server-wins", "oldest(title)"),
                               ("property-local-wins", nil)] as [(String, String?)]
        {
            let what = "a UNIQUE collision met by mode cloud (merge_policy \(policy), keep \(keep ?? "undeclared"))"
            let yaml = keep.map {
                "    entities:\n      notes:\n        unique: [uuid]\n        keep: \($0)\n      tags: {}\n      settings: {}\n"
            } ?? ""
            let f = try Fleet(stores: ["a", "b", "c"], backend: backend, schema: Self.uniqueSchema, storeYAML: yaml,
                              cloudExtra: "      merge_policy: \(policy)", label: "storectl-case4")
            try f.cloudMode("a")
            try f.cloudMode("b")
            try f.cloudMode("c")
            try f.run("c", ["mode", "local"])
            for s in f.stores {
                try f.sql(s, """
                    INSERT INTO notes(uuid, title) VALUES ('shared', 'by \(s)');
                    INSERT INTO tags SELECT id, 'tag-\(s)' FROM notes WHERE uuid = 'shared';
                    """)
            }
            try f.syncRounds(2, ["a", "b"])
            let back = try f.run("c", ["mode", "cloud"], expect: nil)
            XCTAssertEqual(back.status, 0, "[\(backend)] \(what)\n\(back)")
            try f.syncRounds(2, ["a", "b", "c"])
            let rows = try f.assertSameRows(late: true, what)
            for s in f.stores {
                XCTAssertTrue(rows.contains { $0.hasPrefix("tags|") && $0.contains("uuid=t:'shared'") && $0.contains("tag-\(s)") },
                              "[\(backend)] \(what): tag-\(s) lost:\n" + rows.joined(separator: "\n"))
            }
            for s in f.stores { try f.assertHealthy(s, what) }
        }
    }

    func testCase4UniqueCollisionMetByModeCloudFile() throws { try uniqueCollisionMetByModeCloud(.file) }
    func testCase4UniqueCollisionMetByModeCloudPostgres() throws { try onPostgres(uniqueCollisionMetByModeCloud) }
}

extension ResilienceGuardTests {
    /// Note n1 deleted and inserted again under its rowid as 'one reborn', with `then` in the same transaction.
    static func reinsertN1(then: String = "") -> String {
        """
        BEGIN;
        CREATE TEMP TABLE old_id AS SELECT id FROM notes WHERE uuid = 'n1';
        DELETE FROM notes WHERE uuid = 'n1';
        INSERT INTO notes(id, uuid, title) VALUES ((SELECT id FROM old_id), 'n1', 'one reborn');
        \(then)
        COMMIT;

        """
    }
}

extension ResilienceGuardTests {
    /// A row with a UNIQUE column deleted and inserted again (under its rowid, or a new one) by the same store is
    /// a new row, not a duplicate of the old one: it must survive, with its later edits, on every store.
    func reinsertUnderUnique(_ backend: FleetBackend, declared: Bool) throws {
        let f = try Fleet(backend: backend, schema: ResilienceGuardTests.uniqueSchema,
                          storeYAML: declared ? "    entities:\n      notes:\n        unique: [uuid]\n      tags: {}\n      settings: {}\n" : "",
                          label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three');"
                  + "INSERT INTO tags SELECT id, 'x' FROM notes WHERE uuid = 'n3'")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", ResilienceGuardTests.reinsertN1() + """
            DELETE FROM notes WHERE uuid = 'n2';
            INSERT INTO notes(uuid, title) VALUES ('n2', 'two reborn under a new rowid');
            """)
        try f.sql("a", "UPDATE notes SET title = 'one reborn, edited' WHERE uuid = 'n1'")
        try f.sql("b", "DELETE FROM notes WHERE uuid = 'n3'; INSERT INTO notes(uuid, title) VALUES ('n3', 'three reborn by b')")
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["notes|title=t:'one reborn, edited'|uuid=t:'n1'", "notes|title=t:'two reborn under a new rowid'|uuid=t:'n2'",
                          "notes|title=t:'three reborn by b'|uuid=t:'n3'"],
                         "rows with a UNIQUE column deleted and inserted again (unique: declared \(declared))")
        for s in f.stores { try f.assertHealthy(s, "re-inserted rows with a UNIQUE column") }
    }

    func testReinsertUnderAUniqueColumnFile() throws {
        try reinsertUnderUnique(.file, declared: false)
        try reinsertUnderUnique(.file, declared: true)
    }

    func testReinsertUnderAUniqueColumnPostgres() throws {
        try onPostgres { try reinsertUnderUnique($0, declared: false) }
        try onPostgres { try reinsertUnderUnique($0, declared: true) }
    }
}

extension HostileContainerTests {
    /// The hostile container with two more records: a bare rowid where a reference belongs, and a reference to a
    /// record that is not in the cloud yet (it must wait for its parent, then arrive).
    func testHostileReferenceRecordsFile() throws { try hostileContainer(.file, referenceAttacks: true) }

    func testHostileReferenceRecordsPostgres() throws {
        if let pg = FleetBackend.postgres() { try hostileContainer(pg, referenceAttacks: true) }
    }
}

extension ResilienceGuardTests {
    /// A store restored from a backup taken before it re-inserted a row under a UNIQUE column: the re-inserted row
    /// (a record of its own in the cloud, the old record a tombstone) comes back to the restored file.
    func reinsertThenRestore(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: ResilienceGuardTests.uniqueSchema, label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try f.syncRounds(1, ["a", "b"])
        try f.backup("a", as: "a-old")
        try f.sql("a", "UPDATE notes SET title = 'one edited' WHERE uuid = 'n1'")
        try f.run("a", ["sync"])
        try f.sql("a", ResilienceGuardTests.reinsertN1())
        try f.run("a", ["sync"])
        try f.restore("a", from: "a-old")
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["notes|title=t:'one reborn'|uuid=t:'n1'", "notes|title=t:'two'|uuid=t:'n2'"],
                         "a row re-inserted under a UNIQUE column, then the store restored from an older backup")
        for s in f.stores { try f.assertHealthy(s, "re-inserted, then restored") }
    }

    func testReinsertThenRestoreFile() throws { try reinsertThenRestore(.file) }
    func testReinsertThenRestorePostgres() throws { try onPostgres(reinsertThenRestore) }
}

extension ResilienceGuardTests {
    /// A note deleted and inserted again at its rowid (its links go by `ON DELETE CASCADE`), then linked again
    /// under the same key, and the export stopped right after the old note's tombstone: another store applies the
    /// tombstone alone (its links go too) before the rest arrives. The new link is a link of the new note, a record
    /// of its own: no conflict, even under `merge_policy: error`, and every store ends with the new note and link.
    func relinkAfterReinsert(_ backend: FleetBackend, policy: String) throws {
        let f = try Fleet(backend: backend, schema: ResilienceGuardTests.uniqueSchema,
                          cloudExtra: "      merge_policy: \(policy)", label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'); "
                  + "INSERT INTO tags SELECT id, 'x' FROM notes WHERE uuid = 'n1'")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", ResilienceGuardTests.reinsertN1(then: "INSERT INTO tags SELECT id, 'x' FROM notes WHERE uuid = 'n1';"))
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1", "STORECTL_FAILPOINT": "export.after-batch-commit:1"],
                  expect: 137)
        try f.run("b", ["sync"])
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["notes|title=t:'one reborn'|uuid=t:'n1'", "tags|note_id=->notes{title=t:'one reborn',uuid=t:'n1'}|tag=t:'x'"],
                         tables: ["notes", "tags"], "a note inserted again at its rowid and linked again (\(policy))")
        for s in f.stores { try f.assertHealthy(s, "relinked after a re-insert (\(policy))") }
    }

    func testRelinkAfterReinsertFile() throws {
        for policy in ["error", "property-local-wins"] { try relinkAfterReinsert(.file, policy: policy) }
    }

    func testRelinkAfterReinsertPostgres() throws {
        try onPostgres { try relinkAfterReinsert($0, policy: "error") }
    }
}

extension ResilienceCaseTests {
    /// A child (with its own subtree) moved from P to a NEW parent Q, then P deleted, in a self-referencing table
    /// where Q's key comes after the child's (the usual case: SQLite gives Q the next rowid). On the importing
    /// store the child's move waits for Q; it must be applied before P's tombstone cascades, or the subtree goes.
    func moveUnderNewParentThenDeleteOld(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                                             parent INTEGER REFERENCES nodes(id) ON DELETE CASCADE);
            """, label: "storectl-case5")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO nodes VALUES (1, 'P', NULL), (2, 'C', 1), (4, 'G', 2), (5, 'H', 4)")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "INSERT INTO nodes VALUES (3, 'Q', NULL); UPDATE nodes SET parent = 3 WHERE id = 2; "
                  + "DELETE FROM nodes WHERE id = 1")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["nodes|name=t:'Q'|parent=null", "nodes|name=t:'C'|parent=->nodes{name=t:'Q'}",
                          "nodes|name=t:'G'|parent=->nodes{name=t:'C'}", "nodes|name=t:'H'|parent=->nodes{name=t:'G'}"],
                         "a subtree moved under a new parent, the old parent deleted")
        for s in f.stores { try f.assertHealthy(s, "a subtree moved under a new parent") }
    }

    func testCase5MoveUnderNewParentThenDeleteOldFile() throws { try moveUnderNewParentThenDeleteOld(.file) }
    func testCase5MoveUnderNewParentThenDeleteOldPostgres() throws { try onPostgres(moveUnderNewParentThenDeleteOld) }
}

extension ResilienceGuardTests {
    /// Under `merge_policy: error` (and `server-wins`), a child of a merged duplicate whose store edits it while the
    /// winner's store re-points it: the re-point is storectl's own (every store resolves the loser's name through
    /// its aliases), never a change of the child's record that conflicts with the user's edit.
    func editWhileMerged(_ backend: FleetBackend, policy: String) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
            CREATE TABLE IF NOT EXISTS comments(id INTEGER PRIMARY KEY,
                note_id INTEGER REFERENCES notes(id) ON DELETE CASCADE, body TEXT);
            """, storeYAML: """
                entities:
                  notes:
                    unique: [uuid]
                    keep: newest(title)
                  comments: {}
            """, cloudExtra: "      merge_policy: \(policy)", label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('shared', 'by a'); "
                  + "INSERT INTO comments(note_id, body) SELECT id, 'comment by a' FROM notes")
        try f.sql("b", "INSERT INTO notes(uuid, title) VALUES ('shared', 'by b')")
        try f.run("a", ["sync"])
        try f.sql("a", "UPDATE comments SET body = 'comment edited by a'")
        try f.syncRounds(3, ["b", "a"])
        try f.assertRows(["notes|title=t:'by b'|uuid=t:'shared'",
                          "comments|body=t:'comment edited by a'|note_id=->notes{title=t:'by b',uuid=t:'shared'}"],
                         "a comment re-pointed by the winner's store while its body was edited (\(policy))")
        for s in f.stores { try f.assertHealthy(s, "a comment of a merged duplicate (\(policy))") }
    }

    func testEditWhileMergedFile() throws {
        for policy in ["error", "server-wins", "property-local-wins"] { try editWhileMerged(.file, policy: policy) }
    }

    func testEditWhileMergedPostgres() throws { try onPostgres { try editWhileMerged($0, policy: "error") } }
}
