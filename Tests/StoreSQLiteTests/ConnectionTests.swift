import StoreSQLite
import TestSupport
import XCTest

final class ConnectionTests: XCTestCase {
    func testOpenEnablesWALAndForeignKeys() throws {
        let dir = try TempDirectory()
        let db = try Connection(path: dir.file("a.sqlite"))
        XCTAssertEqual(try db.scalar("PRAGMA journal_mode")?.string, "wal")
        XCTAssertEqual(try db.scalar("PRAGMA foreign_keys")?.int64, 1)
    }

    func testValuesRoundTripThroughEveryStorageClass() throws {
        let dir = try TempDirectory()
        let db = try Connection(path: dir.file("a.sqlite"))
        try db.execute("CREATE TABLE t(a, b, c, d, e)")
        let values: [Value] = [.null, .integer(-42), .real(1.5), .text("héllo 'q'"), .blob([0, 1, 255])]
        try db.run("INSERT INTO t VALUES (?, ?, ?, ?, ?)", values)
        let row = try XCTUnwrap(try db.query("SELECT * FROM t").first)
        XCTAssertEqual(row.values, values)
        XCTAssertEqual(row["d"], .text("héllo 'q'"))
    }

    func testStatementReuseAndNamedParameters() throws {
        let dir = try TempDirectory()
        let db = try Connection(path: dir.file("a.sqlite"))
        try db.execute("CREATE TABLE t(x INTEGER)")
        let insert = try db.prepare("INSERT INTO t VALUES (:x)")
        for i in 0..<10 {
            try insert.bind(.integer(Int64(i)), named: ":x")
            try insert.step()
        }
        XCTAssertEqual(try db.scalar("SELECT sum(x) FROM t")?.int64, 45)
    }

    func testErrorsCarryExtendedCodeMessageAndSQL() throws {
        let dir = try TempDirectory()
        let db = try Connection(path: dir.file("a.sqlite"))
        try db.execute("CREATE TABLE t(x INTEGER PRIMARY KEY)")
        try db.run("INSERT INTO t VALUES (1)")
        XCTAssertThrowsError(try db.run("INSERT INTO t VALUES (1)")) { error in
            guard let e = error as? SQLiteError else { return XCTFail("\(error)") }
            XCTAssertEqual(e.extendedCode, 1555)  // SQLITE_CONSTRAINT_PRIMARYKEY
            XCTAssertEqual(e.message, "UNIQUE constraint failed: t.x")
            XCTAssertEqual(e.sql, "INSERT INTO t VALUES (1)")
            XCTAssertEqual(e.exitCode.rawValue, 65)
        }
        XCTAssertThrowsError(try db.execute("SELEC 1")) { error in
            XCTAssertEqual((error as? SQLiteError)?.sql, "SELEC 1")
        }
    }

    func testTransactionRollsBackOnThrowAndNestsWithSavepoints() throws {
        struct Boom: Error {}
        let dir = try TempDirectory()
        let db = try Connection(path: dir.file("a.sqlite"))
        try db.execute("CREATE TABLE t(x)")
        XCTAssertThrowsError(try db.transaction {
            try db.run("INSERT INTO t VALUES (1)")
            throw Boom()
        })
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM t")?.int64, 0)
        try db.transaction {
            try db.run("INSERT INTO t VALUES (1)")
            try? db.transaction {
                try db.run("INSERT INTO t VALUES (2)")
                throw Boom()
            }
            try db.run("INSERT INTO t VALUES (3)")
        }
        XCTAssertEqual(try db.query("SELECT x FROM t ORDER BY x").map { $0[0] }, [.integer(1), .integer(3)])
        XCTAssertFalse(db.isInTransaction)
    }

    func testOpeningAFileThatIsNotADatabaseFails() throws {
        let dir = try TempDirectory()
        let path = try dir.write("junk.sqlite", String(repeating: "this is not sqlite\n", count: 100))
        XCTAssertThrowsError(try Connection(path: path)) { error in
            XCTAssertEqual((error as? SQLiteError)?.isNotADatabase, true, "\(error)")
        }
        XCTAssertEqual(try dir.read("junk.sqlite"), String(repeating: "this is not sqlite\n", count: 100))
    }

    func testQuotedIdentifiersStopInjection() throws {
        let dir = try TempDirectory()
        let db = try Connection(path: dir.file("a.sqlite"))
        let evil = #"t"; DROP TABLE x; --"#
        try db.execute("CREATE TABLE x(a)")
        try db.execute("CREATE TABLE \(quoteIdentifier(evil))(\(quoteIdentifier("col 'a\"")))")
        XCTAssertTrue(try db.tableExists(evil))
        XCTAssertTrue(try db.tableExists("x"))
        XCTAssertEqual(try db.columns(of: evil).map(\.name), ["col 'a\""])
    }
}
