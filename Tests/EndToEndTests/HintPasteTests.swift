import Foundation
import TestSupport
import XCTest

/// Every hint storectl prints names commands that work when pasted on a two-store config: none exits 64.
final class HintPasteTests: XCTestCase {
    /// Two stores on one container file, the config not at the default place (so hints need --config too).
    func makeTwoStores() throws -> E2EProject {
        let p = try E2EProject(configFile: "conf/app.yaml")
        let cloud = E2EProject.Cloud.file("iCloud.com.example.hints", url: "file:../cloud/shared.container",
                                          secret: "${HINT_SECRET:-demo-secret}")
        try p.writeConfig([
            E2EProject.Store("a", path: "../data/a.sqlite", schema: "../schema.sql",
                             before: ["entities:", "  notes:", "    unique: [uuid]"], cloud: cloud),
            E2EProject.Store("b", path: "../data/b.sqlite", schema: "../schema.sql", cloud: cloud),
        ])
        try p.writeSchema()
        return p
    }

    /// The commands quoted in a hint or fix: every `'storectl ...'`, or the whole text when it starts with one.
    static func commands(in text: String) -> [String] {
        var found: [String] = []
        var rest = Substring(text)
        while let start = rest.range(of: "'storectl ") {
            let after = rest[start.upperBound...]
            guard let end = after.firstIndex(of: "'") else { break }
            found.append("storectl " + after[..<end])
            rest = after[after.index(after: end)...]
        }
        if found.isEmpty, text.hasPrefix("storectl ") {
            found.append(String(text.prefix { $0 != "(" && $0 != ";" }).trimmingCharacters(in: .whitespaces))
        }
        return found
    }

    /// One error case: how to get there, and the command that prints the hint.
    struct Case {
        var name: String
        var setUp: (E2EProject) throws -> Void
        var args: [String]
    }

    func testEveryHintPastedOnATwoStoreConfigRuns() throws {
        let cases: [Case] = [
            Case(name: "no --store", setUp: { _ in }, args: ["sync"]),
            Case(name: "store file missing", setUp: { _ in }, args: ["--store", "a", "history"]),
            Case(name: "local mode sync", setUp: { d in try d.run(["--store", "a", "init"], expect: nil) },
                 args: ["--store", "a", "sync"]),
            Case(name: "drift", setUp: { d in
                try d.run(["--store", "a", "init"], expect: nil)
                try d.sql("a", "ALTER TABLE notes ADD COLUMN pinned INTEGER")
            }, args: ["--store", "a", "doctor"]),
            Case(name: "triggers missing", setUp: { d in
                try d.run(["--store", "a", "init"], expect: nil)
                try d.sql("a", "DROP TRIGGER IF EXISTS \"_storectl_notes_insert\"; "
                             + "SELECT 'x' FROM sqlite_master WHERE 0;")
                let names = try d.sql("a", "SELECT name FROM sqlite_master WHERE type='trigger'")
                for name in names.split(separator: "\n") {
                    try d.sql("a", "DROP TRIGGER \"\(name)\"")
                }
            }, args: ["--store", "a", "sync"]),
            Case(name: "mode disagreement", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                try d.sql("a", "UPDATE _storectl_meta SET value = 'local' WHERE key = 'mode'")
            }, args: ["--store", "a", "doctor"]),
            Case(name: "status disagreement", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                try d.sql("a", "UPDATE _storectl_meta SET value = 'local' WHERE key = 'mode'")
            }, args: ["status"]),
            Case(name: "copied store", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                try? FileManager.default.removeItem(atPath: d.dir.file("data/b.sqlite"))
                try FileManager.default.copyItem(atPath: d.dir.file("data/a.sqlite"), toPath: d.dir.file("data/b.sqlite"))
            }, args: ["--store", "b", "sync"]),
            Case(name: "zone purged", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                try d.run(["--store", "b", "mode", "cloud"], expect: nil)
                try d.run(["--store", "b", "cloud", "purge", "--yes"], expect: nil)
            }, args: ["--store", "a", "sync"]),
            Case(name: "duplicates", setUp: { d in
                try d.run(["--store", "a", "init"], expect: nil)
                try d.sql("a", "INSERT INTO notes(uuid) VALUES ('same'), ('same')")
            }, args: ["--store", "a", "doctor"]),
            Case(name: "prune without a rule", setUp: { d in try d.run(["--store", "a", "init"], expect: nil) },
                 args: ["--store", "a", "history", "prune"]),
            Case(name: "config set mode", setUp: { _ in }, args: ["config", "set", "stores.a.mode", "cloud"]),
            Case(name: "container missing", setUp: { d in
                try d.dir.write("conf/app.yaml", try d.dir.read("conf/app.yaml")
                    .replacingOccurrences(of: "create_if_missing: true", with: "create_if_missing: false"))
                try d.run(["--store", "a", "init"], expect: nil)
            }, args: ["--store", "a", "mode", "cloud"]),
            Case(name: "bound to another account", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                try d.sql("a", "UPDATE _storectl_meta SET value = 'someone' WHERE key = 'bound_account'")
            }, args: ["--store", "a", "sync"]),
            Case(name: "an account the container does not know", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                let text = try d.dir.read("conf/app.yaml")
                let at = try XCTUnwrap(text.range(of: "  b:"))
                try d.dir.write("conf/app.yaml", text[..<at.lowerBound]
                    + text[at.lowerBound...].replacingOccurrences(of: "account: demo", with: "account: ghost"))
            }, args: ["--store", "b", "mode", "cloud"]),
            Case(name: "not initialised, new identity", setUp: { _ in },
                 args: ["--store", "a", "init", "--new-identity"]),
            Case(name: "completions without a shell", setUp: { _ in }, args: ["completions"]),
            Case(name: "bad schema format", setUp: { _ in }, args: ["--store", "a", "cloud", "schema", "--format", "ckd"]),
            Case(name: "store add without --like", setUp: { _ in }, args: ["store", "add", "c"]),
            Case(name: "container of a bound store moved away", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                for suffix in ["", "-wal", "-shm"] {
                    try? FileManager.default.removeItem(atPath: d.dir.file("cloud/shared.container" + suffix))
                }
            }, args: ["--store", "a", "sync"]),
            Case(name: "status of a bound store whose container is gone", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                for suffix in ["", "-wal", "-shm"] {
                    try? FileManager.default.removeItem(atPath: d.dir.file("cloud/shared.container" + suffix))
                }
            }, args: ["--store", "a", "doctor"]),
            Case(name: "wrong secret", setUp: { d in
                try d.run(["--store", "a", "mode", "cloud"], expect: nil)
                d.environment["HINT_SECRET"] = "not-the-secret"
            }, args: ["--store", "a", "sync"]),
            Case(name: "store just added", setUp: { d in
                try d.run(["store", "add", "c", "--like", "a"], expect: nil)
            }, args: ["--store", "c", "history"]),
        ]
        var pasted = 0
        for c in cases {
            let p = try makeTwoStores()
            try c.setUp(p)
            let r = try p.run(c.args, expect: nil)
            XCTAssertNotEqual(r.status, 0, "\(c.name): the case did not fail\n\(r)")
            var texts = r.stderr.split(separator: "\n").filter { $0.hasPrefix("hint: ") || $0.contains("fix: ") }
                .map { String($0.split(separator: ":", maxSplits: 1)[1]).trimmingCharacters(in: .whitespaces) }
            texts += r.stdout.split(separator: "\n").filter { $0.contains("fix: ") || $0.contains("! ") }
                .map { String($0) }
            let commands = texts.flatMap { Self.commands(in: $0.hasPrefix("fix: ") ? String($0.dropFirst(5)) : $0) }
                + texts.compactMap { t -> String? in
                    guard let r = t.range(of: "fix: ") else { return nil }
                    let fix = String(t[r.upperBound...])
                    return fix.hasPrefix("storectl ") ? Self.commands(in: fix).first : nil
                }
            XCTAssertFalse(commands.isEmpty, "\(c.name): no command in the hint\n\(r)")
            for command in Set(commands) {
                XCTAssertTrue(command.contains("--config conf/app.yaml"), "\(c.name): \(command) lacks --config")
                XCTAssertEqual(command.components(separatedBy: "--config").count, 2,
                               "\(c.name): \(command) names the config more than once")
                if !command.hasPrefix("storectl --config conf/app.yaml help")
                    && !command.hasPrefix("storectl --config conf/app.yaml completions")
                    && !command.hasPrefix("storectl --config conf/app.yaml store add") {
                    XCTAssertTrue(command.contains("--store "), "\(c.name): \(command) lacks --store")
                }
                // Paste it: the shell reads it as printed, in the same folder.
                let run = try Binary.run("/bin/sh", ["-c", command.replacingOccurrences(of: "storectl ",
                                                                                       with: Binary.storectl + " ",
                                                                                       options: .anchored)],
                                         in: p.dir.path, stdin: "a-secret-for-a-new-account\n")
                XCTAssertNotEqual(run.status, 64, "\(c.name): pasting '\(command)' exits 64\n\(run)")
                pasted += 1
            }
        }
        XCTAssertGreaterThanOrEqual(pasted, cases.count)
    }

    /// The same hints on a one-store config at the default place name no option at all.
    func testOnOneStoreAtTheDefaultPlaceHintsAreBare() throws {
        let p = try E2EProject()
        try p.writeConfig([E2EProject.Store("a", schema: nil)])
        let r = try p.run(["history"], expect: 66)
        XCTAssertTrue(r.stderr.contains("'storectl config set stores.a.path "), r.stderr)
        let json = try p.run(["--json", "history"], expect: nil)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["version"] as? Int, 1)
        let error = try XCTUnwrap(doc["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? Int, 66)
        XCTAssertEqual(error["kind"] as? String, "no_input")
        XCTAssertEqual(error["store"] as? String, "a")
        XCTAssertTrue((error["hint"] as? String ?? "").contains("'storectl config set stores.a.path "), "\(error)")
        XCTAssertTrue(error.keys.contains("status"))
    }
}
