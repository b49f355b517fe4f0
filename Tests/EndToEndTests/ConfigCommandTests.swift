import Foundation
import TestSupport
import XCTest

final class ConfigCommandTests: XCTestCase {
    let commented = """
        # storectl config for the notes app — café 🎉
        version: 1

        stores:
          notes:                              # store name, used by --store
            path: data/notes.sqlite           # relative paths resolve here
            mode: local                       # local | cloud (default local)
            history:
              tracking: true                  # must stay true
              author: "app"
            cloud:
              container: iCloud.com.example.notes
              url: file:cloud/notes.container # the embedded default backend
              create_if_missing: true
              secret: ${STORECTL_SECRET:-demo-secret}

        # the end

        """

    func testSetChangesExactlyOneLine() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", commented)
        let result = try Binary.storectl(["config", "set", "stores.notes.path", "data/other.sqlite"], in: dir.path)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(result.stdout, "")
        XCTAssertEqual(result.stderr, "config.yaml:6: stores.notes.path: 'data/notes.sqlite' -> 'data/other.sqlite'\n")
        let before = commented.components(separatedBy: "\n")
        let after = try dir.read("config.yaml").components(separatedBy: "\n")
        XCTAssertEqual(before.count, after.count)
        let changed = zip(before, after).enumerated().filter { $0.element.0 != $0.element.1 }
        XCTAssertEqual(changed.map(\.offset), [5])
        XCTAssertEqual(changed.first?.element.1, "    path: data/other.sqlite           # relative paths resolve here")
        let validate = try Binary.storectl(["config", "validate"], in: dir.path)
        XCTAssertEqual(validate.status, 0, "\(validate)")
    }

    /// A mode written alone would leave the store in its old mode: config set refuses, naming the mode command.
    func testSetModeRefusesAndNamesTheModeCommand() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", commented)
        let result = try Binary.storectl(["config", "set", "stores.notes.mode", "cloud"], in: dir.path)
        XCTAssertEqual(result.status, 64, "\(result)")
        XCTAssertTrue(result.stderr.contains("hint: run 'storectl mode cloud' to switch it"), result.stderr)
        XCTAssertEqual(try dir.read("config.yaml"), commented)
        let same = try Binary.storectl(["config", "set", "stores.notes.mode", "local"], in: dir.path)
        XCTAssertEqual(same.status, 0, "\(same)")
        XCTAssertEqual(try dir.read("config.yaml"), commented)
        // On a two-store config, the hint names the store.
        try dir.write("config.yaml", commented.replacingOccurrences(of: "\n# the end", with: """
              other:
                path: data/other.sqlite
            # the end
            """))
        let two = try Binary.storectl(["config", "set", "stores.notes.mode", "cloud"], in: dir.path)
        XCTAssertTrue(two.stderr.contains("hint: run 'storectl --store notes mode cloud'"), two.stderr)
    }

    func testSetJSONAndQuiet() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", commented)
        let result = try Binary.storectl(["--json", "--quiet", "config", "set", "stores.notes.cloud.zone", "shared"],
                                         in: dir.path)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(result.stderr, "")
        let doc = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["key"] as? String, "stores.notes.cloud.zone")
        XCTAssertEqual(doc["new"] as? String, "shared")
        XCTAssertEqual(doc["inserted"] as? Bool, true)
        XCTAssertEqual(doc["line"] as? Int, 16)
        XCTAssertTrue(try dir.read("config.yaml").contains(
            "      secret: ${STORECTL_SECRET:-demo-secret}\n      zone: shared\n\n# the end\n"))
    }

    func testSetRefusesAnInvalidResultAndLeavesTheFileAlone() throws {
        let dir = try TempDirectory()
        let path = try dir.write("config.yaml", commented)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let result = try Binary.storectl(["config", "set", "stores.notes.history.tracking", "false"], in: dir.path)
        XCTAssertEqual(result.status, 78, "\(result)")
        XCTAssertEqual(result.stderr, """
            config.yaml:9:17: error: stores.notes.history.tracking: history tracking cannot be turned off
                9 |       tracking: false                  # must stay true
                  |                 ^
            note: that is config.yaml as this edit would write it; config.yaml was not changed
            hint: history tracking is what lets data survive a switch between local and cloud mode; \
            remove the line or write 'tracking: true'

            """)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), before)
        let unknown = try Binary.storectl(["config", "set", "stores.notes.mdoe", "cloud"], in: dir.path)
        XCTAssertEqual(unknown.status, 64, "\(unknown)")
        XCTAssertEqual(unknown.stderr, "error: unknown key 'stores.notes.mdoe'\nhint: did you mean 'stores.notes.mode'?\n"
                       + "usage: storectl config set <key> <value> [options]\n")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), before)
    }

    func testAKillBeforeTheRenameLeavesTheOldFile() throws {
        let dir = try TempDirectory()
        let path = try dir.write("config.yaml", commented)
        let result = try Binary.storectl(["config", "set", "stores.notes.cloud.zone", "shared"], in: dir.path,
                                         environment: ["STORECTL_FAILPOINT": "config.before-rename"])
        XCTAssertEqual(result.status, 128 + 9, "\(result)")
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), commented)
        let after = try Binary.storectl(["config", "set", "stores.notes.cloud.zone", "shared"], in: dir.path)
        XCTAssertEqual(after.status, 0, "\(after)")
        XCTAssertTrue(try dir.read("config.yaml").contains("      zone: shared"))
    }

    func testValidate() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", commented)
        let ok = try Binary.storectl(["config", "validate"], in: dir.path)
        XCTAssertEqual(ok.status, 0, "\(ok)")
        XCTAssertEqual(ok.stdout, "config.yaml: ok (1 store: notes)\n")
        XCTAssertEqual(ok.stderr, "")
        let json = try Binary.storectl(["config", "validate", "--json"], in: dir.path)
        let doc = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["ok"] as? Bool, true)
        XCTAssertEqual(doc["stores"] as? [String], ["notes"])

        try dir.write("other.yaml", "version: 1\nstores:\n  a:\n    path: a.sqlite\n  b:\n    path: b.sqlite\n")
        let two = try Binary.storectl(["--config", "other.yaml", "config", "validate"], in: dir.path)
        XCTAssertEqual(two.stdout, "other.yaml: ok (2 stores: a, b)\n")
        let env = try Binary.storectl(["config", "validate"], in: dir.path, environment: ["STORECTL_CONFIG": "other.yaml"])
        XCTAssertEqual(env.stdout, "other.yaml: ok (2 stores: a, b)\n")
    }

    func testValidateWithATypoPrintsLocationSourceCaretAndHint() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", commented.replacingOccurrences(of: "mode: local", with: "mode: clod"))
        let result = try Binary.storectl(["config", "validate"], in: dir.path)
        XCTAssertEqual(result.status, 78)
        XCTAssertEqual(result.stdout, "")
        XCTAssertEqual(result.stderr, """
            config.yaml:7:11: error: stores.notes.mode: expected one of local, cloud, got 'clod'
                7 |     mode: clod                       # local | cloud (default local)
                  |           ^
            hint: did you mean 'cloud'?

            """)
        let json = try Binary.storectl(["config", "validate", "--json"], in: dir.path)
        XCTAssertEqual(json.status, 78)
        let doc = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let error = try XCTUnwrap(doc["error"] as? [String: Any])
        XCTAssertEqual(error["location"] as? String, "config.yaml:7:11")
        XCTAssertEqual(error["code"] as? Int, 78)
    }

    func testMalformedConfigsThroughTheBinary() throws {
        let cases: [(String, String)] = [
            ("version: 1\nstores:\n  notes:\n\tpath: a.sqlite\n",
             "config.yaml:4:1: error: invalid YAML: found character that cannot start any token"),
            ("version: 1\nstores:\n  notes:\n    path: a.sqlite\n    mdoe: cloud\n",
             "config.yaml:5:5: error: stores.notes.mdoe: unknown key"),
            ("version: 1\nstores:\n  notes:\n    path: a.sqlite\n    path: b.sqlite\n",
             "config.yaml:5:5: error: stores.notes.path: duplicate key, first set at line 4"),
            ("version: 1\nstores:\n  notes:\n    path: ${DATA_DIR}/a.sqlite\n",
             "config.yaml:4:11: error: stores.notes.path: environment variable 'DATA_DIR' is not set"),
            ("version: 1\nstores:\n  notes:\n    path: a.sqlite\n    cloud:\n      container: notes\n      url: x:y\n",
             "config.yaml:6:18: error: stores.notes.cloud.container: 'notes' is not a container id"),
            ("version: 2\nstores:\n  notes:\n    path: a.sqlite\n",
             "config.yaml:1:10: error: version: unsupported version 2; this storectl reads version 1"),
        ]
        let dir = try TempDirectory()
        for (text, first) in cases {
            try dir.write("config.yaml", text)
            let result = try Binary.storectl(["config", "validate"], in: dir.path)
            XCTAssertEqual(result.status, 78, "\(result)")
            let lines = result.stderr.components(separatedBy: "\n")
            XCTAssertEqual(lines.first, first)
            let line = first.split(separator: ":")[1]
            XCTAssertTrue(lines.count > 2 && lines[1].hasPrefix(String(repeating: " ", count: 5 - line.count) + line + " | "),
                          result.stderr)
            XCTAssertTrue(lines.count > 2 && lines[2].hasPrefix("      | ") && lines[2].hasSuffix("^"), result.stderr)
        }
    }

    func testMissingConfigIs66() throws {
        let dir = try TempDirectory()
        let result = try Binary.storectl(["config", "validate"], in: dir.path)
        XCTAssertEqual(result.status, 66)
        XCTAssertEqual(result.stderr, "error: config file config.yaml not found\nhint: create it (see "
                       + "docs/config-reference.md), or point --config or STORECTL_CONFIG at it\n")
    }

    func testShowRedactsSecretsAndWarnsAboutLiteralOnes() throws {
        let dir = try TempDirectory()
        let text = commented
            .replacingOccurrences(of: "${STORECTL_SECRET:-demo-secret}", with: "hunter2")
            .replacingOccurrences(of: "file:cloud/notes.container", with: "postgres://app:pa55word@db.example.com/cloud")
        let path = try dir.write("config.yaml", text)
        chmod(path, 0o644)
        let warning = "warning: stores.notes.cloud.secret is written in config.yaml, which other users can read; "
            + "use 'secret: ${VARIABLE}' or run 'chmod 600 config.yaml'\n"
        for args in [["config", "show"], ["config", "show", "--resolved"], ["config", "show", "--resolved", "--json"],
                     ["config", "get", "stores.notes.cloud"], ["config", "get", "stores.notes.cloud.secret"]]
        {
            let result = try Binary.storectl(args, in: dir.path)
            XCTAssertEqual(result.status, 0, "\(args) \(result)")
            XCTAssertFalse(result.stdout.contains("hunter2") || result.stdout.contains("pa55word"), result.stdout)
            XCTAssertTrue(result.stdout.contains("<redacted>"), result.stdout)
            XCTAssertEqual(result.stderr, warning)
        }
        chmod(path, 0o600)
        let quiet = try Binary.storectl(["config", "validate"], in: dir.path)
        XCTAssertEqual(quiet.stderr, "")
    }

    func testShowAsWrittenAndResolved() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", commented)
        let shown = try Binary.storectl(["config", "show"], in: dir.path, environment: ["STORECTL_SECRET": "s"])
        XCTAssertEqual(shown.status, 0, "\(shown)")
        XCTAssertEqual(shown.stdout, """
            version: 1
            stores:
              notes:
                path: data/notes.sqlite
                mode: local
                history:
                  tracking: true
                  author: app
                cloud:
                  container: iCloud.com.example.notes
                  url: file:cloud/notes.container
                  create_if_missing: true
                  secret: <redacted>

            """)
        let resolved = try Binary.storectl(["config", "show", "--resolved", "--json"], in: dir.path)
        let doc = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(resolved.stdout.utf8)) as? [String: Any])
        let notes = try XCTUnwrap((doc["stores"] as? [String: Any])?["notes"] as? [String: Any])
        let real = URL(fileURLWithPath: dir.path).resolvingSymlinksInPath().path
        XCTAssertTrue([dir.path + "/data/notes.sqlite", real + "/data/notes.sqlite"].contains(notes["path"] as? String),
                      "\(notes)")
        let cloud = try XCTUnwrap(notes["cloud"] as? [String: Any])
        XCTAssertEqual(cloud["zone"] as? String, "default")
        XCTAssertEqual(cloud["merge_policy"] as? String, "property-local-wins")
        XCTAssertEqual(cloud["max_delete_fraction"] as? Double, 0.5)
        // The variable the secret comes from is named; its default, a secret too, is not.
        XCTAssertEqual(cloud["secret"] as? String, "${STORECTL_SECRET:-<redacted>}")
        let both = try Binary.storectl(["--json", "config", "show", "--yaml"], in: dir.path)
        XCTAssertEqual(both.status, 64)
        let raw = try Binary.storectl(["--no-expand-env", "config", "get", "stores.notes.cloud.url"], in: dir.path)
        XCTAssertTrue(raw.stdout.hasSuffix("/cloud/notes.container\n"), "\(raw)")
    }

    func testNoExpandEnvShowsReferencesAsWritten() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", "version: 1\nstores:\n  notes:\n    path: ${DATA_DIR}/notes.sqlite\n")
        let expanded = try Binary.storectl(["config", "show"], in: dir.path)
        XCTAssertEqual(expanded.status, 78)
        let raw = try Binary.storectl(["config", "show", "--no-expand-env"], in: dir.path)
        XCTAssertEqual(raw.status, 0, "\(raw)")
        XCTAssertEqual(raw.stdout, "version: 1\nstores:\n  notes:\n    path: ${DATA_DIR}/notes.sqlite\n")
        let set = try Binary.storectl(["config", "show"], in: dir.path, environment: ["DATA_DIR": "/var/lib/notes"])
        XCTAssertEqual(set.stdout, "version: 1\nstores:\n  notes:\n    path: /var/lib/notes/notes.sqlite\n")
    }

    func testGet() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", commented)
        let mode = try Binary.storectl(["config", "get", "stores.notes.mode"], in: dir.path)
        XCTAssertEqual(mode.stdout, "local\n")
        let zone = try Binary.storectl(["config", "get", "stores.notes.cloud.zone"], in: dir.path)
        XCTAssertEqual(zone.stdout, "default\n")
        let history = try Binary.storectl(["config", "get", "stores.notes.history"], in: dir.path)
        XCTAssertEqual(history.stdout, "tracking: true\nauthor: app\n")
        let json = try Binary.storectl(["--json", "config", "get", "stores.notes.history"], in: dir.path)
        let doc = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["key"] as? String, "stores.notes.history")
        XCTAssertEqual((doc["value"] as? [String: Any])?["author"] as? String, "app")
        let unset = try Binary.storectl(["config", "get", "stores.notes.cloud.account"], in: dir.path)
        XCTAssertEqual(unset.status, 1)
        XCTAssertEqual(unset.stdout, "")
        XCTAssertEqual(unset.stderr, "stores.notes.cloud.account is not set in config.yaml\n")
        let unknown = try Binary.storectl(["config", "get", "stores.notes.mdoe"], in: dir.path)
        XCTAssertEqual(unknown.status, 64)
        XCTAssertEqual(unknown.stderr, "error: unknown key 'stores.notes.mdoe'\nhint: did you mean 'stores.notes.mode'?\n"
                       + "usage: storectl config get <key> [options]\n")
        let store = try Binary.storectl(["config", "get", "stores.note.mode"], in: dir.path)
        XCTAssertEqual(store.status, 64)
        XCTAssertEqual(store.stderr, "error: no store named 'note' in config.yaml\nhint: did you mean 'stores.notes'?\n"
                       + "usage: storectl config get <key> [options]\n")
    }

    func testEverySubcommandHasHelpWithExamples() throws {
        let dir = try TempDirectory()
        for sub in ["validate", "show", "get", "set"] {
            let result = try Binary.storectl(["config", sub, "--help"], in: dir.path)
            XCTAssertEqual(result.status, 0)
            XCTAssertTrue(result.stdout.contains("USAGE: storectl config \(sub)"), result.stdout)
            XCTAssertTrue(result.stdout.contains("EXAMPLES:\n  storectl config \(sub)"), result.stdout)
        }
        let group = try Binary.storectl(["config", "--help"], in: dir.path)
        for sub in ["validate", "show", "get", "set"] { XCTAssertTrue(group.stdout.contains("  \(sub) "), group.stdout) }
    }
}
