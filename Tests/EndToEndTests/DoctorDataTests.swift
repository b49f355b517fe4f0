import Foundation
import TestSupport
import XCTest

/// `doctor` compares the store's rows with the zone's records, as `verify` does: a store that differs from the
/// cloud in a way no pending change explains is never called healthy, while a change not exported or not imported
/// yet is no finding.
final class DoctorDataTests: XCTestCase {
    static let schema = "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT);"

    /// The doctor document of one store: exit code, healthy, the checks run and the findings of check `data`.
    private func doctor(_ f: Fleet, _ store: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> (status: Int32, healthy: Bool, checks: [String], data: [[String: Any]], text: String)
    {
        let (r, doc) = try f.json(store, ["doctor"], expect: nil, file: file, line: line)
        let entry = (JSONDoc.get(doc, "stores") as? [[String: Any]])?.first ?? [:]
        let findings = (entry["findings"] as? [[String: Any]]) ?? []
        return (r.status, (entry["healthy"] as? Bool) ?? false, (entry["checks"] as? [String]) ?? [],
                findings.filter { $0["check"] as? String == "data" }, "\(r)")
    }

    /// `verify`'s count of differences no pending change explains.
    private func unexplained(_ f: Fleet, _ store: String) throws -> Int {
        let (_, doc) = try f.json(store, ["verify"], expect: nil)
        return JSONDoc.int(doc, "unexplained_count") ?? -1
    }

    /// Runs the setter, then checks that doctor and verify agree on every store of the fleet.
    private func assertAgree(_ f: Fleet, _ what: String, healthy: Bool, file: StaticString = #filePath,
                             line: UInt = #line) throws
    {
        for store in f.stores {
            let d = try doctor(f, store, file: file, line: line)
            let differs = try unexplained(f, store)
            XCTAssertTrue(d.checks.contains("data"), "[\(f.backend)] \(what): \(store) ran no data check\n\(d.text)",
                          file: file, line: line)
            if healthy {
                XCTAssertEqual(differs, 0, "[\(f.backend)] \(what): verify of \(store)", file: file, line: line)
                XCTAssertTrue(d.healthy && d.status == 0, "[\(f.backend)] \(what): doctor of \(store)\n\(d.text)",
                              file: file, line: line)
            } else {
                XCTAssertGreaterThan(differs, 0, "[\(f.backend)] \(what): verify of \(store)", file: file, line: line)
                XCTAssertFalse(d.healthy, "[\(f.backend)] \(what): doctor calls \(store) healthy\n\(d.text)",
                               file: file, line: line)
                XCTAssertEqual(d.status, 65, "[\(f.backend)] \(what): doctor of \(store)\n\(d.text)",
                               file: file, line: line)
                let problem = d.data.first?["problem"] as? String ?? ""
                XCTAssertTrue(problem.contains("notes") && problem.contains("no pending change explains"),
                              "[\(f.backend)] \(what): doctor of \(store) names no row\n\(d.text)", file: file, line: line)
                let fix = d.data.first?["fix"] as? String ?? ""
                XCTAssertTrue(fix.hasPrefix("storectl --store \(store) verify"),
                              "[\(f.backend)] \(what): doctor of \(store) fix\n\(d.text)", file: file, line: line)
            }
        }
    }

    private func differences(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-doctor-data")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three')")
        try f.syncRounds(1, ["a", "b"])
        try assertAgree(f, "synced", healthy: true)

        // Pending changes explain every difference: not healthy would be a false alarm.
        try f.sql("a", "UPDATE notes SET title = 'one, edited on a' WHERE uuid = 'n1'; DELETE FROM notes WHERE uuid = 'n3'")
        try assertAgree(f, "a change not exported yet", healthy: true)
        try f.run("a", ["sync"])
        try assertAgree(f, "a change not imported yet", healthy: true)
        try f.run("b", ["sync"])
        try assertAgree(f, "synced again", healthy: true)

        // A record changed in the cloud without a new seq (a writer behind storectl's back): no store will ever
        // import it, and both differ from the cloud.
        let tamper = "UPDATE %RECORDS% SET fields = '{\"uuid\":\"n2\",\"title\":\"changed behind the back\"}' "
            + "WHERE record_type = 'notes' AND fields LIKE '%\"n2\"%' AND \(backend.isFile ? "deleted = 0" : "NOT deleted")"
        try cloudSQL(f, tamper)
        try assertAgree(f, "a record changed in the cloud without a seq", healthy: false)
        for store in f.stores {
            try f.run(store, ["sync"])
            XCTAssertFalse(try doctor(f, store).healthy, "[\(backend)] a sync does not hide the difference")
        }

        // The fix the finding names: the row changed here to the value it should hold, then sync.
        try f.sql("a", "UPDATE notes SET title = 'two, set again' WHERE uuid = 'n2'")
        try f.syncRounds(1, ["a", "b"])
        try assertAgree(f, "after the row was written again", healthy: true)

        // A record gone from the cloud altogether: the row is only here, on both stores.
        try cloudSQL(f, "DELETE FROM %RECORDS% WHERE record_type = 'notes' AND fields LIKE '%\"n1\"%'")
        try assertAgree(f, "a record deleted from the cloud", healthy: false)
    }

    /// Syncs that commit while `doctor` (or `verify`) compares, after the store's snapshot was taken and before the
    /// zone is fetched: an import of another device's changes on the store compared, and the store's own export
    /// (a `watch` beside it). The fetched records are then newer than the snapshot, which is no difference.
    func testASyncWhileDoctorComparesIsNoFinding() throws {
        let f = try Fleet(backend: .file, schema: Self.schema, label: "storectl-doctor-race")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try f.syncRounds(1, ["a", "b"])
        var round = 0
        for (checked, command) in [("b", "doctor"), ("b", "verify"), ("a", "doctor"), ("a", "verify")] {
            round += 1
            let check = try BackgroundProcess.storectl(["--store", checked, "--json", command], in: f.dir.path,
                                                       environment: ["STORECTL_FAILPOINT": "verify.before-fetch:pause=3"])
            XCTAssertTrue(check.wait(upTo: 20) { check.stderr.contains("failpoint verify.before-fetch paused") },
                          check.stderr)
            // After the snapshot: n2 goes (a reused rowid for the new row: a rename on the way), n1 changes.
            try f.sql("a", "UPDATE notes SET title = 'edit \(round)' WHERE uuid = 'n1'; DELETE FROM notes WHERE uuid = 'n2'; "
                      + "INSERT INTO notes(uuid, title) VALUES ('n2', 'again \(round)')")
            try f.run("a", ["sync"])
            try f.run("b", ["sync"])
            XCTAssertNil(check.waitForExit(upTo: 0), "the syncs ran while the comparison was paused")
            XCTAssertEqual(try f.sql("b", "SELECT title FROM notes ORDER BY uuid"), "edit \(round)\nagain \(round)\n")
            let status = check.waitForExit(upTo: 30)
            let doc = JSONDoc.parse(check.stdout)
            let entry = (JSONDoc.get(doc, "stores") as? [Any])?.first ?? doc
            let what = "\(command) of \(checked) while syncs commit"
            if command == "doctor" {
                XCTAssertEqual(status, 0, "\(what): no finding\n\(check.stdout)")
                XCTAssertEqual(JSONDoc.get(entry, "healthy") as? Bool, true, "\(what)\n\(check.stdout)")
            } else {
                XCTAssertEqual(JSONDoc.int(entry, "unexplained_count"), 0, "\(what)\n\(check.stdout)")
                XCTAssertGreaterThan(JSONDoc.int(entry, "difference_count") ?? 0, 0,
                                     "\(what): the rows changed between the snapshot and the fetch\n\(check.stdout)")
            }
        }
    }

    /// Runs SQL on the container, `%RECORDS%` naming its records table.
    private func cloudSQL(_ f: Fleet, _ statement: String) throws {
        if f.backend.isFile {
            try f.containerSQL(statement.replacingOccurrences(of: "%RECORDS%", with: "records"))
        } else {
            try f.psql(statement.replacingOccurrences(of: "%RECORDS%", with: "\(f.pgSchema).records"))
        }
    }

    func testDoctorComparesTheStoreWithTheZoneOnAContainerFile() throws { try differences(.file) }

    func testDoctorComparesTheStoreWithTheZoneOnPostgreSQL() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try differences(pg)
    }
}
