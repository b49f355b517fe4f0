import Foundation
import StoreCloud
import TestSupport
import XCTest

/// Bad input, faults and mistakes: each gives a clear error with a sysexits code, and nothing is modified.
final class BadInputTests: XCTestCase {
    /// Every file under the test folder (without SQLite's -shm files, which readers rewrite), by path.
    func snapshot(_ s: Fleet) throws -> [String: Data] {
        var files: [String: Data] = [:]
        let e = FileManager.default.enumerator(atPath: s.dir.path)
        while let f = e?.nextObject() as? String {
            var isDir: ObjCBool = false
            let p = s.dir.file(f)
            guard FileManager.default.fileExists(atPath: p, isDirectory: &isDir), !isDir.boolValue,
                  !f.hasSuffix("-shm") else { continue }
            files[f] = try Data(contentsOf: URL(fileURLWithPath: p))
        }
        return files
    }

    /// Moves every WAL into its database file, so that a byte comparison sees only real changes.
    func settle(_ s: Fleet) throws {
        for store in s.stores where FileManager.default.fileExists(atPath: s.dir.file("data/\(store).sqlite")) {
            _ = try? Binary.run("/usr/bin/sqlite3", [s.dir.file("data/\(store).sqlite"), "PRAGMA wal_checkpoint(TRUNCATE)"],
                                in: s.dir.path)
        }
        _ = try? Binary.run("/usr/bin/sqlite3", [s.dir.file("cloud/shared.container"), "PRAGMA wal_checkpoint(TRUNCATE)"],
                            in: s.dir.path)
        for f in ["data/a.sqlite-wal", "data/b.sqlite-wal", "cloud/shared.container-wal"] {
            if let d = try? Data(contentsOf: URL(fileURLWithPath: s.dir.file(f))), d.isEmpty {
                try? FileManager.default.removeItem(atPath: s.dir.file(f))
            }
        }
    }

    var exercised = 0

    /// Runs `args` and checks the exit code, that stderr says `message`, and that no file changed.
    func expectRefusal(_ s: Fleet, _ store: String?, _ args: [String], codes: Set<Int32>, message: String,
                       env: [String: String] = [:], runAs: [String] = [], file: StaticString = #filePath,
                       line: UInt = #line) throws
    {
        try settle(s)
        let before = try snapshot(s)
        let argv = (store.map { ["--store", $0] } ?? []) + args
        let r = runAs.isEmpty ? try Binary.storectl(argv, in: s.dir.path, environment: env)
            : try Binary.run(runAs[0], Array(runAs.dropFirst()) + [Binary.storectl] + argv, in: s.dir.path,
                             environment: env)
        exercised += 1
        XCTAssertTrue(codes.contains(r.status), "storectl \(argv.joined(separator: " ")): exit \(r.status), "
                      + "expected one of \(codes.sorted())\n\(r)", file: file, line: line)
        XCTAssertTrue(message.isEmpty || r.stderr.contains(message), "stderr lacks '\(message)'\n\(r)", file: file,
                      line: line)
        XCTAssertTrue(r.stderr.contains("error: "), "\(r)", file: file, line: line)
        XCTAssertFalse(r.stderr.contains("internal"), "an internal error\n\(r)", file: file, line: line)
        try settle(s)
        let after = try snapshot(s)
        for key in Set(before.keys).union(after.keys).sorted() where before[key] != after[key] {
            XCTFail("storectl \(argv.joined(separator: " ")) changed \(key)", file: file, line: line)
        }
    }

    /// Two stores in cloud mode with a few rows each way.
    func synced(extra: String = "") throws -> Fleet {
        let s = try Fleet.notes(extra: extra, label: "storectl-bad")
        try s.run("a", ["mode", "local"])
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three'), "
                  + "('n4', 'four'), ('n5', 'five'), ('n6', 'six'), ('n7', 'seven'), ('n8', 'eight'), "
                  + "('n9', 'nine'), ('n10', 'ten')")
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        s.modes = ["a": "cloud", "b": "cloud"]
        return s
    }

    // MARK: Bad store files

    func testCorruptOrForeignStoreFilesAreRefusedAndLeftAlone() throws {
        let s = try synced()
        let real = try Data(contentsOf: URL(fileURLWithPath: s.dir.file("data/b.sqlite")))
        let commands: [[String]] = [["sync"], ["mode", "local"], ["status"], ["doctor"]]
        // The WAL moved into the file first, so that the damage is to the whole store, not only to the main file.
        try settle(s)
        // Text, not SQLite.
        try Data(String(repeating: "this is not a database\n", count: 200).utf8)
            .write(to: URL(fileURLWithPath: s.dir.file("data/b.sqlite")))
        for args in commands {
            try expectRefusal(s, "b", args, codes: [65], message: "is not a SQLite database")
        }
        // A SQLite file whose header was overwritten.
        try settle(s)
        var scribbled = real
        scribbled.replaceSubrange(0..<16, with: Data("garbage!garbage!".utf8))
        try scribbled.write(to: URL(fileURLWithPath: s.dir.file("data/b.sqlite")))
        for args in commands {
            try expectRefusal(s, "b", args, codes: [65], message: "is not a SQLite database")
        }
        // A store cut short (half its pages lost).
        try settle(s)
        try real.prefix(real.count / 2).write(to: URL(fileURLWithPath: s.dir.file("data/b.sqlite")))
        for args in [["sync"], ["mode", "local"]] {
            try expectRefusal(s, "b", args, codes: [65, 74], message: "b.sqlite")
        }
        // A SQLite database that storectl never initialised, named as a store in cloud mode.
        try FileManager.default.removeItem(atPath: s.dir.file("data/b.sqlite"))
        try s.sql("b", "CREATE TABLE other(x)")
        try expectRefusal(s, "b", ["sync"], codes: [78], message: "")
        print("bad store files: \(exercised) refusals, nothing modified")
    }

    func testCorruptOrForeignContainersAreRefusedAndLeftAlone() throws {
        let s = try Fleet.notes(label: "storectl-bad")
        try s.run("a", ["mode", "local"])
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
        let container = s.dir.file("cloud/shared.container")
        func remove() throws {
            try settle(s)
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: container + suffix) }
        }
        try remove()
        // Text, not SQLite.
        try Data(String(repeating: "not a container\n", count: 100).utf8).write(to: URL(fileURLWithPath: container))
        try expectRefusal(s, "a", ["mode", "cloud"], codes: [65, 69], message: "container")
        // A SQLite database that is not a container (a store file).
        try remove()
        try FileManager.default.copyItem(atPath: s.dir.file("data/a.sqlite"), toPath: container)
        try expectRefusal(s, "a", ["mode", "cloud"], codes: [65, 69], message: "not a storectl container")
        // Another container's file.
        try remove()
        _ = try FileCloudDatabase.create(path: container, container: "iCloud.com.example.other", account: "demo",
                                         secret: Fleet.notesSecret, iterations: 1)
        try expectRefusal(s, "a", ["mode", "cloud"], codes: [65, 69], message: "iCloud.com.example.other")
        // A real container whose header was overwritten.
        try remove()
        _ = try FileCloudDatabase.create(path: container, container: "iCloud.com.example.notes", account: "demo",
                                         secret: Fleet.notesSecret, iterations: 1)
        try settle(s)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: container))
        bytes.replaceSubrange(0..<16, with: Data("garbage!garbage!".utf8))
        try bytes.write(to: URL(fileURLWithPath: container))
        try expectRefusal(s, "a", ["mode", "cloud"], codes: [65, 69], message: "container")
        XCTAssertEqual(try s.run("a", ["mode"]).stdout, "local\n")
        print("bad containers: \(exercised) refusals, nothing modified")
    }

    // MARK: Permissions and disk space

    /// Runs as `nobody` (tests run as root in CI, and root ignores permission bits).
    var asNobody: [String] {
        getuid() == 0 ? ["/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] : []
    }

    func testAReadOnlyStoreDirectoryIsAClearErrorAndNothingChanges() throws {
        let s = try synced()
        try s.sql("b", "INSERT INTO notes(uuid, title) VALUES ('b1', 'pending')")
        try settle(s)
        // The store file is the user's, but its folder is not writable: SQLite cannot create its -wal file.
        chmod(s.dir.path, 0o755)
        for f in ["data/b.sqlite", "cloud/shared.container", "cloud", "config.yaml"] {
            chown(s.dir.file(f), 65534, 65534)
        }
        chmod(s.dir.file("data"), 0o555)
        defer { chmod(s.dir.file("data"), 0o755) }
        try expectRefusal(s, "b", ["sync"], codes: [73, 74, 77], message: "b.sqlite", runAs: asNobody)
        try expectRefusal(s, "b", ["mode", "local"], codes: [73, 74, 77], message: "b.sqlite", runAs: asNobody)
        // The read-only store file itself, folder writable.
        chmod(s.dir.file("data"), 0o777)
        chmod(s.dir.file("data/b.sqlite"), 0o444)
        try expectRefusal(s, "b", ["sync"], codes: [73, 77], message: "b.sqlite", runAs: asNobody)
        print("read-only store: \(exercised) refusals, nothing modified")
    }

    func testAFullDiskOnWriteIsAnIOErrorNotACrash() throws {
        let s = try synced()
        // Enough rows that importing them writes far more than the limit.
        try s.sql("a", """
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000)
            INSERT INTO notes(uuid, title, body) SELECT 'bulk-' || i, 'bulk', hex(zeroblob(100)) FROM c
            """)
        try s.run("a", ["sync"])
        let before = try s.noteRows("b")
        // ulimit -f counts 512-byte blocks in dash: b may not grow any file past 256 KiB.
        try settle(s)
        let r = try Binary.run("/bin/sh", ["-c", "ulimit -f 512; exec \"$0\" \"$@\"", Binary.storectl, "--store", "b",
                                           "sync"], in: s.dir.path)
        exercised += 1
        XCTAssertTrue([73, 74].contains(r.status), "expected an I/O error\n\(r)")
        XCTAssertNotEqual(r.status, 128 + 25, "killed by SIGXFSZ\n\(r)")
        XCTAssertTrue(r.stderr.contains("error: "), "\(r)")
        XCTAssertEqual(try s.noteRows("b"), before, "a failed import changed the store")
        XCTAssertEqual(try s.integrity().values.filter { $0 != "ok" }, [])
        // With space again, the same sync completes.
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.noteRows("b"), try s.noteRows("a"))
    }

    // MARK: Config mistakes

    func testAnUnreadableConfigIsAClearError() throws {
        let s = try Fleet.notes(label: "storectl-bad")
        chmod(s.dir.path, 0o755)
        chmod(s.dir.file("config.yaml"), 0o000)
        try expectRefusal(s, "a", ["mode", "cloud"], codes: [77], message: "config.yaml", runAs: asNobody)
        chmod(s.dir.file("config.yaml"), 0o600)
        // A config path that is a folder.
        try expectRefusal(s, "a", ["--config", "data-folder", "status"], codes: [66, 74, 77, 78],
                          message: "data-folder", env: [:])
        try FileManager.default.createDirectory(atPath: s.dir.file("data-folder"), withIntermediateDirectories: true)
        try expectRefusal(s, "a", ["--config", "data-folder", "mode", "cloud"], codes: [66, 74, 77, 78],
                          message: "data-folder")
    }

    func testTwoStoresOnOneFileAreAConfigError() throws {
        let s = try Fleet.notes(label: "storectl-bad")
        let yaml = s.configText(s.modes).replacingOccurrences(of: "path: data/b.sqlite",
                                                              with: "path: ./data/../data/a.sqlite")
        try s.dir.write("config.yaml", yaml)
        try expectRefusal(s, "a", ["mode", "cloud"], codes: [78], message: "store 'a' already uses this file")
        try expectRefusal(s, "b", ["status"], codes: [78], message: "each store needs its own SQLite file")
    }

    func testALiteralSecretInAConfigOthersCanReadIsWarnedAbout() throws {
        let s = try Fleet.notes(label: "storectl-bad")
        chmod(s.dir.file("config.yaml"), 0o644)
        let r = try s.run("a", ["mode"])
        // One warning for the file, naming each store's literal secret.
        XCTAssertTrue(r.stderr.contains("warning: stores.a.cloud.secret and stores.b.cloud.secret are written in "
                                        + "config.yaml, which other users can read; use 'secret: ${VARIABLE}' or run "
                                        + "'chmod 600 config.yaml'"), r.stderr)
        XCTAssertFalse(r.stderr.contains(Fleet.notesSecret), r.stderr)
        chmod(s.dir.file("config.yaml"), 0o600)
        XCTAssertFalse(try s.run("a", ["mode"]).stderr.contains("warning"))
        // A secret taken from the environment is fine in a readable file.
        try s.dir.write("config.yaml", s.configText(s.modes).replacingOccurrences(of: "secret: demo-secret",
                                                                                with: "secret: ${DEMO_SECRET}"))
        chmod(s.dir.file("config.yaml"), 0o644)
        XCTAssertFalse(try s.run("a", ["mode"], env: ["DEMO_SECRET": "x"]).stderr.contains("warning"))
    }

    // MARK: Names that need quoting

    func testQuotesSpacesAndSQLInNamesSyncEndToEnd() throws {
        let s = try Fleet.notes(label: "storectl-bad")
        let schema = #"""
            CREATE TABLE IF NOT EXISTS "we""ird tab; DROP TABLE canary;--"(
                "id;" INTEGER PRIMARY KEY, "col ""q"" 'x'" TEXT, "select * from" TEXT, "[br]" INTEGER);
            CREATE TABLE IF NOT EXISTS "o'brien"("key ) --" TEXT PRIMARY KEY, "va""lue" TEXT);
            CREATE TABLE IF NOT EXISTS "child ""t"""("id" INTEGER PRIMARY KEY,
                "parent id" INTEGER REFERENCES "we""ird tab; DROP TABLE canary;--"("id;") ON DELETE CASCADE,
                "note's" TEXT);
            CREATE TABLE IF NOT EXISTS canary(id INTEGER PRIMARY KEY, alive TEXT);
            """#
        try s.dir.write("schema.sql", schema)
        try s.run("a", ["mode", "local"])
        try s.sql("a", #"""
            INSERT INTO canary(alive) VALUES ('yes');
            INSERT INTO "we""ird tab; DROP TABLE canary;--"("col ""q"" 'x'", "select * from", "[br]")
              VALUES ('it''s "quoted"', '''); DROP TABLE canary; --', 1), ('second', NULL, 2);
            INSERT INTO "o'brien" VALUES ('k''1"); DROP TABLE canary;--', 'v "1"'), ('plain', 'x');
            INSERT INTO "child ""t"""("parent id", "note's")
              SELECT "id;", 'child of ' || "[br]" FROM "we""ird tab; DROP TABLE canary;--";
            """#)
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        try s.sql("b", #"""
            UPDATE "o'brien" SET "va""lue" = 'changed by b''s "writer"' WHERE "key ) --" = 'plain';
            DELETE FROM "child ""t""" WHERE "note's" = 'child of 2';
            """#)
        try s.run("b", ["sync"])
        try s.run("a", ["sync"])
        let dump = #"""
            SELECT "col ""q"" 'x'", "select * from", "[br]" FROM "we""ird tab; DROP TABLE canary;--" ORDER BY 3;
            SELECT * FROM "o'brien" ORDER BY 1;
            SELECT w."[br]", c."note's" FROM "child ""t""" c JOIN "we""ird tab; DROP TABLE canary;--" w
              ON w."id;" = c."parent id" ORDER BY 1;
            SELECT alive FROM canary;
            """#
        let a = try s.sql("a", dump)
        XCTAssertEqual(a, #"""
            it's "quoted"|'); DROP TABLE canary; --|1
            second||2
            k'1"); DROP TABLE canary;--|v "1"
            plain|changed by b's "writer"
            1|child of 1
            yes

            """#)
        XCTAssertEqual(try s.sql("b", dump), a)
        XCTAssertEqual(try s.sql("b", "SELECT count(*) FROM sqlite_master WHERE name = 'canary'"), "1\n")
        XCTAssertEqual(try s.integrity().values.filter { $0 != "ok" }, [])
    }
}

/// Guards against mistakes: the mass-delete breaker, a zone purged elsewhere, an account change.
final class MistakeGuardTests: XCTestCase {
    func synced() throws -> Fleet {
        let s = try Fleet.notes(label: "storectl-guard")
        try s.run("a", ["mode", "local"])
        var sql = ""
        for i in 1...10 { sql += "INSERT INTO notes(uuid, title) VALUES ('n\(i)', 'note \(i)');" }
        try s.sql("a", sql)
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        // Ten notes: the breaker's floor (100 records by default) comes down to 3 for these tests.
        try s.run("a", ["config", "set", "stores.a.cloud.max_delete_count", "3"])
        try s.run("b", ["config", "set", "stores.b.cloud.max_delete_count", "3"])
        return s
    }

    func liveCloudNotes(_ s: Fleet) throws -> String {
        try s.sqlFile(s.dir.file("cloud/shared.container"),
                      "SELECT count(*) FROM records WHERE record_type = 'notes' AND deleted = 0")
    }

    func testTheMassDeleteBreakerStopsAndReportsAndAllowsWithTheFlag() throws {
        let s = try synced()
        try s.sql("a", "DELETE FROM notes WHERE uuid IN ('n1', 'n2', 'n3', 'n4', 'n5', 'n6')")
        let refused = try s.run("a", ["sync"], expect: 65)
        XCTAssertTrue(refused.stderr.hasPrefix("error: refusing to delete 6 of the zone's 10 record(s) (60%), more than "
                                               + "max_delete_fraction 0.5 and more than max_delete_count 3\n"),
                      refused.stderr)
        XCTAssertTrue(refused.stderr.contains("nothing was sent to the cloud"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("--allow-mass-delete"), refused.stderr)
        XCTAssertEqual(try liveCloudNotes(s), "10\n")
        let json = try s.run("a", ["--json", "sync"], expect: 65)
        XCTAssertTrue(json.stdout.contains("\"code\" : 65"), json.stdout)
        // The pending deletes are still there, and go through with the flag.
        try s.run("a", ["sync", "--allow-mass-delete"])
        XCTAssertEqual(try liveCloudNotes(s), "4\n")
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.noteRows("b"), try s.noteRows("a"))
        // A small delete passes without the flag.
        try s.sql("a", "DELETE FROM notes WHERE uuid = 'n7'")
        try s.run("a", ["sync"])
        // The fraction is configurable.
        try s.run("a", ["config", "set", "stores.a.cloud.max_delete_fraction", "0.9"])
        try s.sql("a", "DELETE FROM notes WHERE uuid IN ('n8', 'n9')")
        try s.run("a", ["sync"])
    }

    func testAnEmptyStoreIsNeverPushedOverANonEmptyZone() throws {
        let s = try synced()
        try s.sql("b", "DELETE FROM notes")
        let refused = try s.run("b", ["sync"], expect: 65)
        XCTAssertTrue(refused.stderr.hasPrefix("error: refusing to push an empty store over a zone that holds 10 record(s)"),
                      refused.stderr)
        XCTAssertEqual(try liveCloudNotes(s), "10\n")
        try s.run("a", ["sync"])
        XCTAssertEqual(try s.sql("a", "SELECT count(*) FROM notes"), "10\n")
    }

    func testAZonePurgedElsewhereNeverDeletesLocalRowsAndReuploadRestoresIt() throws {
        let s = try synced()
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('pending', 'not yet exported')")
        try s.run("b", ["cloud", "purge", "--yes"])
        let before = try s.noteRows("a")
        let r = try s.run("a", ["sync"], expect: 65)
        XCTAssertTrue(r.stderr.hasPrefix("error: zone 'default' was purged or recreated in the cloud since this store "
                                         + "last synced; no local row was deleted"), r.stderr)
        XCTAssertTrue(r.stderr.contains("'storectl --store a sync --reupload'"), r.stderr)
        XCTAssertEqual(try s.noteRows("a"), before)
        let doctor = try s.run("a", ["doctor"], expect: 69)
        XCTAssertTrue(doctor.stdout.contains("fix: storectl --store a sync --reupload"), doctor.stdout)
        try s.run("a", ["sync", "--reupload"])
        XCTAssertEqual(try liveCloudNotes(s), "11\n")
        // b sees the same, and re-uploading from b too duplicates nothing.
        try s.run("b", ["sync", "--reupload"])
        try s.run("a", ["sync"])
        XCTAssertEqual(try s.noteRows("b"), before)
        XCTAssertEqual(try s.noteRows("a"), before)
        XCTAssertEqual(try liveCloudNotes(s), "11\n")
    }

    func testAnAccountChangeNeverDropsPendingLocalChanges() throws {
        let s = try synced()
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('pending', 'made before the account changed');"
                  + "UPDATE notes SET body = 'edited' WHERE uuid = 'n1'")
        _ = try FileCloudDatabase.create(path: s.dir.file("cloud/other.container"), container: "iCloud.com.example.notes",
                                         account: "other", secret: "other-secret", iterations: 1)
        let moved = s.configText(["a": "cloud", "b": "cloud"])
            .replacingOccurrences(of: "url: file:cloud/shared.container", with: "url: file:cloud/other.container")
            .replacingOccurrences(of: "account: demo", with: "account: other")
            .replacingOccurrences(of: "secret: demo-secret", with: "secret: other-secret")
        try s.dir.write("config.yaml", moved)
        let before = try s.noteRows("a")
        let refused = try s.run("a", ["sync"], expect: 78)
        XCTAssertTrue(refused.stderr.contains("is bound to account 'demo'"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("--rebind"), refused.stderr)
        let doctor = try s.run("a", ["--json", "doctor"], expect: 69)
        XCTAssertTrue(doctor.stdout.contains("sync --rebind"), doctor.stdout)
        XCTAssertEqual(try s.noteRows("a"), before)
        try s.run("a", ["sync", "--rebind"])
        XCTAssertEqual(try s.noteRows("a"), before)
        let cloud = try s.sqlFile(s.dir.file("cloud/other.container"), """
            SELECT json_extract(fields, '$.uuid') || '|' || json_extract(fields, '$.body') FROM records
            WHERE deleted = 0 AND json_extract(fields, '$.uuid') IN ('pending', 'n1') ORDER BY 1
            """)
        XCTAssertEqual(cloud, "n1|edited\npending|\n")
        try s.run("b", ["sync", "--rebind"])
        XCTAssertEqual(try s.noteRows("b"), before)
    }
}
