import Foundation
import TestSupport
import XCTest

/// `storectl init`, `history`, `history consumer`, `history prune` and `migrate`, through the built binary.
final class HistoryCommandTests: XCTestCase {
    private let schema = """
        CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT, body TEXT);
        CREATE TABLE tags(name TEXT PRIMARY KEY, color TEXT);
        """

    /// A project with config.yaml (store `notes` at data/notes.sqlite, author `app`) and schema.sql.
    private func makeProject(schema: String? = nil) throws -> E2EProject {
        let p = try E2EProject(label: "storectl-e2e-history")
        try p.writeSchema(schema ?? self.schema)
        try p.writeConfig([E2EProject.Store("notes", path: "data/notes.sqlite", before: ["history:", "  author: app"])])
        return p
    }

    private func json(_ result: ProcessResult) throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
        return try XCTUnwrap(object as? [String: Any], result.stdout)
    }

    func testInitCreatesTheStoreRunsTheSchemaAndIsIdempotent() throws {
        let p = try makeProject()
        let first = try p.run(["init"], expect: 0)
        let lines = first.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(Array(lines.prefix(3)), [
            "Created store 'notes' at \(p.dir.file("data/notes.sqlite")).",
            "Ran the schema \(p.dir.file("schema.sql")).",
            "Tracking 2 tables: notes, tags.",
        ])
        XCTAssertTrue(lines.last?.hasPrefix("Store id: ") == true, first.stdout)
        XCTAssertEqual(first.stderr, "")

        let second = try p.run(["init", "--json"], expect: 0)
        let doc = try json(second)
        XCTAssertEqual(doc["installed"] as? Bool, false)
        XCTAssertEqual(doc["created_file"] as? Bool, false)
        XCTAssertEqual(doc["schema_applied"] as? Bool, false)
        XCTAssertEqual(doc["tracked"] as? [String], ["notes", "tags"])
        XCTAssertEqual(doc["store_id"] as? String, lines.last.map { String($0.dropFirst("Store id: ".count)) })
        XCTAssertEqual(try p.sql("notes", "SELECT value FROM _storectl_meta WHERE key = 'format_version';"), "6\n")
    }

    func testInitAdoptsAnExistingDatabaseWithoutRecordingItsRows() throws {
        let p = try makeProject()
        try FileManager.default.createDirectory(atPath: p.dir.file("data"), withIntermediateDirectories: true)
        try p.sql("notes", """
            CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT);
            INSERT INTO notes VALUES (1, 'kept'), (2, 'also kept');
            """)
        let result = try p.run(["init"], expect: 0)
        XCTAssertEqual(result.stdout.split(separator: "\n").prefix(3).map(String.init), [
            "Adopted the existing database \(p.dir.file("data/notes.sqlite")) as store 'notes'; its rows were kept and not recorded as history.",
            "Did not run the schema \(p.dir.file("schema.sql")): the database already has tables.",
            "Tracking 1 table: notes.",
        ])
        try p.run(["init"])
        let history = try p.run(["history"])
        XCTAssertEqual(history.stdout, "No changes after token 0.\nnext token: 0\n")
        XCTAssertEqual(try p.sql("notes", "SELECT count(*) FROM notes;"), "2\n")
    }

    func testInitRefusesATableWithoutAPrimaryKeyAndLeavesNothingBehind() throws {
        let p = try makeProject(schema: "CREATE TABLE notes(id INTEGER PRIMARY KEY); CREATE TABLE log(line TEXT);")
        let result = try p.run(["init"], expect: 65)
        XCTAssertEqual(result.stderr, """
            error: table 'log' in \(p.dir.file("data/notes.sqlite")) has no primary key, so its rows cannot be tracked
            hint: add an explicit PRIMARY KEY to 'log', or narrow entities: so that it is not tracked

            """)
        XCTAssertEqual(result.stdout, "")
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("data/notes.sqlite")))
    }

    func testHistoryRecordsExternalAndNamedWritersWithFilters() throws {
        let p = try makeProject()
        try p.run(["init"])
        try p.sql("notes", """
            INSERT INTO notes VALUES (1, 'a', 'x');
            BEGIN IMMEDIATE;
            INSERT OR REPLACE INTO _storectl_context(id, author, tx) VALUES (1, 'nightly', 41);
            UPDATE notes SET body = 'y' WHERE id = 1;
            INSERT INTO tags VALUES ('red', '#f00');
            DELETE FROM _storectl_context;
            COMMIT;
            DELETE FROM tags;
            """)
        let human = try p.run(["history"], expect: 0)
        let lines = human.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 8, human.stdout)
        XCTAssertTrue(lines[0].hasPrefix("no tx  external  ") && lines[0].hasSuffix("(seq 1)"), lines[0])
        XCTAssertEqual(lines[1], "  I notes [1]")
        XCTAssertTrue(lines[2].hasPrefix("tx 41  nightly  ") && lines[2].hasSuffix("(seq 2-3)"), lines[2])
        XCTAssertEqual(lines[3], "  U notes [1]  body")
        XCTAssertEqual(lines[4], #"  I tags ["red"]"#)
        XCTAssertEqual(lines[6], #"  D tags ["red"]  tombstone name='red'"#)
        XCTAssertEqual(lines[7], "next token: 4")

        let doc = try json(try p.run(["history", "--json", "--after", "1"]))
        XCTAssertEqual(doc["after"] as? Int, 1)
        XCTAssertEqual(doc["next_token"] as? Int, 4)
        XCTAssertEqual((doc["tracking"] as? [String: Any])?["state"] as? String, "ok")
        let transactions = try XCTUnwrap(doc["transactions"] as? [[String: Any]])
        XCTAssertEqual(transactions.map { $0["tx"] as? Int }, [41, nil])
        XCTAssertEqual(transactions.map { $0["author"] as? String }, ["nightly", "external"])
        let changes = try XCTUnwrap(transactions[0]["changes"] as? [[String: Any]])
        XCTAssertEqual(changes.map { $0["op"] as? String }, ["U", "I"])
        XCTAssertEqual(changes[0]["changed"] as? [String], ["body"])
        XCTAssertEqual(changes[1]["pk"] as? [String], ["red"])
        let delete = try XCTUnwrap((transactions[1]["changes"] as? [[String: Any]])?.first)
        XCTAssertEqual(delete["tombstone"] as? [String: String], ["name": "red"])

        let excluded = try json(try p.run(["history", "--json", "--exclude-author", "external"]))
        XCTAssertEqual((excluded["transactions"] as? [[String: Any]])?.count, 1)
        XCTAssertEqual(excluded["next_token"] as? Int, 4)
        let tags = try json(try p.run(["history", "--json", "--entity", "tags", "--author", "external"]))
        XCTAssertEqual((tags["transactions"] as? [[String: Any]])?.map { $0["last_seq"] as? Int }, [4])
        let limited = try json(try p.run(["history", "--json", "--limit", "2"]))
        // The limit ends inside tx 41, which is completed: the next token is on a transaction boundary.
        XCTAssertEqual(limited["next_token"] as? Int, 3)

        let bad = try p.run(["history", "--limit", "0"], expect: 64)
        XCTAssertTrue(bad.stderr.hasPrefix("error: --limit expects a positive number, got 0\n"), bad.stderr)
    }

    func testDriftIsReportedAndMigrateRepairsItWithoutLosingHistory() throws {
        let p = try makeProject()
        try p.run(["init"])
        try p.sql("notes", "INSERT INTO notes VALUES (1, 'a', 'x'); ALTER TABLE notes ADD COLUMN pinned INTEGER;")
        let history = try p.run(["history"], expect: 0)
        XCTAssertEqual(history.stderr, """
            warning: the schema of store 'notes' changed since the history triggers were generated; run 'storectl migrate':
              table "notes": column "pinned" added

            """)
        let drift = try json(try p.run(["history", "--json"]))
        XCTAssertEqual((drift["tracking"] as? [String: Any])?["state"] as? String, "drift")

        let migrate = try p.run(["migrate"], expect: 0)
        XCTAssertEqual(migrate.stdout, """
            Regenerated the history triggers of 2 tables of store 'notes' in one transaction; no history was lost.
              table "notes": column "pinned" added

            """)
        XCTAssertEqual(try p.run(["migrate"]).stdout,
                       "The history triggers of store 'notes' are up to date; nothing to do.\n")
        try p.sql("notes", "UPDATE notes SET pinned = 1;")
        let after = try p.run(["history"])
        XCTAssertEqual(after.stderr, "")
        XCTAssertTrue(after.stdout.contains("  I notes [1]\n"), after.stdout)
        XCTAssertTrue(after.stdout.contains("  U notes [1]  pinned\n"), after.stdout)
    }

    func testDroppedTriggersAreRefusedUntilMigrateForceRecordsAGap() throws {
        let p = try makeProject()
        try p.run(["init"])
        try p.sql("notes", #"INSERT INTO tags VALUES ('red', '#f00'); DROP TRIGGER "_storectl_tags_del";"#)
        let expected = """
            error: history tracking is lost in \(p.dir.file("data/notes.sqlite")): the triggers of 'tags' are missing
              changes made to this table while the triggers were missing were not recorded
            hint: run 'storectl migrate --force' to reinstall them; it records a history gap in the store meta, \
            so that the next cloud enable re-baselines instead of missing those changes

            """
        for args in [["history"], ["migrate"], ["init"]] {
            let refused = try p.run(args, expect: 78)
            XCTAssertEqual(refused.stderr, expected, "\(args)")
        }
        let forced = try p.run(["migrate", "--force", "--json"], expect: 0)
        let doc = try json(forced)
        XCTAssertEqual(doc["before"] as? String, "triggers-missing")
        XCTAssertEqual(doc["history_gap"] as? Int, 1)
        XCTAssertEqual(try p.sql("notes", "SELECT value FROM _storectl_meta WHERE key = 'history_gap';"), "1\n")
        try p.run(["history"])
        XCTAssertEqual(try p.sql("notes", "SELECT count(*) FROM _storectl_history;"), "1\n")
    }

    func testConsumersHoldHistoryAgainstPrune() throws {
        let p = try makeProject()
        try p.run(["init"])
        try p.sql("notes", "INSERT INTO notes(id) VALUES (1), (2), (3), (4), (5), (6);")
        XCTAssertEqual(try p.run(["history", "consumer", "add", "indexer", "--token", "2"]).stdout,
                       "Added consumer 'indexer' at token 2.\n")
        let reserved = try p.run(["history", "consumer", "add", "cloud-export"], expect: 64)
        XCTAssertEqual(reserved.stderr, """
            error: consumer names starting with 'cloud-' are reserved for the sync engine
            hint: choose another name, e.g. 'my-cloud-export'
            usage: storectl history consumer add <name> [options]

            """)
        // The sync engine's export token is a consumer too, and prune respects it.
        try p.sql("notes", "INSERT INTO _storectl_consumers VALUES ('cloud-export', 4, 0, 0);")
        XCTAssertEqual(try p.run(["history", "consumer", "list"]).stdout, """
            NAME          TOKEN       BEHIND
            cloud-export  4           2
            indexer       2           4
            (newest seq: 6)

            """)
        let prune = try p.run(["history", "prune", "--before", "100"], expect: 0)
        XCTAssertEqual(prune.stdout, """
            Removed 2 history rows (seq 1 to 2).
            Rows after seq 2 were kept: consumer 'indexer' has processed only up to there.
            4 history rows remain.

            """)
        XCTAssertEqual(try p.run(["history", "consumer", "drop", "indexer"]).stdout, "Dropped consumer 'indexer'.\n")
        let missing = try p.run(["history", "consumer", "drop", "indexr"], expect: 64)
        XCTAssertTrue(missing.stderr.hasPrefix("error: no consumer named 'indexr'\n"), missing.stderr)
        let doc = try json(try p.run(["history", "prune", "--older-than", "0s", "--json"]))
        XCTAssertEqual(doc["removed"] as? Int, 2)
        XCTAssertEqual(doc["held_by"] as? String, "cloud-export")
        XCTAssertEqual(try p.sql("notes", "SELECT group_concat(seq) FROM _storectl_history;"), "5,6\n")
        let none = try p.run(["history", "prune"], expect: 64)
        XCTAssertTrue(none.stderr.hasPrefix("error: prune needs --before <token> or --older-than <duration>"), none.stderr)
    }

    func testTrackingFalseIsRefused() throws {
        let p = try makeProject()
        try p.writeConfig([E2EProject.Store("notes", path: "data/notes.sqlite", schema: nil,
                                            before: ["history:", "  tracking: false"])])
        let result = try p.run(["init"], expect: 78)
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("data/notes.sqlite")))
    }
}
