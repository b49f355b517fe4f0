import Foundation
import StoreCloudPostgres
import TestSupport
import XCTest

/// Legitimate flows in which the seqs a store saw in a zone must not be taken for a zone behind them.
final class ZoneBehindAttackTests: XCTestCase {
    static let schema = "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);"

    /// a saves many records (its own seq climbs), then keeps one row.
    private func busyFleet(label: String) throws -> Fleet {
        let f = try Fleet(backend: .file, schema: Self.schema, label: label)
        try f.cloudMode("a")
        try f.cloudMode("b")
        let values = (1...30).map { "('u\($0)', 't\($0)')" }.joined(separator: ", ")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES \(values)")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "DELETE FROM notes WHERE uuid <> 'u1'")
        try f.syncRounds(1, ["a", "b"])
        return f
    }

    /// `migrate --cloud` to another container file under the same container id (the id names the app, the file
    /// is only where it lives): the store's own seq in the old file must not count against the new one.
    func testMigrateCloudToAnotherFileWithTheSameContainerID() throws {
        let f = try busyFleet(label: "storectl-zb-move")
        try f.run("a", ["migrate", "--cloud", "file:cloud/moved.container"])
        let r = try f.run("a", ["sync"])
        XCTAssertFalse(r.stderr.contains("older copy"), "\(r)")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('after', 'after the move')")
        try f.run("a", ["sync"])
        try f.run("b", ["migrate", "--cloud", "file:cloud/moved.container"])
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["notes|title=t:'after the move'|uuid=t:'after'", "notes|title=t:'t1'|uuid=t:'u1'"],
                         stores: ["a", "b"], late: false, "after both moved")
    }

    /// file -> PostgreSQL under the same container id (the usual move: the app's container keeps its name).
    func testMigrateCloudToPostgresWithTheSameContainerID() throws {
        guard case .postgres(let url)? = FleetBackend.postgres() else { return }
        let f = try busyFleet(label: "storectl-zb-move-pg")
        defer { try? PostgresCloudDatabase(url: url, container: f.containerID).deleteContainer() }
        let user = ProcessInfo.processInfo.environment["PGUSER"] ?? "postgres"
        try f.run("a", ["migrate", "--cloud", url, "--account", user])
        let r = try f.run("a", ["sync"])
        XCTAssertFalse(r.stderr.contains("older copy"), "\(r)")
    }
}
