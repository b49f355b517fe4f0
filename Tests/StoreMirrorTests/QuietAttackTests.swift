import Foundation
import StoreBase
import StoreCloud
import StoreConfig
import StoreHistory
import StoreMirror
import StoreSQLite
@testable import StoreControl
import TestSupport
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// Quiet rounds against files changed behind the handle's connections: a store or a container written over in
/// place (same inode), a container's WAL and shared-memory files removed, and the connections a long run keeps.
/// Store `a` keeps one handle, as `storectl watch` does; the other device `b` opens a new handle for every
/// command, as separate `storectl sync` processes do.
final class QuietAttackTests: XCTestCase {
    private var dir: TempDirectory!
    private let schema = "CREATE TABLE IF NOT EXISTS notes(id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '');"
    private let containerName = "iCloud.com.example.quiet"

    override func setUpWithError() throws {
        dir = try TempDirectory("storectl-quiet-attack")
        try dir.write("schema.sql", schema)
        var stores = ""
        for name in ["a", "b"] {
            stores += """
                  \(name):
                    path: \(name).sqlite
                    schema: schema.sql
                    cloud:
                      container: \(containerName)
                      url: file:quiet.container
                      account: \(name == "a" ? "member" : "owner")
                      secret: \(name == "a" ? "member-secret" : "owner-secret")

                """
        }
        try dir.write("config.yaml", "version: 1\nstores:\n" + stores)
        let (owner, _) = try FileCloudDatabase.create(path: dir.file("quiet.container"), container: containerName,
                                                      account: "owner", secret: "owner-secret", iterations: 1000)
        try owner.addAccount(id: "member", secret: "member-secret", role: .member)
        // The zone is the owner's; the member syncs it through a read-write share.
        try owner.ensureZone("default")
        try owner.addShare(zone: "default", account: "member", permission: .readWrite)
    }

    private func handle(_ name: String) throws -> StoreHandle {
        let config = try ConfigLoader.load(path: dir.file("config.yaml"), environment: [:])
        return try StoreHandle(config: config, storeName: name, environment: [:])
    }

    /// Store `a`'s long-lived handle, after its first full round; `b` initialised and in cloud mode.
    private func fleet() throws -> StoreHandle {
        let a = try handle("a")
        try a.ensureInitialized()
        _ = try a.enableCloud(SyncOptions())
        try withB { b in
            try b.ensureInitialized()
            _ = try b.enableCloud(SyncOptions())
        }
        _ = try a.sync(SyncOptions())
        _ = try a.sync(SyncOptions())
        return a
    }

    /// Runs `body` on a new handle of `b`, closed after it: one `storectl` process of the other device.
    @discardableResult
    private func withB<T>(_ body: (StoreHandle) throws -> T) throws -> T {
        let b = try handle("b")
        defer { b.close() }
        return try body(b)
    }

    private func syncIsQuiet(_ store: StoreHandle) throws -> (quiet: Bool, report: SyncReport) {
        let before = store.quietMark?.since
        let report = try store.sync(SyncOptions())
        let quiet = before != nil && store.quietMark?.since == before
        return (quiet, report)
    }

    /// What `storectl watch` does to the store connection after every round (`StoreLoop.idleCache`).
    private func idle(_ store: StoreHandle) throws {
        try store.database().execute("PRAGMA cache_size = -256; PRAGMA shrink_memory")
    }

    private func ids(atPath path: String) throws -> [String] {
        let db = try Connection(path: path, mode: .readOnly, wal: false)
        return try db.query("SELECT id FROM notes ORDER BY id").compactMap { $0[0].string }
    }

    /// Copies `source` over `target` as `cp` does: the target file is truncated and written, its inode stays.
    private func copyInPlace(_ source: String, over target: String) throws {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let before = FileIdentity(path: target)
        let fd = open(target, O_WRONLY | O_TRUNC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        XCTAssertEqual(written, bytes.count)
        close(fd)
        XCTAssertEqual(FileIdentity(path: target), before, "same inode: a copy in place, not a file moved in")
    }

    /// Moves every WAL frame into the main file and empties the WAL, on a connection of another process.
    private func checkpoint(_ path: String) throws {
        let db = try Connection(path: path)
        let row = try db.query("PRAGMA wal_checkpoint(TRUNCATE)").first
        XCTAssertEqual(row?[0].int64, 0, "the checkpoint was not blocked")
    }

    private func lastSeq(_ path: String) throws -> Int64? {
        let db = try Connection(path: path, mode: .readOnly, wal: false)
        return try db.scalar("SELECT last_seq FROM zones WHERE name = 'default'")?.int64
    }

    /// Runs a program as another process in the test folder.
    @discardableResult
    private func external(_ program: String, _ args: [String], file: StaticString = #filePath, line: UInt = #line)
        throws -> ProcessResult
    {
        let result = try Binary.run(program, args, in: dir.path)
        XCTAssertEqual(result.status, 0, "\(program) \(args): \(result)", file: file, line: line)
        return result
    }

    private func sqlite3(_ file: String, _ sql: String) throws -> String {
        // With a busy timeout, as storectl's own connections have: a connection that another thread is closing
        // may hold the lock a moment to checkpoint.
        try external("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", dir.file(file), sql]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `storectl sync` of store `b`, in a process of its own (another device).
    private func syncBElsewhere() throws -> ProcessResult {
        try external(Binary.storectl, ["--config", dir.file("config.yaml"), "sync", "--store", "b"])
    }

    // MARK: - The store

    /// A backup of the store copied back over the live file (cp, same inode) while `watch` holds it open. The
    /// guarantee (docs/sync-guarantees.md): the next sync recognises the restored copy (`Reconciler`) and takes
    /// back what its later self exported. A quiet round reads nothing that tells the files apart.
    func testAStoreRestoredInPlaceIsSeenByTheNextRound() throws {
        let a = try fleet()
        let path = dir.file("a.sqlite")
        try checkpoint(path)
        let backup = dir.file("a-backup.sqlite")
        try FileManager.default.copyItem(atPath: path, toPath: backup)

        // After the backup: a row made here and exported.
        try Connection(path: path).run("INSERT INTO notes(id, title) VALUES ('after-backup', 'x')")
        XCTAssertEqual(try a.sync(SyncOptions()).exported.saved, 1)
        try idle(a)
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        try idle(a)

        // The backup copied back over the store.
        try checkpoint(path)
        try copyInPlace(backup, over: path)
        XCTAssertEqual(try ids(atPath: path), [], "the file now holds the backup")
        XCTAssertEqual(try a.database().query("SELECT id FROM notes").count, 0,
                       "the kept connection reads the restored file")

        let round = try syncIsQuiet(a)
        XCTAssertFalse(round.quiet, "a restored store is not as the last full round left it")
        XCTAssertEqual(try ids(atPath: path), ["after-backup"],
                       "the round takes back what the store's later self exported")
        let status = try a.status()
        XCTAssertNotNil(status.unsettled.restoredAt, "status reports the restore")
    }

    // MARK: - The container

    /// The container's -wal and -shm removed after a checkpoint by another process (nothing is lost: every frame
    /// is in the main file), then the other device saves a row, from a process of its own. A container
    /// connection kept across rounds would read the removed shared memory, see no change, and on closing delete
    /// the new WAL, with the other device's record in it: quiet rounds open the container file each time.
    func testAContainerWhoseWALWasRemovedStillDeliversChanges() throws {
        let a = try fleet()
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        let container = dir.file("quiet.container")
        _ = try sqlite3("quiet.container", "PRAGMA wal_checkpoint(TRUNCATE);")
        XCTAssertTrue(try syncIsQuiet(a).quiet, "a checkpoint changes nothing")
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: container + suffix) }

        _ = try sqlite3("b.sqlite", "INSERT INTO notes(id, title) VALUES ('from-b', 'saved after the WAL went');")
        let b = try syncBElsewhere()
        XCTAssertTrue(b.stdout.contains("1"), "\(b)")
        let seqSeenByOthers = try sqlite3("quiet.container", "SELECT last_seq FROM zones WHERE name = 'default';")
        let first = try syncIsQuiet(a)
        XCTAssertFalse(first.quiet, "the zone moved to seq \(seqSeenByOthers) for every other process")
        XCTAssertEqual(first.report.imported.applied, 1)
        for _ in 0..<4 { _ = try syncIsQuiet(a) }
        XCTAssertEqual(try a.database().query("SELECT id FROM notes").compactMap { $0[0].string }, ["from-b"],
                       "b's row arrives within one round, as it did before quiet rounds")
        XCTAssertEqual(try sqlite3("quiet.container", "SELECT count(*) FROM records;"), "1",
                       "b's record is in the container as other processes read it")
        a.close()
        XCTAssertEqual(try sqlite3("quiet.container", "SELECT count(*) FROM records;"), "1",
                       "b's record is still in the container once a's connections closed")
        _ = try syncBElsewhere()
        _ = try a.sync(SyncOptions())
        XCTAssertEqual(try sqlite3("quiet.container", "SELECT count(*) FROM records;"), "1",
                       "b's record is in the container after b synced again")
        XCTAssertEqual(try a.database().query("SELECT id FROM notes").compactMap { $0[0].string }, ["from-b"],
                       "a has b's row after both synced again")
        XCTAssertEqual(try sqlite3("b.sqlite", "SELECT id FROM notes;"), "from-b")
    }

    /// An older copy of the container written over it in place by `cp` (same inode), after a checkpoint, both
    /// in other processes. A fresh connection reads the older zone; the kept connection must not keep
    /// reporting the newer one.
    func testAContainerOverwrittenInPlaceByAnOlderCopy() throws {
        let a = try fleet()
        let container = dir.file("quiet.container")
        _ = try sqlite3("quiet.container", "PRAGMA wal_checkpoint(TRUNCATE);")
        try external("/usr/bin/cp", [container, container + ".old"])
        _ = try sqlite3("b.sqlite", "INSERT INTO notes(id, title) VALUES ('n3', 'after the copy');")
        _ = try syncBElsewhere()
        XCTAssertEqual(try syncIsQuiet(a).report.imported.applied, 1)
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        let newer = try sqlite3("quiet.container", "SELECT last_seq FROM zones;")
        _ = try sqlite3("quiet.container", "PRAGMA wal_checkpoint(TRUNCATE);")
        let identity = FileIdentity(path: container)
        try external("/usr/bin/cp", [container + ".old", container])
        XCTAssertEqual(FileIdentity(path: container), identity)
        let older = try sqlite3("quiet.container", "SELECT last_seq FROM zones;")
        XCTAssertNotEqual(newer, older, "another process reads the older copy")
        let round = try? syncIsQuiet(a)
        XCTAssertFalse(round?.quiet ?? false, "the zone went from seq \(newer) to \(older)")
    }

    // MARK: - Connections kept

    /// The descriptors this process holds on files of the test's folder (the stores, the container, their `-wal`
    /// and `-shm` files): what a connection kept between rounds holds. Other descriptors of the test process
    /// (the runner's pipes, the runtime's) come and go on their own.
    private func openDescriptors() -> Int { openFiles().count }

    /// The files of the test's folder this process holds open, one entry per descriptor.
    private func openFiles() -> [String] {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.compactMap { fd in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd))
                .flatMap { $0.hasPrefix(dir.path + "/") ? String($0.dropFirst(dir.path.count + 1)) : nil }
        }.sorted()
    }

    /// Many full rounds (each after another connection's commit) and quiet rounds on one handle: the file
    /// descriptors stay flat, and at most one container connection is kept.
    func testKeptConnectionsDoNotPileUp() throws {
        let a = try fleet()
        let other = try Connection(path: dir.file("a.sqlite"))
        // The most the warm-up rounds held at once: a connection's `-wal` and `-shm` files come and go with
        // checkpoints and with the other connection, so one count is not the baseline.
        var start = 0
        for round in 1...20 {
            try other.execute("PRAGMA user_version = \(round)")
            _ = try a.sync(SyncOptions())
            start = max(start, openDescriptors())
            _ = try a.sync(SyncOptions())
            start = max(start, openDescriptors())
        }
        for round in 21...220 {
            try other.execute("PRAGMA user_version = \(round)")
            XCTAssertFalse(try syncIsQuiet(a).quiet)
            XCTAssertTrue(try syncIsQuiet(a).quiet)
        }
        XCTAssertGreaterThan(start, 0, "the store's own connection holds its files")
        // A connection kept per round would hold 200 more. SQLite's unix VFS keeps a closed connection's
        // descriptor open while another connection of the process holds a lock on the same file (it may not drop
        // that connection's POSIX locks), so the count moves by a connection's files (the database, its `-wal`
        // and `-shm`) with the timing of the rounds: on a loaded machine the warm-up's peak missed four of them.
        XCTAssertLessThanOrEqual(openDescriptors(), start + 6,
                                 "descriptors after 200 full and 200 quiet rounds: \(openFiles())")
        a.close()
    }

    // MARK: - Writes during a full round, modes, schema

    /// Another connection commits while a full round runs (from the progress callback, after the export read
    /// history): the next round must export it, quiet or not.
    func testAWriteDuringAFullRoundIsExportedNext() throws {
        let a = try fleet()
        // Something to import, so that the import reports progress.
        try withB { b in
            try b.database().run("INSERT INTO notes(id, title) VALUES ('b1', 'x')")
            _ = try b.sync(SyncOptions())
        }
        let other = try Connection(path: dir.file("a.sqlite"))
        try a.database().run("INSERT INTO notes(id, title) VALUES ('a1', 'something to export')")
        var wrote: [String: Bool] = [:]
        _ = try a.sync(SyncOptions()) { step, _, _ in
            if wrote[step] == nil {
                do {
                    try other.run("INSERT INTO notes(id, title) VALUES (?, 'written while the round ran')", ["during-" + step])
                    wrote[step] = true
                } catch {
                    wrote[step] = false  // the import holds the write lock
                }
            }
        }
        XCTAssertEqual(wrote["export"], true, "a write committed during the export")
        let next = try syncIsQuiet(a)
        XCTAssertFalse(next.quiet)
        _ = try a.sync(SyncOptions())
        try withB { b in
            _ = try b.sync(SyncOptions())
            XCTAssertEqual(try b.database().query("SELECT id FROM notes ORDER BY id").compactMap { $0[0].string },
                           ["a1", "b1"] + wrote.filter(\.value).keys.map { "during-" + $0 }.sorted())
        }
    }

    /// The same with the handle's own connection, in the export's progress callback.
    func testAWriteOnTheOwnConnectionDuringTheExportIsExported() throws {
        let a = try fleet()
        try a.database().run("INSERT INTO notes(id, title) VALUES ('first', 'x')")
        var wrote = false
        _ = try a.sync(SyncOptions()) { step, _, _ in
            if step == "export", !wrote {
                wrote = true
                try? a.database().run("INSERT INTO notes(id, title) VALUES ('during', 'own connection')")
            }
        }
        XCTAssertTrue(wrote)
        for _ in 0..<3 { _ = try a.sync(SyncOptions()) }
        try withB { b in
            _ = try b.sync(SyncOptions())
            XCTAssertEqual(try b.database().query("SELECT id FROM notes ORDER BY id").compactMap { $0[0].string },
                           ["during", "first"])
        }
    }

    func testAModeSwitchByAnotherProcessEndsQuietRounds() throws {
        let a = try fleet()
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        try withB { _ in }
        let other = try handle("a")
        _ = try other.disableCloud(SyncOptions())
        other.close()
        XCTAssertThrowsError(try a.sync(SyncOptions()), "a store in local mode never syncs")
    }

    func testASchemaChangeOnTheOwnConnectionEndsQuietRounds() throws {
        let a = try fleet()
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        try a.database().execute("CREATE TABLE unrelated(x)")
        XCTAssertThrowsError(try a.sync(SyncOptions()), "the full round checks the triggers and refuses")
    }

    func testARoleChangeEndsQuietRounds() throws {
        let a = try fleet()
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        _ = try sqlite3("quiet.container", "UPDATE accounts SET role = 'owner' WHERE id = 'member';")
        XCTAssertFalse(try syncIsQuiet(a).quiet)
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        _ = try sqlite3("quiet.container", "UPDATE accounts SET disabled = 1 WHERE id = 'member';")
        XCTAssertThrowsError(try a.sync(SyncOptions()))
    }

    // MARK: - Conflicts

    /// Random writes on the same keys on both stores (so the merge policy decides), random rounds, with quiet
    /// rounds on `a`'s kept handle; at the end both stores agree.
    func testConflictingWritesConverge() throws {
        for seed in 1...8 {
            try setUpWithError()
            try conflictModel(seed: UInt64(seed))
        }
    }

    private func conflictModel(seed: UInt64) throws {
        var random = SplitMix64(seed: seed &* 0x9E37_79B9_7F4A_7C15)
        func next() -> UInt64 { random.next() }
        let a = try fleet()
        let b = try handle("b")
        let aWriter = try Connection(path: dir.file("a.sqlite"))
        var quiet = 0
        for step in 0..<150 {
            let id = "k\(next() % 4)"
            switch next() % 7 {
            case 0, 1:
                let db = next() % 2 == 0 ? aWriter : try a.database()
                if next() % 4 == 0 { try db.run("DELETE FROM notes WHERE id = ?", [id]) } else {
                    try db.run("INSERT INTO notes(id, title) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET title = excluded.title",
                               [id, "a\(step)"])
                }
            case 2:
                if next() % 4 == 0 { try b.database().run("DELETE FROM notes WHERE id = ?", [id]) } else {
                    try b.database().run("INSERT INTO notes(id, title) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET title = excluded.title",
                                         [id, "b\(step)"])
                }
            case 3, 4, 5:
                if try syncIsQuiet(a).quiet { quiet += 1 }
            default:
                _ = try b.sync(SyncOptions())
            }
        }
        for _ in 0..<3 {
            _ = try a.sync(SyncOptions())
            _ = try b.sync(SyncOptions())
        }
        func rows(_ h: StoreHandle) throws -> [String: String] {
            var r: [String: String] = [:]
            for row in try h.database().query("SELECT id, title FROM notes") { r[row[0].string!] = row[1].string! }
            return r
        }
        XCTAssertEqual(try rows(a), try rows(b), "seed \(seed): the stores agree")
        XCTAssertEqual(try MirrorState.pendingExportCount(a.database()), 0, "seed \(seed)")
        XCTAssertGreaterThan(quiet, 0)
        a.close()
        b.close()
    }

    // MARK: - Memory

    /// `watch` shrinks the store connection's page cache after every round (`StoreLoop.idleCache`) so that a
    /// process serving many stores stays small: a quiet run keeps no container file connection (nor its cache).
    func testNoContainerFileConnectionIsKeptBetweenRounds() throws {
        let a = try fleet()
        try withB { b in
            let db = try b.database()
            try db.transaction {
                for i in 0..<400 {
                    try db.run("INSERT INTO notes(id, title) VALUES (?, ?)", ["n\(i)", String(repeating: "t", count: 400)])
                }
            }
            _ = try b.sync(SyncOptions())
        }
        XCTAssertEqual(try a.sync(SyncOptions()).imported.applied, 400)
        XCTAssertNotNil(a.quietMark)
        XCTAssertNil(a.quietMark?.cloud, "the container file is opened for each round, not kept")
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        XCTAssertNil(a.quietMark?.cloud)
    }
}
