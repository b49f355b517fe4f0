import Foundation
import TestSupport
import XCTest

/// `storectl verify` on both backends: in sync, then rows changed behind storectl's back in the container named
/// exactly, with pending changes told apart.
final class VerifyTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                         score REAL);
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value);
        """

    func testVerifyNamesExactlyTheRowsChangedBehindItsBackInAContainerFile() throws {
        try scenario(Fleet(backend: .file, schema: Self.schema, label: "storectl-verify"))
    }

    func testVerifyNamesExactlyTheRowsChangedBehindItsBackInPostgreSQL() throws {
        guard let backend = FleetBackend.postgres() else { return }
        try scenario(Fleet(backend: backend, schema: Self.schema, label: "storectl-verify-pg"))
    }

    /// Runs SQL on the container, whatever its backend, as a tool writing behind storectl's back would.
    func tamper(_ f: Fleet, _ sql: String) throws {
        switch f.backend {
        case .file: try f.containerSQL(sql.replacingOccurrences(of: "{records}", with: "records"))
        case .postgres: try f.psql(sql.replacingOccurrences(of: "{records}", with: "\(f.pgSchema).records")
            .replacingOccurrences(of: "deleted = 1", with: "deleted = true"))
        }
    }

    func scenario(_ f: Fleet) throws {
        try f.initialise("a")
        try f.sql("a", """
            INSERT INTO notes(uuid, title, score) VALUES ('n1', 'one', 0.1), ('n2', 'two', 2.5), ('n3', 'three', NULL);
            INSERT INTO settings VALUES ('theme', 'dark'), ('size', 12), ('blob', x'00ff10');
            """)
        try f.cloudMode("a")
        try f.cloudMode("b")
        let clean = try f.json("a", ["verify"])
        XCTAssertEqual(JSONDoc.get(clean.doc, "version") as? Int, 1, clean.result.stdout)
        XCTAssertEqual(JSONDoc.get(clean.doc, "in_sync") as? Bool, true, clean.result.stdout)
        XCTAssertEqual(JSONDoc.int(clean.doc, "difference_count"), 0)
        let tables = JSONDoc.get(clean.doc, "tables") as? [[String: Any]] ?? []
        XCTAssertEqual(tables.map { $0["table"] as? String }, ["notes", "settings"])
        XCTAssertEqual(tables.map { $0["matching"] as? Int }, [3, 3])
        try f.run("b", ["verify"])

        // Behind storectl's back: one field of one record rewritten, one record deleted, one added, none with a
        // new seq, so no sync ever notices.
        let n2 = try f.sql("a", "SELECT record_name FROM _storectl_records WHERE entity = 'notes' AND pk = '[2]'")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        try tamper(f, "UPDATE {records} SET fields = '{\"uuid\":\"n2\",\"title\":\"two\",\"score\":2.75}' "
                   + "WHERE record_name = '\(n2)'")
        try tamper(f, "UPDATE {records} SET deleted = 1 WHERE record_name = 'settings:[\"size\"]'")
        // Pending changes are told apart: one made here and not exported, one made on b and not imported here.
        try f.sql("a", "UPDATE notes SET title = 'edited here' WHERE uuid = 'n1'")
        try f.sql("b", "INSERT INTO settings VALUES ('lang', 'fr')")
        try f.run("b", ["sync"])

        let found = try f.json("a", ["verify"], expect: 1)
        let doc = found.doc
        XCTAssertEqual(JSONDoc.get(doc, "in_sync") as? Bool, false)
        XCTAssertEqual(JSONDoc.int(doc, "difference_count"), 4, found.result.stdout)
        XCTAssertEqual(JSONDoc.int(doc, "unexplained_count"), 2, found.result.stdout)
        let diffs = JSONDoc.get(doc, "differences") as? [[String: Any]] ?? []
        func find(_ table: String, _ key: String) -> [String: Any]? {
            diffs.first { d in
                d["table"] as? String == table
                    && (try? JSONSerialization.data(withJSONObject: d["key"] ?? NSNull(), options: [.fragmentsAllowed]))
                        .map { String(decoding: $0, as: UTF8.self) } == key
            }
        }
        let tampered = try XCTUnwrap(find("notes", "[2]"), found.result.stdout)
        XCTAssertEqual(tampered["state"] as? String, "differs")
        XCTAssertTrue(tampered["pending"] is NSNull)
        let columns = tampered["columns"] as? [[String: Any]] ?? []
        XCTAssertEqual(columns.count, 1, "only the score differs: \(columns)")
        XCTAssertEqual(columns.first?["column"] as? String, "score")
        XCTAssertEqual(columns.first?["local"] as? Double, 2.5)
        XCTAssertEqual(columns.first?["cloud"] as? Double, 2.75)
        let deleted = try XCTUnwrap(find("settings", "[\"size\"]"), found.result.stdout)
        XCTAssertEqual(deleted["state"] as? String, "local_only")
        XCTAssertTrue(deleted["pending"] is NSNull)
        XCTAssertEqual(find("notes", "[1]")?["pending"] as? String, "pending_export")
        let fromB = diffs.first { $0["state"] as? String == "cloud_only" }
        XCTAssertEqual(fromB?["table"] as? String, "settings")
        XCTAssertEqual(fromB?["pending"] as? String, "pending_import")
        // Unexplained differences come first.
        XCTAssertEqual(diffs.prefix(2).map { $0["pending"] is NSNull }, [true, true])

        // The human form names the same rows, each differing column with both values.
        let human = try f.run("a", ["verify"], expect: 1).stdout
        XCTAssertTrue(human.contains("notes [2]") && human.contains("score: 2.5 here, 2.75 in the cloud"), human)
        XCTAssertTrue(human.contains("settings [\"size\"]") && human.contains("changed behind storectl's back"), human)

        // A sync settles the pending changes; the rows changed behind its back still differ, and verify says so.
        try f.run("a", ["sync"])
        let after = try f.json("a", ["verify"], expect: 1)
        XCTAssertEqual(JSONDoc.int(after.doc, "difference_count"), 2, after.result.stdout)
        XCTAssertEqual(JSONDoc.int(after.doc, "unexplained_count"), 2, after.result.stdout)
        // Once the row is written again, it is exported and the zone matches.
        try f.sql("a", "UPDATE notes SET score = 2.6 WHERE uuid = 'n2'; UPDATE settings SET value = 13 WHERE key = 'size'")
        try f.run("a", ["sync"])
        try f.run("a", ["verify"])
        try f.run("a", ["--limit", "x", "verify"], expect: 64)
    }

    func testAnUnreachableCloudIsExit69AndAMissingStoreExit66() throws {
        let f = try Fleet(backend: .file, schema: Self.schema, label: "storectl-verify-down")
        try f.cloudMode("a")
        try FileManager.default.moveItem(atPath: f.dir.file("cloud/shared.container"),
                                         toPath: f.dir.file("cloud/elsewhere.container"))
        let down = try f.run("a", ["verify"], expect: 69)
        XCTAssertTrue(down.stderr.contains("error:"), down.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: f.dir.file("cloud/shared.container")),
                       "verify created a container")
        try f.run("b", ["verify"], expect: 66)
    }
}
