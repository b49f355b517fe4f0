import Foundation
import StoreSQLite
import TestSupport
import XCTest

/// Keys and constraints SQLite allows, synced between stores through the real binary, on a container file and
/// on PostgreSQL: every key kind arrives exactly (bit for bit), constraints never wedge sync, and what cannot be
/// synced faithfully is refused up front.
final class KeyConstraintCaseTests: XCTestCase {
    override class func tearDown() {
        print("key and constraint cases: \(Tally.line)")
        super.tearDown()
    }

    func onPostgres(_ body: (FleetBackend) throws -> Void, file: StaticString = #filePath, line: UInt = #line) rethrows {
        if let pg = FleetBackend.postgres(file: file, line: line) { try body(pg) }
    }

    // MARK: REAL primary keys with 17 significant digits

    static let realKeys = ["0.30000000000000004", "123456789.123456789", "0.1", "1e-310", "1.7976931348623157e308",
                           "9007199254740993.0", "-2.5", "3.0", "6.02214076e23", "2.718281828459045"]

    func realPrimaryKeys(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS readings(at REAL PRIMARY KEY, value TEXT NOT NULL, x REAL);
            """, label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        let inserts = Self.realKeys.enumerated().map { i, k in "(\(k), 'v\(i)', \(k) / 3.0)" }
        try f.sql("a", "INSERT INTO readings(at, value, x) VALUES " + inserts.joined(separator: ", "))
        try f.syncRounds(2, ["a", "b"])
        let first = try f.assertSameRows(late: true, "REAL keys after the first export")
        XCTAssertEqual(first.count, Self.realKeys.count, "[\(backend)] rows of readings:\n"
                       + first.joined(separator: "\n"))
        XCTAssertEqual(try f.liveCloudCounts(), ["readings": Self.realKeys.count], "[\(backend)] live records")
        for r in try f.cloudRecords() where !r.deleted {
            XCTAssertNotEqual(r.fields.replacingOccurrences(of: " ", with: ""), "{}",
                              "[\(backend)] record \(r.recordName) was exported with no fields")
        }
        // Updates and deletes address the rows by their exact key, on both sides.
        try f.sql("a", """
            UPDATE readings SET value = 'a edit' WHERE at = 0.30000000000000004;
            DELETE FROM readings WHERE at = 123456789.123456789;
            """)
        try f.sql("b", """
            UPDATE readings SET value = 'b edit' WHERE at = 1e-310;
            DELETE FROM readings WHERE at = 9007199254740993.0;
            """)
        // The next double after 0.30000000000000004 (0.3000000000000001), bound exactly.
        let db = try Connection(path: f.path("b"), mode: .readWrite)
        try db.run("INSERT INTO readings(at, value) VALUES (?, 'b new')", [Value.real((0.1 + 0.2).nextUp)])
        try f.syncRounds(2, ["a", "b"])
        let rows = try f.assertSameRows(late: true, "REAL keys after updates and deletes")
        XCTAssertEqual(rows.count, Self.realKeys.count - 1, "[\(backend)] rows:\n" + rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains { $0.contains("at=r:0.30000000000000004|") && $0.contains("'a edit'") },
                      "[\(backend)] the update of 0.30000000000000004 did not arrive:\n" + rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains { $0.contains("at=r:1e-310|") && $0.contains("'b edit'") },
                      "[\(backend)] the update of 1e-310 did not arrive:\n" + rows.joined(separator: "\n"))
        XCTAssertFalse(rows.contains { $0.contains("at=r:123456789.12345679|") },
                       "[\(backend)] a deleted REAL key came back")
        XCTAssertTrue(rows.contains { $0.contains("at=r:0.3000000000000001|") },
                      "[\(backend)] 0.3000000000000001 did not arrive (the next double after 0.30000000000000004)")
        for s in f.stores { try f.assertHealthy(s, "REAL keys") }
    }

    func testCase4RealPrimaryKeysFile() throws { try realPrimaryKeys(.file) }
    func testCase4RealPrimaryKeysPostgres() throws { try onPostgres(realPrimaryKeys) }

    // MARK: INTEGER PRIMARY KEY DESC, which is not a rowid alias

    func integerKeyDesc(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS ranks(id INTEGER PRIMARY KEY DESC, label TEXT NOT NULL);
            """, label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO ranks(id, label) VALUES (1, 'one'), (2, 'two'), (100, 'hundred'), (-5, 'minus')")
        try f.sql("b", "INSERT INTO ranks(id, label) VALUES (7, 'seven by b')")
        try f.syncRounds(2, ["a", "b"])
        let rows = try f.assertSameRows(late: true, "INTEGER PRIMARY KEY DESC")
        XCTAssertFalse(rows.contains { $0.contains("id=null") }, "[\(backend)] ids arrived as NULL:\n"
                       + rows.joined(separator: "\n"))
        for id in ["1", "2", "100", "-5", "7"] {
            XCTAssertTrue(rows.contains { $0.hasPrefix("ranks|id=i:\(id)|") }, "[\(backend)] id \(id) is missing:\n"
                          + rows.joined(separator: "\n"))
        }
        try f.sql("b", "UPDATE ranks SET label = 'one by b' WHERE id = 1; DELETE FROM ranks WHERE id = 100")
        try f.sql("a", "UPDATE ranks SET label = 'seven by a' WHERE id = 7")
        try f.syncRounds(2, ["a", "b"])
        let after = try f.assertSameRows(late: true, "INTEGER PRIMARY KEY DESC after updates")
        XCTAssertTrue(after.contains("ranks|id=i:1|label=t:'one by b'"), after.joined(separator: "\n"))
        XCTAssertTrue(after.contains("ranks|id=i:7|label=t:'seven by a'"), after.joined(separator: "\n"))
        XCTAssertFalse(after.contains { $0.hasPrefix("ranks|id=i:100|") }, after.joined(separator: "\n"))
        for s in f.stores { try f.assertHealthy(s, "INTEGER PRIMARY KEY DESC") }

        // SQLite lets a key that is not a rowid alias be NULL. Such a row either travels, or is reported; it is
        // never left behind while status and doctor call the store healthy.
        try f.sql("a", "INSERT INTO ranks(label) VALUES ('no id given')")
        try f.syncRounds(2, ["a", "b"])
        if try f.rows("b").contains("ranks|id=null|label=t:'no id given'") {
            try f.assertSameRows(late: true, "a NULL key that travelled")
            for s in f.stores { try f.assertHealthy(s, "a NULL key") }
        } else {
            try f.assertReported("a", mentions: ["ranks"], "a row whose key is NULL, left behind")
        }
    }

    func testCase4IntegerPrimaryKeyDescFile() throws { try integerKeyDesc(.file) }
    func testCase4IntegerPrimaryKeyDescPostgres() throws { try onPostgres(integerKeyDesc) }

    // MARK: A SQL UNIQUE constraint on a non-key column, hit by several stores

    static let uniqueSchema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS tags(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                        tag TEXT NOT NULL, PRIMARY KEY (note_id, tag));
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value TEXT);
        """

    /// Three stores insert the same `uuid` offline, each with a tag of its own on it. Sync never wedges, every
    /// store ends with one row per uuid (the same winner everywhere), the tags of the losers move to the winner,
    /// and the other changes of every store still get through.
    func uniqueCollision(_ backend: FleetBackend, declared: Bool) throws {
        let yaml = declared ? """
                entities:
                  notes:
                    unique: [uuid]
                  tags: {}
                  settings: {}
            """ : ""
        let f = try Fleet(stores: ["a", "b", "c"], backend: backend, schema: Self.uniqueSchema, storeYAML: yaml,
                          label: "storectl-case4")
        for s in f.stores { try f.cloudMode(s) }
        for s in f.stores {
            try f.sql(s, """
                INSERT INTO notes(uuid, title) VALUES ('shared', 'by \(s)'), ('own-\(s)', 'only \(s)');
                INSERT INTO tags SELECT id, 'tag-\(s)' FROM notes WHERE uuid = 'shared';
                """)
        }
        for s in f.stores {
            let r = try f.run(s, ["sync"], expect: nil)
            XCTAssertEqual(r.status, 0, "[\(backend)] sync of \(s) with a UNIQUE collision (unique: declared "
                           + "\(declared))\n\(r)")
        }
        try f.syncRounds(2)
        // Later changes still flow.
        try f.sql("a", "INSERT INTO settings VALUES ('after', 'a')")
        try f.sql("c", "UPDATE notes SET title = 'own-b edited by c' WHERE uuid = 'own-b'")
        try f.syncRounds(2)
        let rows = try f.assertSameRows(late: true, "a UNIQUE column hit by three stores (unique: declared "
                                        + "\(declared))")
        let shared = rows.filter { $0.hasPrefix("notes|") && $0.contains("uuid=t:'shared'") }
        XCTAssertEqual(shared.count, 1, "[\(backend)] rows with uuid 'shared':\n" + rows.joined(separator: "\n"))
        for s in f.stores {
            XCTAssertTrue(rows.contains { $0.hasPrefix("tags|") && $0.contains("tag=t:'tag-\(s)'")
                && $0.contains("uuid=t:'shared'") },
                          "[\(backend)] the tag \(s) put on its 'shared' note was lost:\n" + rows.joined(separator: "\n"))
        }
        XCTAssertTrue(rows.contains(Expect.setting("after", "a")), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains { $0.contains("'own-b edited by c'") }, rows.joined(separator: "\n"))
        XCTAssertEqual(rows.filter { $0.hasPrefix("notes|") }.count, 4, rows.joined(separator: "\n"))
        for s in f.stores { try f.assertHealthy(s, "after the UNIQUE collision") }
    }

    func testCase4UniqueConstraintCollisionFile() throws {
        try uniqueCollision(.file, declared: false)
        try uniqueCollision(.file, declared: true)
    }

    func testCase4UniqueConstraintCollisionPostgres() throws {
        try onPostgres { try uniqueCollision($0, declared: false) }
        try onPostgres { try uniqueCollision($0, declared: true) }
    }

    // MARK: Foreign keys that point at their own row, and cycles

    func selfAndCyclicReferences(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                                             parent INTEGER REFERENCES nodes(id));
            CREATE TABLE IF NOT EXISTS people(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                                              pet INTEGER REFERENCES pets(id));
            CREATE TABLE IF NOT EXISTS pets(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                                            owner INTEGER REFERENCES people(id));
            """, label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            INSERT INTO nodes(id, name, parent) VALUES (1, 'root', NULL);
            INSERT INTO nodes(id, name, parent) VALUES (2, 'self', 2);
            INSERT INTO nodes(id, name, parent) VALUES (3, 'x', NULL), (4, 'y', 3);
            UPDATE nodes SET parent = 4 WHERE id = 3;
            INSERT INTO nodes(id, name, parent) VALUES (5, 'p', NULL), (6, 'q', 5), (7, 'r', 6);
            UPDATE nodes SET parent = 7 WHERE id = 5;
            INSERT INTO people(id, name, pet) VALUES (1, 'ann', NULL);
            INSERT INTO pets(id, name, owner) VALUES (1, 'rex', 1);
            UPDATE people SET pet = 1 WHERE id = 1;
            """)
        try f.syncRounds(2, ["a", "b"])
        let rows = try f.assertSameRows(late: true, "self and cyclic references")
        XCTAssertTrue(rows.contains("nodes|name=t:'self'|parent=->nodes{name=t:'self'}"), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("nodes|name=t:'x'|parent=->nodes{name=t:'y'}"), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("nodes|name=t:'y'|parent=->nodes{name=t:'x'}"), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("nodes|name=t:'p'|parent=->nodes{name=t:'r'}"), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("people|name=t:'ann'|pet=->pets{name=t:'rex'}"), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("pets|name=t:'rex'|owner=->people{name=t:'ann'}"), rows.joined(separator: "\n"))
        XCTAssertEqual(rows.count, 9, rows.joined(separator: "\n"))
        for s in f.stores + [Fleet.lateStore] { try f.assertHealthy(s, "self and cyclic references") }
        // b breaks and re-forms a cycle; a receives it.
        try f.sql("b", "UPDATE nodes SET parent = NULL WHERE name = 'self'; UPDATE nodes SET parent = "
                  + "(SELECT id FROM nodes WHERE name = 'x') WHERE name = 'x'")
        try f.syncRounds(2, ["b", "a"])
        let after = try f.assertSameRows(late: true, "self references after b's edit")
        XCTAssertTrue(after.contains("nodes|name=t:'x'|parent=->nodes{name=t:'x'}"), after.joined(separator: "\n"))
        XCTAssertTrue(after.contains("nodes|name=t:'self'|parent=null"), after.joined(separator: "\n"))
        for s in f.stores { try f.assertHealthy(s, "after b's edit") }
    }

    func testCase4SelfAndCyclicReferencesFile() throws { try selfAndCyclicReferences(.file) }
    func testCase4SelfAndCyclicReferencesPostgres() throws { try onPostgres(selfAndCyclicReferences) }

    // MARK: Text holding NUL, invalid UTF-8, control characters

    func oddText(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS texts(k TEXT PRIMARY KEY, v TEXT, b BLOB);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);
            """, label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            INSERT INTO texts(k, v, b) VALUES
              ('nul', CAST(X'610062' AS TEXT), X'00'),
              ('nul-end', CAST(X'6100' AS TEXT), NULL),
              ('invalid', CAST(X'61FF62' AS TEXT), X'FF'),
              ('surrogate', CAST(X'EDA080' AS TEXT), NULL),
              ('overlong', CAST(X'C0AF' AS TEXT), NULL),
              ('control', char(1, 2, 27, 127), NULL),
              ('quotes', '"{}\\"$ref', NULL),
              ('emoji', 'é😀', NULL),
              ('empty', '', X''),
              (CAST(X'6B00' AS TEXT), 'a key with a NUL', NULL);
            INSERT INTO notes(title) VALUES (CAST(X'610062' AS TEXT)), (CAST(X'61FF62' AS TEXT));
            """)
        try f.syncRounds(2, ["a", "b"])
        let rows = try f.assertSameRows(late: true, "text with NUL and invalid UTF-8")
        XCTAssertEqual(rows.count, 12, rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("texts|b=b:x'00'|k=t:'nul'|v=t:x'610062'"), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("texts|b=b:x'FF'|k=t:'invalid'|v=t:x'61FF62'"), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("notes|title=t:x'61FF62'"), rows.joined(separator: "\n"))
        // b edits the odd rows; a receives the edits at the same keys.
        try f.sql("b", """
            UPDATE texts SET v = CAST(X'00' AS TEXT) WHERE k = CAST(X'6B00' AS TEXT);
            UPDATE texts SET v = CAST(X'FF' AS TEXT) WHERE k = 'invalid';
            DELETE FROM texts WHERE k = 'nul-end';
            """)
        try f.syncRounds(2, ["b", "a"])
        let after = try f.assertSameRows(late: true, "odd text after b's edits")
        XCTAssertTrue(after.contains("texts|b=null|k=t:x'6B00'|v=t:x'00'"), after.joined(separator: "\n"))
        XCTAssertTrue(after.contains("texts|b=b:x'FF'|k=t:'invalid'|v=t:x'FF'"), after.joined(separator: "\n"))
        XCTAssertEqual(after.count, 11, after.joined(separator: "\n"))
        for s in f.stores { try f.assertHealthy(s, "odd text") }

        // A key of invalid UTF-8 either travels, or is reported (sync, status and doctor name its table) while
        // every other change still goes through; it is never left behind in silence.
        try f.sql("a", "INSERT INTO texts(k, v) VALUES (CAST(X'6BFF' AS TEXT), 'a key with invalid UTF-8');"
                  + "INSERT INTO notes(title) VALUES ('beside it')")
        let sync = try f.run("a", ["sync"], expect: nil)
        // storectl reports such a key (exit 65) and sends everything else (docs/sync-guarantees.md).
        XCTAssertEqual(sync.status, 65, "[\(backend)] a key of invalid UTF-8 must be reported\n\(sync)")
        try f.run("b", ["sync"])
        let rowsB = try f.rows("b")
        XCTAssertTrue(rowsB.contains("notes|title=t:'beside it'"), "[\(backend)] a row of invalid UTF-8 held back "
                      + "the other changes")
        if rowsB.contains("texts|b=null|k=t:x'6BFF'|v=t:'a key with invalid UTF-8'") {
            try f.assertSameRows(late: true, "a key of invalid UTF-8 that travelled")
        } else {
            XCTAssertTrue((sync.stdout + sync.stderr).contains("texts"), "[\(backend)] sync does not say which row it "
                          + "could not send\n\(sync)")
            try f.assertReported("a", mentions: ["texts"], "a key of invalid UTF-8, not sent")
        }
    }

    func testCase4TextWithNulAndInvalidUTF8File() throws { try oddText(.file) }
    func testCase4TextWithNulAndInvalidUTF8Postgres() throws { try onPostgres(oddText) }

    // MARK: The user's own trigger writing a tracked table during an import

    func userTriggerDuringImport(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS audit(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, what TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS counters(uuid TEXT PRIMARY KEY, renames INTEGER NOT NULL);
            CREATE TRIGGER IF NOT EXISTS notes_audit AFTER UPDATE OF title ON notes BEGIN
                INSERT INTO audit(uuid, what) VALUES (new.uuid, 'renamed to ' || new.title);
                INSERT INTO counters(uuid, renames) VALUES (new.uuid, 1)
                    ON CONFLICT(uuid) DO UPDATE SET renames = renames + 1;
            END;
            """, label: "storectl-case4")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "UPDATE notes SET title = 'one v2' WHERE uuid = 'n1'")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("b", "UPDATE notes SET title = 'two v2' WHERE uuid = 'n2'")
        try f.syncRounds(3, ["b", "a"])
        let rows = try f.assertSameRows(late: true, "a user trigger that writes tracked tables during import")
        XCTAssertTrue(rows.contains("audit|uuid=t:'n1'|what=t:'renamed to one v2'"), rows.joined(separator: "\n"))
        XCTAssertTrue(rows.contains("audit|uuid=t:'n2'|what=t:'renamed to two v2'"), rows.joined(separator: "\n"))
        for s in f.stores { try f.assertHealthy(s, "user triggers") }
    }

    func testCase4UserTriggerDuringImportFile() throws { try userTriggerDuringImport(.file) }
    func testCase4UserTriggerDuringImportPostgres() throws { try onPostgres(userTriggerDuringImport) }

    // MARK: Tables storectl cannot track: the reserved prefix, virtual tables

    /// Either the table is synced faithfully, or `cloud check` and `mode cloud` refuse it up front (exit 65),
    /// naming it, and the store stays local. Never silently left out.
    func syncedOrRefused(_ f: Fleet, table: String, probe: (String) throws -> Bool, _ what: String,
                         file: StaticString = #filePath, line: UInt = #line) throws
    {
        try f.initialise("a")
        let check = try f.run("a", ["cloud", "check"], expect: nil)
        let mode = try f.run("a", ["mode", "cloud"], expect: nil)
        // storectl refuses them (docs/sync-guarantees.md): a table it cannot track is named up front.
        XCTAssertEqual(mode.status, 65, "[\(f.backend)] \(what): mode cloud must refuse '\(table)' up front\n\(mode)",
                       file: file, line: line)
        if mode.status == 0 {
            XCTAssertEqual(check.status, 0, "[\(f.backend)] \(what): mode cloud accepted what cloud check refused\n"
                           + "\(check)", file: file, line: line)
            try f.cloudMode("b")
            try f.syncRounds(2, ["a", "b"], file: file, line: line)
            XCTAssertTrue(try probe("b"), "[\(f.backend)] \(what): mode cloud accepted '\(table)' but its rows "
                          + "never reached b", file: file, line: line)
            return
        }
        XCTAssertEqual(mode.status, 65, "[\(f.backend)] \(what): mode cloud\n\(mode)", file: file, line: line)
        XCTAssertEqual(check.status, 65, "[\(f.backend)] \(what): cloud check\n\(check)", file: file, line: line)
        for r in [check, mode] {
            XCTAssertTrue((r.stdout + r.stderr).contains(table), "[\(f.backend)] \(what): the refusal does not "
                          + "name '\(table)'\n\(r)", file: file, line: line)
            XCTAssertTrue((r.stdout + r.stderr).contains("hint"), "[\(f.backend)] \(what): the refusal says not "
                          + "what to do\n\(r)", file: file, line: line)
        }
        let (_, status) = try f.status("a")
        XCTAssertEqual(JSONDoc.get(status, "mode") as? String, "local", "[\(f.backend)] \(what): a refused store "
                       + "must stay local", file: file, line: line)
        XCTAssertTrue(try f.dir.read("config.yaml").contains("mode: local"), file: file, line: line)
    }

    func reservedAndVirtualTables(_ backend: FleetBackend) throws {
        let reserved = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);
            CREATE TABLE IF NOT EXISTS _storectl_mine(k TEXT PRIMARY KEY, v TEXT);
            """, label: "storectl-case4")
        try reserved.initialise("a")
        try reserved.sql("a", "INSERT INTO _storectl_mine VALUES ('k', 'mine'); INSERT INTO notes(title) VALUES ('n')")
        try syncedOrRefused(reserved, table: "_storectl_mine", probe: { s in
            try reserved.trySQL(s, "SELECT v FROM _storectl_mine").stdout.contains("mine")
        }, "a user table named _storectl_*")

        let virtual = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);
            CREATE VIRTUAL TABLE IF NOT EXISTS notes_fts USING fts5(title);
            """, label: "storectl-case4")
        try virtual.initialise("a")
        try virtual.sql("a", "INSERT INTO notes(title) VALUES ('hello'); INSERT INTO notes_fts(title) VALUES ('hello')")
        try syncedOrRefused(virtual, table: "notes_fts", probe: { s in
            try virtual.trySQL(s, "SELECT title FROM notes_fts WHERE notes_fts MATCH 'hello'").stdout.contains("hello")
        }, "an FTS5 virtual table")

        // Left out on purpose through `entities:`, the virtual table is no reason to refuse; its shadow tables are
        // never synced either.
        let chosen = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);
            CREATE VIRTUAL TABLE IF NOT EXISTS notes_fts USING fts5(title);
            """, storeYAML: "    entities:\n      notes: {}\n", label: "storectl-case4")
        try chosen.initialise("a")
        try chosen.sql("a", "INSERT INTO notes(title) VALUES ('hello'); INSERT INTO notes_fts(title) VALUES ('hello')")
        try chosen.cloudMode("a")
        try chosen.cloudMode("b")
        try chosen.syncRounds(2, ["a", "b"])
        try chosen.assertSameRows(tables: ["notes"], late: true, "notes beside an FTS5 table left out")
        XCTAssertEqual(try chosen.liveCloudCounts(), ["notes": 1], "[\(backend)] only notes travel")
        for s in chosen.stores {
            XCTAssertEqual(try chosen.sql(s, "INSERT INTO notes_fts(notes_fts) VALUES ('integrity-check'); SELECT 'ok'")
                .trimmingCharacters(in: .whitespacesAndNewlines), "ok")
        }
    }

    func testCase4ReservedAndVirtualTablesFile() throws { try reservedAndVirtualTables(.file) }
    func testCase4ReservedAndVirtualTablesPostgres() throws { try onPostgres(reservedAndVirtualTables) }
}
