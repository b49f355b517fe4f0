import Foundation
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
    /// An export that deletes more than this fraction of the zone's live records stops (mass-delete breaker).
    public var maxDeleteFraction = 0.5
    /// Lets an export through the mass-delete breaker.
    public var allowMassDelete = false
    /// Natural keys per table (`entities.<table>.unique`), deduplicated inside every import.
    public var uniqueRules: [String: UniqueRule] = [:]

    public init(zone: String = "default", mergePolicy: MergePolicy = .propertyLocalWins) {
        self.zone = zone
        self.mergePolicy = mergePolicy
    }
}

/// What an import did.
public struct ImportReport: Sendable, Codable, Equatable {
    /// Records applied to local rows (inserted or updated).
    public var applied = 0
    /// Local rows deleted because of tombstones.
    public var deleted = 0
    /// Records skipped: the device's own echoes and repeats.
    public var skipped = 0
    /// Records waiting for a parent that has not arrived yet.
    public var waitingForParent = 0
    /// Records of tables this store does not track.
    public var unknownType = 0
    /// The server change token after the import.
    public var token: String?
    /// Duplicates of `unique:` keys resolved inside the import.
    public var dedup = DedupReport()

    public init() {}
}

/// What one sync round did.
public struct SyncReport: Sendable, Codable, Equatable {
    public var exported: ExportReport
    public var imported: ImportReport

    public init(exported: ExportReport, imported: ImportReport) {
        self.exported = exported
        self.imported = imported
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
    public let options: MirrorOptions
    public let entities: [EntityMap]
    /// This store's id, the device name every save carries.
    public let device: String

    /// - Throws: `StoreError` when the store was not initialised, or a tracked table cannot be mirrored.
    public init(db: Connection, cloud: any CloudDatabase, options: MirrorOptions) throws {
        self.db = db
        self.cloud = cloud
        self.options = options
        self.device = try MirrorState.storeID(db)
        try MirrorState.install(db)
        self.entities = try Self.entityMaps(db)
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
        try db.query("SELECT value FROM json_each(coalesce((SELECT value FROM _storectl_meta WHERE key = 'tracked'), '[]'))")
            .compactMap { $0[0].string }
    }

    /// Whether the next export must be a baseline of every row: the store never exported to this container and
    /// zone, or history has a gap.
    public func needsBaseline() throws -> Bool {
        let mark = try MirrorState.meta(db, "baseline_container")
        let gap = try MirrorState.meta(db, "history_gap")
        return mark != cloud.container + "/" + options.zone || (gap != nil && gap != "")
    }

    /// Checks that the zone is the one this store synced with; creates it when the store never synced.
    /// - Throws: `ZoneResetError` when it was purged or deleted elsewhere.
    public func checkZone() throws -> ZoneInfo {
        let token = try MirrorState.serverToken(db, zone: options.zone).flatMap(ServerChangeToken.init(rawValue:))
        if let zone = try cloud.zoneInfo(options.zone, countLive: false) {
            if let token, token.epoch != zone.epoch { throw ZoneResetError(zone: options.zone) }
            return zone
        }
        if token != nil { throw ZoneResetError(zone: options.zone) }
        return try cloud.ensureZone(options.zone)
    }

    /// Pushes local changes (or a baseline of every row) to the cloud.
    /// - Throws: `MassDeleteError`, `ConflictError`, `CloudError`, `SQLiteError`.
    public func exportChanges(baseline: Bool? = nil, progress: (Int, Int?) -> Void = { _, _ in }) throws
        -> ExportReport
    {
        _ = try checkZone()
        let exporter = Exporter(db: db, cloud: cloud, options: options, entities: entities, device: device)
        return try exporter.run(baseline: try baseline ?? needsBaseline(), progress: progress)
    }

    /// Fetches the cloud's changes and applies them in ONE local transaction with author `cloud-import`; the
    /// server token advances in that same transaction.
    /// - Throws: `ZoneResetError`, `ConflictError`, `CloudError`, `SQLiteError`.
    public func importChanges(progress: (Int, Int?) -> Void = { _, _ in }) throws -> ImportReport {
        _ = try checkZone()
        var token = try MirrorState.serverToken(db, zone: options.zone).flatMap(ServerChangeToken.init(rawValue:))
        var report = ImportReport()
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        // The device's own records are skipped by the server, so the count of what arrives is not known ahead.
        let total: Int? = nil
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            // A child may arrive in the same import as its parent, in any order: check at commit.
            try db.execute("PRAGMA defer_foreign_keys = ON")
            let applier = try RecordApplier(db: db, entities: byName, policy: options.mergePolicy,
                                            dedupEntities: Set(options.uniqueRules.keys))
            var first = true
            var done = 0
            while true {
                let tFetch = Trace.start()
                let batch = try cloud.fetchChanges(zone: options.zone, since: token, limit: options.pageSize,
                                                   excludingDevice: device)
                Trace.add("import.fetch", tFetch)
                let tApply = Trace.start()
                defer { Trace.add("import.apply", tApply) }
                if first {
                    Failpoint.hit("import.before-apply")
                    first = false
                }
                for record in batch.records {
                    switch try applier.apply(record) {
                    case .applied: report.applied += 1
                    case .deleted: report.deleted += 1
                    case .skipped: report.skipped += 1
                    case .pending: break
                    case .unknownType: report.unknownType += 1
                    case .conflict: break
                    }
                }
                done += batch.records.count
                progress(done, total)
                token = batch.token
                if !batch.moreComing { break }
            }
            if !applier.conflicts.isEmpty { throw ConflictError(conflicts: applier.conflicts) }
            report.waitingForParent = try applier.retryPending()
            if !options.uniqueRules.isEmpty {
                // Dedup in the same transaction, so that no reader ever sees the duplicate. Its deletes and
                // re-points carry their own author, so that the next export sends them.
                report.dedup = try HistoryTracker(db: db).transaction(author: Deduplicator.author) { _ in
                    try Deduplicator(db: db, entities: entities, rules: options.uniqueRules).run(touchedOnly: true)
                }
            }
            try MirrorState.setServerToken(db, zone: options.zone, token?.rawValue)
            try MirrorState.setMeta(db, "last_import_at", String(Int64(Date().timeIntervalSince1970 * 1000)))
            Failpoint.hit("import.before-commit")
        }
        Failpoint.hit("import.after-commit")
        report.token = token?.rawValue
        return report
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

    /// One round: export, then import.
    /// - Throws: see `exportChanges` and `importChanges`.
    public func sync(progress: (String, Int, Int?) -> Void = { _, _, _ in }) throws -> SyncReport {
        var exported = try exportChanges { progress("export", $0, $1) }
        let imported = try importChanges { progress("import", $0, $1) }
        if imported.dedup.deleted > 0 || imported.dedup.repointed > 0 {
            // Dedup's deletes and re-points are local changes: export them in this same round, so that the other
            // devices see them after one round, not two (a device never dedups its own rows on import).
            let more = try exportChanges { progress("export", $0, $1) }
            exported.saved += more.saved
            exported.deleted += more.deleted
            exported.conflictsResolved += more.conflictsResolved
            exported.token = more.token
        }
        try MirrorState.setMeta(db, "last_sync_at", String(Int64(Date().timeIntervalSince1970 * 1000)))
        return SyncReport(exported: exported, imported: imported)
    }
}
