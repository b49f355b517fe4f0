import Foundation
import TestSupport
import XCTest

/// `storectl migrate --to`: moving and copying a store file, through the real binary.
final class MigrateMoveTests: XCTestCase {
    /// Two stores in cloud mode sharing a container, with rows on a that b has, and a history consumer on a.
    func synced() throws -> Fleet {
        let s = try Fleet.notesInTheCloud(label: "storectl-move")
        try s.run("a", ["history", "consumer", "add", "search-index"])
        return s
    }

    func meta(_ s: Fleet, _ path: String, _ key: String) throws -> String {
        try s.sqlFile(path, "SELECT value FROM _storectl_meta WHERE key = '\(key)'")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testAMoveKeepsIdentityHistoryTokensAndTheConfigsComments() throws {
        let s = try synced()
        let old = s.dir.file("data/a.sqlite")
        let id = try meta(s, old, "store_id")
        let state = "SELECT (SELECT count(*) FROM _storectl_history), (SELECT count(*) FROM _storectl_records), "
            + "(SELECT group_concat(name || '=' || token) FROM _storectl_consumers), "
            + "(SELECT value FROM _storectl_tokens WHERE name = 'server:default')"
        let before = try s.sqlFile(old, state)

        let r = try s.run("a", ["--json", "migrate", "--to", "moved/a.sqlite"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["version"] as? Int, 1)
        XCTAssertEqual(doc["action"] as? String, "move")
        XCTAssertEqual(doc["identity"] as? String, "kept")
        XCTAssertEqual(doc["integrity"] as? String, "ok")
        XCTAssertEqual(doc["config_path"] as? String, "moved/a.sqlite")
        XCTAssertEqual(doc["old_file_removed"] as? Bool, true)
        XCTAssertEqual(doc["store_id"] as? String, id)

        let new = s.dir.file("moved/a.sqlite")
        for suffix in ["", "-wal", "-shm"] {
            XCTAssertFalse(FileManager.default.fileExists(atPath: old + suffix), "data/a.sqlite\(suffix) is still there")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: s.dir.file("moved")), ["a.sqlite"])
        XCTAssertEqual(try meta(s, new, "store_id"), id)
        XCTAssertEqual(try meta(s, new, "store_path"), new)
        XCTAssertEqual(try s.sqlFile(new, state), before)
        XCTAssertEqual(try s.sqlFile(new, "PRAGMA integrity_check"), "ok\n")
        // Only the path changed in config.yaml, and its comment stayed.
        let expected = s.configText(s.modes).replacingOccurrences(
            of: "path: data/a.sqlite   # the store file", with: "path: moved/a.sqlite   # the store file")
        XCTAssertEqual(s.config, expected)

        // The moved store syncs as the same device: an edit reaches b, b's edit reaches it, nothing is re-uploaded.
        try s.sqlFile(new, "UPDATE notes SET title = 'edited after the move' WHERE uuid = 'n1'")
        let sync = try s.run("a", ["--json", "sync"])
        XCTAssertTrue(sync.stdout.contains("\"saved\" : 1"), sync.stdout)
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.sql("b", "SELECT title FROM notes WHERE uuid = 'n1'"), "edited after the move\n")
        try s.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n3', 'from b')")
        try s.run("b", ["sync"])
        try s.run("a", ["sync"])
        XCTAssertEqual(try s.sqlFile(new, "SELECT uuid FROM notes ORDER BY uuid"), "n1\nn2\nn3\n")
        let doctor = try s.run("a", ["doctor"])
        XCTAssertTrue(doctor.stdout.contains("healthy"), doctor.stdout)

        // The same command again: nothing to do.
        let again = try s.run("a", ["migrate", "--to", "moved/a.sqlite"])
        XCTAssertTrue(again.stdout.contains("already at"), again.stdout)
    }

    func testACopyGetsANewIdentityAndLeavesTheConfigAlone() throws {
        let s = try synced()
        let old = s.dir.file("data/a.sqlite")
        let id = try meta(s, old, "store_id")
        let config = s.config
        let r = try s.run("a", ["--json", "migrate", "--to", "backup/a-copy.sqlite", "--copy"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["identity"] as? String, "new")
        XCTAssertEqual(doc["old_file_removed"] as? Bool, false)
        XCTAssertTrue(doc["config_path"] is NSNull)
        let copy = s.dir.file("backup/a-copy.sqlite")
        let newID = try meta(s, copy, "store_id")
        XCTAssertNotEqual(newID, id)
        XCTAssertEqual(doc["store_id"] as? String, newID)
        XCTAssertEqual(try meta(s, old, "store_id"), id)
        XCTAssertEqual(try meta(s, copy, "store_path"), copy)
        XCTAssertEqual(s.config, config)
        XCTAssertEqual(try s.sqlFile(copy, "SELECT uuid FROM notes ORDER BY uuid"), "n1\nn2\n")
        XCTAssertEqual(try s.sqlFile(copy, "SELECT count(*) FROM _storectl_history"),
                       try s.sqlFile(old, "SELECT count(*) FROM _storectl_history"))
        // The original keeps syncing, and is not taken for a copy of anything.
        try s.sql("a", "INSERT INTO notes(uuid) VALUES ('after the copy')")
        try s.run("a", ["sync"])
    }

    func testATargetThatExistsOrBelongsToAnotherStoreIsRefusedAndNothingChanges() throws {
        let s = try synced()
        try s.dir.write("taken.sqlite", "someone's file")
        let config = s.config
        let exists = try s.run("a", ["migrate", "--to", "taken.sqlite"], expect: 73)
        XCTAssertTrue(exists.stderr.contains("taken.sqlite already exists; nothing was changed"), exists.stderr)
        XCTAssertEqual(try s.dir.read("taken.sqlite"), "someone's file")
        let other = try s.run("a", ["migrate", "--to", "data/b.sqlite"], expect: 64)
        XCTAssertTrue(other.stderr.contains("is the file of store 'b'"), other.stderr)
        let same = try s.run("a", ["migrate", "--to", "data/a.sqlite", "--copy"], expect: 64)
        XCTAssertTrue(same.stderr.contains("onto itself"), same.stderr)
        try s.run("a", ["migrate", "--copy"], expect: 64)
        XCTAssertEqual(s.config, config)
        try s.run("a", ["sync"])
    }

    /// A writer that still has the old file open when it is moved gets an error naming the new place, rather
    /// than writing into a file that is about to disappear; a writer waiting for the lock gets its write copied.
    func testWritersOfTheOldFileAreCarriedOverOrToldWhereTheStoreWent() throws {
        let s = try synced()
        let old = s.dir.file("data/a.sqlite")
        // Holds a write transaction while the move starts, and commits a second later: the move waits for it.
        let during = Process()
        during.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        during.arguments = ["-cmd", ".timeout 10000", old,
                            "BEGIN IMMEDIATE; INSERT INTO notes(uuid) VALUES ('written during the move');",
                            ".shell sleep 1", "COMMIT;"]
        // Opens the old file before the move, and writes after it.
        let late = Process()
        late.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        late.arguments = ["-cmd", ".timeout 10000", old, "SELECT count(*) FROM notes;", ".shell sleep 3",
                          "INSERT INTO notes(uuid) VALUES ('written after the move');"]
        let lateErr = Pipe()
        late.standardError = lateErr
        late.standardOutput = Pipe()
        try during.run()
        try late.run()
        Thread.sleep(forTimeInterval: 0.4)
        try s.run("a", ["migrate", "--to", "moved/a.sqlite"])
        during.waitUntilExit()
        late.waitUntilExit()
        let message = String(decoding: lateErr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertTrue(message.contains("storectl: this store moved to \(s.dir.file("moved/a.sqlite")); open it there"),
                      message)
        XCTAssertEqual(try s.sqlFile(s.dir.file("moved/a.sqlite"), "SELECT uuid FROM notes ORDER BY uuid"),
                       "n1\nn2\nwritten during the move\n")
        try s.run("a", ["sync"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try s.sql("b", "SELECT count(*) FROM notes WHERE uuid = 'written during the move'"), "1\n")
    }

    /// Two moves of one store at once: one wins, the other changes nothing and says why.
    func testTwoMovesAtOnceMoveTheStoreOnce() throws {
        let s = try synced()
        // Hold the write lock a moment, so that both moves start before either can take it.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        holder.arguments = ["-cmd", ".timeout 10000", s.dir.file("data/a.sqlite"), "BEGIN IMMEDIATE;", ".shell sleep 1",
                            "COMMIT;"]
        try holder.run()
        Thread.sleep(forTimeInterval: 0.3)
        let group = DispatchGroup()
        let targets = ["one/a.sqlite", "two/a.sqlite"]
        let results = ResultsBox(count: targets.count)
        let dir = s.dir.path
        for (i, target) in targets.enumerated() {
            group.enter()
            DispatchQueue.global().async {
                results.set(i, try? Binary.storectl(["--store", "a", "migrate", "--to", target], in: dir))
                group.leave()
            }
        }
        group.wait()
        holder.waitUntilExit()
        let all = Array(zip(targets, results.values))
        XCTAssertEqual(all.filter { $0.1?.status == 0 }.count, 1, "\(all.map { "\($0.0): \($0.1?.description ?? "?")" })")
        let winner = try XCTUnwrap(all.first { $0.1?.status == 0 }?.0)
        let loser = try XCTUnwrap(all.first { $0.1?.status != 0 })
        XCTAssertEqual(loser.1?.status, 75, loser.1?.description ?? "")
        XCTAssertTrue(s.config.contains("path: \(winner)   # the store file"), s.config)
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.dir.file(loser.0)), "the loser left a file")
        try s.run("a", ["sync"])
        XCTAssertEqual(try s.sqlFile(s.dir.file(winner), "SELECT count(*) FROM notes"), "2\n")
    }

    /// Killed at every step, the old setup (before the config edit) or the new one (after it) works, and the
    /// same command run again finishes the move without losing or duplicating anything.
    func testAKillAtEveryStepOfAMoveLeavesAWorkingSetupAndARerunFinishes() throws {
        let steps = ["move.after-copy", "move.after-check", "move.after-rename", "move.after-config",
                     "move.after-fence"]
        for failpoint in steps {
            let s = try synced()
            let old = s.dir.file("data/a.sqlite")
            let new = s.dir.file("moved/a.sqlite")
            let oldConfig = s.config
            let newConfig = oldConfig.replacingOccurrences(of: "path: data/a.sqlite ", with: "path: moved/a.sqlite ")
            let killed = try s.run("a", ["migrate", "--to", "moved/a.sqlite"], env: ["STORECTL_FAILPOINT": failpoint],
                                   expect: 137)
            XCTAssertEqual(killed.status, 137, failpoint)
            let switched = s.config == newConfig
            XCTAssertTrue(switched || s.config == oldConfig, "\(failpoint): config.yaml is half-edited\n\(s.config)")
            // The old file is fenced before config.yaml names the new one, so that no write can land in a file
            // that config.yaml no longer names.
            XCTAssertEqual(switched, failpoint == "move.after-config", failpoint)
            var live = switched ? new : old
            if failpoint == "move.after-fence" {
                // Between the fence and the config edit the old file refuses writes, naming the new file; the same
                // command again finishes the move.
                let refused = try Binary.run("/usr/bin/sqlite3", [old, "INSERT INTO notes(uuid) VALUES ('refused')"],
                                             in: s.dir.path)
                XCTAssertNotEqual(refused.status, 0, failpoint)
                XCTAssertTrue(refused.stderr.contains("this store moved to \(new)"), refused.stderr)
                try s.run("a", ["migrate", "--to", "moved/a.sqlite"])
                live = new
            }
            // The setup config.yaml names works: the app writes, and the store syncs.
            try s.sqlFile(live, "INSERT INTO notes(uuid) VALUES ('after the kill')")
            try s.run("a", ["sync"])
            try s.run("b", ["sync"])
            XCTAssertEqual(try s.sql("b", "SELECT uuid FROM notes ORDER BY uuid"), "after the kill\nn1\nn2\n",
                           failpoint)

            // The same command again finishes.
            try s.run("a", ["migrate", "--to", "moved/a.sqlite"])
            XCTAssertEqual(s.config, newConfig, failpoint)
            XCTAssertFalse(FileManager.default.fileExists(atPath: old), "\(failpoint): the old file is still there")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: s.dir.file("moved")).sorted()
                .filter { !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }, ["a.sqlite"], failpoint)
            XCTAssertEqual(try s.sqlFile(new, "PRAGMA integrity_check"), "ok\n")
            try s.sqlFile(new, "INSERT INTO notes(uuid) VALUES ('after the rerun')")
            for store in ["a", "b", "a"] { try s.run(store, ["sync"]) }
            let expected = "after the kill\nafter the rerun\nn1\nn2\n"
            XCTAssertEqual(try s.sqlFile(new, "SELECT uuid FROM notes ORDER BY uuid"), expected, failpoint)
            XCTAssertEqual(try s.sql("b", "SELECT uuid FROM notes ORDER BY uuid"), expected, failpoint)
            XCTAssertEqual(try s.cloudNoteRows().filter { $0.hasPrefix("note|") }.count, 4, failpoint)
        }
    }

    /// A store file missing at its configured path is exit 66 naming the path and the `config set` fix, in every
    /// command, and nothing suggests `init` (which would make a new, empty store in its place).
    func testAStoreMissingAtItsPathIsExit66WithTheFixEverywhere() throws {
        let s = try synced()
        try FileManager.default.createDirectory(atPath: s.dir.file("elsewhere"), withIntermediateDirectories: true)
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: s.dir.file("data/a.sqlite" + suffix)) {
            try FileManager.default.moveItem(atPath: s.dir.file("data/a.sqlite" + suffix),
                                             toPath: s.dir.file("elsewhere/a.sqlite" + suffix))
        }
        let fix = "storectl --store a config set stores.a.path NEW_PATH"
        for args in [["sync"], ["status"], ["doctor"], ["mode", "cloud"], ["mode", "local"], ["history"],
                     ["migrate"], ["migrate", "--to", "x.sqlite"], ["--json", "status"], ["--json", "sync"]]
        {
            let r = try s.run("a", args, expect: 66)
            let text = r.stdout + r.stderr
            XCTAssertTrue(text.contains(s.dir.file("data/a.sqlite")), "\(args): \(text)")
            XCTAssertTrue(text.contains(fix), "\(args): \(text)")
            XCTAssertFalse(text.contains("storectl init") || text.contains("--store a init"), "\(args): \(text)")
            XCTAssertFalse(text.contains("is in local mode"), "\(args): \(text)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.dir.file("data/a.sqlite")))
        // The fix, pasted, works.
        try s.run("a", ["config", "set", "stores.a.path", "elsewhere/a.sqlite"])
        try s.run("a", ["sync"])
    }
}

extension Fleet {
    /// Stores a and b in cloud mode on one container file, with notes, a tag, a link and a setting made on a.
    static func notesInTheCloud(label: String) throws -> Fleet {
        let s = try Fleet.notes(label: label)
        try s.run("a", ["mode", "local"])
        try s.sql("a", """
            INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two');
            INSERT INTO tags(name) VALUES ('red');
            INSERT INTO note_tags SELECT n.id, t.id FROM notes n, tags t WHERE n.uuid = 'n1';
            INSERT INTO settings VALUES ('theme', 'dark');
            """)
        try s.run("a", ["mode", "cloud"])
        try s.run("b", ["mode", "cloud"])
        s.modes = ["a": "cloud", "b": "cloud"]
        return s
    }
}

