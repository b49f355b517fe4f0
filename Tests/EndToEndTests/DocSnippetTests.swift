import Foundation
import TestSupport
import XCTest

/// Docs that run: every ```swift block of README.md and docs/*.md type-checks against the built library modules,
/// with warnings as errors; and a block that prints something is built, run in a copy of the repository's
/// config.yaml and examples, and each line it prints must be quoted (as a `code span`) in the text after it, so
/// that the explanation of its output stays true.
final class DocSnippetTests: XCTestCase {
    /// The package's folder.
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// A ```swift block: its file, its first line, its code and the prose after it (up to the next heading).
    struct Snippet {
        var file: String
        var line: Int
        var code: String
        var after: String
    }

    /// Every ```swift block of README.md and docs/*.md.
    static func snippets() throws -> [Snippet] {
        let docs = root.appendingPathComponent("docs")
        let names = try FileManager.default.contentsOfDirectory(atPath: docs.path).filter { $0.hasSuffix(".md") }
            .sorted().map { "docs/" + $0 }
        var result: [Snippet] = []
        for name in ["README.md"] + names {
            let lines = try String(contentsOf: root.appendingPathComponent(name), encoding: .utf8)
                .components(separatedBy: "\n")
            var i = 0
            while i < lines.count {
                guard lines[i].trimmingCharacters(in: .whitespaces) == "```swift" else {
                    i += 1
                    continue
                }
                let start = i + 1
                var end = start
                while end < lines.count, lines[end].trimmingCharacters(in: .whitespaces) != "```" { end += 1 }
                var prose = end + 1
                while prose < lines.count, !lines[prose].hasPrefix("#"), !lines[prose].hasPrefix("```") { prose += 1 }
                result.append(Snippet(file: name, line: start + 1,
                                      code: lines[start..<min(end, lines.count)].joined(separator: "\n"),
                                      after: lines[min(end + 1, lines.count)..<prose].joined(separator: " ")))
                i = end + 1
            }
        }
        return result
    }

    /// The arguments that let `swiftc` see the package's modules: the built Swift modules, and the module maps
    /// of the system-library targets they import.
    private func moduleArguments() throws -> [String] {
        let modules = Binary.productsDirectory + "/Modules"
        XCTAssertTrue(FileManager.default.fileExists(atPath: modules + "/StoreControl.swiftmodule"),
                      "no StoreControl module in \(modules): build with 'swift build --build-tests' first")
        var args = ["-I", modules]
        let sources = Self.root.appendingPathComponent("Sources")
        for name in try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted() {
            let map = sources.appendingPathComponent(name).appendingPathComponent("module.modulemap").path
            if FileManager.default.fileExists(atPath: map) { args += ["-Xcc", "-fmodule-map-file=" + map] }
        }
        return args
    }

    private func write(_ snippet: Snippet, in dir: TempDirectory) throws -> String {
        try dir.write("main.swift", snippet.code + "\n")
    }

    func testTheDocsHaveSwiftSnippets() throws {
        // The README's library example is one of them: a test that finds none would check nothing.
        XCTAssertTrue(try Self.snippets().contains { $0.file == "README.md" && $0.code.contains("StoreHandle") })
    }

    func testEverySwiftSnippetTypeChecks() throws {
        let args = try moduleArguments()
        let dir = try TempDirectory("storectl-snippet")
        for snippet in try Self.snippets() {
            let file = try write(snippet, in: dir)
            let r = try Binary.run("/usr/bin/env", ["swiftc", "-typecheck", "-warnings-as-errors"] + args + [file],
                                   in: dir.path)
            XCTAssertEqual(r.status, 0, "\(snippet.file):\(snippet.line): the snippet does not compile\n\(r)")
        }
    }

    func testWhatASnippetPrintsIsWhatTheTextAfterItSays() throws {
        let args = try moduleArguments()
        // The library targets' objects (the executables' and the tests' left out).
        let products = Binary.productsDirectory
        var objects: [String] = []
        for folder in try FileManager.default.contentsOfDirectory(atPath: products).sorted()
        where folder.hasPrefix("Store") && folder.hasSuffix(".build") && !folder.hasSuffix("Tests.build") {
            let path = products + "/" + folder
            objects += try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasSuffix(".o") }
                .sorted().map { path + "/" + $0 }
        }
        for snippet in try Self.snippets() where snippet.code.contains("print(") {
            let dir = try TempDirectory("storectl-snippet-run")
            let file = try write(snippet, in: dir)
            let built = try Binary.run("/usr/bin/env", ["swiftc"] + args + [file] + objects
                                       + ["-lsqlite3", "-lyaml", "-o", dir.file("snippet")], in: dir.path)
            XCTAssertEqual(built.status, 0, "\(snippet.file):\(snippet.line): the snippet does not build\n\(built)")
            guard built.status == 0 else { continue }
            // It runs where the text says: the repository's folder (a copy of its config and examples).
            let work = try TempDirectory("storectl-snippet-repo")
            for item in ["config.yaml", "examples"] {
                try FileManager.default.copyItem(atPath: Self.root.appendingPathComponent(item).path,
                                                 toPath: work.file(item))
            }
            let r = try Binary.run(dir.file("snippet"), [], in: work.path,
                                   environment: ["HOME": work.path, "STORECTL_CREDENTIAL_CACHE": "off"])
            XCTAssertEqual(r.status, 0, "\(snippet.file):\(snippet.line)\n\(r)")
            let printed = r.stdout.split(separator: "\n").map(String.init)
            XCTAssertFalse(printed.isEmpty, "\(snippet.file):\(snippet.line) printed nothing\n\(r)")
            for line in printed {
                XCTAssertTrue(snippet.after.contains("`\(line)`"),
                              "\(snippet.file):\(snippet.line): the snippet prints '\(line)', which the text after "
                                  + "it does not quote:\n\(snippet.after)")
            }
        }
    }
}
