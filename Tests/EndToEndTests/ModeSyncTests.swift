import Foundation
import TestSupport
import XCTest

/// The main job through the real binary: several stores sharing one container file (and, in the subclass,
/// one PostgreSQL container).
class ModeSyncTests: XCTestCase {
    /// Where the stores' shared container lives.
    struct Backend {
        var url: String
        var account: String
        var container: String
        /// PostgreSQL containers are created by `storectl cloud init`; container files on first use.
        var isPostgres: Bool
    }

    /// The backend of these tests: a container file.
    func backend() throws -> Backend {
        Backend(url: "file:cloud/shared.container", account: "demo", container: "iCloud.com.example.notes",
                isPostgres: false)
    }

    private var cachedBackend: Backend?

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
    func makeConfig(_ p: E2EProject, stores: [String] = ["a", "b"], policy: String = "property-local-wins")
        throws
    {
        let b = try cachedBackend ?? backend()
        cachedBackend = b
        try p.writeSchema(Self.schema)
        let text = try p.writeConfig(stores.map { name in
            E2EProject.Store(name, path: "data/\(name).sqlite",
                             before: ["mode: local", "history:", "  author: app-\(name)"],
                             cloud: E2EProject.Cloud(container: b.container, url: b.url,
                                                     account: "${STORECTL_ACCOUNT:-\(b.account)}",
                                                     createIfMissing: !b.isPostgres,
                                                     extra: ["merge_policy: \(policy)"]))
        })
        // Comments, which every config edit must keep.
        try p.dir.write("config.yaml", "# shared test config\n"
            + text.replacingOccurrences(of: ".sqlite\n", with: ".sqlite   # the store file\n"))
        if b.isPostgres { try p.run(["--store", stores[0], "cloud", "init"]) }
    }

    func notes(_ p: E2EProject, _ store: String) throws -> String {
        try p.sql(store, "SELECT uuid, title, body FROM notes ORDER BY uuid")
    }

    func testBothStoresEnableCloudAndConverge() throws {
        let p = try E2EProject()
        try makeConfig(p)
        try p.run(["--store", "a", "init"])
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'first'), ('n2', 'second'), ('n3', 'third')")
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        XCTAssertEqual(try notes(p, "b"), "n1|first|\nn2|second|\nn3|third|\n")
        XCTAssertEqual(try p.run(["--store", "b", "mode"]).stdout, "cloud\n")

        // Edits and deletes on both sides.
        _ = try p.sql("a", "UPDATE notes SET body = 'body by a' WHERE uuid = 'n1'; DELETE FROM notes WHERE uuid = 'n3'")
        _ = try p.sql("b", "UPDATE notes SET title = 'title by b' WHERE uuid = 'n1'; INSERT INTO notes(uuid) VALUES ('n4')")
        for store in ["a", "b", "a"] { try p.run(["--store", store, "sync"]) }
        let expected = "n1|title by b|body by a\nn2|second|\nn4||\n"
        XCTAssertEqual(try notes(p, "a"), expected)
        XCTAssertEqual(try notes(p, "b"), expected)

        // The config edit changed only the mode lines.
        let config = try p.dir.read("config.yaml")
        XCTAssertTrue(config.hasPrefix("# shared test config\n"))
        XCTAssertEqual(config.components(separatedBy: "mode: cloud").count - 1, 2)
        XCTAssertTrue(config.contains("path: data/a.sqlite   # the store file"))
    }

    func testALocalPeriodLosesNothingAndDuplicatesNothing() throws {
        let p = try E2EProject()
        try makeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('shared', 'both see it')")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "b", "sync"])

        try p.run(["--store", "a", "mode", "local"])
        XCTAssertEqual(try p.run(["--store", "a", "mode"]).stdout, "local\n")
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('a-local', 'while local'); UPDATE notes SET body = 'a' WHERE uuid = 'shared'")
        _ = try p.sql("b", "INSERT INTO notes(uuid, title) VALUES ('b-cloud', 'meanwhile')")
        try p.run(["--store", "b", "sync"])
        // A store in local mode never contacts the cloud.
        let refused = try p.run(["--store", "a", "sync"], expect: 78)
        XCTAssertTrue(refused.stderr.contains("is in local mode"), refused.stderr)

        let back = try p.run(["--store", "a", "--json", "mode", "cloud"])
        XCTAssertTrue(back.stdout.contains("\"to\" : \"cloud\""), back.stdout)
        try p.run(["--store", "b", "sync"])
        let expected = "a-local|while local|\nb-cloud|meanwhile|\nshared|both see it|a\n"
        XCTAssertEqual(try notes(p, "a"), expected)
        XCTAssertEqual(try notes(p, "b"), expected)
    }

    func testUnavailableAccountChangesNothingAnywhere() throws {
        let p = try E2EProject()
        try makeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "init"])
        _ = try p.sql("b", "INSERT INTO notes(uuid) VALUES ('x')")
        let isPostgres = try backend().isPostgres
        func snapshot() throws -> [String: Data] {
            var files: [String: Data] = [:]
            for name in ["config.yaml", "data/b.sqlite"] + (isPostgres ? [] : ["cloud/shared.container"]) {
                files[name] = try Data(contentsOf: URL(fileURLWithPath: p.dir.file(name)))
            }
            for name in ["data/b.sqlite-wal", "cloud/shared.container-wal"] {
                files[name] = try? Data(contentsOf: URL(fileURLWithPath: p.dir.file(name)))
            }
            return files
        }
        let before = try snapshot()
        // A wrong secret for the file backend; a role that does not exist for PostgreSQL.
        let env = isPostgres ? ["STORECTL_ACCOUNT": "no_such_role_\(UInt32.random(in: 0...UInt32.max))"]
            : ["STORECTL_SECRET": "wrong-secret"]
        let r = try p.run(["--store", "b", "mode", "cloud"], expect: 69, env: env)
        XCTAssertTrue(r.stderr.contains(isPostgres ? "is noAccount" : "error: account 'demo' is restricted"), r.stderr)
        XCTAssertFalse(r.stderr.contains("wrong-secret"))
        XCTAssertEqual(try snapshot(), before)
        XCTAssertEqual(try p.run(["--store", "b", "mode"]).stdout, "local\n")
    }

    func testDryRunPrintsThePlanAndChangesNothing() throws {
        let p = try E2EProject()
        try makeConfig(p)
        let r = try p.run(["--store", "a", "--json", "mode", "cloud", "--dry-run"])
        XCTAssertTrue(r.stdout.contains("\"dry_run\" : true"), r.stdout)
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("data/a.sqlite")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("cloud/shared.container")))
        if try backend().isPostgres {
            // The dry run created no store file, so sync finds none (exit 66) and creates none either.
            XCTAssertEqual(try p.run(["--store", "a", "sync"], expect: 66).stderr.contains("does not exist"), true)
            XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("data/a.sqlite")))
        }
        XCTAssertTrue(try p.dir.read("config.yaml").contains("mode: local"))
        XCTAssertFalse(try p.dir.read("config.yaml").contains("mode: cloud"))
    }

    func testIntegerKeysDoNotCollideAndJoinTablesLinkTheSameParents() throws {
        let p = try E2EProject()
        try makeConfig(p, stores: ["a", "b", "c"])
        for s in ["a", "b", "c"] { try p.run(["--store", s, "init"]) }
        _ = try p.sql("a", "INSERT INTO notes(id, uuid, title) VALUES (1, 'note-a', 'A'); INSERT INTO tags(id, name) VALUES (1, 'red'); INSERT INTO note_tags VALUES (1, 1)")
        _ = try p.sql("b", "INSERT INTO notes(id, uuid, title) VALUES (1, 'note-b', 'B'); INSERT INTO tags(id, name) VALUES (1, 'blue'), (2, 'green'); INSERT INTO note_tags VALUES (1, 2)")
        _ = try p.sql("c", "INSERT INTO settings VALUES ('theme', 'dark')")
        for s in ["a", "b", "c"] { try p.run(["--store", s, "mode", "cloud"]) }
        for s in ["a", "b", "c"] { try p.run(["--store", s, "sync"]) }
        let links = "SELECT n.uuid, t.name FROM note_tags nt JOIN notes n ON n.id = nt.note_id JOIN tags t ON t.id = nt.tag_id ORDER BY 1"
        for s in ["a", "b", "c"] {
            XCTAssertEqual(try p.sql(s, links), "note-a|red\nnote-b|green\n", "store \(s)")
            XCTAssertEqual(try p.sql(s, "SELECT count(*) FROM notes"), "2\n", "store \(s)")
            XCTAssertEqual(try p.sql(s, "SELECT key, value FROM settings"), "theme|dark\n", "store \(s)")
        }
        // The rowids differ between stores, the links do not.
        XCTAssertNotEqual(try p.sql("a", "SELECT id FROM notes WHERE uuid = 'note-b'"),
                          try p.sql("b", "SELECT id FROM notes WHERE uuid = 'note-b'"))
    }

    func testStatusReportsModePendingTokensAndAccount() throws {
        let p = try E2EProject()
        try makeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        _ = try p.sql("a", "INSERT INTO notes(uuid) VALUES ('p1'), ('p2')")
        let r = try p.run(["--store", "a", "--json", "status"])
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(json["mode"] as? String, "cloud")
        XCTAssertEqual(json["pending_export"] as? Int, 2)
        XCTAssertEqual((json["history"] as? [String: Any])?["enabled"] as? Bool, true)
        XCTAssertEqual((json["account"] as? [String: Any])?["status"] as? String, "available")
        XCTAssertEqual((json["account"] as? [String: Any])?["bound"] as? String, try backend().account)
        XCTAssertEqual((json["cloud"] as? [String: Any])?["reachable"] as? Bool, true)
        XCTAssertNotNil(json["last_sync"] as? String)
        try p.run(["--store", "a", "sync"])
        let after = try p.run(["--store", "a", "status"])
        XCTAssertTrue(after.stdout.contains("pending export  0 rows"), after.stdout)
    }

    func testTheReadmeMainCommandWorksOnTheRootConfig() throws {
        if try backend().isPostgres { return }  // the root config uses a container file
        let p = try E2EProject()
        // The repository's own config.yaml and example schema, copied as they are.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        try p.dir.write("config.yaml", try String(contentsOf: root.appendingPathComponent("config.yaml"), encoding: .utf8))
        for f in ["schema.sql", "seed.sql"] {
            try p.dir.write("examples/notes/\(f)",
                          try String(contentsOf: root.appendingPathComponent("examples/notes/\(f)"), encoding: .utf8))
        }
        let before = try p.dir.read("config.yaml")
        try p.run(["mode", "cloud"])
        let after = try p.dir.read("config.yaml")
        let changed = zip(before.split(separator: "\n", omittingEmptySubsequences: false),
                          after.split(separator: "\n", omittingEmptySubsequences: false)).filter { $0 != $1 }
        XCTAssertEqual(changed.count, 1)
        XCTAssertEqual(changed.first.map { String($0.1) }, "    mode: cloud                         # local | cloud")
        XCTAssertEqual(try p.run(["mode"]).stdout, "cloud\n")
        try p.run(["sync"])
    }
}

/// The same scenarios with the stores sharing a PostgreSQL container. With STORECTL_REQUIRE_PG=1 and no server,
/// these fail rather than skip.
final class PostgresModeSyncTests: ModeSyncTests {
    override func backend() throws -> Backend {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (see .ci/run)")
            }
            throw XCTSkip("no PostgreSQL server (set STORECTL_TEST_PG_URL)")
        }
        let user = env["PGUSER"] ?? "postgres"
        let suffix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return Backend(url: url, account: user, container: "iCloud.com.example.e2e\(suffix)", isPostgres: true)
    }

    // Test discovery on Linux finds a class by the test methods it declares: each scenario is listed here.
    override func testBothStoresEnableCloudAndConverge() throws { try super.testBothStoresEnableCloudAndConverge() }
    override func testALocalPeriodLosesNothingAndDuplicatesNothing() throws {
        try super.testALocalPeriodLosesNothingAndDuplicatesNothing()
    }
    override func testUnavailableAccountChangesNothingAnywhere() throws {
        try super.testUnavailableAccountChangesNothingAnywhere()
    }
    override func testDryRunPrintsThePlanAndChangesNothing() throws { try super.testDryRunPrintsThePlanAndChangesNothing() }
    override func testIntegerKeysDoNotCollideAndJoinTablesLinkTheSameParents() throws {
        try super.testIntegerKeysDoNotCollideAndJoinTablesLinkTheSameParents()
    }
    override func testStatusReportsModePendingTokensAndAccount() throws {
        try super.testStatusReportsModePendingTokensAndAccount()
    }
}
