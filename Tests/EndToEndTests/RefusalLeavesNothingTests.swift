import Foundation
import TestSupport
import XCTest

/// Every refusal leaves the directory as it was: the same files and folders, with the same bytes. Each case
/// compares a listing with checksums taken before and after the command.
final class RefusalLeavesNothingTests: XCTestCase {
    /// Every file and folder under `dir` (SQLite's -shm files aside, which readers rewrite), with its bytes.
    static func listing(_ dir: TempDirectory) -> [String: Data?] {
        var result: [String: Data?] = [:]
        let e = FileManager.default.enumerator(atPath: dir.path)
        while let f = e?.nextObject() as? String {
            guard !f.hasSuffix("-shm") else { continue }
            var isDir: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: dir.file(f), isDirectory: &isDir)
            result[f] = isDir.boolValue ? nil : FileManager.default.contents(atPath: dir.file(f))
        }
        return result
    }

    /// The config of one store `notes` at `store` on the container file cloud/notes.container; `extra` are YAML
    /// lines of the store before its `cloud:` section.
    func config(_ store: String, extra: [String] = []) -> String {
        E2EProject.yaml([E2EProject.Store("notes", path: store, before: extra,
                                          cloud: .file("iCloud.com.example.notes", url: "file:cloud/notes.container",
                                                       secret: "demo-secret"))])
    }

    /// Runs storectl and checks the exit code and that nothing in the project's folder changed.
    func expectNothingChanged(_ p: E2EProject, _ args: [String], code: Int32, message: String,
                              env: [String: String] = [:], file: StaticString = #filePath, line: UInt = #line) throws
    {
        let before = Self.listing(p.dir)
        let r = try p.run(args, expect: code, env: env, file: file, line: line)
        XCTAssertTrue(r.stderr.contains(message), "stderr lacks '\(message)'\n\(r)", file: file, line: line)
        let after = Self.listing(p.dir)
        XCTAssertEqual(Set(after.keys), Set(before.keys), "files created or removed\n\(r)", file: file, line: line)
        for (path, data) in before where after[path] != data {
            XCTFail("\(path) changed\n\(r)", file: file, line: line)
        }
    }

    func testAFailedModeCloudRemovesTheFilesItCreated() throws {
        let p = try E2EProject(label: "storectl-nothing")
        try p.writeSchema("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);")
        // The store path is a folder: exit 73, and the container it would have created is not there.
        try FileManager.default.createDirectory(atPath: p.dir.file("data/notes.sqlite"),
                                                withIntermediateDirectories: true)
        try p.dir.write("config.yaml", config("data/notes.sqlite"))
        try expectNothingChanged(p, ["mode", "cloud"], code: 73, message: "notes.sqlite")
        try FileManager.default.removeItem(atPath: p.dir.file("data"))
        // An entity names a table that does not exist: exit 78, and neither the store nor the container (nor their
        // folders) stays.
        try p.dir.write("config.yaml", config("data/notes.sqlite", extra: ["entities:", "  missing: {}"]))
        try expectNothingChanged(p, ["mode", "cloud"], code: 78, message: "missing")
        try expectNothingChanged(p, ["sync"], code: 66, message: "does not exist")
        // The schema SQL fails: exit 65.
        try p.dir.write("config.yaml", config("data/notes.sqlite"))
        try p.writeSchema("CREATE TABLE notes(id INTEGER PRIMARY KEY); THIS IS NOT SQL;")
        try expectNothingChanged(p, ["mode", "cloud"], code: 65, message: "schema")
        try expectNothingChanged(p, ["init"], code: 65, message: "schema")
        // The same config, fixed, works.
        try p.writeSchema("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);")
        try p.run(["mode", "cloud"])
    }

    func testBadValuesAreRefusedBeforeAnythingIsCreated() throws {
        let p = try E2EProject(label: "storectl-nothing")
        try p.writeSchema("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);")
        let cases: [(String, [String: String], String)] = [
            (config("\"data/no\\0tes.sqlite\""), [:], "control character U+0000"),
            (config("${DIR}/notes.sqlite"), ["DIR": "data\nevil"], "control character U+000A"),
            (config("data/notes.sqlite").replacingOccurrences(of: "account: demo", with: "account: ${ACCOUNT}"),
             ["ACCOUNT": "a b"], "'a b' is not a valid account id"),
            (config("data/notes.sqlite").replacingOccurrences(of: "url: file:cloud/notes.container",
                                                              with: "url: \"file:cloud/no\\0tes.container\""),
             [:], "control character U+0000"),
            (config("data/notes.sqlite").replacingOccurrences(of: "url: file:cloud/notes.container",
                                                              with: "url: postgres://u@db:99999/x"),
             [:], "'99999' is not a port number"),
            (config("~bob/notes.sqlite"), [:], "'~user' paths are not supported"),
            (config("data/notes.sqlite", extra: ["history: {retention: 200000000000d}"]), [:], "retention"),
        ]
        for (text, env, message) in cases {
            try p.dir.write("config.yaml", text)
            for args in [["config", "validate"], ["mode", "cloud"], ["init"], ["status"]] {
                try expectNothingChanged(p, args, code: 78, message: message, env: env)
            }
        }
        // Numbers out of range on the command line: a usage error, never a trap.
        try p.dir.write("config.yaml", config("data/notes.sqlite"))
        try p.run(["init"])
        for args in [["history", "prune", "--older-than", "200000000000d"], ["history", "prune", "--older-than", "1e9d"],
                     ["history", "--limit", "99999999999999999999"], ["seed", "--timeout", "inf"],
                     ["history", "--after", "-99999999999999999999"]]
        {
            try expectNothingChanged(p, args, code: 64, message: "error: ")
        }
    }

    /// `path: ~/x` is the home folder's x, as in a shell: no folder named '~' appears.
    func testATildePathIsTheHomeFolder() throws {
        let p = try E2EProject(label: "storectl-nothing")
        let home = try TempDirectory("storectl-home")
        try p.writeSchema("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);")
        try p.dir.write("config.yaml", config("~/stores/notes.sqlite"))
        try p.run(["init"], env: ["HOME": home.path])
        XCTAssertTrue(FileManager.default.fileExists(atPath: home.file("stores/notes.sqlite")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("~")))
        let shown = try p.run(["config", "get", "stores.notes.path"], env: ["HOME": home.path])
        XCTAssertEqual(shown.stdout, home.file("stores/notes.sqlite") + "\n")
    }

    /// Read-only commands open the store read-only: a store its user may only read can still be inspected.
    func testHistoryAndDoctorReadAReadOnlyStore() throws {
        let s = try Fleet.notes(label: "storectl-readonly")
        try s.run("a", ["mode", "cloud"])
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        try s.run("a", ["sync"])
        _ = try Binary.run("/usr/bin/sqlite3", [s.dir.file("data/a.sqlite"), "PRAGMA wal_checkpoint(TRUNCATE)"],
                           in: s.dir.path)
        chmod(s.dir.path, 0o755)
        for f in ["config.yaml", "cloud", "cloud/shared.container", "data", "data/a.sqlite"] {
            chown(s.dir.file(f), 65534, 65534)
        }
        for suffix in ["-wal", "-shm"] { chown(s.dir.file("data/a.sqlite" + suffix), 65534, 65534) }
        chmod(s.dir.file("data/a.sqlite"), 0o444)
        let nobody = getuid() == 0 ? ["/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] : []
        func run(_ args: [String]) throws -> ProcessResult {
            nobody.isEmpty ? try Binary.storectl(["--store", "a"] + args, in: s.dir.path)
                : try Binary.run(nobody[0], Array(nobody.dropFirst()) + [Binary.storectl, "--store", "a"] + args,
                                 in: s.dir.path, environment: ["HOME": s.dir.path])
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: s.dir.file("data/a.sqlite")))
        let history = try run(["history", "--json"])
        XCTAssertEqual(history.status, 0, "\(history)")
        XCTAssertTrue(history.stdout.contains("\"notes\""), history.stdout)
        let doctor = try run(["doctor"])
        XCTAssertFalse([73, 74, 77].contains(doctor.status), "\(doctor)")
        XCTAssertTrue(doctor.stdout.contains("checked history"), "\(doctor)")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: s.dir.file("data/a.sqlite"))), before)
        // A command that writes says why it cannot.
        let sync = try run(["sync"])
        XCTAssertTrue([73, 77].contains(sync.status), "\(sync)")
    }
}
