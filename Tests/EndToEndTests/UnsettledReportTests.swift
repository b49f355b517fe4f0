import Foundation
import TestSupport
import XCTest

/// States that are not converged although nothing is pending must be reported, never called healthy.
final class UnsettledReportTests: XCTestCase {
    /// Two rows that point at each other through NOT NULL references (the app inserts them in one transaction,
    /// its foreign key deferred): another store cannot insert either first. They wait, and `status` and `doctor`
    /// name them; every other record still arrives.
    func notNullCycle(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS pairs(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                partner INTEGER NOT NULL REFERENCES pairs(id) DEFERRABLE INITIALLY DEFERRED);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);
            """, label: "storectl-unsettled")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            BEGIN;
            INSERT INTO pairs(id, name, partner) VALUES (1, 'left', 2), (2, 'right', 1);
            COMMIT;
            INSERT INTO notes(title) VALUES ('beside them');
            """)
        try f.run("a", ["sync"])
        let sync = try f.run("b", ["sync"], expect: nil)
        XCTAssertTrue([0, 65].contains(sync.status), "[\(backend)] \(sync)")
        let rows = try f.rows("b")
        XCTAssertTrue(rows.contains("notes|title=t:'beside them'"), "[\(backend)] the cycle held back other records\n"
                      + rows.joined(separator: "\n"))
        if rows.filter({ $0.hasPrefix("pairs|") }).count == 2 {
            // Applied whole: the stores agree and all is settled.
            try f.assertSameRows(late: false, "a NOT NULL cycle applied whole")
            try f.assertHealthy("b", "a NOT NULL cycle applied whole")
        } else {
            XCTAssertEqual(rows.filter { $0.hasPrefix("pairs|") }, [], "[\(backend)] half of a cycle was applied")
            try f.assertReported("b", mentions: ["pairs"], "a cycle through NOT NULL references")
        }
    }

    func testACycleThroughNotNullReferencesWaitsAndIsReportedFile() throws { try notNullCycle(.file) }
    func testACycleThroughNotNullReferencesWaitsAndIsReportedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try notNullCycle(pg)
    }

    /// Records of a table this store does not track stay in the cloud, and `status` counts them by type.
    func testRecordsOfAnUntrackedTypeAreCounted() throws {
        let f = try Fleet(backend: .file, schema: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);
            CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, label TEXT);
            """, label: "storectl-unsettled")
        try f.cloudMode("a")
        try f.sql("a", "INSERT INTO notes(title) VALUES ('n'); INSERT INTO tags(label) VALUES ('t1'), ('t2')")
        try f.run("a", ["sync"])
        // b tracks notes only.
        let config = try f.dir.read("config.yaml")
        let marker = "  b:\n    path: data/b.sqlite   # the store file\n"
        XCTAssertTrue(config.contains(marker), config)
        _ = try f.dir.write("config.yaml", config.replacingOccurrences(
            of: marker, with: marker + "    entities:\n      notes: {}\n"))
        try f.cloudMode("b")
        try f.run("b", ["sync"])
        let (_, doc) = try f.status("b")
        XCTAssertEqual(JSONDoc.int(doc, "unsettled", "untracked_types", "tags"), 2,
                       "status does not count the records of the untracked table\n\(String(describing: doc))")
        XCTAssertEqual(try f.rows("b"), ["notes|title=t:'n'"])
    }
}
