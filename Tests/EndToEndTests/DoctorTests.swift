import Foundation
import StoreCloud
import TestSupport
import XCTest

/// `storectl doctor`: each problem is found, named with its fix, and nothing is changed.
final class DoctorTests: XCTestCase {
    static let extra = """
            entities:
              notes:
                unique: [uuid]
              tags: {}
              note_tags: {}
              settings: {}

        """

    func synced() throws -> Fleet {
        let s = try Fleet.notes(extra: Self.extra, label: "storectl-doctor")
        try s.run("a", ["mode", "local"])
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        s.modes = ["a": "cloud", "b": "cloud"]
        return s
    }

    struct Finding: Equatable {
        var check: String
        var fix: String
        var exitCode: Int
    }

    /// Runs `doctor --json` on store a and returns its exit status and findings, checking the document's shape.
    func doctor(_ s: Fleet, store: String = "a", env: [String: String] = [:], file: StaticString = #filePath,
                line: UInt = #line) throws -> (Int32, [Finding])
    {
        let r = try s.run(store, ["--json", "doctor"], env: env, expect: nil)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any],
                                 "\(r)", file: file, line: line)
        let stores = json["stores"] as? [[String: Any]] ?? []
        XCTAssertEqual(stores.count, 1, file: file, line: line)
        let findings = (stores.first?["findings"] as? [[String: Any]] ?? []).map {
            Finding(check: $0["check"] as? String ?? "", fix: $0["fix"] as? String ?? "",
                    exitCode: $0["exit_code"] as? Int ?? 0)
        }
        XCTAssertEqual(json["healthy"] as? Bool, findings.isEmpty, file: file, line: line)
        for f in findings {
            XCTAssertTrue(f.fix.contains("storectl") || f.fix.contains("config.yaml") || f.fix.contains("set "),
                          "a finding without a fix: \(f)", file: file, line: line)
        }
        return (r.status, findings)
    }

    func testAHealthyStoreExitsZero() throws {
        let s = try synced()
        let r = try s.run("a", ["doctor"])
        XCTAssertEqual(r.stdout, "store a: healthy (checked history, store, identity, mode, records, duplicates, binding, tables, account, zone, sync, data)\n")
        let all = try s.run(nil, ["doctor"])
        XCTAssertTrue(all.stdout.contains("store b: healthy"), all.stdout)
    }

    func testDriftAndLostTriggersAreDataProblemsFixedByMigrate() throws {
        let s = try synced()
        try s.sql("a", "ALTER TABLE notes ADD COLUMN extra TEXT")
        var (status, findings) = try doctor(s)
        XCTAssertEqual(status, 65)
        XCTAssertEqual(findings.map(\.check), ["history"])
        XCTAssertEqual(findings.first?.fix, "storectl --store a migrate")
        try s.sql("b", "DROP TRIGGER \"_storectl_notes_ins\"")
        (status, findings) = try doctor(s, store: "b")
        XCTAssertEqual(status, 65)
        XCTAssertEqual(findings.first?.fix, "storectl --store b migrate --force (then 'storectl --store b sync' re-baselines)")
    }

    func testAModeDisagreementNamesBothWaysOut() throws {
        let s = try synced()
        try s.dir.write("config.yaml", s.configText(["a": "local", "b": "cloud"]))
        chmod(s.dir.file("config.yaml"), 0o600)
        let r = try s.run("a", ["doctor"], expect: 65)
        XCTAssertTrue(r.stdout.contains("  mode: \(s.dir.file("config.yaml")) says mode: local but the store is in "
                                        + "cloud mode\n    fix: storectl --store a mode local (or 'storectl --store a "
                                        + "mode cloud' to keep the store's mode)"), r.stdout)
    }

    func testDuplicatesOfUniqueKeysAreFoundAndDedupeFixesThem() throws {
        let s = try synced()
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'again'), ('n1', 'and again')")
        var (status, findings) = try doctor(s)
        XCTAssertEqual(status, 65)
        XCTAssertEqual(findings, [Finding(check: "duplicates", fix: "storectl --store a dedupe --entity notes",
                                          exitCode: 65)])
        try s.run("a", ["dedupe", "--entity", "notes"])
        (status, findings) = try doctor(s)
        XCTAssertEqual(status, 0, "\(findings)")
    }

    func testHistoryKeptBeyondRetention() throws {
        let s = try synced()
        let yaml = s.configText(s.modes).replacingOccurrences(of: "      author: app-a\n",
                                                               with: "      author: app-a\n      retention: 30d\n")
        try s.dir.write("config.yaml", yaml)
        chmod(s.dir.file("config.yaml"), 0o600)
        XCTAssertEqual(try doctor(s).0, 0)
        // Age the history by 40 days.
        try s.sql("a", "UPDATE _storectl_history SET ts = ts - 40 * 86400000")
        let (status, findings) = try doctor(s)
        XCTAssertEqual(status, 65)
        XCTAssertEqual(findings.map(\.check), ["retention"])
        XCTAssertEqual(findings.first?.fix, "storectl --store a history prune --older-than 30d")
    }

    func testAnUnreachableCloudAndAccountProblemsAreUnavailable() throws {
        let s = try synced()
        // The wrong secret.
        let wrong = s.configText(s.modes).replacingOccurrences(of: "secret: demo-secret", with: "secret: wrong")
        try s.dir.write("config.yaml", wrong)
        chmod(s.dir.file("config.yaml"), 0o600)
        var (status, findings) = try doctor(s)
        XCTAssertEqual(status, 69)
        XCTAssertEqual(findings.map(\.check), ["account"])
        // The container gone.
        try s.dir.write("config.yaml", s.configText(s.modes))
        chmod(s.dir.file("config.yaml"), 0o600)
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.moveItem(atPath: s.dir.file("cloud/shared.container" + suffix),
                                              toPath: s.dir.file("cloud/moved" + suffix))
        }
        (status, findings) = try doctor(s)
        XCTAssertEqual(status, 69)
        // A store bound to the container is told where to look, or how to start a new one on purpose; never to
        // make a new, empty one in its place (`cloud init`).
        XCTAssertEqual(findings, [Finding(check: "cloud", fix: "if the container was moved, point the config at its "
                                          + "new place: 'storectl --store a config set stores.a.cloud.url NEW_URL'; "
                                          + "to start a new, empty container on purpose, run 'storectl --store a "
                                          + "migrate --cloud NEW_URL --no-final-sync'", exitCode: 69)])
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.dir.file("cloud/shared.container")),
                       "doctor created the container")
    }

    func testABoundAccountThatNoLongerMatches() throws {
        let s = try synced()
        let moved = s.configText(s.modes).replacingOccurrences(of: "account: demo", with: "account: carol")
        try s.dir.write("config.yaml", moved)
        chmod(s.dir.file("config.yaml"), 0o600)
        let (status, findings) = try doctor(s)
        XCTAssertEqual(status, 69)
        XCTAssertTrue(findings.contains { $0.check == "binding" && $0.fix.hasPrefix("storectl --store a sync --rebind") },
                      "\(findings)")
    }

    func testDoctorChangesNothing() throws {
        let s = try synced()
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'dup'); ALTER TABLE settings ADD COLUMN x")
        try s.sql("a", "PRAGMA wal_checkpoint(TRUNCATE)")
        func files() throws -> [String: Data] {
            var out: [String: Data] = [:]
            for f in ["config.yaml", "data/a.sqlite", "cloud/shared.container"] {
                out[f] = try Data(contentsOf: URL(fileURLWithPath: s.dir.file(f)))
            }
            return out
        }
        let before = try files()
        let r = try s.run("a", ["doctor"], expect: 65)
        XCTAssertTrue(r.stdout.contains("problem(s)"), r.stdout)
        try s.sql("a", "PRAGMA wal_checkpoint(TRUNCATE)")
        XCTAssertEqual(try files(), before)
    }
}
