import Foundation
import TestSupport
import XCTest

/// A store file copied to a second place shares its store id: storectl refuses to sync the copy until it has an
/// identity of its own, and then nothing is lost or duplicated.
final class StoreCopyTests: XCTestCase {
    func testACopiedStoreIsRefusedUntilItGetsANewIdentity() throws {
        let p = try E2EProject()
        try p.writeSchema("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL);")
        let cloud = E2EProject.Cloud.file("iCloud.com.example.copy", url: "file:c.container", secret: "${S:-demo-secret}")
        try p.writeConfig(["a", "copy"].map { E2EProject.Store($0, cloud: cloud) })
        func run(_ args: [String], expect: Int32 = 0, line: UInt = #line) throws -> ProcessResult {
            try p.run(args, expect: expect, line: line)
        }
        func sql(_ store: String, _ statement: String) throws -> String { try p.sql(store, statement) }
        _ = try run(["--store", "a", "init"])
        _ = try sql("a", "INSERT INTO notes(uuid) VALUES ('shared')")
        _ = try run(["--store", "a", "mode", "cloud"])
        // The user copies the store file to make a second device.
        try FileManager.default.copyItem(atPath: p.storePath("a"), toPath: p.storePath("copy"))
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
