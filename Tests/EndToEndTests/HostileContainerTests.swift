import Foundation
import StoreSQLite
import TestSupport
import XCTest

/// The container holds what other machines wrote: a container seeded, beside good records, with every kind of
/// malformed record (fields that are not an object, malformed JSON, a key missing or ill-typed, a record name
/// reused under another type, a duplicated seq, a value a STRICT table cannot store, a type with no local table,
/// a 50 MB field). After sync, the store is intact and only its tracked tables changed, every good record arrived,
/// every bad one is reported by name (and seq), sync exits 0, and a bad record is retried once fixed.
final class HostileContainerTests: XCTestCase {
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                         body TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE IF NOT EXISTS counts(k TEXT PRIMARY KEY, n INTEGER NOT NULL) STRICT;
        CREATE TABLE IF NOT EXISTS pairs(a TEXT NOT NULL, b INTEGER NOT NULL, v TEXT, PRIMARY KEY (a, b));
        CREATE TABLE IF NOT EXISTS local_only(k TEXT PRIMARY KEY, v TEXT);
        CREATE TABLE IF NOT EXISTS tags(note_id INTEGER NOT NULL REFERENCES notes(id), tag TEXT NOT NULL,
                                        PRIMARY KEY (note_id, tag));
        """
    /// Every table but `local_only` is synced: records that claim to be `local_only` rows must never write it.
    static let entities = """
            entities:
              notes: {}
              settings: {}
              counts: {}
              pairs: {}
              tags: {}
        """

    typealias Planted = PlantedRecord

    static func literal(_ s: String) -> String { Fleet.sqlLiteral(s) }

    func lastSeq(_ f: Fleet) throws -> Int64 { try f.lastSeq() }

    func plant(_ f: Fleet, _ records: inout [Planted]) throws { try f.plant(&records) }

    /// The schema of everything but storectl's own tables, to prove that nothing else changed.
    func userSchema(_ f: Fleet, _ store: String) throws -> String {
        try f.sql(store, "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE '\\_storectl\\_%' ESCAPE '\\' "
                  + "AND tbl_name NOT LIKE '\\_storectl\\_%' ESCAPE '\\' ORDER BY type, name")
    }

    /// Every `storectl ...` command the output suggests exists (its `--help` exits 0).
    func assertSuggestedCommandsExist(_ output: String, _ what: String, file: StaticString = #filePath,
                                      line: UInt = #line) throws
    {
        let commands: Set<String> = ["mode", "status", "sync", "watch", "verify", "account", "config", "history",
                                     "dedupe", "seed", "migrate", "cloud", "doctor", "init", "help", "completions",
                                     "man", "debug"]
        let groups: Set<String> = ["account", "config", "history", "cloud", "debug"]
        for tail in output.components(separatedBy: "storectl ").dropFirst() {
            var words = tail.split(whereSeparator: { $0 == " " || $0 == "\n" }).map {
                String($0).trimmingCharacters(in: CharacterSet(charactersIn: "'\"`.,;:()"))
            }
            // Global options first: --store NAME, --config PATH, --json.
            while let first = words.first, first.hasPrefix("-") {
                words.removeFirst()
                if ["--store", "-s", "--config", "-c"].contains(first), !words.isEmpty { words.removeFirst() }
            }
            guard let command = words.first, commands.contains(command) else { continue }
            var argv = [command]
            if groups.contains(command), words.count > 1, words[1].allSatisfy({ $0.isLowercase || $0 == "-" }),
               !words[1].hasPrefix("-")
            {
                argv.append(words[1])
            }
            let r = try Binary.storectl(argv + ["--help"], in: NSTemporaryDirectory())
            XCTAssertEqual(r.status, 0, "\(what): the output suggests 'storectl \(argv.joined(separator: " "))', "
                           + "which is not a command\n\(output.prefix(2000))", file: file, line: line)
        }
    }

    func hostileContainer(_ backend: FleetBackend, referenceAttacks: Bool = false) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-hostile")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two');"
                  + "INSERT INTO settings VALUES ('theme', 'dark'); INSERT INTO counts VALUES ('c0', 1);"
                  + "INSERT INTO tags SELECT id, 'real' FROM notes WHERE uuid = 'n1'")
        try f.syncRounds(1, ["a", "b"])
        let n1Name = try XCTUnwrap(try f.cloudRecords().first { $0.fields.contains("\"n1\"") }?.recordName)
        // A real tag record shows how this storectl names a row keyed by a reference: the planted ones copy it.
        let realTag = try XCTUnwrap(try f.cloudRecords().first { $0.recordType == "tags" })
        let tagName = { (tag: String) in realTag.recordName.replacingOccurrences(of: "real", with: tag) }
        let ref = "{\"$ref\":\"\(n1Name)\"}"
        let bigField: String
        switch backend {
        case .file:
            bigField = "json_object('uuid', 'big', 'title', replace(hex(zeroblob(25000000)), '0', 'x'), 'body', '')"
        case .postgres:
            bigField = "'{\"uuid\": \"big\", \"title\": \"' || repeat('x', 50000000) || '\", \"body\": \"\"}'"
        }
        let q = Self.literal
        var records: [Planted] = [
            Planted(name: "notes/evil-good-1", type: "notes", fieldsSQL: q(#"{"uuid":"g1","title":"good one","body":""}"#),
                    bad: false, why: "good"),
            Planted(name: "notes/evil-array", type: "notes", fieldsSQL: q("[1,2,3]"), bad: true,
                    why: "fields are an array"),
            Planted(name: "notes/evil-string", type: "notes", fieldsSQL: q(#""just text""#), bad: true,
                    why: "fields are a JSON string"),
            Planted(name: "notes/evil-malformed", type: "notes", fieldsSQL: q(#"{"uuid": "m1", "title": "#), bad: true,
                    why: "malformed JSON"),
            Planted(name: #"settings:["g2"]"#, type: "settings", fieldsSQL: q(#"{"key":"g2","value":"good two"}"#),
                    bad: false, why: "good"),
            Planted(name: #"settings:["nokey"]"#, type: "settings", fieldsSQL: q(#"{"value":"no key at all"}"#),
                    bad: true, why: "the key is missing"),
            Planted(name: #"settings:["objkey"]"#, type: "settings",
                    fieldsSQL: q(#"{"key":{"nested":1},"value":"object key"}"#), bad: true, why: "the key is an object"),
            Planted(name: #"settings:["nullkey"]"#, type: "settings", fieldsSQL: q(#"{"key":null,"value":"null key"}"#),
                    bad: true, why: "the key is null"),
            Planted(name: #"pairs:["p",null]"#, type: "pairs", fieldsSQL: q(#"{"a":"p","v":"half a key"}"#), bad: true,
                    why: "half of a composite key"),
            Planted(name: #"counts:["c2"]"#, type: "counts", fieldsSQL: q(#"{"k":"c2","n":"not a number"}"#), bad: true,
                    why: "text into an INTEGER column of a STRICT table"),
            Planted(name: #"counts:["g3"]"#, type: "counts", fieldsSQL: q(#"{"k":"g3","n":3}"#), bad: false, why: "good"),
            Planted(name: "notes/evil-blob", type: "notes",
                    fieldsSQL: q(#"{"uuid":"bb","title":{"$blob":"zz"},"body":""}"#), bad: true,
                    why: "a $blob that is not hex"),
            Planted(name: "notes/evil-text", type: "notes",
                    fieldsSQL: q(#"{"uuid":"tt","title":{"$text":"zz"},"body":""}"#), bad: true,
                    why: "a $text that is not hex"),
            Planted(name: tagName("good7"), type: "tags", fieldsSQL: q(#"{"note_id":\#(ref),"tag":"good7"}"#),
                    bad: false, why: "good, a reference to a record that exists"),
            Planted(name: tagName("badref"), type: "tags", fieldsSQL: q(#"{"note_id":{"$ref":5},"tag":"badref"}"#),
                    bad: true, why: "a reference that is not a record name"),
            Planted(name: n1Name, type: "settings", fieldsSQL: q(#"{"key":"hijack","value":"moved"}"#), bad: true,
                    why: "a record name reused under another type"),
            Planted(name: #"archive:["z1"]"#, type: "archive", fieldsSQL: q(#"{"name":"z1","v":"kept for later"}"#),
                    bad: false, why: "a type with no local table yet"),
            Planted(name: "notes/evil-id", type: "notes",
                    fieldsSQL: q(#"{"id":1,"uuid":"g4","title":"claims rowid 1","body":""}"#), bad: false,
                    why: "good, but names the rowid of another row"),
            Planted(name: "notes/evil-inject", type: "notes",
                    fieldsSQL: q(#"{"uuid":"g5","title":"ok","body":"","x\"); DROP TABLE settings; --":1}"#), bad: false,
                    why: "good, with an unknown field named like SQL"),
            Planted(name: "notes/evil-big", type: "notes", fieldsSQL: bigField, bad: false, why: "a 50 MB field"),
            Planted(name: "notes/evil-good-last", type: "notes",
                    fieldsSQL: q(#"{"uuid":"g6","title":"good, behind every bad one","body":""}"#), bad: false,
                    why: "good"),
        ]
        if referenceAttacks {
            records += [
                Planted(name: tagName("rawid"), type: "tags", fieldsSQL: q(#"{"note_id":1,"tag":"rawid"}"#),
                        bad: true, why: "a bare rowid where a reference belongs"),
                Planted(name: tagName("orphan").replacingOccurrences(of: n1Name, with: "notes/evil-parent-later"),
                        type: "tags", fieldsSQL: q(#"{"note_id":{"$ref":"notes/evil-parent-later"},"tag":"orphan"}"#),
                        bad: true, why: "a reference to a record that does not exist (yet)"),
            ]
        }
        try plant(f, &records)
        let schemaBefore = try userSchema(f, "b")

        for s in ["b", "a"] {
            let r = try f.run(s, ["sync"], expect: nil)
            XCTAssertEqual(r.status, 0, "[\(backend)] sync of \(s) over a hostile container: the good records "
                           + "must flow\n\(r.status) \(r.stderr.prefix(3000))")
            XCTAssertEqual(try f.integrity(s), [], "[\(backend)] integrity of \(s)")
            XCTAssertEqual(try userSchema(f, s), schemaBefore, "[\(backend)] sync changed the schema of \(s)")
            XCTAssertEqual(try f.sql(s, "SELECT count(*) FROM settings WHERE key = 'theme'")
                .trimmingCharacters(in: .whitespacesAndNewlines), "1")
            let output = r.stdout + r.stderr
            try assertSuggestedCommandsExist(output, "[\(backend)] sync of \(s)")
            let unnamed = records.filter { $0.bad && !output.contains($0.name) }.map { "\($0.name) (\($0.why))" }
            XCTAssertEqual(unnamed, [], "[\(backend)] sync of \(s) does not name these bad records\n"
                           + output.prefix(3000))
            let noSeq = records.filter { $0.bad && !output.contains(String($0.seq)) }.map { "\($0.name) seq \($0.seq)" }
            XCTAssertEqual(noSeq, [], "[\(backend)] sync of \(s) does not give the seq of these bad records")
        }
        let rowsB = try f.rows("b")
        for uuid in ["g1", "g4", "g5", "g6"] {
            XCTAssertTrue(rowsB.contains { $0.hasPrefix("notes|") && $0.contains("uuid=t:'\(uuid)'") },
                          "[\(backend)] the good record \(uuid) never arrived:\n" + rowsB.joined(separator: "\n"))
        }
        XCTAssertTrue(rowsB.contains(Expect.setting("g2", "good two")), rowsB.joined(separator: "\n"))
        XCTAssertTrue(rowsB.contains("counts|k=t:'g3'|n=i:3"), rowsB.joined(separator: "\n"))
        XCTAssertTrue(rowsB.contains(Expect.note("n1", "one")), "[\(backend)] the hijacked record name moved n1:\n"
                      + rowsB.joined(separator: "\n"))
        XCTAssertTrue(rowsB.contains("tags|note_id=->notes{body=t:'',title=t:'one',uuid=t:'n1'}|tag=t:'good7'"),
                      "[\(backend)] the good tag never arrived:\n" + rowsB.joined(separator: "\n"))
        XCTAssertFalse(rowsB.contains { $0.hasPrefix("tags|") && ($0.contains("rawid") || $0.contains("badref")
                                                                  || $0.contains("orphan")) },
                       "[\(backend)] a tag with a bad reference was linked:\n" + rowsB.joined(separator: "\n"))
        XCTAssertFalse(rowsB.contains { $0.contains("hijack") || $0.contains("key=null") || $0.contains("'m1'") },
                       rowsB.joined(separator: "\n"))
        XCTAssertEqual(try f.sql("b", "SELECT count(*) FROM notes WHERE uuid IN ('n1', 'n2') AND id IN (1, 2)")
            .trimmingCharacters(in: .whitespacesAndNewlines), "2", "[\(backend)] a record that names a rowid "
                       + "overwrote a local row")
        let bigArrived = rowsB.contains { $0.contains("uuid=t:'big'") }
        if bigArrived {
            XCTAssertEqual(try f.sql("b", "SELECT length(title) FROM notes WHERE uuid = 'big'")
                .trimmingCharacters(in: .whitespacesAndNewlines), "50000000")
        }
        let reported = records.filter { $0.bad } + (bigArrived ? [] : records.filter { $0.name == "notes/evil-big" })
        for s in ["a", "b"] {
            try f.assertReported(s, mentions: reported.map(\.name), "a hostile container")
        }
        // verify compares every record it can read and names the others: a record whose fields are not JSON fails
        // neither verify nor the verify step of a store that joins now (that store sets the bad records aside too).
        for s in ["a", "b"] {
            let v = try f.run(s, ["--json", "verify"], expect: nil)
            XCTAssertTrue([0, 1].contains(v.status), "[\(backend)] verify of \(s) over a hostile container exited "
                          + "\(v.status)\n\(v.stderr.prefix(2000))")
            XCTAssertTrue(v.stdout.contains("evil-malformed"), "[\(backend)] verify of \(s) does not name the record "
                          + "that is not JSON\n\(v.stdout.prefix(3000))")
        }
        try f.cloudMode(Fleet.lateStore)

        // Sync goes on; the type with no local table arrives once the table exists.
        try f.sql("b", "CREATE TABLE archive(name TEXT PRIMARY KEY, v TEXT)")
        try f.run("b", ["migrate"])
        try f.syncRounds(1, ["b"])
        XCTAssertTrue(try f.rows("b").contains("archive|name=t:'z1'|v=t:'kept for later'"),
                      "[\(backend)] the record of a type b did not have yet was dropped for good")

        // The other machine fixes its bad records: each is retried and applied, and the reports go away.
        var fixed: [Planted] = records.filter { $0.bad && $0.name != n1Name && $0.type != "pairs" && $0.type != "tags" }
            .map { r in
            var fix = r
            switch r.type {
            case "notes": fix.fieldsSQL = q(#"{"uuid":"fixed-\#(r.name.dropFirst(11))","title":"fixed","body":""}"#)
            case "settings": fix.fieldsSQL = q(#"{"key":"\#(r.name.dropFirst(11).dropLast(2))","value":"fixed"}"#)
            case "counts": fix.fieldsSQL = q(#"{"k":"c2","n":2}"#)
            default: fix.fieldsSQL = q(#"{"a":"p","b":0,"v":"fixed"}"#)
            }
            return fix
        }
        // ... and the parent the orphan tag waits for arrives.
        if referenceAttacks { fixed.append(Planted(name: "notes/evil-parent-later", type: "notes",
                             fieldsSQL: q(#"{"uuid":"parent-later","title":"late parent","body":""}"#), bad: false,
                             why: "the parent of the orphan tag")) }
        try plant(f, &fixed)
        try f.syncRounds(2, ["a", "b"])
        let healed = try f.rows("b")
        if referenceAttacks {
            XCTAssertTrue(healed.contains("tags|note_id=->notes{body=t:'',title=t:'late parent',uuid=t:'parent-later'}|tag=t:'orphan'"),
                          "[\(backend)] the tag waiting for its parent was not applied once the parent arrived:\n"
                          + healed.joined(separator: "\n"))
        }
        XCTAssertTrue(healed.contains("counts|k=t:'c2'|n=i:2"), "[\(backend)] a fixed record was not retried:\n"
                      + healed.joined(separator: "\n"))
        XCTAssertTrue(healed.contains { $0.contains("uuid=t:'fixed-array'") }, healed.joined(separator: "\n"))
        for s in ["a", "b"] {
            let (doctor, _) = try f.doctor(s)
            for r in fixed {
                XCTAssertFalse(doctor.stdout.contains(r.name), "[\(backend)] doctor on \(s) still reports \(r.name) "
                               + "after it was fixed")
            }
        }
        try f.assertSameRows(stores: ["a", "b"], tables: ["notes", "settings", "counts", "pairs", "tags"], late: false,
                             "a and b after the hostile records")
    }

    func testHostileContainerFile() throws { try hostileContainer(.file) }

    func testHostileContainerPostgres() throws {
        if let pg = FleetBackend.postgres() { try hostileContainer(pg) }
    }

    /// Two records with one seq: the container refuses the second, or both reach every store, even a page at a time.
    func duplicatedSeq(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-hostile")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        try f.syncRounds(1, ["a", "b"])
        let seq = try lastSeq(f) + 1
        let insert = { (name: String, uuid: String) -> String in
            "INSERT INTO \(backend.isFile ? "" : f.pgSchema + ".")records(zone, record_name, record_type, fields, "
                + "change_tag, seq, deleted, modified_by, modified_at) VALUES ('default', '\(name)', 'notes', "
                + "'{\"uuid\":\"\(uuid)\",\"title\":\"same seq\",\"body\":\"\"}', 'evil-\(name)', \(seq), "
                + "\(backend.isFile ? "0" : "false"), 'evil-device', 0)"
        }
        let both = "BEGIN; \(insert("notes/dup-1", "d1")); \(insert("notes/dup-2", "d2")); UPDATE "
            + "\(backend.isFile ? "" : f.pgSchema + ".")zones SET last_seq = \(seq) WHERE name = 'default'; COMMIT;"
        let accepted: Bool
        switch backend {
        case .file:
            let r = try Binary.run("/usr/bin/sqlite3", [f.dir.file("cloud/shared.container"), both], in: f.dir.path)
            accepted = r.status == 0
            if !accepted { XCTAssertTrue(r.stderr.contains("UNIQUE"), "\(r)") }
        case .postgres(let url):
            let bin = (ProcessInfo.processInfo.environment["STORECTL_TEST_PG_BIN"] ?? "/usr/bin") + "/psql"
            let r = try Binary.run(bin, ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", both], in: f.dir.path)
            accepted = r.status == 0
            if !accepted { XCTAssertTrue(r.stderr.contains("duplicate key"), "\(r)") }
        }
        // Another good record after them, so that the page boundary falls on the duplicated seq.
        var after = [Planted(name: "notes/after-dup", type: "notes",
                             fieldsSQL: Self.literal(#"{"uuid":"d3","title":"after","body":""}"#), bad: false,
                             why: "good")]
        try plant(f, &after)
        try f.run("b", ["sync"], env: ["STORECTL_PAGE_SIZE": "1"])
        try f.run("a", ["sync"], env: ["STORECTL_PAGE_SIZE": "1"])
        for s in ["a", "b"] {
            let rows = try f.rows(s)
            for uuid in (accepted ? ["d1", "d2", "d3"] : ["d3"]) {
                XCTAssertTrue(rows.contains { $0.contains("uuid=t:'\(uuid)'") }, "[\(backend)] \(uuid) was skipped "
                              + "on \(s) (two records with seq \(seq), read a page at a time):\n"
                              + rows.joined(separator: "\n"))
            }
        }
    }

    func testDuplicatedSeqFile() throws { try duplicatedSeq(.file) }

    func testDuplicatedSeqPostgres() throws {
        if let pg = FleetBackend.postgres() { try duplicatedSeq(pg) }
    }
}
