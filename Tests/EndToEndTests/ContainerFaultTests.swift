import Foundation
import StoreCloud
import TestSupport
import XCTest

/// Faults of the container file: its file system full, its pages damaged. Each is an I/O error (exit 74) that
/// names the file and the fix; nothing is lost, and nothing more is written into a damaged container.
final class ContainerFaultTests: XCTestCase {
    func testAFullContainerFileSystemIsExit74AndLosesNothing() throws {
        let s = try Fleet.notes(label: "storectl-fault")
        try s.run("a", ["mode", "cloud"])
        try s.sql("a", """
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000)
            INSERT INTO notes(uuid, title, body) SELECT 'bulk-' || i, 'bulk', hex(zeroblob(200)) FROM c
            """)
        let before = try s.noteRows("a")
        // One save batch holds every row, so the container outgrows the limit before the store writes anything:
        // no file may grow past 512 KiB.
        let r = try Binary.run("/bin/sh", ["-c", "ulimit -f 1024; exec \"$0\" \"$@\"", Binary.storectl, "--store", "a",
                                           "sync"], in: s.dir.path, environment: ["STORECTL_BATCH_SIZE": "5000"])
        XCTAssertEqual(r.status, 74, "\(r)")
        XCTAssertTrue(r.stderr.contains("shared.container"), r.stderr)
        XCTAssertTrue(r.stderr.contains("hint: "), r.stderr)
        XCTAssertFalse(r.stderr.contains("SQLite error"), "a raw SQLite message\n\(r)")
        XCTAssertEqual(try s.noteRows("a"), before)
        XCTAssertEqual(try s.integrity().values.filter { $0 != "ok" }, [])
        // With room again, the same sync completes and b gets every row.
        try s.run("a", ["sync"])
        try s.run("b", ["mode", "cloud"])
        XCTAssertEqual(try s.noteRows("b"), try s.noteRows("a"))
    }

    func testADamagedContainerIsRefusedFromTheFirstDamagedPageOn() throws {
        let s = try Fleet.notes(label: "storectl-fault")
        try s.run("a", ["mode", "cloud"])
        try s.sql("a", """
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2000)
            INSERT INTO notes(uuid, title, body) SELECT 'bulk-' || i, 'bulk', hex(zeroblob(100)) FROM c
            """)
        try s.run("a", ["sync"])
        let container = s.dir.file("cloud/shared.container")
        _ = try Binary.run("/usr/bin/sqlite3", [container, "PRAGMA wal_checkpoint(TRUNCATE)"], in: s.dir.path)
        // Garbage over every page after the first few: the records' pages and their indexes.
        var bytes = try Data(contentsOf: URL(fileURLWithPath: container))
        let page = 4096
        for offset in stride(from: 4 * page, to: bytes.count - page, by: page) {
            bytes.replaceSubrange(offset + 100..<offset + 600, with: Data(repeating: 0xA5, count: 500))
        }
        try bytes.write(to: URL(fileURLWithPath: container))
        // b's first sync reads the records: the damage is met, reported, and marked.
        let first = try s.run("b", ["mode", "cloud"], expect: 74)
        XCTAssertTrue(first.stderr.contains("the container \(container) is damaged"), first.stderr)
        XCTAssertTrue(first.stderr.contains("PRAGMA integrity_check"), first.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: FileCloudDatabase.damageMarker(path: container)))
        XCTAssertEqual(try s.run("b", ["mode"]).stdout, "local\n")
        _ = try Binary.run("/usr/bin/sqlite3", [container, "PRAGMA wal_checkpoint(TRUNCATE)"], in: s.dir.path)
        let damaged = try Data(contentsOf: URL(fileURLWithPath: container))
        // From then on nothing opens it for writing, even a store whose sync would not touch the damaged pages.
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('after', 'the damage')")
        for args in [["sync"], ["--json", "sync"], ["mode", "local"]] {
            let r = try s.run("a", args, expect: nil)
            XCTAssertTrue([69, 74].contains(r.status), "\(args)\n\(r)")
            XCTAssertTrue((r.stderr + r.stdout).contains("is damaged"), "\(args)\n\(r)")
        }
        let doctor = try s.run("a", ["doctor"], expect: nil)
        XCTAssertNotEqual(doctor.status, 0, "\(doctor)")
        XCTAssertTrue(doctor.stdout.contains("damaged"), doctor.stdout)
        let status = try s.run("a", ["--json", "status", "--check-cloud"], expect: nil)
        XCTAssertTrue(status.stdout.contains("damaged"), status.stdout)
        _ = try Binary.run("/usr/bin/sqlite3", [container, "PRAGMA wal_checkpoint(TRUNCATE)"], in: s.dir.path)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: container)), damaged, "storectl wrote into it")
    }
}
