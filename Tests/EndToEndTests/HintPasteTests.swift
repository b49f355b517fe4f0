import Foundation
import TestSupport
import XCTest

/// Every hint storectl prints names commands that work when pasted on a two-store config: none exits 64.
final class HintPasteTests: XCTestCase {
    /// Two stores on one container file, the config not at the default place (so hints need --config too).
    func makeTwoStores(_ dir: TempDirectory) throws {
        try dir.write("conf/app.yaml", """
            version: 1
            stores:
              a:
                path: ../data/a.sqlite
                schema: ../schema.sql
                entities:
                  notes:
                    unique: [uuid]
                cloud:
                  container: iCloud.com.example.hints
                  url: file:../cloud/shared.container
                  create_if_missing: true
                  account: demo
                  secret: ${HINT_SECRET:-demo-secret}
              b:
                path: ../data/b.sqlite
                schema: ../schema.sql
                cloud:
                  container: iCloud.com.example.hints
                  url: file:../cloud/shared.container
                  create_if_missing: true
                  account: demo
                  secret: ${HINT_SECRET:-demo-secret}
            """)
        try dir.write("schema.sql", "CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT);\n")
    }

    func storectl(_ dir: TempDirectory, _ args: [String], env: [String: String] = [:]) throws -> ProcessResult {
        try Binary.storectl(["--config", "conf/app.yaml"] + args, in: dir.path, environment: env)
    }

    func sql(_ dir: TempDirectory, _ store: String, _ statement: String) throws {
        let r = try Binary.run("/usr/bin/sqlite3", [dir.file("data/\(store).sqlite"), statement], in: dir.path)
        XCTAssertEqual(r.status, 0, "\(r)")
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
        var setUp: (TempDirectory) throws -> Void
        var args: [String]
    }

    func testEveryHintPastedOnATwoStoreConfigRuns() throws {
        let cases: [Case] = [
            Case(name: "no --store", setUp: { _ in }, args: ["sync"]),
            Case(name: "store file missing", setUp: { _ in }, args: ["--store", "a", "history"]),
            Case(name: "local mode sync", setUp: { d in _ = try self.storectl(d, ["--store", "a", "init"]) },
                 args: ["--store", "a", "sync"]),
            Case(name: "drift", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "init"])
                try self.sql(d, "a", "ALTER TABLE notes ADD COLUMN pinned INTEGER")
            }, args: ["--store", "a", "doctor"]),
            Case(name: "triggers missing", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "init"])
                try self.sql(d, "a", "DROP TRIGGER IF EXISTS \"_storectl_notes_insert\"; "
                             + "SELECT 'x' FROM sqlite_master WHERE 0;")
                let names = try Binary.run("/usr/bin/sqlite3", [d.file("data/a.sqlite"),
                                           "SELECT name FROM sqlite_master WHERE type='trigger'"], in: d.path)
                for name in names.stdout.split(separator: "\n") {
                    try self.sql(d, "a", "DROP TRIGGER \"\(name)\"")
                }
            }, args: ["--store", "a", "sync"]),
            Case(name: "mode disagreement", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "mode", "cloud"])
                try self.sql(d, "a", "UPDATE _storectl_meta SET value = 'local' WHERE key = 'mode'")
            }, args: ["--store", "a", "doctor"]),
            Case(name: "status disagreement", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "mode", "cloud"])
                try self.sql(d, "a", "UPDATE _storectl_meta SET value = 'local' WHERE key = 'mode'")
            }, args: ["status"]),
            Case(name: "copied store", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "mode", "cloud"])
                try? FileManager.default.removeItem(atPath: d.file("data/b.sqlite"))
                try FileManager.default.copyItem(atPath: d.file("data/a.sqlite"), toPath: d.file("data/b.sqlite"))
            }, args: ["--store", "b", "sync"]),
            Case(name: "zone purged", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "mode", "cloud"])
                _ = try self.storectl(d, ["--store", "b", "mode", "cloud"])
                _ = try self.storectl(d, ["--store", "b", "cloud", "purge", "--yes"])
            }, args: ["--store", "a", "sync"]),
            Case(name: "duplicates", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "init"])
                try self.sql(d, "a", "INSERT INTO notes(uuid) VALUES ('same'), ('same')")
            }, args: ["--store", "a", "doctor"]),
            Case(name: "prune without a rule", setUp: { d in _ = try self.storectl(d, ["--store", "a", "init"]) },
                 args: ["--store", "a", "history", "prune"]),
            Case(name: "config set mode", setUp: { _ in }, args: ["config", "set", "stores.a.mode", "cloud"]),
            Case(name: "container missing", setUp: { d in
                try d.write("conf/app.yaml", try d.read("conf/app.yaml")
                    .replacingOccurrences(of: "create_if_missing: true", with: "create_if_missing: false"))
                _ = try self.storectl(d, ["--store", "a", "init"])
            }, args: ["--store", "a", "mode", "cloud"]),
            Case(name: "bound to another account", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "mode", "cloud"])
                try self.sql(d, "a", "UPDATE _storectl_meta SET value = 'someone' WHERE key = 'bound_account'")
            }, args: ["--store", "a", "sync"]),
            Case(name: "an account the container does not know", setUp: { d in
                _ = try self.storectl(d, ["--store", "a", "mode", "cloud"])
                let text = try d.read("conf/app.yaml")
                let at = try XCTUnwrap(text.range(of: "  b:"))
                try d.write("conf/app.yaml", text[..<at.lowerBound]
                    + text[at.lowerBound...].replacingOccurrences(of: "account: demo", with: "account: ghost"))
            }, args: ["--store", "b", "mode", "cloud"]),
            Case(name: "not initialised, new identity", setUp: { _ in },
                 args: ["--store", "a", "init", "--new-identity"]),
            Case(name: "completions without a shell", setUp: { _ in }, args: ["completions"]),
            Case(name: "bad schema format", setUp: { _ in }, args: ["--store", "a", "cloud", "schema", "--format", "ckd"]),
            Case(name: "store add without --like", setUp: { _ in }, args: ["store", "add", "c"]),
        ]
        var pasted = 0
        for c in cases {
            let dir = try TempDirectory()
            try makeTwoStores(dir)
            try c.setUp(dir)
            let r = try storectl(dir, c.args)
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
                if !command.hasPrefix("storectl --config conf/app.yaml help")
                    && !command.hasPrefix("storectl --config conf/app.yaml completions")
                    && !command.hasPrefix("storectl --config conf/app.yaml store add") {
                    XCTAssertTrue(command.contains("--store "), "\(c.name): \(command) lacks --store")
                }
                // Paste it: the shell reads it as printed, in the same folder.
                let run = try Binary.run("/bin/sh", ["-c", command.replacingOccurrences(of: "storectl ",
                                                                                       with: Binary.storectl + " ",
                                                                                       options: .anchored)],
                                         in: dir.path, stdin: "a-secret-for-a-new-account\n")
                XCTAssertNotEqual(run.status, 64, "\(c.name): pasting '\(command)' exits 64\n\(run)")
                pasted += 1
            }
        }
        XCTAssertGreaterThanOrEqual(pasted, cases.count)
    }

    /// The same hints on a one-store config at the default place name no option at all.
    func testOnOneStoreAtTheDefaultPlaceHintsAreBare() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", """
            version: 1
            stores:
              a:
                path: a.sqlite
            """)
        let r = try Binary.storectl(["history"], in: dir.path)
        XCTAssertEqual(r.status, 66, "\(r)")
        XCTAssertTrue(r.stderr.contains("'storectl config set stores.a.path "), r.stderr)
        let json = try Binary.storectl(["--json", "history"], in: dir.path)
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
