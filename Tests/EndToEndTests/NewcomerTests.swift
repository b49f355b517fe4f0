import Foundation
import TestSupport
import XCTest

/// What a newcomer meets first: `mode cloud` twice, a dry run, help and completion, the man page, the warnings.
final class NewcomerTests: XCTestCase {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    private func project(secret: String = "${STORECTL_SECRET:-demo-secret}") throws -> E2EProject {
        let p = try E2EProject()
        try p.writeSchema()
        try p.writeConfig([E2EProject.Store("notes", path: "data/notes.sqlite",
                                            cloud: E2EProject.Cloud(container: "iCloud.com.example.notes",
                                                                    url: "file:cloud/notes.container",
                                                                    secret: secret))])
        return p
    }

    func testModeCloudOnAStoreInCloudModeSaysSoInOneLine() throws {
        let p = try project()
        try p.run(["init"])
        let first = try p.run(["mode", "cloud"])
        XCTAssertTrue(first.stderr.contains("switching store 'notes' to cloud mode"), first.description)
        let again = try p.run(["mode", "cloud"])
        XCTAssertEqual(again.stdout.split(separator: "\n").count, 1, again.description)
        XCTAssertTrue(again.stdout.contains("already in cloud mode"), again.description)
        XCTAssertTrue(again.stdout.contains("'notes'"), again.description)
        XCTAssertEqual(again.stderr, "", again.description)
        let json = try p.run(["--json", "mode", "cloud"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["from"] as? String, "cloud", json.stdout)
        XCTAssertEqual(doc["to"] as? String, "cloud", json.stdout)
        XCTAssertEqual((doc["steps"] as? [Any])?.count, 0, json.stdout)
        // A store switched back to local mode walks the whole switch again.
        try p.run(["mode", "local"])
        let back = try p.run(["mode", "cloud"])
        XCTAssertTrue(back.stderr.contains("switching store 'notes' to cloud mode"), back.description)
    }

    func testTheSnapshotLineNamesNoFileThatIsGoneAfterwards() throws {
        let p = try project()
        try p.run(["init"])
        let r = try p.run(["mode", "cloud"])
        let line = try XCTUnwrap(r.stderr.split(separator: "\n").first { $0.contains("snapshot:") }, r.description)
        for word in line.split(separator: " ") where word.contains("/") {
            XCTAssertTrue(FileManager.default.fileExists(atPath: String(word)), "\(line) names \(word), which is gone")
        }
        XCTAssertTrue(line.contains("removed"), String(line))
    }

    func testTheDryRunNamesTheAccountOnce() throws {
        let p = try project()
        try p.run(["init"])
        let r = try p.run(["mode", "cloud", "--dry-run"])
        let accountLines = r.stdout.split(separator: "\n").filter { $0.contains("account:") }
        XCTAssertEqual(accountLines.count, 1, r.description)
        XCTAssertTrue(accountLines.first?.contains("demo is available") == true, r.description)
    }

    /// The words bash completion offers after `words` (the last one is the word being completed).
    private func complete(_ words: [String], in p: E2EProject) throws -> [String] {
        let bash = try p.run(["completions", "bash"])
        let quoted = words.map { "'" + $0 + "'" }.joined(separator: " ")
        let script = try p.dir.write("complete.sh", bash.stdout + "\nCOMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1)"
                                        + "; _storectl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
        let r = try Binary.run("/bin/bash", [script], in: p.dir.path,
                               environment: ["PATH": Binary.productsDirectory + ":/usr/bin:/bin"])
        XCTAssertEqual(r.status, 0, r.description)
        return r.stdout.split(separator: "\n").map(String.init)
    }

    func testHelpCompletesCommandNamesAndCompletionsHidesItsScriptOption() throws {
        let p = try project()
        let afterHelp = try complete(["storectl", "help", ""], in: p)
        let names = try p.run(["--help"]).stdout.split(separator: "\n")
            .compactMap { line -> String? in
                guard line.hasPrefix("  "), let first = line.split(separator: " ").first else { return nil }
                return String(first)
            }
        for command in ["mode", "status", "sync", "watch", "migrate"] {
            XCTAssertTrue(names.contains(command), "--help lists \(command)")
            XCTAssertTrue(afterHelp.contains(command), "help <TAB> offers \(command): \(afterHelp)")
        }
        XCTAssertEqual(try complete(["storectl", "help", "sta"], in: p), ["status"])
        let afterCompletions = try complete(["storectl", "completions", ""], in: p)
        XCTAssertTrue(afterCompletions.contains("bash"), "\(afterCompletions)")
        XCTAssertFalse(afterCompletions.contains("--list-stores"), "\(afterCompletions)")
        for shell in ["zsh", "fish"] {
            XCTAssertFalse(try p.run(["completions", shell]).stdout.contains("-l list-stores"), shell)
        }
    }

    func testHelpNamesEveryFormOfMigrate() throws {
        let p = try project()
        let help = try p.run(["--help"]).stdout
        let line = try XCTUnwrap(help.split(separator: "\n").first { $0.hasPrefix("  migrate ") }, help)
        for option in ["--to", "--cloud", "--sql"] {
            XCTAssertTrue(line.contains(option), "\(line) does not name \(option)")
        }
    }

    func testTheDocsTheManPageCitesAreInstalled() throws {
        let p = try project()
        let man = try p.run(["man"]).stdout
        XCTAssertTrue(man.contains("share/doc/storectl"), "the man page does not say where its docs are")
        let makefile = try String(contentsOf: Self.root.appendingPathComponent("Makefile"), encoding: .utf8)
        let install = makefile.components(separatedBy: "\ninstall:").last?.components(separatedBy: "\nuninstall:")
            .first ?? ""
        XCTAssertTrue(install.contains("docs/*.md") && install.contains("$(DOCDIR)"), install)
        XCTAssertTrue(makefile.contains("DOCDIR = $(DESTDIR)$(PREFIX)/share/doc/storectl"), makefile)
        for cited in ["json.md"] where man.contains(cited) {
            XCTAssertTrue(FileManager.default.fileExists(atPath: Self.root.appendingPathComponent("docs/" + cited).path))
        }
    }

    func testALiteralSecretWarningIsPrintedOncePerCommand() throws {
        let p = try E2EProject()
        try p.writeSchema()
        try p.writeConfig(["a", "b", "c"].map { name in
            E2EProject.Store(name, path: "data/\(name).sqlite",
                             cloud: E2EProject.Cloud(container: "iCloud.com.example.\(name)",
                                                     url: "file:cloud/\(name).container", secret: "demo-secret"))
        })
        XCTAssertEqual(chmod(p.dir.file("config.yaml"), 0o644), 0)
        for args in [["--store", "a", "init"], ["status"], ["config", "validate"]] {
            let r = try p.run(args, expect: nil)
            let warnings = r.stderr.split(separator: "\n").filter { $0.hasPrefix("warning:") }
            XCTAssertEqual(warnings.count, 1, r.description)
            for name in ["a", "b", "c"] {
                XCTAssertTrue(warnings.first?.contains("stores.\(name).cloud.secret") == true, r.description)
            }
        }
    }
}
