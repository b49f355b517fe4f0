import Foundation
import TestSupport
import XCTest

/// `.ci/run` ends with `N passed, N failed`, counted from the xUnit report of the README's test command by
/// scripts/xunit-summary.py.
final class CISummaryTests: XCTestCase {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    private func summary(_ xml: String?) throws -> ProcessResult {
        let dir = try TempDirectory("storectl-xunit")
        let file = dir.file("xunit.xml")
        if let xml { try dir.write("xunit.xml", xml) }
        return try Binary.run("/usr/bin/env", ["python3", Self.root.appendingPathComponent("scripts/xunit-summary.py").path,
                                               file], in: dir.path)
    }

    /// A report of `passed` passing, `failed` failing and `skipped` skipped test cases, in a shuffled order.
    private func report(passed: Int, failed: Int, skipped: Int) -> String {
        var cases: [String] = []
        for i in 0..<passed { cases.append("<testcase classname=\"A.B\" name=\"testPass\(i)\" time=\"0.1\">\n</testcase>") }
        for i in 0..<failed {
            // A message over several lines, with markup in it, as XCTest writes an assertion's text.
            cases.append("<testcase classname=\"A.B\" name=\"testFail\(i)\" time=\"0.1\">\n<failure message=\"exit 78"
                         + "&#10;&lt;testcase&gt; x\"></failure>\n</testcase>")
        }
        for i in 0..<skipped {
            cases.append("<testcase classname=\"A.B\" name=\"testSkip\(i)\" time=\"0\"><skipped/></testcase>")
        }
        return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n<testsuite name=\"TestResults\">\n"
            + cases.shuffled().joined(separator: "\n") + "\n</testsuite>\n</testsuites>\n"
    }

    func testTheLastLineCountsPassedAndFailedTestCases() throws {
        for _ in 0..<3 {
            let (passed, failed, skipped) = (Int.random(in: 0...20), Int.random(in: 0...5), Int.random(in: 0...3))
            let r = try summary(report(passed: passed, failed: failed, skipped: skipped))
            let lines = r.stdout.split(separator: "\n").map(String.init)
            XCTAssertEqual(lines.last, "\(passed) passed, \(failed) failed", r.description)
            XCTAssertEqual(lines.contains("\(skipped) skipped"), skipped > 0, r.description)
            XCTAssertEqual(r.status, failed > 0 ? 1 : 0, r.description)
        }
    }

    func testAMissingReportIsAFailureWithASummaryLine() throws {
        let r = try summary(nil)
        XCTAssertEqual(r.status, 2, r.description)
        XCTAssertEqual(r.stdout.split(separator: "\n").last.map(String.init), "0 passed, 0 failed", r.description)
        XCTAssertTrue(r.stderr.contains("no test results"), r.description)
    }

    func testCIRunCountsTheReportOfTheREADMETestCommand() throws {
        let run = try String(contentsOf: Self.root.appendingPathComponent(".ci/run"), encoding: .utf8)
        let readme = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        XCTAssertTrue(readme.contains("swift test --parallel --num-workers 3"))
        let lines = run.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        let test = try XCTUnwrap(lines.first { $0.hasPrefix("swift test --parallel --num-workers 3 ") }, run)
        let file = try XCTUnwrap(test.components(separatedBy: "--xunit-output ").last?.split(separator: " ").first,
                                 test)
        let counted = try XCTUnwrap(lines.first { $0.contains("scripts/xunit-summary.py") }, run)
        XCTAssertTrue(counted.contains(String(file)), "\(test)\n\(counted)")
        // The summary is the last thing printed, and the exit status follows the tests.
        XCTAssertEqual(lines.last, "exit \"$status\"", run)
    }
}
