import Foundation
import StoreHistory
import StoreMirror
import StoreSQLite
import XCTest

/// The canonical encoding of a value that the record map's fingerprints hash (`FieldHashes.canonicalSQL`) keeps
/// its type and every digit: the integer 1, the real 1.0 and the text '1' are three values, and so are 0.1 and
/// 0.10000000000000002, or the blob x'01' and the text '\x01'.
final class CanonicalValueTests: XCTestCase {
    /// Values that SQLite's `=` (or 15 digits) would take for one another, as SQL literals.
    static let values = [
        "1", "1.0", "'1'", "X'31'", "2", "2.0", "0.1", "0.10000000000000002", "X'01'", "CAST(X'01' AS TEXT)", "NULL",
        "''", "X''", "1e20", "100000000000000000000", "9007199254740993", "9007199254740992.0", "-0.5", "'1.0'",
        "'{\"$blob\":\"01\"}'",
    ]

    func db() throws -> Connection { try Connection(path: ":memory:") }

    /// The encoding of a local value (by `typeof`) and of the same value read back from its record field (by
    /// `json_each`'s type): the fingerprint of a row and of the record it was sent as must be the same.
    func encodings(_ db: Connection, _ literal: String) throws -> (local: String, field: String) {
        let local = try db.scalar("SELECT \(FieldHashes.canonicalSQL(type: "typeof(v)", value: "v")) "
                                  + "FROM (SELECT \(literal) AS v)")?.string ?? "?"
        let field = try db.scalar("""
            SELECT \(FieldHashes.canonicalSQL(type: "type", value: "value"))
            FROM json_each((SELECT json_object('v', \(ValueJSON.field("v"))) FROM (SELECT \(literal) AS v)))
            """)?.string ?? "?"
        return (local, field)
    }

    func testEveryTypeAndEveryDigitHasItsOwnEncoding() throws {
        let db = try db()
        var seen: [String: String] = [:]
        for literal in Self.values {
            let (local, field) = try encodings(db, literal)
            XCTAssertEqual(local, field, "\(literal): a row and its record field encode differently")
            // Two literals of the same SQLite value (1e20 and 100000000000000000000 are both that real) share one.
            let same = try db.scalar("SELECT typeof(a) = typeof(b) AND a IS b FROM (SELECT \(literal) AS a, "
                                     + "\(seen[local] ?? "NULL") AS b)")?.int64 == 1
            if let earlier = seen[local], !same {
                XCTFail("\(literal) and \(earlier) are different values with one encoding: \(local)")
            }
            seen[local] = seen[local] ?? literal
        }
        XCTAssertEqual(try encodings(db, "1").local, "1")
        XCTAssertEqual(try encodings(db, "1.0").local, "1.0")
        XCTAssertEqual(try encodings(db, "'1'").local, "\"1\"")
        XCTAssertEqual(try encodings(db, "0.10000000000000002").local, "0.10000000000000002")
        XCTAssertEqual(try encodings(db, "X'01'").local, #"{"$blob":"01"}"#)
    }

    /// The fingerprints: a base made from a value holds that value only, not one of another type.
    func testABaseHoldsAValueOfItsTypeOnly() throws {
        let db = try db()
        for a in Self.values {
            let base = try db.scalar("""
                SELECT storectl_field_hashes_of(json_quote('v'), \(FieldHashes.canonicalSQL(type: "typeof(v)", value: "v")))
                FROM (SELECT \(a) AS v)
                """)
            for b in Self.values {
                let sameValue = try db.scalar("SELECT typeof(x) = typeof(y) AND x IS y FROM (SELECT \(a) AS x, \(b) AS y)")?
                    .int64 == 1
                let holds = try db.scalar("""
                    SELECT storectl_base_has(?1, json_quote('v'), \(FieldHashes.canonicalSQL(type: "typeof(v)", value: "v")))
                    FROM (SELECT \(b) AS v)
                    """, [base ?? .null])?.int64
                XCTAssertEqual(holds, sameValue ? 1 : 0, "a base of \(a) against \(b)")
            }
        }
    }
}
