import Foundation
import TestSupport
import XCTest

/// libpq is loaded only when a postgres:// URL is used, and a missing libpq is a clear exit 69.
final class LibPQLoadingTests: XCTestCase {
    private let missing = "/nonexistent/storectl-test/libpq.so.5"

    private func writeConfig(_ dir: TempDirectory, url: String) throws {
        try dir.write("config.yaml", """
            version: 1
            stores:
              notes:
                path: data/notes.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.notes
                  url: \(url)
                  create_if_missing: true
                  account: alice
                  secret: ${ALICE_SECRET}

            """)
        try dir.write("schema.sql", "CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT);\n")
    }

    private func run(_ args: [String], in dir: TempDirectory) throws -> ProcessResult {
        try Binary.storectl(args, in: dir.path, environment: ["STORECTL_LIBPQ": missing,
                                                              "ALICE_SECRET": "s3cret-for-libpq-tests"])
    }

    func testTheBinaryDoesNotLinkLibPQ() throws {
        let dir = try TempDirectory()
        let result = try Binary.run("/usr/bin/ldd", [Binary.storectl], in: dir.path)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertTrue(result.stdout.contains("libsqlite3"), result.stdout)
        XCTAssertFalse(result.stdout.contains("libpq"), result.stdout)
    }

    func testAMissingLibPQStopsAPostgresCommandWithExit69() throws {
        let dir = try TempDirectory()
        try writeConfig(dir, url: "postgres://alice@localhost/notes")
        let summary = "error: cannot load the PostgreSQL client library \(missing), which postgres:// cloud URLs need: "
        let hint = "hint: install libpq 14 or later (Debian/Ubuntu: apt-get install libpq5, or libpq-dev; macOS: brew "
            + "install libpq), or set STORECTL_LIBPQ to the library's path\n"

        let initResult = try run(["cloud", "init"], in: dir)
        XCTAssertEqual(initResult.status, 69, "\(initResult)")
        XCTAssertTrue(initResult.stderr.hasPrefix(summary + missing + ": cannot open shared object file"),
                      initResult.stderr)
        XCTAssertTrue(initResult.stderr.hasSuffix("\n" + hint), initResult.stderr)
        XCTAssertEqual(initResult.stdout, "")

        let status = try run(["account", "status", "--json"], in: dir)
        XCTAssertEqual(status.status, 69, "\(status)")
        let json = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any] ?? [:]
        XCTAssertEqual(json["status"] as? String, "couldNotDetermine")
        let reason = json["reason"] as? String ?? ""
        XCTAssertTrue(reason.hasPrefix("cannot load the PostgreSQL client library \(missing)"), reason)
        XCTAssertTrue(reason.contains("apt-get install libpq5"), reason)

        // mode cloud refuses before anything changes.
        let mode = try run(["mode", "cloud"], in: dir)
        XCTAssertEqual(mode.status, 69, "\(mode)")
        XCTAssertTrue(mode.stderr.contains("cannot load the PostgreSQL client library \(missing)"), mode.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("data/notes.sqlite")))
    }

    func testCommandsWithoutPostgresNeverLoadIt() throws {
        let dir = try TempDirectory()
        try writeConfig(dir, url: "file:cloud/notes.container")
        let version = try run(["--version"], in: dir)
        XCTAssertEqual(version.status, 0, "\(version)")
        XCTAssertEqual(version.stdout, "storectl 0.1.0\n")
        let mode = try run(["mode", "cloud"], in: dir)
        XCTAssertEqual(mode.status, 0, "\(mode)")
        let status = try run(["status", "--json"], in: dir)
        XCTAssertEqual(status.status, 0, "\(status)")
        XCTAssertFalse(status.stdout.contains("libpq") || status.stderr.contains("libpq"), "\(status)")
    }
}
