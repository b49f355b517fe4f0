import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// Settings of the sync engine, from the store's `cloud:` config.
public struct MirrorOptions: Sendable {
    public var zone: String
    public var mergePolicy: MergePolicy
    /// Records per cloud save.
    public var batchSize = 1000
    /// Records per fetched page.
    public var pageSize = 1000
    /// An export that deletes more than this fraction of the zone's live records stops (mass-delete breaker)...
    public var maxDeleteFraction = 0.5
    /// ... when it also deletes more than this many records: deleting a handful of rows never trips it.
    public var maxDeleteCount = 100
    /// The largest record, in bytes of its fields' JSON, that an export sends or an import applies.
    public var maxRecordSize = 1_048_576
    /// Lets an export through the mass-delete breaker.
    public var allowMassDelete = false
    /// Natural keys per table (`entities.<table>.unique`), deduplicated inside every import.
    public var uniqueRules: [String: UniqueRule] = [:]
    /// Applies the plain records of each fetched page with a few statements per table (`PageApplier`); false
    /// applies every record on its own, the reference the set-based path is tested against.
    public var applyPagesInBulk = true
    /// The store's account has a read-only share of the zone: nothing is sent, and the cloud's value wins where
    /// an incoming record meets a local change. Set by the round from what the container says (`Mirror.checkZone`).
    public var readOnly = false

    public init(zone: String = "default", mergePolicy: MergePolicy = .propertyLocalWins) {
        self.zone = zone
        self.mergePolicy = mergePolicy
    }
}

/// What one sync round did.
public struct SyncReport: Sendable, Codable, Equatable {
    public var exported: ExportReport
    public var imported: ImportReport
    /// What the cloud backend worked around during the round (a read replica down, or not a replica); absent
    /// when nothing was. The round succeeded all the same.
    public var warnings: [String]?
    /// How the read replica (`cloud.replica_url`) served the round's fetches; absent without one.
    public var replica: ReplicaUse?
    /// A read-only participant's round: the rows changed here that it did not send (`not_sent`); absent for an
    /// owner or a read-write participant.
    public var notSent: Int?
    /// `sync --discard-local`: the rows put back to the cloud's values.
    public var discarded: DiscardReport?
    /// Records of the zone sealed again with its current key after a field was added to `encrypted:` or the key
    /// was rotated (`resealed`); absent when there were none.
    public var resealed: Int?

    enum CodingKeys: String, CodingKey {
        case exported, imported, warnings, replica, discarded, resealed
        case notSent = "not_sent"
    }

    public init(exported: ExportReport, imported: ImportReport) {
        self.exported = exported
        self.imported = imported
    }

    /// Takes the cloud's warnings and replica use into the report.
    mutating func note(_ cloud: any CloudDatabase) {
        let warnings = cloud.takeWarnings()
        if !warnings.isEmpty { self.warnings = (self.warnings ?? []) + warnings }
        if let use = cloud.takeReplicaUse() { replica = use }
    }
}

/// Rolls back a dry run's transaction (record names assigned for the tie-break) while keeping its report.
struct DryRunRollback: Error {
    var report: DedupReport
}

/// Raised when the zone was purged or recreated by another device since this store last synced.
public struct ZoneResetError: DiagnosedError {
    public var zone: String
    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        "zone '\(zone)' was purged or recreated in the cloud since this store last synced; no local row was deleted"
    }
    public var hint: String? {
        "run 'storectl sync --reupload' to upload this store's rows into the new zone"
    }
}

/// The zone is behind what this store saw of it (same epoch, a lower last seq): the container was put back to an
/// older copy (a file restored from a backup, a PostgreSQL server failed over to a replica that lagged), so
/// records saved after that copy are missing from it. Syncing on would leave them missing for every other device.
public struct ZoneBehindError: DiagnosedError {
    public var zone: String
    public var container: String
    /// The zone's last seq now.
    public var zoneSeq: Int64
    /// The highest seq this store imported or saved in the zone.
    public var seen: Int64
    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        "zone '\(zone)' of container '\(container)' is at seq \(zoneSeq), behind seq \(seen) that this store already "
            + "saw in it: the container was restored from an older copy, and the records saved after that copy are "
            + "missing from it; nothing was changed here"
    }
    public var hint: String? {
        "if the older copy is what the container should hold, run 'storectl sync --reupload' here and on the zone's "
            + "other stores: their rows are kept and uploaded again (rows deleted after that copy come back from it); "
            + "else put the newer container back"
    }
}

/// The sync engine: mirrors one store's tracked tables into one cloud zone, both ways.
///
/// Export reads history after the export token (skipping changes that came from the cloud), coalesces them per
/// row, and saves the rows in conditional batches; import fetches after the server token and applies everything
/// in one local transaction with author `cloud-import`.
///
///     let mirror = try Mirror(db: db, cloud: cloud, options: MirrorOptions(zone: "default"))
///     let report = try mirror.sync()
public final class Mirror {
    public let db: Connection
    public let cloud: any CloudDatabase
    /// The options, as the zone's share makes them (`readOnly`, and the cloud's value winning, for a read-only
    /// participant).
    public private(set) var options: MirrorOptions
    /// What the store's account may do in the zone, as the container said at the start of this round.
    public private(set) var access: ZoneAccess.Level = .owner
    public let entities: [EntityMap]
    /// This store's id, the device name every save carries.
    public let device: String

    /// - Throws: `StoreError` when the store was not initialised, or a tracked table cannot be mirrored.
    /// - Parameter entities: the tracked tables' maps, when the caller read them (`entityMaps`) since the schema
    ///   last changed; else they are read here.
    public init(db: Connection, cloud: any CloudDatabase, options: MirrorOptions, entities: [EntityMap]? = nil) throws {
        self.db = db
        self.cloud = cloud
        self.options = options
        self.device = try MirrorState.storeID(db)
        try MirrorState.install(db)
        self.entities = try entities ?? Self.entityMaps(db)
    }

    /// How each tracked table maps onto records.
    /// - Throws: `StoreError` (exit 65) when a tracked table has no primary key; `SQLiteError`.
    public static func entityMaps(_ db: Connection) throws -> [EntityMap] {
        let tracked = try trackedTables(db)
        let set = Set(tracked)
        return try tracked.map { try EntityMap.load(db, table: $0, tracked: set) }
    }

    /// The tracked tables, as the store's meta lists them.
    public static func trackedTables(_ db: Connection) throws -> [String] {
        try db.query("SELECT value FROM json_each(coalesce((SELECT value FROM _storectl_meta WHERE key = ?), '[]'))",
                     [MetaKey.tracked.rawValue])
            .compactMap { $0[0].string }
    }

    /// Whether the next export must be a baseline of every row: the store never exported to this container and
    /// zone, or history has a gap.
    public func needsBaseline() throws -> Bool {
        let mark = try MirrorState.meta(db, .baselineContainer)
        let gap = try MirrorState.meta(db, .historyGap)
        return mark != cloud.container + "/" + options.zone || (gap != nil && gap != "")
    }

    /// Checks that the zone is the one this store synced with; creates it when the store never synced.
    /// - Throws: `ZoneResetError` when it was purged or deleted elsewhere.
    public func checkZone() throws -> ZoneInfo {
        let token = try MirrorState.serverToken(db, zone: options.zone).flatMap(ServerChangeToken.init(rawValue:))
        if let zone = try cloud.roundZoneInfo(options.zone, device: device) {
            try noteAccess(zone)
            if let token, token.epoch != zone.epoch { throw ZoneResetError(zone: options.zone) }
            // Seqs only grow: a zone below what this store imported or saved went back to an older copy.
            let seen = max(token?.seq ?? 0,
                           token == nil ? 0 : try MirrorState.ownSeq(db, container: cloud.container, zone: options.zone))
            if seen > zone.lastSeq {
                throw ZoneBehindError(zone: options.zone, container: cloud.container, zoneSeq: zone.lastSeq, seen: seen)
            }
            return zone
        }
        if token != nil { throw ZoneResetError(zone: options.zone) }
        let zone = try cloud.ensureZone(options.zone)
        try noteAccess(zone)
        return zone
    }

    /// Takes what the container says the account may do in the zone: a read-only share sends nothing and lets the
    /// cloud's value win. The store's meta keeps it (written when it changes) for `status` and `doctor`.
    private func noteAccess(_ zone: ZoneInfo) throws {
        let level = zone.access ?? .owner
        access = level
        options.readOnly = level == .readOnly
        if level == .readOnly { options.mergePolicy = .serverWins }
        let text = zone.owner.map { "\(level.rawValue) \($0)" } ?? level.rawValue
        if try MirrorState.meta(db, .zoneAccess) != text {
            try db.transaction { try MirrorState.setMeta(db, .zoneAccess, text) }
        }
    }

    /// Whether an export of this mirror found nothing to send and wrote nothing (not even `last_export_at`).
    private var exportFoundNothing = false

    /// What `prepare` found and did before the last export or import.
    public private(set) var lastPreparation = Preparation()

    /// What the schema version check of this mirror's first preparation found (`SchemaGate`).
    public private(set) var schemaGate: SchemaGate.Outcome?

    /// What the steps before a sync did.
    public struct Preparation: Sendable, Codable, Equatable {
        public var reconcile: ReconcileReport?
        /// Values filled into columns added here from what other devices sent for them before.
        public var backfilled = 0
        /// Rows found changed without history (written while the triggers were stale).
        public var rescanned = 0
        /// Records of tables tracked since they were skipped, fetched again.
        public var caughtUp = 0
    }

    /// Makes the store agree with the cloud before anything is exported or imported: reconciles the record map
    /// with this store's own records in the cloud (`Reconciler`: a crash, a restored copy), fills columns added
    /// since other devices sent values for them, finds rows changed without history, and fetches the records of
    /// tables tracked since their records were skipped.
    /// - Throws: `CloudError`, `SQLiteError`.
    public func prepare() throws {
        let tPrepare = Trace.start()
        defer { Trace.add("sync.prepare", tPrepare) }
        let zoneInfo = try checkZone()
        if schemaGate == nil {
            schemaGate = try SchemaGate.check(db, cloud: cloud, zone: options.zone, device: device, entities: entities,
                                              known: zoneInfo.schemaVersion)
        }
        var done = Preparation()
        done.reconcile = try Reconciler(db: db, cloud: cloud, options: options, entities: entities, device: device)
            .run(known: zoneInfo.exportState)
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        _ = try SchemaEvolution.keepDroppedFields(db, entities: entities, cloud: cloud, zone: options.zone)
        // Almost every round has nothing to fill or rescan: then it takes no write lock for them.
        if try SchemaEvolution.hasWork(db, entities: entities, readOnly: options.readOnly) {
            try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
                try UserTriggers.suspended(db, tracked: entities.map(\.name)) {
                    let applier = try RecordApplier(db: db, entities: byName, policy: options.mergePolicy)
                    done.backfilled = try SchemaEvolution.backfill(db, entities: entities, applier: applier)
                }
                done.rescanned = try SchemaEvolution.rescan(db, entities: entities, readOnly: options.readOnly)
            }
        }
        let skipped = try StoreMeta.entries(db, .unknownType).map(\.name).filter { byName[$0] != nil }
        if !skipped.isEmpty {
            var importer = Importer(db: db, cloud: cloud, options: options, entities: entities, device: device)
            importer.onlyTypes = Set(skipped)
            let report = try importer.run(progress: { _, _ in })
            done.caughtUp = report.applied + report.deleted
            try db.transaction {
                for type in skipped { try MirrorState.setMeta(db, .unknownType(type), nil) }
            }
        }
        if options.readOnly {
            try Exporter(db: db, cloud: cloud, options: options, entities: entities, device: device).keepReusedKeysApart()
        }
        lastPreparation = done
    }

    /// Pushes local changes (or a baseline of every row) to the cloud.
    /// - Throws: `MassDeleteError`, `ConflictError`, `CloudError`, `SQLiteError`; `RowsNotSentError` after
    ///   everything else was sent.
    /// `importFollows`: the sync imports right after (`Exporter.importFollows`).
    public func exportChanges(baseline: Bool? = nil, importFollows: Bool = false,
                              progress: (Int, Int?) -> Void = { _, _ in }) throws -> ExportReport
    {
        try prepare()
        // A read-only participant sends nothing: its local changes stay in history, reported as not sent.
        if options.readOnly {
            if try needsBaseline() { try holdBaselineBack() }
            return ExportReport()
        }
        let baseline = try baseline ?? needsBaseline()
        // Most rounds of a watcher are woken by another device's save and have nothing to send: they read, and
        // write nothing (the import moves the export token past its own history, `passImportedHistory`).
        if !baseline, try Exporter.hasNothingToSend(db, entities: entities) {
            var report = ExportReport()
            report.token = try MirrorState.lastHistorySeq(db)
            // `last_export_at` says when the export last succeeded: `sync` writes it with `last_sync_at`.
            exportFoundNothing = true
            // The export's end, as for one that sent something (crash tests pause and kill there).
            Failpoint.hit("export.before-commit")
            Failpoint.hit("export.after-commit")
            return report
        }
        var exporter = Exporter(db: db, cloud: cloud, options: options, entities: entities, device: device)
        exporter.importFollows = importFollows
        let report = try exporter.run(baseline: baseline, progress: progress)
        if !report.unsent.isEmpty {
            throw RowsNotSentError(rows: report.unsent, limit: options.maxRecordSize)
        }
        return report
    }

    /// The baseline a read-only participant cannot send: every row the record map holds no saved record of and
    /// history does not hold after the export token (rows the store had before it was initialised, or that a purge
    /// of the zone took from the cloud before `sync --reupload`) is written into history
    /// as a local insert, so that it is listed, kept and explained like any other change not sent; the baseline
    /// counts as done for this container and zone.
    /// - Throws: `SQLiteError`.
    private func holdBaselineBack() throws {
        let token = try MirrorState.exportToken(db)
        try db.transaction {
            try db.execute("CREATE TEMP TABLE IF NOT EXISTS _storectl_held(entity TEXT NOT NULL, pk TEXT NOT NULL, "
                           + "PRIMARY KEY (entity, pk)) WITHOUT ROWID; DELETE FROM temp._storectl_held")
            // Rows whose last change after the token is a local one are listed already.
            try db.run("""
                INSERT OR IGNORE INTO temp._storectl_held(entity, pk)
                SELECT entity, pk FROM _storectl_history WHERE seq > ?1 GROUP BY entity, pk
                HAVING max(CASE WHEN author NOT IN (?2, ?3) THEN seq END)
                       > coalesce(max(CASE WHEN author IN (?2, ?3) THEN seq END), 0)
                """, [token, MirrorState.importAuthor, MirrorState.cascadeAuthor])
            for e in entities {
                try db.run("""
                    INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, changed)
                    SELECT NULL, ?1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), ?2, k.pk, 'I', NULL
                    FROM (SELECT \(e.pkJSON("t")) AS pk FROM main.\(e.quotedName) t) k
                    WHERE NOT EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = ?2 AND r.pk = k.pk
                                        AND r.change_tag IS NOT NULL)
                      AND NOT EXISTS (SELECT 1 FROM temp._storectl_held h WHERE h.entity = ?2 AND h.pk = k.pk)
                    """, [MirrorState.rescanAuthor, e.name])
            }
            try MirrorState.setMeta(db, .baselineContainer, cloud.container + "/" + options.zone)
            try MirrorState.setMeta(db, .historyGap, nil)
        }
    }

    /// Fetches the cloud's changes and applies them in ONE local transaction with author `cloud-import`; the
    /// server token advances in that same transaction (`Importer`).
    /// - Throws: `ZoneResetError`, `ConflictError`, `CloudError`, `SQLiteError`.
    /// - Parameter prepared: the caller's export ran `prepare()` moments ago, in this round (`sync`): it is not run
    ///   again.
    public func importChanges(prepared: Bool = false, progress: (Int, Int?) -> Void = { _, _ in }) throws
        -> ImportReport
    {
        if !prepared { try prepare() }
        return try Importer(db: db, cloud: cloud, options: options, entities: entities, device: device)
            .run(progress: progress)
    }

    /// Fills columns added to tracked tables from the fields other devices sent for them before (see
    /// `SchemaEvolution.backfill`), in one transaction with author `cloud-import`. Returns how many values it filled.
    /// - Throws: `SQLiteError`.
    public static func fillAddedColumns(_ db: Connection) throws -> Int {
        try MirrorState.install(db)
        let entities = try entityMaps(db)
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        return try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            try UserTriggers.suspended(db, tracked: entities.map(\.name)) {
                let applier = try RecordApplier(db: db, entities: byName, policy: .propertyLocalWins)
                return try SchemaEvolution.backfill(db, entities: entities, applier: applier)
            }
        }
    }

    /// Finds and resolves duplicates that already exist (`storectl dedupe`), in one transaction.
    /// - Throws: `SQLiteError`.
    public func dedupe(entity: String? = nil, dryRun: Bool = false) throws -> DedupReport {
        try Self.dedupe(db: db, entities: entities, rules: options.uniqueRules, entity: entity, dryRun: dryRun)
    }

    /// Dedup without a cloud connection (a store in local mode can dedupe too).
    public static func dedupe(db: Connection, entities: [EntityMap], rules: [String: UniqueRule], entity: String?,
                              dryRun: Bool) throws -> DedupReport
    {
        try MirrorState.install(db)
        do {
            return try dedupeTransaction(db: db, entities: entities, rules: rules, entity: entity, dryRun: dryRun)
        } catch let rollback as DryRunRollback {
            return rollback.report
        }
    }

    private static func dedupeTransaction(db: Connection, entities: [EntityMap], rules: [String: UniqueRule],
                                          entity: String?, dryRun: Bool) throws -> DedupReport
    {
        try HistoryTracker(db: db).transaction(author: Deduplicator.author) { _ in
            let report = try Deduplicator(db: db, entities: entities, rules: rules)
                .run(touchedOnly: false, entity: entity, dryRun: dryRun)
            if dryRun { throw DryRunRollback(report: report) }
            Failpoint.hit("dedupe.before-commit")
            return report
        }
    }

    /// `sync --discard-local`: the cloud's changes in, then every row changed here and not sent put back to the
    /// cloud's values (`discardLocalChanges`). Nothing is exported.
    /// - Throws: see `importChanges` and `discardLocalChanges`.
    public func syncDiscardingLocal(progress: (String, Int, Int?) -> Void = { _, _, _ in }) throws -> SyncReport {
        let imported = try importChanges { progress("import", $0, $1) }
        var report = SyncReport(exported: ExportReport(), imported: imported)
        report.discarded = try discardLocalChanges()
        try MirrorState.setMeta(db, .lastSyncAt, String(Int64(Date().timeIntervalSince1970 * 1000)))
        report.note(cloud)
        return report
    }

    /// One round: export, then import.
    /// - Throws: see `exportChanges` and `importChanges`.
    public func sync(progress: (String, Int, Int?) -> Void = { _, _, _ in }) throws -> SyncReport {
        var exported = ExportReport()
        var importFirst = false
        var notSent: RowsNotSentError?
        do {
            exported = try exportChanges(importFollows: true) { progress("export", $0, $1) }
        } catch is ImportFirstError {
            // A row the cloud moved to a UNIQUE value another row holds here: the import settles them together,
            // then the export below sends what is left.
            importFirst = true
        } catch let error as RowsNotSentError {
            // Everything else was sent: the rows that could not be are reported once the cloud's changes are in
            // too (a row too large here must not stop the other devices' changes from arriving).
            notSent = error
        }
        // The export prepared the store (every error of `prepare` is thrown above): the round prepares once.
        let imported = try importChanges(prepared: true) { progress("import", $0, $1) }
        if !options.readOnly,
           try importFirst || MirrorState.pendingExportCount(db) > 0 || MirrorState.unsettledCounts(db).outbox > 0 {
            // What the import changed locally (dedup's deletes and re-points, the children of deleted parents,
            // losers of a UNIQUE constraint) is exported in this same round, so that the other devices see it
            // after one round, not two.
            let more = try exportChanges { progress("export", $0, $1) }
            exported.saved += more.saved
            exported.deleted += more.deleted
            exported.conflictsResolved += more.conflictsResolved
            exported.token = more.token
        }
        let now = String(Int64(Date().timeIntervalSince1970 * 1000))
        try db.transaction {
            try MirrorState.setMeta(db, .lastSyncAt, now)
            if exportFoundNothing { try MirrorState.setMeta(db, .lastExportAt, now) }
        }
        exportFoundNothing = false
        var report = SyncReport(exported: exported, imported: imported)
        report.note(cloud)
        if options.readOnly { report.notSent = try MirrorState.localChangesNotSent(db).count }
        if var notSent {
            report.exported.unsent = notSent.rows
            notSent.report = report
            throw notSent
        }
        return report
    }
}
