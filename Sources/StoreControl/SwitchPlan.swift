import FoundationEssentials
import StoreBase
import StoreCloud
import StoreConfig
import StoreCrypto
import StoreHistory
import StoreMirror
import StoreSQLite

/// What `mode cloud` would do, as `mode cloud --dry-run` prints it. Its `planID` is a hash of everything else in it:
/// `mode cloud --expect-plan ID` refuses (exit 75) when the plan made now has another id.
public struct SwitchPlan: Sendable, Codable, Equatable {
    public struct Account: Sendable, Codable, Equatable {
        public var account: String?
        /// `available`, `noAccount`, `restricted`, `couldNotDetermine` or `temporarilyUnavailable`.
        public var status: String
        public var reason: String
    }

    public struct Export: Sendable, Codable, Equatable {
        /// A baseline of every row (the store never exported to this container and zone), or the pending changes.
        public var baseline: Bool
        /// Rows to export, in all.
        public var rows: Int
        /// Rows to export per table.
        public var tables: [String: Int]

        enum CodingKeys: String, CodingKey { case baseline, rows, tables }

        public init(baseline: Bool, rows: Int, tables: [String: Int]) {
            self.baseline = baseline
            self.rows = rows
            self.tables = tables
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            baseline = try c.decode(Bool.self, forKey: .baseline)
            rows = try c.decode(Int.self, forKey: .rows)
            tables = try c.decode([String: Int].self, forKey: .tables)
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(baseline, forKey: .baseline)
            try c.encode(rows, forKey: .rows)
            var t = c.nestedContainer(keyedBy: JSONValue.Key.self, forKey: .tables)
            for (table, n) in tables { try t.encode(n, forKey: JSONValue.Key(table)) }
        }
    }

    public struct Import: Sendable, Codable, Equatable {
        /// Whether the count is known (false when the zone could not be read).
        public var known: Bool
        /// Records saved by other devices that the import would bring in (live ones).
        public var records: Int?
        /// Tombstones among them.
        public var deletions: Int?
    }

    /// A record the import would bring in while this store holds another version of its row.
    public struct Conflict: Sendable, Codable, Equatable {
        public var table: String
        public var recordName: String
        public var key: JSONValue?
    }

    public struct Table: Sendable, Codable, Equatable {
        public var table: String
        public var rows: Int
        /// SHA-256 of the table's rows, as the export encodes them, in record-name order.
        public var contentHash: String
    }

    public struct Cloud: Sendable, Codable, Equatable {
        public var url: String
        public var container: String
        public var zone: String
        /// Whether the zone exists (nil: the cloud could not be read).
        public var zoneExists: Bool?
        /// The zone's epoch and last change number: any write to the zone changes the plan.
        public var epoch: String?
        public var lastSeq: Int64?
    }

    public var planID: String
    public var store: String
    /// The store's mode now (`uninitialised` for a store that does not exist yet).
    public var mode: String
    public var account: Account
    public var export: Export
    public var `import`: Import
    /// How many conflicts the import would meet, and (at most 100 of) which.
    public var expectedConflicts: Int
    public var conflicts: [Conflict]
    public var tables: [Table]
    public var cloud: Cloud
}

/// The plan made now is not the plan a script checked: `mode cloud --expect-plan ID` refuses.
public struct StalePlanError: DiagnosedError {
    public var store: String?
    public var expected: String
    public var plan: SwitchPlan
    public var exitCode: ExitCode { .tempFail }
    public var summary: String {
        "the plan of store '\(store ?? "?")' changed since plan \(expected) was made: it is \(plan.planID) now"
    }
    public var details: [String] {
        ["  now: export \(plan.export.rows) row(s)\(plan.export.baseline ? " (baseline)" : ""), import "
            + (plan.import.records.map { "\($0) record(s)" } ?? "unknown") + ", \(plan.expectedConflicts) conflict(s); "
            + plan.tables.map { "\($0.table) \($0.rows) rows \($0.contentHash.prefix(12))" }.joined(separator: ", "),
         "  nothing was changed"]
    }
    public var hint: String? {
        "look at the new plan with 'storectl mode cloud --dry-run', then run 'storectl mode cloud --expect-plan "
            + "\(plan.planID)'"
    }
}

extension StoreHandle {
    /// The plan of `mode cloud`, made by reading only: the store (never created), the account, the zone (never
    /// created). Two plans made with nothing changed in between have the same id.
    /// - Throws: `StoreError` 66 for a store missing where config.yaml says it is in cloud mode; `SQLiteError`.
    public func switchPlan() throws -> SwitchPlan {
        let cloud = try cloudSettings()
        if !exists && settings.mode == .cloud { throw missingStoreError() }
        let status = accountStatusAndContainer(cloud).report
        var plan = SwitchPlan(
            planID: "", store: settings.name, mode: (try storeMode())?.rawValue ?? "uninitialised",
            account: .init(account: status.account, status: status.status.rawValue, reason: status.reason),
            export: .init(baseline: true, rows: 0, tables: [:]), import: .init(known: false, records: nil, deletions: nil),
            expectedConflicts: 0, conflicts: [], tables: [],
            cloud: .init(url: Redaction.connectionString(cloud.url), container: cloud.container, zone: cloud.zone,
                         zoneExists: nil, epoch: nil, lastSeq: nil))
        let initialised = exists ? try historyTracker().isInitialized() : false
        let db = exists ? try database() : nil
        let withdraw = try db.map { try Self.readableMirrorState($0) }
        defer { withdraw?() }

        // The tables, their rows and content, and what the export would send.
        if let db, initialised {
            let entities = try Mirror.entityMaps(db)
            let mark = try MirrorState.meta(db, .baselineContainer)
            let gap = try MirrorState.meta(db, .historyGap)
            plan.export.baseline = mark != cloud.container + "/" + cloud.zone || (gap != nil && gap != "")
            for e in entities.sorted(by: { utf8Less($0.name, $1.name) }) {
                let (rows, hash) = try Self.contentHash(db, sql: e.localRecordsSQL + " ORDER BY 2")
                plan.tables.append(.init(table: e.name, rows: rows, contentHash: hash))
                let count = plan.export.baseline ? rows : Int(try db.scalar("""
                    SELECT count(*) FROM (SELECT DISTINCT pk FROM _storectl_history
                    WHERE entity = ? AND seq > ? AND author <> ?)
                    """, [e.name, try MirrorState.exportToken(db), MirrorState.importAuthor])?.int64 ?? 0)
                plan.export.tables[e.name] = count
                plan.export.rows += count
            }
        } else if let db {
            // An existing database that mode cloud would adopt: every row of every table it would track.
            let names = settings.entities.isEmpty ? try historyTracker().userTables() : settings.entities.map(\.name)
            for name in names.sorted(by: utf8Less) where try db.tableExists(name) {
                let columns = try db.columns(of: name).map { quoteIdentifier($0.name) }
                let (rows, hash) = try Self.contentHash(db, sql: "SELECT NULL, NULL, json_array("
                    + columns.map { "quote(\($0))" }.joined(separator: ", ") + ") FROM main.\(quoteIdentifier(name)) "
                    + "ORDER BY 3")
                plan.tables.append(.init(table: name, rows: rows, contentHash: hash))
                plan.export.tables[name] = rows
                plan.export.rows += rows
            }
        }

        // What the import would bring in, and which of it meets a local change.
        if status.status == .available, let backend = try? CloudConnector.open(settings: cloud, environment: environment, createIfMissing: false) {
            try planImport(&plan, db: initialised ? db : nil, cloud: backend, zone: cloud.zone)
        } else if status.status == .available {
            // The container does not exist yet (it is created on the switch): nothing to import.
            plan.cloud.zoneExists = false
            plan.import = .init(known: true, records: 0, deletions: 0)
        }
        plan.planID = try Self.planID(plan)
        return plan
    }

    /// Counts what the import would bring in (records saved after the store's server token by other devices), and
    /// the conflicts: records of rows that changed here since the last export, or (for a baseline) rows whose
    /// record holds other values.
    private func planImport(_ plan: inout SwitchPlan, db: Connection?, cloud: any CloudDatabase, zone: String) throws {
        guard let info = try cloud.zoneInfo(zone, countLive: false) else {
            plan.cloud.zoneExists = false
            plan.import = .init(known: true, records: 0, deletions: 0)
            return
        }
        plan.cloud.zoneExists = true
        plan.cloud.epoch = info.epoch
        plan.cloud.lastSeq = info.lastSeq
        var token: ServerChangeToken?
        var device: String?
        if let db {
            device = try MirrorState.storeID(db)
            if let raw = try MirrorState.serverToken(db, zone: zone), let t = ServerChangeToken(rawValue: raw),
               t.epoch == info.epoch, !plan.export.baseline
            {
                token = t
            }
        }
        var live = 0
        var deletions = 0
        var incoming: [CloudRecord] = []
        while true {
            let batch = try cloud.fetchChanges(zone: zone, since: token, limit: 1000, excludingDevice: device)
            for r in batch.records {
                if r.deleted { deletions += 1 } else { live += 1 }
                incoming.append(r)
            }
            token = batch.token
            if !batch.moreComing { break }
        }
        plan.import = .init(known: true, records: live, deletions: deletions)
        guard let db else { return }
        let entities = Dictionary(uniqueKeysWithValues: try Mirror.entityMaps(db).map { ($0.name, $0) })
        let exportToken = try MirrorState.exportToken(db)
        for r in incoming {
            guard let e = entities[r.recordType] else { continue }
            let local = try db.query("SELECT pk, fields FROM (\(e.localRecordsSQL)) WHERE record_name = ?",
                                     [r.recordName]).first
            let pk = try local?[0].string ?? db.scalar("SELECT pk FROM _storectl_records WHERE \(RecordMap.named("?1"))",
                                                      [r.recordName])?.string
            guard let pk else { continue }
            let changedHere: Bool
            if plan.export.baseline {
                changedHere = local != nil && (r.deleted || local?[1].string != r.fields)
            } else {
                changedHere = try db.scalar("""
                    SELECT 1 FROM _storectl_history WHERE entity = ? AND pk = ? AND seq > ? AND author <> ? LIMIT 1
                    """, [e.name, pk, exportToken, MirrorState.importAuthor]) != nil
            }
            guard changedHere else { continue }
            plan.expectedConflicts += 1
            if plan.conflicts.count < 100 {
                plan.conflicts.append(.init(table: e.name, recordName: r.recordName, key: JSONValue(jsonText: pk)))
            }
        }
    }

    /// The row count and SHA-256 of what `sql` selects (the third column of each row is its content, the second
    /// its record name), chained over 64 KiB pieces so that a table of any size is hashed in bounded memory.
    static func contentHash(_ db: Connection, sql: String) throws -> (rows: Int, hash: String) {
        var digest: [UInt8] = []
        var piece: [UInt8] = []
        var rows = 0
        func flush() throws {
            digest = try Crypto.sha256(digest + piece)
            piece.removeAll(keepingCapacity: true)
        }
        try db.prepare(sql).forEach([]) { row in
            rows += 1
            piece += Array((row.string(1) ?? "").utf8) + [0x1F] + Array((row.string(2) ?? "").utf8) + [0x0A]
            if piece.count >= 65_536 { try flush() }
        }
        try flush()
        return (rows, Hex.string(digest))
    }

    /// The plan's id: 16 hex digits of the SHA-256 of the plan without its id, in a stable JSON form.
    static func planID(_ plan: SwitchPlan) throws -> String {
        var copy = plan
        copy.planID = ""
        // The account's reason is words for people, which may name times or paths: not part of the plan.
        copy.account.reason = ""
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(Hex.string(try Crypto.sha256(Array(try encoder.encode(copy)))).prefix(16))
    }
}

/// Byte order of UTF-8, the order SQLite's BINARY collation sorts text in.
func utf8Less(_ a: String, _ b: String) -> Bool { Array(a.utf8).lexicographicallyPrecedes(Array(b.utf8)) }
