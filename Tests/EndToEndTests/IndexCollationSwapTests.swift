import Foundation
import TestSupport
import XCTest

/// A UNIQUE index that compares with another collation than its column (`CREATE UNIQUE INDEX ... (email COLLATE
/// NOCASE)` on a column without one). The import looks for the row that holds a record's value as the index
/// compares, not as the column does. Before, a swap that also changed the values' case was set aside on every
/// importing store for good (the values collided in the index while `=` on the column found no holder).
final class IndexCollationSwapTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS users(id INTEGER PRIMARY KEY, email TEXT NOT NULL, name TEXT);
        CREATE UNIQUE INDEX IF NOT EXISTS users_email ON users(email COLLATE NOCASE);
        """

    func swap(_ backend: FleetBackend, policy: String, batchSize: String? = nil) throws {
        let f = try Fleet.pair(backend, schema: Self.schema, policy: policy,
                               rows: "INSERT INTO users VALUES (1, 'x@a', 'x'), (2, 'y@a', 'y'), (3, 'z@a', 'z')",
                               label: "storectl-index-collation")
        try f.sql("a", """
            BEGIN; UPDATE users SET email = 'tmp' WHERE id = 1; UPDATE users SET email = 'X@A' WHERE id = 2;
            UPDATE users SET email = 'Y@A' WHERE id = 1; COMMIT;
            """)
        try f.run("a", ["sync"], env: batchSize.map { ["STORECTL_BATCH_SIZE": $0] } ?? [:])
        try f.syncRounds(2, ["b", "a"])
        let what = "[\(backend), \(policy)] a swap under a NOCASE index on a BINARY column, the case changed"
        try f.assertRows(["users|email=t:'X@A'|name=t:'y'", "users|email=t:'Y@A'|name=t:'x'",
                          "users|email=t:'z@a'|name=t:'z'"], what)
        XCTAssertEqual(try f.liveCloudCounts()["users"] ?? 0, 3, "\(what): one live record per row")
        for s in f.stores { try f.assertHealthy(s, what) }
    }

    func testASwapUnderAnIndexCollationSettlesFile() throws {
        for policy in ["property-local-wins", "server-wins", "error"] { try swap(.file, policy: policy) }
    }

    func testASwapUnderAnIndexCollationSettlesOneRecordAPageFile() throws {
        try swap(.file, policy: "property-local-wins", batchSize: "1")
    }

    func testASwapUnderAnIndexCollationSettlesPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try swap(pg, policy: "property-local-wins")
    }

    /// Two stores each insert a user with the same address in another case: under the index they are one
    /// value, so every store ends with one row for it (the two records are merged as duplicates).
    func testTheSameValueInAnotherCaseIsADuplicateFile() throws {
        let f = try Fleet.pair(.file, schema: Self.schema, policy: "property-local-wins",
                               rows: "INSERT INTO users VALUES (1, 'x@a', 'x')", label: "storectl-index-collation-dup")
        try f.sql("a", "INSERT INTO users VALUES (5, 'new@a', 'on a')")
        try f.sql("b", "INSERT INTO users VALUES (7, 'NEW@A', 'on b')")
        try f.syncRounds(3, ["a", "b"])
        try f.assertSameRows("the same address in another case on two stores")
        let rows = try f.rows("a")
        XCTAssertEqual(rows.filter { $0.lowercased().contains("new@a") }.count, 1, "one row holds the address: \(rows)")
        for s in f.stores { try f.assertHealthy(s, "the same address in another case on two stores") }
    }

    /// A NOCASE column under a BINARY unique index: 'A@x' and 'a@x' are two values, not duplicates.
    static let noCaseColumnBinaryIndex = """
        CREATE TABLE IF NOT EXISTS users(id INTEGER PRIMARY KEY, email TEXT COLLATE NOCASE NOT NULL, name TEXT);
        CREATE UNIQUE INDEX IF NOT EXISTS users_email ON users(email COLLATE BINARY);
        """

    func testANoCaseColumnUnderABinaryIndexHoldsTwoValuesFile() throws {
        let f = try Fleet.pair(.file, schema: Self.noCaseColumnBinaryIndex, policy: "property-local-wins",
                               rows: "INSERT INTO users VALUES (1, 'base', 'base')", label: "storectl-binary-index")
        try f.sql("a", "INSERT INTO users VALUES (5, 'A@x', 'on a')")
        try f.sql("b", "INSERT INTO users VALUES (7, 'a@x', 'on b')")
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["users|email=t:'A@x'|name=t:'on a'", "users|email=t:'a@x'|name=t:'on b'",
                          "users|email=t:'base'|name=t:'base'"], "a NOCASE column under a BINARY index: two values")
        for s in f.stores { try f.assertHealthy(s, "a NOCASE column under a BINARY index") }
    }

    /// a deletes a user and inserts another at its rowid whose address differs in case only; b edited the first
    /// meanwhile. Under the BINARY index the new row does not hold the old record's value, so a's delete meets
    /// b's edit by the policy (`server-wins`: the edit stands).
    func testADeleteMeetsAnEditUnderABinaryIndexOnANoCaseColumnFile() throws {
        let f = try Fleet.pair(.file, schema: Self.noCaseColumnBinaryIndex, policy: "server-wins",
                               rows: "INSERT INTO users VALUES (1, 'A@x', 'one'), (2, 'zz', 'two')",
                               label: "storectl-binary-index-held")
        try f.sql("b", "UPDATE users SET name = 'edited by b' WHERE email = 'A@x'")
        try f.run("b", ["sync"])
        try f.sql("a", "BEGIN; DELETE FROM users WHERE id = 1; INSERT INTO users VALUES (1, 'a@x', 'new on a'); COMMIT;")
        try f.syncRounds(3, ["a", "b"])
        try f.assertRows(["users|email=t:'A@x'|name=t:'edited by b'", "users|email=t:'a@x'|name=t:'new on a'",
                          "users|email=t:'zz'|name=t:'two'"], "a delete meets an edit under a BINARY index")
        for s in f.stores { try f.assertHealthy(s, "a delete meets an edit under a BINARY index") }
    }

    /// An RTRIM index: 'k' and 'k  ' are one value, inserted on two stores: one row.
    func testTrailingSpacesUnderAnRTrimIndexAreOneValueFile() throws {
        let f = try Fleet.pair(.file, schema: """
            CREATE TABLE IF NOT EXISTS codes(id INTEGER PRIMARY KEY, code TEXT NOT NULL, note TEXT);
            CREATE UNIQUE INDEX IF NOT EXISTS codes_code ON codes(code COLLATE RTRIM);
            """, policy: "property-local-wins", rows: "INSERT INTO codes VALUES (1, 'base', 'base')",
            label: "storectl-rtrim-index")
        try f.sql("a", "INSERT INTO codes VALUES (5, 'k', 'on a')")
        try f.sql("b", "INSERT INTO codes VALUES (7, 'k  ', 'on b')")
        try f.syncRounds(3, ["a", "b"])
        try f.assertSameRows("one value under RTRIM on two stores")
        let rows = try f.rows("a")
        XCTAssertEqual(rows.count, 2, "one row for 'k': \(rows)")
        for s in f.stores { try f.assertHealthy(s, "one value under RTRIM on two stores") }
    }
}
