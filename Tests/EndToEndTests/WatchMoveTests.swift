import Foundation
import TestSupport
import XCTest

/// One watcher per store, whatever path the store is reached by: a moved store file, a symbolic link, a hard
/// link. Through the real binary.
final class WatchMoveTests: WatchTestCase {
    func status(_ p: E2EProject) throws -> [String: Any] {
        let r = try p.run(["--store", "a", "--json", "status"], expect: nil)
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], "\(r)")
    }

    /// A watcher runs; the store is moved. The watcher follows it to its new path, and says so truly; a second
    /// watcher is refused (75), before and after a SIGHUP; rows written into the moved store reach the other store.
    func testAWatcherFollowsAMovedStoreAndASecondWatcherIsRefused() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let w = try watch(p, ["--store", "a"])
        XCTAssertTrue(w.wait(upTo: 15) { w.stderr.contains("in cloud mode: syncing") }, w.transcript)
        let new = p.dir.file("d1/a.sqlite")
        try p.run(["--store", "a", "migrate", "--to", "d1/a.sqlite"])
        XCTAssertTrue(w.wait(upTo: 15) { w.stderr.contains("is at \(new) now (it was at \(p.dir.file("data/a.sqlite"))): "
                                                           + "serving it there") }, w.transcript)
        // Nothing it says is false: config.yaml names the new path already, so it never asks for that edit.
        XCTAssertFalse(w.stderr.contains("config set stores.a.path"), w.transcript)
        XCTAssertFalse(w.stderr.contains("not watched"), w.transcript)
        XCTAssertTrue(w.isRunning)

        func assertSecondRefused(_ label: String) throws {
            let second = try p.run(["--store", "a", "watch", "--once"], expect: 75)
            XCTAssertTrue(second.stderr.contains("error: store 'a' is already served by storectl watch (pid \(w.pid)"),
                          "\(label): \(second.stderr)")
            XCTAssertTrue(second.stderr.contains("hint: stop that watcher first (kill \(w.pid)), then run this again"),
                          "\(label): \(second.stderr)")
        }
        try assertSecondRefused("after the move")
        let doc = try status(p)
        XCTAssertEqual(doc["watched"] as? Bool, true, "\(doc)")
        XCTAssertEqual((doc["watcher"] as? [String: Any])?["pid"] as? Int, Int(w.pid), "\(doc)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("data/a.sqlite.watch.lock")))
        XCTAssertTrue(FileManager.default.fileExists(atPath: new + ".watch.lock"))

        // The watcher serves the moved file: a row written there reaches b.
        let write = try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", new,
                                                        "INSERT INTO notes(uuid, title) VALUES ('moved', 'm')"],
                                   in: p.dir.path)
        XCTAssertEqual(write.status, 0, "\(write)")
        XCTAssertTrue(try eventually(20) {
            try p.run(["--store", "b", "sync"])
            return try notes(p, "b").contains("moved|m")
        }, w.transcript)

        // After a SIGHUP, still one watcher on the store, and still the only one.
        w.send(SIGHUP)
        XCTAssertTrue(w.wait(upTo: 10) { w.stderr.components(separatedBy: "config reloaded from").count >= 3 },
                      w.transcript)
        try assertSecondRefused("after SIGHUP")
        XCTAssertFalse(w.stderr.contains("not watched"), w.transcript)
        w.send(SIGTERM)
        XCTAssertEqual(w.waitForExit(upTo: 15), 0, w.transcript)
        // Once it stopped, a watcher on the new path starts.
        let next = try watch(p, ["--store", "a"])
        XCTAssertTrue(next.wait(upTo: 15) { next.stderr.contains("watching 1 store(s)") }, next.transcript)
    }

    /// The same store reached through a symbolic link or a hard link (from another config file) is the same
    /// store: a second watcher is refused, and `status` through the link names the watcher.
    func testASecondWatcherThroughALinkIsRefused() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let w = try watch(p, ["--store", "a"])
        XCTAssertTrue(w.wait(upTo: 15) { w.stderr.contains("in cloud mode: syncing") }, w.transcript)
        try FileManager.default.createSymbolicLink(atPath: p.dir.file("soft.sqlite"), withDestinationPath: "data/a.sqlite")
        XCTAssertEqual(link(p.dir.file("data/a.sqlite"), p.dir.file("hard.sqlite")), 0)
        let config = try p.dir.read("config.yaml")
        for alias in ["soft.sqlite", "hard.sqlite"] {
            XCTAssertTrue(config.contains("path: data/a.sqlite"), config)
            try p.dir.write("\(alias).yaml", config.replacingOccurrences(of: "path: data/a.sqlite", with: "path: \(alias)"))
            let second = try p.run(["--config", "\(alias).yaml", "--store", "a", "watch", "--once"], expect: 75)
            XCTAssertTrue(second.stderr.contains("error: store 'a' is already served by storectl watch (pid \(w.pid)"),
                          "\(alias): \(second.stderr)")
            let r = try p.run(["--config", "\(alias).yaml", "--store", "a", "--json", "status"], expect: nil)
            let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
            XCTAssertEqual((doc["watcher"] as? [String: Any])?["pid"] as? Int, Int(w.pid), "\(alias): \(r)")
        }
        XCTAssertTrue(w.isRunning)
    }

    /// Killed between the fence and the config edit: the watcher says where the store went and the command that
    /// finishes the move (config.yaml does not name it yet), runs no round on the fenced file, and follows once the
    /// move is finished.
    func testAWatcherOfAStoreWhoseMoveStoppedSaysTheTruthAndFollowsWhenItFinishes() throws {
        let p = try E2EProject()
        try twoCloudStores(p)
        let w = try watch(p, ["--store", "a"])
        XCTAssertTrue(w.wait(upTo: 15) { w.stderr.contains("in cloud mode: syncing") }, w.transcript)
        let new = p.dir.file("d2/a.sqlite")
        try p.run(["--store", "a", "migrate", "--to", "d2/a.sqlite"], expect: 137,
                  env: ["STORECTL_FAILPOINT": "move.after-fence"])
        XCTAssertTrue(w.wait(upTo: 15) { w.stderr.contains("store 'a' moved to \(new), but ") }, w.transcript)
        XCTAssertTrue(w.stderr.contains("run 'storectl --store a migrate --to \(new)' to finish the move"), w.transcript)
        XCTAssertFalse(w.stderr.contains("config set stores.a.path"), w.transcript)
        try p.run(["--store", "a", "migrate", "--to", "d2/a.sqlite"])
        XCTAssertTrue(w.wait(upTo: 15) { w.stderr.contains("is at \(new) now") }, w.transcript)
        let second = try p.run(["--store", "a", "watch", "--once"], expect: 75)
        XCTAssertTrue(second.stderr.contains("already served by storectl watch (pid \(w.pid)"), second.stderr)
    }
}
