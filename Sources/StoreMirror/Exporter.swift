import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// What an export did.
public struct ExportReport: Sendable, Codable, Equatable {
    /// Records created or updated in the cloud.
    public var saved = 0
    /// Tombstones saved in the cloud.
    public var deleted = 0
    /// Conflicts met and resolved by the merge policy.
    public var conflictsResolved = 0
    /// Whether this was a baseline of every row rather than the history since the export token.
    public var baseline = false
    /// The export token after the export.
    public var token: Int64 = 0
    /// Rows not sent: a record larger than `max_record_size` (sent once it fits), or a key that is not valid UTF-8.
    public var unsent: [RowRef] = []

    public init() {}
}

/// A local row, named for a report: its table and its primary key (a JSON array), and why it was not sent.
public struct RowRef: Sendable, Codable, Equatable {
    public var entity: String
    public var key: String
    public var bytes: Int?
    public var reason: String
    /// `read-only` for a local change that the store's read-only share of the zone never sends.
    public var share: String?

    /// Not sent because its key holds NULL (`Outgoing.Reason.keyNull`).
    public var keyHoldsNull: Bool { reason == Outgoing.Reason.keyNull.text }

    public init(entity: String, key: String, bytes: Int? = nil, reason: String, share: String? = nil) {
        self.entity = entity
        self.key = key
        self.bytes = bytes
        self.reason = reason
        self.share = share
    }
}

/// Raised when an export would delete more of the zone than `max_delete_fraction` and `max_delete_count` allow.
public struct MassDeleteError: DiagnosedError {
    public var deletes: Int
    public var liveRecords: Int64
    public var fraction: Double
    public var floor: Int
    public var emptyStore: Bool
    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        if emptyStore {
            return "refusing to push an empty store over a zone that holds \(liveRecords) record(s)"
        }
        let pct = liveRecords > 0 ? Int((Double(deletes) / Double(liveRecords) * 100).rounded()) : 100
        return "refusing to delete \(deletes) of the zone's \(liveRecords) record(s) (\(pct)%), more than "
            + "max_delete_fraction \(fraction) and more than max_delete_count \(floor)"
    }
    public var details: [String] { ["  nothing was sent to the cloud; local rows and history are unchanged"] }
    public var hint: String? {
        "if the deletions are intended, run again with --allow-mass-delete; otherwise restore the rows locally"
    }
}

/// Raised after an export that sent everything else, when some rows could not be sent: a record larger than
/// `max_record_size`, or a key that is not valid UTF-8 (record names and keys are text).
public struct RowsNotSentError: DiagnosedError {
    public var rows: [RowRef]
    public var limit: Int
    /// What the sync did besides (`Mirror.sync` imports and exports everything else before it reports these
    /// rows): `watch` announces its import like any other.
    public var report: SyncReport?
    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        "\(rows.count) row(s) were not sent to the cloud"
    }
    public var details: [String] {
        var lines = rows.prefix(20).map { "  \($0.entity) \($0.key): \($0.reason)" }
            + ["  every other change was sent; these rows are sent by the first sync after they can be"]
        if let report {
            let i = report.imported
            lines.append("  imported: \(i.applied) applied, \(i.deleted) deleted, \(i.skipped) skipped"
                         + (i.setAside > 0 ? ", \(i.setAside) set aside" : "")
                         + (i.waitingForParent > 0 ? ", \(i.waitingForParent) waiting for a parent" : ""))
        }
        return lines
    }
    public var hint: String? {
        if rows.contains(where: { $0.bytes != nil }) {
            return "make the rows smaller, or raise cloud.max_record_size in the config (now \(limit) bytes; "
                + "CloudKit's own limit is 1 MB)"
        }
        if rows.contains(where: \.keyHoldsNull) {
            return "give the rows keys without NULL (declare the key columns NOT NULL so that no row gets one)"
        }
        return "give the rows keys of valid UTF-8 text"
    }
}

/// Pushes local changes to the cloud.
///
/// The phases, in order: start a new export serial (committed before anything is saved), collect the changed
/// rows from history, give fresh record names to rows at reused keys, check the mass-delete breaker, send the
/// outbox's tombstones, export every table parent first in conditional batches, and advance the export token.
struct Exporter {
    let db: Connection
    let cloud: any CloudDatabase
    let options: MirrorOptions
    let entities: [EntityMap]
    let device: String
    /// Where background saves run, one at a time and in order (the cloud is one connection).
    private let saveQueue = DispatchQueue(label: "storectl.export.save")
    /// Names of records set aside here when the export began (usually none): a save of one of them supersedes the
    /// version set aside, which must never be applied over it later.
    private let setAside: Set<String>
    /// The store's schema version: every save carries it, and a zone at a later one refuses the batch.
    private let schemaVersion: Int

    /// Whether an import follows this export in the same sync (`Mirror.sync`'s first export): a row the cloud moved
    /// under a parent not imported yet is then left to it (`takesParentNotHereYet`). Without one (the sync's
    /// second export, after the import could not bring the parent), the row is merged as any other.
    var importFollows = false

    init(db: Connection, cloud: any CloudDatabase, options: MirrorOptions, entities: [EntityMap], device: String) {
        self.db = db
        self.cloud = cloud
        self.options = options
        self.entities = entities
        self.device = device
        schemaVersion = (try? SchemaGate.schemaVersion(db)) ?? 0
        setAside = Set((try? Inbox(db).names(.setAside)) ?? [])
    }

    private struct Pending {
        var entity: EntityMap
        var pk: String
        var save: RecordSave
        /// The record map's base of the row (`FieldHashes`), or a record's fields once a merge chose them.
        var base: Value?
        /// The store's newest history seq when the row was read: later local changes are newer than the save.
        var historySeq: Int64
        /// When the save is a merge: the columns whose values came from the server's record (the local row takes
        /// them once the save is done).
        var takeServer: Set<String>?
        /// The fields of the record that the local table lacks, sent along with the row.
        var extra: String?
        /// The base of `save.fields` as the page read them (`EntityMap.fieldsBase`), while they are what is sent.
        var sentBase: Value?
        /// The row changed nowhere but in the record its reference names: it is sent only because its parent was
        /// renamed (`reexportChildrenOfRenamedParents`). No user changed it, so another device's edit or delete of
        /// it stands, whatever the merge policy; only the re-pointed reference is this side's.
        var repointOnly = false
    }

    func run(baseline: Bool, progress: (Int, Int?) -> Void) throws -> ExportReport {
        var report = ExportReport()
        report.baseline = baseline
        let serial = try MirrorState.nextExportSerial(db)
        let after = baseline ? 0 : try MirrorState.exportToken(db)
        let upto = try MirrorState.lastHistorySeq(db)
        let ordered = EntityMap.parentFirst(entities)

        try collectChanges(baseline: baseline, after: after, upto: upto)
        try renameReusedKeys(ordered, baseline: baseline)
        try checkMassDelete(ordered, baseline: baseline, after: after)

        let total = baseline
            ? try ordered.reduce(0) { $0 + Int(try db.scalar("SELECT count(*) FROM main.\($1.quotedName)")?.int64 ?? 0) }
            : Int(try db.scalar("SELECT count(*) FROM temp._storectl_changes")?.int64 ?? 0)
        var done = 0
        // Tombstones of records no row stands for go first: a row inserted again at a reused rowid (under the
        // same UNIQUE value) must never be in the cloud beside its old record's live copy, even when this export
        // stops between batches, or another device would merge the two as duplicates.
        try sendOutbox(serial: serial, report: &report)
        for e in ordered {
            try exportEntity(e, baseline: baseline, serial: serial, report: &report) { count in
                done += count
                progress(done, total)
            }
        }

        Failpoint.hit("export.before-commit")
        try db.transaction {
            try MirrorState.setExportToken(db, upto)
            if baseline {
                try MirrorState.setMeta(db, .baselineContainer, cloud.container + "/" + options.zone)
                try MirrorState.setMeta(db, .historyGap, nil)
            }
            for e in ordered {
                try MirrorState.setMeta(db, .columns(e.name), try e.fieldColumnsJSON(db))
            }
            try MirrorState.setMeta(db, .lastExportAt, String(Int64(Date().timeIntervalSince1970 * 1000)))
        }
        Failpoint.hit("export.after-commit")
        report.token = upto
        return report
    }

    /// Whether an incremental export would send nothing and change nothing in the store: no history after the
    /// export token but the import's, nothing in the outgoing queue, no rename waiting to be forgotten, and every
    /// table's columns as the last export recorded them. Reads only.
    /// - Throws: `SQLiteError`.
    static func hasNothingToSend(_ db: Connection, entities: [EntityMap]) throws -> Bool {
        let token = try MirrorState.exportToken(db)
        guard try db.scalar("SELECT 1 FROM _storectl_history WHERE seq > ? AND author <> ? LIMIT 1",
                            [token, MirrorState.importAuthor]) == nil,
              try db.scalar("SELECT 1 FROM main._storectl_outgoing LIMIT 1") == nil,
              try db.scalar("SELECT 1 FROM main._storectl_renamed LIMIT 1") == nil
        else { return false }
        for e in entities where try MirrorState.meta(db, .columns(e.name)) != e.fieldColumnsJSON(db) {
            return false
        }
        return true
    }

    /// A read-only participant sends nothing, but a row it inserted at a reused key is still not the record
    /// that key's entry names: the row gets a name of its own before the import meets that record (as an export
    /// would give it, `renameReusedKeys`), so that the record, its tombstone and its children never reach the
    /// participant's row. Nothing goes to the outgoing queue: the participant's deletion of the old record is
    /// never sent, and the record comes back as a row of its own when the cloud changes it (the cloud's value
    /// wins there). Runs before every import of the participant; it looks at the history after its export token
    /// once (`_storectl_renamed`).
    func keepReusedKeysApart() throws {
        precondition(options.readOnly)
        try collectChanges(baseline: false, after: try MirrorState.exportToken(db), upto: try MirrorState.lastHistorySeq(db))
        try renameReusedKeys(EntityMap.parentFirst(entities), baseline: false)
    }

    // MARK: Phases

    /// Fills `temp._storectl_changes` with one row per changed key after the export token (in SQL), plus the rows
    /// that an earlier export could not send (too large then).
    private func collectChanges(baseline: Bool, after: Int64, upto: Int64) throws {
        try db.execute("CREATE TEMP TABLE IF NOT EXISTS _storectl_changes(entity TEXT NOT NULL, pk TEXT NOT NULL, "
                       + "together INTEGER NOT NULL DEFAULT 0, repoint INTEGER NOT NULL DEFAULT 0, "
                       + "orphan INTEGER NOT NULL DEFAULT 0, rank INTEGER NOT NULL DEFAULT 1, "
                       + "PRIMARY KEY (entity, pk)) WITHOUT ROWID")
        try db.execute("DELETE FROM temp._storectl_changes")
        if !baseline {
            // `orphan`: the key's last change is a delete by the orphan rule (`tombstoneFields`). SQLite takes the
            // bare columns of a `max()` aggregate from the row that holds the maximum: the key's last change.
            // `rank`: 0 for a row inserted since the last export, 2 for a row deleted last, 1 for the rest: the
            // order in which a table that references itself is sent (`page`).
            try db.run("""
                INSERT INTO temp._storectl_changes(entity, pk, orphan, rank)
                SELECT entity, pk, orphan, rank FROM (
                    SELECT entity, pk, op = 'D' AND author = ?4 AS orphan,
                           CASE WHEN op = 'D' THEN 2 WHEN sum(op = 'I') > 0 THEN 0 ELSE 1 END AS rank, max(seq)
                    FROM main._storectl_history WHERE seq > ?1 AND seq <= ?2 AND author <> ?3 GROUP BY entity, pk)
                """, [after, upto, MirrorState.importAuthor, MirrorState.cascadeAuthor])
            if entities.contains(where: \.referencesItself) {
                try db.execute("CREATE INDEX IF NOT EXISTS temp._storectl_changes_rank "
                               + "ON _storectl_changes(entity, together, rank, pk)")
            }
            try db.execute("INSERT OR IGNORE INTO temp._storectl_changes(entity, pk) " + Outgoing.unsentRowsSQL)
        }
    }

    /// SQLite reuses the rowid of a deleted last row, and a store restored from an older copy of itself reuses
    /// rowids its later self gave to other rows. A row at such a key is a new row and must not take over the
    /// record that name stands for (other devices map that name to another row): it gets a new name, stored before
    /// anything is saved, so that a replay after a crash uses the same one.
    private func renameReusedKeys(_ ordered: [EntityMap], baseline: Bool) throws {
        try db.transaction {
            let map = RecordMap(db)
            // Keys renamed by an export whose history the token has passed since need no mark any more.
            try map.forgetRenames(upTo: try MirrorState.exportToken(db))
            if !options.readOnly {
                // Records a read-only participant deleted, kept aside when its row took their rowids
                // (`keepReusedKeysApart`): with write access now, the store sends their deletion, as it sends the
                // rest of what it changed then.
                for e in ordered {
                    for gone in try map.goneEntries(entity: e.name) {
                        try Outgoing(db).delete(gone.recordName, type: e.name, tag: gone.changeTag, reason: .reusedRowid)
                        try map.forget(entity: e.name, pk: gone.pk)
                    }
                }
            }
            for e in ordered where e.isSurrogate {
                // Incrementally, only the changed keys are looked at (the changes drive the loop).
                let scope = baseline ? "" : """
                    AND (r.entity, r.pk) IN (SELECT c.entity, c.pk FROM temp._storectl_changes c
                        CROSS JOIN _storectl_records m WHERE c.entity = \(quoteLiteral(e.name))
                        AND m.entity = c.entity AND m.pk = c.pk AND m.deleted = 1)
                    """
                try map.renameRevived(e, scope: scope)
                if !baseline {
                    // A row deleted and inserted again at a rowid no record names yet is simply new: the name this
                    // export derives for it covers that history, so that an export resumed after this one saved the
                    // row (and the record map took the name) does not take the row for a reused rowid.
                    try map.markReinsertedNewRows(entity: e.name, after: try MirrorState.exportToken(db))
                    // A row deleted and then another inserted at its rowid before this export: the new row is not
                    // the old record (which other devices may know merged into another, or link children to). The
                    // old record's tombstone goes through the outbox, and the new row gets a new name.
                    // History an interrupted export already renamed the key for (its new name may be saved in the
                    // cloud, and other devices may have added children to it) is not looked at again: only a
                    // delete and an insert after it make the row new once more.
                    let reused = try db.query("""
                        SELECT h.pk, r.record_name, r.change_tag, max(h.seq), max(CASE WHEN h.op = 'I' THEN h.seq END)
                        FROM _storectl_history h
                        JOIN _storectl_records r ON r.entity = h.entity AND r.pk = h.pk AND r.deleted = 0
                        WHERE h.seq > ?1 AND h.entity = ?2 AND h.author <> ?3
                          AND \(RecordMap.notRenamedFor)
                        GROUP BY h.pk
                        HAVING min(CASE WHEN h.op = 'D' THEN h.seq END) < max(CASE WHEN h.op = 'I' THEN h.seq END)
                        """, [try MirrorState.exportToken(db), e.name, MirrorState.importAuthor])
                    for row in reused {
                        guard let pk = row[0].string, let old = row[1].string else { continue }
                        if let tag = row[2].string, !options.readOnly {
                            try Outgoing(db).delete(old, type: e.name, tag: tag, reason: .reusedRowid)
                        }
                        let insert = row[4].int64
                        if options.readOnly {
                            try map.keepGone(entity: e.name, pk: pk) { try map.renameReused(e, pk: pk, insertSeq: insert) }
                        } else {
                            try map.renameReused(e, pk: pk, insertSeq: insert)
                        }
                        try map.markRenamed(entity: e.name, pk: pk, upto: row[3].int64 ?? 0)
                    }
                }
                // A row the map does not know, whose derived name another row of the map holds.
                let source = baseline
                    ? "main.\(e.quotedName) t"
                    : "temp._storectl_changes c CROSS JOIN main.\(e.quotedName) t"
                let changed = baseline ? "" : "c.entity = \(quoteLiteral(e.name)) AND \(e.pkMatches("t", json: "c.pk")) AND"
                try map.nameRowsWhoseNameIsTaken(e, source: source, changed: changed)
            }
            if !baseline { try reexportChildrenOfRenamedParents(ordered) }
            // After every parent with a rowid has its name.
            for e in ordered where !e.isSurrogate && !baseline
                && e.primaryKey.contains(where: { e.reference(for: $0) != nil })
            {
                try renameReusedReferenceKeys(e)
            }
        }
    }

    /// The rows that still reference a parent renamed by this export or an interrupted one (a row deleted and
    /// another, or the same, inserted at its rowid while the references stayed: foreign keys off, or deferred and
    /// the parent inserted again in the same transaction) are exported too, though unchanged: their records name
    /// the old record, whose tombstone goes out, and every other store would delete them with it. A surrogate-keyed
    /// row is sent with its reference to the new name; a row whose key holds the reference is renamed
    /// (`renameReusedReferenceKeys`). A row no user changed is marked `repoint`: only its reference is this side's
    /// change (`Pending.repointOnly`).
    private func reexportChildrenOfRenamedParents(_ ordered: [EntityMap]) throws {
        // Almost always none: then no child table is read.
        let renamed = Set(try db.query("SELECT DISTINCT entity FROM _storectl_renamed").compactMap { $0[0].string })
        guard !renamed.isEmpty else { return }
        for child in ordered {
            for ref in child.references where renamed.contains(ref.parent) {
                try db.run("""
                    INSERT OR IGNORE INTO temp._storectl_changes(entity, pk, repoint)
                    SELECT ?1, \(child.pkJSON("t")), 1 FROM main.\(child.quotedName) t
                    WHERE t.\(quoteIdentifier(ref.column)) IN (SELECT json_extract(x.pk, '$[0]') FROM _storectl_renamed x
                                                              WHERE x.entity = ?2)
                    """, [child.name, ref.parent])
            }
        }
    }

    /// A key that holds a reference to a parent with a rowid (`links(note_id, label)`) names the parent's record.
    /// When the parent was deleted and a new parent inserted at its rowid (so it has a record name of its own, see
    /// above), a child deleted and inserted again at the same key, or brought back over its tombstone, is a child
    /// of the new parent: a new record under the name its key gives now. The old record, when live, is deleted
    /// through the outbox. So is a changed child whose parent this export (or an interrupted one) renamed: a child
    /// inserted under a parent that was deleted and inserted again at its rowid before it was ever saved, whose
    /// record an interrupted export saved under the parent's old name. (Called parent first, so the parent's new
    /// name is in the map already. A child moved to another parent changes its key, and is not concerned; a child
    /// of a merged duplicate keeps its name.)
    private func renameReusedReferenceKeys(_ e: EntityMap) throws {
        let parentRenamed = e.primaryKey.compactMap { column -> String? in
            guard let ref = e.reference(for: column) else { return nil }
            return "EXISTS (SELECT 1 FROM _storectl_renamed x WHERE x.entity = \(quoteLiteral(ref.parent))"
                + " AND x.pk = json_array(t.\(quoteIdentifier(column))))"
        }
        // As for the parents: history an interrupted export already renamed the key for is not looked at again.
        let recreated = """
            (SELECT min(CASE WHEN h.op = 'D' THEN h.seq END) < max(CASE WHEN h.op = 'I' THEN h.seq END)
             FROM _storectl_history h
             WHERE h.seq > ?2 AND h.entity = c.entity AND h.pk = c.pk AND h.author <> ?3 AND \(RecordMap.notRenamedFor))
            """
        let rows = try db.query("""
            SELECT m.pk, m.record_name, m.change_tag, m.deleted, \(e.naturalName("t")) AS wanted,
                   (SELECT max(h.seq) FROM _storectl_history h WHERE h.seq > ?2 AND h.entity = c.entity
                    AND h.pk = c.pk AND h.author <> ?3),
                   coalesce(\(recreated), 0)
            FROM temp._storectl_changes c
            JOIN _storectl_records m ON m.entity = c.entity AND m.pk = c.pk
            JOIN main.\(e.quotedName) t ON \(e.pkMatches("t", json: "c.pk"))
            WHERE c.entity = ?1 AND m.record_name IS NOT wanted
              AND (m.deleted = 1 OR \((parentRenamed + [""]).joined(separator: " OR ")) \(recreated))
            """, [e.name, try MirrorState.exportToken(db), MirrorState.importAuthor])
        for row in rows {
            guard let pk = row[0].string, let old = row[1].string, let wanted = row[4].string else { continue }
            let map = RecordMap(db)
            if let upto = row[5].int64 { try map.markRenamed(entity: e.name, pk: pk, upto: upto) }
            // The row is its old record still (only its parent's name moved): the old record's changes elsewhere
            // follow it to the new name (`followOldRecord`). A row deleted and inserted again is a new row.
            let carriedOn = row[3].int64 == 0 && row[6].int64 == 0
            if row[3].int64 == 0, let tag = row[2].string, !options.readOnly {
                try Outgoing(db).delete(old, type: e.name, tag: tag, reason: .newParent, pk: carriedOn ? pk : nil)
            }
            if options.readOnly {
                // The participant's row keeps its values and gets a record of its own; the old record is kept.
                try map.keepGone(entity: e.name, pk: pk) { try map.rename(entity: e.name, pk: pk, to: wanted) }
            } else {
                try map.rename(entity: e.name, pk: pk, to: wanted, carryingOn: carriedOn)
            }
        }
    }

    /// The mass-delete breaker: an export that deletes more than `max_delete_fraction` of the zone's live records
    /// and more than `max_delete_count` records, or that would push an empty store over a zone that holds more
    /// than `max_delete_count` records, stops before it sends anything.
    private func checkMassDelete(_ ordered: [EntityMap], baseline: Bool, after: Int64) throws {
        var deletes = 0
        for e in ordered {
            deletes += Int(try db.scalar(deletionCountSQL(e, baseline: baseline), baseline ? [] : [after])?.int64 ?? 0)
        }
        guard deletes > options.maxDeleteCount, !options.allowMassDelete,
              let zone = try cloud.zoneInfo(options.zone), zone.liveRecords > 0 else { return }
        let liveLocal = try ordered.reduce(Int64(0)) { sum, e in
            sum + (try db.scalar("SELECT count(*) FROM main.\(e.quotedName)")?.int64 ?? 0)
        }
        if Double(deletes) > options.maxDeleteFraction * Double(zone.liveRecords) || liveLocal == 0 {
            throw MassDeleteError(deletes: deletes, liveRecords: zone.liveRecords, fraction: options.maxDeleteFraction,
                                  floor: options.maxDeleteCount, emptyStore: liveLocal == 0)
        }
    }

    /// The count of the rows of `e` deleted here; incrementally, the history after `?1` (a parameter, so that the
    /// statement stays one prepared statement, not one per export token).
    private func deletionCountSQL(_ e: EntityMap, baseline: Bool) -> String {
        if baseline {
            return """
                SELECT count(*) FROM _storectl_records r WHERE r.entity = \(quoteLiteral(e.name)) AND r.deleted = 0
                AND r.change_tag IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "r.pk")))
                """
        }
        // CROSS JOIN keeps the changes as the outer loop: the cost follows the changes, not the record map.
        // Rows deleted by the orphan rule (author `import-cascade`: the children of a row another device deleted)
        // are no deletion made here: the breaker counts the rows some other author deleted.
        return """
            SELECT count(*) FROM temp._storectl_changes c CROSS JOIN _storectl_records r
            WHERE c.entity = \(quoteLiteral(e.name)) AND r.entity = c.entity AND r.pk = c.pk AND r.deleted = 0
              AND r.change_tag IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "c.pk")))
              AND EXISTS (SELECT 1 FROM main._storectl_history h WHERE h.entity = c.entity AND h.pk = c.pk
                          AND h.seq > ?1 AND h.op = 'D'
                          AND h.author NOT IN (\(quoteLiteral(MirrorState.cascadeAuthor)), \(quoteLiteral(MirrorState.importAuthor))))
            """
    }

    /// Exports one table: page after page, each saved while the next is read.
    private func exportEntity(_ e: EntityMap, baseline: Bool, serial: Int64, report: inout ExportReport,
                              progress: (Int) -> Void) throws
    {
        // Two batches are in progress at once: while the cloud saves one (on a thread of its own, through the
        // container's own connection), this thread reads the next page and records the previous batch's
        // outcomes in the store. The saves stay in order, one at a time; only the local work overlaps them.
        var inFlight: SaveFlight? = nil
        defer { inFlight?.wait() }
        // The rows that move UNIQUE values among themselves go last, in one batch (`markMovesTogether`); in a table
        // that references itself, before its deleted rows (a row of that batch may be moved away from one).
        let passes: [(together: Bool, ranks: ClosedRange<Int>?)]
        if try !baseline && markMovesTogether(e) {
            passes = e.referencesItself ? [(false, 0...1), (true, nil), (false, 2...2)] : [(false, nil), (true, nil)]
        } else {
            passes = [(false, nil)]
        }
        for (together, ranks) in passes {
            var lastKey: [Value]? = nil
            while true {
                let tPage = Trace.start()
                let (batch, nextKey) = try page(e, baseline: baseline, after: lastKey, together: together, ranks: ranks,
                                                report: &report)
                Trace.add("export.page", tPage)
                if batch.isEmpty && nextKey == nil { break }
                if atomic, let previous = inFlight {
                    // One batch at a time: a conflict in the previous one stops the export before this one is sent.
                    inFlight = nil
                    try finish(previous, next: nil, serial: serial, report: &report)
                }
                let flight = batch.isEmpty ? nil : startSave(batch, serial: serial)
                let previous = inFlight
                inFlight = flight  // waited for by the defer if what follows throws
                if let previous { try finish(previous, next: flight, serial: serial, report: &report) }
                progress(batch.count)
                guard let nextKey else { break }
                lastKey = nextKey
            }
        }
        if let previous = inFlight {
            inFlight = nil
            try finish(previous, next: nil, serial: serial, report: &report)
        }
        if baseline {
            // Rows the record map knows but the table no longer has: their deletions travel too.
            let historySeq = try MirrorState.lastHistorySeq(db)
            let rows = try db.query("""
                SELECT r.pk, r.record_name, r.change_tag FROM _storectl_records r
                WHERE r.entity = ?1 AND r.deleted = 0
                  AND NOT EXISTS (SELECT 1 FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "r.pk")))
                """, [e.name])
            var batch: [Pending] = []
            for row in rows {
                batch.append(Pending(entity: e, pk: row[0].string ?? "[]",
                                     save: RecordSave(recordName: row[1].string ?? "", recordType: e.name,
                                                      fields: "{}", deleted: true, expectedTag: row[2].string),
                                     base: nil, historySeq: historySeq))
                if batch.count >= options.batchSize {
                    try send(batch, serial: serial, report: &report)
                    batch = []
                }
            }
            try send(batch, serial: serial, report: &report)
        }
    }

    /// Whether a key, as the JSON array SQLite makes of it (`json_array`), holds a NULL: a `null` outside every
    /// string.
    static func keyHoldsNull(_ pk: String) -> Bool {
        guard pk.contains("null") else { return false }
        var inString = false, escaped = false
        let bytes = Array(pk.utf8)
        for (i, b) in bytes.enumerated() {
            if inString {
                if escaped { escaped = false } else if b == UInt8(ascii: "\\") { escaped = true }
                else if b == UInt8(ascii: "\"") { inString = false }
            } else if b == UInt8(ascii: "\"") {
                inString = true
            } else if b == UInt8(ascii: "n"), bytes[i...].starts(with: Array("null".utf8)) {
                return true
            }
        }
        return false
    }

    /// One page of rows to export, and the key to continue after (nil at the end). With `together`, every changed
    /// row marked by `markMovesTogether`, in one page; without, the other changed rows.
    private func page(_ e: EntityMap, baseline: Bool, after: [Value]?, together: Bool = false,
                      ranks: ClosedRange<Int>? = nil,
                      report: inout ExportReport) throws -> ([Pending], [Value]?)
    {
        let limit = together ? Int.max : options.batchSize
        let ranked = !baseline && !together && e.referencesItself
        // Read before the rows, so that it is never later than what they hold.
        let historySeq = try MirrorState.lastHistorySeq(db)
        // The base of what is sent: from the columns, or (a row with fields the table lacks) from its JSON.
        let base = "CASE WHEN r.extra IS NULL THEN \(e.fieldsBase("t")) ELSE \(FieldHashes.sql("(\(e.fieldsJSON("t", extra: "r.extra")))")) END"
        let statement: Statement
        var args: [any SQLBindable] = [e.name]
        if baseline {
            let keys = e.primaryKey.map { "t.\(quoteIdentifier($0))" }
            var whereClause = ""
            if let after {
                let params = after.indices.map { "?\($0 + 2)" }
                whereClause = "WHERE (\(keys.joined(separator: ", "))) > (\(params.joined(separator: ", ")))"
                args += after
            }
            statement = try db.cached("""
                SELECT \(e.pkJSON("t")), coalesce(r.record_name, \(e.derivedName("t"))), r.change_tag, r.base, r.deleted, 1,
                       \(e.fieldsJSON("t", extra: "r.extra")), r.extra, \(base),
                       \(keys.joined(separator: ", "))
                FROM main.\(e.quotedName) t
                LEFT JOIN _storectl_records r ON r.entity = ?1 AND r.pk = \(e.pkJSON("t"))
                \(whereClause) ORDER BY \(keys.joined(separator: ", ")) LIMIT \(limit)
                """)
        } else {
            // Whether the change's row is still there: its rowid, or (WITHOUT ROWID, where keys are never NULL) its
            // first key column.
            let present = e.withoutRowID ? "t.\(quoteIdentifier(e.primaryKey[0])) IS NOT NULL" : "t.rowid IS NOT NULL"
            // A table that references itself sends its new rows first and its deleted rows last (`rank`): a row
            // moved under a new parent never reaches the cloud before that parent, and an old parent's tombstone
            // never before the rows moved away from it, whatever their keys, even when the export stops between
            // two batches. Other tables go in key order (parents are whole tables before).
            var whereClause = ""
            if let after {
                whereClause = ranked ? "AND (c.rank, c.pk) > (?2, ?3)" : "AND c.pk > ?2"
                args += after
            }
            if ranked, let ranks { whereClause += " AND c.rank BETWEEN \(ranks.lowerBound) AND \(ranks.upperBound)" }
            statement = try db.cached("""
                SELECT c.pk, coalesce(r.record_name, CASE WHEN \(present) THEN \(e.derivedName("t")) END),
                       r.change_tag, r.base, r.deleted, \(present), \(e.fieldsJSON("t", extra: "r.extra")),
                       r.extra, \(base), \(ranked ? "c.rank" : "c.pk"), c.repoint, c.orphan, c.pk
                FROM temp._storectl_changes c
                LEFT JOIN main.\(e.quotedName) t ON \(e.pkMatches("t", json: "c.pk"))
                LEFT JOIN _storectl_records r ON r.entity = ?1 AND r.pk = c.pk
                WHERE c.entity = ?1 AND c.together = \(together ? 1 : 0) \(whereClause)
                ORDER BY \(ranked ? "c.rank, c.pk" : "c.pk")
                LIMIT \(together ? -1 : limit)
                """)
        }
        var batch: [Pending] = []
        var rows = 0
        var lastKey: [Value] = []
        var orphans: [String] = []
        var unsent: [(row: RowRef, name: String, reason: Outgoing.Reason)] = []
        var sent: [String] = []
        var nullKeyed = Set<String>()
        let keyCount = baseline ? e.primaryKey.count : 1
        let maxSize = options.maxRecordSize
        try statement.forEach(args) { row in
            rows += 1
            // Only the last row's key is kept: it is where the next page starts (the key columns in a baseline, the
            // rank and the key when `ranked`, else the key).
            if rows == limit {
                lastKey = ranked ? [row.column(9), row.column(12)] : (0..<keyCount).map { row.column(9 + $0) }
            }
            let pk = row.string(0) ?? "[]"
            guard let name = row.string(1) else {
                // No record stands for the key and no row is there (a row not sent, then deleted): nothing to send.
                if row.int64(5) != 1 { sent.append(pk) }
                return
            }
            if case .textBytes = row.column(0) {
                unsent.append((RowRef(entity: e.name, key: pk, reason: Outgoing.Reason.keyNotUTF8.text), name, .keyNotUTF8))
                return
            }
            let tag = row.string(2)
            let base = row.column(3).isNull ? nil : row.column(3)
            let mappedDeleted = row.int64(4) == 1
            let present = row.int64(5) == 1
            let fields = row.string(6) ?? "{}"
            let extra = row.string(7)
            let sentBase = row.column(8)
            if present {
                // Every row whose key holds NULL has the same key and record name: the first row stands for it (its
                // unchanged copy too, so that the others never overwrite it), the others cannot be sent (two saves
                // of one name are refused with the whole batch).
                if !e.isSurrogate, Self.keyHoldsNull(pk), !nullKeyed.insert(pk).inserted {
                    unsent.append((RowRef(entity: e.name, key: pk, reason: Outgoing.Reason.keyNull.text), name, .keyNull))
                    return
                }
                if !mappedDeleted && tag != nil && base == sentBase { return }  // nothing really changed
                if fields.utf8.count > maxSize {
                    unsent.append((RowRef(entity: e.name, key: pk, bytes: fields.utf8.count,
                                          reason: "its record is \(fields.utf8.count) bytes, more than max_record_size "
                                              + "(\(maxSize))"), name, .tooLarge))
                    return
                }
                sent.append(pk)
                batch.append(Pending(entity: e, pk: pk,
                                     save: RecordSave(recordName: name, recordType: e.name, fields: fields,
                                                      deleted: false, expectedTag: tag),
                                     base: base, historySeq: historySeq, extra: extra, sentBase: sentBase,
                                     repointOnly: !baseline && row.int64(10) == 1))
            } else if !mappedDeleted && tag != nil {
                sent.append(pk)
                batch.append(Pending(entity: e, pk: pk,
                                     save: RecordSave(recordName: name, recordType: e.name,
                                                      fields: try tombstoneFields(name, orphan: !baseline && row.int64(11) == 1),
                                                      deleted: true,
                                                      expectedTag: tag),
                                     base: base, historySeq: historySeq))
            } else if !mappedDeleted {
                // Named, then deleted before anything reached the cloud.
                orphans.append(pk)
                sent.append(pk)
            }
        }
        for pk in orphans {
            try RecordMap(db).removeUnsaved(entity: e.name, pk: pk)
        }
        if !unsent.isEmpty || !sent.isEmpty {
            let outgoing = Outgoing(db)
            for (row, name, reason) in unsent {
                try outgoing.unsent(entity: row.entity, pk: row.key, name: name, reason: reason, bytes: row.bytes,
                                    detail: row.reason)
            }
            try outgoing.sent(entity: e.name, pks: sent)
            report.unsent += unsent.map(\.row)
        }
        return (batch, rows < limit ? nil : lastKey)
    }

    /// Marks, among `e`'s changed rows, the ones that take a UNIQUE value (a SQL UNIQUE key or the `unique:` rule)
    /// that another changed row held in the cloud, and the rows they take it from: a swap, a value handed from a
    /// deleted row to a new one, a shift along a chain. They go in one batch after the table's other rows, and the
    /// cloud saves a batch in one transaction: split over two batches, an export stopped between them (or a
    /// conflict in the second under `merge_policy: error`) would leave two live records at one value in the cloud,
    /// which another store's import takes for duplicates and merges. Values are matched by their fingerprints; in a
    /// key whose values can be equal with other bytes (`EntityMap.looseUniqueKeys`, and a `unique:` rule, which
    /// compares as its columns' collations do), every row whose key moves goes
    /// in the batch as soon as one takes a value and another gives one up. A table whose changes fit in one batch
    /// is not looked at. Returns whether any row was marked.
    private func markMovesTogether(_ e: EntityMap) throws -> Bool {
        let keys = e.uniqueKeys(with: options.uniqueRules[e.name]).filter { $0.allSatisfy(e.fieldColumns.contains) }
        guard !keys.isEmpty,
              try db.scalar("SELECT count(*) FROM temp._storectl_changes WHERE entity = ?", [e.name])?.int64 ?? 0
                > Int64(options.batchSize)
        else { return false }
        let hasher = FieldHashes.Hasher()
        let names = try keys.map { key in
            try key.map { Array((try db.scalar("SELECT json_quote(?)", [$0])?.string ?? "").utf8) }
        }
        let present = e.withoutRowID ? "t.\(quoteIdentifier(e.primaryKey[0])) IS NOT NULL" : "t.rowid IS NOT NULL"
        // Per key: the value each changed row's record holds in the cloud (from the map's base), when it moves.
        var held: [[[UInt8]: String]] = Array(repeating: [:], count: keys.count)
        var taking: [(key: Int, value: [UInt8], pk: String)] = []
        for row in try db.query("""
            SELECT c.pk, CASE WHEN r.deleted = 0 THEN r.base END,
                   \(keys.map { "CASE WHEN \(present) THEN \(e.keyBase($0, "t")) END" }.joined(separator: ", "))
            FROM temp._storectl_changes c
            LEFT JOIN main.\(e.quotedName) t ON \(e.pkMatches("t", json: "c.pk"))
            LEFT JOIN _storectl_records r ON r.entity = ?1 AND r.pk = c.pk
            WHERE c.entity = ?1
            """, [e.name])
        {
            guard let pk = row[0].string else { continue }
            let base: [UInt8]? = if case .blob(let bytes) = row[1] { bytes } else { nil }
            for k in keys.indices {
                let now: [UInt8]? = if case .blob(let bytes) = row[2 + k] { bytes } else { nil }
                let was = try base.flatMap { try hasher.entries(in: $0, names: names[k]) }
                guard now != was else { continue }  // the key stays where it was
                if let was { held[k][was] = pk }
                if let now { taking.append((k, now, pk)) }
            }
        }
        var together: Set<String> = []
        for (k, value, pk) in taking {
            // A `unique:` rule compares as the column does, whose collation the fingerprints cannot tell.
            if e.looseUniqueKeys.contains(keys[k]) || options.uniqueRules[e.name]?.columns == keys[k] {
                let givers = Set(held[k].values)
                if givers.contains(where: { $0 != pk }) { together.formUnion(givers); together.insert(pk) }
            } else if let from = held[k][value], from != pk {
                together.insert(pk)
                together.insert(from)
            }
        }
        for pk in together {
            try db.run("UPDATE temp._storectl_changes SET together = 1 WHERE entity = ?1 AND pk = ?2", [e.name, pk])
        }
        return !together.isEmpty
    }

    /// Sends the tombstones of records that no local row stands for (the outgoing deletes): rows deleted here whose
    /// rowid (or parent's rowid) a new row took, losers of a UNIQUE constraint, orphaned children of a deleted
    /// parent, own records a crash left behind.
    ///
    /// A row deleted here while another took its rowid is a delete a user made: its tombstone, meeting a newer
    /// server record, goes through the merge policy, as any local delete does (the server's edit stands under
    /// `server-wins` and `property-server-wins`, and the import brings the row back at a rowid of its own; `error`
    /// reports the conflict). Except when a local row holds one of the record's UNIQUE values (the row was
    /// re-created as itself): the old record must never stay live beside the new one, which stands for it, so the
    /// tombstone goes. The other reasons are decisions storectl made (a child of a re-inserted parent goes with
    /// the old parent, a UNIQUE loser, an orphan: a delete wins) and are sent over a newer record.
    /// - Throws: `ConflictError` under `merge_policy: error`, after the rest of the outbox was sent.
    private func sendOutbox(serial: Int64, report: inout ExportReport) throws {
        let outgoing = Outgoing(db)
        let entries = try outgoing.deletes()
        guard !entries.isEmpty else { return }
        var saves: [RecordSave] = []
        var userDeletes: Set<String> = []
        for entry in entries {
            saves.append(RecordSave(recordName: entry.recordName, recordType: entry.recordType,
                                    fields: try tombstoneFields(entry.recordName, orphan: entry.reason == .parentDeleted),
                                    deleted: true,
                                    expectedTag: entry.changeTag))
            if entry.reason.isUserDelete { userDeletes.insert(entry.recordName) }
        }
        // The children renamed for their new parent, by their old record's name.
        let carried = Dictionary(entries.compactMap { entry in entry.pk.map { (entry.recordName, ($0, entry)) } },
                                 uniquingKeysWith: { a, _ in a })
        var conflicts: [ConflictReport] = []
        let historySeq = try MirrorState.lastHistorySeq(db)
        var round = 0
        while !saves.isEmpty {
            round += 1
            // The tombstones must be in the cloud before any row is exported (see above): a record still
            // changing after the last attempt stops the export, and the entries stay for the next sync.
            if round > CloudRounds.attempts { throw CloudRounds.busy }
            let outcomes = try cloud.save(zone: options.zone, saves, device: device,
                                          mark: mark(serial: serial, historySeq: historySeq),
                                          schemaVersion: schemaVersion, atomic: atomic)
            var again: [RecordSave] = []
            // A renamed child that follows its old record changes its row here: the cloud's change, not a user's.
            try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
              try UserTriggers.suspended(db, tracked: carried.isEmpty ? [] : entities.map(\.name)) {
                let codec = FieldCodec(db: db)
                let applier = carried.isEmpty ? nil
                    : try RecordApplier(db: db, entities: Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) }),
                                        policy: options.mergePolicy)
                for (save, outcome) in zip(saves, outcomes) {
                    switch outcome {
                    case .notSaved:
                        again.append(save)  // the batch was refused whole: sent again unless a conflict stops it
                    case .saved(_, let seq):
                        report.deleted += 1
                        try MirrorState.setOwnSeq(db, container: cloud.container, zone: options.zone, seq)
                        try outgoing.remove(save.recordName)
                    case .conflict(let server):
                        if let server, server.modifiedBy != device, let (pk, entry) = carried[save.recordName],
                           let applier
                        {
                            if let conflict = try followOldRecord(entry, pk: pk, server: server, applier: applier,
                                                                  codec: codec)
                            {
                                conflicts.append(conflict)
                                continue
                            }
                            report.conflictsResolved += 1
                        }
                        guard let server, !server.deleted else {
                            // Gone or deleted already: nothing left to do.
                            try outgoing.remove(save.recordName)
                            continue
                        }
                        if userDeletes.contains(save.recordName), server.modifiedBy != device,
                           try !heldUniqueValue(of: server)
                        {
                            // A delete made here meets an edit made elsewhere: the merge policy decides.
                            switch options.mergePolicy.decide(local: MergeSide(deleted: true, changed: []),
                                                              server: MergeSide(deleted: false, changed: []), columns: []) {
                            case .deleted:
                                report.conflictsResolved += 1
                            case .live:
                                // The server's record stands; the import brings it here as a row of its own.
                                report.conflictsResolved += 1
                                try outgoing.remove(save.recordName)
                                continue
                            case .fail:
                                conflicts.append(ConflictReport(entity: save.recordType, recordName: save.recordName,
                                                                localColumns: [], serverDeleted: false))
                                continue
                            }
                        }
                        var retry = save
                        retry.expectedTag = server.changeTag
                        again.append(retry)
                    }
                }
              }
            }
            // Under `error` a conflict stops the export: nothing else of its batch is sent.
            if !conflicts.isEmpty { break }
            saves = again
        }
        if !conflicts.isEmpty { throw ConflictError(conflicts: conflicts) }
    }

    /// A child renamed for its new parent (`renameReusedReferenceKeys`) is its old record under a new name. When
    /// another device changed or deleted the old record since this store last saw it, the row takes that change
    /// before its new record is read, as the old record would have: by the merge policy over the row's own changes
    /// here, and whatever the policy when no user changed the row here (only its parent's name moved: the server's
    /// values stand, and its deletion). The key's columns (the re-pointed reference among them) stay this side's.
    /// Returns the conflict under `merge_policy: error`; the old record's tombstone goes either way.
    private func followOldRecord(_ entry: Outgoing.Delete, pk: String, server: CloudRecord, applier: RecordApplier,
                                 codec: FieldCodec) throws -> ConflictReport?
    {
        guard let e = entities.first(where: { $0.name == entry.recordType }), try applier.rowExists(e, pk: pk) else {
            return nil
        }
        let base = try RecordMap(db).entry(entity: e.name, pk: pk)?.base
        let key = Set(e.primaryKey)
        var local = try applier.localChanges(e, pk: pk, against: base) ?? MergeSide(deleted: false, changed: [])
        local.changed.subtract(key)
        let serverSide = MergeSide(deleted: server.deleted, changed: server.deleted ? [] :
            Set(try codec.differing(base: base, server.fields, columns: e.fieldColumns)).subtracting(key))
        let policy = local.changed.isEmpty ? MergePolicy.propertyServerWins : options.mergePolicy
        switch policy.decide(local: local, server: serverSide, columns: e.fieldColumns,
                             uniqueKeys: e.mergeKeys(with: options.uniqueRules[e.name])) {
        case .fail:
            return ConflictReport(entity: e.name, recordName: entry.recordName, localColumns: local.changed.sorted(),
                                  serverDeleted: server.deleted)
        case .deleted:
            // Its new record was never saved: the page finds the row gone and forgets the name.
            try applier.deleteRow(e, pk: pk)
        case .live(let take):
            guard !server.deleted else { return nil }  // the row stays: its new record brings it back
            let values = try serverValues(server, of: e, pk: pk, take: take.subtracting(key), applier: applier,
                                          codec: codec)
            if !values.values.isEmpty { try applier.update(e, pk: pk, values: values.values) }
            if let extra = values.extra { try RecordMap(db).setExtra(entity: e.name, pk: pk, extra: extra) }
        }
        return nil
    }

    /// Under `merge_policy: error` a batch is saved whole or not at all, and one batch at a time: a conflict leaves
    /// the cloud without any other record of its batch, and no later batch is sent. Two halves of a swap of UNIQUE
    /// values in one batch never land one without the other.
    private var atomic: Bool { options.mergePolicy == .error }

    /// The item saved again as a tombstone over the server's record.
    private func tombstone(_ item: Pending, over server: CloudRecord) -> Pending {
        var again = item
        again.save = RecordSave(recordName: item.save.recordName, recordType: item.entity.name, fields: "{}",
                                deleted: true, expectedTag: server.changeTag)
        again.base = .text(server.fields)
        again.takeServer = []
        return again
    }

    /// Whether a parent that the record's `fields` reference is missing here: true when the row is absent while the
    /// record map knows it (deleted here, or its deletion came in), nil when the parent was never seen here (not
    /// imported yet), false when every parent is here. A reference of the row to itself (a root that is its own
    /// parent) names no parent: the row's own deletion is the local side of the conflict, which the policy decides.
    private func parentGone(_ e: EntityMap, fields: String, of item: Pending, applier: RecordApplier,
                            codec: FieldCodec) throws -> Bool?
    {
        let decoded = try codec.decodeRecord(fields, columns: e.fieldColumns)
        var unknown = false
        for fk in e.foreignKeys {
            guard let parent = entities.first(where: { $0.name == fk.parentTable }) else { continue }
            if fk.columns.count == 1, case .ref(let name)? = decoded.values[fk.columns[0]] {
                guard let name, try applier.parentKey(parent: parent.name, recordName: name) == nil else { continue }
                if parent.name == e.name, try applier.sameRecord(name, item.save.recordName) { continue }
                if try RecordMap(db).entry(named: name)?.entity == parent.name { return true }
                unknown = true
                continue
            }
            var values: [Value] = []
            for column in fk.columns {
                guard case .value(let v)? = decoded.values[column], !v.isNull else { break }
                values.append(v)
            }
            guard values.count == fk.columns.count else { continue }  // a NULL reference names no parent
            let parentColumns = fk.parentColumns.enumerated().map { i, column in
                column ?? (i < parent.primaryKey.count ? parent.primaryKey[i] : "")
            }
            let match = parentColumns.enumerated().map { "p.\(quoteIdentifier($1)) = ?\($0 + 1)" }
                .joined(separator: " AND ")
            if try db.scalar("SELECT 1 FROM main.\(parent.quotedName) p WHERE \(match) LIMIT 1",
                             values.map { $0 as any SQLBindable }) != nil
            {
                continue
            }
            if parentColumns == parent.primaryKey {
                let key = try applier.canonicalKey(parent, values: values)
                if parent.name == e.name && key == item.pk { continue }  // the row itself
                if try RecordMap(db).entry(entity: parent.name, pk: key) != nil { return true }
            } else if try deletedInACascade(e, pk: item.pk, parent: parent) {
                // Named by other columns than its key (`REFERENCES folders(code)`): the record map keeps no values
                // to find that parent by, but the row went in one run of deletions with a row of the parent's
                // table (an `ON DELETE` cascade), and no parent row holds those values here.
                return true
            }
            unknown = true
        }
        return unknown ? nil : false
    }

    /// Whether the row's deletion here, since the last export, is in one run of deletions (nothing but deletes in
    /// the history between them) with a deletion of a row of `parent`: how an `ON DELETE CASCADE` writes history.
    private func deletedInACascade(_ e: EntityMap, pk: String, parent: EntityMap) throws -> Bool {
        try db.scalar("""
            WITH c AS (SELECT max(seq) AS seq FROM _storectl_history
                       WHERE seq > ?4 AND entity = ?1 AND pk = ?2 AND op = 'D' AND author <> ?5)
            SELECT 1 FROM _storectl_history p, c
            WHERE c.seq IS NOT NULL AND p.seq > ?4 AND p.entity = ?3 AND p.op = 'D' AND p.author <> ?5
              AND NOT EXISTS (SELECT 1 FROM _storectl_history x
                              WHERE x.seq BETWEEN min(p.seq, c.seq) AND max(p.seq, c.seq) AND x.op <> 'D')
            LIMIT 1
            """, [e.name, pk, parent.name, try MirrorState.exportToken(db), MirrorState.importAuthor]) != nil
    }

    /// Whether a local row holds the values `record` has for one of its table's UNIQUE keys (schema constraints
    /// and `unique:` rules), a reference compared as the parent's key here (`RecordApplier.keyValues`); NULLs
    /// never collide, and a reference to a parent not here matches no row.
    private func heldUniqueValue(of record: CloudRecord) throws -> Bool {
        guard let e = entities.first(where: { $0.name == record.recordType }) else { return false }
        let keys = e.uniqueKeys(with: options.uniqueRules[e.name])
        guard !keys.isEmpty else { return false }
        let decoded = try FieldCodec(db: db).decodeRecord(record.fields, columns: e.fieldColumns)
        let applier = try RecordApplier(db: db, entities: Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) }),
                                        policy: options.mergePolicy)
        let resolved = try applier.keyValues(of: decoded, entity: e)
        for key in keys {
            let values = key.compactMap { resolved[$0] }
            guard values.count == key.count, !values.contains(where: \.isNull) else { continue }
            // As the key's index compares (a `unique:` rule: as its columns do).
            let match = key.map { e.uniqueEquals(key, column: $0, "t.\(quoteIdentifier($0))", "?") }
                .joined(separator: " AND ")
            if try db.scalar("SELECT 1 FROM main.\(e.quotedName) t WHERE \(match) LIMIT 1",
                             values.map { $0 as any SQLBindable }) != nil
            {
                return true
            }
        }
        return false
    }

    /// The fields of the tombstone of record `name`: `{}`, or `{"$alias": WINNER}` when the record was merged into
    /// another as a duplicate, so that other devices re-point its children instead of deleting them.
    /// `orphan`: the row went by the orphan rule (its parent was deleted on another device), not by a user's delete
    /// here: `{"$orphan": true}` tells the other devices so (`Exporter.resolve`: a row sent again only for its
    /// re-pointed reference is not deleted by it).
    private func tombstoneFields(_ name: String, orphan: Bool = false) throws -> String {
        guard let target = try RecordMap(db).aliasTarget(of: name) else { return orphan ? RecordSave.orphanTombstone : "{}" }
        return try db.scalar("SELECT json_object('$alias', ?)", [target])?.string ?? "{}"
    }

    private func mark(serial: Int64, historySeq: Int64) -> ExportMark {
        ExportMark(serial: serial, historySeq: historySeq, time: Int64(Date().timeIntervalSince1970 * 1000))
    }

    // MARK: Saving

    /// A batch being saved by the cloud on a thread of its own.
    private final class SaveFlight: @unchecked Sendable {
        let batch: [Pending]
        private let done = DispatchSemaphore(value: 0)
        private var result: Result<[SaveOutcome], any Error> = .success([])
        private var waited = false

        init(batch: [Pending]) { self.batch = batch }

        /// Runs `save` on `queue`, a serial queue: saves run one at a time, in the order they were started.
        func start(on queue: DispatchQueue, _ save: @escaping @Sendable () throws -> [SaveOutcome]) {
            queue.async {
                self.result = Result { try save() }
                self.done.signal()
            }
        }

        /// Waits for the save to end (once; later calls return at once).
        func wait() {
            if waited { return }
            done.wait()
            waited = true
        }

        /// The outcomes, after waiting for them.
        func outcomes() throws -> [SaveOutcome] {
            wait()
            return try result.get()
        }
    }

    /// Starts saving `batch` in the background.
    private func startSave(_ batch: [Pending], serial: Int64) -> SaveFlight {
        Failpoint.hit("export.before-save")
        let flight = SaveFlight(batch: batch)
        let box = CloudBox(cloud: cloud)
        let zone = options.zone, device = device, saves = batch.map(\.save), schemaVersion = schemaVersion,
            atomic = atomic
        let mark = mark(serial: serial, historySeq: batch.map(\.historySeq).min() ?? 0)
        flight.start(on: saveQueue) {
            let tSave = Trace.start()
            defer { Trace.add("export.cloud-save", tSave) }
            return try box.cloud.save(zone: zone, saves, device: device, mark: mark, schemaVersion: schemaVersion,
                                      atomic: atomic)
        }
        return flight
    }

    /// Records the outcomes of `flight` and resolves its conflicts; a retry waits for `next` first, so that only
    /// one save talks to the cloud at a time.
    private func finish(_ flight: SaveFlight, next: SaveFlight?, serial: Int64, report: inout ExportReport) throws {
        let outcomes: [SaveOutcome]
        do {
            outcomes = try flight.outcomes()
        } catch {
            next?.wait()
            throw error
        }
        Failpoint.hit("export.after-save")
        let retry = try record(flight.batch, outcomes: outcomes, report: &report)
        if !retry.isEmpty {
            next?.wait()
            try send(retry, serial: serial, report: &report, round: 2)
        }
    }

    /// Saves a batch, resolves its conflicts, and records the outcome in one local transaction per round.
    private func send(_ batch: [Pending], serial: Int64, report: inout ExportReport, round firstRound: Int = 1) throws {
        var work = batch
        var round = firstRound - 1
        while !work.isEmpty {
            round += 1
            if round > CloudRounds.attempts { throw CloudRounds.busy }
            Failpoint.hit("export.before-save")
            let tSave = Trace.start()
            let outcomes = try cloud.save(zone: options.zone, work.map(\.save), device: device,
                                          mark: mark(serial: serial, historySeq: work.map(\.historySeq).min() ?? 0),
                                          schemaVersion: schemaVersion, atomic: atomic)
            Trace.add("export.cloud-save", tSave)
            Failpoint.hit("export.after-save")
            work = try record(work, outcomes: outcomes, report: &report)
        }
    }

    /// Records the outcomes of one save in one local transaction, resolving conflicts by the merge policy.
    /// Returns what must be saved again (merges, and saves whose server record vanished).
    private func record(_ work: [Pending], outcomes: [SaveOutcome], report: inout ExportReport) throws -> [Pending] {
        let codec = FieldCodec(db: db)
        let tLocal = Trace.start()
        defer { Trace.add("export.local-commit", tLocal) }
        var retry: [Pending] = []
        var conflicts: [ConflictReport] = []
        var importFirst: ImportFirstError?
        var ownSeq: Int64 = 0
        // Local rows changed here (merges, the server's side of a conflict) are the cloud's changes.
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            try UserTriggers.suspended(db, tracked: entities.map(\.name)) {
                let applier = try RecordApplier(db: db, entities: Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) }),
                                                policy: options.mergePolicy)
                for (item, outcome) in zip(work, outcomes) {
                    switch outcome {
                    case .notSaved:
                        // Refused with its atomic batch: saved again with the others, unless a conflict of the
                        // batch stops the export (then it stays pending, its history unexported).
                        retry.append(item)
                    case .saved(let tag, let seq):
                        ownSeq = max(ownSeq, seq)
                        try record(item, tag: tag, applier: applier, codec: codec)
                        if item.save.deleted { report.deleted += 1 } else { report.saved += 1 }
                    case .conflict(let server):
                        if let server, server.modifiedBy == device, server.deleted == item.save.deleted,
                           item.save.deleted || server.fields == item.save.fields
                        {
                            // Our own earlier write, saved before a crash: nothing to resolve.
                            ownSeq = max(ownSeq, server.seq)
                            try record(item, tag: server.changeTag, applier: applier, codec: codec)
                            if item.save.deleted { report.deleted += 1 } else { report.saved += 1 }
                            continue
                        }
                        guard let server else {
                            var again = item
                            again.save.expectedTag = nil
                            retry.append(again)
                            continue
                        }
                        if !item.save.deleted, item.save.expectedTag == nil, item.entity.isSurrogate,
                           let inserted = try insertTime(item),
                           server.deleted
                               ? Double(inserted) > server.modifiedAt * 1000 || inserted > applier.restoredAt ?? Int64.max
                               : server.modifiedBy != device && inserted > applier.restoredAt ?? Int64.max
                        {
                            // A new row whose derived name belongs to a record deleted before the row existed (its
                            // rowid was reused, here or in an older copy of this store), or, on a restored copy, a
                            // row inserted after the later self's last export (the record is the later self's row,
                            // whoever deleted, merged or edited it since; the import brings it back as a row of its
                            // own): not that record. It gets a new name of its own. (After a crash, the store's own
                            // save under the name, edited elsewhere since, is in the record map: `Reconciler`.)
                            var again = item
                            again.save.recordName = try freshName(item)
                            retry.append(again)
                            continue
                        }
                        if server.deleted, item.save.deleted, let target = try applier.aliasTarget(of: server),
                           try RecordApplier.aliasTarget(db, tombstone: item.save.fields, of: item.save.recordName) == nil,
                           try applier.localChanges(item.entity, pk: item.pk)?.deleted == true
                        {
                            // A row deleted here whose record another device merged into `target` as a duplicate
                            // before this store saw the merge: the row is `target` now, and the delete is its
                            // delete (else `target` would arrive at the deleted key and bring the row back). The
                            // tombstone goes to `target`, and meets it as any delete meets a live record: the merge
                            // policy decides.
                            try applier.alias(item.save.recordName, to: target, entity: item.entity)
                            if work.contains(where: { $0.save.recordName == target })
                                || retry.contains(where: { $0.save.recordName == target })
                            {
                                // The batch saves `target` already (its own row's change here, or another merged
                                // copy's delete): that save says what becomes of it, and this record is done.
                                try markSaved(item, tag: server.changeTag, base: nil, extra: nil, deleted: true)
                                continue
                            }
                            var again = item
                            again.save.recordName = target
                            again.save.expectedTag = nil
                            retry.append(again)
                            continue
                        }
                        if server.deleted, item.save.deleted {
                            // Deleted on both sides: nothing to resolve.
                            try markSaved(item, tag: server.changeTag, base: nil, extra: nil, deleted: true)
                            continue
                        }
                        switch try resolve(item, server: server, applier: applier, codec: codec) {
                        case .failed(let conflict): conflicts.append(conflict)
                        case .resolved: report.conflictsResolved += 1
                        case .saveAgain(let again):
                            report.conflictsResolved += 1
                            retry.append(again)
                        case .importFirst(let error):
                            importFirst = importFirst ?? error
                        }
                    }
                }
                if ownSeq > 0 { try MirrorState.setOwnSeq(db, container: cloud.container, zone: options.zone, ownSeq) }
            }
        }
        Failpoint.hit("export.after-batch-commit")
        if !conflicts.isEmpty { throw ConflictError(conflicts: conflicts) }
        // The export token stays where it was: the next export (after the import) sends this row, and finds the
        // rows recorded here already saved.
        if let importFirst { throw importFirst }
        return retry
    }

    /// When the row of `item` was inserted here (its latest insert in history), in milliseconds.
    private func insertTime(_ item: Pending) throws -> Int64? {
        try db.scalar("""
            SELECT max(ts) FROM _storectl_history WHERE entity = ? AND pk = ? AND op = 'I' AND author <> ?
            """, [item.entity.name, item.pk, MirrorState.importAuthor])?.int64
    }

    /// Gives the row of `item` a new record name, stored before it is saved (a replay after a crash uses it).
    private func freshName(_ item: Pending) throws -> String {
        let e = item.entity
        let name = try db.scalar("SELECT \(e.surrogateName("json_extract(?1, '$[0]')")) || '.' || lower(hex(randomblob(6)))",
                                 [item.pk])?.string ?? item.save.recordName + ".1"
        try RecordApplier.setMap(db, entity: e.name, pk: item.pk, name: name, tag: nil, base: nil, deleted: false)
        return name
    }

    private enum Resolution {
        case failed(ConflictReport)
        case resolved
        case saveAgain(Pending)
        /// Left to the import (`ImportFirstError`): nothing is saved or recorded for it in this export.
        case importFirst(ImportFirstError)
    }

    /// A save that met a newer server record: the merge policy decides (`MergePolicy.decide`, the same decision an
    /// import makes), column by column.
    private func resolve(_ item: Pending, server: CloudRecord, applier: RecordApplier, codec: FieldCodec) throws -> Resolution
    {
        let e = item.entity
        if server.deleted, let target = try applier.aliasTarget(of: server) {
            // Not a deletion: another device merged this record into `target` as a duplicate. The row gives its
            // children to the winner's row when that is here; otherwise it waits for it (the same rule merges them
            // when it arrives).
            try applier.alias(item.save.recordName, to: target, entity: e)
            if let winner = try db.scalar("SELECT pk FROM _storectl_records WHERE \(RecordMap.named("?1")) AND +entity = ? "
                                            + "AND deleted = 0", [target, e.name])?.string,
               winner != item.pk, try applier.rowExists(e, pk: winner)
            {
                try applier.repoint(e, from: item.pk, to: winner)
                if try applier.rowExists(e, pk: item.pk) { try applier.deleteRow(e, pk: item.pk) }
                try markSaved(item, tag: server.changeTag, base: nil, extra: nil, deleted: true)
            } else {
                try markSaved(item, tag: server.changeTag, base: item.base, extra: item.extra, deleted: false)
            }
            return .resolved
        }
        var local = try applier.localChanges(e, pk: item.pk)
            ?? MergeSide(deleted: item.save.deleted, changed: item.save.deleted ? [] : Set(e.fieldColumns))
        // References that name their parent's record by another name than the base does, though no user changed
        // them here: the parent was renamed (a new row at its reused rowid, `renameReusedKeys`), and the name the
        // server's record holds is the one this store's outgoing queue deletes. They stay this side's under every
        // policy, unless the server moved the row to another parent.
        var repointed: Set<String> = []
        if !local.deleted, !local.recreated, !item.save.deleted, item.base != nil {
            // A column whose value is the base's is no change of this side: its history may be older than the base
            // (a save of an interrupted export, adopted since: `Reconciler`), or a value changed and changed back.
            let differing = Set(try codec.differing(base: item.base, item.save.fields, columns: e.fieldColumns))
            repointed = differing.filter { e.reference(for: $0) != nil }.subtracting(local.changed)
            local.changed.formIntersection(differing)
            local.changed.formUnion(repointed)
        }
        let serverSide = MergeSide(deleted: server.deleted, changed: server.deleted ? [] :
            Set(try codec.differing(base: item.base, server.fields, columns: e.fieldColumns)))
        repointed.subtract(serverSide.changed)
        let holdsLocal = try !local.deleted && !server.deleted && !item.save.deleted
            && codec.differing(item.save.fields, server.fields, columns: local.changed.subtracting(repointed).sorted())
                .isEmpty
        let unique = e.mergeKeys(with: options.uniqueRules[e.name])
        if item.repointOnly, !item.save.deleted, server.deleted, server.modifiedBy != device,
           server.fields == RecordSave.orphanTombstone
        {
            // Deleted elsewhere by the orphan rule: its old parent's tombstone (this store's rename, sent before
            // the row's re-point) reached that device first. The row is under its new parent: it lives on.
            var again = item
            again.save.expectedTag = server.changeTag
            again.takeServer = []
            return .saveAgain(again)
        }
        // A row sent only for its re-pointed reference keeps the server's record but for that reference, and
        // follows its delete: the property rule that keeps the server's value wherever it changed one.
        let policy = item.repointOnly && !item.save.deleted ? MergePolicy.propertyServerWins : options.mergePolicy
        switch policy.decide(local: local, server: serverSide, columns: e.fieldColumns,
                             serverHoldsLocalValues: holdsLocal, uniqueKeys: unique) {
        case .fail:
            return .failed(ConflictReport(entity: e.name, recordName: item.save.recordName,
                                          localColumns: local.changed.sorted(), serverDeleted: server.deleted))
        case .deleted:
            if server.deleted {
                if applier.cascadingParents.contains(e.name), try applier.rowExists(e, pk: item.pk) {
                    // The server's tombstone stands, but deleting the row here, now, would carry its `ON DELETE`
                    // action to children that moved to another row in the cloud and whose moves this store has not
                    // imported yet: the import deletes it, after those moves (held back until the import settles).
                    return .importFirst(ImportFirstError(entity: e.name, recordName: item.save.recordName,
                                                         why: "was deleted in the cloud while this store changed "
                                                            + "it, and its deletion must follow the cloud's other "
                                                            + "changes to its children"))
                }
                // The server's tombstone stands: the local row goes too.
                if try applier.rowExists(e, pk: item.pk) { try applier.deleteRow(e, pk: item.pk) }
                try markSaved(item, tag: server.changeTag, base: nil, extra: nil, deleted: true)
                return .resolved
            }
            return .saveAgain(tombstone(item, over: server))
        case .live(var take):
            take.subtract(repointed)
            if item.save.deleted, !server.deleted,
               try parentGone(e, fields: server.fields, of: item, applier: applier, codec: codec) == true
            {
                // The row was deleted here with its parent (a delete wins): the server's edit cannot bring it back
                // under a parent that is gone. The tombstone goes over the edit, as the orphan rule has it on
                // every other store.
                return .saveAgain(tombstone(item, over: server))
            }
            if server.deleted {
                // The local row wins over the tombstone: save it again.
                var again = item
                again.save.expectedTag = server.changeTag
                again.save.deleted = false
                again.takeServer = []
                if item.save.deleted { return .resolved }  // (cannot happen: a local delete decides .deleted)
                return .saveAgain(again)
            }
            if try takesHeldUniqueValue(item, server: server, take: take, applier: applier, codec: codec) {
                return .importFirst(ImportFirstError(entity: e.name, recordName: item.save.recordName))
            }
            if importFollows, try takesParentNotHereYet(item, server: server, take: take, applier: applier, codec: codec) {
                // The row cannot take that reference now, and kept under its old parent it would go with that
                // parent's tombstone if the same change deleted it. The import brings the parent and meets the
                // record with the row's changes here (by the same policy); the export after it sends the rest.
                return .importFirst(ImportFirstError(entity: e.name, recordName: item.save.recordName,
                                                     why: "was moved in the cloud under a parent this store has "
                                                        + "not imported yet"))
            }
            // Start from the server's record (its fields this store lacks included), put the local values of the
            // columns the local side wins.
            let localWins = Set(e.fieldColumns).subtracting(take)
            let merged = item.save.deleted
                ? server.fields
                : try codec.overlay(server.fields, with: item.save.fields, columns: e.fieldColumns.filter(localWins.contains))
            let same = try item.save.deleted || codec.differing(merged, server.fields, columns: e.fieldColumns).isEmpty
            if same {
                // The outcome is the server's record: bring the local row to it; nothing to save.
                try applyServer(server, to: item, take: Set(e.fieldColumns), applier: applier, codec: codec)
                return .resolved
            }
            var again = item
            again.save = RecordSave(recordName: item.save.recordName, recordType: e.name, fields: merged,
                                    deleted: false, expectedTag: server.changeTag)
            again.base = .text(server.fields)
            again.takeServer = take
            return .saveAgain(again)
        }
    }

    /// Whether the server's record, in the columns `take`, moves the row of `item` to a parent whose record this
    /// store has not imported yet (not in the record map, not waiting or set aside: the next import brings it).
    /// A reference that travels as the parent's key (a natural-key parent, a UNIQUE column) names a parent not
    /// here yet when no local row holds the values the row would take.
    private func takesParentNotHereYet(_ item: Pending, server: CloudRecord, take: Set<String>,
                                       applier: RecordApplier, codec: FieldCodec) throws -> Bool
    {
        let e = item.entity
        let byKey = e.foreignKeys.filter { fk in
            fk.columns.allSatisfy { e.reference(for: $0) == nil } && fk.columns.contains(where: take.contains)
        }
        let moved = try codec.differing(item.save.fields, server.fields, columns: e.fieldColumns.filter { column in
            take.contains(column) && (e.reference(for: column) != nil || byKey.contains { $0.columns.contains(column) })
        })
        guard !moved.isEmpty else { return false }
        let decoded = try codec.decodeRecord(server.fields, columns: e.fieldColumns)
        for fk in byKey where fk.columns.contains(where: moved.contains) {
            let referenced = fk.parentColumns.compactMap { $0 }
            guard referenced.count == fk.columns.count else { continue }
            // The values the row would hold: the server's in the columns it takes, the row's own in the others.
            let own = try db.query("SELECT " + fk.columns.map { "t.\(quoteIdentifier($0))" }.joined(separator: ", ")
                                       + " FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "?1"))",
                                   [item.pk]).first?.values ?? []
            var values: [Value] = []
            for (i, column) in fk.columns.enumerated() {
                if take.contains(column) {
                    guard case .value(let v)? = decoded.values[column] else { break }
                    values.append(v)
                } else if i < own.count {
                    values.append(own[i])
                }
            }
            guard values.count == fk.columns.count, !values.contains(where: \.isNull) else { continue }
            let match = referenced.enumerated().map { "p.\(quoteIdentifier($1)) = ?\($0 + 1)" }.joined(separator: " AND ")
            if try db.scalar("SELECT 1 FROM main.\(quoteIdentifier(fk.parentTable)) p WHERE \(match) LIMIT 1", values) == nil {
                return true
            }
        }
        for column in moved where e.reference(for: column) != nil {
            guard case .ref(let name?)? = decoded.values[column] else { continue }
            if try RecordMap(db).entry(named: name) == nil,
               try !Inbox(db).holds(name, in: Inbox.State.allCases),
               try !applier.sameRecord(name, server.recordName)
            {
                return true
            }
        }
        return false
    }

    /// Whether bringing the local row of `item` to the server's values of the columns `take` would give it a UNIQUE
    /// value another local row holds (the export then leaves the row to the import: `ImportFirstError`).
    private func takesHeldUniqueValue(_ item: Pending, server: CloudRecord, take: Set<String>,
                                      applier: RecordApplier, codec: FieldCodec) throws -> Bool
    {
        let e = item.entity
        let keys = e.uniqueKeys.filter { $0.contains(where: take.contains) }
        guard !keys.isEmpty else { return false }
        let decoded = try codec.decodeRecord(server.fields, columns: e.fieldColumns)
        for key in keys {
            let local = try db.query("SELECT " + key.map { "t.\(quoteIdentifier($0))" }.joined(separator: ", ")
                                         + " FROM \(e.quotedName) t WHERE \(e.pkMatches("t", json: "?1"))", [item.pk])
                .first?.values ?? key.map { _ in Value.null }
            var values: [Value] = []
            for (i, column) in key.enumerated() {
                guard take.contains(column), let field = decoded.values[column] else {
                    values.append(local[i])
                    continue
                }
                switch field {
                case .value(let v): values.append(v)
                case .ref(let name):
                    guard let name, let ref = e.reference(for: column) else { values.append(.null); continue }
                    // A parent this store has not imported yet (a list made with the move): the import brings it,
                    // and the row takes the whole key then, never the rest of it alone.
                    guard let key = try applier.parentKey(parent: ref.parent, recordName: name) else { return true }
                    values.append(key)
                }
            }
            if values.contains(where: \.isNull) || values == local { continue }
            let match = key.enumerated().map {
                e.uniqueEquals(key, column: $1, "t.\(quoteIdentifier($1))", "?\($0 + 2)")
            }.joined(separator: " AND ")
            if try db.scalar("SELECT 1 FROM \(e.quotedName) t WHERE \(match) AND NOT (\(e.pkMatches("t", json: "?1"))) "
                                + "LIMIT 1", [Value.text(item.pk)] + values) != nil
            {
                return true
            }
        }
        return false
    }

    /// Brings the local row of `item` to `record`'s values for the columns `take`, and maps the row to it.
    private func applyServer(_ record: CloudRecord, to item: Pending, take: Set<String>, applier: RecordApplier,
                             codec: FieldCodec) throws
    {
        let e = item.entity
        var (values, extra) = try serverValues(record, of: e, pk: item.pk, take: take, applier: applier, codec: codec)
        if try applier.rowExists(e, pk: item.pk) {
            try applier.update(e, pk: item.pk, values: values)
        } else {
            if e.isSurrogate, let rowid = RecordApplier.rowID(item.pk) { values[e.primaryKey[0]] = .integer(rowid) }
            _ = try applier.insert(e, values: values)
        }
        try markSaved(item, tag: record.changeTag, base: .text(record.fields), extra: extra, deleted: false)
    }

    /// The local values of `record`'s fields in the columns `take` of row `pk`, and the fields the table lacks. A
    /// reference to a parent this store does not know is left out.
    private func serverValues(_ record: CloudRecord, of e: EntityMap, pk: String, take: Set<String>,
                              applier: RecordApplier, codec: FieldCodec) throws -> (values: [String: Value], extra: String?)
    {
        let decoded = try codec.decodeRecord(record.fields, columns: e.fieldColumns)
        var values: [String: Value] = [:]
        for (column, value) in decoded.values where take.contains(column) {
            switch value {
            case .value(let v): values[column] = v
            case .ref(let name):
                guard let name else { values[column] = .null; continue }
                guard let ref = e.reference(for: column) else { continue }
                if let key = try applier.parentKey(parent: ref.parent, recordName: name) {
                    values[column] = key
                } else if ref.parent == e.name, let own = RecordApplier.rowID(pk),
                          try applier.sameRecord(name, record.recordName)
                {
                    values[column] = .integer(own)  // a row that is its own parent, brought back
                }
            }
        }
        return (values, decoded.extra)
    }

    /// Records a successful save in the record map; a merged save also makes the local row match.
    private func record(_ item: Pending, tag: String, applier: RecordApplier, codec: FieldCodec)
        throws
    {
        if item.save.deleted {
            try markSaved(item, tag: tag, base: nil, extra: nil, deleted: true)
            if try applier.rowExists(item.entity, pk: item.pk) {
                // A merge decided on deletion while the row still exists locally.
                try applier.deleteRow(item.entity, pk: item.pk)
            }
        } else if let take = item.takeServer, !take.isEmpty {
            // The saved fields are a merge: the local row takes the server's side of it.
            let saved = CloudRecord(zone: options.zone, recordName: item.save.recordName, recordType: item.entity.name,
                                    fields: item.save.fields, changeTag: tag, seq: 0, deleted: false,
                                    modifiedBy: device, modifiedAt: 0)
            try applyServer(saved, to: item, take: take, applier: applier, codec: codec)
        } else {
            let extra = item.takeServer == nil ? item.extra
                : try codec.decodeRecord(item.save.fields, columns: item.entity.fieldColumns).extra
            let base = item.takeServer == nil ? item.sentBase ?? .text(item.save.fields) : .text(item.save.fields)
            try markSaved(item, tag: tag, base: base, extra: extra, deleted: false)
        }
    }

    /// Records the saved tag and base in the record map (`RecordMap.record`, one prepared statement: a hot path
    /// of a million rows).
    private func markSaved(_ item: Pending, tag: String, base: Value?, extra: String?, deleted: Bool) throws {
        try RecordMap(db).record(entity: item.entity.name, pk: item.pk, name: item.save.recordName, tag: tag,
                                 base: base, extra: extra, deleted: deleted)
        if setAside.contains(item.save.recordName) {
            try Inbox(db).remove(item.save.recordName, from: .setAside)
        }
    }
}
