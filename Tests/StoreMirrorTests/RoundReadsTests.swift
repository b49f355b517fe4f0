import Foundation
import StoreCloud
import StoreCloudPostgres
import StoreMirror
import StoreSQLite
import XCTest

/// What a sync round asks a PostgreSQL container: the zone's schema version comes with the zone's row and with
/// each page of the feed, and the device's export mark with the zone's row, in the same statements, so a round
/// that imports records asks for them no more (`SchemaGate.check`, `SchemaGate.recheck` and `Reconciler` take
/// what those reads brought). Counted by a wrapper of the real
/// backend (`TransactionGuardCloud`, which also fails the test on a call inside the store's write transaction).
final class RoundReadsTests: XCTestCase {
    func testARoundThatImportsReadsTheSchemaVersionWithTheZoneAndThePage() throws {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" { XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set") }
            return
        }
        let container = "test.roundreads.\(UInt32.random(in: 0...UInt32.max))"
        _ = try PostgresCloudDatabase(url: url, container: container).initializeContainer()
        addTeardownBlock { try? PostgresCloudDatabase(url: url, container: container).deleteContainer() }
        let f = try MirrorFixture()
        let a = try f.store("a"), b = try f.store("b")
        func sync(_ db: Connection) throws -> (SyncReport, [String]) {
            let cloud = TransactionGuardCloud(try PostgresCloudDatabase(url: url, container: container), store: db)
            let report = try Mirror(db: db, cloud: cloud, options: MirrorOptions(zone: "default",
                                                                                 mergePolicy: .propertyLocalWins)).sync()
            return (report, cloud.calls)
        }
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u1', 'first')")
        _ = try sync(a)
        _ = try sync(b)
        try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u2', 'second')")
        _ = try sync(a)
        let (report, calls) = try sync(b)
        XCTAssertEqual(report.imported.applied, 1, "the round imported a's new note")
        XCTAssertEqual(try b.scalar("SELECT count(*) FROM notes")?.int64, 2)
        XCTAssertTrue(calls.contains("fetchChanges"), "\(calls)")
        XCTAssertFalse(calls.contains("schemaVersion"), "the schema version is read with the zone and the page: \(calls)")
        XCTAssertFalse(calls.contains("exportState"), "the device's export mark is read with the zone: \(calls)")
        XCTAssertEqual(calls.filter { $0 == "zoneInfo" }.count, 1, "\(calls)")
    }
}
