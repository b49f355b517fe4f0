import Foundation
@testable import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// A store written by store format 1 is upgraded in place by the next command that writes it, after a copy of the
/// file is saved beside it, and storectl says so; it then syncs every digit of its real keys.
final class FormatUpgradeEndToEndTests: XCTestCase {
    func testAFormat1StoreIsUpgradedByTheNextSyncAndSaysSo() throws {
        let f = try Fleet(backend: .file, schema: "CREATE TABLE IF NOT EXISTS readings(at REAL PRIMARY KEY, v TEXT);",
                          label: "storectl-upgrade")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO readings VALUES (1.5, 'x')")
        try f.syncRounds(1, ["a", "b"])
        // What format 1 left: its version and its triggers (reals in keys with 15 digits).
        try f.putBackStoreFormat("a", 1)
        let sync = try f.run("a", ["sync"])
        let said = sync.stdout + sync.stderr
        XCTAssertTrue(said.contains("from store format 1 to 6"), "the upgrade is not reported\n\(sync)")
        XCTAssertTrue(said.contains(".format1.bak"), "the copy taken before is not named\n\(sync)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: f.path("a") + ".format1.bak"), "no copy was saved")
        try f.sql("a", "INSERT INTO readings VALUES (0.30000000000000004, 'every digit')")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["readings|at=r:1.5|v=t:'x'", "readings|at=r:0.30000000000000004|v=t:'every digit'"],
                         "a store upgraded from format 1")
        for s in f.stores { try f.assertHealthy(s, "after the upgrade from format 1") }
    }
}
