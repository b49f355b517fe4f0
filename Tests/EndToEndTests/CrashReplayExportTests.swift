import Foundation
import TestSupport
import XCTest

/// The export half of the crash matrix: every export failpoint (and the Nth hit of a multi-batch export, and the
/// first export of `mode cloud`), then writes on the rows of the batch in flight, then the resume.
final class CrashReplayExportTests: CrashReplayCase {
    func testEveryExportFailpointThenWritesFile() throws { try matrix(.file, prefix: "export.") }

    func testEveryExportFailpointThenWritesPostgres() throws {
        if let pg = FleetBackend.postgres() { try matrix(pg, prefix: "export.") }
    }

    /// The Nth hit of a multi-batch export (batches of 2), and the first export of `mode cloud`.
    func nthHitAndFirstExport(_ backend: FleetBackend) throws {
        for name in ["export.after-save:2", "export.after-save:4", "export.before-save:3",
                     "export.after-batch-commit:2"]
        {
            for touch in [Touch.update, .reinsert] { try cell(backend, failpoint: name, touch: touch, twice: false) }
        }
        for name in try failpoints(prefix: "export.") {
            try cell(backend, failpoint: name, touch: .reinsert, twice: false, op: "mode cloud")
        }
        try cell(backend, failpoint: "export.after-save:2", touch: .delete, twice: true, op: "mode cloud")
    }

    /// Between the kill and the resume, other commands run on the store: pruning history, a schema change with
    /// `migrate`, a switch to local mode and back, and the read-only ones.
    func otherCommandsBeforeResume(_ backend: FleetBackend) throws {
        let between: [(String, [[String]], String?)] = [
            ("history prune", [["history", "prune", "--older-than", "0s"]], nil),
            ("migrate", [["migrate"]], "ALTER TABLE settings ADD COLUMN extra TEXT"),
            ("mode local and back", [["mode", "local"], ["mode", "cloud"]], nil),
            ("status and doctor", [["status"], ["doctor"], ["sync", "--help"]], nil),
        ]
        for (name, commands, sql) in between {
            for failpoint in ["export.after-save", "export.before-commit"] {
                let what = "\(failpoint), then writes and \(name), then the resume"
                let (f, base) = try self.base(backend)
                var m = base
                try m.write(f, "a", Self.inFlight)
                try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": failpoint, "STORECTL_BATCH_SIZE": "2"], expect: 137)
                try m.write(f, "a", Self.afterExportKill(.reinsert, 1))
                if let sql {
                    for s in ["a", "b"] { try f.sql(s, sql) }
                    try f.run("b", ["migrate"])
                }
                for c in commands {
                    let r = try f.run("a", c, expect: nil)
                    XCTAssertTrue(r.status == 0 || (c == ["doctor"] && r.status == 65), "[\(backend)] \(what): "
                                  + "storectl \(c.joined(separator: " "))\n\(r)")
                }
                try f.run("a", ["sync"])
                try f.syncRounds(2, ["b", "a"])
                var rows = m.rows
                if sql != nil {
                    rows = rows.map { $0.hasPrefix("settings|") ? $0.replacingOccurrences(of: "settings|", with: "settings|extra=null|") : $0 }
                }
                try f.assertRows(rows, late: sql == nil, what)
                for s in f.stores { try f.assertHealthy(s, what) }
            }
        }
    }

    func testOtherCommandsBetweenKillAndResumeFile() throws { try otherCommandsBeforeResume(.file) }

    func testOtherCommandsBetweenKillAndResumePostgres() throws {
        if let pg = FleetBackend.postgres() { try otherCommandsBeforeResume(pg) }
    }

    /// A store's own saves, replayed after a kill, are never a conflict: under every merge policy (even `error`
    /// and `server-wins`) the app's writes after the kill win and the resume exits 0.
    func everyMergePolicy(_ backend: FleetBackend) throws {
        for policy in ["error", "server-wins", "local-wins", "property-server-wins"] {
            for failpoint in ["export.after-save", "export.after-batch-commit"] {
                for touch in [Touch.update, .reinsert] {
                    try cell(backend, failpoint: failpoint, touch: touch, twice: false, policy: policy)
                }
            }
            try cell(backend, failpoint: "export.after-save:2", touch: .update, twice: true, op: "mode cloud",
                     policy: policy)
        }
    }

    func testOwnSavesReplayedUnderEveryMergePolicyFile() throws { try everyMergePolicy(.file) }

    func testOwnSavesReplayedUnderEveryMergePolicyPostgres() throws {
        if let pg = FleetBackend.postgres() { try everyMergePolicy(pg) }
    }

    func testNthHitAndFirstExportThenWritesFile() throws { try nthHitAndFirstExport(.file) }

    func testNthHitAndFirstExportThenWritesPostgres() throws {
        if let pg = FleetBackend.postgres() { try nthHitAndFirstExport(pg) }
    }
}

/// Seeded random kills (`kill -9` at a random moment, or a failpoint at a random hit) with writes between kills.
final class SeededKillTests: CrashReplayCase {
    // MARK: Seeded random kills with writes between them

    /// The seeds to run: `STORECTL_CRASH_SEED=N` replays one; `STORECTL_CRASH_SEEDS=N` runs N.
    static func seeds(defaultCount: Int) -> [UInt64] {
        if let one = environment["STORECTL_CRASH_SEED"].flatMap({ UInt64($0) }) { return [one] }
        let count = environment["STORECTL_CRASH_SEEDS"].flatMap { Int($0) } ?? defaultCount
        return (0..<UInt64(max(count, 0))).map { 1 + $0 }
    }

    /// One seeded run: a starts local with many rows; `mode cloud`, then `sync`, are killed again and again (at a
    /// random failpoint hit, or by `kill -9` after a random delay), with small writes on a (and on b, on keys of
    /// its own) between the kills.
    func randomKills(_ backend: FleetBackend, seed: UInt64) throws -> Bool {
        var rng = SplitMix64(seed: seed)
        let f = try Fleet(backend: backend, schema: CrashModel.schema, label: "storectl-kill")
        var m = CrashModel()
        var log: [String] = []
        let replay = "replay: STORECTL_CRASH_SEED=\(seed) swift test --filter SeededKillTests"
        try f.initialise("a")
        var bulk: [CrashModel.Write] = []
        for i in 1...120 { bulk.append(.insertNote("a\(i)", "title \(i)", id: i)) }
        for i in 1...20 { bulk.append(.setSetting("k\(i)", "v\(i)")) }
        for i in 1...20 { bulk.append(.setPair("a", i, "w\(i)")) }
        try m.write(f, "a", bulk)
        try f.cloudMode("b")
        let points = try failpoints(prefix: "export.") + failpoints(prefix: "import.")
        var aInCloud = false
        var nextID = 121
        var deleted: [(uuid: String, id: Int)] = []
        let kills = 5 + rng.below(6)
        for k in 0..<kills {
            let args = aInCloud ? ["sync"] : ["mode", "cloud"]
            let batch = ["3", "7", "40"][rng.below(3)]
            let status: Int32
            if k == 0 || rng.chance(50) {
                // The first kill always lands between a save of the first export and its local commit.
                let point = (k == 0 ? "export.after-save" : points[rng.below(points.count)]) + ":\(1 + rng.below(4))"
                log.append("\(k): a \(args.joined(separator: " ")) with STORECTL_FAILPOINT=\(point), batch \(batch)")
                status = try f.run("a", args, env: ["STORECTL_FAILPOINT": point, "STORECTL_BATCH_SIZE": batch],
                                   expect: nil).status
            } else {
                let delay = UInt32(2_000 + rng.below(250_000))
                log.append("\(k): a \(args.joined(separator: " ")) killed after \(delay) us, batch \(batch)")
                status = try Killer.run(["--store", "a"] + args, in: f.dir.path, afterMicroseconds: delay,
                                        environment: ["STORECTL_BATCH_SIZE": batch])
            }
            log.append("   exit \(status)")
            if status == 0 && !aInCloud { aInCloud = true }
            if status != 0 && status != 137 {
                XCTFail("[\(backend)] seed \(seed): storectl exited \(status) between kills\n\(replay)\n"
                        + log.joined(separator: "\n"))
                return false
            }
            // Small writes on a: to rows that may be in flight, deletes, re-inserts under the old rowid.
            var writes: [CrashModel.Write] = []
            for _ in 0..<(1 + rng.below(6)) {
                // Rows early in key order, the ones the first batches of an export carry, are the likeliest.
                let live = m.notes.keys.filter { $0.hasPrefix("a") }.sorted { (Int($0.dropFirst()) ?? 0) < (Int($1.dropFirst()) ?? 0) }
                let uuid = live.isEmpty ? "a1" : live[rng.below(1 + rng.below(live.count))]
                let id = Int(uuid.dropFirst()) ?? 1
                switch rng.below(8) {
                case 0, 1: writes.append(.setTitle(uuid, "t\(k)-\(rng.below(100))"))
                case 2: writes.append(.setBody(uuid, "b\(k)"))
                case 3:
                    writes.append(.deleteNote(uuid))
                    deleted.append((uuid, id))
                case 4:
                    if let d = deleted.popLast() {
                        writes.append(.reinsertNote(d.uuid, "reborn \(k)", id: d.id))
                    } else {
                        writes.append(.reinsertNote(uuid, "reborn \(k)", id: id))
                    }
                case 5:
                    writes.append(.insertNote("a\(nextID)", "new \(k)"))
                    nextID += 1
                case 6:
                    let key = "k\(1 + rng.below(25))"
                    writes.append(rng.chance(70) ? .setSetting(key, "x\(k)") : .deleteSetting(key))
                default:
                    let b = 1 + rng.below(25)
                    writes.append(rng.chance(70) ? .setPair("a", b, "y\(k)") : .reinsertPair("a", b, "z\(k)"))
                }
            }
            log.append("   a: " + writes.map(\.sql).joined(separator: " "))
            try m.write(f, "a", writes)
            if rng.chance(40) {
                let w: [CrashModel.Write] = [.insertNote("b\(k)", "from b \(k)"), .setSetting("b\(k)", "b")]
                log.append("   b: " + w.map(\.sql).joined(separator: " ") + "; sync")
                try m.write(f, "b", w)
                try f.run("b", ["sync"])
            }
        }
        log.append("final: a \(aInCloud ? "sync" : "mode cloud"), then b, a, b")
        try f.run("a", aInCloud ? ["sync"] : ["mode", "cloud"])
        try f.syncRounds(2, ["b", "a"])
        let before = Tally.lost + Tally.duplicated + Tally.unexpected
        let diffs = try f.assertRows(m.rows, "seeded kills, seed \(seed)")
        if diffs.values.contains(where: { !$0.isEmpty }) || Tally.lost + Tally.duplicated + Tally.unexpected > before {
            XCTFail("[\(backend)] seed \(seed) failed\n\(replay)\n" + log.joined(separator: "\n"))
            return false
        }
        return true
    }

    func seededKills(_ backend: FleetBackend, defaultCount: Int) throws {
        let seeds = Self.seeds(defaultCount: defaultCount)
        var failed: [UInt64] = []
        for seed in seeds where !(try randomKills(backend, seed: seed)) { failed.append(seed) }
        print("seeded kills (\(backend)): \(seeds.count) seed(s), \(failed.count) failed\(failed.isEmpty ? "" : ": \(failed)")")
    }

    func testSeededRandomKillsFile() throws { try seededKills(.file, defaultCount: 6) }

    func testSeededRandomKillsPostgres() throws {
        if let pg = FleetBackend.postgres() { try seededKills(pg, defaultCount: 3) }
    }
}
