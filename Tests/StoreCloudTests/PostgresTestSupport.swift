import Foundation
import StoreBase
import StoreCloud
@testable import StoreCloudPostgres
import TestSupport
import XCTest

/// The PostgreSQL server the tests use: `STORECTL_TEST_PG_URL`, a superuser connection (as `.ci/run` starts it).
///
/// With `STORECTL_REQUIRE_PG=1`, a missing URL or a server that does not answer fails the test. Without it and
/// without a URL, the PostgreSQL tests return early with a note.
enum PostgresTestServer {
    static var environment: [String: String] { ProcessInfo.processInfo.environment }
    static var required: Bool { environment["STORECTL_REQUIRE_PG"] == "1" }

    /// The server URL, or nil after failing the test (when required) or printing a note (when not).
    static func url(file: StaticString = #filePath, line: UInt = #line) -> String? {
        guard let url = environment["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if required {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL "
                    + "(.ci/run does) and export its URL", file: file, line: line)
            } else {
                print("note: STORECTL_TEST_PG_URL is not set; PostgreSQL tests did nothing")
            }
            return nil
        }
        do {
            _ = try PGConnection(parameters: [("dbname", url)], timeout: 10)
        } catch {
            XCTFail("the PostgreSQL server at STORECTL_TEST_PG_URL (\(Redaction.connectionString(url))) does not answer: "
                + "\(error)", file: file, line: line)
            return nil
        }
        return url
    }

    /// A unique container id for one test.
    static func uniqueContainer(_ label: String = "test") -> String {
        "test.\(label).\(UInt32.random(in: 0...UInt32.max))"
    }

    /// A unique role name for one test.
    static func uniqueRole() -> String {
        "storectl_test_\(UInt32.random(in: 0...UInt32.max))"
    }

    /// Runs SQL as the test superuser.
    static func superuser(_ url: String, _ sql: String, _ parameters: [String?] = []) throws -> PGResult {
        let c = try PGConnection(parameters: [("dbname", url)], timeout: 10)
        // Tests run side by side on one server: a statement that met another test's update of the same catalog
        // row (two `GRANT ... ON DATABASE` at once) failed whole, and is tried again.
        for _ in 0..<5 {
            do { return try c.execute(sql, parameters) } catch let error as PGError
                where error.message.contains("tuple concurrently updated")
            {
                Thread.sleep(forTimeInterval: 0.2)
            }
        }
        return try c.execute(sql, parameters)
    }
}

/// A test case whose containers and roles are dropped after each test.
class PostgresTestCase: XCTestCase {
    private var containers: [PostgresCloudDatabase] = []
    private var roles: [(url: String, role: String)] = []

    /// A new, initialised container with a unique id, dropped after the test; nil when there is no server.
    func makeContainer(_ label: String = "test", file: StaticString = #filePath, line: UInt = #line) throws
        -> PostgresCloudDatabase?
    {
        guard let url = PostgresTestServer.url(file: file, line: line) else { return nil }
        let db = try PostgresCloudDatabase(url: url, container: PostgresTestServer.uniqueContainer(label))
        try db.initializeContainer()
        containers.append(db)
        return db
    }

    /// Drops `db`'s container after the test.
    func dropAfterTest(_ db: PostgresCloudDatabase) { containers.append(db) }

    /// Creates a role (with `options`, e.g. `LOGIN`), dropped after the test.
    func makeRole(url: String, options: String = "LOGIN") throws -> String {
        let role = PostgresTestServer.uniqueRole()
        _ = try PostgresTestServer.superuser(url, "CREATE ROLE \(role) \(options)")
        roles.append((url, role))
        return role
    }

    override func tearDown() {
        for db in containers { try? db.deleteContainer() }
        containers = []
        for (url, role) in roles {
            _ = try? PostgresTestServer.superuser(url, "DROP OWNED BY \(role)")
            _ = try? PostgresTestServer.superuser(url, "DROP ROLE IF EXISTS \(role)")
        }
        roles = []
        super.tearDown()
    }
}

/// A throwaway PostgreSQL cluster of a test's own (initdb + pg_ctl on a unix socket in a temporary folder), for
/// what the shared server must not be put through: password authentication, stops and restarts.
final class ScratchCluster {
    let directory: String
    let bin: String
    let superuserPassword: String

    /// The superuser's URL, without the password.
    var url: String { "postgresql://postgres@/postgres?host=\(directory)" }

    /// Creates and starts a cluster whose unix-socket logins use `auth` (`trust`, `scram-sha-256`).
    /// Returns nil (after failing the test when PostgreSQL is required) when no server binaries are found.
    /// - Parameter hba: the whole `pg_hba.conf` to use instead of initdb's, if given.
    static func start(auth: String, hba: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws
        -> ScratchCluster?
    {
        let env = ProcessInfo.processInfo.environment
        var bin = env["STORECTL_TEST_PG_BIN"] ?? ""
        if bin.isEmpty {
            let root = "/usr/lib/postgresql"
            let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
            if let newest = versions.compactMap({ Int($0) }).max() { bin = "\(root)/\(newest)/bin" }
        }
        guard !bin.isEmpty, FileManager.default.isExecutableFile(atPath: bin + "/initdb") else {
            if PostgresTestServer.required {
                XCTFail("STORECTL_REQUIRE_PG=1 but no PostgreSQL server binaries were found "
                    + "(set STORECTL_TEST_PG_BIN)", file: file, line: line)
            } else {
                print("note: no PostgreSQL server binaries; the scratch-cluster test did nothing")
            }
            return nil
        }
        return try ScratchCluster(bin: bin, auth: auth, hba: hba)
    }

    private init(bin: String, auth: String, hba: String?) throws {
        self.bin = bin
        var template = Array("/tmp/storectl-pgtest-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buf -> Bool in
            guard let p = buf.baseAddress else { return false }
            return mkdtemp(p) != nil
        }
        guard made else { throw StoreTestError("cannot create a temporary folder") }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        superuserPassword = "su-\(UInt32.random(in: 0...UInt32.max))"
        try superuserPassword.write(toFile: directory + "/pwfile", atomically: false, encoding: .utf8)
        if getuid() == 0 {
            guard let pw = getpwnam("postgres") else { throw StoreTestError("there is no postgres user") }
            for path in [directory, directory + "/pwfile"] { chown(path, pw.pointee.pw_uid, pw.pointee.pw_gid) }
        }
        try Self.check(asPostgres(bin + "/initdb", ["-D", directory + "/data", "-U", "postgres", "-A", auth,
                                                    "--pwfile=" + directory + "/pwfile", "--no-sync"]))
        if let hba {
            try hba.write(toFile: directory + "/data/pg_hba.conf", atomically: false, encoding: .utf8)
        }
        try start()
    }

    deinit {
        _ = try? asPostgres(bin + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    func start() throws {
        try Self.check(asPostgres(bin + "/pg_ctl", [
            "-D", directory + "/data", "-l", directory + "/log", "-w", "-t", "60",
            "-o", "-k \(directory) -c listen_addresses='' -c fsync=off", "start",
        ]))
    }

    func stop(mode: String = "fast") throws {
        try Self.check(asPostgres(bin + "/pg_ctl", ["-D", directory + "/data", "-m", mode, "-w", "stop"]))
    }

    func restart() throws {
        try Self.check(asPostgres(bin + "/pg_ctl", [
            "-D", directory + "/data", "-l", directory + "/log", "-m", "fast", "-w", "-t", "60",
            "-o", "-k \(directory) -c listen_addresses='' -c fsync=off", "restart",
        ]))
    }

    /// Runs SQL as the cluster's superuser.
    @discardableResult
    func superuser(_ sql: String) throws -> PGResult {
        let c = try PGConnection(parameters: [("dbname", url), ("password", superuserPassword)], timeout: 10)
        return try c.execute(sql)
    }

    /// initdb and pg_ctl refuse to run as root: run them as `postgres` then. Their output goes to a log file.
    ///
    /// Spawned and reaped here rather than with Foundation's `Process`, whose wait does not always notice the exit
    /// of a `pg_ctl start` that leaves a server daemon behind.
    private func asPostgres(_ program: String, _ args: [String]) throws -> (status: Int32, output: String) {
        var argv = [program] + args
        if getuid() == 0 {
            let runuser = FileManager.default.isExecutableFile(atPath: "/usr/sbin/runuser")
                ? "/usr/sbin/runuser" : "/sbin/runuser"
            argv = [runuser, "-u", "postgres", "--"] + argv
        }
        let log = directory + "/commands.log"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cArgs = argv.map { strdup($0) } + [nil]
        defer { for p in cArgs { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ)
        guard rc == 0 else { throw StoreTestError("cannot run \(argv[0]): error \(rc)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        // WIFEXITED / WEXITSTATUS: the exit code is in bits 8-15 when the low 7 bits are 0.
        return ((status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f), output)
    }

    private static func check(_ result: (status: Int32, output: String)) throws {
        guard result.status == 0 else { throw StoreTestError("command failed (exit \(result.status)): \(result.output)") }
    }

}

struct StoreTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The record fields of a test record.
func fields(_ n: Int) -> String { "{\"n\":\(n)}" }
