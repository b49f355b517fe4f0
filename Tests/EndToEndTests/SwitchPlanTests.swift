import Foundation
import TestSupport
import XCTest

/// `mode cloud --dry-run`, `--expect-plan` and the verification after a switch, through the real binary.
final class SwitchPlanTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value);
        """

    func testThePlanOnAContainerFile() throws {
        try planScenario(Fleet(backend: .file, schema: Self.schema, label: "storectl-plan"))
    }

    func testThePlanOnPostgreSQL() throws {
        guard let backend = FleetBackend.postgres() else { return }
        try planScenario(Fleet(backend: backend, schema: Self.schema, label: "storectl-plan-pg"))
    }

    func planID(_ f: Fleet, _ store: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> (id: String, plan: [String: Any])
    {
        let (r, doc) = try f.json(store, ["mode", "cloud", "--dry-run"], file: file, line: line)
        let plan = try XCTUnwrap(JSONDoc.get(doc, "plan") as? [String: Any], r.stdout, file: file, line: line)
        return (try XCTUnwrap(plan["plan_id"] as? String, file: file, line: line), plan)
    }

    func planScenario(_ f: Fleet) throws {
        // a is in the cloud with rows; b holds rows of its own, one of them the same setting as a's.
        try f.initialise("a")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two'); "
                  + "INSERT INTO settings VALUES ('theme', 'dark')")
        try f.cloudMode("a")
        try f.initialise("b")
        try f.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n9', 'nine'); INSERT INTO settings VALUES ('theme', 'light')")
        let before = try f.rows("b")
        let config = try String(contentsOfFile: f.configPath, encoding: .utf8)

        let (id, plan) = try planID(f, "b")
        XCTAssertEqual(id.count, 16)
        XCTAssertEqual(JSONDoc.get(plan, "account", "status") as? String, "available")
        XCTAssertEqual(JSONDoc.get(plan, "export", "baseline") as? Bool, true)
        XCTAssertEqual(JSONDoc.int(plan, "export", "rows"), 2)
        XCTAssertEqual(JSONDoc.get(plan, "import", "known") as? Bool, true)
        XCTAssertEqual(JSONDoc.int(plan, "import", "records"), 3, "\(plan)")
        XCTAssertEqual(JSONDoc.int(plan, "expected_conflicts"), 1, "\(plan)")
        let conflicts = plan["conflicts"] as? [[String: Any]] ?? []
        XCTAssertEqual(conflicts.first?["table"] as? String, "settings")
        XCTAssertEqual(conflicts.first?["record_name"] as? String, "settings:[\"theme\"]")
        let tables = plan["tables"] as? [[String: Any]] ?? []
        XCTAssertEqual(tables.map { $0["table"] as? String }, ["notes", "settings"])
        XCTAssertEqual(tables.compactMap { ($0["content_hash"] as? String)?.count }, [64, 64])
        // The human plan is on stdout, with the same id.
        let human = try f.run("b", ["mode", "cloud", "--dry-run"])
        XCTAssertTrue(human.stdout.contains("plan id: \(id)"), human.stdout)
        XCTAssertTrue(human.stdout.contains("expected conflicts: 1"), human.stdout)
        XCTAssertTrue(human.stdout.contains("--expect-plan \(id)"), human.stdout)
        // Nothing changed, and the same plan twice has the same id.
        XCTAssertEqual(try planID(f, "b").id, id)
        XCTAssertEqual(try f.rows("b"), before)
        XCTAssertEqual(try String(contentsOfFile: f.configPath, encoding: .utf8), config)
        XCTAssertEqual(try f.sql("b", "SELECT count(*) FROM _storectl_history"), "2\n")
        XCTAssertEqual(try f.sql("b", "SELECT value FROM _storectl_meta WHERE key = 'mode'"), "local\n")

        // A change here makes the plan stale: refused with 75, nothing changed.
        try f.sql("b", "UPDATE notes SET title = 'nine, edited' WHERE uuid = 'n9'")
        let stale = try f.run("b", ["mode", "cloud", "--expect-plan", id], expect: 75)
        XCTAssertTrue(stale.stderr.contains("changed since plan \(id)"), stale.stderr)
        XCTAssertEqual(try f.sql("b", "SELECT value FROM _storectl_meta WHERE key = 'mode'"), "local\n")
        XCTAssertEqual(try String(contentsOfFile: f.configPath, encoding: .utf8), config)
        // So does a change in the cloud.
        let (second, _) = try planID(f, "b")
        XCTAssertNotEqual(second, id)
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n3', 'three')")
        try f.run("a", ["sync"])
        try f.run("b", ["mode", "cloud", "--expect-plan", second], expect: 75)
        // The plan as it is now goes through, and the switch verifies.
        let (third, _) = try planID(f, "b")
        let (done, doc) = try f.json("b", ["mode", "cloud", "--expect-plan", third])
        XCTAssertEqual(JSONDoc.get(doc, "verified", "unexplained_count") as? Int, 0, done.stdout)
        XCTAssertEqual(try f.sql("b", "SELECT value FROM _storectl_meta WHERE key = 'mode'"), "cloud\n")
        try f.run("b", ["verify"])
        try f.run("b", ["mode", "cloud", "--dry-run", "--expect-plan", third], expect: 64)
    }

    /// A zone changed behind storectl's back while the store was local: the switch exports and imports, then
    /// finds a row that differs; it puts the store back as it was before the switch and exits 70 naming the row.
    func testAContentMismatchAfterTheSwitchRestoresThePreSwitchStateAndExits70() throws {
        let s = try tampered()
        let state = """
            SELECT (SELECT count(*) FROM _storectl_history), (SELECT group_concat(name || '=' || value) FROM _storectl_tokens),
                   (SELECT group_concat(record_name || ':' || coalesce(change_tag, '-')) FROM _storectl_records),
                   (SELECT value FROM _storectl_meta WHERE key = 'mode'),
                   (SELECT group_concat(name || '=' || token) FROM _storectl_consumers)
            """
        let before = try s.sql("a", state)
        let rows = try s.noteRows("a")
        let config = s.config
        let r = try s.run("a", ["mode", "cloud"], expect: 70)
        XCTAssertTrue(r.stderr.contains("differ: 1 row(s) that no pending change explains"), r.stderr)
        XCTAssertTrue(r.stderr.contains("settings [\"theme\"]") && r.stderr.contains("\"tampered\" in the cloud"),
                      r.stderr)
        XCTAssertTrue(r.stderr.contains("restored to its state before the switch"), r.stderr)
        XCTAssertEqual(try s.sql("a", state), before)
        XCTAssertEqual(try s.noteRows("a"), rows)
        XCTAssertEqual(s.config, config)
        XCTAssertEqual(try s.sql("a", "PRAGMA integrity_check"), "ok\n")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: s.dir.file("data"))
            .filter { $0.contains("storectl") }, [])
        let json = try s.run("a", ["--json", "mode", "cloud"], expect: 70)
        XCTAssertEqual(JSONDoc.int(JSONDoc.parse(json.stdout), "error", "code"), 70, json.stdout)

        // Once the row is written again here, the switch goes through.
        try s.sql("a", "UPDATE settings SET value = 'dark again' WHERE key = 'theme'")
        try s.run("a", ["mode", "cloud"])
        try s.run("a", ["verify"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.sql("b", "SELECT value FROM settings WHERE key = 'theme'"), "dark again\n")
    }

    /// Two stores in the cloud, then a local, with a record changed in the container behind storectl's back.
    func tampered() throws -> Fleet {
        let s = try Fleet.notes(label: "storectl-switch")
        try s.run("a", ["mode", "local"])
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'); INSERT INTO settings VALUES ('theme', 'dark')")
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        try s.run("a", ["mode", "local"])
        s.modes = ["a": "local", "b": "cloud"]
        try s.sqlFile(s.dir.file("cloud/shared.container"), """
            UPDATE records SET fields = json_set(fields, '$.value', 'tampered') WHERE record_name = 'settings:["theme"]'
            """)
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n2', 'made while local')")
        return s
    }

    func testAKillDuringTheSwitchLeavesTheStoreLocal() throws {
        for failpoint in ["switch.after-snapshot", "switch.before-restore"] {
            let s = try tampered()
            if failpoint == "switch.after-snapshot" {
                try s.sql("a", "UPDATE settings SET value = 'dark again' WHERE key = 'theme'")
            }
            let config = s.config
            let rows = try s.noteRows("a")
            try s.run("a", ["mode", "cloud"], env: ["STORECTL_FAILPOINT": failpoint], expect: 137)
            XCTAssertEqual(s.config, config, failpoint)
            XCTAssertEqual(try s.sql("a", "SELECT value FROM _storectl_meta WHERE key = 'mode'"), "local\n", failpoint)
            XCTAssertEqual(try s.noteRows("a"), rows, failpoint)
            XCTAssertEqual(try s.integrity().values.filter { $0 != "ok" }, [], failpoint)
            // The store keeps working locally; the next switch (once the row is fixed) goes through and leaves no
            // copy behind.
            try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n3', 'after the kill'); "
                      + "UPDATE settings SET value = 'fixed' WHERE key = 'theme'")
            try s.run("a", ["mode", "cloud"])
            try s.run("a", ["verify"])
            try s.run("b", ["sync"])
            XCTAssertEqual(try s.noteRows("a"), try s.noteRows("b"), failpoint)
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: s.dir.file("data"))
                .filter { $0.contains("storectl") }, [], failpoint)
        }
    }
}
