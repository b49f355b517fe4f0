import Foundation
@testable import StoreCloudPostgres
import XCTest

/// A session prepares the statements it runs again (`PGConnection.preparedName`), on a real server: results stay the
/// same, what is prepared is what the server lists for the session, and a prepared statement the server no longer
/// holds (or planned for another shape of its table) is prepared again after the one run that fails.
final class PostgresPreparedStatementTests: XCTestCase {
    private func connection() throws -> PGConnection? {
        guard let url = PostgresTestServer.url() else { return nil }
        return try PGConnection(parameters: [("dbname", url)], timeout: 10)
    }

    /// The session's prepared statements with this text (the count itself is never prepared: it holds `*`).
    private func preparedCount(_ c: PGConnection, _ sql: String) throws -> Int {
        Int(try c.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", [sql]).string(0, 0) ?? "")
            ?? -1
    }

    func testAStatementIsPreparedOnItsSecondRunAndGivesTheSameResults() throws {
        guard let c = try connection() else { return }
        let sql = "SELECT $1::int + 1, $2::text"
        XCTAssertEqual(try c.execute(sql, ["1", nil]).string(0, 0), "2")
        XCTAssertEqual(try preparedCount(c, sql), 0, "a statement run once is sent unnamed")
        for n in 2...7 {
            let r = try c.execute(sql, [String(n), "x\(n)"])
            XCTAssertEqual(r.string(0, 0), String(n + 1))
            XCTAssertEqual(r.string(0, 1), "x\(n)")
            XCTAssertEqual(try preparedCount(c, sql), 1, "run \(n)")
        }
        // NULL parameters still reach the prepared statement as NULL.
        XCTAssertNil(try c.execute(sql, [nil, nil]).string(0, 0))
    }

    func testAPipelinePreparesItsStatementsBeforeItStarts() throws {
        guard let c = try connection() else { return }
        let a = "SELECT $1::int * 2", b = "SELECT $1::text || 'b'"
        for n in 1...3 {
            let results = try c.pipeline([PGQuery(a, [String(n)]), PGQuery(b, ["a\(n)"])])
            XCTAssertEqual(results.map { $0.string(0, 0) }, [String(2 * n), "a\(n)b"])
        }
        XCTAssertEqual(try preparedCount(c, a), 0, "a statement with '*' in its text is never prepared")
        XCTAssertEqual(try preparedCount(c, b), 1)
    }

    func testOnlyPlainStatementsWithoutAStarArePrepared() throws {
        XCTAssertTrue(PGConnection.preparable("  \n\tselect 1"))
        XCTAssertTrue(PGConnection.preparable("WITH x AS (SELECT 1) SELECT * FROM x") == false)
        for sql in ["INSERT INTO t VALUES (1)", "UPDATE t SET a = 1", "DELETE FROM t", "WITH x AS (SELECT 1) SELECT a FROM x"] {
            XCTAssertTrue(PGConnection.preparable(sql), sql)
        }
        for sql in ["BEGIN", "COMMIT", "LISTEN \"c\"", "SET jit = off", "SELECT * FROM t", "SELECT t.* FROM t",
                    "SELECT count(*) FROM t", "CREATE TABLE t(a int)", "DEALLOCATE ALL"]
        {
            XCTAssertFalse(PGConnection.preparable(sql), sql)
        }
    }

    func testStatementsTheServerDroppedArePreparedAgain() throws {
        guard let c = try connection() else { return }
        let sql = "SELECT $1::int + 10", other = "SELECT $1::text || '!'"
        for _ in 0..<2 {
            _ = try c.execute(sql, ["1"])
            _ = try c.pipeline([PGQuery(other, ["a"])])
        }
        XCTAssertEqual(try preparedCount(c, sql), 1)
        XCTAssertEqual(try preparedCount(c, other), 1)
        // Outside a transaction, the statement that meets the loss runs again, prepared again: nothing ran.
        try c.execute("DEALLOCATE ALL")
        XCTAssertEqual(try c.execute(sql, ["5"]).string(0, 0), "15")
        XCTAssertEqual(try preparedCount(c, sql), 1)
        XCTAssertEqual(try c.pipeline([PGQuery(other, ["b"])]).first?.string(0, 0), "b!")
        XCTAssertEqual(try c.pipeline([PGQuery(other, ["c"])]).first?.string(0, 0), "c!")
        XCTAssertEqual(try preparedCount(c, other), 1)
        // Inside a transaction, it fails (the transaction is the caller's to run again), and runs after it.
        try c.execute("BEGIN")
        try c.execute("DEALLOCATE ALL")
        XCTAssertThrowsError(try c.execute(sql, ["1"])) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "26000", "\(error)")
            XCTAssertEqual((error as? PGError)?.preparedStatementLost, true, "\(error)")
        }
        try c.execute("ROLLBACK")
        XCTAssertEqual(try c.execute(sql, ["7"]).string(0, 0), "17")
        XCTAssertEqual(try c.execute(sql, ["8"]).string(0, 0), "18")
        XCTAssertEqual(try preparedCount(c, sql), 1)
    }

    func testAStatementWhoseTableChangedShapeIsPreparedAgain() throws {
        guard let c = try connection() else { return }
        try c.execute("CREATE TEMP TABLE prepared_shape(a int)")
        try c.execute("INSERT INTO pg_temp.prepared_shape VALUES (7)")
        let sql = "SELECT a FROM pg_temp.prepared_shape WHERE $1::int > 0"
        _ = try c.execute(sql, ["1"])
        XCTAssertEqual(try c.execute(sql, ["1"]).string(0, 0), "7")
        XCTAssertEqual(try preparedCount(c, sql), 1)
        try c.execute("ALTER TABLE pg_temp.prepared_shape ALTER COLUMN a TYPE text")
        // "cached plan must not change result type": outside a transaction the statement runs again, prepared
        // again (the old one deallocated).
        XCTAssertEqual(try c.execute(sql, ["1"]).string(0, 0), "7")
        XCTAssertEqual(try c.execute(sql, ["1"]).string(0, 0), "7")
        XCTAssertEqual(try preparedCount(c, sql), 1)
        // Inside a transaction it fails once.
        try c.execute("ALTER TABLE pg_temp.prepared_shape ALTER COLUMN a TYPE int USING a::int")
        try c.execute("BEGIN")
        XCTAssertThrowsError(try c.execute(sql, ["1"])) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "0A000", "\(error)")
            XCTAssertEqual((error as? PGError)?.preparedStatementLost, true, "\(error)")
        }
        try c.execute("ROLLBACK")
        XCTAssertEqual(try c.execute(sql, ["1"]).string(0, 0), "7")
    }
}
