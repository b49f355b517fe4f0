import Foundation
import TestSupport
import XCTest

/// A chain of rows, each the parent of the next, made on one store under a row another store deletes: by the
/// orphan rule (a delete wins) the whole chain goes on every store, however deep it is.
final class DeepOrphanChainTests: XCTestCase {
    func deepChain(_ backend: FleetBackend, onDelete: String, depth: Int) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER REFERENCES folders(id)\(onDelete.isEmpty ? "" : " ON DELETE \(onDelete)"));
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT NOT NULL);
            """, label: "storectl-deep-orphans")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO folders VALUES (1, 'root', NULL), (2, 'kept', NULL); INSERT INTO notes VALUES (1, 'n')")
        try f.syncRounds(1, ["a", "b"])
        let chain = (0..<depth).map { "(\(100 + $0), 'level-\($0)', \($0 == 0 ? 1 : 99 + $0))" }.joined(separator: ", ")
        try f.sql("b", "INSERT INTO folders VALUES \(chain)")
        try f.sql("a", "DELETE FROM folders WHERE id = 1")
        try f.syncRounds(3, ["a", "b"])
        let expected = setNull(onDelete)
            ? ["folders|name=t:'kept'|parent=null", "folders|name=t:'level-0'|parent=null"]
                + (1..<depth).map { "folders|name=t:'level-\($0)'|parent=->folders{name=t:'level-\($0 - 1)'}" }
            : ["folders|name=t:'kept'|parent=null"]
        try f.assertRows((expected + ["notes|title=t:'n'"]).sorted(),
                         "a chain of \(depth) rows under a row deleted elsewhere (ON DELETE \(onDelete))")
        for s in f.stores { try f.assertHealthy(s, "a deep chain of orphans (\(onDelete))") }
    }

    private func setNull(_ action: String) -> Bool { action == "SET NULL" }

    /// The chain reaches the other store from the cloud before the store that made it has seen the deletion (its
    /// sync is killed after its export commits): the chain waits for a parent that is gone, and goes, whole, in one
    /// import. Before, the rows under the head were inserted with a NULL parent as if they were a cycle (rows no
    /// device wrote), and every later sync failed on a FOREIGN KEY error.
    func chainArrivingUnderADeletedRow(_ backend: FleetBackend, keys: String) throws {
        let f = try Fleet(backend: backend, schema: keys == "integer" ? """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER REFERENCES folders(id));
            """ : """
            CREATE TABLE IF NOT EXISTS folders(id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL,
                parent TEXT REFERENCES folders(id));
            """, label: "storectl-orphan-chain-early")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO folders VALUES (1, 'root', NULL), (2, 'kept', NULL)")
        try f.syncRounds(1, ["a", "b"])
        let chain = (0..<6).map { "(\(100 + $0), 'level-\($0)', \($0 == 0 ? 1 : 99 + $0))" }.joined(separator: ", ")
        try f.sql("b", "INSERT INTO folders VALUES \(chain)")
        try f.sql("a", "DELETE FROM folders WHERE id = 1")
        try f.run("a", ["sync"])
        try f.run("b", ["sync"], env: ["STORECTL_FAILPOINT": "export.after-commit"], expect: 137)
        try f.run("a", ["sync"])
        let kept = keys == "integer" ? "folders|name=t:'kept'|parent=null" : "folders|id=t:'2'|name=t:'kept'|parent=null"
        try f.assertRows([kept], stores: ["a"], late: false,
                         "[\(keys) keys] a chain that arrived under a row deleted here, after one sync")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows([kept],
                         "[\(keys) keys] a chain that arrived under a row deleted elsewhere")
        for s in f.stores { try f.assertHealthy(s, "a chain that arrived under a deleted row (\(keys) keys)") }
    }

    func testAChainArrivingUnderADeletedRowGoesWholeFile() throws {
        for keys in ["integer", "text"] { try chainArrivingUnderADeletedRow(.file, keys: keys) }
    }

    func testAChainArrivingUnderADeletedRowGoesWholePostgreSQL() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try chainArrivingUnderADeletedRow(pg, keys: "integer")
    }

    func testADeepChainOfOrphansGoesWithItsRootFile() throws {
        for action in ["", "CASCADE", "SET NULL"] { try deepChain(.file, onDelete: action, depth: 150) }
    }

    func testADeepChainOfOrphansGoesWithItsRootPostgreSQL() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try deepChain(pg, onDelete: "", depth: 150)
    }
}
