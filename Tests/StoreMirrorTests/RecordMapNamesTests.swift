import Foundation
@testable import StoreMirror
import StoreSQLite
import TestSupport
import XCTest

/// The record map keeps a name only when it is not `entity:pk` (`RecordMap.storedName`), and finds every name by
/// `RecordMap.named`, kept or derived, through an index.
final class RecordMapNamesTests: XCTestCase {
    func installed() throws -> (MirrorFixture, Connection) {
        let f = try MirrorFixture()
        let db = try f.store("a")
        try MirrorState.install(db)
        return (f, db)
    }

    /// Swift and SQL agree, byte for byte, on which names are derived: a table name with a colon keeps every name,
    /// and a name that is the same text in another Unicode normalization is not the derived one.
    func testANameIsKeptUnlessItIsTheTableAndTheKeyByteForByte() throws {
        let (_, db) = try installed()
        let cases: [(name: String, entity: String, pk: String, kept: Bool)] = [
            ("notes:[\"a\"]", "notes", "[\"a\"]", false),
            ("notes:[\"b\"]", "notes", "[\"a\"]", true),
            ("notes/00ab", "notes", "[1]", true),
            ("a:b:[\"c\"]", "a:b", "[\"c\"]", true),
            ("caf\u{E9}:[1]", "caf\u{E9}", "[1]", false),
            ("cafe\u{301}:[1]", "caf\u{E9}", "[1]", true),
            ("notes:[\"\u{E9}\"]", "notes", "[\"e\u{301}\"]", true),
            ("notes:", "notes", "", false),
            ("notes:[\"a\"].0a1b", "notes", "[\"a\"]", true),
        ]
        for c in cases {
            let swift = RecordMap.storedName(c.name, entity: c.entity, pk: c.pk)
            XCTAssertEqual(swift, c.kept ? c.name : nil, "\(c)")
            let sql = try db.scalar("SELECT \(RecordMap.storedNameSQL("?1", entity: "?2", pk: "?3"))",
                                    [c.name, c.entity, c.pk])?.string
            XCTAssertEqual(sql, swift, "SQL and Swift differ on \(c)")
        }
    }

    /// Each entry is found by its name and by no other, kept or derived, and both searches use an index.
    func testEveryNameFindsItsEntryAndOnlyItThroughAnIndex() throws {
        let (_, db) = try installed()
        let map = RecordMap(db)
        let entries: [(entity: String, pk: String, name: String)] = [
            ("notes", "[\"a\"]", "notes:[\"a\"]"),
            ("notes", "[\"b\"]", "notes:[\"a\"].0a1b"),
            ("notes", "[\"c\"]", "notes:[\"d\"]"),
            ("tags", "[1]", "tags/0123456789abcdef000000000001"),
            ("a:b", "[1]", "a:b:[1]"),
        ]
        for e in entries {
            try map.record(entity: e.entity, pk: e.pk, name: e.name, tag: "t", base: nil, extra: nil, deleted: false)
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM _storectl_records WHERE stored_name IS NULL")?.int64, 1)
        for e in entries {
            let found = try db.query("SELECT entity, pk FROM _storectl_records WHERE \(RecordMap.named("?1"))", [e.name])
                .map { "\($0[0].string ?? "") \($0[1].string ?? "")" }
            XCTAssertEqual(found, ["\(e.entity) \(e.pk)"], e.name)
        }
        // A name that holds a NUL after a derived one is another name (`substr` alone stops at the NUL).
        for missing in ["notes:[\"b\"]", "notes:[\"c\"]", "notes", "a:[1]", "", "tags:[1]", "notes:[\"a\"]\u{0}x"] {
            XCTAssertTrue(try db.query("SELECT 1 FROM _storectl_records WHERE \(RecordMap.named("?1"))", [missing])
                .isEmpty, missing)
        }
        let plan = try db.query("EXPLAIN QUERY PLAN SELECT pk FROM _storectl_records WHERE \(RecordMap.named("?1"))",
                                ["x"]).compactMap { $0[3].string }.joined(separator: "\n")
        XCTAssertTrue(plan.contains("_storectl_records_name") && plan.contains("PRIMARY KEY"), plan)
        XCTAssertFalse(plan.contains("SCAN"), plan)
    }

    /// A name another key holds, kept or derived, moves to the key that records it now: never two entries with
    /// one name.
    func testANameHeldByAnotherKeyMovesInEitherForm() throws {
        let (_, db) = try installed()
        let map = RecordMap(db)
        // A derived name, then recorded for another key (kept there).
        try map.record(entity: "notes", pk: "[\"a\"]", name: "notes:[\"a\"]", tag: "1", base: nil, extra: nil,
                       deleted: false)
        try map.record(entity: "notes", pk: "[\"z\"]", name: "notes:[\"a\"]", tag: "2", base: nil, extra: nil,
                       deleted: false)
        // A kept name, then recorded for the key that derives it.
        try map.record(entity: "notes", pk: "[\"y\"]", name: "notes:[\"b\"]", tag: "3", base: nil, extra: nil,
                       deleted: false)
        try map.record(entity: "notes", pk: "[\"b\"]", name: "notes:[\"b\"]", tag: "4", base: nil, extra: nil,
                       deleted: false)
        let rows = try db.query("SELECT pk, record_name, change_tag FROM _storectl_records ORDER BY pk")
            .map { "\($0[0].string ?? "") \($0[1].string ?? "") \($0[2].string ?? "")" }
        XCTAssertEqual(rows, ["[\"b\"] notes:[\"b\"] 4", "[\"z\"] notes:[\"a\"] 2"])
        // `rename` to a name a derived entry holds gets a suffix; `assignName` and `set` keep one entry a name.
        try map.record(entity: "notes", pk: "[\"c\"]", name: "notes:[\"c\"]", tag: "5", base: nil, extra: nil,
                       deleted: false)
        try map.rename(entity: "notes", pk: "[\"b\"]", to: "notes:[\"c\"]")
        let renamed = try XCTUnwrap(try db.scalar("SELECT record_name FROM _storectl_records WHERE pk = '[\"b\"]'")?.string)
        XCTAssertTrue(renamed.hasPrefix("notes:[\"c\"]."), renamed)
        try map.set(entity: "notes", pk: "[\"q\"]", name: "notes:[\"c\"]", tag: "6", base: nil, deleted: false)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM _storectl_records WHERE record_name = 'notes:[\"c\"]'")?.int64, 1)
        XCTAssertEqual(try db.scalar("SELECT pk FROM _storectl_records WHERE record_name = 'notes:[\"c\"]'")?.string,
                       "[\"q\"]")
    }
}
