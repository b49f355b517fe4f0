import Foundation
import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreConfig
import StoreHistory
import StoreMirror
import StoreSQLite
@testable import StoreControl
import TestSupport
import XCTest

/// The quiet round: a sync on a handle whose last full round left nothing to do skips the work only while the
/// store and its container are as that round left them. Two stores share a real container file; store `a` keeps
/// one handle, as `storectl watch` does, and every change anywhere must end its quiet rounds.
final class QuietRoundTests: XCTestCase {
    private var dir: TempDirectory!
    private let schema = "CREATE TABLE IF NOT EXISTS notes(id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '');"

    override func setUpWithError() throws {
        dir = try TempDirectory("storectl-quiet")
        try dir.write("schema.sql", schema)
        var stores = ""
        for name in ["a", "b"] {
            stores += """
                  \(name):
                    path: \(name).sqlite
                    schema: schema.sql
                    cloud:
                      container: iCloud.com.example.quiet
                      url: file:quiet.container
                      account: \(name == "a" ? "member" : "owner")
                      secret: \(name == "a" ? "member-secret" : "owner-secret")

                """
        }
        try dir.write("config.yaml", "version: 1\nstores:\n" + stores)
        let (owner, _) = try FileCloudDatabase.create(path: dir.file("quiet.container"), container: "iCloud.com.example.quiet",
                                                      account: "owner", secret: "owner-secret", iterations: 1000)
        try owner.addAccount(id: "member", secret: "member-secret", role: .member)
        // The zone is the owner's; the member syncs it through a read-write share.
        try owner.ensureZone("default")
        try owner.addShare(zone: "default", account: "member", permission: .readWrite)
    }

    /// Points both stores at a new container on the test server (`STORECTL_TEST_PG_URL`); nil without one
    /// (a failure under `STORECTL_REQUIRE_PG=1`). The container is deleted when the test ends.
    private func usePostgres() throws -> (url: String, container: String)? {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" { XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set") }
            return nil
        }
        let container = "test.quiet.\(UInt32.random(in: 0...UInt32.max))"
        let pg = try PostgresCloudDatabase(url: url, container: container)
        _ = try pg.initializeContainer()
        addTeardownBlock { try? PostgresCloudDatabase(url: url, container: container).deleteContainer() }
        var stores = ""
        for name in ["a", "b"] {
            stores += """
                  \(name):
                    path: \(name).sqlite
                    schema: schema.sql
                    cloud:
                      container: \(container)
                      url: '\(url)\(url.contains("?") ? "&" : "?")application_name=\(container)'
                      account: \(pg.role ?? "postgres")

                """
        }
        try dir.write("config.yaml", "version: 1\nstores:\n" + stores)
        return (url, container)
    }

    private func handle(_ name: String) throws -> StoreHandle {
        let config = try ConfigLoader.load(path: dir.file("config.yaml"), environment: [:])
        return try StoreHandle(config: config, storeName: name, environment: [:])
    }

    /// Store `a`'s long-lived handle and store `b`, both switched to cloud mode.
    private func fleet() throws -> (a: StoreHandle, b: StoreHandle) {
        let a = try handle("a"), b = try handle("b")
        for store in [a, b] {
            try store.ensureInitialized()
            _ = try store.enableCloud(SyncOptions())
        }
        _ = try a.sync(SyncOptions())
        return (a, b)
    }

    private func titles(_ store: StoreHandle) throws -> [String: String] {
        var rows: [String: String] = [:]
        for row in try store.database().query("SELECT id, title FROM notes") { rows[row[0].string!] = row[1].string! }
        return rows
    }

    /// Another process's connection to the store file.
    private func writer(_ name: String) throws -> Connection {
        try Connection(path: dir.file("\(name).sqlite"))
    }

    /// Syncs `store` and says whether the round was a quiet one.
    private func syncIsQuiet(_ store: StoreHandle, file: StaticString = #filePath, line: UInt = #line) throws
        -> (quiet: Bool, report: SyncReport)
    {
        let before = store.quietMark?.since
        let report = try store.sync(SyncOptions())
        let quiet = before != nil && store.quietMark?.since == before
        return (quiet, report)
    }

    func testIdleRoundsAreQuietAndEveryLocalChangeEndsThem() throws {
        let (a, _) = try fleet()
        XCTAssertNotNil(a.quietMark, "a full round that left nothing to do takes a mark")
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        let stamp = try MirrorState.meta(a.database(), .lastSyncAt)
        usleep(5_000)
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        XCTAssertNotEqual(try MirrorState.meta(a.database(), .lastSyncAt), stamp, "a quiet round is a sync: last_sync_at moves")

        // Another connection commits a row: the next round exports it.
        try writer("a").run("INSERT INTO notes(id, title) VALUES ('n1', 'from another process')")
        var round = try syncIsQuiet(a)
        XCTAssertFalse(round.quiet)
        XCTAssertEqual(round.report.exported.saved, 1)
        XCTAssertTrue(try syncIsQuiet(a).quiet)

        // The handle's own connection writes: exported as well.
        try a.database().run("UPDATE notes SET title = 'own connection' WHERE id = 'n1'")
        round = try syncIsQuiet(a)
        XCTAssertFalse(round.quiet)
        XCTAssertEqual(round.report.exported.saved, 1)

        // A schema change by another connection is a full round, which checks the triggers (and refuses).
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        try writer("a").execute("CREATE TABLE unrelated(x)")
        XCTAssertThrowsError(try a.sync(SyncOptions()))
        try writer("a").execute("DROP TABLE unrelated")
        _ = try a.sync(SyncOptions())

        // The store file replaced under the open connection: a full round.
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        let copy = dir.file("a-copy.sqlite")
        try FileManager.default.copyItem(atPath: dir.file("a.sqlite"), toPath: copy)
        XCTAssertEqual(rename(copy, dir.file("a.sqlite")), 0)
        XCTAssertFalse(try syncIsQuiet(a).quiet)
    }

    func testASaveByAnotherDeviceEndsQuietRounds() throws {
        let (a, b) = try fleet()
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        try b.database().run("INSERT INTO notes(id, title) VALUES ('n7', 'from b')")
        XCTAssertEqual(try b.sync(SyncOptions()).exported.saved, 1)
        let round = try syncIsQuiet(a)
        XCTAssertFalse(round.quiet)
        XCTAssertEqual(round.report.imported.applied, 1)
        XCTAssertEqual(try titles(a), ["n7": "from b"])
        // A tombstone too.
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        try b.database().run("DELETE FROM notes WHERE id = 'n7'")
        _ = try b.sync(SyncOptions())
        XCTAssertEqual(try syncIsQuiet(a).report.imported.deleted, 1)
        XCTAssertEqual(try titles(a), [:])
    }

    func testAccountChangesEndQuietRounds() throws {
        let (a, _) = try fleet()
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        let owner = try FileCloudDatabase.open(path: dir.file("quiet.container"), container: "iCloud.com.example.quiet",
                                               account: "owner", secret: "owner-secret")
        try owner.disableAccount(id: "member")
        XCTAssertThrowsError(try a.sync(SyncOptions())) { error in
            XCTAssertEqual((error as? AccountUnavailableError)?.report.status, .restricted, "\(error)")
        }
        try owner.enableAccount(id: "member")
        _ = try a.sync(SyncOptions())
        XCTAssertTrue(try syncIsQuiet(a).quiet)

        // A new secret for the account: the configured one no longer matches.
        try owner.removeAccount(id: "member")
        try owner.addAccount(id: "member", secret: "another-secret", role: .member)
        XCTAssertThrowsError(try a.sync(SyncOptions())) { error in
            XCTAssertEqual((error as? AccountUnavailableError)?.report.status, .restricted, "\(error)")
        }
    }

    func testAContainerReplacedByAnOlderCopyOrPurgedEndsQuietRounds() throws {
        let (a, b) = try fleet()
        let old = dir.file("quiet.container.old")
        try FileManager.default.copyItem(atPath: dir.file("quiet.container"), toPath: old)
        try b.database().run("INSERT INTO notes(id, title) VALUES ('n3', 'after the copy')")
        _ = try b.sync(SyncOptions())
        XCTAssertEqual(try syncIsQuiet(a).report.imported.applied, 1)
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        // The older copy moved into place: another file than the one the kept connection reads.
        XCTAssertEqual(rename(old, dir.file("quiet.container")), 0)
        let round = try? syncIsQuiet(a)
        XCTAssertFalse(round?.quiet ?? false)
    }

    func testAPurgeEndsQuietRounds() throws {
        let (a, _) = try fleet()
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        let owner = try FileCloudDatabase.open(path: dir.file("quiet.container"), container: "iCloud.com.example.quiet",
                                               account: "owner", secret: "owner-secret")
        try owner.purgeZone("default")
        XCTAssertThrowsError(try a.sync(SyncOptions()), "a purged zone is said, not skipped")
    }

    func testRoundsWithOptionsOrAfterTheLimitAreFull() throws {
        let (a, _) = try fleet()
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        var options = SyncOptions()
        options.reupload = true
        _ = try a.sync(options)
        XCTAssertNil(a.quietMark, "a round with --reupload takes no mark")
        _ = try a.sync(SyncOptions())
        XCTAssertNotNil(a.quietMark)
        a.quietMark?.since -= StoreHandle.quietRoundLimit
        XCTAssertFalse(try syncIsQuiet(a).quiet, "after the limit, a full round")
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        a.close()
        XCTAssertNil(a.quietMark)
        XCTAssertFalse(try syncIsQuiet(a).quiet)
    }

    /// PostgreSQL: idle rounds on the kept session are quiet; a save by another device, a purge and a session
    /// the server ended all make the next round a full one.
    func testPostgresQuietRoundsEndWithEveryChange() throws {
        guard let (url, container) = try usePostgres() else { return }
        let env = ProcessInfo.processInfo.environment
        let (a, b) = try fleet()
        XCTAssertNotNil(a.quietMark)
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        XCTAssertTrue(try syncIsQuiet(a).quiet)
        try b.database().run("INSERT INTO notes(id, title) VALUES ('p1', 'from b')")
        _ = try b.sync(SyncOptions())
        var round = try syncIsQuiet(a)
        XCTAssertFalse(round.quiet)
        XCTAssertEqual(round.report.imported.applied, 1)
        try a.database().run("UPDATE notes SET title = 'from a' WHERE id = 'p1'")
        round = try syncIsQuiet(a)
        XCTAssertFalse(round.quiet)
        XCTAssertEqual(round.report.exported.saved, 1)
        _ = try b.sync(SyncOptions())
        XCTAssertEqual(try titles(b), ["p1": "from a"])
        XCTAssertTrue(try syncIsQuiet(a).quiet)

        // The server ends the kept session: the next round logs in again.
        let psql = env["STORECTL_TEST_PG_BIN"].map { $0 + "/psql" } ?? "/usr/bin/psql"
        let ended = try Binary.run(psql, ["-X", "-q", "-A", "-t", "-d", url, "-c", """
            SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
            WHERE application_name = '\(container)' AND pid <> pg_backend_pid()
            """], in: dir.path)
        XCTAssertEqual(ended.status, 0, "\(ended)")
        XCTAssertNotEqual(ended.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "0", "the kept session was ended")
        XCTAssertFalse(try syncIsQuiet(a).quiet)
        XCTAssertTrue(try syncIsQuiet(a).quiet)

        try PostgresCloudDatabase(url: url, container: container).purgeZone("default")
        XCTAssertThrowsError(try a.sync(SyncOptions()), "a purged zone is said, not skipped")
        a.close()
        b.close()
    }

    /// Random writes on both stores (another connection and the kept one for `a`, disjoint keys so that no merge
    /// policy is involved), random rounds: after `b` syncs and then `a`, `a` holds every row `b` has sent, and the
    /// other way round; at the end both hold exactly what the model says.
    func testRandomRoundsAgainstAModel() throws {
        let seeds = ProcessInfo.processInfo.environment["STORECTL_QUIET_SEEDS"].flatMap(Int.init) ?? 6
        for seed in 1...seeds {
            try setUpWithError()
            try runModel(seed: UInt64(seed))
        }
    }

    func testRandomRoundsAgainstAModelPostgres() throws {
        for seed in 101...102 {
            try setUpWithError()
            guard try usePostgres() != nil else { return }
            try runModel(seed: UInt64(seed))
        }
    }

    private func runModel(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let (a, b) = try fleet()
        let aWriter = try writer("a")
        var model: [String: String] = [:]
        // What each store last sent of each key (nil: a delete).
        var sentByA: [String: String?] = [:], sentByB: [String: String?] = [:]
        var pendingA: Set<String> = [], pendingB: Set<String> = []
        var quietRounds = 0
        /// Deletes row `id` one time in three when it exists, else writes `title` into it; keeps the model.
        func write(_ db: Connection, id: String, title: String) throws -> String {
            if model[id] != nil, random.next() % 3 == 0 {
                try db.run("DELETE FROM notes WHERE id = ?", [id])
                model[id] = nil
            } else {
                try db.run("INSERT INTO notes(id, title) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET title = excluded.title",
                           [id, title])
                model[id] = title
            }
            return id
        }
        for step in 0..<120 {
            let where_ = "seed \(seed) step \(step)"
            switch random.next() % 6 {
            case 0, 1:
                // A write on a: keys a0...a19, through another connection or the kept one.
                let db = random.next() % 2 == 0 ? aWriter : try a.database()
                pendingA.insert(try write(db, id: "a\(random.next() % 20)", title: "a\(step)"))
            case 2:
                pendingB.insert(try write(try b.database(), id: "b\(random.next() % 20)", title: "b\(step)"))
            case 3, 4:
                if try syncIsQuiet(a).quiet { quietRounds += 1 }
                for id in pendingA { sentByA[id] = .some(model[id]) }
                pendingA = []
                let rows = try titles(a)
                for (id, value) in sentByB { XCTAssertEqual(rows[id], value, "\(where_): a lacks b's change of \(id)") }
            default:
                _ = try b.sync(SyncOptions())
                for id in pendingB { sentByB[id] = .some(model[id]) }
                pendingB = []
                let rows = try titles(b)
                for (id, value) in sentByA { XCTAssertEqual(rows[id], value, "\(where_): b lacks a's change of \(id)") }
            }
        }
        for _ in 0..<2 {
            _ = try a.sync(SyncOptions())
            _ = try b.sync(SyncOptions())
        }
        XCTAssertEqual(try titles(a), model, "seed \(seed): a")
        XCTAssertEqual(try titles(b), model, "seed \(seed): b")
        XCTAssertGreaterThan(quietRounds, 0, "seed \(seed): some rounds were quiet")
        a.close()
        b.close()
    }
}

