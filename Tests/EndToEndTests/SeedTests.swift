import Foundation
import TestSupport
import XCTest

/// `storectl seed`: default data exactly once across every device that shares the account.
final class SeedTests: XCTestCase {
    func makeConfig(_ dir: TempDirectory, stores: [String], unique: Bool = true) throws {
        try dir.write("schema.sql", """
            CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT);
            """)
        try dir.write("seed.sql", """
            INSERT INTO tags(name) VALUES ('inbox'), ('work');
            INSERT INTO notes(uuid, title) VALUES ('welcome', 'Welcome');
            """)
        var yaml = "version: 1\nstores:\n"
        for name in stores {
            yaml += """
                  \(name):
                    path: \(name).sqlite
                    schema: schema.sql
                    cloud:
                      container: iCloud.com.example.seed
                      url: file:cloud.container
                      create_if_missing: true
                      account: demo
                      secret: ${SECRET:-demo-secret}
                \(unique ? "    entities:\n      tags:\n        unique: [name]\n      notes:\n        unique: [uuid]\n" : "")\
                    seed:
                      name: defaults-v1
                      sql: seed.sql

                """
        }
        try dir.write("config.yaml", yaml)
    }

    @discardableResult
    func run(_ dir: TempDirectory, _ args: [String], file: StaticString = #filePath, line: UInt = #line) throws
        -> ProcessResult
    {
        let r = try Binary.storectl(args, in: dir.path)
        XCTAssertEqual(r.status, 0, "storectl \(args.joined(separator: " "))\n\(r)", file: file, line: line)
        return r
    }

    func rows(_ dir: TempDirectory, _ store: String) throws -> String {
        try Binary.run("/usr/bin/sqlite3", [dir.file("\(store).sqlite"),
                                            "SELECT name FROM tags UNION ALL SELECT uuid FROM notes ORDER BY 1"],
                       in: dir.path).stdout
    }

    let expected = "inbox\nwelcome\nwork\n"

    func testTwoStoresSeedingAtTheSameMomentInsertEachRowOnce() throws {
        let dir = try TempDirectory()
        try makeConfig(dir, stores: ["a", "b"])
        try run(dir, ["--store", "a", "mode", "cloud"])
        try run(dir, ["--store", "b", "mode", "cloud"])
        let processes = ["a", "b"].map { name -> Process in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Binary.storectl)
            p.arguments = ["--store", name, "--json", "seed"]
            p.currentDirectoryURL = URL(fileURLWithPath: dir.path)
            p.environment = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"]
            p.standardOutput = FileHandle.nullDevice
            return p
        }
        for p in processes { try p.run() }
        for p in processes {
            p.waitUntilExit()
            XCTAssertEqual(p.terminationStatus, 0)
        }
        for _ in 0..<2 { for s in ["a", "b"] { try run(dir, ["--store", s, "sync"]) } }
        XCTAssertEqual(try rows(dir, "a"), expected)
        XCTAssertEqual(try rows(dir, "b"), expected)
    }

    func testStoresSeedingOfflineMergeTheirRowsAndANewStoreDoesNotSeedAgain() throws {
        let dir = try TempDirectory()
        try makeConfig(dir, stores: ["c", "d", "e"])
        // Both seed while local: the rows get the same record names on both.
        let local = try run(dir, ["--store", "c", "--json", "seed"])
        XCTAssertTrue(local.stdout.contains("\"outcome\" : \"seeded-locally\""), local.stdout)
        try run(dir, ["--store", "d", "seed"])
        XCTAssertEqual(try rows(dir, "c"), expected)
        try run(dir, ["--store", "c", "mode", "cloud"])
        try run(dir, ["--store", "d", "mode", "cloud"])
        for _ in 0..<2 { for s in ["c", "d"] { try run(dir, ["--store", s, "sync"]) } }
        XCTAssertEqual(try rows(dir, "c"), expected)
        XCTAssertEqual(try rows(dir, "d"), expected)

        // A new empty store joins the seeded account: it gets the rows and does not seed again.
        try run(dir, ["--store", "e", "mode", "cloud"])
        let joined = try run(dir, ["--store", "e", "--json", "seed"])
        XCTAssertTrue(joined.stdout.contains("\"outcome\" : \"seeded-elsewhere\""), joined.stdout)
        XCTAssertTrue(joined.stdout.contains("\"inserted\" : 0"), joined.stdout)
        XCTAssertEqual(try rows(dir, "e"), expected)
        for s in ["c", "d"] { try run(dir, ["--store", s, "sync"]) }
        XCTAssertEqual(try rows(dir, "c"), expected)
        // Seeding again is a no-op.
        let again = try run(dir, ["--store", "c", "--json", "seed"])
        XCTAssertTrue(again.stdout.contains("\"outcome\" : \"already-seeded\""), again.stdout)
        XCTAssertEqual(try rows(dir, "c"), expected)
    }

    func testOfflineSeedsMergeByRecordNameEvenWithoutUniqueKeys() throws {
        let dir = try TempDirectory()
        try makeConfig(dir, stores: ["c", "d"], unique: false)
        try run(dir, ["--store", "c", "seed"])
        try run(dir, ["--store", "d", "seed"])
        try run(dir, ["--store", "c", "mode", "cloud"])
        try run(dir, ["--store", "d", "mode", "cloud"])
        for _ in 0..<2 { for s in ["c", "d"] { try run(dir, ["--store", s, "sync"]) } }
        XCTAssertEqual(try rows(dir, "c"), expected)
        XCTAssertEqual(try rows(dir, "d"), expected)
    }

    func testSeedWithoutASeedSectionIsAConfigError() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", "version: 1\nstores:\n  s:\n    path: s.sqlite\n")
        let r = try Binary.storectl(["seed"], in: dir.path)
        XCTAssertEqual(r.status, 78, "\(r)")
        XCTAssertTrue(r.stderr.hasPrefix("error: store 's' has no seed: section in "), r.stderr)
    }
}
