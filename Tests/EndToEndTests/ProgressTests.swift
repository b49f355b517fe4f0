import Foundation
import TestSupport
import XCTest

/// A progress bar appears on a terminal only.
final class ProgressTests: XCTestCase {
    func makeStore(_ dir: TempDirectory) throws {
        try dir.write("schema.sql", "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT);")
        try dir.write("config.yaml", """
            version: 1
            stores:
              s:
                path: s.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.progress
                  url: file:c.container
                  create_if_missing: true
                  account: demo
                  secret: ${S:-demo-secret}
            """)
        XCTAssertEqual(try Binary.storectl(["init"], in: dir.path).status, 0)
        let insert = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000) "
            + "INSERT INTO notes(uuid) SELECT 'u' || i FROM c"
        XCTAssertEqual(try Binary.run("/usr/bin/sqlite3", [dir.file("s.sqlite"), insert], in: dir.path).status, 0)
    }

    func testProgressIsDrawnOnATerminal() throws {
        let dir = try TempDirectory()
        try makeStore(dir)
        // script(1) runs the command on a pseudo-terminal and copies what it writes to its own stdout.
        let r = try Binary.run("/usr/bin/script", ["-qec", "\(Binary.storectl) mode cloud", "/dev/null"], in: dir.path,
                               environment: ["STORECTL_BATCH_SIZE": "500"])
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertTrue(r.stdout.contains("\r\u{1B}[2Kexport ["), r.stdout)
        // The rate, on every redraw with a count.
        XCTAssertTrue(r.stdout.range(of: #"/3000  \d+%  [0-9.]+[kM]?/s"#, options: .regularExpression) != nil, r.stdout)
        XCTAssertTrue(r.stdout.contains("/3000"), r.stdout)
        XCTAssertTrue(r.stdout.contains("mode: cloud"), r.stdout)
    }

    func testNoProgressWithoutATerminalOrWithJSON() throws {
        let dir = try TempDirectory()
        try makeStore(dir)
        let r = try Binary.storectl(["mode", "cloud"], in: dir.path)
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertFalse(r.stderr.contains("\r"), r.stderr)
        XCTAssertFalse(r.stderr.contains("["), r.stderr)
    }
}
