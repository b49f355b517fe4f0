import Foundation
import TestSupport
import XCTest

/// `storectl cloud check`: the dry run of the cloud schema.
final class CloudCheckTests: XCTestCase {
    func config(_ dir: TempDirectory, schema: String) throws {
        try dir.write("schema.sql", schema)
        try dir.write("config.yaml", """
            version: 1
            stores:
              s:
                path: s.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.check
                  url: file:c.container
                  create_if_missing: true
                  account: demo
                  secret: x
            """)
        XCTAssertEqual(try Binary.storectl(["init"], in: dir.path).status, 0)
    }

    func testAMirrorableSchemaPassesAndUniqueConstraintsAreReportedAsDedupRules() throws {
        let dir = try TempDirectory()
        try config(dir, schema: """
            CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);
            CREATE TABLE links(note_id INTEGER REFERENCES notes(id), url TEXT, PRIMARY KEY (note_id, url));
            """)
        let r = try Binary.storectl(["cloud", "check"], in: dir.path)
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertTrue(r.stdout.contains("notes: ok (key id: surrogate)"), r.stdout)
        XCTAssertTrue(r.stdout.contains("links: ok (key note_id, url: natural)"), r.stdout)
        XCTAssertTrue(r.stdout.contains("  reference: note_id -> notes"), r.stdout)
        XCTAssertTrue(r.stdout.contains("  dedup rule: unique (uuid)"), r.stdout)
        XCTAssertTrue(r.stdout.hasSuffix("cloud check: ok (2 table(s))\n"), r.stdout)
        let json = try Binary.storectl(["--json", "cloud", "check"], in: dir.path)
        XCTAssertEqual(json.status, 0)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let entities = try XCTUnwrap(doc["entities"] as? [[String: Any]])
        XCTAssertEqual(entities.map { $0["name"] as? String }, ["links", "notes"])
    }

    func testABlobKeyIsAProblemAndExits65() throws {
        let dir = try TempDirectory()
        try config(dir, schema: "CREATE TABLE files(hash BLOB PRIMARY KEY, size INTEGER);")
        let r = try Binary.storectl(["cloud", "check"], in: dir.path)
        XCTAssertEqual(r.status, 65, "\(r)")
        XCTAssertTrue(r.stdout.contains("files: PROBLEM"), r.stdout)
        XCTAssertTrue(r.stdout.contains("  problem: primary-key column 'hash' is a BLOB; record names need text or numbers"),
                      r.stdout)
        // mode cloud runs the same check and refuses before binding or exporting.
        let mode = try Binary.storectl(["mode", "cloud"], in: dir.path)
        XCTAssertEqual(mode.status, 65, "\(mode)")
        XCTAssertFalse(try dir.read("config.yaml").contains("mode: cloud"))
    }
}
