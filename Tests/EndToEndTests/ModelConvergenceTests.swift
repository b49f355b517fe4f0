import Foundation
import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreSQLite
import TestSupport
import XCTest

/// A value of the model, exactly as the store must hold it.
enum MV: Equatable, CustomStringConvertible {
    case null
    case int(Int64)
    case real(Double)
    case text([UInt8])

    static func str(_ s: String) -> MV { .text(Array(s.utf8)) }

    /// The value as `StoreDump` writes it.
    var cell: String {
        switch self {
        case .null: return "null"
        case .int(let v): return "i:\(v)"
        case .real(let d): return StoreDump.format("real", .real(d))
        case .text(let b): return StoreDump.format("text", .text(Hex.string(b, uppercase: true)))
        }
    }

    /// The value to bind; text travels as a blob that the SQL casts back to text, so that any byte survives.
    var bound: Value {
        switch self {
        case .null: return .null
        case .int(let v): return .integer(v)
        case .real(let d): return .real(d)
        case .text(let b): return .blob(b)
        }
    }

    var description: String { cell }
}

/// The rows every store must hold, the owner of each row, and what each store wrote since its last clean sync.
///
/// Each row has one owner (the store that created it), and only its owner writes it, so that the expected outcome
/// never depends on the order of syncs. Deliberate collisions (the same key, or the same value of a UNIQUE
/// column, inserted by several stores at once) are "contested": any one of the candidates may win, and a
/// barrier (every store synced) reads the winner from the stores and checks it is one of them, the same on every
/// store. The undo log of a store lets a restored backup drop exactly the writes that never reached the cloud.
struct StoreModel {
    typealias Row = [String: MV]

    /// Rows by identity (`table|key...`).
    var rows: [String: Row] = [:]
    var owner: [String: String] = [:]
    /// Identity -> the candidate rows, by the store that inserted each.
    var contested: [String: [String: Row]] = [:]
    /// Store -> identity -> the row before the store's first write since its last clean sync (nil: absent).
    var undo: [String: [String: Row?]] = [:]
    /// Columns added to a table since the start (table -> column -> default).
    var added: [String: [(column: String, defaultValue: MV)]] = [:]

    static let baseColumns: [String: [String]] = [
        "notes": ["body", "title", "uuid"],
        "events": ["n", "origin", "payload"],
        "ranks": ["id", "label"],
        "settings": ["key", "value"],
        "readings": ["at", "note", "value"],
        "links": ["label", "note_id"],
        "words": ["lang", "n", "w"],
        "folders": ["name", "parent"],
        "slots": ["folder", "label", "pos"],
    ]

    static func table(_ identity: String) -> String { String(identity.prefix { $0 != "|" }) }

    mutating func set(_ identity: String, _ row: Row?, by store: String) {
        if undo[store]?[identity] == nil {
            undo[store, default: [:]][identity] = .some(rows[identity])
        }
        rows[identity] = row
        if row == nil, Self.table(identity) == "notes", let uuid = identity.split(separator: "|").last {
            // ON DELETE CASCADE: the note's links go with it.
            for key in rows.keys where key.hasPrefix("links|\(uuid)|") { set(key, nil, by: store) }
        }
        if row == nil, Self.table(identity) == "folders", let name = identity.split(separator: "|").last {
            // ON DELETE CASCADE down the tree (and around a cycle), and to the folder's slots.
            for (key, child) in rows where key.hasPrefix("folders|") && child["parent"] == .str(String(name)) {
                if rows[key] != nil { set(key, nil, by: store) }
            }
            for (key, slot) in rows where key.hasPrefix("slots|") && slot["folder"] == .str(String(name)) {
                set(key, nil, by: store)
            }
        }
    }

    /// The store's writes were confirmed by a clean sync: they are in the cloud.
    mutating func confirm(_ store: String) { undo[store] = [:] }

    /// A backup copied back over `store`: its unconfirmed writes are gone.
    mutating func dropUnconfirmed(_ store: String) {
        for (identity, old) in undo[store] ?? [:] {
            rows[identity] = old
            if old == nil && owner[identity] == store { owner[identity] = nil }
        }
        undo[store] = [:]
    }

    /// Columns of `table` on a store that added `addedThere` of the added columns.
    func columns(_ table: String, addedThere: Set<String>) -> [String] {
        let extra = (added[table] ?? []).map(\.column).filter { addedThere.contains("\(table).\($0)") }
        return ((Self.baseColumns[table] ?? []) + extra).sorted()
    }

    /// A note's values as a reference to it prints (`->notes{...}`).
    func noteRef(_ uuid: String, _ addedThere: Set<String>) -> String {
        guard let note = rows["notes|\(uuid)"] else { return "->notes{missing \(uuid)}" }
        let parts = columns("notes", addedThere: addedThere).map { "\($0)=\((note[$0] ?? .null).cell)" }
        return "->notes{" + parts.joined(separator: ",") + "}"
    }

    func line(_ identity: String, _ row: Row, _ addedThere: Set<String>) -> String {
        let table = Self.table(identity)
        var parts = [table]
        for c in columns(table, addedThere: addedThere) {
            if table == "slots" && c == "folder", case .text(let b)? = row["folder"] {
                parts.append("folder=->folders{name=\(MV.text(b).cell)}")
            } else if table == "folders" && c == "parent" {
                if case .text(let b)? = row["parent"] {
                    parts.append("parent=->folders{name=\(MV.text(b).cell)}")
                } else {
                    parts.append("parent=null")
                }
            } else if table == "links" && c == "note_id" {
                let uuid = row["note"].map { v -> String in
                    if case .text(let b) = v { return String(decoding: b, as: UTF8.self) }
                    return "?"
                } ?? "?"
                parts.append("note_id=" + noteRef(uuid, addedThere))
            } else {
                parts.append("\(c)=\((row[c] ?? .null).cell)")
            }
        }
        return parts.joined(separator: "|")
    }

    /// Every row, as a store with `addedThere` columns must dump it.
    func expected(_ addedThere: Set<String>) -> [String] {
        rows.map { line($0.key, $0.value, addedThere) }.sorted()
    }

    /// The values a freshly inserted row gets for the added columns the writer does not set.
    func defaults(_ table: String) -> Row {
        var row: Row = [:]
        for (c, d) in added[table] ?? [] { row[c] = d }
        return row
    }
}

/// Seeded schedules on three stores sharing one container: writes on every supported key kind (INTEGER
/// PRIMARY KEY, INTEGER PRIMARY KEY DESC, TEXT, REAL with 17 significant digits, composite, WITHOUT ROWID, a
/// reference), text with NUL and invalid UTF-8, collisions on UNIQUE columns and natural keys, columns added with
/// `storectl migrate` on one store at a time (sometimes filled before `migrate`), kills (failpoints and `kill -9`)
/// with writes between, a store restored from its own backup, and mode switches. At every barrier (every store
/// synced) each store equals the model; at the end, so does a store that joins from nothing, and one more round
/// moves nothing.
///
/// A fourth store, `r`, signs in as another account (`reader`) with a read-only share of the zone (container file
/// only, for now): it writes rows of its own and edits the others' rows, and none of it may reach the cloud; the
/// owner removes its share mid-schedule in some seeds (its `sync` is refused with 77 and changes nothing) and shares
/// the zone again later. At a barrier, `r` equals the model but for the rows it changed here that the cloud never
/// overwrote; after `sync --discard-local`, it equals the model exactly. See `ReaderState`.
///
/// The notes' `title` and `body` are encrypted on the device (`entities.notes.encrypted`, with every store's
/// `cloud.encryption_key: ${MODEL_KEY}`, `r` and `late` included): the model is the same, and at every barrier the
/// server holds none of those values in clear (`checkSealed`). `STORECTL_MODEL_WITHOUT=encryption` leaves it out.
///
/// `STORECTL_MODEL_SEED=N` replays one seed; `STORECTL_MODEL_SEEDS=N` runs N seeds from `STORECTL_MODEL_FIRST_SEED`
/// (default 1): `scripts/model-seeds.sh 1000` runs 1,000. A failure prints its seed and the whole schedule;
/// `STORECTL_MODEL_KEEP=DIR` keeps the files of a failed seed.
final class ModelConvergenceTests: XCTestCase {
    static let stores = ["s0", "s1", "s2"]
    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE,
                                         title TEXT NOT NULL DEFAULT '', body TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, origin TEXT NOT NULL, n INTEGER NOT NULL,
                                          payload TEXT);
        CREATE TABLE IF NOT EXISTS ranks(id INTEGER PRIMARY KEY DESC, label TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE IF NOT EXISTS readings(at REAL PRIMARY KEY, value REAL, note TEXT);
        CREATE TABLE IF NOT EXISTS links(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                         label TEXT NOT NULL, PRIMARY KEY (note_id, label));
        CREATE TABLE IF NOT EXISTS words(w TEXT NOT NULL, lang TEXT NOT NULL, n INTEGER,
                                         PRIMARY KEY (w, lang)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                                           parent INTEGER REFERENCES folders(id) ON DELETE CASCADE);
        CREATE TABLE IF NOT EXISTS slots(id INTEGER PRIMARY KEY,
                                         folder INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE,
                                         pos INTEGER NOT NULL, label TEXT NOT NULL, UNIQUE(folder, pos));
        """
    /// The columns a schedule may add, one store at a time: (table, column, SQL type, default).
    static let schemaChanges: [(table: String, column: String, type: String, defaultValue: MV)] = [
        ("notes", "color", "TEXT", .null),
        ("settings", "prio", "INTEGER NOT NULL DEFAULT 0", .int(0)),
    ]

    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    static func seeds(defaultCount: Int) -> [UInt64] {
        if let one = environment["STORECTL_MODEL_SEED"].flatMap({ UInt64($0) }) { return [one] }
        let count = environment["STORECTL_MODEL_SEEDS"].flatMap { Int($0) } ?? defaultCount
        let first = environment["STORECTL_MODEL_FIRST_SEED"].flatMap { UInt64($0) } ?? 1
        return (0..<UInt64(max(count, 0))).map { first + $0 }
    }

    var totals = (seeds: 0, failed: [UInt64](), barriers: 0, steps: 0)

    override func tearDown() {
        print("model convergence: \(totals.seeds) seed(s), \(totals.steps) steps, \(totals.barriers) barriers, "
              + "\(totals.failed.count) failed\(totals.failed.isEmpty ? "" : ": \(totals.failed)"); \(Tally.line)")
        super.tearDown()
    }

    func testModelOnAContainerFile() throws {
        for seed in Self.seeds(defaultCount: 50) { try runSeed(seed, backend: .file) }
    }

    func testModelOnPostgreSQL() throws {
        guard let pg = FleetBackend.postgres() else { return }
        for seed in Self.seeds(defaultCount: 8) { try runSeed(seed, backend: pg) }
    }

    func runSeed(_ seed: UInt64, backend: FleetBackend) throws {
        totals.seeds += 1
        let run = ModelRun(seed: seed, backend: backend, test: self)
        let before = run.failureCount
        do {
            try run.go()
        } catch {
            run.fail("threw: \(error)")
        }
        if run.failureCount > before && !run.failed { run.failed = true; run.failure = "a check failed (see above)" }
        totals.steps += run.steps
        totals.barriers += run.barriers
        if !run.failed && Self.environment["STORECTL_MODEL_LOG"] == "1" {
            print("model seed \(seed) (\(backend)) passed; schedule:\n" + run.log.joined(separator: "\n"))
        }
        if run.failed {
            totals.failed.append(seed)
            let replay = "replay: STORECTL_MODEL_SEED=\(seed) swift test --skip-build --filter "
                + "ModelConvergenceTests.\(backend.isFile ? "testModelOnAContainerFile" : "testModelOnPostgreSQL")"
            XCTFail("model seed \(seed) (\(backend)) failed at: \(run.failure)\n\(replay)\nschedule:\n"
                    + run.log.joined(separator: "\n"))
            if let keep = Self.environment["STORECTL_MODEL_KEEP"], !keep.isEmpty, let fleet = run.fleet {
                let target = keep + "/model-seed-\(seed)-\(backend)"
                try? FileManager.default.removeItem(atPath: target)
                try? FileManager.default.copyItem(atPath: fleet.dir.path, toPath: target)
                print("kept the files of seed \(seed) in \(target)")
            }
        }
    }
}

/// One seeded schedule.
final class ModelRun {
    let seed: UInt64
    let backend: FleetBackend
    unowned let test: XCTestCase
    var rng: SplitMix64
    var fleet: Fleet?
    var model = StoreModel()
    var log: [String] = []
    var failed = false
    var failure = ""
    var steps = 0
    var barriers = 0

    let stores = ModelConvergenceTests.stores
    var mode: [String: String] = [:]
    /// A kill (or a timed-out run) left the store's unconfirmed writes maybe half in the cloud.
    var dirty: Set<String> = []
    /// The store wrote a contested row that no clean sync confirmed yet.
    var collided: Set<String> = []
    /// Restored, and not synced since: it may only insert new rows (it does not hold its later rows yet).
    var restored: Set<String> = []
    /// "table.column" added on each store.
    var addedOn: [String: Set<String>] = [:]
    /// Schema changes begun, and the stores that still have to make them.
    var pendingChange: [String: Set<String>] = [:]
    var backups: [String: Set<String>] = [:]  // store -> its added columns when the backup was taken
    var counter = 0
    var failpoints: [String] = []
    /// Features left out of the schedule, to narrow a failure down (`STORECTL_MODEL_WITHOUT=restore,kill`):
    /// restore, schema, collide, kill, mode, odd-text, real, desc, reinsert (of a note under its rowid), encryption
    /// (of the notes' title and body).
    let without: Set<String> = Set((ProcessInfo.processInfo.environment["STORECTL_MODEL_WITHOUT"] ?? "")
        .split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) })
    /// The read-only participant `r` (`STORECTL_MODEL_WITHOUT=reader` leaves it out; a seed's other steps are the
    /// same with it or without it: it draws from a random stream of its own).
    var reader: ReaderState

    /// Whether the notes' `title` and `body` are encrypted on the device (`STORECTL_MODEL_WITHOUT=encryption`: not).
    var encrypted: Bool { !without.contains("encryption") }
    /// The table whose columns are encrypted, and those columns: plain text, not a key, not UNIQUE, not a foreign
    /// key, not in a `unique:` rule.
    static let sealedTable = "notes"
    static let sealedColumns = ["body", "title"]
    /// The variable every store's `cloud.encryption_key` names, and its value: one passphrase for the account's
    /// devices (the read-only participant `r` and `late` too).
    static let keyVariable = "MODEL_KEY"
    static let passphrase = "model passphrase, shared by every device 7"

    /// What every storectl of the run gets in its environment: the passphrase, and cheap new keys (scrypt N = 2^10).
    var childEnvironment: [String: String] {
        encrypted ? [Self.keyVariable: Self.passphrase, "STORECTL_SCRYPT_LOG_N": "10"] : [:]
    }

    init(seed: UInt64, backend: FleetBackend, test: XCTestCase) {
        self.seed = seed
        self.backend = backend
        self.test = test
        rng = SplitMix64(seed: seed &* 0x9E37_79B9 &+ 7)
        reader = ReaderState(seed: seed, backend: backend)
    }

    var failureCount: Int { test.testRun?.totalFailureCount ?? 0 }

    func fail(_ what: String) {
        if !failed { failure = what }
        failed = true
        XCTFail("model seed \(seed) (\(backend)): \(what)")
    }

    func note(_ s: String) { log.append(s) }

    func fresh(_ prefix: String) -> String {
        counter += 1
        return "\(prefix)\(counter)"
    }

    // MARK: Running storectl

    /// Runs storectl; nil means "stop the seed" (an unexpected exit was recorded).
    @discardableResult
    func storectl(_ store: String, _ args: [String], env: [String: String] = [:], allowed: Set<Int32> = [0])
        throws -> Int32?
    {
        guard let f = fleet else { return nil }
        let r = try Binary.storectl(["--store", store] + args, in: f.dir.path,
                                    environment: childEnvironment.merging(env) { $1 })
        note("    -> exit \(r.status)")
        if !allowed.contains(r.status) {
            fail("storectl \(args.joined(separator: " ")) on \(store) (\(env.map { "\($0.key)=\($0.value)" }.sorted()))"
                 + " exited \(r.status)\n\(r.stderr.suffix(1500))")
            return nil
        }
        return r.status
    }

    // MARK: App writes, in-process (bound values, so that every byte and every bit of a double is exact)

    func write(_ store: String, _ statements: [(String, [Value])]) throws {
        guard let f = fleet else { return }
        let db = try Connection(path: f.path(store), mode: .readWrite, busyTimeout: 10_000, wal: true,
                                foreignKeys: true)
        try db.transaction(.immediate) {
            for (sql, args) in statements { try db.run(sql, args) }
        }
    }

    func owned(_ store: String, _ table: String) -> [String] {
        model.owner.filter { $0.value == store && $0.key.hasPrefix(table + "|") && model.rows[$0.key] != nil }
            .map(\.key).sorted()
    }

    func pick<T>(_ list: [T]) -> T? { list.isEmpty ? nil : list[rng.below(list.count)] }

    /// Random text: mostly plain, sometimes with a NUL, invalid UTF-8, quotes or unicode.
    func text() -> MV {
        let word = ["alpha", "beta", "gamma", "delta", "o'brien", "\"q\"", "é😀", "a|b"][rng.below(8)]
        if without.contains("odd-text") { return .str(word + String(rng.below(1000))) }
        switch rng.below(12) {
        case 0: return .text(Array(word.utf8) + [0] + Array("tail".utf8))
        case 1: return .text(Array(word.utf8) + [0xFF, 0x62])
        case 2: return .text([0xC0, 0xAF])
        default: return .str(word + String(rng.below(1000)))
        }
    }

    /// A random double with all 17 significant digits in play, sometimes a special one.
    func real() -> Double {
        if without.contains("real") { return Double(rng.below(100_000)) / 8 }
        switch rng.below(10) {
        case 0: return [0.30000000000000004, 123456789.12345679, 1e-310, 1.7976931348623157e308, 3.0, -2.5,
                        6.02214076e23, 9007199254740993.0][rng.below(8)]
        default:
            let mantissa = Double(rng.next() >> 11) * 0x1p-53
            return (rng.chance(20) ? -1 : 1) * mantissa * pow(10, Double(rng.below(12)) - 4)
        }
    }

    /// One random write by `store` on rows it owns, or a new row. With `focus` (the rows of a batch that was in
    /// flight when storectl was killed), most writes update, delete or re-insert one of those rows.
    func randomWrite(_ store: String, focus: [String] = []) throws {
        let tables = ["notes", "notes", "events", "ranks", "settings", "readings", "links", "words", "folders",
                      "slots", "slots", "slots"]
        var table = tables[rng.below(tables.count)]
        if table == "slots" && without.contains("slots") { return }
        let restrictedToInserts = restored.contains(store)
        let inFlight = focus.filter { model.owner[$0] == store && model.rows[$0] != nil && !$0.hasPrefix("links|") }
        var mine = restrictedToInserts ? [] : owned(store, table)
        var focused = false
        if !restrictedToInserts, rng.chance(75), let target = pick(inFlight) {
            table = StoreModel.table(target)
            mine = [target]
            focused = true
        }
        if table == "ranks" && without.contains("desc") { return }
        let hasColumn = { (c: String) in self.addedOn[store, default: []].contains(c) }
        let insert = mine.isEmpty || (!focused && rng.chance(35))
        switch table {
        case "notes":
            if insert {
                let uuid = fresh("\(store)-n")
                var row = model.defaults("notes")
                row["uuid"] = .str(uuid)
                row["title"] = text()
                row["body"] = .str("")
                var cols = ["uuid", "title"]
                if hasColumn("notes.color") && rng.chance(50) {
                    row["color"] = text()
                    cols.append("color")
                }
                try insertRow(store, "notes", cols, row, textColumns: ["uuid", "title", "color"])
                model.set("notes|\(uuid)", row, by: store)
                model.owner["notes|\(uuid)"] = store
                return
            }
            guard let id = pick(mine), var row = model.rows[id], case .text(let u) = row["uuid"] else { return }
            let uuid = String(decoding: u, as: UTF8.self)
            var choice = rng.below(5)
            if choice >= 3 && without.contains("reinsert") { choice = 0 }
            switch choice {
            case 0, 1:
                let column = hasColumn("notes.color") && rng.chance(30) ? "color" : (rng.chance(50) ? "title" : "body")
                let v = text()
                note("  \(store): UPDATE notes SET \(column) = \(v) WHERE uuid = '\(uuid)'")
                try write(store, [("UPDATE notes SET \(column) = CAST(?1 AS TEXT) WHERE uuid = ?2", [v.bound, .text(uuid)])])
                row[column] = v
                model.set(id, row, by: store)
            case 2:
                note("  \(store): DELETE FROM notes WHERE uuid = '\(uuid)'")
                try write(store, [("DELETE FROM notes WHERE uuid = ?1", [.text(uuid)])])
                model.set(id, nil, by: store)
            default:
                // Deleted and inserted again under the same rowid: a new row at the old key.
                var fresh = model.defaults("notes")
                fresh["uuid"] = .str(uuid)
                fresh["title"] = text()
                fresh["body"] = .str("")
                note("  \(store): re-insert note '\(uuid)' under its rowid, title \(fresh["title"] ?? .null)")
                try write(store, [
                    ("CREATE TEMP TABLE IF NOT EXISTS old_id(id INTEGER)", []), ("DELETE FROM old_id", []),
                    ("INSERT INTO old_id SELECT id FROM notes WHERE uuid = ?1", [.text(uuid)]),
                    ("DELETE FROM notes WHERE uuid = ?1", [.text(uuid)]),
                    ("INSERT INTO notes(id, uuid, title) VALUES ((SELECT id FROM old_id), ?1, CAST(?2 AS TEXT))",
                     [.text(uuid), fresh["title"]?.bound ?? .null]),
                ])
                model.set(id, nil, by: store)
                model.set(id, fresh, by: store)
            }
        case "events":
            if insert {
                let n = Int64(rng.below(1_000_000))
                let key = "events|\(store)|\(n)"
                guard model.rows[key] == nil else { return }
                let row: StoreModel.Row = ["origin": .str(store), "n": .int(n), "payload": rng.chance(20) ? .null : text()]
                try insertRow(store, "events", ["origin", "n", "payload"], row, textColumns: ["origin", "payload"])
                model.set(key, row, by: store)
                model.owner[key] = store
                return
            }
            guard let id = pick(mine), var row = model.rows[id], case .int(let n) = row["n"] else { return }
            if rng.chance(60) {
                let v = text()
                note("  \(store): UPDATE events SET payload = \(v) WHERE origin = '\(store)' AND n = \(n)")
                try write(store, [("UPDATE events SET payload = CAST(?1 AS TEXT) WHERE origin = ?2 AND n = ?3",
                                   [v.bound, .text(store), .integer(n)])])
                row["payload"] = v
                model.set(id, row, by: store)
            } else {
                note("  \(store): DELETE FROM events WHERE origin = '\(store)' AND n = \(n)")
                try write(store, [("DELETE FROM events WHERE origin = ?1 AND n = ?2", [.text(store), .integer(n)])])
                model.set(id, nil, by: store)
            }
        case "ranks":
            let base = Int64((stores.firstIndex(of: store) ?? 0) * 100_000)
            let keyID = insert ? base + Int64(rng.below(100_000)) : nil
            try naturalWrite(store, table: "ranks", mine: mine, newKey: keyID.map { ["id": .int($0)] },
                             values: { ["label": self.text()] }, keyColumns: ["id"], textColumns: ["label"])
        case "settings":
            let key = insert ? fresh("\(store)-k") : nil
            try naturalWrite(store, table: "settings", mine: mine, newKey: key.map { ["key": .str($0)] },
                             values: {
                                 var v: StoreModel.Row = ["value": self.rng.chance(15) ? .null : self.text()]
                                 if hasColumn("settings.prio") && self.rng.chance(50) {
                                     v["prio"] = .int(Int64(self.rng.below(10)))
                                 }
                                 return v
                             }, keyColumns: ["key"], textColumns: ["key", "value"])
        case "readings":
            let at = insert ? real() : nil
            try naturalWrite(store, table: "readings", mine: mine, newKey: at.map { ["at": .real($0)] },
                             values: { ["value": self.rng.chance(10) ? .null : .real(self.real()), "note": self.text()] },
                             keyColumns: ["at"], textColumns: ["note"])
        case "words":
            let w = insert ? fresh("\(store)-w") : nil
            try naturalWrite(store, table: "words", mine: mine,
                             newKey: w.map { ["w": .str($0), "lang": .str(["en", "fr", "de"][self.rng.below(3)])] },
                             values: { ["n": .int(Int64(self.rng.below(100)))] }, keyColumns: ["w", "lang"],
                             textColumns: ["w", "lang"])
        case "folders":
            // A tree (and cycles) of this store's own folders: a parent may get a higher rowid than its child, so
            // an export in key order can save a child before its parent.
            if restrictedToInserts && !insert { return }
            // A restored file lacks the folders it made after the backup until it syncs: a parent comes from
            // what it holds.
            let mineAll = restrictedToInserts ? [] : owned(store, "folders")
            let parentName: String? = rng.chance(25) ? nil : pick(mineAll).map { String($0.dropFirst(8)) }
            if insert {
                let name = fresh("\(store)-f")
                let row: StoreModel.Row = ["name": .str(name), "parent": parentName.map { MV.str($0) } ?? .null]
                note("  \(store): INSERT folder '\(name)' under \(parentName ?? "nothing")")
                try write(store, [("INSERT INTO folders(name, parent) VALUES (?1, (SELECT id FROM folders WHERE name = ?2))",
                                   [.text(name), parentName.map { Value.text($0) } ?? .null])])
                model.set("folders|\(name)", row, by: store)
                model.owner["folders|\(name)"] = store
                return
            }
            guard let id = pick(mine), var row = model.rows[id] else { return }
            let name = String(id.dropFirst(8))
            if rng.chance(70) {
                note("  \(store): move folder '\(name)' under \(parentName ?? "nothing")")
                try write(store, [("UPDATE folders SET parent = (SELECT id FROM folders WHERE name = ?2) WHERE name = ?1",
                                   [.text(name), parentName.map { Value.text($0) } ?? .null])])
                row["parent"] = parentName.map { MV.str($0) } ?? .null
                model.set(id, row, by: store)
            } else {
                note("  \(store): DELETE folder '\(name)' (and what is under it)")
                try write(store, [("DELETE FROM folders WHERE name = ?1", [.text(name)])])
                model.set(id, nil, by: store)
            }
        case "slots":
            try slotWrite(store, mine: mine, insert: insert)
        default:
            // links, on a note this store owns.
            if restrictedToInserts { return }
            let notes = owned(store, "notes")
            guard let noteID = pick(notes), case .text(let u)? = model.rows[noteID]?["uuid"] else { return }
            let uuid = String(decoding: u, as: UTF8.self)
            let label = "l\(rng.below(4))"
            let key = "links|\(uuid)|\(label)"
            if model.rows[key] == nil {
                note("  \(store): link '\(uuid)' to '\(label)'")
                try write(store, [("INSERT INTO links(note_id, label) SELECT id, ?2 FROM notes WHERE uuid = ?1",
                                   [.text(uuid), .text(label)])])
                model.set(key, ["note": .str(uuid), "label": .str(label)], by: store)
                model.owner[key] = store
            } else {
                note("  \(store): unlink '\(uuid)' from '\(label)'")
                try write(store, [("DELETE FROM links WHERE label = ?2 AND note_id = (SELECT id FROM notes WHERE uuid = ?1)",
                                   [.text(uuid), .text(label)])])
                model.set(key, nil, by: store)
            }
        }
    }

    /// The positions of a folder's slots, `UNIQUE(folder, pos)` with `folder` a reference: a slot is added at the
    /// end, two slots swap places through a temporary position, a slot moves to another folder, or goes.
    func slotWrite(_ store: String, mine: [String], insert: Bool) throws {
        if restored.contains(store) { return }
        let folders = owned(store, "folders").map { String($0.dropFirst(8)) }
        let slots = owned(store, "slots")
        func folder(_ id: String) -> String? {
            if case .text(let b)? = model.rows[id]?["folder"] { return String(decoding: b, as: UTF8.self) }
            return nil
        }
        func pos(_ id: String) -> Int64? {
            if case .int(let p)? = model.rows[id]?["pos"] { return p }
            return nil
        }
        func end(_ name: String) -> Int64 {
            (slots.filter { folder($0) == name }.compactMap(pos).max() ?? 0) + 1
        }
        if insert || mine.isEmpty || slots.count < 2 {
            guard let name = pick(folders) else {
                // A folder of this store's own first, at the root.
                let name = fresh("\(store)-f")
                note("  \(store): INSERT folder '\(name)' for slots")
                try write(store, [("INSERT INTO folders(name) VALUES (?1)", [.text(name)])])
                model.set("folders|\(name)", ["name": .str(name), "parent": .null], by: store)
                model.owner["folders|\(name)"] = store
                return
            }
            let label = fresh("\(store)-s")
            let at = end(name)
            note("  \(store): slot '\(label)' at \(at) of folder '\(name)'")
            try write(store, [("INSERT INTO slots(folder, pos, label) SELECT id, ?2, ?3 FROM folders WHERE name = ?1",
                               [.text(name), .integer(at), .text(label)])])
            model.set("slots|\(label)", ["folder": .str(name), "pos": .int(at), "label": .str(label)], by: store)
            model.owner["slots|\(label)"] = store
            return
        }
        guard let id = pick(mine), var row = model.rows[id], let name = folder(id), let at = pos(id) else { return }
        let label = String(id.dropFirst(6))
        switch rng.below(6) {
        case 0, 1, 2, 3:
            guard let other = pick(slots.filter { $0 != id && folder($0) == name }), var otherRow = model.rows[other],
                  let otherAt = pos(other) else { return }
            let otherLabel = String(other.dropFirst(6))
            note("  \(store): swap slots '\(label)' (\(at)) and '\(otherLabel)' (\(otherAt)) of folder '\(name)'")
            try write(store, [("UPDATE slots SET pos = -1 WHERE label = ?1", [.text(label)]),
                              ("UPDATE slots SET pos = ?2 WHERE label = ?1", [.text(otherLabel), .integer(at)]),
                              ("UPDATE slots SET pos = ?2 WHERE label = ?1", [.text(label), .integer(otherAt)])])
            row["pos"] = .int(otherAt)
            otherRow["pos"] = .int(at)
            model.set(id, row, by: store)
            model.set(other, otherRow, by: store)
        case 4:
            guard let target = pick(folders.filter { $0 != name }) else { return }
            let to = end(target)
            note("  \(store): move slot '\(label)' to \(to) of folder '\(target)'")
            try write(store, [("UPDATE slots SET folder = (SELECT id FROM folders WHERE name = ?2), pos = ?3 WHERE label = ?1",
                               [.text(label), .text(target), .integer(to)])])
            row["folder"] = .str(target)
            row["pos"] = .int(to)
            model.set(id, row, by: store)
        default:
            note("  \(store): DELETE slot '\(label)'")
            try write(store, [("DELETE FROM slots WHERE label = ?1", [.text(label)])])
            model.set(id, nil, by: store)
        }
    }

    func insertRow(_ store: String, _ table: String, _ columns: [String], _ row: StoreModel.Row,
                   textColumns: Set<String>, conflict: String = "") throws
    {
        let params = columns.enumerated().map { i, c in textColumns.contains(c) ? "CAST(?\(i + 1) AS TEXT)" : "?\(i + 1)" }
        let sql = "INSERT INTO \(table)(\(columns.joined(separator: ", "))) VALUES (\(params.joined(separator: ", ")))"
            + conflict
        note("  \(store): \(sql) <- \(columns.map { (row[$0] ?? .null).cell })")
        try write(store, [(sql, columns.map { (row[$0] ?? .null).bound })])
    }

    /// Insert, update, delete or re-insert on a natural-keyed table.
    func naturalWrite(_ store: String, table: String, mine: [String], newKey: StoreModel.Row?,
                      values: () -> StoreModel.Row, keyColumns: [String], textColumns: Set<String>) throws
    {
        let keyIdentity = { (row: StoreModel.Row) in
            "\(table)|" + keyColumns.map { (row[$0] ?? .null).cell }.joined(separator: "|")
        }
        if let newKey {
            var row = model.defaults(table).merging(newKey) { $1 }
            row.merge(values()) { $1 }
            let id = keyIdentity(row)
            guard model.rows[id] == nil, model.contested[id] == nil else { return }
            let columns = row.keys.filter { addedOrBase(store, table, $0) }.sorted()
            try insertRow(store, table, columns, row, textColumns: textColumns)
            model.set(id, row, by: store)
            model.owner[id] = store
            return
        }
        guard let id = pick(mine), let old = model.rows[id] else { return }
        let keyWhere = keyColumns.enumerated().map { i, c in
            "\(c) = " + (textColumns.contains(c) ? "CAST(?\(i + 1) AS TEXT)" : "?\(i + 1)")
        }.joined(separator: " AND ")
        let keyArgs = keyColumns.map { (old[$0] ?? .null).bound }
        switch rng.below(4) {
        case 0, 1:
            let change = values()
            var row = old
            row.merge(change) { $1 }
            let cols = change.keys.sorted()
            let sets = cols.enumerated().map { i, c in
                "\(c) = " + (textColumns.contains(c) ? "CAST(?\(keyColumns.count + i + 1) AS TEXT)" : "?\(keyColumns.count + i + 1)")
            }.joined(separator: ", ")
            note("  \(store): UPDATE \(table) SET \(cols) = \(cols.map { (change[$0] ?? .null).cell }) WHERE \(id)")
            try write(store, [("UPDATE \(table) SET \(sets) WHERE \(keyWhere)", keyArgs + cols.map { (change[$0] ?? .null).bound })])
            model.set(id, row, by: store)
        case 2:
            note("  \(store): DELETE FROM \(table) WHERE \(id)")
            try write(store, [("DELETE FROM \(table) WHERE \(keyWhere)", keyArgs)])
            model.set(id, nil, by: store)
        default:
            var row = model.defaults(table)
            for k in keyColumns { row[k] = old[k] }
            row.merge(values()) { $1 }
            let columns = row.keys.filter { addedOrBase(store, table, $0) }.sorted()
            let params = columns.enumerated().map { i, c in
                textColumns.contains(c) ? "CAST(?\(i + 1) AS TEXT)" : "?\(i + 1)"
            }
            note("  \(store): re-insert \(id) <- \(columns.map { (row[$0] ?? .null).cell })")
            try write(store, [("DELETE FROM \(table) WHERE \(keyWhere)", keyArgs),
                              ("INSERT INTO \(table)(\(columns.joined(separator: ", "))) VALUES (\(params.joined(separator: ", ")))",
                               columns.map { (row[$0] ?? .null).bound })])
            model.set(id, nil, by: store)
            model.set(id, row, by: store)
        }
    }

    func addedOrBase(_ store: String, _ table: String, _ column: String) -> Bool {
        (StoreModel.baseColumns[table] ?? []).contains(column) || addedOn[store, default: []].contains("\(table).\(column)")
    }

    // MARK: Collisions

    /// Two or three stores insert the same key (or the same UNIQUE value) at once, each with values of its own.
    func collide() throws {
        let n = 2 + rng.below(2)
        var who = stores
        who.shuffle(using: &rng)
        who = Array(who.prefix(n))
        var kind = without.contains("desc") && without.contains("real") ? [0, 1, 4][rng.below(3)] : rng.below(5)
        if policy == "error" { kind = 0 }
        let shared = fresh("shared-")
        var candidates: [String: StoreModel.Row] = [:]
        var identity = ""
        note("  collision on \(["notes.uuid (UNIQUE)", "settings.key", "ranks.id", "readings.at", "words"][kind]) "
             + "'\(shared)' by \(who)")
        for s in who {
            switch kind {
            case 0:
                var row = model.defaults("notes")
                row["uuid"] = .str(shared)
                row["title"] = .str("by \(s)")
                row["body"] = .str("")
                identity = "notes|\(shared)"
                try insertRow(s, "notes", ["uuid", "title"], row, textColumns: ["uuid", "title"])
                // Each store links its own copy: after dedup, every link is on the winner.
                try write(s, [("INSERT INTO links(note_id, label) SELECT id, ?2 FROM notes WHERE uuid = ?1",
                               [.text(shared), .text("L-\(s)")])])
                model.rows["links|\(shared)|L-\(s)"] = ["note": .str(shared), "label": .str("L-\(s)")]
                candidates[s] = row
            case 1:
                var row = model.defaults("settings")
                row["key"] = .str(shared)
                row["value"] = .str("by \(s)")
                identity = "settings|" + (row["key"] ?? .null).cell
                try insertRow(s, "settings", ["key", "value"], row, textColumns: ["key", "value"])
                candidates[s] = row
            case 2:
                let id = Int64(900_000 + counter)
                let row: StoreModel.Row = ["id": .int(id), "label": .str("by \(s)")]
                identity = "ranks|" + MV.int(id).cell
                try insertRow(s, "ranks", ["id", "label"], row, textColumns: ["label"])
                candidates[s] = row
            case 3:
                let at = 0.1 + Double(counter) * 1e-15
                let row: StoreModel.Row = ["at": .real(at), "value": .real(1.0 / 3.0), "note": .str("by \(s)")]
                identity = "readings|" + MV.real(at).cell
                try insertRow(s, "readings", ["at", "note", "value"], row, textColumns: ["note"])
                candidates[s] = row
            default:
                let row: StoreModel.Row = ["w": .str(shared), "lang": .str("en"), "n": .int(Int64(who.firstIndex(of: s) ?? 0))]
                identity = "words|" + [MV.str(shared).cell, MV.str("en").cell].joined(separator: "|")
                try insertRow(s, "words", ["lang", "n", "w"], row, textColumns: ["w", "lang"])
                candidates[s] = row
            }
            collided.insert(s)
        }
        model.contested[identity] = candidates
    }

    // MARK: Steps

    /// The seed's merge policy: the owner of a row is its only writer, so every policy must give the model's
    /// rows; under `error`, collisions stay on the UNIQUE column (a shared natural key is a conflict by design).
    var policy: String {
        ["property-local-wins", "server-wins", "property-server-wins", "local-wins", "error"][Int(seed % 5)]
    }

    /// On PostgreSQL with the hot standby CI starts (`STORECTL_TEST_PG_REPLICA_URL`), every other store reads the
    /// change feed from it (`cloud.replica_url`): a standby's lag must cost nothing the model can see.
    var standbyReaders: [String: String] {
        guard case .postgres = backend,
              let url = ProcessInfo.processInfo.environment["STORECTL_TEST_PG_REPLICA_URL"], !url.isEmpty
        else { return [:] }
        var readers: [String: String] = [:]
        for (i, s) in stores.enumerated() where i % 2 == 1 { readers[s] = "      replica_url: '\(url)'" }
        return readers
    }

    func go() throws {
        let notesRules = (seed % 2 == 0 ? "\n        unique: [uuid]" : "")
            + (seed % 4 == 0 ? "\n        keep: newest(title)" : "")
            + (encrypted ? "\n        encrypted: [\(Self.sealedColumns.joined(separator: ", "))]" : "")
        let f = try Fleet(stores: stores + (readerOn ? [ReaderState.store] : []), backend: backend,
                          schema: ModelConvergenceTests.schema,
                          storeYAML: seed % 2 == 0 || encrypted ? """
                                  entities:
                                    notes:\(notesRules)
                                    events: {}
                                    ranks: {}
                                    settings: {}
                                    readings: {}
                                    links: {}
                                    words: {}
                                    folders: {}
                                    slots: {}
                              """ : "",
                          cloudExtra: "      merge_policy: \(policy)"
                              + (encrypted ? "\n      encryption_key: ${\(Self.keyVariable)}" : ""),
                          cloudExtraByStore: standbyReaders,
                          label: "storectl-model",
                          accountByStore: readerOn ? [ReaderState.store: (reader.account, reader.secret)] : [:])
        fleet = f
        note("seed \(seed), backend \(backend), merge_policy \(policy), unique: declared \(seed % 2 == 0)"
             + (standbyReaders.isEmpty ? "" : ", reading from the standby: \(standbyReaders.keys.sorted())")
             + (encrypted ? ", \(Self.sealedTable) \(Self.sealedColumns) encrypted" : "")
             + (without.isEmpty ? "" : ", without \(without.sorted())")
             + (readerOn ? ", read-only participant \(ReaderState.store) (account \(reader.account))" : ""))
        let listed = try Binary.storectl(["--json", "debug", "failpoints"], in: f.dir.path,
                                         environment: childEnvironment)
        failpoints = (JSONDoc.get(JSONDoc.parse(listed.stdout), "failpoints") as? [[String: Any]] ?? [])
            .compactMap { $0["name"] as? String }.filter { $0.hasPrefix("export.") || $0.hasPrefix("import.") }
        for s in stores {
            if rng.chance(75) {
                note("\(s): mode cloud")
                guard try storectl(s, ["mode", "cloud"]) != nil else { return }
                mode[s] = "cloud"
            } else {
                note("\(s): init, stays local for now")
                guard try storectl(s, ["init"]) != nil else { return }
                mode[s] = "local"
            }
        }
        let total = 26 + rng.below(16)
        defer { readerDropRole() }
        try readerPlan(total: total)
        let barrierAt = rng.chance(60) ? 8 + rng.below(total - 10) : -1
        // Every seed has at least one backup and its restore, one kill, one collision, and most one schema change.
        let restoreStore = stores[rng.below(stores.count)]
        let backupAt = 2 + rng.below(total / 2)
        let restoreAt = backupAt + 3 + rng.below(max(total - backupAt - 4, 1))
        let killAt = rng.below(total)
        let collideAt = rng.below(total)
        let schemaAt = rng.chance(70) ? rng.below(total) : -1
        for step in 0..<total where !failed {
            steps += 1
            try readerStep(step)
            if failed { break }
            var s = stores[rng.below(stores.count)]
            var roll = rng.below(100)
            let before = failureCount
            switch step {
            case backupAt, restoreAt: s = restoreStore
            default: break
            }
            if step == killAt { roll = 65 }
            if step == collideAt { roll = 72 }
            if step == schemaAt { roll = 95 }
            if step == backupAt && !without.contains("restore") {
                if mode[s] != "cloud" {
                    note("\(step) \(s): mode cloud, for the backup")
                    guard try storectl(s, ["mode", "cloud"]) != nil else { return }
                    mode[s] = "cloud"
                    cleanSync(s)
                }
                try backupStep(step, s)
                continue
            }
            if step == restoreAt && !without.contains("restore") && backups[s] != nil {
                try forcedRestore(step, s)
                if failureCount > before && !failed { fail("step \(step) recorded a failure") }
                continue
            }
            let feature = roll < 60 ? "" : roll < 72 ? "kill" : roll < 76 ? "collide" : roll < 81 ? "mode"
                : roll < 91 ? "restore" : "schema"
            if without.contains(feature) {
                note("\(step): (\(feature) left out)")
            } else if step == barrierAt {
                try barrier(final: false)
            } else if roll < 38 {
                note("\(step) \(s): writes")
                for _ in 0..<(1 + rng.below(3)) { try randomWrite(s) }
            } else if roll < 60 {
                try syncStep(step, s)
            } else if roll < 72 {
                try killStep(step, s)
            } else if roll < 76 {
                note("\(step):")
                try collide()
            } else if roll < 81 {
                try modeStep(step, s)
            } else if roll < 86 {
                try backupStep(step, s)
            } else if roll < 91 {
                try restoreStep(step, s)
            } else {
                try schemaStep(step, s)
            }
            if failureCount > before && !failed { fail("step \(step) recorded a failure") }
        }
        if !failed { try barrier(final: true) }
    }

    func syncStep(_ step: Int, _ s: String) throws {
        guard mode[s] == "cloud" else { return }
        note("\(step) \(s): sync")
        guard try storectl(s, ["sync"]) != nil else { return }
        cleanSync(s)
    }

    func cleanSync(_ s: String) {
        readerNoteSent(s)
        model.confirm(s)
        dirty.remove(s)
        collided.remove(s)
        restored.remove(s)
    }

    func killStep(_ step: Int, _ s: String) throws {
        let args = mode[s] == "cloud" ? ["sync"] : ["mode", "cloud"]
        // A burst of writes first, so that the export runs several batches and the kill lands inside one.
        note("\(step) \(s): writes, then a kill")
        for _ in 0..<(3 + rng.below(6)) { try randomWrite(s) }
        let batch = ["2", "2", "3", "50"][rng.below(4)]
        let status: Int32
        let exportHeavy = ["export.after-save", "export.after-save", "export.after-batch-commit", "export.before-commit"]
        if rng.chance(85), let point = rng.chance(60) ? pick(exportHeavy) : pick(failpoints) {
            let armed = point + ":\(1 + rng.below(3))"
            note("\(step) \(s): \(args.joined(separator: " ")) with STORECTL_FAILPOINT=\(armed), batch \(batch)")
            guard let st = try storectl(s, args, env: ["STORECTL_FAILPOINT": armed, "STORECTL_BATCH_SIZE": batch],
                                        allowed: [0, 137]) else { return }
            status = st
        } else {
            guard let f = fleet else { return }
            let delay = UInt32(1_000 + rng.below(60_000))
            note("\(step) \(s): \(args.joined(separator: " ")) killed after \(delay) us, batch \(batch)")
            status = try Killer.run(["--store", s] + args, in: f.dir.path, afterMicroseconds: delay,
                                    environment: childEnvironment.merging(["STORECTL_BATCH_SIZE": batch]) { $1 })
            note("    -> exit \(status)")
            if status != 0 && status != 137 {
                fail("a killed storectl exited \(status)")
                return
            }
        }
        if status == 0 {
            if args[0] == "mode" { mode[s] = "cloud" }
            cleanSync(s)
        } else {
            dirty.insert(s)
            if args[0] == "mode" { mode[s] = "pending-cloud" }
        }
        note("  then writes on \(s), on the rows of the batch in flight:")
        let inFlight = Array((model.undo[s] ?? [:]).keys).sorted()
        for _ in 0..<(1 + rng.below(4)) { try randomWrite(s, focus: inFlight) }
    }

    func modeStep(_ step: Int, _ s: String) throws {
        if mode[s] == "cloud" {
            let noFinal = rng.chance(30)
            note("\(step) \(s): mode local\(noFinal ? " --no-final-sync" : "")")
            guard try storectl(s, ["mode", "local"] + (noFinal ? ["--no-final-sync"] : [])) != nil else { return }
            mode[s] = "local"
            if !noFinal {
                // The final sync of `mode local` only exports: a restored file still lacks what it made or took in
                // after its backup until it imports (in cloud mode again).
                let wasRestored = restored.contains(s)
                cleanSync(s)
                if wasRestored { restored.insert(s) }
            }
        } else {
            note("\(step) \(s): mode cloud")
            guard try storectl(s, ["mode", "cloud"]) != nil else { return }
            mode[s] = "cloud"
            cleanSync(s)
        }
    }

    func backupStep(_ step: Int, _ s: String) throws {
        guard mode[s] == "cloud", let f = fleet else { return }
        note("\(step) \(s): sync, then back up the store file")
        guard try storectl(s, ["sync"]) != nil else { return }
        cleanSync(s)
        try f.backup(s, as: s)
        backups[s] = addedOn[s, default: []]
    }

    func restoreStep(_ step: Int, _ s: String) throws {
        guard mode[s] == "cloud", let f = fleet, let columns = backups[s], columns == addedOn[s, default: []],
              !dirty.contains(s), !collided.contains(s) else { return }
        note("\(step) \(s): restore the backup over the store file (dropping \(model.undo[s]?.count ?? 0) "
             + "unsynced row changes from the model)")
        try f.restore(s, from: s)
        model.dropUnconfirmed(s)
        restored.insert(s)
    }

    /// The restore every seed makes: the store is made eligible (cloud mode, synced), writes a little that
    /// never reaches the cloud, and gets its backup copied back.
    func forcedRestore(_ step: Int, _ s: String) throws {
        if mode[s] != "cloud" {
            note("\(step) \(s): mode cloud, before the restore")
            guard try storectl(s, ["mode", "cloud"]) != nil else { return }
            mode[s] = "cloud"
            cleanSync(s)
        }
        if dirty.contains(s) || collided.contains(s) {
            note("\(step) \(s): sync, before the restore")
            guard try storectl(s, ["sync"]) != nil else { return }
            cleanSync(s)
        }
        note("\(step) \(s): writes that will never reach the cloud")
        for _ in 0..<(1 + rng.below(2)) { try randomWrite(s) }
        try restoreStep(step, s)
    }

    func schemaStep(_ step: Int, _ s: String) throws {
        // Begin a schema change on this store, or make one another store began.
        let mine = pendingChange.filter { $0.value.contains(s) }.map(\.key).sorted()
        let change: (table: String, column: String, type: String, defaultValue: MV)
        if let key = pick(mine), let c = ModelConvergenceTests.schemaChanges.first(where: { "\($0.table).\($0.column)" == key }) {
            change = c
        } else if let c = pick(ModelConvergenceTests.schemaChanges.filter { pendingChange["\($0.table).\($0.column)"] == nil
            && !addedOn[s, default: []].contains("\($0.table).\($0.column)") })
        {
            change = c
            pendingChange["\(c.table).\(c.column)"] = Set(stores)
            model.added[c.table, default: []].append((c.column, c.defaultValue))
            for (id, var row) in model.rows where StoreModel.table(id) == c.table {
                row[c.column] = c.defaultValue
                model.rows[id] = row
            }
            for (id, var candidates) in model.contested where StoreModel.table(id) == c.table {
                for k in candidates.keys { candidates[k]?[c.column] = c.defaultValue }
                model.contested[id] = candidates
            }
            // A row a restore brings back to its value before the column existed has the default too.
            for (store, snapshots) in model.undo {
                for (id, old) in snapshots where StoreModel.table(id) == c.table {
                    guard var row = old else { continue }
                    row[c.column] = c.defaultValue
                    model.undo[store]?[id] = .some(row)
                }
            }
        } else {
            return
        }
        try addColumn(step, s, change)
    }

    func addColumn(_ step: Int, _ s: String, _ change: (table: String, column: String, type: String, defaultValue: MV))
        throws
    {
        let key = "\(change.table).\(change.column)"
        note("\(step) \(s): ALTER TABLE \(change.table) ADD COLUMN \(change.column) \(change.type)")
        try write(s, [("ALTER TABLE \(change.table) ADD COLUMN \(change.column) \(change.type)", [])])
        addedOn[s, default: []].insert(key)
        pendingChange[key]?.remove(s)
        if pendingChange[key]?.isEmpty == true { pendingChange[key] = [] }
        if rng.chance(50) && !restored.contains(s) {
            // Filled before migrate, under the old triggers.
            for id in owned(s, change.table).prefix(3) {
                guard var row = model.rows[id] else { continue }
                let v: MV = change.column == "color" ? .str("filled early \(rng.below(100))") : .int(Int64(1 + rng.below(9)))
                let keyColumns = change.table == "notes" ? ["uuid"] : ["key"]
                note("  \(s): before migrate: UPDATE \(change.table) SET \(change.column) = \(v) WHERE \(id)")
                try write(s, [("UPDATE \(change.table) SET \(change.column) = \(change.column == "color" ? "CAST(?1 AS TEXT)" : "?1") "
                               + "WHERE \(keyColumns[0]) = CAST(?2 AS TEXT)", [v.bound, (row[keyColumns[0]] ?? .null).bound])])
                row[change.column] = v
                model.set(id, row, by: s)
            }
        }
        if rng.chance(25) {
            note("  \(s): migrate killed at migrate.before-commit")
            guard try storectl(s, ["migrate"], env: ["STORECTL_FAILPOINT": "migrate.before-commit"], allowed: [137])
                != nil else { return }
        }
        note("  \(s): migrate")
        try storectl(s, ["migrate"])
    }

    // MARK: Barriers

    func barrier(final: Bool) throws {
        guard let f = fleet else { return }
        barriers += 1
        note("barrier\(final ? " (final)" : ""): every store to cloud mode, then sync rounds")
        if final {
            // Every store makes every schema change begun.
            for (key, left) in pendingChange.sorted(by: { $0.key < $1.key }) {
                guard let c = ModelConvergenceTests.schemaChanges.first(where: { "\($0.table).\($0.column)" == key })
                else { continue }
                for s in left.sorted() { try addColumn(-1, s, c) }
            }
        }
        for s in stores where mode[s] != "cloud" {
            note("  \(s): mode cloud")
            guard try storectl(s, ["mode", "cloud"]) != nil else { return }
            mode[s] = "cloud"
        }
        for round in 0..<3 {
            var order = stores
            order.shuffle(using: &rng)
            note("  round \(round + 1): \(order.joined(separator: ", "))")
            for s in order { guard try storectl(s, ["sync"]) != nil else { return } }
        }
        for s in stores { cleanSync(s) }
        // The winners of collisions, read from s0, checked to be one of the candidates.
        let s0Rows = Set(try f.rows("s0"))
        for (identity, candidates) in model.contested.sorted(by: { $0.key < $1.key }) {
            let present = candidates.filter { s0Rows.contains(model.line(identity, $0.value, addedOn["s0"] ?? [])) }
            guard let winner = present.first, present.count == 1 else {
                fail("barrier: the collision on \(identity) left \(present.count) of its candidates on s0 "
                     + "(candidates: \(candidates.map { "\($0.key): \(model.line(identity, $0.value, addedOn["s0"] ?? []))" }))")
                return
            }
            note("  \(identity): \(winner.key)'s row won")
            model.rows[identity] = winner.value
            model.owner[identity] = stores[rng.below(stores.count)]
            if identity.hasPrefix("notes|") {
                for key in model.rows.keys where key.hasPrefix("links|\(identity.dropFirst(6))|") {
                    model.owner[key] = model.owner[identity]
                }
            }
        }
        model.contested = [:]
        try compareAll(final ? "the final barrier" : "barrier \(barriers)")
        if failed { return }
        for s in stores {
            try f.assertHealthy(s, "model seed \(seed) (\(backend)), barrier \(barriers)", env: childEnvironment)
        }
        try checkSealed(final ? "the final barrier" : "barrier \(barriers)")
        if failed { return }
        if final {
            // One more round moves nothing; a store that joins from nothing receives exactly the model.
            for s in stores {
                let r = try f.json(s, ["sync"], env: childEnvironment, expect: 0)
                let moved = ["saved", "deleted"].compactMap { JSONDoc.int(r.doc, "exported", $0) }.reduce(0, +)
                    + ["applied", "deleted"].compactMap { JSONDoc.int(r.doc, "imported", $0) }.reduce(0, +)
                if moved != 0 {
                    fail("a round after convergence still moved \(moved) record(s) on \(s):\n\(r.result.stdout)")
                    return
                }
            }
            var schema = ModelConvergenceTests.schema
            for (table, columns) in model.added {
                for (column, _) in columns {
                    guard let c = ModelConvergenceTests.schemaChanges.first(where: { $0.table == table && $0.column == column })
                    else { continue }
                    schema += "\nALTER TABLE \(table) ADD COLUMN \(column) \(c.type);"
                }
            }
            try f.dir.write("schema.sql", schema)
            note("  late: mode cloud from nothing")
            guard try storectl(Fleet.lateStore, ["mode", "cloud"]) != nil else { return }
            addedOn[Fleet.lateStore] = Set(model.added.flatMap { t in t.value.map { "\(t.key).\($0.column)" } })
            try compareAll("the store that joined last", stores: [Fleet.lateStore])
        }
        if !failed { try readerBarrier(final: final) }
    }

    /// The server holds no encrypted value in clear: each encrypted column of each live record of the encrypted
    /// table, in the zone and in the replaced versions the container keeps (`superseded_saves`), is an object with
    /// a `$enc` member (the sealed value; text that is not UTF-8 travels as an object too, `{"$text": hex}`), and
    /// the zone has its key record. Read with `sqlite3` in the container file, with `psql` in its PostgreSQL schema.
    func checkSealed(_ what: String) throws {
        guard encrypted, let f = fleet else { return }
        let (table, columns, q) = (Self.sealedTable, Self.sealedColumns, Fleet.sqlLiteral)
        let names = "(" + columns.map { "SELECT \(q($0)) AS name" }.joined(separator: " UNION ALL ") + ") c"
        let run: (String) throws -> String
        let prefix: String
        let notDeleted: String
        // SQL for the JSON type of field `c.name` of record `r` (or of its member named by the argument), and the
        // type a sealed value's `$enc` member has in the backend's terms.
        let type: (String) -> String
        let sealedType: String
        switch backend {
        case .file:
            (run, prefix, notDeleted) = ({ try f.containerSQL($0) }, "", "r.deleted = 0")
            type = { "json_type(r.fields, '$.' || c.name\($0.isEmpty ? "" : " || '.\"\($0)\"'"))" }
            sealedType = "text"
        case .postgres:
            (run, prefix, notDeleted) = ({ try f.psql($0) }, f.pgSchema + ".", "NOT r.deleted")
            type = { "json_typeof(r.fields::json -> c.name\($0.isEmpty ? "" : " -> '\($0)'"))" }
            sealedType = "string"
        }
        let value = backend.isFile ? "json_extract(r.fields, '$.' || c.name)" : "(r.fields::json -> c.name)::text"
        let inClear = ["records", "superseded_saves"].map { source in
            """
            SELECT '\(source) ' || r.record_name || ' ' || c.name || ': ' || coalesce(\(type("")), 'absent') || ' '
                   || substr(coalesce(\(value), ''), 1, 60)
            FROM \(prefix)\(source) r, \(names)
            WHERE r.record_type = \(q(table)) AND \(notDeleted)
              AND NOT (coalesce(\(type("")), '') = 'object' AND coalesce(\(type("$enc")), '') = '\(sealedType)')
            """
        }.joined(separator: "\nUNION ALL\n")
        let problems = try run(inClear).split(separator: "\n").map(String.init)
        let count = { (sql: String) in Int(try run(sql).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1 }
        let live = try count("SELECT count(*) FROM \(prefix)records r WHERE r.record_type = \(q(table)) "
                             + "AND \(notDeleted)")
        let keys = try count("SELECT count(*) FROM \(prefix)records r WHERE r.record_type = '_storectl_zone_key' "
                             + "AND r.record_name = '_storectl_zone_key' AND \(notDeleted)")
        let modelRows = model.rows.keys.filter { StoreModel.table($0) == table }.count
        note("  the server: \(live) live \(table) record(s) (the model: \(modelRows) rows), \(problems.count) field(s) "
             + "of \(columns) in clear, \(keys) zone key record(s)")
        if !problems.isEmpty {
            fail("\(what): the server holds \(problems.count) value(s) of the encrypted \(table).\(columns) in clear:\n"
                 + problems.prefix(12).joined(separator: "\n"))
        } else if keys != 1 {
            fail("\(what): the zone holds \(keys) live key record(s) (_storectl_zone_key), not 1")
        } else if live < 0 || (modelRows > 0 && live == 0) {
            fail("\(what): the server holds \(live) live \(table) record(s) while the model has \(modelRows) rows: "
                 + "the check of their encrypted fields looked at nothing")
        }
    }

    func compareAll(_ what: String, stores names: [String]? = nil) throws {
        guard let f = fleet else { return }
        for s in names ?? stores {
            let problems = try f.integrity(s)
            if !problems.isEmpty { fail("\(what): integrity of \(s): \(problems)") }
            let diff = RowDiff(expected: model.expected(addedOn[s] ?? []), actual: try f.rows(s))
            Tally.add(diff)
            if !diff.isEmpty { fail("\(what): \(s) differs from the model:\n\(diff)") }
        }
    }
}

/// What the model knows of the read-only participant `r`.
///
/// `r` signs in as `reader`, an account of its own with a read-only share of the zone that the account of s0..s2
/// owns (whichever of them synced first made it). It never sends a change: its own rows (keys no other store uses)
/// and its edits of the others' rows stay on `r`, and must never reach s0..s2, the model or the cloud. Where a record
/// arrives for a row `r` changed, the cloud's value wins. So at a barrier (every store synced, then `r`), `r` holds
/// the model's rows, except each row in `local`, which holds either `r`'s own value or the model's; a row in
/// `local` that a clean sync of another store sent since `r` last synced (`pending`) must hold the model's after
/// `r`'s next sync. After `sync --discard-local`, `r` holds exactly the model.
struct ReaderState {
    static let store = "r"
    static let secretVariable = "STORECTL_MODEL_READER_SECRET"
    /// `r`'s account: `reader` in a container file; on PostgreSQL a role of the run's own (roles are the server's,
    /// not the container's), dropped when the run ends.
    let account: String
    let secret: String
    /// The tables whose rows `r` edits: none is the parent of another, so that no other row's line changes with
    /// them.
    static let editedTables = ["settings", "events", "words", "ranks", "readings"]

    enum Share: String { case none = "not shared yet", active = "shared", removed = "removed" }

    /// `r`'s own random stream: the schedule of s0..s2 draws the same numbers with or without `r`.
    var rng: SplitMix64
    var share = Share.none
    /// Identity -> `r`'s own value of a row it changed here (nil: deleted here), not overwritten by the cloud yet.
    var local: [String: String?] = [:]
    /// `r`'s own rows, present on `r`: identity -> row.
    var own: [String: StoreModel.Row] = [:]
    /// Rows whose records a clean sync of another store sent since `r` last synced.
    var pending: Set<String> = []
    var counter = 0
    /// The step at which the owner removes `r`'s share (-1: never), and the step at which it shares again.
    var removeAt = -1
    var shareAgainAt = -1
    /// The PostgreSQL role was created (and must be dropped).
    var roleCreated = false

    init(seed: UInt64, backend: FleetBackend) {
        rng = SplitMix64(seed: seed &* 0xC2B2_AE35 &+ 101)
        if backend.isFile {
            (account, secret) = ("reader", "reader-S3cret-55")
        } else {
            (account, secret) = ("model_reader_\(String(UInt32.random(in: 0...UInt32.max), radix: 16))", "unused-with-trust")
        }
    }
}

extension ModelRun {
    /// Whether the run has `r`: on a container file, and on PostgreSQL once its containers know shares (a
    /// participant there is a role of the run's own; see `readerRegister`).
    var readerOn: Bool {
        !without.contains("reader") && (backend.isFile || (PostgresCloudDatabase.self as Any) is any CloudSharing.Type)
    }

    var r: String { ReaderState.store }

    /// Registers `r`'s account (before any zone exists) and plans the removal of its share.
    func readerPlan(total: Int) throws {
        guard readerOn else { return }
        if reader.rng.chance(50) {
            reader.removeAt = reader.rng.below(total)
            reader.shareAgainAt = reader.removeAt + 1 + reader.rng.below(12)
        }
        note("\(r): its share is removed "
             + (reader.removeAt < 0 ? "never" : "at step \(reader.removeAt), shared again at step \(reader.shareAgainAt)"
                + (reader.shareAgainAt >= total ? " (the final barrier)" : "")))
        try readerRegister()
    }

    /// A container file: s0's account (an owner of the container) registers `reader`. PostgreSQL: the server's
    /// superuser creates `r`'s role and runs the grants `cloud init --print-grants` prints for it (r's config names
    /// the role); `readerDropRole` drops it.
    func readerRegister() throws {
        guard let f = fleet else { return }
        switch backend {
        case .file:
            note("s0: account add \(reader.account)")
            guard try storectl("s0", ["account", "add", reader.account, "--secret-env", ReaderState.secretVariable],
                               env: [ReaderState.secretVariable: reader.secret]) != nil else { return }
        case .postgres:
            note("CREATE ROLE \(reader.account) LOGIN, and the grants of 'storectl --store r cloud init --print-grants'")
            try f.psql("CREATE ROLE \(reader.account) LOGIN")
            reader.roleCreated = true
            let grants = try Binary.storectl(["--store", r, "cloud", "init", "--print-grants"], in: f.dir.path,
                                             environment: childEnvironment)
            guard grants.status == 0, !grants.stdout.isEmpty else {
                fail("storectl cloud init --print-grants on \(r) exited \(grants.status)\n\(grants.stderr)")
                return
            }
            try f.psql(grants.stdout)
        }
    }

    /// Drops `r`'s PostgreSQL role, if the run made one.
    func readerDropRole() {
        guard reader.roleCreated, let f = fleet else { return }
        _ = try? f.psql("DROP OWNED BY \(reader.account) CASCADE; DROP ROLE IF EXISTS \(reader.account)")
        reader.roleCreated = false
    }

    /// Before each step: `r` joins once the zone exists, loses and gets back its share when planned, or writes
    /// here, or syncs.
    func readerStep(_ step: Int) throws {
        guard readerOn else { return }
        switch reader.share {
        case .none:
            // The zone exists once a store of its owner synced into it.
            if stores.contains(where: { mode[$0] == "cloud" }) { try readerJoin("\(step)") }
            return
        case .active where reader.removeAt >= 0 && step >= reader.removeAt && step < reader.shareAgainAt:
            try readerRemoveShare("\(step)")
            return
        case .removed where step >= reader.shareAgainAt:
            try readerShareAgain("\(step)")
            return
        default:
            break
        }
        let roll = reader.rng.below(100)
        if roll < 16 {
            note("\(step) \(r): local writes (read-only: never sent)")
            for _ in 0..<(1 + reader.rng.below(3)) { try readerWrite() }
        } else if roll < 26 {
            try readerSync("\(step)")
        }
    }

    func readerJoin(_ when: String) throws {
        note("\(when) s0: share add \(reader.account) --permission read-only")
        guard try storectl("s0", ["share", "add", reader.account, "--permission", "read-only"]) != nil else {
            return
        }
        note("\(when) \(r): mode cloud, from nothing")
        guard try storectl(r, ["mode", "cloud"]) != nil else { return }
        reader.share = .active
        readerSynced()
    }

    func readerRemoveShare(_ when: String) throws {
        note("\(when) s0: share remove \(reader.account)")
        guard try storectl("s0", ["share", "remove", reader.account]) != nil else { return }
        reader.share = .removed
        try readerSync(when)
        try readerStatus("step \(when), after share remove")
    }

    func readerShareAgain(_ when: String) throws {
        note("\(when) s0: share add \(reader.account) --permission read-only (again)")
        guard try storectl("s0", ["share", "add", reader.account, "--permission", "read-only"]) != nil else {
            return
        }
        reader.share = .active
        try readerSync(when)
    }

    /// `r` syncs: with its share, it receives; without, it is refused (77) and its rows stay as they were.
    func readerSync(_ when: String) throws {
        guard let f = fleet else { return }
        if reader.share == .active {
            note("\(when) \(r): sync")
            guard try storectl(r, ["sync"]) != nil else { return }
            readerSynced()
            return
        }
        let before = try f.rows(r)
        note("\(when) \(r): sync, refused (its share is removed)")
        guard try storectl(r, ["sync"], allowed: [77]) != nil else { return }
        let diff = RowDiff(expected: before, actual: try f.rows(r))
        if !diff.isEmpty { fail("\(when): a refused sync of \(r) changed its rows:\n\(diff)") }
    }

    /// `r` synced: every row sent meanwhile took the cloud's value there.
    func readerSynced() {
        let overwritten = reader.pending.filter { reader.local[$0] != nil }.sorted()
        if !overwritten.isEmpty {
            note("    \(r): the cloud's value wins on \(overwritten.count) row(s) changed here: \(overwritten)")
        }
        for identity in overwritten { reader.local[identity] = nil }
        reader.pending = []
    }

    /// Called before a store's writes are confirmed by a clean sync: they are in the cloud, and reach `r` at its next
    /// sync. After a kill, what was sent is unknown (the rows `r` changed stay either way). A row the store's writes
    /// left as it was (an update to the values it held) sends nothing, and nothing reaches `r`.
    func readerNoteSent(_ s: String) {
        guard readerOn, !dirty.contains(s) else { return }
        reader.pending.formUnion((model.undo[s] ?? [:]).filter { $0.value != model.rows[$0.key] }.keys)
    }

    /// Runs one statement on `r`, as its app would; returns how many rows it changed.
    func readerSQL(_ sql: String, _ args: [Value]) throws -> Int {
        guard let f = fleet else { return 0 }
        let db = try Connection(path: f.path(r), mode: .readWrite, busyTimeout: 10_000, wal: true, foreignKeys: true)
        var changed = 0
        try db.transaction(.immediate) {
            try db.run(sql, args)
            changed = db.changes
        }
        return changed
    }

    func readerText() -> MV {
        let word = ["r-alpha", "r-o'brien", "r-é😀", "r-a|b"][reader.rng.below(4)] + String(reader.rng.below(1000))
        switch reader.rng.below(10) {
        case 0: return .text(Array(word.utf8) + [0] + Array("tail".utf8))
        case 1: return .text(Array(word.utf8) + [0xFF])
        default: return .str(word)
        }
    }

    /// The key columns of a table `r` writes, and a fresh set of its other columns.
    func readerValues(_ table: String) -> (key: [String], values: StoreModel.Row) {
        switch table {
        case "notes": return (["uuid"], ["title": readerText(), "body": .str("")])
        case "settings": return (["key"], ["value": reader.rng.chance(15) ? .null : readerText()])
        case "events": return (["origin", "n"], ["payload": reader.rng.chance(20) ? .null : readerText()])
        case "words": return (["w", "lang"], ["n": .int(Int64(reader.rng.below(100)))])
        case "ranks": return (["id"], ["label": readerText()])
        default: return (["at"], ["value": .real(Double(reader.rng.below(100_000)) / 8), "note": readerText()])
        }
    }

    static let readerTextColumns: Set<String> = ["uuid", "title", "body", "key", "value", "origin", "payload", "w",
                                                 "lang", "label", "note"]

    func readerBind(_ column: String, _ index: Int) -> String {
        Self.readerTextColumns.contains(column) ? "CAST(?\(index) AS TEXT)" : "?\(index)"
    }

    /// One write on `r`: a row of its own (a key no other store uses), an edit or delete of one of them, or an edit
    /// or delete of another store's row (when `r` holds it).
    func readerWrite() throws {
        let roll = reader.rng.below(100)
        if roll < 40 || (roll < 60 && reader.own.isEmpty) {
            // A row of r's own.
            let table = ["notes", "settings", "events", "words", "ranks"][reader.rng.below(5)]
            reader.counter += 1
            let n = reader.counter
            var (_, row) = readerValues(table)
            let identity: String
            switch table {
            case "notes":
                row["uuid"] = .str("r-n\(n)")
                identity = "notes|r-n\(n)"
            case "settings":
                row["key"] = .str("r-k\(n)")
                identity = "settings|" + MV.str("r-k\(n)").cell
            case "events":
                row["origin"] = .str(r)
                row["n"] = .int(Int64(n))
                identity = "events|\(r)|\(n)"
            case "words":
                row["w"] = .str("r-w\(n)")
                row["lang"] = .str("en")
                identity = "words|" + [MV.str("r-w\(n)").cell, MV.str("en").cell].joined(separator: "|")
            default:
                row["id"] = .int(Int64(500_000 + n))
                identity = "ranks|" + MV.int(Int64(500_000 + n)).cell
            }
            let columns = row.keys.sorted()
            let sql = "INSERT INTO \(table)(\(columns.joined(separator: ", "))) VALUES ("
                + columns.enumerated().map { readerBind($1, $0 + 1) }.joined(separator: ", ") + ")"
            note("  \(r): \(sql) <- \(columns.map { (row[$0] ?? .null).cell })")
            _ = try readerSQL(sql, columns.map { (row[$0] ?? .null).bound })
            reader.own[identity] = row
            reader.local[identity] = .some(model.line(identity, row, []))
            return
        }
        let identity: String
        let old: StoreModel.Row
        let mine = roll < 60
        if mine {
            guard let id = pickReader(reader.own.keys.sorted()), let row = reader.own[id] else { return }
            (identity, old) = (id, row)
        } else {
            let candidates = model.rows.keys.filter {
                ReaderState.editedTables.contains(StoreModel.table($0)) && model.contested[$0] == nil
            }.sorted()
            guard let id = pickReader(candidates), let row = model.rows[id] else { return }
            (identity, old) = (id, row)
        }
        let table = StoreModel.table(identity)
        let (keyColumns, values) = readerValues(table)
        let keyWhere = keyColumns.enumerated().map { "\($1) = " + readerBind($1, $0 + 1) }.joined(separator: " AND ")
        let keyArgs = keyColumns.map { (old[$0] ?? .null).bound }
        if reader.rng.chance(30) {
            note("  \(r): DELETE FROM \(table) WHERE \(identity)")
            let changed = try readerSQL("DELETE FROM \(table) WHERE \(keyWhere)", keyArgs)
            note("    -> \(changed) row(s)")
            if mine { reader.own[identity] = nil }
            if changed > 0 || mine { reader.local[identity] = .some(nil) }
            return
        }
        var row: StoreModel.Row = [:]
        for k in keyColumns { row[k] = old[k] }
        row.merge(values) { $1 }
        let columns = values.keys.sorted()
        let sets = columns.enumerated().map { "\($1) = " + readerBind($1, keyColumns.count + $0 + 1) }
            .joined(separator: ", ")
        note("  \(r): UPDATE \(table) SET \(columns) = \(columns.map { (values[$0] ?? .null).cell }) WHERE \(identity)")
        let changed = try readerSQL("UPDATE \(table) SET \(sets) WHERE \(keyWhere)",
                                    keyArgs + columns.map { (values[$0] ?? .null).bound })
        note("    -> \(changed) row(s)")
        if mine { reader.own[identity] = row }
        // An edit of a row r does not hold (not received yet, or deleted here) changes nothing.
        if changed > 0 { reader.local[identity] = .some(model.line(identity, row, [])) }
    }

    func pickReader<T>(_ list: [T]) -> T? { list.isEmpty ? nil : list[reader.rng.below(list.count)] }

    /// The rows `r` must hold: the model's, and for each row it changed here, its own value or the model's
    /// (`exact`: the model's only).
    func readerCompare(_ what: String, exact: Bool) throws {
        guard let f = fleet else { return }
        let problems = try f.integrity(r)
        if !problems.isEmpty { fail("\(what): integrity of \(r): \(problems)") }
        let actual = try f.rows(r)
        let present = Set(actual)
        var expected: [String] = []
        for (identity, row) in model.rows where exact || reader.local[identity] == nil {
            expected.append(model.line(identity, row, []))
        }
        var keptHere = 0
        if !exact {
            for (identity, mine) in reader.local.sorted(by: { $0.key < $1.key }) {
                let theirs = model.rows[identity].map { model.line(identity, $0, []) }
                if let mine, present.contains(mine) {
                    expected.append(mine)
                    keptHere += 1
                } else if let theirs, present.contains(theirs) {
                    expected.append(theirs)
                } else if mine != nil, let theirs {
                    expected.append(theirs)  // neither: reported as lost
                } else if mine == nil {
                    keptHere += theirs == nil ? 0 : 1
                }
            }
        }
        let diff = RowDiff(expected: expected, actual: actual)
        Tally.add(diff)
        note("  \(r): \(actual.count) rows, \(keptHere) of them changed here and kept (\(reader.local.count) rows "
             + "changed here, \(reader.own.count) of its own)")
        if !diff.isEmpty {
            fail("\(what): \(r) (read-only) differs from the model\(exact ? "" : " and its own changes"):\n\(diff)")
        }
    }

    /// `status --json` of `r`: its local changes listed as not sent (exit 65) when it has rows of its own; nothing
    /// listed (exit 0) when it changed nothing here; exit 77 while its share is removed.
    func readerStatus(_ what: String) throws {
        guard let f = fleet else { return }
        let (result, doc) = try f.status(r, env: childEnvironment)
        let unsent = JSONDoc.get(doc, "unsettled", "unsent") as? [[String: Any]] ?? []
        note("  \(r): status -> exit \(result.status), \(unsent.count) not sent")
        if reader.share == .removed {
            if result.status != 77 { fail("\(what): status of \(r) without its share exited \(result.status)\n\(result)") }
            return
        }
        if unsent.contains(where: { $0["share"] as? String != "read-only" }) {
            fail("\(what): status of \(r) lists a row not sent that is not for its read-only share:\n\(result.stdout)")
        }
        if !reader.own.isEmpty {
            var byTable: [String: Int] = [:]
            for id in reader.own.keys { byTable[StoreModel.table(id), default: 0] += 1 }
            let missing = byTable.filter { table, n in unsent.filter { $0["entity"] as? String == table }.count < n }
            if result.status != 65 || !missing.isEmpty {
                fail("\(what): status of \(r) with \(reader.own.count) rows of its own (\(byTable)) exited "
                     + "\(result.status), listing fewer not sent in \(missing.keys.sorted()):\n\(result.stdout)")
            }
        } else if reader.local.isEmpty && (result.status != 0 || !unsent.isEmpty) {
            fail("\(what): status of \(r), which changed nothing here, exited \(result.status):\n\(result.stdout)")
        }
    }

    /// At a barrier, after s0..s2: `r` syncs (or is refused), is compared with the model, and sometimes (always at
    /// the end) discards what it changed here, then equals the model exactly.
    func readerBarrier(final: Bool) throws {
        guard readerOn, let f = fleet else { return }
        let what = final ? "the final barrier" : "barrier \(barriers)"
        if reader.share == .none { try readerJoin("  barrier:") }
        if final && reader.share == .removed { try readerShareAgain("  final:") }
        if failed { return }
        try readerSync("  barrier:")
        if failed { return }
        try readerStatus(what)
        if reader.share == .removed || failed { return }
        try readerCompare(what, exact: false)
        // Nothing r did reached the cloud: no record was last saved by r's device.
        let device = try f.sql(r, "SELECT value FROM _storectl_meta WHERE key = 'store_id'")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let sent = try f.cloudRecords().filter { $0.modifiedBy == device }
        if device.isEmpty || !sent.isEmpty {
            fail("\(what): the container holds \(sent.count) record(s) saved by \(r) ('\(device)'), a read-only "
                 + "participant: \(sent.prefix(5).map { "\($0.recordType) \($0.recordName) \($0.fields)" })")
        }
        guard final || reader.rng.chance(40), !failed else { return }
        let own = reader.own.count
        note("  \(r): sync --discard-local (\(reader.local.count) rows changed here, \(own) of its own)")
        let res = try Binary.storectl(["--store", r, "--json", "sync", "--discard-local"], in: f.dir.path,
                                      environment: childEnvironment)
        note("    -> exit \(res.status)")
        guard res.status == 0 else {
            fail("storectl sync --discard-local on \(r) exited \(res.status)\n\(res.stderr.suffix(1500))")
            return
        }
        let doc = JSONDoc.parse(res.stdout)
        let deleted = JSONDoc.int(doc, "discarded", "deleted") ?? -1
        // A row of its own at a rowid a deleted row had is put back to that row's record (`restored`).
        let restored = JSONDoc.int(doc, "discarded", "restored") ?? 0
        if deleted + restored < own {
            fail("\(what): sync --discard-local deleted \(deleted) rows and restored \(restored), \(r) made \(own):\n"
                 + res.stdout)
        }
        if let saved = JSONDoc.get(doc, "discarded", "saved_to") as? String,
           !FileManager.default.fileExists(atPath: saved.hasPrefix("/") ? saved : f.dir.file(saved))
        {
            fail("\(what): sync --discard-local names \(saved), which does not exist")
        }
        reader.local = [:]
        reader.own = [:]
        readerSynced()
        try readerCompare(what + ", after sync --discard-local", exact: true)
        try readerStatus(what + ", after sync --discard-local")
        if final && !failed {
            let again = try f.json(r, ["sync"], env: childEnvironment, expect: 0)
            let moved = ["saved", "deleted"].compactMap { JSONDoc.int(again.doc, "exported", $0) }.reduce(0, +)
                + ["applied", "deleted"].compactMap { JSONDoc.int(again.doc, "imported", $0) }.reduce(0, +)
            if moved != 0 { fail("a round of \(r) after discarding still moved \(moved) record(s):\n\(again.result.stdout)") }
        }
    }
}

