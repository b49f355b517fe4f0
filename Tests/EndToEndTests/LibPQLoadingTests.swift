import Foundation
import TestSupport
import XCTest

/// libpq is loaded only when a postgres:// URL is used, and a missing libpq is a clear exit 69.
final class LibPQLoadingTests: XCTestCase {
    private let missing = "/nonexistent/storectl-test/libpq.so.5"

    /// One store `notes` whose cloud is `url`, in a project whose commands run with libpq pointed at a file that
    /// does not exist.
    private func project(url: String) throws -> E2EProject {
        let p = try E2EProject()
        p.environment = ["STORECTL_LIBPQ": missing, "ALICE_SECRET": "s3cret-for-libpq-tests"]
        try p.writeConfig([E2EProject.Store("notes", path: "data/notes.sqlite",
                                            cloud: E2EProject.Cloud(container: "iCloud.com.example.notes", url: url,
                                                                    account: "alice", secret: "${ALICE_SECRET}"))])
        try p.writeSchema("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT);\n")
        return p
    }

    func testTheBinaryDoesNotLinkLibPQ() throws {
        let dir = try TempDirectory()
        let result = try Binary.run("/usr/bin/ldd", [Binary.storectl], in: dir.path)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertTrue(result.stdout.contains("libsqlite3"), result.stdout)
        XCTAssertFalse(result.stdout.contains("libpq"), result.stdout)
    }

    func testAMissingLibPQStopsAPostgresCommandWithExit69() throws {
        let p = try project(url: "postgres://alice@localhost/notes")
        let summary = "error: cannot load the PostgreSQL client library \(missing), which postgres:// cloud URLs need: "
        let hint = "hint: install libpq 14 or later (Debian/Ubuntu: apt-get install libpq5, or libpq-dev; macOS: brew "
            + "install libpq), or set STORECTL_LIBPQ to the library's path\n"

        let initResult = try p.run(["cloud", "init"], expect: 69)
        XCTAssertTrue(initResult.stderr.hasPrefix(summary + missing + ": cannot open shared object file"),
                      initResult.stderr)
        XCTAssertTrue(initResult.stderr.hasSuffix("\n" + hint), initResult.stderr)
        XCTAssertEqual(initResult.stdout, "")

        let status = try p.run(["account", "status", "--json"], expect: 69)
        let json = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any] ?? [:]
        XCTAssertEqual(json["status"] as? String, "couldNotDetermine")
        let reason = json["reason"] as? String ?? ""
        XCTAssertTrue(reason.hasPrefix("cannot load the PostgreSQL client library \(missing)"), reason)
        XCTAssertTrue(reason.contains("apt-get install libpq5"), reason)

        // mode cloud refuses before anything changes.
        let mode = try p.run(["mode", "cloud"], expect: 69)
        XCTAssertTrue(mode.stderr.contains("cannot load the PostgreSQL client library \(missing)"), mode.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("data/notes.sqlite")))
    }

    func testCommandsWithoutPostgresNeverLoadIt() throws {
        let p = try project(url: "file:cloud/notes.container")
        let version = try p.run(["--version"])
        XCTAssertEqual(version.stdout, "storectl 0.1.0\n")
        try p.run(["mode", "cloud"])
        let status = try p.run(["status", "--json"])
        XCTAssertFalse(status.stdout.contains("libpq") || status.stderr.contains("libpq"), "\(status)")
    }
}
