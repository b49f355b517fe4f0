import Foundation
import TestSupport
import XCTest

/// `storectl migrate --to` against what breaks a move: kills at every step with app writes into the old and the
/// new file before the rerun, and targets that are (or make) a store's files. Through the real binary.
final class MoveSafetyTests: XCTestCase {
    /// Stores a and b in local mode, with notes n1 and n2 on a.
    func stores() throws -> Fleet {
        let s = try Fleet.notes(label: "storectl-move-safety")
        try s.run("a", ["mode", "local"])
        try s.run("b", ["mode", "local"])
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        return s
    }

    /// An app's write with the sqlite3 shell: whether it committed, and what it said.
    func appWrite(_ s: Fleet, _ path: String, _ uuid: String) throws -> ProcessResult {
        try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", path,
                                            "INSERT INTO notes(uuid, title) VALUES ('\(uuid)', 'app')"], in: s.dir.path)
    }

    func count(_ s: Fleet, _ path: String, _ uuid: String) throws -> String {
        try s.sqlFile(path, "SELECT count(*) FROM notes WHERE uuid = '\(uuid)'")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func bytes(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    /// The failpoints of `migrate --to`, as `storectl debug failpoints` lists them.
    func moveFailpoints(_ s: Fleet) throws -> [String] {
        let r = try s.run(nil, ["--json", "debug", "failpoints"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        let all = try XCTUnwrap(doc["failpoints"] as? [[String: Any]]).compactMap { $0["name"] as? String }
        return all.filter { $0.hasPrefix("move.") }
    }

    enum Writes: String, CaseIterable { case both, oldOnly, newOnly }

    /// For every failpoint of a move: kill there, let an app write a row into the old file and (where it exists)
    /// into the new one, run `doctor`, then the same command again. Every row that was written is in the store
    /// config.yaml finally names, or the rerun refused with both files and config.yaml unchanged; `doctor` is never
    /// healthy while a move is unfinished in a way that could lose a row.
    func testEveryMoveFailpointWithAppWritesIntoTheOldAndTheNewFileLosesNoRow() throws {
        let probe = try stores()
        let failpoints = try moveFailpoints(probe)
        XCTAssertGreaterThanOrEqual(failpoints.count, 5, "\(failpoints)")
        var cases: [(String, Writes)] = failpoints.map { ($0, .both) }
        cases += [("move.after-rename", .oldOnly), ("move.after-rename", .newOnly), ("move.after-config", .oldOnly)]
        for (failpoint, writes) in cases {
            let label = "\(failpoint) \(writes)"
            let s = try stores()
            let old = s.dir.file("data/a.sqlite")
            let new = s.dir.file("moved/a.sqlite")
            let oldConfig = s.config
            let newConfig = oldConfig.replacingOccurrences(of: "path: data/a.sqlite ", with: "path: moved/a.sqlite ")
            try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": failpoint], expect: 137)

            // The app writes, into whichever file it has open.
            var written: [(uuid: String, path: String)] = []
            if writes != .newOnly, try appWrite(s, old, "old-row").status == 0 { written.append(("old-row", old)) }
            if writes != .oldOnly, FileManager.default.fileExists(atPath: new),
               try appWrite(s, new, "new-row").status == 0
            {
                written.append(("new-row", new))
            }
            let doctor = try s.run("a", ["--json", "doctor"], expect: nil)
            let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(doctor.stdout.utf8)) as? [String: Any],
                                       "\(label): \(doctor)")
            let healthy = report["healthy"] as? Bool ?? true
            if ["move.after-fence", "move.after-config"].contains(failpoint) {
                XCTAssertFalse(healthy, "\(label): doctor is healthy in the middle of a move\n\(doctor.stdout)")
            }
            let configBefore = s.config
            let filesBefore = [old: bytes(old), new: bytes(new)]

            let rerun = try s.run("a", ["migrate", "--to", "moved/a.sqlite"], expect: nil)
            if rerun.status == 0 {
                XCTAssertEqual(s.config, newConfig, label)
                XCTAssertFalse(FileManager.default.fileExists(atPath: old), "\(label): the old file is still there")
                for row in written + [("n1", old), ("n2", old)] {
                    XCTAssertEqual(try count(s, new, row.0), "1", "\(label): \(row.0) was lost\n\(rerun)")
                }
                XCTAssertEqual(try s.sqlFile(new, "PRAGMA integrity_check"), "ok\n", label)
                XCTAssertEqual(try s.sqlFile(new, "SELECT count(*) FROM _storectl_meta WHERE key IN "
                                             + "('moved_from', 'move_snapshot')"), "0\n", label)
                // The moved store takes writes and tracks them.
                let history = try s.sqlFile(new, "SELECT count(*) FROM _storectl_history")
                try s.sqlFile(new, "INSERT INTO notes(uuid) VALUES ('after')")
                XCTAssertNotEqual(try s.sqlFile(new, "SELECT count(*) FROM _storectl_history"), history, label)
            } else {
                // Refused: the reason, the fix, and nothing changed.
                XCTAssertTrue([65, 73].contains(rerun.status), "\(label): \(rerun)")
                XCTAssertTrue(rerun.stderr.contains("nothing was changed"), "\(label): \(rerun.stderr)")
                XCTAssertTrue(rerun.stderr.contains("hint: "), "\(label): \(rerun.stderr)")
                XCTAssertEqual(s.config, configBefore, label)
                XCTAssertEqual(bytes(old), filesBefore[old] ?? nil, "\(label): the old file changed")
                XCTAssertEqual(bytes(new), filesBefore[new] ?? nil, "\(label): the new file changed")
                for row in written { XCTAssertEqual(try count(s, row.path, row.uuid), "1", label) }
            }
            // Which outcome each case must have.
            switch (failpoint, writes) {
            case ("move.after-rename", .both):
                XCTAssertEqual(rerun.status, 65, "\(label): \(rerun)")
                XCTAssertTrue(rerun.stderr.contains("both \(old) and \(new) were written"), rerun.stderr)
            default:
                XCTAssertEqual(rerun.status, 0, "\(label): \(rerun)")
            }
        }
    }

    /// The report: killed after config.yaml names the new file, the app writes into the old one, and the rerun
    /// said "finished an earlier move: removed a.sqlite". Now the old file refuses the write before config.yaml
    /// changes, and the write is never lost.
    func testAWriteIntoTheOldFileAfterAKilledMoveIsRefusedNotLost() throws {
        let s = try stores()
        let old = s.dir.file("data/a.sqlite")
        let new = s.dir.file("moved/a.sqlite")
        try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": "move.after-config"],
                  expect: 137)
        let write = try appWrite(s, old, "late")
        XCTAssertNotEqual(write.status, 0, "the old file took a write after config.yaml named the new one")
        XCTAssertTrue(write.stderr.contains("storectl: this store moved to \(new); open it there"), write.stderr)
        let doctor = try s.run("a", ["doctor"], expect: 65)
        XCTAssertTrue(doctor.stdout.contains("a move of the store from \(old) did not finish"), doctor.stdout)
        XCTAssertTrue(doctor.stdout.contains("storectl --store a migrate --to \(new)"), doctor.stdout)
        let rerun = try s.run("a", ["migrate", "--to", "moved/a.sqlite"])
        XCTAssertTrue((rerun.stdout + rerun.stderr).contains("finished an earlier move: removed \(old)"), "\(rerun)")
        XCTAssertEqual(try s.sqlFile(new, "SELECT uuid FROM notes ORDER BY uuid"), "n1\nn2\n")
        try s.run("a", ["doctor"])
    }

    /// A store file moved by an older storectl, which edited config.yaml before it fenced the old file: an old file
    /// that took writes after the copy is never removed; one that did not is.
    func testAnUnfencedOldFileWithWritesTheNewLacksIsNeverRemoved() throws {
        for written in [true, false] {
            let s = try stores()
            let old = s.dir.file("data/a.sqlite")
            let new = s.dir.file("moved/a.sqlite")
            try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": "move.after-config"],
                      expect: 137)
            // What an older storectl left: no fence on the old file, no snapshot on the new one.
            let triggers = try s.sqlFile(old, "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE "
                                         + "'\\_storectl\\_moved\\_%' ESCAPE '\\'")
                .split(separator: "\n").map { "DROP TRIGGER \"\($0)\";" }.joined()
            XCTAssertFalse(triggers.isEmpty)
            try s.sqlFile(old, triggers + "DELETE FROM _storectl_meta WHERE key = 'moved_to'")
            try s.sqlFile(new, "DELETE FROM _storectl_meta WHERE key = 'move_snapshot'")
            if written { XCTAssertEqual(try appWrite(s, old, "late").status, 0) }
            let oldBytes = bytes(old)
            let config = s.config
            let rerun = try s.run("a", ["migrate", "--to", "moved/a.sqlite"], expect: written ? 65 : 0)
            if written {
                XCTAssertTrue(rerun.stderr.contains("error: store 'a': \(old), the file an earlier move left behind, "
                                                    + "was written after it was copied to \(new)"), rerun.stderr)
                XCTAssertTrue(rerun.stderr.contains("nothing was changed"), rerun.stderr)
                XCTAssertTrue(rerun.stderr.contains("hint: copy the rows you need from \(old) into \(new)"), rerun.stderr)
                XCTAssertEqual(bytes(old), oldBytes)
                XCTAssertEqual(s.config, config)
                XCTAssertEqual(try count(s, old, "late"), "1")
            } else {
                XCTAssertFalse(FileManager.default.fileExists(atPath: old))
                XCTAssertEqual(try s.sqlFile(new, "SELECT uuid FROM notes ORDER BY uuid"), "n1\nn2\n")
            }
        }
    }

    /// Targets that are, or would make, a file of this or another store: refused with exit 64 (73 for companions
    /// that exist), nothing changed, the store byte-identical.
    func testTargetsThatAreOrMakeAStoresFileAreRefused() throws {
        let s = try stores()
        let a = s.dir.file("data/a.sqlite")
        try FileManager.default.createDirectory(atPath: s.dir.file("data/sub"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: s.dir.file("alias.sqlite"), withDestinationPath: "data/b.sqlite")
        try FileManager.default.createSymbolicLink(atPath: s.dir.file("dlink"), withDestinationPath: "data")
        XCTAssertEqual(link(a, s.dir.file("hard.sqlite")), 0)
        XCTAssertEqual(link(s.dir.file("data/b.sqlite"), s.dir.file("hardb.sqlite")), 0)
        try FileManager.default.createDirectory(atPath: s.dir.file("fresh"), withIntermediateDirectories: true)
        try s.dir.write("fresh/a.sqlite-wal", "a stale WAL")
        let cases: [(target: String, code: Int32, says: String)] = [
            ("data/a.sqlite-wal", 64, "data/a.sqlite-wal is the -wal companion file of \(a), the file of store 'a' itself"),
            ("data/a.sqlite-shm", 64, "is the -shm companion file of \(a)"),
            ("data/a.sqlite-journal", 64, "is the -journal companion file of \(a)"),
            ("data/b.sqlite-wal", 64, "is the -wal companion file of \(s.dir.file("data/b.sqlite")), the file of store 'b'"),
            ("data/sub/../b.sqlite", 64, "\(s.dir.file("data/b.sqlite")) is the file of store 'b'"),
            ("alias.sqlite", 64, "alias.sqlite is the file of store 'b' (through a link)"),
            ("dlink/a.sqlite", 64, "dlink/a.sqlite is the file of store 'a' itself (the file being moved) (through a link)"),
            ("hard.sqlite", 64, "hard.sqlite is the file of store 'a' itself"),
            ("hardb.sqlite", 64, "hardb.sqlite is the file of store 'b'"),
            ("fresh/a.sqlite", 73, "fresh/a.sqlite-wal already exists: SQLite would take it for the -wal file of"),
        ]
        for c in cases {
            let before = bytes(a)
            let config = s.config
            let r = try s.run("a", ["migrate", "--to", c.target], expect: c.code)
            XCTAssertTrue(r.stderr.contains(c.says), "\(c.target): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("nothing was changed"), "\(c.target): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("hint: "), "\(c.target): \(r.stderr)")
            XCTAssertEqual(bytes(a), before, "\(c.target): store a's file changed")
            XCTAssertEqual(s.config, config, c.target)
            XCTAssertEqual(try s.sqlFile(a, "SELECT count(*) FROM notes"), "2\n", c.target)
        }
        XCTAssertEqual(try s.dir.read("fresh/a.sqlite-wal"), "a stale WAL")
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.dir.file("fresh/a.sqlite")))
        // A target whose companion would be a store's file: b moved to data/x-journal, then a to data/x.
        try s.run("b", ["migrate", "--to", "data/x-journal"])
        let r = try s.run("a", ["migrate", "--to", "data/x"], expect: 64)
        XCTAssertTrue(r.stderr.contains("would have \(s.dir.file("data/x-journal")), the file of store 'b', as its "
                                        + "-journal companion file"), r.stderr)
        XCTAssertEqual(try s.sqlFile(s.dir.file("data/x-journal"), "PRAGMA integrity_check"), "ok\n")
        // --copy is refused the same way.
        try s.run("a", ["migrate", "--to", "data/x-journal-shm", "--copy"], expect: 64)
        try s.run("a", ["migrate", "--to", "hard.sqlite", "--copy"], expect: 64)
        XCTAssertEqual(try s.sqlFile(a, "SELECT uuid FROM notes ORDER BY uuid"), "n1\nn2\n")
    }
}

extension MoveSafetyTests {
    /// A crash during the recovery of a crash: the rerun is killed too (at each of its later steps), with app writes
    /// into the new file between the kills; a last rerun finishes and every row is there.
    func testARerunKilledAgainLosesNothing() throws {
        for (first, second) in [("move.after-rename", "move.after-fence"), ("move.after-rename", "move.after-config"),
                                ("move.after-fence", "move.after-config")]
        {
            let label = "\(first) then \(second)"
            let s = try stores()
            let old = s.dir.file("data/a.sqlite")
            let new = s.dir.file("moved/a.sqlite")
            try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": first], expect: 137)
            XCTAssertEqual(try appWrite(s, new, "one").status, 0, label)
            try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": second], expect: 137)
            XCTAssertEqual(try appWrite(s, new, "two").status, 0, label)
            XCTAssertNotEqual(try appWrite(s, old, "refused").status, 0, "\(label): the old file took a write")
            try s.run("a", ["migrate", "--to", "moved/a.sqlite"])
            XCTAssertFalse(FileManager.default.fileExists(atPath: old), label)
            XCTAssertEqual(try s.sqlFile(new, "SELECT uuid FROM notes ORDER BY uuid"), "n1\nn2\none\ntwo\n", label)
            try s.run("a", ["doctor"])
        }
    }

    /// Killed after the rename, an app changes only a value in the copy (an update of a table storectl does not
    /// track, so no history row and no count moves): the rerun still sees the copy was written, and keeps it.
    func testAnUpdateOnlyInTheCopyIsSeen() throws {
        let s = try stores()
        try s.sql("a", "CREATE TABLE untracked_kv(k TEXT, v TEXT); INSERT INTO untracked_kv VALUES ('x', 'before')")
        let new = s.dir.file("moved/a.sqlite")
        try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": "move.after-rename"],
                  expect: 137)
        try s.sqlFile(new, "UPDATE untracked_kv SET v = 'after' WHERE k = 'x'")
        try s.run("a", ["migrate", "--to", "moved/a.sqlite"])
        XCTAssertEqual(try s.sqlFile(new, "SELECT v FROM untracked_kv"), "after\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.dir.file("data/a.sqlite")))
    }

    /// The old file fenced for one target: a move to another target is refused until that move is finished, and
    /// a fenced file whose new file is gone is never copied (with its fence) anywhere.
    func testAFencedStoreIsMovedOnlyWhereItsFenceSays() throws {
        let s = try stores()
        let old = s.dir.file("data/a.sqlite")
        let new = s.dir.file("moved/a.sqlite")
        try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": "move.after-fence"],
                  expect: 137)
        let config = s.config
        let other = try s.run("a", ["migrate", "--to", "elsewhere/a.sqlite"], expect: 75)
        XCTAssertTrue(other.stderr.contains("store 'a' was moved to \(new) by a move that has not finished"), other.stderr)
        XCTAssertTrue(other.stderr.contains("hint: finish that move first: 'storectl --store a migrate --to \(new)'")
                      || other.stderr.contains("hint: finish that move first: 'storectl migrate --to \(new)'"),
                      other.stderr)
        XCTAssertEqual(s.config, config)
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.dir.file("elsewhere/a.sqlite")))
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: new + suffix) {
            try FileManager.default.moveItem(atPath: new + suffix, toPath: s.dir.file("kept.sqlite" + suffix))
        }
        let gone = try s.run("a", ["migrate", "--to", "moved/a.sqlite"], expect: 65)
        XCTAssertTrue(gone.stderr.contains("but \(new) does not hold the store; nothing was changed"), gone.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: new))
        XCTAssertTrue(FileManager.default.fileExists(atPath: old))
        XCTAssertEqual(s.config, config)
    }
}

extension MoveSafetyTests {
    /// Between the fence and the config edit, the fenced file is not drift: status and history do not advise
    /// `storectl migrate`, and running it keeps the fence. A fence taken apart by hand that let a write in makes
    /// the rerun refuse (65) rather than remove the file.
    func testTheFenceSurvivesMigrateAndABrokenFenceIsNeverTrusted() throws {
        let s = try stores()
        let old = s.dir.file("data/a.sqlite")
        let new = s.dir.file("moved/a.sqlite")
        try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": "move.after-fence"],
                  expect: 137)
        let status = try s.run("a", ["status"], expect: nil)
        XCTAssertFalse((status.stdout + status.stderr).contains("_storectl_moved_"), "\(status)")
        try s.run("a", ["migrate"], expect: nil)
        XCTAssertNotEqual(try appWrite(s, old, "after-migrate").status, 0, "storectl migrate took the fence down")
        XCTAssertEqual(try count(s, old, "after-migrate"), "0")

        // Someone drops the fence by hand and writes.
        let triggers = try s.sqlFile(old, "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE "
                                     + "'\\_storectl\\_moved\\_%' ESCAPE '\\'")
            .split(separator: "\n").map { "DROP TRIGGER \"\($0)\";" }.joined()
        XCTAssertFalse(triggers.isEmpty)
        try s.sqlFile(old, triggers)
        XCTAssertEqual(try appWrite(s, old, "through-a-broken-fence").status, 0)
        let oldBytes = bytes(old)
        let config = s.config
        let rerun = try s.run("a", ["migrate", "--to", "moved/a.sqlite"], expect: 65)
        XCTAssertTrue(rerun.stderr.contains("\(old) was fenced by a move to \(new), but its fence was taken apart and "
                                            + "it was written since it was copied"), rerun.stderr)
        XCTAssertTrue(rerun.stderr.contains("nothing was changed"), rerun.stderr)
        XCTAssertEqual(bytes(old), oldBytes)
        XCTAssertEqual(s.config, config)
        XCTAssertEqual(try count(s, old, "through-a-broken-fence"), "1")
    }
}
