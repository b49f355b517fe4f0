import Foundation
import StoreCloud
import StoreCloudPostgres
import TestSupport
import XCTest

/// Two devices sharing a zone, each with an `items` table whose `price` a data migration turns from dollars (REAL)
/// into cents (INTEGER): the README's recipe, run on every device, through the real binary.
final class MigrationPair {
    typealias Backend = ConvergenceTests.Backend

    static let schema = """
        CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL NOT NULL);
        """
    /// The README's price-to-cents migration.
    static let migration = """
        CREATE TABLE items_new(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price INTEGER NOT NULL);
        INSERT INTO items_new(id, name, price) SELECT id, name, CAST(round(price * 100) AS INTEGER) FROM items;
        DROP TABLE items;
        ALTER TABLE items_new RENAME TO items;
        """

    let fleet: Fleet
    var dir: TempDirectory { fleet.dir }
    var backend: Backend { fleet.backend }

    init(_ backend: Backend, stores: [String] = ["a", "b"]) throws {
        fleet = try Fleet(stores: stores, backend: backend, schema: Self.schema, label: "storectl-data-migration",
                          container: "test.migration.\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(atPath: dir.file("migrations"), withIntermediateDirectories: true)
        try dir.write("migrations/0002-price.sql", Self.migration)
    }

    @discardableResult
    func run(_ store: String, _ args: [String], expect: Int32? = 0, file: StaticString = #filePath,
             line: UInt = #line) throws -> ProcessResult
    {
        try fleet.run(store, args, expect: expect, file: file, line: line)
    }

    @discardableResult
    func sql(_ store: String, _ statement: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> String
    {
        try fleet.sql(store, statement, foreignKeys: false, file: file, line: line)
    }

    func migrate(_ store: String, file: StaticString = #filePath, line: UInt = #line) throws {
        try run(store, ["migrate", "--sql", "migrations/0002-price.sql", "--schema-version", "2"], file: file,
                line: line)
    }

    /// `name=typeof(price):price` of every item, in id order.
    func items(_ store: String) throws -> String {
        try sql(store, "SELECT group_concat(name || '=' || typeof(price) || ':' || price, ' ') FROM "
                + "(SELECT * FROM items ORDER BY id)").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `name=typeof(price):price` of every item, in name order (an INTEGER key is a local rowid: each store numbers
    /// the rows it imports itself).
    func itemsByName(_ store: String) throws -> String {
        try sql(store, "SELECT group_concat(name || '=' || typeof(price) || ':' || price, ' ') FROM "
                + "(SELECT * FROM items ORDER BY name)").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Both stores on cloud, holding `pen` at 1.5 and `ink` at 0.25, synced.
    func synced() throws {
        try run("a", ["init"])
        try sql("a", "INSERT INTO items(id, name, price) VALUES (1, 'pen', 1.5), (2, 'ink', 0.25)")
        try run("a", ["mode", "cloud"])
        try run("b", ["mode", "cloud"])
        XCTAssertEqual(try items("b"), "pen=real:1.5 ink=real:0.25")
    }
}

/// A data migration (`migrate --sql FILE --schema-version N`) is applied once per zone: every order of migrations
/// and syncs ends with the transform applied exactly once to every value, on every device.
final class DataMigrationTests: XCTestCase {
    static var pgURL: String? {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set")
            }
            return nil
        }
        return url
    }

    /// Runs `body` on the container file, then on PostgreSQL when a server is set up.
    func onBothBackends(_ body: (MigrationPair) throws -> Void) throws {
        try body(try MigrationPair(.file, stores: ["a", "b", "c"]))
        if let url = Self.pgURL { try body(try MigrationPair(.postgres(url: url), stores: ["a", "b", "c"])) }
    }

    func converged(_ p: MigrationPair, _ expected: String, file: StaticString = #filePath, line: UInt = #line) throws {
        for s in ["a", "b"] {
            XCTAssertEqual(try p.items(s), expected, "[\(p.backend)] store \(s)", file: file, line: line)
            let verify = try p.run(s, ["verify"], expect: nil)
            XCTAssertEqual(verify.status, 0, "[\(p.backend)] verify on \(s)\n\(verify)", file: file, line: line)
        }
    }

    func testTheDeviceThatMigratesFirstRaisesTheZoneAndTheOtherWaitsForItsOwnMigration() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            XCTAssertEqual(try p.items("a"), "pen=integer:150 ink=integer:25")
            try p.run("a", ["sync"])
            // b has not migrated: it neither imports the cents (its migration would multiply them again) nor sends
            // dollars over them; it says what to run.
            let waiting = try p.run("b", ["sync"], expect: 75)
            XCTAssertTrue(waiting.stderr.contains("schema version 2"), waiting.stderr)
            XCTAssertTrue(waiting.stderr.contains("migrate --sql migrations/0002-price.sql --schema-version 2"),
                          waiting.stderr)
            XCTAssertEqual(try p.items("b"), "pen=real:1.5 ink=real:0.25")
            let status = try p.run("b", ["status"], expect: nil)
            XCTAssertNotEqual(status.status, 0, "status must not say all is well while b waits\n\(status)")
            try p.migrate("b")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            try self.converged(p, "pen=integer:150 ink=integer:25")
        }
    }

    func testBothDevicesMigratingOfflineApplyItOnce() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            try p.migrate("b")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            try p.run("b", ["sync"])
            try self.converged(p, "pen=integer:150 ink=integer:25")
        }
    }

    func testAnEditAfterTheMigrationOnOneDeviceIsNotUndoneByTheOthersMigration() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            try p.run("a", ["sync"])
            try p.sql("a", "UPDATE items SET price = 300 WHERE name = 'pen'")
            try p.run("a", ["sync"])
            try p.migrate("b")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            // b's migration turned 1.5 into 150, but that is the migration's doing, not an edit: a's 300 stands.
            try self.converged(p, "pen=integer:300 ink=integer:25")
        }
    }

    func testAPriceWrittenUnderTheOldSchemaBeforeMigratingIsMigratedOnce() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            try p.run("a", ["sync"])
            // b writes dollars, still at the old schema, and cannot send them.
            try p.sql("b", "UPDATE items SET price = 2.0 WHERE name = 'pen'")
            try p.run("b", ["sync"], expect: 75)
            try p.migrate("b")
            XCTAssertEqual(try p.items("b"), "pen=integer:200 ink=integer:25")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            try self.converged(p, "pen=integer:200 ink=integer:25")
        }
    }

    func testADeviceThatMigratedBeforeSeeingAnOldWriteWaitsForTheWriterToMigrate() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")  // offline: not synced yet
            try p.sql("b", "UPDATE items SET price = 2.0 WHERE name = 'pen'")
            try p.run("b", ["sync"])
            // a migrated without b's 2.0: it cannot raise the zone (b's dollars would never be turned into cents).
            let waiting = try p.run("a", ["sync"], expect: 75)
            XCTAssertTrue(waiting.stderr.contains("since this store last imported"), waiting.stderr)
            try p.migrate("b")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            try self.converged(p, "pen=integer:200 ink=integer:25")
        }
    }

    func testAMigrationKilledBeforeItsCommitThenAppWritesThenTheRerunMigratesThemOnce() throws {
        try onBothBackends { p in
            try p.synced()
            let killed = try Binary.storectl(["--store", "a", "migrate", "--sql", "migrations/0002-price.sql",
                                              "--schema-version", "2"], in: p.dir.path,
                                             environment: ["STORECTL_FAILPOINT": "schema.before-commit"])
            XCTAssertEqual(killed.status, 137, "\(killed)")
            XCTAssertEqual(try p.items("a"), "pen=real:1.5 ink=real:0.25", "a killed migration changes nothing")
            // The app keeps writing dollars: an edit, a new row, a deletion, a row deleted and inserted again.
            try p.sql("a", "UPDATE items SET price = 2.0 WHERE name = 'pen'")
            try p.sql("a", "INSERT INTO items(id, name, price) VALUES (3, 'pad', 4.99)")
            try p.sql("a", "DELETE FROM items WHERE name = 'ink'")
            try p.sql("a", "INSERT INTO items(id, name, price) VALUES (2, 'ink', 0.5)")
            // A sync at the old version in between is fine: the zone is still at it.
            try p.run("a", ["sync"])
            try p.migrate("a")
            try p.run("a", ["sync"])
            try p.migrate("b")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            try self.converged(p, "pen=integer:200 ink=integer:50 pad=integer:499")
        }
    }

    func testANewDeviceJoinsAMigratedZoneOnlyAfterItsOwnMigration() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            try p.run("a", ["sync"])
            // c starts from the old schema with a row of its own: mode cloud refuses before anything is written.
            try p.run("c", ["init"])
            try p.sql("c", "INSERT INTO items(id, name, price) VALUES (1, 'cup', 3.25)")
            let refused = try p.run("c", ["mode", "cloud"], expect: 75)
            XCTAssertTrue(refused.stderr.contains("migrate --sql migrations/0002-price.sql --schema-version 2"),
                          refused.stderr)
            XCTAssertTrue(try p.dir.read("config.yaml").contains("path: data/c.sqlite   # the store file\n    schema: schema.sql\n"
                                                                  + "    mode: local"))
            XCTAssertEqual(try p.items("c"), "cup=real:3.25")
            try p.migrate("c")
            try p.run("c", ["mode", "cloud"])
            XCTAssertEqual(try p.itemsByName("c"), "cup=integer:325 ink=integer:25 pen=integer:150")
            // b, which has not migrated, can still leave sync without its final export.
            try p.run("b", ["mode", "local"], expect: 75)
            try p.run("b", ["mode", "local", "--no-final-sync"])
            XCTAssertEqual(try p.items("b"), "pen=real:1.5 ink=real:0.25")
        }
    }

    func testAStoreWhoseMigrationChangedNoValueIsAtTheZonesVersionToo() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            try p.run("a", ["sync"])
            // c has no row, so the migration changes no value there: it is at version 2 all the same.
            try p.run("c", ["init"])
            try p.run("c", ["mode", "cloud"], expect: 75)
            try p.migrate("c")
            try p.run("c", ["mode", "cloud"])
            XCTAssertEqual(try p.itemsByName("c"), "ink=integer:25 pen=integer:150")
            let again = try p.run("c", ["migrate", "--sql", "migrations/0002-price.sql", "--schema-version", "2"])
            XCTAssertTrue(again.stdout.contains("already"), again.stdout)
            try p.run("c", ["sync"])
        }
    }

    func testReuploadAndRebindWaitBeforeTheyResetAnything() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            try p.run("a", ["sync"])
            let map = "SELECT count(*) || '|' || count(change_tag) || '|' || count(base) FROM _storectl_records"
            let before = try p.sql("b", map)
            try p.run("b", ["sync", "--reupload"], expect: 75)
            try p.run("b", ["sync", "--rebind"], expect: 75)
            XCTAssertEqual(try p.sql("b", map), before, "a store that waits keeps its record map")
            try p.migrate("b")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            try self.converged(p, "pen=integer:150 ink=integer:25")
        }
    }

    func testAnotherFileForTheSameVersionIsRefused() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            try p.run("a", ["sync"])
            _ = try p.dir.write("migrations/0002-other.sql", MigrationPair.migration.replacingOccurrences(
                of: "price * 100", with: "price * 1000"))
            try p.run("b", ["migrate", "--sql", "migrations/0002-other.sql", "--schema-version", "2"])
            let refused = try p.run("b", ["sync"], expect: 65)
            XCTAssertTrue(refused.stderr.contains("another file"), refused.stderr)
            XCTAssertEqual(try p.run("b", ["status"], expect: nil).status == 0, false)
            XCTAssertEqual(try p.items("a"), "pen=integer:150 ink=integer:25", "nothing of b's reached a")
        }
    }

    func testTheMigrationsOwnDeletesAndInsertsComeFromTheZoneOnALaterDevice() throws {
        try onBothBackends { p in
            try p.synced()
            _ = try p.dir.write("migrations/0002-prune.sql", """
                DELETE FROM items WHERE price < 1;
                \(MigrationPair.migration)
                INSERT INTO items(name, price) VALUES ('added by v2', 0);
                """)
            let migrate = ["migrate", "--sql", "migrations/0002-prune.sql", "--schema-version", "2"]
            // a edits ink above the threshold first, so its migration keeps it.
            try p.sql("a", "UPDATE items SET price = 5.0 WHERE name = 'ink'")
            try p.run("a", migrate)
            try p.run("a", ["sync"])
            // b still has ink at 0.25: its migration deletes it and inserts the same row as a's did.
            try p.run("b", migrate)
            XCTAssertEqual(try p.itemsByName("b"), "added by v2=integer:0 pen=integer:150")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            for s in ["a", "b"] {
                XCTAssertEqual(try p.itemsByName(s), "added by v2=integer:0 ink=integer:500 pen=integer:150",
                               "[\(p.backend)] store \(s)")
                try p.run(s, ["verify"])
            }
        }
    }

    func testARaiseWhoseSyncStoppedBeforeItNotedItStillSendsTheMigration() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("a")
            let killed = try Binary.storectl(["--store", "a", "sync"], in: p.dir.path,
                                             environment: ["STORECTL_FAILPOINT": "export.before-save"])
            XCTAssertEqual(killed.status, 137, "\(killed)")
            // As if the process had died between the raise in the cloud and its own note of it.
            try p.sql("a", "INSERT OR REPLACE INTO _storectl_meta(key, value) VALUES ('schema_version_unsynced', '2')")
            try p.run("a", ["sync"])
            try p.migrate("b")
            try p.run("b", ["sync"])
            try self.converged(p, "pen=integer:150 ink=integer:25")
        }
    }

    func testAnEditHereKeepsItsColumnsAndTheZoneKeepsTheOthers() throws {
        try onBothBackends { p in
            try p.synced()
            // A migration in place (an UPDATE the triggers record), as well as the README's rebuild.
            _ = try p.dir.write("migrations/0002-update.sql", "UPDATE items SET price = CAST(round(price * 100) AS INTEGER);")
            let migrate = ["migrate", "--sql", "migrations/0002-update.sql", "--schema-version", "2"]
            try p.run("a", migrate)
            try p.run("a", ["sync"])
            try p.sql("a", "UPDATE items SET price = 175 WHERE name = 'pen'")
            try p.run("a", ["sync"])
            // b, behind, renames the pen (its price untouched), then migrates: the rename is b's, the price a's.
            try p.sql("b", "UPDATE items SET name = 'pen-b' WHERE name = 'pen'")
            try p.run("b", ["sync"], expect: 75)
            try p.run("b", migrate)
            try p.run("b", ["sync"])
            try p.run("a", ["sync"])
            // The migration ran in place: the column keeps its REAL type.
            try self.converged(p, "pen-b=real:175.0 ink=real:25.0")
        }
    }

    func testANewRowFromTheRaiserArrivesOnceTheOtherMigrates() throws {
        try onBothBackends { p in
            try p.synced()
            try p.migrate("b")
            try p.run("b", ["sync"])
            try p.sql("b", "INSERT INTO items(id, name, price) VALUES (3, 'pad', 499)")
            try p.run("b", ["sync"])
            try p.run("a", ["sync"], expect: 75)
            XCTAssertEqual(try p.items("a"), "pen=real:1.5 ink=real:0.25")
            try p.migrate("a")
            try p.run("a", ["sync"])
            try p.run("b", ["sync"])
            try self.converged(p, "pen=integer:150 ink=integer:25 pad=integer:499")
        }
    }
}

/// Random schedules of writes, syncs, kills and one data migration per store (online, offline, killed and run
/// again), on three stores: at the end every store holds exactly the model, where the migration turned every
/// price into cents exactly once.
///
/// Each item has one owner, the only store that writes it (in dollars before its own migration, in cents after),
/// so that the outcome never depends on the order of syncs. Replay one seed with
/// `STORECTL_MIGRATION_SEED=N swift test --filter DataMigrationModelTests`.
final class DataMigrationModelTests: XCTestCase {
    static let stores = ["a", "b", "c"]

    static func seeds(defaultCount: Int) -> [UInt64] {
        let env = ProcessInfo.processInfo.environment
        if let one = env["STORECTL_MIGRATION_SEED"].flatMap({ UInt64($0) }) { return [one] }
        let count = env["STORECTL_MIGRATION_SEEDS"].flatMap { Int($0) } ?? defaultCount
        return (1...UInt64(max(count, 1))).map { $0 }
    }

    func testRandomSchedulesOnAContainerFile() throws {
        var failed: [UInt64] = []
        let seeds = Self.seeds(defaultCount: 8)
        for seed in seeds where !(try run(seed, .file)) { failed.append(seed) }
        print("data migration model (file): \(seeds.count) seed(s), \(failed.count) failed \(failed)")
    }

    func testRandomSchedulesOnPostgreSQL() throws {
        guard let url = DataMigrationTests.pgURL else { return }
        var failed: [UInt64] = []
        let seeds = Self.seeds(defaultCount: 4)
        for seed in seeds where !(try run(seed, .postgres(url: url))) { failed.append(seed) }
        print("data migration model (postgres): \(seeds.count) seed(s), \(failed.count) failed \(failed)")
    }

    /// One seeded schedule; returns whether every store ended equal to the model.
    func run(_ seed: UInt64, _ backend: MigrationPair.Backend) throws -> Bool {
        var rng = SplitMix64(seed: seed)
        let p = try MigrationPair(backend, stores: Self.stores)
        var model: [String: Int] = [:]  // item name -> price in cents
        var owner: [String: String] = [:]
        var migrated: Set<String> = []
        var next = ["a": 100, "b": 200, "c": 300]  // names i100..., i200..., i300...: one owner each
        var log: [String] = []
        func fail(_ what: String) -> Bool {
            XCTFail("seed \(seed) [\(backend)]: \(what)\n" + log.joined(separator: "\n")
                    + "\nreplay: STORECTL_MIGRATION_SEED=\(seed) swift test --filter DataMigrationModelTests")
            return false
        }
        for s in Self.stores {
            try p.run(s, ["init"])
            for _ in 0..<2 {
                let id = "i\(next[s, default: 0])"
                next[s, default: 0] += 1
                let cents = 25 * (1 + rng.below(40))
                try p.sql(s, "INSERT INTO items(name, price) VALUES ('\(id)', \(Double(cents) / 100))")
                model[id] = cents
                owner[id] = s
            }
            try p.run(s, ["mode", "cloud"])
        }
        // The container file moves away while a store migrates "offline", and comes back.
        func offline(_ body: () throws -> Void) throws {
            guard case .file = backend else { return try body() }
            let path = p.dir.file("cloud/shared.container"), away = p.dir.file("cloud-away")
            try FileManager.default.moveItem(atPath: path, toPath: away)
            defer { try? FileManager.default.moveItem(atPath: away, toPath: path) }
            try body()
        }
        for step in 0..<30 {
            let s = Self.stores[rng.below(Self.stores.count)]
            switch rng.below(10) {
            case 0, 1, 2:
                // The owner writes one of its items, in the units of its own schema.
                let mine = model.keys.filter { owner[$0] == s }.sorted()
                let cents = 25 * (1 + rng.below(400))
                let value = migrated.contains(s) ? "\(cents)" : "\(Double(cents) / 100)"
                if mine.isEmpty || rng.chance(30) {
                    let id = "i\(next[s, default: 0])"
                    next[s, default: 0] += 1
                    try p.sql(s, "INSERT INTO items(name, price) VALUES ('\(id)', \(value))")
                    model[id] = cents
                    owner[id] = s
                    log.append("\(step) \(s): insert \(id) = \(value)")
                } else if rng.chance(15) {
                    let id = mine[rng.below(mine.count)]
                    try p.sql(s, "DELETE FROM items WHERE name = '\(id)'")
                    model[id] = nil
                    log.append("\(step) \(s): delete \(id)")
                } else {
                    let id = mine[rng.below(mine.count)]
                    try p.sql(s, "UPDATE items SET price = \(value) WHERE name = '\(id)'")
                    model[id] = cents
                    log.append("\(step) \(s): update \(id) = \(value)")
                }
            case 3, 4, 5, 6:
                let kill = rng.chance(20) ? ["import.before-commit", "export.after-save",
                                             "export.before-save"][rng.below(3)] : nil
                let r = try Binary.storectl(["--store", s, "sync"], in: p.dir.path,
                                            environment: kill.map { ["STORECTL_FAILPOINT": $0] } ?? [:])
                log.append("\(step) \(s): sync\(kill.map { " killed at \($0)" } ?? "") -> \(r.status)")
                if ![0, 75].contains(r.status) && kill == nil { return fail("sync on \(s) exited \(r.status)\n\(r)") }
            default:
                guard !migrated.contains(s) else { continue }
                let args = ["--store", s, "migrate", "--sql", "migrations/0002-price.sql", "--schema-version", "2"]
                if rng.chance(25) {
                    let killed = try Binary.storectl(args, in: p.dir.path,
                                                     environment: ["STORECTL_FAILPOINT": "schema.before-commit"])
                    log.append("\(step) \(s): migrate killed -> \(killed.status)")
                }
                let offlineRun = rng.chance(30)
                var result: ProcessResult?
                if offlineRun { try offline { result = try Binary.storectl(args, in: p.dir.path) } } else {
                    result = try Binary.storectl(args, in: p.dir.path)
                }
                guard let r = result else { return fail("migrate on \(s) did not run") }
                log.append("\(step) \(s): migrate\(offlineRun ? " offline" : "") -> \(r.status)")
                guard r.status == 0 else { return fail("migrate on \(s) exited \(r.status)\n\(r)") }
                migrated.insert(s)
            }
        }
        // Every store runs the migration, then syncs until nothing is left to do.
        for s in Self.stores where !migrated.contains(s) {
            let r = try Binary.storectl(["--store", s, "migrate", "--sql", "migrations/0002-price.sql",
                                         "--schema-version", "2"], in: p.dir.path)
            log.append("end \(s): migrate -> \(r.status)")
            guard r.status == 0 else { return fail("migrate on \(s) exited \(r.status)\n\(r)") }
        }
        // Two rounds in a row where every sync succeeds: the second brings what the first sent.
        var cleanRounds = 0
        for round in 0..<6 where cleanRounds < 2 {
            cleanRounds += 1
            for s in Self.stores {
                let r = try Binary.storectl(["--store", s, "sync"], in: p.dir.path)
                log.append("end \(round) \(s): sync -> \(r.status)")
                if r.status != 0 {
                    cleanRounds = 0
                    if round == 5 { return fail("sync on \(s) still exits \(r.status) after every store migrated\n\(r)") }
                }
            }
        }
        let expected = model.keys.sorted().map { "\($0)=integer:\(model[$0] ?? 0)" }.joined(separator: " ")
        for s in Self.stores {
            let got = try p.itemsByName(s)
            if got != expected { return fail("store \(s) holds\n  \(got)\nthe model\n  \(expected)") }
            let verify = try Binary.storectl(["--store", s, "verify"], in: p.dir.path)
            if verify.status != 0 { return fail("verify on \(s) exited \(verify.status)\n\(verify)") }
        }
        return true
    }
}
