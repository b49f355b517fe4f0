import Foundation
import TestSupport
import XCTest

/// store add --like, history consumer advance, cloud schema.
final class StoreAddAndConsumerTests: XCTestCase {
    let config = """
        # the app's stores
        version: 1
        stores:
          notes:                       # the phone
            path: data/notes.sqlite
            schema: schema.sql
            mode: cloud
            entities:
              notes:
                unique: [uuid]
            cloud:
              container: iCloud.com.example.notes
              url: file:cloud/notes.container
              create_if_missing: true
              account: demo
              secret: ${NOTES_SECRET:-demo-secret}   # never literal
        # the end
        """

    func testStoreAddCopiesTheSectionAsWrittenAndValidatesAsOneEdit() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", config)
        try dir.write("schema.sql", "CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL);\n")
        let added = try Binary.storectl(["store", "add", "laptop", "--like", "notes"], in: dir.path)
        XCTAssertEqual(added.status, 0, "\(added)")
        let text = try dir.read("config.yaml")
        XCTAssertTrue(text.hasPrefix(config.components(separatedBy: "# the end")[0]), text)
        XCTAssertTrue(text.contains("""
              laptop:                       # the phone
                path: data/laptop.sqlite
                schema: schema.sql
                mode: local
            """), text)
        XCTAssertTrue(text.contains("secret: ${NOTES_SECRET:-demo-secret}   # never literal\n  laptop:")
                      || text.components(separatedBy: "${NOTES_SECRET:-demo-secret}").count == 3, text)
        XCTAssertTrue(text.hasSuffix("# the end\n") || text.hasSuffix("# the end"), text)
        let validate = try Binary.storectl(["config", "validate"], in: dir.path)
        XCTAssertEqual(validate.stdout, "config.yaml: ok (2 stores: notes, laptop)\n")
        // The next steps are printed as commands for the new store.
        XCTAssertTrue(added.stderr.contains("'storectl --store laptop init'"), added.stderr)
        // --path, and the new store syncs with the other through the same container.
        let json = try Binary.storectl(["--json", "store", "add", "desk", "--like", "laptop", "--path",
                                        "desk/d.sqlite"], in: dir.path)
        XCTAssertEqual(json.status, 0, "\(json)")
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["path"] as? String, "desk/d.sqlite")
        XCTAssertEqual(try Binary.storectl(["--store", "laptop", "mode", "cloud"], in: dir.path).status, 0)
        XCTAssertEqual(try Binary.storectl(["--store", "desk", "mode", "cloud"], in: dir.path).status, 0)
        // Refusals leave the file byte-identical.
        let before = try dir.read("config.yaml")
        for args in [["store", "add", "laptop", "--like", "notes"], ["store", "add", "x", "--like", "nope"],
                     ["store", "add", "y"], ["store", "add", "z", "--like", "notes", "--path", "data/notes.sqlite"]] {
            let r = try Binary.storectl(args, in: dir.path)
            XCTAssertNotEqual(r.status, 0, "\(args): \(r)")
            XCTAssertEqual(try dir.read("config.yaml"), before, "\(args)")
        }
    }

    func testConsumerAdvanceMovesForwardOnlyAndLetsPruneGo() throws {
        let p = try E2EProject()
        try p.writeConfig([E2EProject.Store("s", schema: nil)])
        try p.writeSchema("", to: "s.sql")
        try p.sql("s", "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);")
        try p.run(["init"])
        try p.run(["history", "consumer", "add", "indexer", "--token", "0"])
        for i in 1...4 {
            try p.sql("s", "INSERT INTO t(v) VALUES ('\(i)')")
        }
        let held = try p.run(["--json", "history", "prune", "--before", "4"])
        XCTAssertTrue(held.stdout.contains("\"held_by\" : \"indexer\""), held.stdout)
        let advanced = try p.run(["history", "consumer", "advance", "indexer", "3"])
        XCTAssertEqual(advanced.stdout, "Advanced consumer 'indexer' from token 0 to 3 (1 change behind).\n")
        let back = try p.run(["history", "consumer", "advance", "indexer", "2"], expect: 64)
        XCTAssertTrue(back.stderr.contains("a token never moves back"), back.stderr)
        let ahead = try p.run(["history", "consumer", "advance", "indexer", "99"], expect: 64)
        XCTAssertTrue(ahead.stderr.contains("'storectl history consumer advance indexer 4'"), ahead.stderr)
        let latest = try p.run(["--json", "history", "consumer", "advance", "indexer", "latest"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(latest.stdout.utf8)) as? [String: Any])
        XCTAssertEqual((doc["consumer"] as? [String: Any])?["token"] as? Int, 4)
        XCTAssertEqual(doc["previous_token"] as? Int, 3)
        let pruned = try p.run(["--json", "history", "prune", "--before", "4"])
        XCTAssertTrue(pruned.stdout.contains("\"removed\" : 3"), pruned.stdout)
        // A filter on a table that is neither tracked nor in the history is a typo, not "no changes".
        let typo = try p.run(["history", "--entity", "tt"], expect: 64)
        XCTAssertTrue(typo.stderr.contains("hint: did you mean '--entity t'?"), typo.stderr)
        try p.run(["history", "--entity", "t"])
        for (args, code) in [(["history", "consumer", "advance", "nobody", "1"], 64),
                             (["history", "consumer", "advance", "cloud-export", "1"], 64),
                             (["history", "consumer", "advance", "indexer", "-1"], 64),
                             (["history", "consumer", "advance", "indexer", "abc"], 64)] {
            try p.run(args, expect: Int32(code))
        }
    }

    /// dedupe prints each key with its values, the row it keeps and the rows it deletes, by primary key.
    func testDedupeShowsKeysAndRows() throws {
        let p = try E2EProject()
        try p.writeConfig([E2EProject.Store("s", schema: nil, before: ["entities:", "  notes:", "    unique: [uuid]"])])
        try p.sql("s", "CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT);")
        try p.run(["init"])
        try p.sql("s", "INSERT INTO notes(uuid) VALUES ('a'), ('a'), ('a'), ('b')")
        let dry = try p.run(["dedupe", "--dry-run"])
        XCTAssertEqual(dry.stdout, """
            notes (uuid) = ["a"]: keep row [1], would delete 2 rows [2], [3]
            dry run: 1 key with duplicates; nothing was changed

            """)
        let done = try p.run(["dedupe"])
        XCTAssertTrue(done.stdout.hasSuffix("1 key with duplicates: 2 rows deleted, 0 child rows re-pointed\n"),
                      done.stdout)
    }
}
