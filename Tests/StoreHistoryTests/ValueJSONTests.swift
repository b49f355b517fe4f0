import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// `ValueJSON`: what a value becomes in history keys and record fields, and that it reads back as itself.
final class ValueJSONTests: XCTestCase {
    func testRealsKeepEveryDigit() throws {
        let db = try Connection(path: ":memory:")
        var rng = SystemRandomNumberGenerator()
        var values: [Double] = [0.30000000000000004, 123456789.123456789, 5e-324, 1.7976931348623157e308, 0.1, 2.0,
                                1e20, -2.5, 9007199254740993.0, 6.02214076e23, .infinity, -.infinity]
        for _ in 0..<2000 {
            let d = Double(bitPattern: rng.next())
            if d.isFinite { values.append(d) }
        }
        for d in values {
            let key = try db.scalar("SELECT json_array(\(ValueJSON.key("?1")))", [d])?.string ?? ""
            let back = try db.scalar("SELECT json_extract(?1, '$[0]')", [key])
            XCTAssertEqual(back?.double, d, "\(d) -> \(key)")
            let field = try db.scalar("SELECT json_object('v', \(ValueJSON.field("?1")))", [d])?.string ?? ""
            XCTAssertEqual(try db.scalar("SELECT json_extract(?1, '$.v')", [field])?.double, d, "\(d) -> \(field)")
        }
        XCTAssertEqual(try db.scalar("SELECT json_array(\(ValueJSON.key("?1")))", [0.30000000000000004])?.string,
                       "[0.30000000000000004]")
        XCTAssertEqual(try db.scalar("SELECT json_array(\(ValueJSON.key("?1")))", [Double.infinity])?.string, "[9e999]")
    }

    func testOddTextTravelsAsHexAndPlainTextAsItIs() throws {
        let db = try Connection(path: ":memory:")
        let field = { (v: Value) throws -> String in
            try db.scalar("SELECT json_object('v', \(ValueJSON.field("?1")))", [v])?.string ?? ""
        }
        XCTAssertEqual(try field(.text("plain é😀")), #"{"v":"plain é😀"}"#)
        XCTAssertEqual(try field(.text("a\u{0}b")), #"{"v":{"$text":"610062"}}"#)
        XCTAssertEqual(try field(.textBytes([0x61, 0xFF, 0x62])), #"{"v":{"$text":"61FF62"}}"#)
        XCTAssertEqual(try field(.blob([0, 255])), #"{"v":{"$blob":"00FF"}}"#)
        // Keys: built-in functions only (the triggers use them), so invalid UTF-8 is left as it is; a NUL is hex.
        let key = { (v: Value) throws -> String in
            try db.scalar("SELECT json_array(\(ValueJSON.key("?1")))", [v])?.string ?? ""
        }
        XCTAssertEqual(try key(.text("k\u{0}")), #"[{"$text":"6B00"}]"#)
        XCTAssertEqual(try key(.text("plain")), #"["plain"]"#)
        // And back: the key's element gives the bytes again.
        for v: Value in [.text("k\u{0}"), .text("plain"), .integer(7), .real(0.30000000000000004)] {
            let json = try key(v)
            XCTAssertEqual(try db.scalar("SELECT \(ValueJSON.keyValue("?1", 0))", [json]), v, json)
        }
    }

    func testTextKeepsItsBytesThroughBindingAndReading() throws {
        let db = try Connection(path: ":memory:")
        try db.execute("CREATE TABLE t(v TEXT)")
        try db.run("INSERT INTO t VALUES (?), (?)", [Value.text("a\u{0}b"), Value.textBytes([0x61, 0xC0, 0xAF])])
        XCTAssertEqual(try db.query("SELECT hex(v), typeof(v) FROM t ORDER BY rowid").map { $0[0].string ?? "" },
                       ["610062", "61C0AF"])
        XCTAssertEqual(try db.query("SELECT v FROM t ORDER BY rowid").map { $0[0] },
                       [.text("a\u{0}b"), .textBytes([0x61, 0xC0, 0xAF])])
    }
}
