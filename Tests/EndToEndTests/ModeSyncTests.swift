import Foundation
import TestSupport
import XCTest

/// The main job through the real binary: several stores sharing one container file.
final class ModeSyncTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                         body TEXT NOT NULL DEFAULT '', updated_at INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS note_tags(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                             tag_id INTEGER NOT NULL REFERENCES tags(id) ON DELETE CASCADE,
                                             PRIMARY KEY (note_id, tag_id));
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value TEXT);
        """

    /// A config with `stores` stores (a, b, c, ...) that share one container file.
    func makeConfig(_ dir: TempDirectory, stores: [String] = ["a", "b"], policy: String = "property-local-wins",
                    url: String = "file:cloud/shared.container") throws
    {
        try dir.write("schema.sql", Self.schema)
        var yaml = "# shared test config\nversion: 1\nstores:\n"
        for name in stores {
            yaml += """
                  \(name):
                    path: data/\(name).sqlite   # the store file
                    schema: schema.sql
                    mode: local
                    history:
                      author: app-\(name)
                    cloud:
                      container: iCloud.com.example.notes
                      url: \(url)
                      create_if_missing: true
                      account: demo
                      secret: ${STORECTL_SECRET:-demo-secret}
                      merge_policy: \(policy)

                """
        }
        try dir.write("config.yaml", yaml)
    }

    @discardableResult
    func run(_ dir: TempDirectory, _ args: [String], env: [String: String] = [:], expect: Int32 = 0,
             file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult
    {
        let r = try Binary.storectl(args, in: dir.path, environment: env)
        XCTAssertEqual(r.status, expect, "storectl \(args.joined(separator: " "))\n\(r)", file: file, line: line)
        return r
    }

    func sql(_ dir: TempDirectory, _ store: String, _ statement: String, file: StaticString = #filePath,
             line: UInt = #line) throws -> String
    {
        let r = try Binary.run("/usr/bin/sqlite3", [dir.file("data/\(store).sqlite"), statement], in: dir.path)
        XCTAssertEqual(r.status, 0, "\(statement)\n\(r)", file: file, line: line)
        return r.stdout
    }

    func notes(_ dir: TempDirectory, _ store: String) throws -> String {
        try sql(dir, store, "SELECT uuid, title, body FROM notes ORDER BY uuid")
    }

    func testBothStoresEnableCloudAndConverge() throws {
        let dir = try TempDirectory()
        try makeConfig(dir)
        try run(dir, ["--store", "a", "init"])
        _ = try sql(dir, "a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'first'), ('n2', 'second'), ('n3', 'third')")
        try run(dir, ["--store", "a", "mode", "cloud"])
        try run(dir, ["--store", "b", "mode", "cloud"])
        XCTAssertEqual(try notes(dir, "b"), "n1|first|\nn2|second|\nn3|third|\n")
        XCTAssertEqual(try run(dir, ["--store", "b", "mode"]).stdout, "cloud\n")

        // Edits and deletes on both sides.
        _ = try sql(dir, "a", "UPDATE notes SET body = 'body by a' WHERE uuid = 'n1'; DELETE FROM notes WHERE uuid = 'n3'")
        _ = try sql(dir, "b", "UPDATE notes SET title = 'title by b' WHERE uuid = 'n1'; INSERT INTO notes(uuid) VALUES ('n4')")
        for store in ["a", "b", "a"] { try run(dir, ["--store", store, "sync"]) }
        let expected = "n1|title by b|body by a\nn2|second|\nn4||\n"
        XCTAssertEqual(try notes(dir, "a"), expected)
        XCTAssertEqual(try notes(dir, "b"), expected)

        // The config edit changed only the mode lines.
        let config = try dir.read("config.yaml")
        XCTAssertTrue(config.hasPrefix("# shared test config\n"))
        XCTAssertEqual(config.components(separatedBy: "mode: cloud").count - 1, 2)
        XCTAssertTrue(config.contains("path: data/a.sqlite   # the store file"))
    }

    func testALocalPeriodLosesNothingAndDuplicatesNothing() throws {
        let dir = try TempDirectory()
        try makeConfig(dir)
        try run(dir, ["--store", "a", "mode", "cloud"])
        try run(dir, ["--store", "b", "mode", "cloud"])
        _ = try sql(dir, "a", "INSERT INTO notes(uuid, title) VALUES ('shared', 'both see it')")
        try run(dir, ["--store", "a", "sync"])
        try run(dir, ["--store", "b", "sync"])

        try run(dir, ["--store", "a", "mode", "local"])
        XCTAssertEqual(try run(dir, ["--store", "a", "mode"]).stdout, "local\n")
        _ = try sql(dir, "a", "INSERT INTO notes(uuid, title) VALUES ('a-local', 'while local'); UPDATE notes SET body = 'a' WHERE uuid = 'shared'")
        _ = try sql(dir, "b", "INSERT INTO notes(uuid, title) VALUES ('b-cloud', 'meanwhile')")
        try run(dir, ["--store", "b", "sync"])
        // A store in local mode never contacts the cloud.
        let refused = try run(dir, ["--store", "a", "sync"], expect: 78)
        XCTAssertTrue(refused.stderr.contains("is in local mode"), refused.stderr)

        let back = try run(dir, ["--store", "a", "--json", "mode", "cloud"])
        XCTAssertTrue(back.stdout.contains("\"to\" : \"cloud\""), back.stdout)
        try run(dir, ["--store", "b", "sync"])
        let expected = "a-local|while local|\nb-cloud|meanwhile|\nshared|both see it|a\n"
        XCTAssertEqual(try notes(dir, "a"), expected)
        XCTAssertEqual(try notes(dir, "b"), expected)
    }

    func testUnavailableAccountChangesNothingAnywhere() throws {
        let dir = try TempDirectory()
        try makeConfig(dir)
        try run(dir, ["--store", "a", "mode", "cloud"])
        try run(dir, ["--store", "b", "init"])
        _ = try sql(dir, "b", "INSERT INTO notes(uuid) VALUES ('x')")
        func snapshot() throws -> [String: Data] {
            var files: [String: Data] = [:]
            for name in ["config.yaml", "data/b.sqlite", "cloud/shared.container"] {
                files[name] = try Data(contentsOf: URL(fileURLWithPath: dir.file(name)))
            }
            for name in ["data/b.sqlite-wal", "cloud/shared.container-wal"] {
                files[name] = try? Data(contentsOf: URL(fileURLWithPath: dir.file(name)))
            }
            return files
        }
        let before = try snapshot()
        let r = try run(dir, ["--store", "b", "mode", "cloud"], env: ["STORECTL_SECRET": "wrong-secret"], expect: 69)
        XCTAssertTrue(r.stderr.contains("error: account 'demo' is restricted"), r.stderr)
        XCTAssertFalse(r.stderr.contains("wrong-secret"))
        XCTAssertEqual(try snapshot(), before)
        XCTAssertEqual(try run(dir, ["--store", "b", "mode"]).stdout, "local\n")
    }

    func testDryRunPrintsThePlanAndChangesNothing() throws {
        let dir = try TempDirectory()
        try makeConfig(dir)
        let r = try run(dir, ["--store", "a", "--json", "mode", "cloud", "--dry-run"])
        XCTAssertTrue(r.stdout.contains("\"dryRun\" : true"), r.stdout)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("data/a.sqlite")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("cloud/shared.container")))
        XCTAssertTrue(try dir.read("config.yaml").contains("mode: local"))
        XCTAssertFalse(try dir.read("config.yaml").contains("mode: cloud"))
    }

    func testIntegerKeysDoNotCollideAndJoinTablesLinkTheSameParents() throws {
        let dir = try TempDirectory()
        try makeConfig(dir, stores: ["a", "b", "c"])
        for s in ["a", "b", "c"] { try run(dir, ["--store", s, "init"]) }
        _ = try sql(dir, "a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'note-a', 'A'); INSERT INTO tags(id, name) VALUES (1, 'red'); INSERT INTO note_tags VALUES (1, 1)")
        _ = try sql(dir, "b", "INSERT INTO notes(id, uuid, title) VALUES (1, 'note-b', 'B'); INSERT INTO tags(id, name) VALUES (1, 'blue'), (2, 'green'); INSERT INTO note_tags VALUES (1, 2)")
        _ = try sql(dir, "c", "INSERT INTO settings VALUES ('theme', 'dark')")
        for s in ["a", "b", "c"] { try run(dir, ["--store", s, "mode", "cloud"]) }
        for s in ["a", "b", "c"] { try run(dir, ["--store", s, "sync"]) }
        let links = "SELECT n.uuid, t.name FROM note_tags nt JOIN notes n ON n.id = nt.note_id JOIN tags t ON t.id = nt.tag_id ORDER BY 1"
        for s in ["a", "b", "c"] {
            XCTAssertEqual(try sql(dir, s, links), "note-a|red\nnote-b|green\n", "store \(s)")
            XCTAssertEqual(try sql(dir, s, "SELECT count(*) FROM notes"), "2\n", "store \(s)")
            XCTAssertEqual(try sql(dir, s, "SELECT key, value FROM settings"), "theme|dark\n", "store \(s)")
        }
        // The rowids differ between stores, the links do not.
        XCTAssertNotEqual(try sql(dir, "a", "SELECT id FROM notes WHERE uuid = 'note-b'"),
                          try sql(dir, "b", "SELECT id FROM notes WHERE uuid = 'note-b'"))
    }

    func testStatusReportsModePendingTokensAndAccount() throws {
        let dir = try TempDirectory()
        try makeConfig(dir)
        try run(dir, ["--store", "a", "mode", "cloud"])
        _ = try sql(dir, "a", "INSERT INTO notes(uuid) VALUES ('p1'), ('p2')")
        let r = try run(dir, ["--store", "a", "--json", "status"])
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(json["mode"] as? String, "cloud")
        XCTAssertEqual(json["pendingExport"] as? Int, 2)
        XCTAssertEqual((json["history"] as? [String: Any])?["enabled"] as? Bool, true)
        XCTAssertEqual((json["account"] as? [String: Any])?["status"] as? String, "available")
        XCTAssertEqual((json["account"] as? [String: Any])?["bound"] as? String, "demo")
        XCTAssertEqual((json["cloud"] as? [String: Any])?["reachable"] as? Bool, true)
        XCTAssertNotNil(json["lastSync"] as? String)
        try run(dir, ["--store", "a", "sync"])
        let after = try run(dir, ["--store", "a", "status"])
        XCTAssertTrue(after.stdout.contains("pending export:  0 row(s)"), after.stdout)
    }

    func testTheReadmeMainCommandWorksOnTheRootConfig() throws {
        let dir = try TempDirectory()
        // The repository's own config.yaml and example schema, copied as they are.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        try dir.write("config.yaml", try String(contentsOf: root.appendingPathComponent("config.yaml"), encoding: .utf8))
        for f in ["schema.sql", "seed.sql"] {
            try dir.write("examples/notes/\(f)",
                          try String(contentsOf: root.appendingPathComponent("examples/notes/\(f)"), encoding: .utf8))
        }
        let before = try dir.read("config.yaml")
        try run(dir, ["mode", "cloud"])
        let after = try dir.read("config.yaml")
        let changed = zip(before.split(separator: "\n", omittingEmptySubsequences: false),
                          after.split(separator: "\n", omittingEmptySubsequences: false)).filter { $0 != $1 }
        XCTAssertEqual(changed.count, 1)
        XCTAssertEqual(changed.first.map { String($0.1) }, "    mode: cloud                         # local | cloud")
        XCTAssertEqual(try run(dir, ["mode"]).stdout, "cloud\n")
        try run(dir, ["sync"])
    }
}
