import StoreBase
@testable import StoreConfig
import XCTest

/// The source excerpt under a config error: readable whatever the line, and never a secret.
final class ExcerptTests: XCTestCase {
    func error(_ text: String, environment: [String: String] = [:]) -> ConfigError? {
        do {
            _ = try ConfigLoader.load(bytes: Array(text.utf8), path: "/srv/config.yaml", displayPath: "config.yaml",
                                      environment: environment)
            return nil
        } catch {
            return error as? ConfigError
        }
    }

    func testTheNestingErrorOfA200KBLineIsCutAroundTheCaret() throws {
        let line = "stores: " + String(repeating: "[", count: 200_000)
        let e = try XCTUnwrap(error("version: 1\n" + line + "\n"))
        XCTAssertEqual(e.firstLine, "config.yaml:2:72: error: stores[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]"
                           + "[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]"
                           + "[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: nesting is deeper than 64 "
                           + "levels")
        XCTAssertLessThan(String(describing: e).count, 2000)
        for detail in e.details { XCTAssertLessThanOrEqual(detail.count, 110, detail) }
        XCTAssertTrue(e.details[0].hasSuffix("…"), e.details[0])
        // The caret still sits under a '[' of the cut line.
        let caret = try XCTUnwrap(e.details[1].firstIndex(of: "^")).utf16Offset(in: e.details[1])
        XCTAssertEqual(Array(e.details[0])[caret], "[")
    }

    func testALongLineIsCutOnBothSidesOfTheCaret() throws {
        let padding = String(repeating: "x", count: 300)
        let e = try XCTUnwrap(error("version: 1\nstores:\n  notes:\n    path: \(padding)\n    mdoe: \(padding)\n"))
        XCTAssertEqual(e.firstLine, "config.yaml:5:5: error: stores.notes.mdoe: unknown key")
        XCTAssertLessThanOrEqual(e.details[0].count, 110)
        XCTAssertTrue(e.details[0].hasSuffix("…"))
        let mid = try XCTUnwrap(error("version: 1\nstores:\n  notes: {path: \(padding), mdoe: \(padding)}\n"))
        XCTAssertTrue(mid.details[0].contains("| …"), mid.details[0])
        XCTAssertTrue(mid.details[0].hasSuffix("…"), mid.details[0])
        XCTAssertTrue(mid.details[0].contains("mdoe"), mid.details[0])
    }

    func testControlCharactersShowAsQuestionMarks() throws {
        let e = try XCTUnwrap(error("version: 1\nstores:\n  notes:\n    path: a\u{1B}[2Jb\n    mdoe: x\n    x: \u{7}\n"))
        XCTAssertFalse(String(describing: e).contains("\u{1B}"))
    }

    func testEverySecretFormIsRedacted() {
        let cases = [
            "      secret: hunter2",
            "      - secret: hunter2",
            "    cloud: {secret: hunter2, zone: x}",
            "    cloud: {\"secret\": \"hunter2, x\", zone: x}",
            "    cloud: {'password': hunter2}",
            "      url: postgres://alice:hunter2@db/x",
            "      url: postgres://db/x?password=hunter2&sslmode=require",
            "      url: postgres://db/x?pass%77ord=hunter2",
            "      url: host=db password=hunter2 dbname=x",
            "      url: \"host=db password='hunter2 with spaces' dbname=x\"",
            "      url: host=db sslpassword = hunter2",
            "    secret:hunter2",
        ]
        for line in cases {
            let shown = SourceText.redacted(line)
            XCTAssertFalse(shown.contains("hunter"), "\(line) -> \(shown)")
            XCTAssertTrue(shown.contains(Redaction.placeholder), "\(line) -> \(shown)")
        }
        // What is not a secret stays.
        XCTAssertEqual(SourceText.redacted("    cloud: {secret: hunter2, zone: x}"),
                       "    cloud: {secret: <redacted>, zone: x}")
        XCTAssertEqual(Redaction.connectionString("host=db password='a b' dbname=x"),
                       "host=db password=<redacted> dbname=x")
        XCTAssertEqual(Redaction.text("cannot connect to postgres://u:pw@db/x: refused"),
                       "cannot connect to postgres://u:<redacted>@db/x: refused")
        XCTAssertEqual(Redaction.text("the password for role u was refused"), "the password for role u was refused")
    }
}
