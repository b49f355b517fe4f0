import StoreBase
import XCTest

/// The text helpers that stand in for Foundation's `NSString` path and string methods.
final class TextHelpersTests: XCTestCase {
    func testPathPartsMatchNSStringPathMethods() {
        XCTAssertEqual(Path.parent("a/b/c.db"), "a/b")
        XCTAssertEqual(Path.parent("/c.db"), "/")
        XCTAssertEqual(Path.parent("c.db"), "")
        XCTAssertEqual(Path.parent("/a/b/"), "/a")
        XCTAssertEqual(Path.parent("/a//b"), "/a")
        XCTAssertEqual(Path.lastComponent("a/b/c.db"), "c.db")
        XCTAssertEqual(Path.lastComponent("/a/b/"), "b")
        XCTAssertEqual(Path.lastComponent("/"), "/")
        XCTAssertEqual(Path.join("/a", "b.db"), "/a/b.db")
        XCTAssertEqual(Path.join("/a/", "b.db"), "/a/b.db")
        XCTAssertEqual(Path.standardized("/a/./b/../c//d/"), "/a/c/d")
        XCTAssertEqual(Path.standardized("/../x"), "/x")
        XCTAssertEqual(Path.standardized("a/./b"), "a/b")
    }

    func testReplacingTextMatchesBytesNotCharacters() {
        XCTAssertEqual("it's".replacingText("'", with: "''"), "it''s")
        // A quote followed by a combining accent is one Character, but its quote must still be doubled.
        XCTAssertEqual("a'\u{301}b".replacingText("'", with: "''"), "a''\u{301}b")
        XCTAssertEqual("a\r\nb".replacingText("\n", with: "|"), "a\r|b")
        XCTAssertEqual("xx".replacingText("", with: "y"), "xx")
        XCTAssertEqual("{s}.t, {s}.u".replacingText("{s}", with: "\"q\""), "\"q\".t, \"q\".u")
    }

    func testTrimmingPaddingHexPercentAndJSONQuoting() {
        XCTAssertEqual("  a b\t".trimmingSpaces(), "a b")
        XCTAssertEqual("\n a \n".trimmingSpaces(), "\n a \n")
        XCTAssertEqual("\n a \n".trimmingWhitespace(), "a")
        XCTAssertEqual("   ".trimmingWhitespace(), "")
        XCTAssertEqual("ab".padded(to: 4), "ab  ")
        XCTAssertEqual("abcdef".padded(to: 3), "abc")
        XCTAssertEqual(Hex.string([0x00, 0xAB, 0xff]), "00abff")
        XCTAssertEqual(Hex.string([0x0f], uppercase: true), "0F")
        XCTAssertEqual(PercentEncoding.decoded("my%20notes%2Edb"), "my notes.db")
        XCTAssertNil(PercentEncoding.decoded("100%"))
        XCTAssertNil(PercentEncoding.decoded("%zz"))
        XCTAssertNil(PercentEncoding.decoded("%ff"))
        XCTAssertEqual(JSONText.quoted("plain"), "\"plain\"")
        XCTAssertEqual(JSONText.quoted("a\"b\\c\n\t\u{01}é"), "\"a\\\"b\\\\c\\n\\t\\u0001é\"")
    }
}

/// ISO 8601 times from the C library.
final class ISOTimeTests: XCTestCase {
    func testWholeAndFractionalSecondsInUTC() {
        XCTAssertEqual(ISOTime.string(unixMilliseconds: 1_714_557_600_123, fractional: true), "2024-05-01T10:00:00.123Z")
        XCTAssertEqual(ISOTime.string(unixMilliseconds: 1_714_557_600_123, fractional: false), "2024-05-01T10:00:00Z")
        XCTAssertEqual(ISOTime.string(unixMilliseconds: 0, fractional: true), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(ISOTime.string(unixMilliseconds: -1_500, fractional: true), "1969-12-31T23:59:58.500Z")
        XCTAssertEqual(ISOTime.string(unixMilliseconds: 951_782_400_007, fractional: true), "2000-02-29T00:00:00.007Z")
    }
}

/// Hex text and back, in either case.
final class HexTests: XCTestCase {
    func testHexRoundTripsAndRefusesWhatIsNotHex() {
        XCTAssertEqual(Hex.bytes("00fF7a"), [0x00, 0xff, 0x7a])
        XCTAssertEqual(Hex.bytes(""), [])
        XCTAssertNil(Hex.bytes("abc"))
        XCTAssertNil(Hex.bytes("zz"))
        let all = (0...255).map { UInt8($0) }
        XCTAssertEqual(Hex.bytes(Hex.string(all)), all)
        XCTAssertEqual(Hex.bytes(Hex.string(all, uppercase: true)), all)
    }
}
