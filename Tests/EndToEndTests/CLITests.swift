import Foundation
import TestSupport
import XCTest

final class CLITests: XCTestCase {
    func testVersionAndHelp() throws {
        let dir = try TempDirectory()
        let version = try Binary.storectl(["--version"], in: dir.path)
        XCTAssertEqual(version.status, 0, "\(version)")
        XCTAssertTrue(version.stdout.hasPrefix("storectl "), "\(version)")
        let help = try Binary.storectl(["--help"], in: dir.path)
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdout.contains("USAGE: storectl"), help.stdout)
        XCTAssertEqual(help.stderr, "")
    }

    func testUnknownCommandSuggestsTheClosest() throws {
        let dir = try TempDirectory()
        let result = try Binary.storectl(["confg"], in: dir.path)
        XCTAssertEqual(result.status, 64)
        XCTAssertTrue(result.stderr.hasPrefix("error: unknown command 'confg' (argument 1)\nhint: did you mean 'config'?\n"),
                      result.stderr)
        XCTAssertEqual(result.stdout, "")
    }

    func testUnknownOptionSuggestsTheClosest() throws {
        let dir = try TempDirectory()
        let result = try Binary.storectl(["--jsn"], in: dir.path)
        XCTAssertEqual(result.status, 64)
        XCTAssertTrue(result.stderr.contains("unknown option '--jsn' (argument 1)\nhint: did you mean '--json'?"),
                      result.stderr)
    }
}

final class JSONErrorTests: XCTestCase {
    func testUsageErrorsAreAJSONDocumentWithJSON() throws {
        let dir = try TempDirectory()
        let r = try Binary.storectl(["--json", "mode", "sideways"], in: dir.path)
        XCTAssertEqual(r.status, 64)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        let error = try XCTUnwrap(doc["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? Int, 64)
        XCTAssertEqual(error["message"] as? String, "mode must be 'local' or 'cloud', got 'sideways'")
        XCTAssertTrue(r.stderr.hasPrefix("error: mode must be 'local' or 'cloud', got 'sideways'\n"), r.stderr)
    }
}
