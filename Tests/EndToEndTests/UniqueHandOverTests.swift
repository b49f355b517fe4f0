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
}
