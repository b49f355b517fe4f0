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
