import Foundation
import TestSupport
import XCTest

/// The rows three tables must hold: notes (rowid keys, no unique column, so that a duplicate shows), settings
/// (a text key) and pairs (a composite key, WITHOUT ROWID). Each write is SQL for the store and the same change
/// for the model.
struct CrashModel {
    var notes: [String: (title: String, body: String)] = [:]
    var settings: [String: String] = [:]
    var pairs: [String: String] = [:]

    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                         body TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE IF NOT EXISTS pairs(a TEXT NOT NULL, b INTEGER NOT NULL, v TEXT NOT NULL, PRIMARY KEY (a, b))
            WITHOUT ROWID;
        """

    var rows: [String] {
        var out = notes.map { Expect.note($0.key, $0.value.title, $0.value.body) }
        out += settings.map { Expect.setting($0.key, $0.value) }
        out += pairs.map { key, v -> String in
            let parts = key.split(separator: "|")
            return "pairs|a=t:'\(parts[0])'|b=i:\(parts[1])|v=t:'\(v)'"
        }
        return out.sorted()
    }

    /// One write: the SQL the app runs, and what it does to the rows.
    struct Write: CustomStringConvertible {
        var sql: String
        var apply: (inout CrashModel) -> Void
        var description: String { sql }
    }

    static func q(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }

    /// Runs the writes on `store` in one sqlite3 process and applies them to the model.
    mutating func write(_ f: Fleet, _ store: String, _ writes: [Write], file: StaticString = #filePath,
                        line: UInt = #line) throws
    {
        guard !writes.isEmpty else { return }
        try f.sql(store, writes.map(\.sql).joined(separator: "\n"), file: file, line: line)
        for w in writes { w.apply(&self) }
    }
}

extension CrashModel.Write {
    static func insertNote(_ uuid: String, _ title: String, id: Int? = nil) -> CrashModel.Write {
        CrashModel.Write(sql: "INSERT INTO notes(\(id == nil ? "" : "id, ")uuid, title) VALUES (\(id.map { "\($0), " } ?? "")"
                + "\(CrashModel.q(uuid)), \(CrashModel.q(title)));") { $0.notes[uuid] = (title, "") }
    }

    static func setTitle(_ uuid: String, _ title: String) -> CrashModel.Write {
        CrashModel.Write(sql: "UPDATE notes SET title = \(CrashModel.q(title)) WHERE uuid = \(CrashModel.q(uuid));") { m in
            if let old = m.notes[uuid] { m.notes[uuid] = (title, old.body) }
        }
    }

    static func setBody(_ uuid: String, _ body: String) -> CrashModel.Write {
        CrashModel.Write(sql: "UPDATE notes SET body = \(CrashModel.q(body)) WHERE uuid = \(CrashModel.q(uuid));") { m in
            if let old = m.notes[uuid] { m.notes[uuid] = (old.title, body) }
        }
    }

    static func deleteNote(_ uuid: String) -> CrashModel.Write {
        CrashModel.Write(sql: "DELETE FROM notes WHERE uuid = \(CrashModel.q(uuid));") { $0.notes[uuid] = nil }
    }

    /// Deletes the note and inserts it again under the same rowid: a new row at the key of the old one. A note
    /// that is gone already comes back under `id` when that rowid is free.
    static func reinsertNote(_ uuid: String, _ title: String, id: Int) -> CrashModel.Write {
        CrashModel.Write(sql: """
            CREATE TEMP TABLE IF NOT EXISTS old_id(id INTEGER); DELETE FROM old_id;
            INSERT INTO old_id SELECT id FROM notes WHERE uuid = \(CrashModel.q(uuid));
            DELETE FROM notes WHERE uuid = \(CrashModel.q(uuid));
            INSERT INTO notes(id, uuid, title) VALUES (coalesce((SELECT id FROM old_id),
                CASE WHEN \(id) > 0 AND NOT EXISTS (SELECT 1 FROM notes WHERE id = \(id)) THEN \(id) END), \(CrashModel.q(uuid)),
                \(CrashModel.q(title)));
            """) { $0.notes[uuid] = (title, "") }
    }

    static func setSetting(_ key: String, _ value: String) -> CrashModel.Write {
        CrashModel.Write(sql: "INSERT INTO settings(key, value) VALUES (\(CrashModel.q(key)), \(CrashModel.q(value))) "
                + "ON CONFLICT(key) DO UPDATE SET value = excluded.value;") { $0.settings[key] = value }
    }

    static func deleteSetting(_ key: String) -> CrashModel.Write {
        CrashModel.Write(sql: "DELETE FROM settings WHERE key = \(CrashModel.q(key));") { $0.settings[key] = nil }
    }

    static func reinsertSetting(_ key: String, _ value: String) -> CrashModel.Write {
        CrashModel.Write(sql: "DELETE FROM settings WHERE key = \(CrashModel.q(key)); INSERT INTO settings VALUES (\(CrashModel.q(key)), \(CrashModel.q(value)));") {
            $0.settings[key] = value
        }
    }

    static func setPair(_ a: String, _ b: Int, _ v: String) -> CrashModel.Write {
        CrashModel.Write(sql: "INSERT INTO pairs VALUES (\(CrashModel.q(a)), \(b), \(CrashModel.q(v))) ON CONFLICT(a, b) DO UPDATE SET v = excluded.v;") {
            $0.pairs["\(a)|\(b)"] = v
        }
    }

    static func deletePair(_ a: String, _ b: Int) -> CrashModel.Write {
        CrashModel.Write(sql: "DELETE FROM pairs WHERE a = \(CrashModel.q(a)) AND b = \(b);") { $0.pairs["\(a)|\(b)"] = nil }
    }

    static func reinsertPair(_ a: String, _ b: Int, _ v: String) -> CrashModel.Write {
        CrashModel.Write(sql: "DELETE FROM pairs WHERE a = \(CrashModel.q(a)) AND b = \(b); INSERT INTO pairs VALUES (\(CrashModel.q(a)), \(b), \(CrashModel.q(v)));") {
            $0.pairs["\(a)|\(b)"] = v
        }
    }
}

/// The crash matrix: at every export and import failpoint (and the Nth hit of a multi-batch export), storectl is
/// killed, then the app writes to the rows of the batch in flight (update, delete, re-insert of the same key),
/// then the sync resumes (once cleanly, or killed a second time during the recovery). Plus seeded random kills
/// (`kill -9` at a random moment and failpoints at a random hit) with writes between kills. After every run, each
/// store and a store that joins last hold exactly the model's rows.
class CrashReplayCase: XCTestCase {
    enum Touch: String, CaseIterable {
        case update, delete, reinsert
    }

    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    override class func tearDown() {
        print("crash replay: \(Tally.line)")
        super.tearDown()
    }

    /// The failpoints of export and import, as `storectl debug failpoints` lists them.
    func failpoints(prefix: String) throws -> [String] {
        let listed = try Binary.storectl(["--json", "debug", "failpoints"], in: NSTemporaryDirectory())
        let names = (JSONDoc.get(JSONDoc.parse(listed.stdout), "failpoints") as? [[String: Any]] ?? [])
            .compactMap { $0["name"] as? String }
        XCTAssertFalse(names.isEmpty, "storectl debug failpoints listed nothing\n\(listed)")
        return names.filter { $0.hasPrefix(prefix) }
    }

    /// Two stores synced with the same base rows; returns the fleet and the model.
    func base(_ backend: FleetBackend, policy: String? = nil) throws -> (Fleet, CrashModel) {
        let f = try Fleet(backend: backend, schema: CrashModel.schema,
                          cloudExtra: policy.map { "      merge_policy: \($0)" } ?? "", label: "storectl-crash")
        var m = CrashModel()
        try f.cloudMode("a")
        try f.cloudMode("b")
        var writes: [CrashModel.Write] = []
        for i in 1...6 { writes.append(.insertNote("n\(i)", "n\(i)", id: i)) }
        for i in 1...4 { writes.append(.setSetting("s\(i)", "v\(i)")) }
        for i in 1...4 { writes.append(.setPair("p", i, "w\(i)")) }
        try m.write(f, "a", writes)
        try f.syncRounds(1, ["a", "b"])
        return (f, m)
    }

    /// The changes of the batch in flight: updates, deletes and inserts in each table.
    static var inFlight: [CrashModel.Write] { [
        .setTitle("n1", "n1 v2"), .setBody("n2", "b2"), .deleteNote("n3"), .insertNote("n7", "n7", id: 7),
        .insertNote("n8", "n8", id: 8), .setSetting("s1", "v1 v2"), .deleteSetting("s2"), .setSetting("s5", "v5"),
        .setPair("p", 1, "w1 v2"), .deletePair("p", 2), .setPair("p", 5, "w5"),
    ] }

    /// What the app does to the rows of the batch in flight after the kill, when the batch was an export.
    static func afterExportKill(_ touch: Touch, _ round: Int) -> [CrashModel.Write] {
        let tag = round == 1 ? "after" : "after \(round)"
        switch touch {
        case .update:
            return [.setBody("n1", tag), .setTitle("n7", "n7 \(tag)"), .setTitle("n2", "n2 \(tag)"),
                    .setSetting("s1", tag), .setSetting("s5", tag), .setPair("p", 1, tag), .setPair("p", 5, tag)]
        case .delete:
            return [.deleteNote("n1"), .deleteNote("n7"), .deleteSetting("s1"), .deleteSetting("s5"),
                    .deletePair("p", 1), .deletePair("p", 5)]
        case .reinsert:
            return [.reinsertNote("n1", "n1 reborn \(round)", id: 1), .reinsertNote("n7", "n7 reborn \(round)", id: 7),
                    .reinsertNote("n3", "n3 reborn \(round)", id: 3), .reinsertSetting("s1", "reborn \(round)"),
                    .reinsertSetting("s2", "reborn \(round)"), .reinsertSetting("s5", "reborn \(round)"),
                    .reinsertPair("p", 1, "reborn \(round)"), .reinsertPair("p", 2, "reborn \(round)"),
                    .reinsertPair("p", 5, "reborn \(round)")]
        }
    }

    /// What the app on a does after its import of b's batch was killed: it touches rows b changed. Only rows a
    /// already had are updated or deleted (the later write wins; a delete is a write too), and natural keys are
    /// upserted, so that the outcome does not depend on whether the import had committed.
    static func afterImportKill(_ touch: Touch, _ round: Int) -> [CrashModel.Write] {
        let tag = round == 1 ? "a after" : "a after \(round)"
        switch touch {
        case .update:
            return [.setTitle("n1", tag), .setTitle("n2", tag), .setSetting("s1", tag), .setSetting("s5", tag),
                    .setPair("p", 1, tag), .setPair("p", 5, tag)]
        case .delete:
            return [.deleteNote("n1"), .deleteNote("n2"), .deleteSetting("s1"), .deletePair("p", 1)]
        case .reinsert:
            return [.reinsertNote("n1", "n1 reborn \(round)", id: 1), .reinsertNote("n3", "n3 reborn \(round)", id: 3),
                    .reinsertSetting("s1", "reborn \(round)"), .reinsertSetting("s2", "reborn \(round)"),
                    .reinsertPair("p", 1, "reborn \(round)"), .reinsertPair("p", 2, "reborn \(round)")]
        }
    }

    /// One cell of the matrix. `twice`: the resume is killed at the same point again, with more writes.
    func cell(_ backend: FleetBackend, failpoint: String, touch: Touch, twice: Bool, op: String = "sync",
              policy: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws
    {
        let what = "\(failpoint) during \(op), then \(touch.rawValue)\(twice ? ", killed twice" : "")"
            + (policy.map { ", merge_policy \($0)" } ?? "")
        let (f, base) = try self.base(backend, policy: policy)
        var m = base
        let isImport = failpoint.hasPrefix("import.")
        let env = ["STORECTL_FAILPOINT": failpoint, "STORECTL_BATCH_SIZE": "2", "STORECTL_PAGE_SIZE": "3"]
        if isImport {
            try m.write(f, "b", Self.inFlight, file: file, line: line)
            try f.run("b", ["sync"], file: file, line: line)
        } else {
            if op == "mode cloud" { try f.run("a", ["mode", "local"], file: file, line: line) }
            try m.write(f, "a", Self.inFlight, file: file, line: line)
        }
        let args = op == "mode cloud" ? ["mode", "cloud"] : ["sync"]
        let killed = try f.run("a", args, env: env, expect: nil, file: file, line: line)
        XCTAssertEqual(killed.status, 137, "\(what): the failpoint was not reached\n\(killed)", file: file, line: line)
        try m.write(f, "a", isImport ? Self.afterImportKill(touch, 1) : Self.afterExportKill(touch, 1),
                    file: file, line: line)
        if twice {
            let again = try f.run("a", args, env: env, expect: nil, file: file, line: line)
            XCTAssertTrue([0, 137].contains(again.status), "\(what): the second run\n\(again)", file: file, line: line)
            try m.write(f, "a", isImport ? Self.afterImportKill(.update, 2) : Self.afterExportKill(.update, 2),
                        file: file, line: line)
        }
        let resumed = try f.run("a", args, env: ["STORECTL_BATCH_SIZE": "2"], expect: nil, file: file, line: line)
        XCTAssertEqual(resumed.status, 0, "\(what): the resume\n\(resumed)", file: file, line: line)
        try f.syncRounds(2, ["b", "a"], file: file, line: line)
        try f.assertRows(m.rows, what, file: file, line: line)
        for s in f.stores { try f.assertHealthy(s, what, file: file, line: line) }
    }

    func matrix(_ backend: FleetBackend, prefix: String) throws {
        let names = try failpoints(prefix: prefix)
        XCTAssertGreaterThanOrEqual(names.count, 3, "failpoints with prefix \(prefix): \(names)")
        for name in names {
            for touch in Touch.allCases { try cell(backend, failpoint: name, touch: touch, twice: false) }
            try cell(backend, failpoint: name, touch: .update, twice: true)
        }
    }

}

/// The import half of the crash matrix: every import failpoint, then writes on the rows being imported.
final class CrashReplayImportTests: CrashReplayCase {
    func testEveryImportFailpointThenWritesFile() throws { try matrix(.file, prefix: "import.") }
    func testEveryImportFailpointThenWritesPostgres() throws {
        if let pg = FleetBackend.postgres() { try matrix(pg, prefix: "import.") }
    }
}
