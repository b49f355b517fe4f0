import Foundation
import TestSupport
import XCTest

/// A UNIQUE value handed from a deleted row to a new row in one export: a note is replaced by a new one that takes
/// its uuid, and its comments (with their replies) move to the new note before the old one is deleted. Every store
/// ends with the comments and their replies under the new note: the old note's deletion, applied where it arrives,
/// must not cascade to children that moved away from it.
final class UniqueHandOverTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);
        CREATE TABLE IF NOT EXISTS comments(id INTEGER PRIMARY KEY,
            note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE, body TEXT);
        CREATE TABLE IF NOT EXISTS replies(id INTEGER PRIMARY KEY,
            comment_id INTEGER NOT NULL REFERENCES comments(id) ON DELETE CASCADE, body TEXT);
        """

    func handOver(_ backend: FleetBackend, batch: String?) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-handover")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            INSERT INTO notes VALUES (1, 'u-1', 'old'), (5, 'u-5', 'other');
            INSERT INTO comments VALUES (1, 1, 'first'), (2, 1, 'second'), (3, 5, 'elsewhere');
            INSERT INTO replies VALUES (1, 1, 'reply to first'), (2, 2, 'reply to second'), (3, 3, 'stays');
            """)
        try f.syncRounds(2, ["a", "b"])
        // The replacement, in one transaction: the new note takes the old one's uuid.
        try f.sql("a", """
            BEGIN;
            INSERT INTO notes VALUES (2, 'u-tmp', 'new');
            UPDATE comments SET note_id = 2 WHERE note_id = 1;
            DELETE FROM notes WHERE id = 1;
            UPDATE notes SET uuid = 'u-1' WHERE id = 2;
            COMMIT;
            """)
        let env = batch.map { ["STORECTL_BATCH_SIZE": $0, "STORECTL_PAGE_SIZE": $0] } ?? [:]
        for _ in 0..<2 { for s in ["a", "b"] { try f.run(s, ["sync"], env: env) } }
        let expected = [
            "comments|body=t:'elsewhere'|note_id=->notes{title=t:'other',uuid=t:'u-5'}",
            "comments|body=t:'first'|note_id=->notes{title=t:'new',uuid=t:'u-1'}",
            "comments|body=t:'second'|note_id=->notes{title=t:'new',uuid=t:'u-1'}",
            "notes|title=t:'new'|uuid=t:'u-1'",
            "notes|title=t:'other'|uuid=t:'u-5'",
            "replies|body=t:'reply to first'|comment_id=->comments{body=t:'first'}",
            "replies|body=t:'reply to second'|comment_id=->comments{body=t:'second'}",
            "replies|body=t:'stays'|comment_id=->comments{body=t:'elsewhere'}",
        ]
        XCTAssertEqual(try f.rows("a").sorted(), expected, "[\(backend)] the store that replaced the note")
        try f.assertRows(expected, "a UNIQUE value handed from a deleted note to a new one")
        for s in f.stores { try f.assertHealthy(s, "after the hand-over") }
    }

    func testAUniqueValueHandedToANewRowKeepsTheMovedChildrenFile() throws { try handOver(.file, batch: nil) }
    func testAUniqueValueHandedToANewRowKeepsTheMovedChildrenInSmallPagesFile() throws {
        try handOver(.file, batch: "1")
    }
    func testAUniqueValueHandedToANewRowKeepsTheMovedChildrenPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try handOver(pg, batch: nil)
    }

    /// The same hand-over on schemas and policies where the new row's value is not byte for byte the old one's, or
    /// where freeing it takes more: each store ends with every comment and reply, the same rows everywhere.
    func variant(_ backend: FleetBackend, notes: String, newValue: String, policy: String? = nil,
                 otherEditsTheOldNote: Bool = false, file: StaticString = #filePath, line: UInt = #line) throws
    {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT);
            \(notes)
            CREATE TABLE IF NOT EXISTS comments(id INTEGER PRIMARY KEY,
                note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE, body TEXT);
            CREATE TABLE IF NOT EXISTS replies(id INTEGER PRIMARY KEY,
                comment_id INTEGER NOT NULL REFERENCES comments(id) ON DELETE CASCADE, body TEXT);
            """, cloudExtra: policy.map { "      merge_policy: \($0)" } ?? "", label: "storectl-handover")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            INSERT INTO folders VALUES (1, 'inbox');
            INSERT INTO notes(id, folder_id, uuid, title) VALUES (1, 1, 'u-1', 'old');
            INSERT INTO comments VALUES (1, 1, 'first'), (2, 1, 'second');
            INSERT INTO replies VALUES (1, 1, 'reply to first'), (2, 2, 'reply to second');
            """)
        try f.syncRounds(2, ["a", "b"])
        if otherEditsTheOldNote { try f.sql("b", "UPDATE notes SET title = 'edited on b' WHERE id = 1") }
        try f.sql("a", """
            BEGIN;
            INSERT INTO notes(id, folder_id, uuid, title) VALUES (2, 1, 'u-9', 'new');
            UPDATE comments SET note_id = 2 WHERE note_id = 1;
            DELETE FROM notes WHERE id = 1;
            UPDATE notes SET uuid = '\(newValue)' WHERE id = 2;
            COMMIT;
            """)
        try f.syncRounds(3, ["a", "b"])
        for s in f.stores {
            XCTAssertEqual(try f.sql(s, "SELECT count(*) FROM replies"), "2\n", "[\(backend)] \(s): replies lost",
                           file: file, line: line)
            XCTAssertEqual(try f.sql(s, "SELECT count(*) FROM comments c JOIN notes n ON n.id = c.note_id WHERE n.title = 'new'"),
                           "2\n", "[\(backend)] \(s): the moved comments", file: file, line: line)
        }
        try f.assertSameRows("a UNIQUE value handed over (\(newValue), \(policy ?? "default"))", file: file, line: line)
        for s in f.stores { try f.assertHealthy(s, "after the hand-over", file: file, line: line) }
    }

    func testAValueEqualUnderItsCollationFile() throws {
        try variant(.file, notes: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, folder_id INTEGER REFERENCES folders(id),
                uuid TEXT NOT NULL UNIQUE COLLATE NOCASE, title TEXT);
            """, newValue: "U-1")
    }

    func testAUniqueKeyWithAReferenceColumnFile() throws {
        try variant(.file, notes: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, folder_id INTEGER REFERENCES folders(id),
                uuid TEXT NOT NULL, title TEXT, UNIQUE(folder_id, uuid));
            """, newValue: "u-1")
    }

    func testACheckThatRefusesTheUsualPlaceholdersFile() throws {
        try variant(.file, notes: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, folder_id INTEGER REFERENCES folders(id),
                uuid TEXT NOT NULL UNIQUE CHECK (uuid LIKE 'u-%' AND length(uuid) = 3), title TEXT);
            """, newValue: "u-1")
    }

    func testTheOldNoteEditedElsewhereUnderServerWinsFile() throws {
        for policy in ["server-wins", "property-server-wins"] {
            try variant(.file, notes: """
                CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, folder_id INTEGER REFERENCES folders(id),
                    uuid TEXT NOT NULL UNIQUE, title TEXT);
                """, newValue: "u-1", policy: policy, otherEditsTheOldNote: true)
        }
    }

    func testTheOldNoteEditedElsewhereUnderServerWinsPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try variant(pg, notes: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, folder_id INTEGER REFERENCES folders(id),
                uuid TEXT NOT NULL UNIQUE, title TEXT);
            """, newValue: "u-1", policy: "server-wins", otherEditsTheOldNote: true)
    }
}
