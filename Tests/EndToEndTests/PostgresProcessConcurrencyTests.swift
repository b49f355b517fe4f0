import Foundation
import TestSupport
import XCTest

/// Four `storectl sync` processes save into one PostgreSQL container at the same time while a fifth store
/// follows the change feed: the reader must see every saved record exactly once.
final class PostgresProcessConcurrencyTests: XCTestCase {
    func testFourWriterProcessesAndAReaderLoseAndRepeatNothing() throws {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                return XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (see .ci/run)")
            }
            throw XCTSkip("no PostgreSQL server (set STORECTL_TEST_PG_URL)")
        }
        let project = try E2EProject()
        let container = "iCloud.com.example.procs" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        try project.writeSchema("CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, "
                                + "writer TEXT);")
        let names = ["w1", "w2", "w3", "w4", "reader"]
        let cloud = E2EProject.Cloud(container: container, url: url, account: env["PGUSER"] ?? "postgres",
                                     secret: "${PGSECRET:-unused}", createIfMissing: false)
        try project.writeConfig(names.map { E2EProject.Store($0, cloud: cloud) })
        try project.run(["--store", "w1", "cloud", "init"])
        for name in names {
            try project.run(["--store", name, "mode", "cloud"])
        }
        let perWriter = 300
        for name in names.prefix(4) {
            let insert = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < \(perWriter)) "
                + "INSERT INTO items(uuid, writer) SELECT '\(name)-' || i, '\(name)' FROM c"
            try project.sql(name, insert)
        }
        // Small batches, so that the four processes' saves interleave.
        let writers = names.prefix(4).map { name -> Process in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Binary.storectl)
            p.arguments = ["--store", name, "--quiet", "sync"]
            p.currentDirectoryURL = URL(fileURLWithPath: project.dir.path)
            p.environment = ["PATH": env["PATH"] ?? "/usr/bin:/bin", "STORECTL_BATCH_SIZE": "7"]
            p.standardOutput = FileHandle.nullDevice
            return p
        }
        for p in writers { try p.run() }
        var applied = 0
        var rounds = 0
        func readerSync() throws {
            let r = try project.run(["--store", "reader", "--json", "sync"])
            let json = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any]
            applied += ((json?["imported"] as? [String: Any])?["applied"] as? Int) ?? 0
            rounds += 1
        }
        while writers.contains(where: \.isRunning) { try readerSync() }
        for p in writers {
            p.waitUntilExit()
            XCTAssertEqual(p.terminationStatus, 0)
        }
        try readerSync()
        XCTAssertGreaterThan(rounds, 1)
        XCTAssertEqual(applied, 4 * perWriter, "every record applied exactly once over \(rounds) rounds")
        XCTAssertEqual(try project.sql("reader", "SELECT count(*), count(DISTINCT uuid) FROM items"),
                       "\(4 * perWriter)|\(4 * perWriter)\n")
    }
}
