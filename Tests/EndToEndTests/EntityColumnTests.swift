import Foundation
import TestSupport
import XCTest

/// Columns named by `entities:` (`unique:`, `keep:`, `tombstone:`) are checked against the store's tables wherever
/// the store is available: a misspelt one is exit 78 naming the config key, never failed SQL (exit 70).
final class EntityColumnTests: XCTestCase {
    func testAMissingColumnIsAConfigErrorNamingItsKey() throws {
        let cases: [(String, String)] = [
            ("notes: {unique: [uuid, no_such_col]}", "stores.a.entities.notes.unique[1]: table notes has no column 'no_such_col'"),
            ("notes: {unique: [uuid], keep: newest(no_such_col)}", "stores.a.entities.notes.keep: table notes has no column 'no_such_col'"),
            ("notes: {unique: [uuid], keep: oldest(titel)}", "stores.a.entities.notes.keep: table notes has no column 'titel'"),
        ]
        for (entity, message) in cases {
            let s = try Fleet.notes(extra: "    entities:\n      \(entity)\n      tags: {}\n      note_tags: {}\n"
                                         + "      settings: {}\n", label: "storectl-entity")
            // The store exists: the columns can be checked.
            try s.run("a", ["init"])
            for args in [["cloud", "check"], ["mode", "cloud"], ["dedupe"], ["--json", "cloud", "check"],
                         ["config", "validate"]]
            {
                let r = try s.run("a", args, expect: nil)
                XCTAssertEqual(r.status, 78, "\(entity) \(args)\n\(r)")
                XCTAssertTrue((r.stderr + r.stdout).contains(message), "\(entity) \(args)\n\(r)")
                XCTAssertFalse(r.stderr.contains("SQLite error"), "\(r)")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: s.dir.file("cloud/shared.container-wal")))
            XCTAssertEqual(try s.run("a", ["mode"]).stdout, "local\n")
        }
        // The hint suggests the near column.
        let s = try Fleet.notes(extra: "    entities:\n      notes: {unique: [uuid], keep: newest(titel)}\n",
                                 label: "storectl-entity")
        try s.run("a", ["init"])
        let r = try s.run("a", ["cloud", "check"], expect: 78)
        XCTAssertTrue(r.stderr.contains("hint: did you mean 'title'?"), r.stderr)
    }
}
