import Foundation
import TestSupport
import XCTest

/// What the sync engine does right today and must keep doing: each test here passes on the landed engine, and
/// guards a behaviour a rewrite could lose.
final class ResilienceGuardTests: XCTestCase {
    static let uniqueSchema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS tags(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                        tag TEXT NOT NULL, PRIMARY KEY (note_id, tag));
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value TEXT);
        """

    static let localOnlySchema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                         body TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS local_only(k TEXT PRIMARY KEY, v TEXT);
        """

    func onPostgres(_ body: (FleetBackend) throws -> Void, file: StaticString = #filePath, line: UInt = #line) rethrows {
        if let pg = FleetBackend.postgres(file: file, line: line) { try body(pg) }
    }

    /// Records that claim to be rows of a table the store does not sync (left out of `entities:`) never write it.
    func unsyncedTable(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: Self.localOnlySchema,
                          storeYAML: "    entities:\n      notes: {}\n", label: "storectl-guard")
        try f.cloudMode("a")
        try f.cloudMode("b")
        for s in ["a", "b"] { try f.sql(s, "INSERT INTO local_only VALUES ('mine', 'never synced')") }
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        try f.syncRounds(1, ["a", "b"])
        let q = Fleet.sqlLiteral
        var records = [
            PlantedRecord(name: #"local_only:["mine"]"#, type: "local_only", fieldsSQL: q(#"{"k":"mine","v":"overwritten"}"#),
                          bad: false, why: "a row of a table b does not sync"),
            PlantedRecord(name: #"local_only:["new"]"#, type: "local_only", fieldsSQL: q(#"{"k":"new","v":"planted"}"#),
                          bad: false, why: "a row of a table b does not sync"),
            PlantedRecord(name: "notes/after", type: "notes", fieldsSQL: q(#"{"uuid":"n2","title":"after","body":""}"#),
                          bad: false, why: "good"),
        ]
        try f.plant(&records)
        try f.syncRounds(2, ["b", "a"])
        for s in ["a", "b"] {
            XCTAssertEqual(try f.sql(s, "SELECT k || '=' || v FROM local_only").trimmingCharacters(in: .whitespacesAndNewlines),
                           "mine=never synced", "[\(backend)] a record wrote into \(s)'s table that is not synced")
            XCTAssertTrue(try f.rows(s, tables: ["notes"]).contains(Expect.note("n2", "after")))
        }
    }

    func testRecordsOfAnUnsyncedTableNeverWriteItFile() throws { try unsyncedTable(.file) }

    func testRecordsOfAnUnsyncedTableNeverWriteItPostgres() throws {
        if let pg = FleetBackend.postgres() { try unsyncedTable(pg) }
    }
}
