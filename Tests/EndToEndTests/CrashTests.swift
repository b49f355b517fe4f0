import Foundation
import StoreCloud
import TestSupport
import XCTest

/// Lost rows (expected, missing) and unexpected rows (duplicated or resurrected), as multisets.
func compareRows(expected: [String], actual: [String]) -> (lost: [String], extra: [String]) {
    var counts: [String: Int] = [:]
    for r in expected { counts[r, default: 0] += 1 }
    var extra: [String] = []
    for r in actual {
        if let n = counts[r], n > 0 { counts[r] = n - 1 } else { extra.append(r) }
    }
    let lost = counts.flatMap { key, n in Array(repeating: key, count: max(n, 0)) }.sorted()
    return (lost, extra.sorted())
}

/// Kills storectl at every failpoint, reruns it, and checks that nothing was lost, duplicated or half-written.
final class CrashTests: XCTestCase {
    enum Operation: String, CaseIterable {
        /// `sync` on a, with local changes to export and cloud changes to import.
        case sync
        /// `mode cloud` on a, which was local while it changed.
        case modeCloud
        /// `mode local` on a, with changes for the final export.
        case modeLocal
        /// `dedupe` on a, holding a duplicate of a unique key.
        case dedupe
        /// `seed` on a, in cloud mode.
        case seed
        /// `migrate` on a, after a column was added.
        case migrate
        /// `sync` on a, with enough new rows for several save batches.
        case bulkSync
    }

    /// The operations that reach a failpoint.
    static func operations(for failpoint: String) -> [Operation] {
        switch failpoint {
        case let f where f.hasPrefix("export."): return [.sync, .modeLocal]
        case let f where f.hasPrefix("import."): return [.sync]
        case "mode.after-meta", "mode.after-config", "config.before-rename": return [.modeCloud, .modeLocal]
        case "migrate.before-commit": return [.migrate]
        case "dedupe.before-commit": return [.dedupe]
        case let f where f.hasPrefix("seed."): return [.seed]
        default: return []
        }
    }

    /// Failpoints of commands with crash tests of their own (the kill, then the old or the new setup at work, then
    /// the rerun), and where those tests are.
    static func killedElsewhere(_ failpoint: String) -> String? {
        if failpoint.hasPrefix("move.") { return "MigrateMoveTests.testAKillAtEveryStepOfAMoveLeavesAWorkingSetupAndARerunFinishes" }
        if failpoint.hasPrefix("schema.") { return "MigrateSQLTests.testAKillBeforeTheCommitChangesNothing" }
        if failpoint.hasPrefix("switch.") { return "SwitchPlanTests.testAKillDuringTheSwitchLeavesTheStoreLocal" }
        if failpoint.hasPrefix("cloud-move.") { return "MigrateCloudTests.testAKillAtEveryStepLeavesAWorkingSetup" }
        if failpoint.hasPrefix("verify.") { return "DoctorDataTests.testASyncWhileDoctorComparesIsNoFinding" }
        if failpoint.hasPrefix("reseal.") {
            return "EncryptionEdgeTests.testASyncKilledWhileItSealsAColumnJustAddedFinishesLaterAndEveryRecordEndsSealed"
        }
        if failpoint.hasPrefix("rekey.") {
            return "EncryptionEdgeTests.testARotationKilledAfterTheNewKeyIsSavedIsFinishedByTheNextSync"
        }
        return nil
    }

    static let extra = """
            entities:
              notes:
                unique: [uuid]
              tags: {}
              note_tags: {}
              settings: {}
            seed:
              name: defaults-v1
              rows:
                tags:
                  - {name: seed-tag}
                settings:
                  - {key: seeded, value: 'yes'}

        """

    /// Every row the operation's stores must hold at the end.
    struct Model {
        var notes: [String: (title: String, body: String)] = [:]
        var tags: Set<String> = []
        var links: Set<[String]> = []
        var settings: [String: String] = [:]

        var rows: [String] {
            var out = notes.map { "note|\($0.key)|\($0.value.title)|\($0.value.body)" }
            out += tags.map { "tag|\($0)" }
            out += links.map { "link|\($0[0])|\($0[1])" }
            out += settings.map { "setting|\($0.key)|\($0.value)" }
            return out.sorted()
        }
    }

    var totals = (failpoints: Set<String>(), runs: 0, lost: 0, extra: 0)

    func testEveryFailpointIsHitSomewhereInSources() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources")
        var text = ""
        let files = FileManager.default.enumerator(atPath: root.path)
        while let f = files?.nextObject() as? String {
            if f.hasSuffix(".swift") && !f.hasSuffix("Failpoint.swift") {
                text += try String(contentsOfFile: root.appendingPathComponent(f).path, encoding: .utf8)
            }
        }
        let listed = try Binary.storectl(["--json", "debug", "failpoints"], in: NSTemporaryDirectory())
        XCTAssertEqual(listed.status, 0, "\(listed)")
        let json = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any]
        let names = (json?["failpoints"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
        XCTAssertGreaterThanOrEqual(names.count, 16)
        for name in names {
            XCTAssertTrue(text.contains("Failpoint.hit(\"\(name)\")"), "\(name) is listed but never hit")
            XCTAssertFalse(Self.operations(for: name).isEmpty && Self.killedElsewhere(name) == nil,
                           "\(name) has no crash scenario")
        }
        for required in ["export.before-save", "export.after-save", "export.before-commit", "export.after-commit",
                         "import.before-commit", "import.after-commit", "mode.after-meta", "migrate.before-commit",
                         "dedupe.before-commit", "seed.before-commit"]
        {
            XCTAssertTrue(names.contains(required), "missing failpoint \(required)")
        }
        let human = try Binary.storectl(["debug", "failpoints"], in: NSTemporaryDirectory())
        XCTAssertTrue(human.stdout.contains("mode.after-meta "), human.stdout)
        XCTAssertEqual(human.stdout.split(separator: "\n").count, names.count)
    }

    func testEveryFailpointKillsAndARerunLosesAndDuplicatesNothing() throws {
        let listed = try Binary.storectl(["--json", "debug", "failpoints"], in: NSTemporaryDirectory())
        let json = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any]
        let names = (json?["failpoints"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
        XCTAssertFalse(names.isEmpty)
        for name in names {
            for op in Self.operations(for: name) {
                try crashAndResume(failpoint: name, op: op)
            }
        }
        print("crash test: \(totals.failpoints.count) failpoints, \(totals.runs) kills; "
              + "lost rows: \(totals.lost), duplicated or unexpected rows: \(totals.extra)")
        XCTAssertEqual(totals.failpoints.count, names.filter { Self.killedElsewhere($0) == nil }.count)
    }

    func testNthHitOfAMultiBatchExport() throws {
        for armed in ["export.after-save:2", "export.before-save:3", "export.after-batch-commit:2",
                      "export.after-save:3"]
        {
            try crashAndResume(failpoint: armed, op: .bulkSync)
        }
        print("crash test (Nth hit): \(totals.runs) kills; lost rows: \(totals.lost), "
              + "duplicated or unexpected rows: \(totals.extra)")
    }

    /// Sets up two stores, runs `op` on store a with the failpoint armed, checks the kill, reruns, syncs every
    /// store twice, and checks integrity, rows and config bytes.
    func crashAndResume(failpoint: String, op: Operation, file: StaticString = #filePath, line: UInt = #line) throws {
        let s = try Fleet.notes(extra: Self.extra, label: "storectl-crash")
        let what = "\(failpoint) during \(op.rawValue)"
        var model = Model()
        // Base rows, made on a before it ever synced.
        try s.run("a", ["mode", "local"])
        var base = ""
        for i in 1...12 {
            let n = String(format: "n%02d", i)
            base += "INSERT INTO notes(uuid, title) VALUES ('\(n)', 'title \(i)');"
            model.notes[n] = ("title \(i)", "")
        }
        base += """
            INSERT INTO tags(name) VALUES ('red'), ('green'), ('blue');
            INSERT INTO note_tags SELECT n.id, t.id FROM notes n, tags t
              WHERE (n.uuid, t.name) IN (VALUES ('n01', 'red'), ('n02', 'green'), ('n03', 'blue'), ('n05', 'red'));
            INSERT INTO settings VALUES ('theme', 'dark'), ('lang', 'en');
            """
        try s.sql("a", base)
        model.tags = ["red", "green", "blue"]
        model.links = [["n01", "red"], ["n02", "green"], ["n03", "blue"], ["n05", "red"]]
        model.settings = ["theme": "dark", "lang": "en"]
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        s.modes = ["a": "cloud", "b": "cloud"]

        if op == .modeCloud {
            try s.run("a", ["mode", "local"])
            s.modes["a"] = "local"
        }
        if op == .migrate {
            for store in ["a", "b"] { try s.sql(store, "ALTER TABLE notes ADD COLUMN extra TEXT") }
            try s.run("b", ["migrate"])
        }
        // Changes on b, synced.
        try s.sql("b", """
            UPDATE notes SET title = 'b-title' WHERE uuid = 'n01';
            DELETE FROM notes WHERE uuid = 'n06';
            INSERT INTO notes(uuid, title) VALUES ('n50', 'from b');
            INSERT INTO note_tags SELECT n.id, t.id FROM notes n, tags t WHERE n.uuid = 'n50' AND t.name = 'green';
            UPDATE settings SET value = 'fr' WHERE key = 'lang';
            """)
        try s.run("b", ["sync"])
        model.notes["n01"]?.title = "b-title"
        model.notes["n06"] = nil
        model.notes["n50"] = ("from b", "")
        model.links.insert(["n50", "green"])
        model.settings["lang"] = "fr"
        // Changes on a, not yet exported.
        try s.sql("a", """
            UPDATE notes SET body = 'a-body' WHERE uuid = 'n02';
            DELETE FROM notes WHERE uuid = 'n07';
            INSERT INTO notes(uuid, title) VALUES ('n60', 'from a'), ('n61', 'also from a');
            INSERT INTO tags(name) VALUES ('yellow');
            INSERT INTO note_tags SELECT n.id, t.id FROM notes n, tags t WHERE n.uuid = 'n60' AND t.name = 'yellow';
            DELETE FROM note_tags WHERE note_id = (SELECT id FROM notes WHERE uuid = 'n05');
            INSERT INTO settings VALUES ('size', '12');
            """)
        model.notes["n02"]?.body = "a-body"
        model.notes["n07"] = nil
        model.notes["n60"] = ("from a", "")
        model.notes["n61"] = ("also from a", "")
        model.tags.insert("yellow")
        model.links.insert(["n60", "yellow"])
        model.links.remove(["n05", "red"])
        model.settings["size"] = "12"

        var args: [String]
        switch op {
        case .sync:
            args = ["sync"]
        case .modeCloud:
            args = ["mode", "cloud"]
        case .modeLocal:
            args = ["mode", "local"]
        case .dedupe:
            // A duplicate of n04's natural key, made by an external writer.
            try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n04', 'title 4')")
            args = ["dedupe"]
        case .seed:
            args = ["seed"]
            model.tags.insert("seed-tag")
            model.settings["seeded"] = "yes"
        case .migrate:
            args = ["migrate"]
        case .bulkSync:
            var bulk = "BEGIN;"
            for i in 1...1300 {
                let n = String(format: "bulk-%04d", i)
                bulk += "INSERT INTO notes(uuid, title) VALUES ('\(n)', 'bulk \(i)');"
                model.notes[n] = ("bulk \(i)", "")
            }
            try s.sql("a", bulk + "COMMIT;")
            args = ["sync"]
        }
        var after = s.modes
        if op == .modeCloud { after["a"] = "cloud" }
        if op == .modeLocal { after["a"] = "local" }
        let oldConfig = s.configText(s.modes)
        let newConfig = s.configText(after)
        XCTAssertEqual(s.config, oldConfig, what, file: file, line: line)

        // The kill.
        let killed = try s.run("a", args, env: ["STORECTL_FAILPOINT": failpoint], expect: nil)
        XCTAssertEqual(killed.status, 137, "\(what): the failpoint did not kill storectl\n\(killed)",
                       file: file, line: line)
        totals.runs += 1
        totals.failpoints.insert(String(failpoint.split(separator: ":")[0]))
        let config = s.config
        XCTAssertTrue(config == oldConfig || config == newConfig,
                      "\(what): config.yaml is neither the old file nor the new one:\n\(config)", file: file, line: line)
        XCTAssertEqual(try s.integrity().values.filter { $0 != "ok" }, [], what, file: file, line: line)

        // The rerun, to completion, then a final sync round on every store.
        try s.run("a", args, file: file, line: line)
        if op == .seed {
            let other = try s.run("b", ["--json", "seed"], file: file, line: line)
            XCTAssertFalse(other.stdout.contains("\"outcome\" : \"seeded\""), "\(what): seeded twice\n\(other)",
                           file: file, line: line)
        }
        if op == .modeLocal {
            try s.run("a", ["mode", "cloud"], file: file, line: line)
            after["a"] = "cloud"
        }
        XCTAssertEqual(s.config, s.configText(after), what, file: file, line: line)
        for store in ["a", "b", "a", "b"] { try s.run(store, ["sync"], file: file, line: line) }

        XCTAssertEqual(try s.integrity().values.filter { $0 != "ok" }, [], what, file: file, line: line)
        let expected = model.rows
        for (name, actual) in [("a", try s.noteRows("a")), ("b", try s.noteRows("b")), ("cloud", try s.cloudNoteRows())] {
            let (lost, extra) = compareRows(expected: expected, actual: actual)
            totals.lost += lost.count
            totals.extra += extra.count
            XCTAssertEqual(lost, [], "\(what): rows lost in \(name)", file: file, line: line)
            XCTAssertEqual(extra, [], "\(what): rows duplicated or unexpected in \(name)", file: file, line: line)
        }
        let doctor = try s.run("a", ["doctor"], expect: nil)
        XCTAssertEqual(doctor.status, 0, "\(what): doctor after the rerun\n\(doctor)", file: file, line: line)
    }
}
