import Foundation
import TestSupport
import XCTest

/// `storectl seed`: default data exactly once across every device that shares the account.
final class SeedTests: XCTestCase {
    func makeProject(stores: [String], unique: Bool = true) throws -> E2EProject {
        let p = try E2EProject()
        try p.writeSchema("""
            CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT);
            """)
        try p.dir.write("seed.sql", """
            INSERT INTO tags(name) VALUES ('inbox'), ('work');
            INSERT INTO notes(uuid, title) VALUES ('welcome', 'Welcome');
            """)
        let cloud = E2EProject.Cloud.file("iCloud.com.example.seed", url: "file:cloud.container",
                                          secret: "${SECRET:-demo-secret}")
        let entities = unique ? ["entities:", "  tags:", "    unique: [name]", "  notes:", "    unique: [uuid]"] : []
        try p.writeConfig(stores.map {
            E2EProject.Store($0, cloud: cloud, after: entities + ["seed:", "  name: defaults-v1", "  sql: seed.sql"])
        })
        return p
    }

    func rows(_ p: E2EProject, _ store: String) throws -> String {
        try p.sql(store, "SELECT name FROM tags UNION ALL SELECT uuid FROM notes ORDER BY 1")
    }

    let expected = "inbox\nwelcome\nwork\n"

    func testTwoStoresSeedingAtTheSameMomentInsertEachRowOnce() throws {
        let p = try makeProject(stores: ["a", "b"])
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        let processes = ["a", "b"].map { name -> Process in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Binary.storectl)
            process.arguments = ["--store", name, "--json", "seed"]
            process.currentDirectoryURL = URL(fileURLWithPath: p.dir.path)
            process.environment = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"]
            process.standardOutput = FileHandle.nullDevice
            return process
        }
        for process in processes { try process.run() }
        for process in processes {
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0)
        }
        for _ in 0..<2 { for s in ["a", "b"] { try p.run(["--store", s, "sync"]) } }
        XCTAssertEqual(try rows(p, "a"), expected)
        XCTAssertEqual(try rows(p, "b"), expected)
    }

    func testStoresSeedingOfflineMergeTheirRowsAndANewStoreDoesNotSeedAgain() throws {
        let p = try makeProject(stores: ["c", "d", "e"])
        // Both seed while local: the rows get the same record names on both.
        let local = try p.run(["--store", "c", "--json", "seed"])
        XCTAssertTrue(local.stdout.contains("\"outcome\" : \"seeded-locally\""), local.stdout)
        try p.run(["--store", "d", "seed"])
        XCTAssertEqual(try rows(p, "c"), expected)
        try p.run(["--store", "c", "mode", "cloud"])
        try p.run(["--store", "d", "mode", "cloud"])
        for _ in 0..<2 { for s in ["c", "d"] { try p.run(["--store", s, "sync"]) } }
        XCTAssertEqual(try rows(p, "c"), expected)
        XCTAssertEqual(try rows(p, "d"), expected)

        // A new empty store joins the seeded account: it gets the rows and does not seed again.
        try p.run(["--store", "e", "mode", "cloud"])
        let joined = try p.run(["--store", "e", "--json", "seed"])
        XCTAssertTrue(joined.stdout.contains("\"outcome\" : \"seeded-elsewhere\""), joined.stdout)
        XCTAssertTrue(joined.stdout.contains("\"inserted\" : 0"), joined.stdout)
        XCTAssertEqual(try rows(p, "e"), expected)
        for s in ["c", "d"] { try p.run(["--store", s, "sync"]) }
        XCTAssertEqual(try rows(p, "c"), expected)
        // Seeding again is a no-op.
        let again = try p.run(["--store", "c", "--json", "seed"])
        XCTAssertTrue(again.stdout.contains("\"outcome\" : \"already-seeded\""), again.stdout)
        XCTAssertEqual(try rows(p, "c"), expected)
    }

    func testOfflineSeedsMergeByRecordNameEvenWithoutUniqueKeys() throws {
        let p = try makeProject(stores: ["c", "d"], unique: false)
        try p.run(["--store", "c", "seed"])
        try p.run(["--store", "d", "seed"])
        try p.run(["--store", "c", "mode", "cloud"])
        try p.run(["--store", "d", "mode", "cloud"])
        for _ in 0..<2 { for s in ["c", "d"] { try p.run(["--store", s, "sync"]) } }
        XCTAssertEqual(try rows(p, "c"), expected)
        XCTAssertEqual(try rows(p, "d"), expected)
    }

    func testSeedWithoutASeedSectionIsAConfigError() throws {
        let p = try E2EProject()
        try p.writeConfig([E2EProject.Store("s", schema: nil)])
        let r = try p.run(["seed"], expect: 78)
        XCTAssertTrue(r.stderr.hasPrefix("error: store 's' has no seed: section in "), r.stderr)
    }
}
