import Foundation
import TestSupport
import XCTest

/// Advice that is right for the situation it is given in, and works when pasted: the command that shows which
/// variable a secret comes from, a `--store` hint that names the config once, `init` for a store just added, and
/// the way on when `mode cloud` must import first.
final class AdviceTests: XCTestCase {
    /// Runs every `'storectl ...'` command quoted in `hint`, in order, as the shell reads it, in `folder`.
    func paste(_ hint: String, in folder: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> [ProcessResult]
    {
        let commands = HintPasteTests.commands(in: hint)
        XCTAssertFalse(commands.isEmpty, "no command in: \(hint)", file: file, line: line)
        return try commands.map { command in
            try Binary.run("/bin/sh", ["-c", command.replacingOccurrences(of: "storectl ", with: Binary.storectl + " ",
                                                                          options: .anchored)], in: folder)
        }
    }

    static func hint(_ r: ProcessResult) -> String {
        r.stderr.split(separator: "\n").first { $0.hasPrefix("hint: ") }.map { String($0.dropFirst(6)) } ?? ""
    }

    func testConfigGetNamesTheVariableASecretComesFromNeverItsValue() throws {
        let p = try E2EProject(label: "storectl-advice")
        let cases: [(written: String, shown: String)] = [
            ("${NOTES_SECRET}", "${NOTES_SECRET}"),
            ("\"${NOTES_SECRET}\"", "${NOTES_SECRET}"),
            ("${NOTES_SECRET:-fallback-value}", "${NOTES_SECRET:-<redacted>}"),
            ("literal-value", "<redacted>"),
            ("pre-${NOTES_SECRET}", "<redacted>"),
        ]
        p.environment["NOTES_SECRET"] = "value-from-env"
        for c in cases {
            try p.writeConfig([E2EProject.Store("a", schema: nil, cloud: .file("iCloud.com.example.advice",
                                                                              secret: c.written))])
            let r = try p.run(["config", "get", "stores.a.cloud.secret"])
            XCTAssertEqual(r.stdout, c.shown + "\n", c.written)
            let json = try p.run(["--json", "config", "get", "stores.a.cloud"])
            XCTAssertTrue(json.stdout.contains("\"secret\" : \"\(c.shown)\""), json.stdout)
            for r in [r, json] {
                for value in ["value-from-env", "fallback-value", "literal-value", "pre-"] {
                    XCTAssertFalse(r.stdout.contains(value) || r.stderr.contains(value), "\(c.written): \(r)")
                }
            }
        }
    }

    func testTheStoreHintNamesTheConfigOnce() throws {
        let p = try E2EProject(label: "storectl-advice", configFile: "conf/app.yaml")
        try p.writeConfig(["a", "b"].map { E2EProject.Store($0, schema: nil, cloud: .file("iCloud.com.example.advice")) })
        for args in [["--config", "conf/app.yaml", "history"], ["history", "--config", "conf/app.yaml"],
                     ["--config=conf/app.yaml", "history"], ["-c", "conf/app.yaml", "history"]]
        {
            let r = try Binary.storectl(args, in: p.dir.path)
            XCTAssertEqual(r.status, 64, "\(args)\n\(r)")
            XCTAssertEqual(Self.hint(r), "run 'storectl --config conf/app.yaml --store a history'", "\(args)\n\(r)")
        }
    }

    func testAStoreJustAddedIsToldToCreateIt() throws {
        let p = try E2EProject(label: "storectl-advice")
        try p.writeSchema()
        try p.writeConfig([E2EProject.Store("a", cloud: .file("iCloud.com.example.advice"))])
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["store", "add", "c", "--like", "a"])
        let status = try p.run(["--store", "c", "status"], expect: 66)
        let hint = Self.hint(status)
        XCTAssertTrue(hint.contains("create it with 'storectl --store c init'"), status.stderr)
        XCTAssertTrue(status.stdout.contains("\n    hint: if the store is new"), status.stdout)
        XCTAssertTrue(status.stdout.contains("'storectl --store c init'"), status.stdout)
        // The first command of the hint, pasted, makes the store; then nothing is wrong with it.
        let first = try XCTUnwrap(HintPasteTests.commands(in: hint).first)
        XCTAssertEqual(first, "storectl --store c init")
        let pasted = try paste("'\(first)'", in: p.dir.path)
        XCTAssertEqual(pasted.first?.status, 0, "\(pasted)")
        try p.run(["--store", "c", "status"])
        // A store config.yaml has in cloud mode was made and synced: its missing file is never answered with init.
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: p.storePath("a") + suffix) }
        let moved = try p.run(["--store", "a", "status"], expect: 66)
        XCTAssertFalse((moved.stdout + moved.stderr).contains(" init'"), moved.stdout + moved.stderr)
        XCTAssertTrue(moved.stderr.contains("'storectl --store a config set stores.a.path NEW_PATH'"), moved.stderr)
    }

    /// `mode cloud` that meets a record to import first (a label edited here while another store reordered a list
    /// under a UNIQUE column) exits 75; its hint, pasted as printed, switches the store and syncs it.
    func testModeCloudThatMustImportFirstGivesAHintThatWorks() throws {
        let p = try E2EProject(label: "storectl-advice")
        try p.writeSchema("CREATE TABLE IF NOT EXISTS items(k TEXT PRIMARY KEY, slot INTEGER NOT NULL UNIQUE, label TEXT);")
        try p.writeConfig(["a", "b"].map { E2EProject.Store($0, cloud: .file("iCloud.com.example.advice")) })
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        try p.sql("a", "INSERT INTO items VALUES ('a', 1, 'A'), ('b', 2, 'B'), ('c', 3, 'C'), ('d', 4, 'D')")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "b", "sync"])
        try p.run(["--store", "b", "mode", "local"])
        try p.sql("b", "UPDATE items SET label = 'B by b' WHERE k = 'b'")
        try p.sql("a", "UPDATE items SET slot = -slot; UPDATE items SET slot = 1 WHERE k = 'd'; "
                  + "UPDATE items SET slot = -slot + 1 WHERE slot < 0")
        try p.run(["--store", "a", "sync"])
        let refused = try p.run(["--store", "b", "mode", "cloud"], expect: 75)
        let hint = Self.hint(refused)
        XCTAssertEqual(hint, "run 'storectl --store b mode cloud --no-sync', then 'storectl --store b sync' (it "
                       + "imports the cloud's changes, then exports)", refused.stderr)
        XCTAssertFalse(hint.contains("'storectl --store b sync' again"), hint)
        XCTAssertEqual(try p.run(["--store", "b", "mode"]).stdout, "local\n")
        for r in try paste(hint, in: p.dir.path) { XCTAssertEqual(r.status, 0, "\(r)") }
        try p.run(["--store", "a", "sync"])
        let expected = "a|2|A\nb|3|B by b\nc|4|C\nd|1|D\n"
        XCTAssertEqual(try p.sql("a", "SELECT k, slot, label FROM items ORDER BY k"), expected)
        XCTAssertEqual(try p.sql("b", "SELECT k, slot, label FROM items ORDER BY k"), expected)
        try p.run(["status"])
    }
}
