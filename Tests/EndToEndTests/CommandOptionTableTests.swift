import Foundation
@testable import StoreCLI
import XCTest

/// Options are declared, then read: every option name a command reads must be in its declared table. A misspelled
/// or undeclared name fails here (the sources are scanned), and stops a debug build where it is read.
final class CommandOptionTableTests: XCTestCase {
    private static let commands = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Sources/StoreCLI/Commands")

    /// Every command, subcommands included, by its type's name.
    private func registry() -> [String: any Command.Type] {
        var found: [String: any Command.Type] = [:]
        func visit(_ command: any Command.Type) {
            found[String(describing: command)] = command
            command.subcommands.forEach(visit)
        }
        CommandLineTool.commands.forEach(visit)
        visit(RootCommand.self)
        return found
    }

    /// The option names read in `text`: `.flag("x")`, `.value("x")`, `.all("x")`, `.int("x")`.
    private func queries(_ text: Substring) -> Set<String> {
        var names = Set<String>()
        for call in [".flag(\"", ".value(\"", ".all(\"", ".int(\""] {
            var rest = text[...]
            while let start = rest.range(of: call) {
                rest = rest[start.upperBound...]
                if let end = rest.firstIndex(of: "\"") { names.insert(String(rest[..<end])) }
            }
        }
        return names
    }

    func testEveryOptionACommandReadsIsDeclared() throws {
        let registry = registry()
        let global = Set(GlobalOptions.specs.map(\.name))
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.commands.path).filter { $0.hasSuffix(".swift") }
        XCTAssertGreaterThan(files.count, 20)
        var checked = 0
        for file in files.sorted() {
            let text = try String(contentsOf: Self.commands.appendingPathComponent(file), encoding: .utf8)
            // The file's top-level declarations, each with its text.
            var segments: [(name: String, body: Substring)] = []
            var starts: [(String.Index, String)] = []
            for keyword in ["\nstruct ", "\nenum ", "\nextension ", "\nprotocol ", "\nfinal class "] {
                var rest = text[...]
                while let r = rest.range(of: keyword) {
                    let name = rest[r.upperBound...].prefix { $0.isLetter || $0.isNumber }
                    starts.append((r.lowerBound, String(name)))
                    rest = rest[r.upperBound...]
                }
            }
            starts.sort { $0.0 < $1.0 }
            for (n, start) in starts.enumerated() {
                let end = n + 1 < starts.count ? starts[n + 1].0 : text.endIndex
                segments.append((start.1, text[start.0..<end]))
            }
            let fileDeclared = Set(segments.compactMap { registry[$0.name] }.flatMap { $0.options.map(\.name) })
            for segment in segments {
                let read = queries(segment.body)
                guard !read.isEmpty else { continue }
                let declared = registry[segment.name].map { Set($0.options.map(\.name)) } ?? fileDeclared
                for name in read.subtracting(global) {
                    checked += 1
                    XCTAssertTrue(declared.contains(name),
                                  "\(file): \(segment.name) reads --\(name), which its options table does not declare")
                }
            }
        }
        XCTAssertGreaterThan(checked, 40, "the scan found the option reads")
    }

    func testTheParserHandsEachCommandItsOwnTable() throws {
        let registry = registry()
        for (name, command) in registry {
            let arguments = ParsedArguments(declaredBy: command)
            for option in command.options { XCTAssertTrue(arguments.isDeclared(option.name), "\(name) --\(option.name)") }
            XCTAssertTrue(arguments.isDeclared("json"), "global options are everyone's")
            XCTAssertFalse(arguments.isDeclared("no-such-option"), name)
        }
        let line = try CommandLineTool.parse(ArgumentTokenizer.tokenize(["--json", "sync", "--rebind"]))
        XCTAssertEqual(line.path, ["sync"])
        XCTAssertTrue(line.global.json)
        XCTAssertTrue(line.arguments.flag("rebind"))
        XCTAssertFalse(line.arguments.isDeclared("dry-run"), "sync does not declare --dry-run")
        XCTAssertTrue(line.arguments.isDeclared("reupload"))
        // A usage error still says how far the line was read: --json before it applies to the error document.
        do {
            _ = try CommandLineTool.parse(ArgumentTokenizer.tokenize(["--json", "history", "consumer", "--nope"]))
            XCTFail("an unknown option must be refused")
        } catch let failure as CommandLineTool.ParseFailure {
            XCTAssertTrue(failure.reached.global.json)
            XCTAssertEqual(failure.reached.path, ["history", "consumer"])
            XCTAssertTrue(failure.error.summary.contains("--nope"), failure.error.summary)
        }
    }
}
