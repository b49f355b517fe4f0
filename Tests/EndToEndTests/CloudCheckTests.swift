import Foundation
import TestSupport
import XCTest

/// `storectl cloud check`: the dry run of the cloud schema.
final class CloudCheckTests: XCTestCase {
    func project(schema: String) throws -> E2EProject {
        let p = try E2EProject()
        try p.writeSchema(schema)
        try p.writeConfig([E2EProject.Store("s", cloud: .file("iCloud.com.example.check", url: "file:c.container",
                                                             secret: "x"))])
        try p.run(["init"])
        return p
    }

    func testAMirrorableSchemaPassesAndUniqueConstraintsAreReportedAsDedupRules() throws {
        let p = try project(schema: """
            CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);
            CREATE TABLE links(note_id INTEGER REFERENCES notes(id), url TEXT, PRIMARY KEY (note_id, url));
            """)
        let r = try p.run(["cloud", "check"])
        XCTAssertTrue(r.stdout.contains("notes: ok (key id: surrogate)"), r.stdout)
        XCTAssertTrue(r.stdout.contains("links: ok (key note_id, url: natural)"), r.stdout)
        XCTAssertTrue(r.stdout.contains("  reference: note_id -> notes"), r.stdout)
        XCTAssertTrue(r.stdout.contains("  dedup rule: unique (uuid)"), r.stdout)
        XCTAssertTrue(r.stdout.hasSuffix("cloud check: ok (2 table(s))\n"), r.stdout)
        let json = try p.run(["--json", "cloud", "check"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let entities = try XCTUnwrap(doc["entities"] as? [[String: Any]])
        XCTAssertEqual(entities.map { $0["name"] as? String }, ["links", "notes"])
    }

    func testABlobKeyIsAProblemAndExits65() throws {
        let p = try project(schema: "CREATE TABLE files(hash BLOB PRIMARY KEY, size INTEGER);")
        let r = try p.run(["cloud", "check"], expect: 65)
        XCTAssertTrue(r.stdout.contains("files: PROBLEM"), r.stdout)
        XCTAssertTrue(r.stdout.contains("  problem: primary-key column 'hash' is a BLOB; record names need text or numbers"),
                      r.stdout)
        // mode cloud runs the same check and refuses before binding or exporting.
        try p.run(["mode", "cloud"], expect: 65)
        XCTAssertFalse(try p.dir.read("config.yaml").contains("mode: cloud"))
    }

    func testAPartialOrExpressionUniqueIndexIsRefusedUpFrontWithTheFix() throws {
        for index in ["CREATE UNIQUE INDEX live_email ON users(email) WHERE deleted_at IS NULL",
                      "CREATE UNIQUE INDEX lower_email ON users(lower(email))"] {
            let p = try project(schema: """
                CREATE TABLE users(id INTEGER PRIMARY KEY, email TEXT, deleted_at INTEGER);
                \(index);
                """)
            let name = index.split(separator: " ")[3]
            let r = try p.run(["cloud", "check"], expect: 65)
            XCTAssertTrue(r.stdout.contains("users: PROBLEM"), r.stdout)
            XCTAssertTrue(r.stdout.contains("problem: index '\(name)' is a"), r.stdout)
            XCTAssertTrue(r.stdout.contains("make it a UNIQUE constraint on columns"), r.stdout)
            // mode cloud refuses before anything is bound or exported.
            try p.run(["mode", "cloud"], expect: 65)
            XCTAssertFalse(try p.dir.read("config.yaml").contains("mode: cloud"))
            // A store already in cloud mode when such an index is made: doctor is not healthy, and says why.
            try p.sql("s", "DROP INDEX \(name); CREATE UNIQUE INDEX users_email ON users(email);")
            try p.run(["migrate"])
            try p.run(["mode", "cloud"])
            try p.sql("s", "DROP INDEX users_email; \(index);")
            try p.run(["migrate"])
            let doctor = try p.run(["doctor"], expect: nil)
            XCTAssertNotEqual(doctor.status, 0, doctor.stdout)
            XCTAssertTrue(doctor.stdout.contains("index '\(name)' is a"), doctor.stdout)
            // A plain UNIQUE index on the same column is a key storectl merges: the check passes.
            try p.sql("s", "DROP INDEX \(name); CREATE UNIQUE INDEX users_email ON users(email);")
            try p.run(["migrate"])
            let ok = try p.run(["cloud", "check"])
            XCTAssertTrue(ok.stdout.contains("users: ok"), ok.stdout)
        }
    }

    func testAUniqueGeneratedColumnIsRefusedUpFront() throws {
        let p = try project(schema: """
            CREATE TABLE users(id INTEGER PRIMARY KEY, email TEXT,
                email_l TEXT GENERATED ALWAYS AS (lower(email)) VIRTUAL UNIQUE);
            """)
        let r = try p.run(["cloud", "check"], expect: 65)
        XCTAssertTrue(r.stdout.contains("users: PROBLEM"), r.stdout)
        XCTAssertTrue(r.stdout.contains("the generated column 'email_l'"), r.stdout)
        try p.run(["mode", "cloud"], expect: 65)
    }
}

