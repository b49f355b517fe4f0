import Foundation
import TestSupport
import XCTest

/// A progress bar appears on a terminal only.
final class ProgressTests: XCTestCase {
    func makeStore() throws -> E2EProject {
        let p = try E2EProject()
        try p.writeSchema("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT);")
        try p.writeConfig([E2EProject.Store("s", cloud: .file("iCloud.com.example.progress", url: "file:c.container",
                                                             secret: "${S:-demo-secret}"))])
        try p.run(["init"])
        try p.sql("s", "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000) "
                      + "INSERT INTO notes(uuid) SELECT 'u' || i FROM c")
        return p
    }

    func testProgressIsDrawnOnATerminal() throws {
        let p = try makeStore()
        // script(1) runs the command on a pseudo-terminal and copies what it writes to its own stdout.
        let r = try Binary.run("/usr/bin/script", ["-qec", "\(Binary.storectl) mode cloud", "/dev/null"], in: p.dir.path,
                               environment: ["STORECTL_BATCH_SIZE": "500"])
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertTrue(r.stdout.contains("\r\u{1B}[2Kexport ["), r.stdout)
        // The rate, on every redraw with a count.
        XCTAssertTrue(r.stdout.range(of: #"/3000  \d+%  [0-9.]+[kM]?/s"#, options: .regularExpression) != nil, r.stdout)
        XCTAssertTrue(r.stdout.contains("/3000"), r.stdout)
        XCTAssertTrue(r.stdout.contains("mode: cloud"), r.stdout)
    }

    func testNoProgressWithoutATerminalOrWithJSON() throws {
        let p = try makeStore()
        let r = try p.run(["mode", "cloud"])
        XCTAssertFalse(r.stderr.contains("\r"), r.stderr)
        XCTAssertFalse(r.stderr.contains("["), r.stderr)
    }
}
