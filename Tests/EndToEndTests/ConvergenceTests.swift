import Foundation
import StoreCloud
import StoreCloudPostgres
import StoreConfig
import StoreHistory
import StoreSQLite
import StoreControl
import TestSupport
import XCTest

/// Seeded random schedules on three stores sharing one container: random writes by storectl's library and by
/// external `sqlite3` processes, random mode switches with long local periods, random syncs in random order,
/// duplicated natural keys. After a final sync round every store must hold the same rows.
///
/// Replay one seed with `STORECTL_CONVERGENCE_SEED=N`; run more seeds with `STORECTL_CONVERGENCE_SEEDS=N`
/// (`scripts/convergence.sh` does). PostgreSQL runs when `STORECTL_TEST_PG_URL` is set, and fails without a
/// server when `STORECTL_REQUIRE_PG=1`.
final class ConvergenceTests: XCTestCase {
    static let stores = ["s0", "s1", "s2"]
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                         body TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE IF NOT EXISTS links(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                         label TEXT NOT NULL, PRIMARY KEY (note_id, label));
        """

    typealias Backend = FleetBackend

    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    /// The seeds to run: one to replay, or `count` consecutive ones.
    static func seeds(defaultCount: Int) -> [UInt64] {
        if let one = environment["STORECTL_CONVERGENCE_SEED"].flatMap({ UInt64($0) }) { return [one] }
        let count = environment["STORECTL_CONVERGENCE_SEEDS"].flatMap { Int($0) } ?? defaultCount
        let first = environment["STORECTL_CONVERGENCE_FIRST_SEED"].flatMap { UInt64($0) } ?? 1
        return (0..<UInt64(max(count, 0))).map { first + $0 }
    }

    func testStoresConvergeOnAContainerFile() throws {
        let seeds = Self.seeds(defaultCount: 10)
        var failed: [UInt64] = []
        for seed in seeds where !(try runSeed(seed, backend: .file)) { failed.append(seed) }
        print("convergence (file): \(seeds.count) seed(s), \(failed.count) failed\(failed.isEmpty ? "" : ": \(failed)")")
    }

    func testStoresConvergeOnPostgreSQL() throws {
        guard let url = Self.environment["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if Self.environment["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (.ci/run does) "
                    + "and export its URL")
            } else {
                print("note: STORECTL_TEST_PG_URL is not set; the PostgreSQL convergence test did nothing")
            }
            return
        }
        let seeds = Self.seeds(defaultCount: 5)
        var failed: [UInt64] = []
        for seed in seeds where !(try runSeed(seed, backend: .postgres(url: url))) { failed.append(seed) }
        print("convergence (postgres): \(seeds.count) seed(s), \(failed.count) failed\(failed.isEmpty ? "" : ": \(failed)")")
    }

    /// The PostgreSQL convergence with every store reading the change feed from a hot standby (`replica_url`).
    func testStoresConvergeOnPostgreSQLWithAHotStandby() throws {
        guard case .postgres(let url)? = FleetBackend.postgres(), let standby = try PostgresStandby.make() else { return }
        let seeds = Self.seeds(defaultCount: 1)
        var failed: [UInt64] = []
        for seed in seeds where !(try runSeed(seed, backend: .postgres(url: url),
                                              cloudExtra: "      replica_url: '\(standby.url)'")) {
            failed.append(seed)
        }
        print("convergence (postgres, hot standby): \(seeds.count) seed(s), \(failed.count) failed")
    }

    /// One seeded run. Returns whether every store ended with the same rows (a failure is recorded with the seed).
    func runSeed(_ seed: UInt64, backend: Backend, cloudExtra: String = "") throws -> Bool {
        let replay = "replay with STORECTL_CONVERGENCE_SEED=\(seed) swift test --filter ConvergenceTests"
        do {
            return try converge(seed, backend: backend, cloudExtra: cloudExtra, replay: replay)
        } catch {
            XCTFail("convergence seed \(seed) (\(backend)) threw: \(error)\n\(replay)")
            return false
        }
    }

    private func converge(_ seed: UInt64, backend: Backend, cloudExtra: String = "", replay: String) throws -> Bool {
        var rng = SplitMix64(seed: seed)
        let fleet = try Fleet(stores: Self.stores, backend: backend, schema: Self.schema, storeYAML: """
                entities:
                  notes:
                    unique: [uuid]
                  settings: {}
                  links: {}
            """, cloudExtra: cloudExtra, label: "storectl-converge", container: "test.convergence.\(seed).\(UInt32.random(in: 0...UInt32.max))")
        let dir = fleet.dir
        let configPath = fleet.configPath
        func handle(_ store: String) throws -> StoreHandle {
            let config = try ConfigLoader.load(path: configPath, environment: [:])
            return try StoreHandle(config: config, storeName: store, environment: [:])
        }
        var options = SyncOptions()
        options.allowMassDelete = true  // the breaker has its own tests; random deletes trip it by design

        var local: [String: Int] = [:]  // store -> steps left in a local period
        var log: [String] = []
        for s in Self.stores {
            let h = try handle(s)
            _ = try h.ensureInitialized()
            if rng.chance(70) {
                _ = try h.enableCloud(options)
                log.append("\(s): mode cloud")
            } else {
                local[s] = 5 + rng.below(20)
                log.append("\(s): stays local for \(local[s] ?? 0) steps")
            }
        }
        let steps = 40 + rng.below(30)
        for step in 0..<steps {
            let s = Self.stores[rng.below(Self.stores.count)]
            let roll = rng.below(100)
            if roll < 45 {
                let external = rng.chance(40)
                let sql = try randomWrite(&rng, store: dir.file("data/\(s).sqlite"))
                log.append("\(step) \(s): \(external ? "sqlite3" : "library") \(sql)")
                if external {
                    let r = try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", dir.file("data/\(s).sqlite"),
                                                               "PRAGMA foreign_keys = ON; " + sql], in: dir.path)
                    guard r.status == 0 else {
                        XCTFail("seed \(seed): sqlite3 failed: \(r)\n\(replay)")
                        return false
                    }
                } else {
                    let db = try Connection(path: dir.file("data/\(s).sqlite"), mode: .readWrite)
                    try HistoryTracker(db: db, options: TrackingOptions(author: "app-\(s)")).write {
                        try db.execute(sql)
                    }
                }
            } else if roll < 80 {
                if local[s] == nil {
                    log.append("\(step) \(s): sync")
                    _ = try handle(s).sync(options)
                }
            } else if roll < 90 {
                if local[s] == nil {
                    var o = options
                    o.noFinalSync = rng.chance(30)
                    local[s] = 3 + rng.below(rng.chance(30) ? 40 : 10)
                    log.append("\(step) \(s): mode local\(o.noFinalSync ? " --no-final-sync" : "") for \(local[s] ?? 0)")
                    _ = try handle(s).disableCloud(o)
                }
            }
            // Local periods run out; the store comes back to the cloud.
            for (name, left) in local {
                if left <= 1 {
                    local[name] = nil
                    log.append("\(step) \(name): mode cloud")
                    _ = try handle(name).enableCloud(options)
                } else {
                    local[name] = left - 1
                }
            }
        }
        // The final round: every store in cloud mode, then every store syncs twice.
        for s in Self.stores where local[s] != nil { _ = try handle(s).enableCloud(options) }
        for _ in 0..<2 {
            for s in Self.stores { _ = try handle(s).sync(options) }
        }
        var snapshots: [String: [String]] = [:]
        for s in Self.stores { snapshots[s] = try rows(dir.file("data/\(s).sqlite")) }
        let reference = snapshots["s0"] ?? []
        var ok = true
        for s in Self.stores.dropFirst() where snapshots[s] != reference {
            let (missing, extra) = compareRows(expected: reference, actual: snapshots[s] ?? [])
            XCTFail("seed \(seed) (\(backend)): \(s) differs from s0: missing \(missing), extra \(extra)\n\(replay)\n"
                + log.suffix(60).joined(separator: "\n"))
            ok = false
        }
        if !ok, let keep = Self.environment["STORECTL_CONVERGENCE_KEEP"], !keep.isEmpty {
            // Keep the files of a failed run for a closer look.
            let target = keep + "/seed-\(seed)-\(backend)"
            try? FileManager.default.removeItem(atPath: target)
            try FileManager.default.copyItem(atPath: dir.path, toPath: target)
            print("kept the files of seed \(seed) in \(target)")
        }
        let uuids = reference.filter { $0.hasPrefix("note|") }.map { $0.split(separator: "|")[1] }
        if Set(uuids).count != uuids.count {
            XCTFail("seed \(seed) (\(backend)): duplicate unique keys survived: \(uuids.sorted())\n\(replay)")
            ok = false
        }
        for s in Self.stores {
            let db = try Connection(path: dir.file("data/\(s).sqlite"), mode: .readOnly)
            XCTAssertEqual(try db.integrityCheck(), ["ok"], "seed \(seed): \(s)")
        }
        return ok
    }

    /// One random insert, update or delete, as SQL.
    func randomWrite(_ rng: inout SplitMix64, store: String) throws -> String {
        let db = try Connection(path: store, mode: .readOnly)
        let ids = try db.query("SELECT id FROM notes ORDER BY id").compactMap { $0[0].int64 }
        let word = ["alpha", "beta", "gamma", "delta", "eps"][rng.below(5)] + String(rng.below(100))
        let pick = { (rng: inout SplitMix64) -> Int64? in ids.isEmpty ? nil : ids[rng.below(ids.count)] }
        switch rng.below(10) {
        case 0, 1, 2:
            // A small pool of natural keys, so that stores create duplicates of each other's rows.
            return "INSERT INTO notes(uuid, title) VALUES ('u\(rng.below(12))', '\(word)')"
        case 3, 4:
            guard let id = pick(&rng) else { return "INSERT INTO notes(uuid) VALUES ('u\(rng.below(12))')" }
            return "UPDATE notes SET \(rng.chance(50) ? "title" : "body") = '\(word)' WHERE id = \(id)"
        case 5:
            guard let id = pick(&rng) else { return "DELETE FROM notes WHERE 0" }
            return "DELETE FROM notes WHERE id = \(id)"
        case 6, 7:
            let key = "k\(rng.below(6))"
            return rng.chance(80)
                ? "INSERT INTO settings(key, value) VALUES ('\(key)', '\(word)') ON CONFLICT(key) DO UPDATE SET value = excluded.value"
                : "DELETE FROM settings WHERE key = '\(key)'"
        default:
            guard let id = pick(&rng) else { return "DELETE FROM links WHERE 0" }
            let label = "l\(rng.below(3))"
            return rng.chance(75)
                ? "INSERT OR IGNORE INTO links(note_id, label) VALUES (\(id), '\(label)')"
                : "DELETE FROM links WHERE note_id = \(id) AND label = '\(label)'"
        }
    }

    /// A store's rows by natural values.
    func rows(_ path: String) throws -> [String] {
        let db = try Connection(path: path, mode: .readOnly)
        var out: [String] = []
        for row in try db.query("SELECT uuid, title, body FROM notes") {
            out.append("note|\(row[0].string ?? "")|\(row[1].string ?? "")|\(row[2].string ?? "")")
        }
        for row in try db.query("SELECT key, coalesce(value, '~') FROM settings") {
            out.append("setting|\(row[0].string ?? "")|\(row[1].string ?? "")")
        }
        for row in try db.query("SELECT coalesce(n.uuid, '?'), l.label FROM links l LEFT JOIN notes n ON n.id = l.note_id") {
            out.append("link|\(row[0].string ?? "")|\(row[1].string ?? "")")
        }
        return out.sorted()
    }
}
