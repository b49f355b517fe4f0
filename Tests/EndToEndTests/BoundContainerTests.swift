import Foundation
import StoreCloudPostgres
import TestSupport
import XCTest

/// A store bound to a container never gets a new, empty one by accident: `cloud.create_if_missing` creates a
/// container only for a store's first binding. When the container a store is bound to disappears (its file moved
/// away, its PostgreSQL schema dropped), every command says it is missing, names the URL and what to do, and
/// creates nothing; `status`, `doctor` and `verify` never call it available or reachable.
final class BoundContainerTests: XCTestCase {
    /// Two stores in cloud mode on one container file with `create_if_missing: true`, a row synced.
    func boundPair() throws -> E2EProject {
        let p = try E2EProject(label: "storectl-bound")
        try p.writeSchema()
        try p.writeConfig(["a", "b"].map { E2EProject.Store($0, cloud: .file("iCloud.com.example.bound")) })
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "b", "sync"])
        return p
    }

    static func json(_ r: ProcessResult) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], r.stdout)
    }

    /// What every command must say about store `store` whose container is gone from `url`.
    func assertSaysMissing(_ text: String, store: String, url: String, _ what: String,
                           file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(text.contains("store '\(store)' is bound to container"), "\(what): \(text)", file: file, line: line)
        XCTAssertTrue(text.contains(url), "\(what): names the URL: \(text)", file: file, line: line)
        XCTAssertTrue(text.contains("config set stores.\(store).cloud.url NEW_URL"), "\(what): \(text)",
                      file: file, line: line)
        XCTAssertTrue(text.contains("migrate --cloud NEW_URL"), "\(what): \(text)", file: file, line: line)
        XCTAssertFalse(text.contains("create_if_missing: true"), "\(what): asks for what is set: \(text)",
                       file: file, line: line)
        XCTAssertFalse(text.contains("--reupload"), "\(what): would fork the data: \(text)", file: file, line: line)
        XCTAssertFalse(text.contains("cloud init"), "\(what): would make a new container: \(text)",
                       file: file, line: line)
    }

    func testAContainerFileMovedAwayIsMissingNeverRecreated() throws {
        let p = try boundPair()
        let container = p.dir.file("cloud/shared.container")
        try FileManager.default.createDirectory(atPath: p.dir.file("elsewhere"), withIntermediateDirectories: true)
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: container + suffix) {
            try FileManager.default.moveItem(atPath: container + suffix, toPath: p.dir.file("elsewhere/c" + suffix))
        }
        let before = try p.sql("a", "SELECT uuid, title FROM notes ORDER BY uuid")
        p.environment["STORECTL_SECRET"] = "demo-secret"

        for args in [["sync"], ["--json", "sync"], ["mode", "local"], ["verify"], ["seed"]] {
            let r = try p.run(["--store", "a"] + args, expect: nil)
            if args == ["seed"] { continue }  // no seed configured: another refusal, checked only for creating nothing
            XCTAssertEqual(r.status, 69, "\(args)\n\(r)")
            assertSaysMissing(r.stderr, store: "a", url: container, "\(args)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: container), "\(args) created a new container")
        }
        // status: missing, never available or reachable; exit 69 with the problem listed.
        for args in [["status"], ["status", "--check-cloud"]] {
            let r = try p.run(["--store", "a"] + args, expect: 69)
            XCTAssertFalse(r.stdout.contains(": available"), "\(args)\n\(r.stdout)")
            XCTAssertTrue(r.stdout.contains("reachable       no"), "\(args)\n\(r.stdout)")
            assertSaysMissing(r.stdout, store: "a", url: container, "status \(args)")
        }
        let status = try Self.json(try p.run(["--json", "--store", "a", "status", "--check-cloud"], expect: 69))
        let cloud = try XCTUnwrap(status["cloud"] as? [String: Any])
        XCTAssertEqual(cloud["reachable"] as? Bool, false)
        XCTAssertEqual(cloud["container_exists"] as? Bool, false)
        XCTAssertNotEqual((status["account"] as? [String: Any])?["status"] as? String, "available")
        let problems = try XCTUnwrap(status["problems"] as? [[String: Any]])
        XCTAssertEqual(problems.first?["code"] as? Int, 69, "\(problems)")
        XCTAssertEqual(problems.first?["kind"] as? String, "unavailable")
        XCTAssertEqual(problems.first?["store"] as? String, "a")
        assertSaysMissing((problems.first?["message"] as? String ?? "") + (problems.first?["hint"] as? String ?? ""),
                          store: "a", url: container, "status problems")
        // doctor: a finding that says so, not "available", not "set create_if_missing".
        let doctor = try p.run(["--store", "a", "doctor"], expect: 69)
        assertSaysMissing(doctor.stdout, store: "a", url: container, "doctor")
        // account status too.
        let account = try p.run(["--store", "a", "account", "status"], expect: 69)
        XCTAssertTrue(account.stdout.hasPrefix("status: couldNotDetermine\n"), account.stdout)
        assertSaysMissing(account.stdout, store: "a", url: container, "account status")
        // A store in local mode, bound before, asked to check the cloud: missing too, and mode cloud refuses.
        let local = try p.run(["--store", "b", "mode", "local", "--no-final-sync"])
        XCTAssertEqual(local.status, 0)
        let checked = try p.run(["--store", "b", "status", "--check-cloud"], expect: nil)
        XCTAssertTrue(checked.stdout.contains("reachable       no"), checked.stdout)
        let enable = try p.run(["--store", "b", "mode", "cloud"], expect: 69)
        assertSaysMissing(enable.stderr, store: "b", url: container, "mode cloud")
        XCTAssertFalse(FileManager.default.fileExists(atPath: container), "a new container was made")
        XCTAssertEqual(try p.sql("a", "SELECT uuid, title FROM notes ORDER BY uuid"), before)

        // The first fix, pasted: point the config at where the container went; sync works and nothing forked.
        let fix = try p.run(["--store", "a", "sync"], expect: 69)
        XCTAssertTrue(fix.stderr.contains("'storectl --store a config set stores.a.cloud.url NEW_URL'"), fix.stderr)
        for store in ["a", "b"] {
            try p.run(["--store", store, "config", "set", "stores.\(store).cloud.url", "file:elsewhere/c"])
        }
        try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n2', 'after the move')")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "b", "mode", "cloud"])
        XCTAssertEqual(try p.sql("b", "SELECT uuid FROM notes ORDER BY uuid"), "n1\nn2\n")
        try p.run(["--store", "a", "status"])
        try p.run(["--store", "a", "doctor"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: container))
    }

    /// The other fix: a new container on purpose, with `migrate --cloud NEW_URL --no-final-sync` as the hint says.
    func testANewContainerIsStartedOnPurposeWithMigrateCloud() throws {
        let p = try boundPair()
        let container = p.dir.file("cloud/shared.container")
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: container + suffix) }
        let r = try p.run(["--store", "a", "sync"], expect: 69)
        XCTAssertTrue(r.stderr.contains("'storectl --store a migrate --cloud NEW_URL --no-final-sync'"), r.stderr)
        try p.run(["--store", "a", "migrate", "--cloud", "file:cloud/new.container", "--no-final-sync"])
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "a", "status"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: p.dir.file("cloud/new.container")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: container))
    }

    /// A store that never was bound still gets its container made on first use, as before.
    func testCreateIfMissingStillMakesTheFirstContainer() throws {
        let p = try E2EProject(label: "storectl-bound")
        try p.writeSchema()
        try p.writeConfig([E2EProject.Store("a", cloud: .file("iCloud.com.example.first"))])
        try p.run(["--store", "a", "init"])
        let status = try p.run(["--store", "a", "status", "--check-cloud"])
        XCTAssertTrue(status.stdout.contains("demo: available"), status.stdout)
        try p.run(["--store", "a", "mode", "cloud"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: p.dir.file("cloud/shared.container")))
    }

    // MARK: PostgreSQL: the container's schema dropped

    func testADroppedPostgresSchemaIsMissingNeverRecreated() throws {
        let env = ProcessInfo.processInfo.environment
        guard let socket = env["STORECTL_TEST_PG_SOCKET_DIR"], !socket.isEmpty,
              let bin = env["STORECTL_TEST_PG_BIN"], !bin.isEmpty
        else {
            if env["STORECTL_REQUIRE_PG"] == "1" { XCTFail("STORECTL_REQUIRE_PG=1 but no PostgreSQL test server") }
            return
        }
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let containerName = "iCloud.com.example.gone\(suffix)"
        let schema = PostgresCloudDatabase.schemaName(container: containerName)
        func psql(_ sql: String) throws -> ProcessResult {
            var args = ["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", socket, "-U", "postgres", "-d", "postgres",
                        "-c", sql]
            if let port = env["PGPORT"] { args += ["-p", port] }
            let r = try Binary.run(bin + "/psql", args, in: "/")
            XCTAssertEqual(r.status, 0, "\(sql)\n\(r)")
            return r
        }
        defer { _ = try? psql("DROP SCHEMA IF EXISTS \"\(schema)\" CASCADE") }
        let p = try E2EProject(label: "storectl-bound-pg")
        try p.writeSchema()
        let port = env["PGPORT"].map { " port=\($0)" } ?? ""
        let url = "host=\(socket)\(port) dbname=postgres"
        let cloud = E2EProject.Cloud(container: containerName, url: "\"\(url)\"", account: "postgres", secret: nil,
                                     createIfMissing: true)
        try p.writeConfig([E2EProject.Store("a", cloud: cloud)])
        try p.run(["--store", "a", "cloud", "init"])
        try p.run(["--store", "a", "mode", "cloud"])
        try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        try p.run(["--store", "a", "sync"])
        XCTAssertEqual(try psql("SELECT count(*) FROM pg_namespace WHERE nspname = '\(schema)'").stdout, "1\n")

        // As the superuser: the container's schema is dropped.
        _ = try psql("DROP SCHEMA \"\(schema)\" CASCADE")
        func schemaExists() throws -> Bool {
            try psql("SELECT count(*) FROM pg_namespace WHERE nspname = '\(schema)'").stdout == "1\n"
        }
        for args in [["sync"], ["verify"], ["mode", "local"]] {
            let r = try p.run(["--store", "a"] + args, expect: 69)
            assertSaysMissing(r.stderr, store: "a", url: url, "postgres \(args)")
            XCTAssertFalse(try schemaExists(), "\(args) made a new container schema")
        }
        let status = try Self.json(try p.run(["--json", "--store", "a", "status", "--check-cloud"], expect: 69))
        XCTAssertEqual((status["cloud"] as? [String: Any])?["reachable"] as? Bool, false, "\(status)")
        XCTAssertNotEqual((status["account"] as? [String: Any])?["status"] as? String, "available")
        XCTAssertEqual((status["problems"] as? [[String: Any]])?.first?["code"] as? Int, 69, "\(status)")
        let doctor = try p.run(["--store", "a", "doctor"], expect: 69)
        assertSaysMissing(doctor.stdout, store: "a", url: url, "postgres doctor")
        XCTAssertFalse(try schemaExists())
    }
}
