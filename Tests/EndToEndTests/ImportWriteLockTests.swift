import Foundation
import TestSupport
import XCTest

/// The import fetches every page before it opens its write transaction: an app writing to the store while
/// `storectl sync` fetches never waits on the network, even with no busy timeout at all. The stores share a
/// container file (and, in the subclass, a PostgreSQL container).
class ImportWriteLockTests: WatchTestCase {
    /// The app's writer: the sqlite3 shell with no busy timeout, so a lock storectl holds fails it at once.
    func appWrite(_ p: E2EProject, _ store: String, _ statement: String) throws -> ProcessResult {
        try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 0", p.storePath(store), statement], in: p.dir.path)
    }

    /// b's `sync`, importing three records one per page, stopped by `failpoint` for a few seconds.
    func pausedSync(_ p: E2EProject, _ failpoint: String) throws -> BackgroundProcess {
        try makeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three')")
        try p.run(["--store", "a", "sync"])
        let b = try BackgroundProcess.storectl(["--store", "b", "sync"], in: p.dir.path, environment: p.environment
            .merging(["STORECTL_PAGE_SIZE": "1", "STORECTL_FAILPOINT": failpoint + ":pause=4"]) { $1 })
        let name = failpoint.split(separator: ":").first.map(String.init) ?? failpoint
        XCTAssertTrue(b.wait(upTo: 30) { b.stderr.contains("failpoint \(name) paused") }, b.transcript)
        return b
    }

    func testAnAppWritesWhileTheImportFetches() throws {
        let p = try E2EProject()
        // Paused after the first page, with two more to fetch: the write transaction is not open yet.
        let b = try pausedSync(p, "import.after-fetch")
        let write = try appWrite(p, "b", "INSERT INTO notes(uuid, title) VALUES ('app', 'written during the fetch')")
        XCTAssertTrue(b.isRunning, "the import was still fetching")
        XCTAssertEqual(write.status, 0, "\(write)")
        XCTAssertEqual(b.waitForExit(upTo: 60), 0, b.transcript)
        let all = "app|written during the fetch\nn1|one\nn2|two\nn3|three\n"
        XCTAssertEqual(try notes(p, "b"), all)
        XCTAssertEqual(try p.sql("b", "PRAGMA integrity_check"), "ok\n")
        // The app's row is b's own change: the next syncs take it to a.
        try p.run(["--store", "b", "sync"])
        try p.run(["--store", "a", "sync"])
        XCTAssertEqual(try notes(p, "a"), all)
        try p.run(["--store", "b", "doctor"])
    }

    /// The control for the test above: the same writer, while the import's write transaction is open, fails at
    /// once. So its success above is no accident of timing.
    func testTheSameWriteFailsAtOnceWhileTheImportTransactionIsOpen() throws {
        let p = try E2EProject()
        let b = try pausedSync(p, "import.before-commit")
        let write = try appWrite(p, "b", "INSERT INTO notes(uuid, title) VALUES ('app', 'refused')")
        XCTAssertTrue(b.isRunning, "the import transaction was still open")
        XCTAssertNotEqual(write.status, 0, "\(write)")
        XCTAssertTrue(write.stderr.contains("database is locked"), "\(write)")
        XCTAssertEqual(b.waitForExit(upTo: 60), 0, b.transcript)
        XCTAssertEqual(try notes(p, "b"), "n1|one\nn2|two\nn3|three\n")
    }
}

/// The same with the stores sharing a PostgreSQL container.
final class PostgresImportWriteLockTests: ImportWriteLockTests {
    override func backend() throws -> Backend {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (see .ci/run)")
            }
            throw XCTSkip("no PostgreSQL server (set STORECTL_TEST_PG_URL)")
        }
        let container = "iCloud.com.example.importlock" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return Backend(url: url, account: env["PGUSER"] ?? "postgres", container: container, isPostgres: true)
    }

    // Tests are found by the methods a class declares (on Linux), so the ones that use the backend are named again.
    override func testAnAppWritesWhileTheImportFetches() throws {
        try super.testAnAppWritesWhileTheImportFetches()
    }

    override func testTheSameWriteFailsAtOnceWhileTheImportTransactionIsOpen() throws {
        try super.testTheSameWriteFailsAtOnceWhileTheImportTransactionIsOpen()
    }
}
