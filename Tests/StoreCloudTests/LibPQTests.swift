@testable import StoreCloudPostgres
import StoreBase
import XCTest

/// Loading libpq on first use.
final class LibPQTests: XCTestCase {
    func testTheInstalledLibraryLoads() throws {
        let pq = try LibPQ.shared()
        XCTAssertEqual(pq.library, LibPQ.defaultLibrary)
        XCTAssertTrue(try LibPQ.shared() === pq, "loaded once per process")
        // A function of the table works: parse a URL without a connection.
        XCTAssertEqual(try PGConnInfo.parse("postgres://alice@db.example.com:5433/notes"),
                       ["user": "alice", "host": "db.example.com", "port": "5433", "dbname": "notes"])
    }

    func testAMissingLibraryIsUnavailable() {
        XCTAssertThrowsError(try LibPQ(library: "libpq-storectl-missing.so.5")) { error in
            guard let error = error as? LibPQUnavailableError else { return XCTFail("\(error)") }
            XCTAssertEqual(error.exitCode, .unavailable)
            XCTAssertEqual(error.library, "libpq-storectl-missing.so.5")
            XCTAssertTrue(error.summary.hasPrefix("cannot load the PostgreSQL client library "
                + "libpq-storectl-missing.so.5, which postgres:// cloud URLs need: libpq-storectl-missing.so.5: "
                + "cannot open shared object file"), error.summary)
            XCTAssertEqual(error.hint, "install libpq 14 or later (Debian/Ubuntu: apt-get install libpq5, or "
                + "libpq-dev; macOS: brew install libpq), or set STORECTL_LIBPQ to the library's path")
        }
    }

    func testALibraryWithoutTheFunctionsIsUnavailable() {
        XCTAssertThrowsError(try LibPQ(library: "libsqlite3.so.0")) { error in
            XCTAssertEqual((error as? LibPQUnavailableError)?.reason,
                           "it has no function PQconnectStartParams (libpq 14 or later is needed)")
        }
    }
}
