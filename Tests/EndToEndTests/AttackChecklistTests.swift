import Foundation
import XCTest

/// docs/attacks.md names, for each attack, the tests that make it: every one named must exist, so that the checklist
/// never points at a test that was renamed or removed.
final class AttackChecklistTests: XCTestCase {
    func testEveryTestTheChecklistNamesExists() throws {
        let tests = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        let root = tests.deletingLastPathComponent()
        let checklist = try String(contentsOf: root.appendingPathComponent("docs/attacks.md"), encoding: .utf8)
        // `ClassName.testName` between backticks.
        let regex = try NSRegularExpression(pattern: "`([A-Z][A-Za-z]+)\\.(test[A-Za-z0-9]+)`")
        let range = NSRange(checklist.startIndex..., in: checklist)
        let named = regex.matches(in: checklist, range: range).compactMap { m -> (String, String)? in
            guard let c = Range(m.range(at: 1), in: checklist), let t = Range(m.range(at: 2), in: checklist)
            else { return nil }
            return (String(checklist[c]), String(checklist[t]))
        }
        XCTAssertGreaterThan(named.count, 20, "the checklist names its tests as `Class.testName`")
        var sources = ""
        let files = FileManager.default.enumerator(at: tests, includingPropertiesForKeys: nil)
        while let file = files?.nextObject() as? URL {
            guard file.pathExtension == "swift" else { continue }
            sources += (try? String(contentsOf: file, encoding: .utf8)) ?? ""
        }
        for (type, test) in named {
            XCTAssertTrue(sources.contains("class \(type)"), "docs/attacks.md names \(type), which no test declares")
            XCTAssertTrue(sources.contains("func \(test)("), "docs/attacks.md names \(type).\(test), which is not declared")
        }
    }
}
