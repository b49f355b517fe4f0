import Foundation
import TestSupport
import XCTest

/// A container put back to an older copy of itself (a container file restored from a backup, a PostgreSQL server
/// failed over to a replica that lagged): the records saved after that copy are missing from it, while every store
/// that saved or imported them believes them in the cloud. Each store must say so instead of syncing on (which
/// left them missing for every other device and for every new one), and `sync --reupload` brings them back.
final class ContainerRollbackTests: XCTestCase {
    static let schema = "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);"

    private func rollback(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-rollback")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'before the copy')")
        try f.syncRounds(1, ["a", "b"])
        let restore = try snapshot(f)
        try f.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n2', 'after the copy')")
        try f.run("b", ["sync"])
        try f.run("a", ["sync"])
        XCTAssertEqual(try f.sql("a", "SELECT count(*) FROM notes").trimmingCharacters(in: .whitespacesAndNewlines), "2")
        try restore()

        // Both stores saw seqs the container no longer has: each says so, exit 65, and changes nothing.
        for store in ["a", "b"] {
            let r = try f.run(store, ["sync"], expect: 65)
            XCTAssertTrue(r.stderr.contains("restored from an older copy"), "[\(backend)] \(store): \(r)")
            XCTAssertTrue(r.stderr.contains("'storectl --store \(store) sync --reupload' here"), "[\(backend)] \(store): \(r)")
            let doctor = try f.run(store, ["doctor"], expect: nil)
            XCTAssertNotEqual(doctor.status, 0, "[\(backend)] doctor of \(store) is not healthy\n\(doctor)")
        }
        XCTAssertEqual(try f.sql("b", "SELECT title FROM notes ORDER BY uuid")
            .trimmingCharacters(in: .whitespacesAndNewlines), "before the copy\nafter the copy", "nothing changed here")

        // The recovery the hint names: every row is back in the container, and every store agrees.
        try f.run("b", ["sync", "--reupload"])
        try f.run("a", ["sync", "--reupload"])
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["notes|title=t:'after the copy'|uuid=t:'n2'", "notes|title=t:'before the copy'|uuid=t:'n1'"],
                         "[\(backend)] after the container was put back and re-uploaded")
        for s in f.stores { try f.assertHealthy(s, "after --reupload") }
    }

    /// Takes a copy of the container now; the closure puts it back.
    private func snapshot(_ f: Fleet) throws -> () throws -> Void {
        switch f.backend {
        case .file:
            let container = f.dir.file("cloud/shared.container")
            let copy = f.dir.file("cloud/backup.container")
            XCTAssertEqual(try Binary.run("/usr/bin/sqlite3", [container, ".backup '\(copy)'"], in: f.dir.path).status, 0)
            return {
                let r = try Binary.run("/usr/bin/sqlite3", [container, ".restore '\(copy)'"], in: f.dir.path)
                XCTAssertEqual(r.status, 0, "\(r)")
            }
        case .postgres:
            let s = f.pgSchema
            let seq = try f.psql("SELECT last_seq FROM \(s).zones WHERE name = 'default'")
                .trimmingCharacters(in: .whitespacesAndNewlines)
            return {
                // What a replica that lagged holds: the zone and its records as they were at that seq.
                try f.psql("""
                    BEGIN; DELETE FROM \(s).records WHERE seq > \(seq); DELETE FROM \(s).export_marks WHERE last_seq > \(seq);
                    UPDATE \(s).zones SET last_seq = \(seq) WHERE name = 'default'; COMMIT;
                    """)
            }
        }
    }

    func testARestoredContainerFileIsSaidAndReuploadBringsItBack() throws { try rollback(.file) }

    func testAPostgresContainerThatWentBackIsSaid() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try rollback(pg)
    }
}
