import Foundation
import StoreBase
@testable import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// A store of format 1 (reals in keys with 15 digits) is upgraded in place to the current format, after a copy of it.
final class FormatUpgradeTests: XCTestCase {
    /// Turns a freshly installed store back into what storectl's format 1 made.
    func makeFormat1(_ f: Fixture) throws {
        try f.db.transaction {
            try f.tracker.setMeta(MetaKey.formatVersion, "1")
            for table in try f.tracker.trackedTables() {
                for trigger in try f.tracker.triggerSQL(for: table, format: 1).triggers {
                    try f.db.execute("DROP TRIGGER \(quoteIdentifier(trigger.name))")
                    try f.db.execute(trigger.sql)
                }
            }
        }
    }

    func testAFormat1StoreIsUpgradedInPlaceAfterACopy() throws {
        let f = try Fixture("CREATE TABLE readings(at REAL PRIMARY KEY, v TEXT);")
        try makeFormat1(f)
        XCTAssertEqual(try f.tracker.inspect().state, .ok, "a format-1 store checks against format-1 triggers")
        try f.tracker.write { try f.db.run("INSERT INTO readings VALUES (?, 'old')", [0.30000000000000004]) }
        XCTAssertEqual(try f.db.scalar("SELECT pk FROM _storectl_history")?.string, "[0.3]", "format 1 loses digits")

        let backup = f.dir.file("store.sqlite.format1.bak")
        var moreRan = false
        let report = try XCTUnwrap(try f.tracker.upgradeFormat(backupPath: backup) { from in
            XCTAssertEqual(from, 1)
            moreRan = true
        })
        XCTAssertTrue(moreRan)
        XCTAssertEqual(report, FormatUpgradeReport(from: 1, to: StoreFormat.currentVersion, backup: backup, regenerated: ["readings"]))
        XCTAssertEqual(try f.tracker.meta(MetaKey.formatVersion), StoreFormat.version)
        XCTAssertEqual(try f.tracker.inspect().state, .ok)
        try f.tracker.write { try f.db.run("INSERT INTO readings VALUES (?, 'new')", [123456789.123456789]) }
        XCTAssertEqual(try f.db.query("SELECT pk FROM _storectl_history ORDER BY seq").map { $0[0].string ?? "" },
                       ["[0.3]", "[123456789.12345679]"], "history is kept; new rows get every digit")
        // The copy is the store as it was: format 1, its row and its history.
        let copy = try Connection(path: backup, mode: .readOnly)
        XCTAssertEqual(try copy.scalar("SELECT value FROM _storectl_meta WHERE key = 'format_version'")?.string, "1")
        XCTAssertEqual(try copy.scalar("SELECT count(*) FROM readings")?.int64, 1)
        // Once upgraded, nothing more to do.
        XCTAssertNil(try f.tracker.upgradeFormat(backupPath: f.dir.file("again.bak")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: f.dir.file("again.bak")))
    }

    func testAStoreOfAFormatNewerThanThisStorectlIsRefusedUnchanged() throws {
        let f = try Fixture("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);")
        try f.tracker.setMeta(MetaKey.formatVersion, "9")
        XCTAssertThrowsError(try f.tracker.upgradeFormat(backupPath: f.dir.file("x.bak"))) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode.rawValue, 65)
        }
        XCTAssertEqual(try f.tracker.meta(MetaKey.formatVersion), "9")
        XCTAssertFalse(FileManager.default.fileExists(atPath: f.dir.file("x.bak")))
    }
}
