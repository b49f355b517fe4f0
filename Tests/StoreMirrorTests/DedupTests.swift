import Foundation
import StoreCloud
import StoreHistory
import StoreMirror
import StoreSQLite
import TestSupport
import XCTest

final class DedupTests: XCTestCase {
    /// Every order in which `count` stores can take their turn.
    func permutations(_ count: Int) -> [[Int]] {
        if count == 1 { return [[0]] }
        return permutations(count - 1).flatMap { p in (0...p.count).map { i in var q = p; q.insert(count - 1, at: i); return q } }
    }

    func testSameNaturalKeyCreatedOfflineOnSeveralStoresLeavesOneRowEverywhere() throws {
        for storeCount in [2, 3] {
            for order in permutations(storeCount) {
                let f = try MirrorFixture()
                f.uniqueRules = ["notes": UniqueRule(columns: ["uuid"], keep: .newest("updated_at"))]
                let stores = try (0..<storeCount).map { try f.store("s\($0)") }
                for (i, db) in stores.enumerated() {
                    try f.write(db, "INSERT INTO notes(uuid, title, updated_at) VALUES ('same', ?, ?)", ["from \(i)", 100 + i])
                    try f.write(db, "INSERT INTO notes(uuid, title) VALUES (?, 'own')", ["own-\(i)"])
                }
                for i in order { try f.sync(stores[i]) }
                for db in stores { try f.sync(db) }
                for db in stores { try f.sync(db) }
                let expected = ["same|from \(storeCount - 1)"] + (0..<storeCount).map { "own-\($0)|own" }.sorted()
                for (i, db) in stores.enumerated() {
                    XCTAssertEqual(try f.rows(db, "SELECT uuid, title FROM notes").sorted(), expected.sorted(),
                                   "store \(i), \(storeCount) stores, order \(order)")
                }
                XCTAssertEqual(try f.cloud().zoneInfo("default")?.liveRecords, Int64(storeCount + 1))
            }
        }
    }

    func testTiesAreBrokenByRecordNameTheSameWayEverywhere() throws {
        let f = try MirrorFixture()
        f.uniqueRules = ["tags": UniqueRule(columns: ["name"], keep: .first)]
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO tags(name) VALUES ('work')")
        try f.write(b, "INSERT INTO tags(name) VALUES ('work')")
        try f.sync(a)
        try f.sync(b)
        try f.sync(a)
        try f.sync(b)
        let nameA = try a.scalar("SELECT r.record_name FROM tags t JOIN _storectl_records r ON r.entity = 'tags' AND r.pk = json_array(t.id)")
        let nameB = try b.scalar("SELECT r.record_name FROM tags t JOIN _storectl_records r ON r.entity = 'tags' AND r.pk = json_array(t.id)")
        XCTAssertEqual(try a.scalar("SELECT count(*) FROM tags")?.int64, 1)
        XCTAssertEqual(try b.scalar("SELECT count(*) FROM tags")?.int64, 1)
        XCTAssertEqual(nameA, nameB)
    }

    func testDedupRepointsForeignKeyChildrenToTheWinner() throws {
        let f = try MirrorFixture()
        f.uniqueRules = ["tags": UniqueRule(columns: ["name"], keep: .first)]
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO notes(id, uuid) VALUES (1, 'na')")
        try f.write(a, "INSERT INTO tags(id, name) VALUES (1, 'work')")
        try f.write(a, "INSERT INTO note_tags VALUES (1, 1)")
        try f.write(b, "INSERT INTO notes(id, uuid) VALUES (1, 'nb')")
        try f.write(b, "INSERT INTO tags(id, name) VALUES (1, 'work')")
        try f.write(b, "INSERT INTO note_tags VALUES (1, 1)")
        for db in [a, b, a, b] { try f.sync(db) }
        let links = "SELECT n.uuid, t.name FROM note_tags nt JOIN notes n ON n.id = nt.note_id JOIN tags t ON t.id = nt.tag_id"
        XCTAssertEqual(try f.rows(a, links), ["na|work", "nb|work"])
        XCTAssertEqual(try f.rows(b, links), ["na|work", "nb|work"])
        XCTAssertEqual(try a.scalar("SELECT count(*) FROM tags")?.int64, 1)
        XCTAssertEqual(try b.scalar("SELECT count(*) FROM tags")?.int64, 1)
    }

    func testDedupeCommandResolvesExistingDuplicatesAndDryRunChangesNothing() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        try f.write(a, "INSERT INTO notes(uuid, title, updated_at) VALUES ('x', 'old', 1), ('x', 'new', 2), ('y', 'y', 0)")
        let rules = ["notes": UniqueRule(columns: ["uuid"], keep: .newest("updated_at"))]
        let entities = try Mirror.trackedTables(a).map { try EntityMap.load(a, table: $0, tracked: Set(["notes", "tags", "note_tags", "settings"])) }
        try MirrorState.install(a)
        let before = try f.dump(a)
        let dry = try Mirror.dedupe(db: a, entities: entities, rules: rules, entity: nil, dryRun: true)
        XCTAssertEqual(dry.groups.count, 1)
        XCTAssertEqual(dry.deleted, 0)
        XCTAssertEqual(try a.scalar("SELECT count(*) FROM notes")?.int64, 3)
        XCTAssertEqual(try f.dump(a), before)
        let real = try Mirror.dedupe(db: a, entities: entities, rules: rules, entity: nil, dryRun: false)
        XCTAssertEqual(real.deleted, 1)
        XCTAssertEqual(try f.rows(a, "SELECT uuid, title FROM notes"), ["x|new", "y|y"])
        XCTAssertEqual(try a.scalar("SELECT author FROM _storectl_history ORDER BY seq DESC LIMIT 1")?.string, "dedupe")
    }
}
