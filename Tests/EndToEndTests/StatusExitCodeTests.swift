import Foundation
import TestSupport
import XCTest

/// `storectl status` exits 0 only when sync would work for every store it reports; otherwise with the code of the
/// first problem, every problem listed (JSON `problems`, and `x problem (exit N): ...` lines in the human block).
/// Each case runs the real binary on a project of its own.
final class StatusExitCodeTests: XCTestCase {
    static let strictSchema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL,
                                         title TEXT CHECK (length(title) < 5));
        """
    static let itemsSchema = "CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL NOT NULL);"
    static let priceMigration = """
        CREATE TABLE items_new(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price INTEGER NOT NULL);
        INSERT INTO items_new(id, name, price) SELECT id, name, CAST(round(price * 100) AS INTEGER) FROM items;
        DROP TABLE items;
        ALTER TABLE items_new RENAME TO items;
        """

    /// Stores a and b on one container file; b's schema may differ.
    func project(bSchema: String? = nil, schema: String = E2EProject.notesSchema) throws -> E2EProject {
        let p = try E2EProject(label: "storectl-status-exit")
        try p.writeSchema(schema)
        if let bSchema { try p.writeSchema(bSchema, to: "b.sql") }
        let cloud = E2EProject.Cloud.file("iCloud.com.example.statusexit")
        try p.writeConfig([E2EProject.Store("a", cloud: cloud),
                           E2EProject.Store("b", schema: bSchema == nil ? "schema.sql" : "b.sql", cloud: cloud)])
        return p
    }

    struct Case {
        var name: String
        /// Sets the project up; returns the store whose status is checked.
        var setUp: (E2EProject) throws -> String
        var env: [String: String] = [:]
        var code: Int32
        /// The kind of the first problem, and a piece of its message; nil for no problem.
        var kind: String?
        var message: String?
    }

    static var cases: [Case] { [
        Case(name: "local mode", setUp: { p in
            try p.run(["--store", "a", "init"])
            return "a"
        }, code: 0),
        Case(name: "cloud mode, account available", setUp: { p in
            try p.run(["--store", "a", "mode", "cloud"])
            return "a"
        }, code: 0),
        Case(name: "wrong secret", setUp: { p in
            try p.run(["--store", "a", "mode", "cloud"])
            return "a"
        }, env: ["STORECTL_SECRET": "not-the-secret"], code: 69, kind: "unavailable",
             message: "account 'demo' is restricted"),
        Case(name: "missing container of a bound store", setUp: { p in
            try p.run(["--store", "a", "mode", "cloud"])
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: p.dir.file("cloud/shared.container" + suffix))
            }
            return "a"
        }, code: 69, kind: "unavailable", message: "store 'a' is bound to container 'iCloud.com.example.statusexit'"),
        Case(name: "set-aside record", setUp: { p in
            try p.run(["--store", "a", "mode", "cloud"])
            try p.run(["--store", "b", "mode", "cloud"])
            try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'a long title')")
            try p.run(["--store", "a", "sync"])
            try p.run(["--store", "b", "sync"])
            return "b"
        }, code: 65, kind: "data", message: "is set aside"),
        Case(name: "failed last sync", setUp: { p in
            try p.run(["--store", "a", "mode", "cloud"])
            try p.sql("a", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12) "
                      + "INSERT INTO notes(uuid, title) SELECT 'n' || i, 'row' FROM n")
            try p.run(["--store", "a", "sync"])
            try p.run(["--store", "a", "config", "set", "stores.a.cloud.max_delete_count", "2"])
            try p.sql("a", "DELETE FROM notes")
            try p.run(["--store", "a", "sync"], expect: 65)
            return "a"
        }, code: 65, kind: "data", message: "the last sync failed"),
        Case(name: "store file missing", setUp: { p in
            try p.run(["--store", "a", "mode", "cloud"])
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: p.storePath("a") + suffix) }
            return "a"
        }, code: 66, kind: "no_input", message: "does not exist"),
    ] }

    func check(_ c: Case, _ p: E2EProject, store: String) throws {
        let r = try p.run(["--store", store, "--json", "status"], expect: nil, env: c.env)
        XCTAssertEqual(r.status, c.code, "\(c.name)\n\(r)")
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any],
                                "\(c.name): \(r.stdout)")
        let problems = try XCTUnwrap(doc["problems"] as? [[String: Any]], "\(c.name): no problems array\n\(r.stdout)")
        if let kind = c.kind {
            let first = try XCTUnwrap(problems.first, "\(c.name): exit \(r.status) and no problem listed")
            XCTAssertEqual(first["code"] as? Int, Int(c.code), "\(c.name): \(first)")
            XCTAssertEqual(first["kind"] as? String, kind, "\(c.name): \(first)")
            XCTAssertEqual(first["store"] as? String, store, "\(c.name): \(first)")
            XCTAssertTrue((first["message"] as? String)?.contains(c.message ?? "") == true, "\(c.name): \(first)")
            XCTAssertEqual(Set(first.keys), ["store", "code", "kind", "message", "hint"], "\(c.name)")
        } else {
            XCTAssertEqual(problems.count, 0, "\(c.name): \(problems)")
        }
        // The human form: the same exit code, each problem on a line of its own.
        let human = try p.run(["--store", store, "status"], expect: nil, env: c.env)
        XCTAssertEqual(human.status, c.code, "\(c.name)\n\(human)")
        XCTAssertEqual(human.stdout.components(separatedBy: "\n  x problem (exit ").count - 1, problems.count,
                       "\(c.name)\n\(human.stdout)")
        if c.kind != nil {
            XCTAssertTrue(human.stdout.contains("x problem (exit \(c.code)): "), "\(c.name)\n\(human.stdout)")
        }
    }

    func testEveryProblemHasItsExitCode() throws {
        for c in Self.cases {
            let p = try project(bSchema: c.name == "set-aside record" ? Self.strictSchema : nil)
            let store = try c.setUp(p)
            try check(c, p, store: store)
        }
    }

    func testWaitingForADataMigrationIsExit75() throws {
        let p = try project(schema: Self.itemsSchema)
        try FileManager.default.createDirectory(atPath: p.dir.file("migrations"), withIntermediateDirectories: true)
        try p.dir.write("migrations/0002-price.sql", Self.priceMigration)
        try p.run(["--store", "a", "init"])
        try p.sql("a", "INSERT INTO items(id, name, price) VALUES (1, 'pen', 1.5)")
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        try p.run(["--store", "a", "migrate", "--sql", "migrations/0002-price.sql", "--schema-version", "2"])
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "b", "sync"], expect: 75)
        let c = Case(name: "waiting for a data migration", setUp: { _ in "b" }, code: 75, kind: "temporary",
                     message: "waited for a data migration")
        try check(c, p, store: "b")
    }

    /// Without --store: every store's problems, and the exit code of the first one in the config's order.
    func testTheFirstProblemOfTheFirstStoreSetsTheExitCode() throws {
        let p = try project()
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        try p.run(["status"])
        // b's file goes missing (66) and a's last sync failed (65): a comes first.
        try p.sql("a", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12) "
                      + "INSERT INTO notes(uuid, title) SELECT 'n' || i, 'row' FROM n")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "a", "config", "set", "stores.a.cloud.max_delete_count", "2"])
        try p.sql("a", "DELETE FROM notes")
        try p.run(["--store", "a", "sync"], expect: 65)
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: p.storePath("b") + suffix) }
        let r = try p.run(["--json", "status"], expect: 65)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        let stores = try XCTUnwrap(doc["stores"] as? [[String: Any]])
        XCTAssertEqual(stores.map { ($0["problems"] as? [[String: Any]])?.first?["code"] as? Int }, [65, 66])
        // The hints name the commands to paste on this two-store config.
        let hint = (stores[0]["problems"] as? [[String: Any]])?.first?["hint"] as? String ?? ""
        XCTAssertTrue(hint.contains("'storectl --store a sync'"), hint)
    }

    /// doctor checks the account live: once the secret is right again, a last sync that failed on it is no
    /// finding; a last error it cannot check again says to run `sync`.
    func testDoctorChecksTheAccountLiveInsteadOfRepeatingTheLastError() throws {
        let p = try project()
        try p.run(["--store", "a", "mode", "cloud"])
        let wrong = ["STORECTL_SECRET": "not-the-secret"]
        try p.run(["--store", "a", "sync"], expect: 69, env: wrong)
        let broken = try p.run(["--store", "a", "doctor"], expect: 69, env: wrong)
        XCTAssertTrue(broken.stdout.contains("is restricted"), broken.stdout)
        // The fix names the command that shows the variable the secret comes from, and it prints its name.
        XCTAssertTrue(broken.stdout.contains("'storectl --store a config get stores.a.cloud.secret'"), broken.stdout)
        let name = try p.run(["--store", "a", "config", "get", "stores.a.cloud.secret"], env: wrong)
        XCTAssertEqual(name.stdout, "${STORECTL_SECRET:-<redacted>}\n")
        XCTAssertFalse(name.stdout.contains("not-the-secret") || name.stdout.contains("demo-secret"))
        // Fixed: doctor is healthy at once; status still names the failed sync until a sync succeeds.
        let fixed = try p.run(["--store", "a", "doctor"])
        XCTAssertFalse(fixed.stdout.contains("restricted"), fixed.stdout)
        let status = try p.run(["--store", "a", "status"], expect: 69)
        XCTAssertTrue(status.stdout.contains("the last sync failed"), status.stdout)
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "a", "status"])

        // A last error doctor cannot check again (the mass-delete breaker): run sync, which says what still fails.
        try p.sql("a", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12) "
                      + "INSERT INTO notes(uuid, title) SELECT 'n' || i, 'row' FROM n")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "a", "config", "set", "stores.a.cloud.max_delete_count", "2"])
        try p.sql("a", "DELETE FROM notes")
        try p.run(["--store", "a", "sync"], expect: 65)
        let stale = try p.run(["--store", "a", "doctor"], expect: 65)
        XCTAssertTrue(stale.stdout.contains("fix: storectl --store a sync tries again"), stale.stdout)
    }
}
