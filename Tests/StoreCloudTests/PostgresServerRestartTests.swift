import Foundation
import StoreBase
import StoreCloud
@testable import StoreCloudPostgres
import XCTest

/// A server that restarts or goes away mid-use: the call that meets it fails with `.temporary` (exit 75), having
/// saved nothing, and the next call reconnects and works. These run on a scratch cluster of their own, so that
/// stopping it disturbs no other test.
final class PostgresServerRestartTests: XCTestCase {
    func testARestartMidUseIsTemporaryAndARetryLosesNothing() throws {
        guard let cluster = try ScratchCluster.start(auth: "trust") else { return }
        let db = try PostgresCloudDatabase(url: cluster.url, container: "iCloud.test.restart")
        try db.initializeContainer()
        try db.ensureZone("z")
        let first = (0..<10).map { RecordSave(recordName: "a\($0)", recordType: "T", fields: fields($0), expectedTag: nil) }
        XCTAssertEqual(try db.save(zone: "z", first, device: "d").count, 10)
        let token = try db.fetchChanges(zone: "z", since: nil, limit: 100).token

        try cluster.restart()

        // The connection the backend held was cut by the restart.
        let second = (0..<10).map { RecordSave(recordName: "b\($0)", recordType: "T", fields: fields($0), expectedTag: nil) }
        XCTAssertThrowsError(try db.save(zone: "z", second, device: "d")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .temporary, "\(error)")
            XCTAssertEqual((error as? CloudError)?.exitCode, .tempFail)
            XCTAssertEqual((error as? CloudError)?.hint, "retry later; nothing was lost")
        }
        // The retry reconnects; the failed attempt saved nothing, so nothing is duplicated.
        let retried = try db.save(zone: "z", second, device: "d")
        XCTAssertEqual(retried.map { o -> Int64 in if case .saved(_, let s) = o { return s } else { return -1 } },
                       Array(Int64(11)...20))
        let after = try db.fetchChanges(zone: "z", since: token, limit: 100)
        XCTAssertEqual(after.records.map(\.recordName), second.map(\.recordName))
        XCTAssertEqual(try db.zoneInfo("z")?.liveRecords, 20)

        // A server that is down: every call is temporary, the account status cannot be determined.
        try cluster.stop()
        XCTAssertThrowsError(try db.fetchChanges(zone: "z", since: after.token, limit: 10)) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .temporary, "\(error)")
        }
        XCTAssertThrowsError(try db.zoneInfo("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .temporary, "\(error)")
            XCTAssertEqual((error as? CloudError)?.hint, "check that the server is running and reachable, then retry")
        }
        XCTAssertEqual(db.accountStatus().status, .couldNotDetermine)

        try cluster.start()
        let resumed = try db.fetchChanges(zone: "z", since: after.token, limit: 10)
        XCTAssertEqual(resumed.records, [])
        XCTAssertEqual(resumed.token, after.token)
        XCTAssertEqual(db.accountStatus().status, .available)
    }

    func testAConnectionKilledByTheServerIsTemporary() throws {
        guard let cluster = try ScratchCluster.start(auth: "trust") else { return }
        let db = try PostgresCloudDatabase(url: cluster.url, container: "iCloud.test.kill")
        try db.initializeContainer()
        try db.ensureZone("z")
        try cluster.superuser("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE application_name = 'storectl' AND pid <> pg_backend_pid()
            """)
        XCTAssertThrowsError(try db.zoneInfo("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .temporary, "\(error)")
        }
        XCTAssertEqual(try db.zoneInfo("z")?.name, "z")
    }
}
