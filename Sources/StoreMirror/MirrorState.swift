import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// The sync engine's own state inside the store: the record map, pending references, tokens and meta keys.
///
/// The record map links each local primary key to its record name, its last known change tag, and a fingerprint
/// of the fields as last synced (the *base*, `FieldHashes`, used for per-property merges and to skip rows that did
/// not really change), with the values of the fields the local table lacks (`extra`).
public enum MirrorState {
    /// The history consumer whose token is the export position.
    public static let exportConsumer = "cloud-export"
    /// The author of every change that came from the cloud.
    public static let importAuthor = "cloud-import"
    /// The author of local changes that follow from applying cloud records: rows the schema's `ON DELETE` actions
    /// changed, and children of a deleted parent (a delete wins). They are exported like any local change.
    public static let cascadeAuthor = "import-cascade"
    /// The author of history rows storectl writes for rows that changed without history (values written while the
    /// triggers were stale, found by comparing each row with its last synced record).
    public static let rescanAuthor = "rescan"

    /// Creates the mirror's tables if they are missing, or brings an older store's to this version
    /// (`SyncTables`), and converts an old record map's bases once (`hashBases`).
    /// - Throws: `SQLiteError`.
    public static func install(_ db: Connection) throws {
        try SyncTables.install(db)
        try hashBases(db)
        try recordStorePath(db)
        // The export consumer (which holds history against pruning) appears with the first export: before it,
        // the first export is a baseline of every row and needs no history.
    }

    /// Converts, once, the bases of a record map made before they were fingerprints (`FieldHashes`): first the
    /// fields the local table lacks (columns dropped here, or added elsewhere first) go into `extra`, where they
    /// keep travelling with the row, then each base becomes its hashes (a base that is not a JSON object becomes
    /// none: every field then counts as changed). One transaction: a crash leaves the old map whole, converted
    /// again at the next open. Runs from `install`, and before `migrate --sql` compares rows with their bases.
    public static func hashBases(_ db: Connection) throws {
        guard try StoreMeta.value(db, .recordMapBase) != "hashes" else { return }
        try db.transaction {
            guard try StoreMeta.value(db, .recordMapBase) != "hashes" else { return }
            try RecordMap(db).convertBasesToHashes()
            try StoreMeta.set(db, .recordMapBase, "hashes")
        }
    }

    /// Records where the store was made, once: a copy elsewhere with the same store id is detected before it
    /// syncs (`StoreHandle.checkIdentity`).
    public static func recordStorePath(_ db: Connection) throws {
        try StoreMeta.setIfAbsent(db, .storePath, Path.standardized(db.path))
    }

    /// A meta value, or nil.
    public static func meta(_ db: Connection, _ key: MetaKey) throws -> String? {
        try StoreMeta.value(db, key)
    }

    /// Sets (or, with nil, removes) a meta value.
    public static func setMeta(_ db: Connection, _ key: MetaKey, _ value: String?) throws {
        try StoreMeta.set(db, key, value)
    }

    /// The export token: the last history seq exported.
    public static func exportToken(_ db: Connection) throws -> Int64 {
        try db.scalar("SELECT token FROM _storectl_consumers WHERE name = ?", [exportConsumer])?.int64 ?? 0
    }

    static func setExportToken(_ db: Connection, _ token: Int64) throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        try db.run("""
            INSERT INTO _storectl_consumers(name, token, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
            ON CONFLICT(name) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
            """, [exportConsumer, token, now])
    }

    /// Writes a history row by `author` that makes the row at `pk` a pending local change of `columns` (storectl's
    /// own changes that must be exported: `import-cascade`, `rescan`).
    static func markChanged(_ db: Connection, entity: String, pk: String, columns: [String], author: String) throws {
        let names = try db.scalar("SELECT json_array(\(columns.indices.map { "?\($0 + 1)" }.joined(separator: ", ")))",
                                  columns)?.string ?? "[]"
        try db.run("""
            INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, changed)
            VALUES (NULL, ?1, \(StoreFormat.nowMillisecondsSQL), ?2, ?3, 'U', ?4)
            """, [author, entity, pk, names])
    }

    /// Moves the export token past the history an import just wrote when nothing after the token waits for export
    /// (every row after it is authored `cloud-import`), so that what reads "changes not exported" (`status`,
    /// `watch`, the next export) does not walk the import's history, which grows with the rows imported. The
    /// token only moves when the export consumer exists (before it, the first export is a baseline).
    /// `readOnly`: a read-only participant, which never exports (and so has no export token of its own until this
    /// gives it one), passes what followed from the import too (its `ON DELETE` actions' changes and its duplicate
    /// merges, author `import-cascade`): the writers send theirs, and only a change of its own keeps its export
    /// token (and the history after it) where it is.
    static func passImportedHistory(_ db: Connection, readOnly: Bool = false) throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        guard readOnly else {
            try db.run("""
                UPDATE _storectl_consumers AS c SET token = (SELECT max(seq) FROM _storectl_history), updated_at = ?3
                WHERE c.name = ?1 AND (SELECT max(seq) FROM _storectl_history) > c.token
                  AND NOT EXISTS (SELECT 1 FROM _storectl_history h WHERE h.seq > c.token AND h.author <> ?2)
                """, [exportConsumer, importAuthor, now])
            return
        }
        // The row first (at 0): it keeps the history of changes not sent from `history prune`.
        try db.run("""
            INSERT OR IGNORE INTO _storectl_consumers(name, token, created_at, updated_at) VALUES (?1, 0, ?2, ?2)
            """, [exportConsumer, now])
        // A change of its own that the cloud's value overwrote since is not pending (`localChangesNotSent`).
        try db.run("""
            UPDATE _storectl_consumers AS c SET token = (SELECT max(seq) FROM _storectl_history), updated_at = ?3
            WHERE c.name = ?1 AND (SELECT max(seq) FROM _storectl_history) > c.token
              AND NOT EXISTS (
                  SELECT 1 FROM _storectl_history h WHERE h.seq > c.token GROUP BY h.entity, h.pk
                  HAVING max(CASE WHEN h.author NOT IN (?2, ?4) THEN h.seq END)
                         > coalesce(max(CASE WHEN h.author IN (?2, ?4) THEN h.seq END), 0))
            """, [exportConsumer, importAuthor, now, cascadeAuthor])
    }

    /// The server change token of `zone`, or nil when nothing was imported yet.
    public static func serverToken(_ db: Connection, zone: String) throws -> String? {
        try db.scalar("SELECT value FROM _storectl_tokens WHERE name = ?", ["server:" + zone])?.string
    }

    static func setServerToken(_ db: Connection, zone: String, _ token: String?) throws {
        if let token {
            try db.run("INSERT INTO _storectl_tokens(name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                       ["server:" + zone, token])
        } else {
            try db.run("DELETE FROM _storectl_tokens WHERE name = ?", ["server:" + zone])
        }
    }

    /// The store id: this store's identity as a device.
    public static func storeID(_ db: Connection) throws -> String {
        guard let id = try meta(db, .storeID) else {
            throw StoreError(.dataError, "\(db.path) has no store id: it was not initialised by storectl",
                             hint: "run 'storectl init'")
        }
        return id
    }

    /// The greatest history seq so far.
    public static func lastHistorySeq(_ db: Connection) throws -> Int64 {
        try db.scalar("SELECT coalesce(max(seq), 0) FROM _storectl_history")?.int64 ?? 0
    }

    /// The seq of the newest of this store's own saves in the zone that its record map reflects.
    static func ownSeq(_ db: Connection, container: String, zone: String) throws -> Int64 {
        Int64(try meta(db, .ownSeq(container: container, zone: zone)) ?? "") ?? 0
    }

    static func setOwnSeq(_ db: Connection, container: String, zone: String, _ seq: Int64) throws {
        try db.run("""
            INSERT INTO _storectl_meta(key, value) VALUES (?1, ?2)
            ON CONFLICT(key) DO UPDATE SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))
            """, [MetaKey.ownSeq(container: container, zone: zone).rawValue, String(seq)])
    }

    /// The serial of the latest export this store started (`ExportMark.serial`).
    static func exportSerial(_ db: Connection) throws -> Int64 {
        Int64(try meta(db, .exportSerial) ?? "") ?? 0
    }

    /// Starts a new export: the serial goes up by one and is committed before anything is saved.
    static func nextExportSerial(_ db: Connection) throws -> Int64 {
        try db.transaction(.immediate) {
            let next = try exportSerial(db) + 1
            try setMeta(db, .exportSerial, String(next))
            return next
        }
    }

    /// How many records wait for a parent, are set aside, wait to be deleted in the cloud, or are rows not sent.
    public static func unsettledCounts(_ db: Connection) throws
        -> (pending: Int64, quarantined: Int64, outbox: Int64, unsent: Int64)
    {
        let inbox = try inboxSource(db)
        let outgoing = try outgoingSource(db)
        let row = try db.query("""
            SELECT (SELECT count(*) FROM \(inbox) WHERE state = 'waiting'),
                   (SELECT count(*) FROM \(inbox) WHERE state = 'set_aside'),
                   (SELECT count(*) FROM \(outgoing) WHERE kind = 'delete'),
                   (SELECT count(*) FROM \(outgoing) WHERE kind = 'save')
            """).first
        return (row?[0].int64 ?? 0, row?[1].int64 ?? 0, row?[2].int64 ?? 0, row?[3].int64 ?? 0)
    }

    /// The outgoing queue's rows as SQL to select from, also in a store of an older storectl read without writing.
    public static func outgoingSource(_ db: Connection) throws -> String {
        if try db.tableExists(OutgoingEntry.tableName) { return "main._storectl_outgoing" }
        // The first SELECT names the columns.
        var parts = ["""
            SELECT NULL AS record_name, NULL AS record_type, NULL AS kind, NULL AS pk, NULL AS detail,
                   NULL AS bytes WHERE false
            """]
        if try db.tableExists("_storectl_outbox") {
            parts.append("SELECT record_name, record_type, 'delete', NULL, reason, NULL FROM main._storectl_outbox")
        }
        if try db.tableExists("_storectl_unsent") {
            parts.append("SELECT NULL, entity, 'save', pk, reason, bytes FROM main._storectl_unsent")
        }
        return "(" + parts.joined(separator: " UNION ALL ") + ")"
    }

    /// The inbox's rows as SQL to select from, also in a store of an older storectl read without writing (its
    /// tables are brought to this version by the first command that writes).
    public static func inboxSource(_ db: Connection) throws -> String {
        if try db.tableExists(InboxEntry.tableName) { return "main._storectl_inbox" }
        // The first SELECT names the columns.
        var parts = ["""
            SELECT NULL AS record_name, NULL AS record_type, NULL AS seq, NULL AS state, NULL AS reason, NULL AS hint,
                   NULL AS attempts WHERE false
            """]
        if try db.tableExists("_storectl_pending") {
            parts.append("""
                SELECT record_name, record_type, seq, 'waiting', NULL, NULL, 1 FROM main._storectl_pending
                """)
        }
        if try db.tableExists("_storectl_quarantine") {
            parts.append("""
                SELECT record_name, record_type, seq, 'set_aside', reason, hint, attempts FROM main._storectl_quarantine
                """)
        }
        return "(" + parts.joined(separator: " UNION ALL ") + ")"
    }

    /// Forgets the records that wait for a parent (the zone they came from is no longer this store's).
    public static func forgetWaitingForParent(_ db: Connection) throws {
        try Inbox(db).clear(.waiting)
    }

    /// Forgets every change tag, base and token, so that the next export is a baseline (for a new account, or
    /// a zone that was purged). Local rows and history are untouched.
    ///
    /// The record names stay: rows that synced before keep the names every other device knows them by, so that
    /// when several devices upload again into a purged zone they save the same records instead of duplicates.
    public static func resetSyncState(_ db: Connection, zone: String) throws {
        try RecordMap(db).forgetSyncedState()
        try Inbox(db).clear()
        try Outgoing(db).clearDeletes()
        try db.execute("DELETE FROM _storectl_meta WHERE \(MetaKey.Family.ownSeq.sqlMatch)")
        try setServerToken(db, zone: zone, nil)
        try setMeta(db, .baselineContainer, nil)
    }

    /// Gives a record name to every row that `source` (SQL with alias `t` for the table) selects and that has none
    /// yet (see `EntityMap.derivedName`).
    static func assignNames(_ db: Connection, _ e: EntityMap, source: String) throws {
        try RecordMap(db).assignDerivedNames(e, source: source)
    }

    /// How many distinct rows have changes not yet exported.
    public static func pendingExportCount(_ db: Connection) throws -> Int64 {
        let token = try exportToken(db)
        return try db.scalar("""
            SELECT count(*) FROM (SELECT DISTINCT entity, pk FROM _storectl_history WHERE seq > ? AND author <> ?)
            """, [token, importAuthor])?.int64 ?? 0
    }
}

/// Everything in a store that is not converged with the cloud although no change is pending: what `status` and
/// `doctor` report so that "healthy" means healthy.
public struct UnsettledReport: Sendable, Codable, Equatable {
    /// A child record waiting for its parent.
    public struct Waiting: Sendable, Codable, Equatable {
        public var recordName: String
        public var recordType: String
        public var seq: Int64
    }

    /// Records that wait for a parent record that has not arrived.
    public var waitingForParent: [Waiting] = []
    /// Records set aside: they cannot be applied as they are.
    public var setAside: [SetAsideRecord] = []
    /// Tombstones not yet sent (losers of a UNIQUE constraint, orphaned children).
    public var outbox = 0
    /// Local rows that cannot be sent: too large (`max_record_size`), or a key that is not valid UTF-8.
    public var unsent: [RowRef] = []
    /// Records of types this store does not track, by type (they stay in the cloud).
    public var untrackedTypes: [String: Int] = [:]
    /// When the store was found to be an older copy of itself and took back its later records.
    public var restoredAt: String?

    public init() {}

    /// Whether anything keeps the store from being converged.
    public var isEmpty: Bool { waitingForParent.isEmpty && setAside.isEmpty && outbox == 0 && unsent.isEmpty }
}

extension MirrorState {
    /// What keeps the store from being converged with the cloud, as far as the store alone can tell.
    /// - Throws: `SQLiteError`.
    public static func unsettled(_ db: Connection) throws -> UnsettledReport {
        var report = UnsettledReport()
        guard try db.tableExists("_storectl_meta") else { return report }
        let inbox = try inboxSource(db)
        report.waitingForParent = try db.query("""
            SELECT record_name, record_type, seq FROM \(inbox) WHERE state = 'waiting' ORDER BY seq LIMIT 100
            """).map { .init(recordName: $0[0].string ?? "", recordType: $0[1].string ?? "", seq: $0[2].int64 ?? 0) }
        report.setAside = try db.query("""
            SELECT record_name, record_type, seq, coalesce(reason, ''), coalesce(hint, ''), attempts FROM \(inbox)
            WHERE state = 'set_aside' ORDER BY seq LIMIT 100
            """).map {
            SetAsideRecord(recordName: $0[0].string ?? "", recordType: $0[1].string ?? "", seq: $0[2].int64 ?? 0,
                           reason: $0[3].string ?? "", hint: $0[4].string ?? "", attempts: Int($0[5].int64 ?? 0))
        }
        let outgoing = try outgoingSource(db)
        report.outbox = Int(try db.scalar("SELECT count(*) FROM \(outgoing) WHERE kind = 'delete'")?.int64 ?? 0)
        report.unsent = try db.query("""
            SELECT record_type, pk, bytes, detail FROM \(outgoing) WHERE kind = 'save' ORDER BY record_type, pk LIMIT 100
            """).map {
            RowRef(entity: $0[0].string ?? "", key: $0[1].string ?? "", bytes: $0[2].int64.map(Int.init),
                   reason: $0[3].string ?? "")
        }
        if let owner = try readOnlyShareOwner(db) {
            report.unsent += try localChangesNotSent(db, limit: 100).map {
                RowRef(entity: $0.entity, key: $0.key,
                       reason: "the store's account has a read-only share of the zone (owned by '\(owner)'), so "
                           + "its local changes are never sent", share: SharePermission.readOnly.rawValue)
            }
        }
        for (type, count) in try StoreMeta.entries(db, .unknownType) {
            report.untrackedTypes[type] = Int(count ?? "") ?? 0
        }
        if let ms = try meta(db, .restoreDetectedAt).flatMap(Int64.init) {
            report.restoredAt = ISOTime.string(unixMilliseconds: ms, fractional: false)
        }
        return report
    }

    /// The zone's owner when the last round found the store's account a read-only participant, else nil.
    /// - Throws: `SQLiteError`.
    public static func readOnlyShareOwner(_ db: Connection) throws -> String? {
        guard let text = try meta(db, .zoneAccess) else { return nil }
        let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
        guard parts.first == ZoneAccess.Level.readOnly.rawValue else { return nil }
        return parts.count > 1 ? parts[1] : "?"
    }

    /// The rows changed here after the export token whose last change is this store's own, not one the cloud's
    /// value overwrote (or its `ON DELETE` actions changed) since: what a read-only share holds back, by table and
    /// key (at most `limit`, in order).
    /// - Throws: `SQLiteError`.
    public static func localChangesNotSent(_ db: Connection, limit: Int? = nil) throws
        -> [(entity: String, key: String)]
    {
        let token = try exportToken(db)
        // The import's own changes and what follows from them (rows the schema's ON DELETE actions changed) are the
        // cloud's; every other author's are this store's.
        return try db.query("""
            SELECT entity, pk FROM _storectl_history WHERE seq > ?1
            GROUP BY entity, pk
            HAVING max(CASE WHEN author NOT IN (?2, ?3) THEN seq END)
                   > coalesce(max(CASE WHEN author IN (?2, ?3) THEN seq END), 0)
            ORDER BY entity, pk
            """ + (limit.map { " LIMIT \($0)" } ?? ""), [token, importAuthor, cascadeAuthor]).map {
            ($0[0].string ?? "", $0[1].string ?? "")
        }
    }

    /// How many of this store's own saves in the zone its record map does not reflect yet (a crash between a save
    /// and its record, or a store file that is an older copy of itself), from the container's export marks.
    public static func unrecordedOwnSaves(_ db: Connection, cloud: any CloudDatabase, zone: String) throws -> Bool {
        guard let state = try cloud.exportState(zone: zone, device: try storeID(db)) else { return false }
        return state.lastSeq > (try ownSeq(db, container: cloud.container, zone: zone))
    }
}
