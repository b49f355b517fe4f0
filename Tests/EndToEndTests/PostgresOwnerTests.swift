import Foundation
import TestSupport
import XCTest

/// PostgreSQL: a container is owned by the role that created its schema. A store never syncs into a container
/// another role created first without naming that owner (`--accept-owner`); `account status` names the owner; and
/// `cloud init` by a role that may not create says what it needs.
final class PostgresOwnerTests: XCTestCase {
    struct Server {
        var socket: String
        var port: String?
        var bin: String
    }

    func server() throws -> Server? {
        let env = ProcessInfo.processInfo.environment
        guard let socket = env["STORECTL_TEST_PG_SOCKET_DIR"], !socket.isEmpty,
              let bin = env["STORECTL_TEST_PG_BIN"], !bin.isEmpty
        else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_SOCKET_DIR or STORECTL_TEST_PG_BIN is not set")
            }
            return nil
        }
        return Server(socket: socket, port: env["PGPORT"], bin: bin)
    }

    @discardableResult
    func psql(_ s: Server, _ sql: String) throws -> ProcessResult {
        var args = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", s.socket, "-U", "postgres", "-d", "postgres", "-c", sql]
        if let port = s.port { args += ["-p", port] }
        let r = try Binary.run(s.bin + "/psql", args, in: "/")
        XCTAssertEqual(r.status, 0, "\(sql)\n\(r)")
        return r
    }

    /// One store `notes` on the container `container` of the test server, signing in as `role` (no secret: the
    /// server trusts its unix socket).
    func writeConfig(_ p: E2EProject, _ s: Server, role: String, container: String) throws {
        let port = s.port.map { " port=\($0)" } ?? ""
        let cloud = E2EProject.Cloud(container: container, url: "\"host=\(s.socket)\(port) dbname=postgres\"",
                                     account: role, secret: nil, createIfMissing: false)
        try p.writeConfig([E2EProject.Store("notes", cloud: cloud)])
    }

    func testAContainerCreatedByAnotherRoleNeedsAnExplicitChoice() throws {
        guard let s = try server() else { return }
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let (squatter, user, plain) = ("squat_\(suffix)", "user_\(suffix)", "plain_\(suffix)")
        let container = "iCloud.com.example.owner\(suffix)"
        defer {
            for role in [squatter, user, plain] {
                _ = try? psql(s, "DROP OWNED BY \(role) CASCADE; DROP ROLE IF EXISTS \(role)")
            }
        }
        try psql(s, "CREATE ROLE \(squatter) LOGIN; GRANT CREATE ON DATABASE postgres TO \(squatter); "
                 + "CREATE ROLE \(user) LOGIN; CREATE ROLE \(plain) LOGIN")
        let p = try E2EProject(label: "storectl-owner")
        try p.writeSchema("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);")
        // A role without CREATE cannot create the container, and is told what would let it.
        try writeConfig(p, s, role: plain, container: container)
        let refused = try p.run(["cloud", "init"], expect: 77, env: ["PGUSER": plain])
        XCTAssertTrue(refused.stderr.contains("GRANT CREATE ON DATABASE"), refused.stderr)
        // The squatter creates the container id first, and says it owns it.
        try writeConfig(p, s, role: squatter, container: container)
        let created = try p.run(["cloud", "init"], env: ["PGUSER": squatter])
        XCTAssertTrue(created.stdout.contains("role '\(squatter)' owns it"), created.stdout)
        XCTAssertFalse(created.stdout.contains("with no account"), created.stdout)
        XCTAssertFalse(created.stderr.contains("account add"), created.stderr)
        let grants = try p.run(["cloud", "init", "--print-grants"], env: ["PGUSER": squatter])
        try psql(s, grants.stdout.replacingOccurrences(of: squatter, with: user))
        // The user, granted on it, is told who owns it, and must choose.
        try writeConfig(p, s, role: user, container: container)
        let env = ["PGUSER": user]
        let status = try p.run(["--json", "account", "status"], env: env)
        XCTAssertTrue(status.stdout.contains("\"owner\" : \"\(squatter)\""), status.stdout)
        let asked = try p.run(["mode", "cloud"], expect: 78, env: env)
        XCTAssertTrue(asked.stderr.contains("is owned by role \(squatter), not by the configured role \(user)"),
                      asked.stderr)
        XCTAssertTrue(asked.stderr.contains("--accept-owner \(squatter)"), asked.stderr)
        XCTAssertFalse(try p.dir.read("config.yaml").contains("mode: cloud"))
        try p.run(["mode", "cloud", "--accept-owner", "someone_else"], expect: 78, env: env)
        try p.run(["mode", "cloud", "--accept-owner", squatter], env: env)
        // Accepted once: later syncs need no flag.
        try p.run(["sync"], env: env)
    }
}
