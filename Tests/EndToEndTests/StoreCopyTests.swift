import Foundation
import TestSupport
import XCTest

/// A store file copied to a second place shares its store id: storectl refuses to sync the copy until it has an
/// identity of its own, and then nothing is lost or duplicated.
final class StoreCopyTests: XCTestCase {
    func testACopiedStoreIsRefusedUntilItGetsANewIdentity() throws {
        let dir = try TempDirectory()
        try dir.write("schema.sql", "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL);")
        var yaml = "version: 1\nstores:\n"
        for name in ["a", "copy"] {
            yaml += """
                  \(name):
                    path: \(name).sqlite
                    schema: schema.sql
                    cloud:
                      container: iCloud.com.example.copy
                      url: file:c.container
                      create_if_missing: true
                      account: demo
                      secret: ${S:-demo-secret}

                """
        }
        try dir.write("config.yaml", yaml)
        func run(_ args: [String], expect: Int32 = 0, line: UInt = #line) throws -> ProcessResult {
            let r = try Binary.storectl(args, in: dir.path)
            XCTAssertEqual(r.status, expect, "storectl \(args.joined(separator: " "))\n\(r)", line: line)
            return r
        }
        func sql(_ store: String, _ statement: String) throws -> String {
            try Binary.run("/usr/bin/sqlite3", [dir.file("\(store).sqlite"), statement], in: dir.path).stdout
        }
        _ = try run(["--store", "a", "init"])
        _ = try sql("a", "INSERT INTO notes(uuid) VALUES ('shared')")
        _ = try run(["--store", "a", "mode", "cloud"])
        // The user copies the store file to make a second device.
        try FileManager.default.copyItem(atPath: dir.file("a.sqlite"), toPath: dir.file("copy.sqlite"))
        let refused = try run(["--store", "copy", "sync"], expect: 65)
        XCTAssertTrue(refused.stderr.contains("is a copy of the store"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("'storectl --store copy init --new-identity'"), refused.stderr)
        // The original keeps syncing.
        _ = try run(["--store", "a", "sync"])

        _ = try run(["--store", "copy", "init", "--new-identity"])
        _ = try sql("a", "INSERT INTO notes(uuid) VALUES ('from a')")
        _ = try sql("copy", "INSERT INTO notes(uuid) VALUES ('from the copy')")
        for store in ["copy", "a", "copy"] { _ = try run(["--store", store, "sync"]) }
        let expected = "from a\nfrom the copy\nshared\n"
        XCTAssertEqual(try sql("a", "SELECT uuid FROM notes ORDER BY uuid"), expected)
        XCTAssertEqual(try sql("copy", "SELECT uuid FROM notes ORDER BY uuid"), expected)
    }
}
